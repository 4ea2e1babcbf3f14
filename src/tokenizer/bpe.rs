//! Byte-level BPE: a piece's bytes start as one token each, then the adjacent pair whose merge
//! rule comes first in the merges list is merged, again and again, until no pair has a rule.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::sync::Mutex;

use super::byte_level::ByteAlphabet;
use super::TokenizerError;

/// Pieces up to this long are cached; longer ones are rare and would crowd the cache.
const CACHE_MAX_PIECE: usize = 64;
/// The cache is emptied when it reaches this many pieces, which bounds its memory.
const CACHE_MAX_ENTRIES: usize = 1 << 16;

#[derive(Clone, Copy)]
struct Merge {
    rank: u32,
    id: u32,
}

pub(super) struct Bpe {
    /// (left id, right id) -> the rule merging them.
    merges: HashMap<(u32, u32), Merge>,
    /// The token of each single byte.
    byte_ids: [u32; 256],
    /// Results for repeated pieces (words recur a lot in text).
    cache: Mutex<HashMap<Box<str>, Box<[u32]>>>,
}

impl Bpe {
    pub(super) fn new(
        vocab: &HashMap<String, u32>,
        merges: &[impl AsRef<str>],
        alphabet: &ByteAlphabet,
    ) -> Result<Self, TokenizerError> {
        let id_of = |rank: usize, token: &str| {
            vocab.get(token).copied().ok_or_else(|| TokenizerError::MergeTokenUnknown { rank, token: token.to_owned() })
        };
        let mut rules = HashMap::with_capacity(merges.len());
        for (rank, merge) in merges.iter().enumerate() {
            let merge = merge.as_ref();
            let malformed = || TokenizerError::MalformedMerge { rank, merge: merge.to_owned() };
            // Byte-level tokens never contain a space (it is written 'Ġ'), so one space separates.
            let (left, right) = merge.split_once(' ').ok_or_else(malformed)?;
            if left.is_empty() || right.is_empty() || right.contains(' ') {
                return Err(malformed());
            }
            let rule = Merge {
                rank: u32::try_from(rank).map_err(|_| TokenizerError::TooManyTokens(rank))?,
                id: id_of(rank, &[left, right].concat())?,
            };
            // A repeated rule keeps its first (best) rank.
            rules.entry((id_of(rank, left)?, id_of(rank, right)?)).or_insert(rule);
        }
        let mut byte_ids = [0; 256];
        for (b, slot) in (0..=255u8).zip(byte_ids.iter_mut()) {
            let token = alphabet.char_of(b).to_string();
            *slot = *vocab.get(token.as_str()).ok_or(TokenizerError::MissingByteToken(b))?;
        }
        Ok(Bpe { merges: rules, byte_ids, cache: Mutex::new(HashMap::new()) })
    }

    /// Appends the tokens of one pre-tokenized piece to `out`.
    pub(super) fn encode_piece(&self, piece: &str, out: &mut Vec<u32>) {
        if let [b] = piece.as_bytes() {
            out.push(self.byte_ids[usize::from(*b)]);
            return;
        }
        let cacheable = piece.len() <= CACHE_MAX_PIECE;
        if cacheable {
            if let Some(ids) = self.cache.lock().ok().as_ref().and_then(|c| c.get(piece)) {
                out.extend_from_slice(ids);
                return;
            }
        }
        let ids = self.merge(piece.as_bytes());
        out.extend_from_slice(&ids);
        if let Some(mut cache) = self.cache.lock().ok().filter(|_| cacheable) {
            if cache.len() >= CACHE_MAX_ENTRIES {
                cache.clear();
            }
            cache.insert(piece.into(), ids.into_boxed_slice());
        }
    }

    /// The rule for the pair (`left`, `right`), if any.
    fn rule(&self, left: u32, right: u32) -> Option<Merge> {
        self.merges.get(&(left, right)).copied()
    }

    /// BPE over `bytes` in O(n log n): the symbols form a linked list, and a min-heap holds the
    /// candidate merges by (rank, position), so the best rule goes first and equal rules go left
    /// to right. Entries made stale by earlier merges are recognised and skipped when popped.
    fn merge(&self, bytes: &[u8]) -> Vec<u32> {
        struct Symbol {
            id: u32,
            prev: Option<usize>,
            next: Option<usize>,
            alive: bool,
        }
        let n = bytes.len();
        let mut syms: Vec<Symbol> = bytes
            .iter()
            .enumerate()
            .map(|(i, &b)| Symbol {
                id: self.byte_ids[usize::from(b)],
                prev: i.checked_sub(1),
                next: Some(i + 1).filter(|&j| j < n),
                alive: true,
            })
            .collect();
        let mut heap = BinaryHeap::new();
        for (pos, pair) in syms.windows(2).enumerate() {
            if let [a, b] = pair {
                if let Some(m) = self.rule(a.id, b.id) {
                    heap.push(Reverse((m.rank, pos)));
                }
            }
        }
        while let Some(Reverse((rank, pos))) = heap.pop() {
            let Some(left) = syms.get(pos).filter(|s| s.alive) else { continue };
            let Some(next) = left.next else { continue };
            let (prev, left_id) = (left.prev, left.id);
            let Some(right) = syms.get(next) else { continue };
            let (right_id, after) = (right.id, right.next);
            // Ranks are unique per pair, so an equal rank means the pair is still the one queued.
            let Some(m) = self.rule(left_id, right_id).filter(|m| m.rank == rank) else { continue };
            if let Some(s) = syms.get_mut(next) {
                s.alive = false;
            }
            if let Some(s) = syms.get_mut(pos) {
                s.id = m.id;
                s.next = after;
            }
            if let Some(s) = after.and_then(|a| syms.get_mut(a)) {
                s.prev = Some(pos);
            }
            if let Some(p) = prev {
                if let Some(pm) = syms.get(p).and_then(|s| self.rule(s.id, m.id)) {
                    heap.push(Reverse((pm.rank, p)));
                }
            }
            if let Some(a) = after {
                if let Some(am) = syms.get(a).and_then(|s| self.rule(m.id, s.id)) {
                    heap.push(Reverse((am.rank, pos)));
                }
            }
        }
        syms.iter().filter(|s| s.alive).map(|s| s.id).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::Bpe;
    use crate::tokenizer::byte_level::ByteAlphabet;
    use std::collections::HashMap;

    /// A vocabulary of all bytes plus `extra` tokens, and a BPE with `merges`.
    fn bpe(extra: &[&str], merges: &[&str]) -> (Bpe, Vec<String>) {
        let alphabet = ByteAlphabet::new();
        let mut tokens: Vec<String> = (0..=255u8).map(|b| alphabet.char_of(b).to_string()).collect();
        tokens.extend(extra.iter().map(|s| s.to_string()));
        let vocab: HashMap<String, u32> = tokens.iter().cloned().zip(0..).collect();
        (Bpe::new(&vocab, merges, &alphabet).expect("valid test vocabulary"), tokens)
    }

    fn encode(bpe: &Bpe, tokens: &[String], piece: &str) -> Vec<String> {
        let mut ids = Vec::new();
        bpe.encode_piece(piece, &mut ids);
        ids.iter().map(|&id| tokens[id as usize].clone()).collect()
    }

    #[test]
    fn best_rank_first_then_left_to_right() {
        let (bpe, toks) = bpe(&["ab", "bc", "abc", "aa", "aaa", "aaaa"], &["b c", "a b", "a bc", "a a", "aa aa"]);
        assert_eq!(encode(&bpe, &toks, "abc"), ["abc"]); // "b c" outranks "a b"
        assert_eq!(encode(&bpe, &toks, "abab"), ["ab", "ab"]);
        assert_eq!(encode(&bpe, &toks, "aaa"), ["aa", "a"]); // leftmost pair of equal rank first
        assert_eq!(encode(&bpe, &toks, "aaaaa"), ["aaaa", "a"]);
        assert_eq!(encode(&bpe, &toks, "x"), ["x"]);
        assert_eq!(encode(&bpe, &toks, " é"), ["Ġ", "Ã", "©"]); // bytes, written in the alphabet
                                                                // cached results are the same
        assert_eq!(encode(&bpe, &toks, "abc"), ["abc"]);
    }

    /// The textbook algorithm: merge the best-ranked (then leftmost) pair until none is left.
    fn naive_merge(bpe: &Bpe, bytes: &[u8]) -> Vec<u32> {
        let mut ids: Vec<u32> = bytes.iter().map(|&b| bpe.byte_ids[b as usize]).collect();
        loop {
            let best = (1..ids.len()).filter_map(|i| bpe.rule(ids[i - 1], ids[i]).map(|m| (m.rank, i, m.id))).min();
            let Some((_, i, id)) = best else { return ids };
            ids[i - 1] = id;
            ids.remove(i);
        }
    }

    #[test]
    fn heap_merge_agrees_with_the_textbook_algorithm() {
        let mut x: u32 = 7;
        let mut rand = move |n: usize| {
            x = x.wrapping_mul(1_103_515_245).wrapping_add(12_345);
            (x >> 16) as usize % n
        };
        // Random merges over "abc", each joining two tokens that exist by then.
        let mut strings: Vec<String> = ["a", "b", "c"].map(String::from).to_vec();
        let mut merges = Vec::new();
        for i in 0..60 {
            // Short tokens first, so that the rules apply often.
            let pool = strings.len().min(4 + i / 3);
            let (l, r) = (strings[rand(pool)].clone(), strings[rand(pool)].clone());
            merges.push(format!("{l} {r}"));
            if !strings.contains(&(l.clone() + &r)) {
                strings.push(l + &r);
            }
        }
        let extra: Vec<&str> = strings[3..].iter().map(String::as_str).collect();
        let merges: Vec<&str> = merges.iter().map(String::as_str).collect();
        let (bpe, _) = bpe(&extra, &merges);
        let (mut n_bytes, mut n_ids) = (0, 0);
        for len in 0..400 {
            let word: Vec<u8> = (0..len % 40).map(|_| b"abc"[rand(3)]).collect();
            let ids = bpe.merge(&word);
            assert_eq!(ids, naive_merge(&bpe, &word), "{:?}", String::from_utf8_lossy(&word));
            (n_bytes, n_ids) = (n_bytes + word.len(), n_ids + ids.len());
        }
        assert!(3 * n_ids < 2 * n_bytes, "the random merges should do real work: {n_ids} ids, {n_bytes} bytes");
    }

    #[test]
    fn long_runs_are_not_quadratic() {
        let (bpe, toks) = bpe(&["aa", "aaaa"], &["a a", "aa aa"]);
        let piece = "a".repeat(100_001);
        let got = encode(&bpe, &toks, &piece);
        assert_eq!(got.len(), 25_001);
        assert_eq!(got.last().map(String::as_str), Some("a"));
    }

    #[test]
    fn rejects_bad_merges() {
        let alphabet = ByteAlphabet::new();
        let tokens: Vec<String> = (0..=255u8).map(|b| alphabet.char_of(b).to_string()).collect();
        let vocab: HashMap<String, u32> = tokens.into_iter().zip(0..).collect();
        assert!(Bpe::new(&vocab, &["ab"], &alphabet).is_err());
        assert!(Bpe::new(&vocab, &["a b c"], &alphabet).is_err());
        assert!(Bpe::new(&vocab, &["a b"], &alphabet).is_err()); // "ab" is not a token
        let no_bytes = HashMap::new();
        assert!(Bpe::new(&no_bytes, &[] as &[&str], &alphabet).is_err());
    }
}
