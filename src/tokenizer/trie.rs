//! The vocabulary as a byte trie: every token that stands for bytes (not an added or unused
//! one), so that a walk over the trie visits each token prefix once and can drop a whole
//! subtree at the first byte a constraint refuses (see `runtime::structured`).

use super::TokenBytes;

/// One node: the byte on the edge into it, its children (contiguous in `nodes`) and the tokens
/// whose bytes end here (contiguous in `ids`; several when two tokens have the same bytes).
#[derive(Clone, Copy, Debug)]
pub struct TrieNode {
    pub byte: u8,
    pub children: (u32, u32),
    pub tokens: (u32, u32),
}

pub struct VocabTrie {
    nodes: Vec<TrieNode>,
    ids: Vec<u32>,
    /// The most bytes of a token.
    max_len: usize,
}

/// The root's index.
pub const ROOT: u32 = 0;

impl VocabTrie {
    pub(super) fn new(bytes: &TokenBytes, ids: impl Iterator<Item = u32>) -> VocabTrie {
        let mut sorted: Vec<(&[u8], u32)> =
            ids.filter_map(|id| bytes.get(id).filter(|b| !b.is_empty()).map(|b| (b, id))).collect();
        sorted.sort_unstable();
        let max_len = sorted.iter().map(|(b, _)| b.len()).max().unwrap_or(0);
        let root = TrieNode { byte: 0, children: (0, 0), tokens: (0, 0) };
        let mut trie = VocabTrie { nodes: vec![root], ids: Vec::new(), max_len };
        trie.fill(ROOT, &sorted, 0);
        trie
    }

    /// Fills node `at`, whose tokens (sorted) are `group`, all `depth` bytes into the node.
    fn fill(&mut self, at: u32, group: &[(&[u8], u32)], depth: usize) {
        let here = group.iter().take_while(|(b, _)| b.len() == depth).count();
        let first_id = self.ids.len() as u32;
        self.ids.extend(group[..here].iter().map(|&(_, id)| id));
        let rest = &group[here..];
        // The children's groups, by their byte at `depth`.
        let mut groups = Vec::new();
        let mut start = 0;
        while start < rest.len() {
            let byte = rest[start].0[depth];
            let len = rest[start..].iter().take_while(|(b, _)| b[depth] == byte).count();
            groups.push((byte, start..start + len));
            start += len;
        }
        let first_child = self.nodes.len() as u32;
        for &(byte, _) in &groups {
            self.nodes.push(TrieNode { byte, children: (0, 0), tokens: (0, 0) });
        }
        self.nodes[at as usize] = TrieNode {
            byte: self.nodes[at as usize].byte,
            children: (first_child, first_child + groups.len() as u32),
            tokens: (first_id, self.ids.len() as u32),
        };
        for (i, (_, range)) in groups.into_iter().enumerate() {
            self.fill(first_child + i as u32, &rest[range], depth + 1);
        }
    }

    pub fn node(&self, at: u32) -> TrieNode {
        self.nodes[at as usize]
    }

    /// The tokens whose bytes end at a node.
    pub fn tokens(&self, node: TrieNode) -> &[u32] {
        &self.ids[node.tokens.0 as usize..node.tokens.1 as usize]
    }

    /// The child of `at` along `byte`.
    pub fn child(&self, at: u32, byte: u8) -> Option<u32> {
        let (from, to) = self.node(at).children;
        let kids = &self.nodes[from as usize..to as usize];
        kids.binary_search_by_key(&byte, |n| n.byte).ok().map(|i| from + i as u32)
    }

    pub fn max_len(&self) -> usize {
        self.max_len
    }

    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.nodes.len() <= 1
    }
}
