//! Which tokens keep a document valid, fast enough to run at every step.
//!
//! The vocabulary trie is walked together with the grammar, a subtree dropped at the first
//! byte the grammar refuses. Two caches keep that walk off the per-token path:
//! - per top frame (with its depth): the tokens it takes whole without ending (`accepted`),
//!   the most bytes those leave to close it, and the trie nodes where it ends (`exits`): what
//!   a token does there depends on the frames below. Inside a free string, a number or a key,
//!   the frame is the same from step to step, so the whole vocabulary is walked once;
//! - per whole stack: the allowed set (accepted, plus the exits walked on with the frames
//!   below) and the most bytes any allowed token leaves to close the document.
//!
//! A step then costs a hash lookup and applying a bit set to the logits. Where the remaining
//! budget cannot cover the worst allowed token, only the tokens along the shortest closing
//! bytes are allowed (every byte is a token of a byte-level vocabulary, so those bytes always
//! fit the budget that is left).

use super::grammar::{Fed, Frame, Stack};
use super::schema::Schema;
use crate::tokenizer::trie::{VocabTrie, ROOT};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// A set of token ids.
#[derive(Clone, Debug, PartialEq)]
pub struct TokenSet {
    words: Vec<u64>,
}

impl TokenSet {
    fn new(n: usize) -> TokenSet {
        TokenSet { words: vec![0; n.div_ceil(64)] }
    }

    fn insert(&mut self, id: u32) {
        if let Some(w) = self.words.get_mut(id as usize / 64) {
            *w |= 1 << (id % 64);
        }
    }

    pub fn contains(&self, id: u32) -> bool {
        self.words.get(id as usize / 64).is_some_and(|w| w & (1 << (id % 64)) != 0)
    }

    pub fn is_empty(&self) -> bool {
        self.words.iter().all(|&w| w == 0)
    }

    /// Sets the logits of the tokens not in the set to -inf (those past it too).
    pub fn apply(&self, logits: &mut [f32]) {
        let mut chunks = logits.chunks_mut(64);
        for (&w, chunk) in self.words.iter().zip(&mut chunks) {
            match w {
                u64::MAX => {}
                0 => chunk.fill(f32::NEG_INFINITY),
                _ => {
                    // Only the refused ones: a string refuses a few tokens of most words.
                    let mut refused = !w;
                    while refused != 0 {
                        if let Some(l) = chunk.get_mut(refused.trailing_zeros() as usize) {
                            *l = f32::NEG_INFINITY;
                        }
                        refused &= refused - 1;
                    }
                }
            }
        }
        chunks.for_each(|c| c.fill(f32::NEG_INFINITY));
    }
}

/// What a top frame does with the vocabulary.
struct FrameMask {
    accepted: TokenSet,
    /// The most closing bytes the frame and those above it need after an accepted token.
    max_cost: u32,
    /// Trie nodes where the frame ends: with `true` it took the node's byte, else the frame
    /// below takes it.
    exits: Vec<(u32, bool)>,
}

/// What a whole stack allows.
pub struct StackMask {
    pub allowed: TokenSet,
    /// The most closing bytes the document needs after an allowed token.
    pub max_close: u32,
}

#[derive(Default)]
struct Caches {
    frames: HashMap<(Frame, u8), Arc<FrameMask>>,
    stacks: HashMap<Stack, Arc<StackMask>>,
}

/// Entries kept before a cache starts over (each some 20 KB on Qwen's vocabulary: at most
/// about 30 MB a schema).
const MAX_FRAMES: usize = 1024;
const MAX_STACKS: usize = 512;

/// The masks of one schema over one vocabulary.
pub struct Masks {
    caches: Mutex<Caches>,
}

impl Masks {
    pub fn new() -> Masks {
        Masks { caches: Mutex::new(Caches::default()) }
    }

    /// The allowed tokens of a stack that can take more bytes.
    pub fn of(&self, g: &Schema, trie: &VocabTrie, n_tokens: usize, stack: &Stack) -> Arc<StackMask> {
        let key = normalized(stack, trie);
        // A panic while the lock was held leaves only whole entries behind.
        let mut caches = self.caches.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(m) = caches.stacks.get(&key) {
            return Arc::clone(m);
        }
        let Some(&top) = key.frames.last() else {
            return Arc::new(StackMask { allowed: TokenSet::new(n_tokens), max_close: 0 });
        };
        let depth = key.frames.len() as u8;
        let frame = match caches.frames.get(&(top, depth)) {
            Some(f) => Arc::clone(f),
            None => {
                let f = Arc::new(frame_mask(g, trie, n_tokens, top, depth));
                if caches.frames.len() >= MAX_FRAMES {
                    caches.frames.clear();
                }
                caches.frames.insert((top, depth), Arc::clone(&f));
                f
            }
        };
        let mask = Arc::new(stack_mask(g, trie, &frame, stack));
        if caches.stacks.len() >= MAX_STACKS {
            caches.stacks.clear();
        }
        caches.stacks.insert(key, Arc::clone(&mask));
        mask
    }
}

impl Default for Masks {
    fn default() -> Self {
        Masks::new()
    }
}

/// The stack as its masks see it: a string's characters matter only as the room left, and only
/// up to what the longest token can write.
fn normalized(stack: &Stack, trie: &VocabTrie) -> Stack {
    let mut key = stack.clone();
    if let Some(Frame::Str { max, chars, .. }) = key.frames.last_mut() {
        if *max != u32::MAX {
            *max = (*max - *chars).min(trie.max_len() as u32);
            *chars = 0;
        }
    }
    key
}

/// Walks the subtree under trie node `at`, the bytes so far having made `state`: `token` for
/// each token whose bytes keep it live, `exit` where its bottom frame ends.
fn walk(
    g: &Schema,
    trie: &VocabTrie,
    at: u32,
    state: &Stack,
    token: &mut dyn FnMut(&[u32], &Stack),
    exit: &mut dyn FnMut(u32, bool),
) {
    let (from, to) = trie.node(at).children;
    let mut next = state.clone();
    for child in from..to {
        let node = trie.node(child);
        next.clone_from(state);
        match next.feed(g, node.byte) {
            Fed::Dead => {}
            Fed::Exited { taken } => exit(child, taken),
            Fed::Live => {
                token(trie.tokens(node), &next);
                walk(g, trie, child, &next, token, exit);
            }
        }
    }
}

fn frame_mask(g: &Schema, trie: &VocabTrie, n_tokens: usize, top: Frame, depth: u8) -> FrameMask {
    let alone = Stack { frames: vec![top], base: depth - 1, detached: true };
    let mut accepted = TokenSet::new(n_tokens);
    let mut max_cost = 0;
    let mut exits = Vec::new();
    walk(
        g,
        trie,
        ROOT,
        &alone,
        &mut |ids, s| {
            if !ids.is_empty() {
                ids.iter().for_each(|&id| accepted.insert(id));
                max_cost = max_cost.max(s.close_len(g));
            }
        },
        &mut |node, taken| exits.push((node, taken)),
    );
    FrameMask { accepted, max_cost, exits }
}

fn stack_mask(g: &Schema, trie: &VocabTrie, frame: &FrameMask, stack: &Stack) -> StackMask {
    let below = Stack { frames: stack.frames[..stack.frames.len() - 1].to_vec(), ..stack.clone() };
    let mut allowed = frame.accepted.clone();
    let mut max_close = if allowed.is_empty() { 0 } else { below.close_len(g) + frame.max_cost };
    let mut add = |ids: &[u32], s: &Stack| {
        if !ids.is_empty() {
            ids.iter().for_each(|&id| allowed.insert(id));
            max_close = max_close.max(s.close_len(g));
        }
    };
    for &(node, taken) in &frame.exits {
        let mut s = below.clone();
        if !taken && s.feed(g, trie.node(node).byte) != Fed::Live {
            continue;
        }
        add(trie.tokens(trie.node(node)), &s);
        walk(g, trie, node, &s, &mut add, &mut |_, _| {});
    }
    StackMask { allowed, max_close }
}

/// The bytes a document is closed with once the budget decides, and the fewest tokens that
/// write each of their tails.
pub struct ClosingPath {
    bytes: Vec<u8>,
    at: usize,
    /// `fewest[i]`: the fewest tokens that write `bytes[i..]`.
    fewest: Vec<u32>,
}

impl ClosingPath {
    pub fn new(trie: &VocabTrie, bytes: Vec<u8>) -> ClosingPath {
        let n = bytes.len();
        // Every byte is a token of a byte-level vocabulary; a tail no token starts stays out
        // of reach (u32::MAX).
        let mut fewest = vec![u32::MAX; n + 1];
        fewest[n] = 0;
        for i in (0..n).rev() {
            let mut at = ROOT;
            for (len, &b) in bytes[i..].iter().enumerate() {
                let Some(child) = trie.child(at, b) else { break };
                if !trie.tokens(trie.node(child)).is_empty() {
                    fewest[i] = fewest[i].min(fewest[i + len + 1].saturating_add(1));
                }
                at = child;
            }
        }
        ClosingPath { bytes, at: 0, fewest }
    }

    /// The fewest tokens that finish the path.
    pub fn tokens_left(&self) -> u32 {
        self.fewest[self.at]
    }

    pub fn is_done(&self) -> bool {
        self.at == self.bytes.len()
    }

    /// The tokens that go on along the path and leave what `left - 1` tokens can finish.
    pub fn allowed(&self, trie: &VocabTrie, n_tokens: usize, left: usize) -> TokenSet {
        let mut set = TokenSet::new(n_tokens);
        let mut at = ROOT;
        for (len, &b) in self.bytes[self.at..].iter().enumerate() {
            let Some(child) = trie.child(at, b) else { break };
            if (self.fewest[self.at + len + 1] as usize) < left {
                trie.tokens(trie.node(child)).iter().for_each(|&id| set.insert(id));
            }
            at = child;
        }
        set
    }

    /// Takes a token's bytes; false when they are not the path's next ones.
    pub fn take(&mut self, bytes: &[u8]) -> bool {
        let fits = self.bytes[self.at..].starts_with(bytes);
        if fits {
            self.at += bytes.len();
        }
        fits
    }
}
