//! Unicode Normalization Form C (UAX #15): canonical decomposition, canonical reordering of
//! combining marks, canonical composition. The HF Qwen tokenizer applies it to the text between
//! added tokens before splitting it; llama.cpp does not.

use std::borrow::Cow;

use super::nfc_tables::{CCC_RANGES, COMPOSITIONS, DECOMPOSITIONS};
use super::ranges::range_value;

// Hangul syllables are composed from jamo arithmetically (Unicode ch. 3.12).
const S_BASE: u32 = 0xAC00;
const L_BASE: u32 = 0x1100;
const V_BASE: u32 = 0x1161;
const T_BASE: u32 = 0x11A7;
const L_COUNT: u32 = 19;
const V_COUNT: u32 = 21;
const T_COUNT: u32 = 28;
const N_COUNT: u32 = V_COUNT * T_COUNT;
const S_COUNT: u32 = L_COUNT * N_COUNT;

/// Below U+0300 every character is a starter that is its own NFC, whatever follows it.
const FIRST_NON_TRIVIAL: char = '\u{300}';

/// `text` in NFC; borrowed when nothing can change.
pub(super) fn nfc(text: &str) -> Cow<'_, str> {
    if text.chars().all(|c| c < FIRST_NON_TRIVIAL) {
        return Cow::Borrowed(text);
    }
    let mut marks = decompose(text);
    reorder(&mut marks);
    Cow::Owned(compose(&marks))
}

fn ccc(c: char) -> u8 {
    if c < FIRST_NON_TRIVIAL {
        return 0;
    }
    range_value(CCC_RANGES, c).unwrap_or(0)
}

/// Full canonical decomposition, each character with its combining class.
fn decompose(text: &str) -> Vec<(char, u8)> {
    let mut out = Vec::with_capacity(text.len());
    let mut push = |c: char| out.push((c, ccc(c)));
    for c in text.chars() {
        let s = (c as u32).wrapping_sub(S_BASE);
        if s < S_COUNT {
            let t = s % T_COUNT;
            for cp in [L_BASE + s / N_COUNT, V_BASE + (s % N_COUNT) / T_COUNT] {
                push(char::from_u32(cp).unwrap_or(c));
            }
            if t != 0 {
                push(char::from_u32(T_BASE + t).unwrap_or(c));
            }
        } else if let Ok(i) = DECOMPOSITIONS.binary_search_by_key(&c, |&(k, _)| k) {
            DECOMPOSITIONS.get(i).into_iter().flat_map(|&(_, d)| d).for_each(|&d| push(d));
        } else {
            push(c);
        }
    }
    out
}

/// Canonical ordering: each run of non-starters sorted by combining class, stably.
fn reorder(chars: &mut [(char, u8)]) {
    for run in chars.split_mut(|&(_, class)| class == 0) {
        run.sort_by_key(|&(_, class)| class);
    }
}

/// Canonical composition of a decomposed, reordered string.
fn compose(chars: &[(char, u8)]) -> String {
    let mut out: Vec<char> = Vec::with_capacity(chars.len());
    // The last starter (index into `out`) and the class of the last character after it, if any.
    let mut starter: Option<usize> = None;
    let mut last_class: Option<u8> = None;
    for &(c, class) in chars {
        if let Some(slot) = starter.and_then(|i| out.get_mut(i)) {
            // Blocked if a character between the starter and c has class 0 or >= c's; characters
            // after the starter are all non-starters, as any starter left there becomes `starter`.
            let blocked = last_class.is_some_and(|last| last >= class);
            if let Some(composite) = compose_pair(*slot, c).filter(|_| !blocked) {
                *slot = composite;
                continue;
            }
        }
        if class == 0 {
            starter = Some(out.len());
            last_class = None;
        } else {
            last_class = Some(class);
        }
        out.push(c);
    }
    out.into_iter().collect()
}

/// The primary composite of `a` followed by `b`, if there is one.
fn compose_pair(a: char, b: char) -> Option<char> {
    let (a32, b32) = (a as u32, b as u32);
    let l = a32.wrapping_sub(L_BASE);
    let v = b32.wrapping_sub(V_BASE);
    if l < L_COUNT && v < V_COUNT {
        return char::from_u32(S_BASE + (l * V_COUNT + v) * T_COUNT);
    }
    let s = a32.wrapping_sub(S_BASE);
    let t = b32.wrapping_sub(T_BASE);
    if s < S_COUNT && s % T_COUNT == 0 && 0 < t && t < T_COUNT {
        return char::from_u32(a32 + t);
    }
    let i = COMPOSITIONS.binary_search_by_key(&(a, b), |&(x, y, _)| (x, y)).ok()?;
    COMPOSITIONS.get(i).map(|&(_, _, c)| c)
}

#[cfg(test)]
mod tests {
    use super::nfc;

    #[test]
    fn composes_base_and_marks() {
        assert_eq!(nfc("e\u{301}"), "é");
        assert_eq!(nfc("A\u{30a}"), "Å");
        assert_eq!(nfc("\u{212b}"), "Å"); // ANGSTROM SIGN is a singleton decomposition
        assert_eq!(nfc("\u{1e9b}\u{323}"), "\u{1e9b}\u{323}"); // long s with dot: no composite for the pair
        assert_eq!(nfc("a\u{308}\u{301}"), "ä\u{301}"); // ä has no acute composite
        assert_eq!(nfc("u\u{308}\u{301}"), "ǘ"); // two steps: ü, then ǘ
        assert_eq!(nfc("\u{344}"), "\u{308}\u{301}"); // non-starter decomposition is excluded
        assert_eq!(nfc("\u{958}"), "\u{915}\u{93c}"); // script-specific exclusion
        assert_eq!(nfc("ascii only"), "ascii only");
    }

    #[test]
    fn reorders_marks_by_combining_class() {
        // dot below (220) sorts before dot above (230); then both compose onto s in turn
        assert_eq!(nfc("s\u{307}\u{323}"), "\u{1e69}");
        assert_eq!(nfc("q\u{307}\u{323}"), "q\u{323}\u{307}");
        // equal classes keep their order, and the second one is blocked by the first
        assert_eq!(nfc("a\u{301}\u{300}"), "á\u{300}");
        // the virama (class 9) moves before the acute (230), which then reaches the e
        assert_eq!(nfc("e\u{94d}\u{301}"), "é\u{94d}");
        // a starter in between (a class-0 vowel sign) blocks composition across it
        assert_eq!(nfc("e\u{93e}\u{301}"), "e\u{93e}\u{301}");
    }

    #[test]
    fn hangul_composes_and_decomposes_algorithmically() {
        assert_eq!(nfc("\u{1100}\u{1161}"), "가");
        assert_eq!(nfc("\u{1100}\u{1161}\u{11a8}"), "각");
        assert_eq!(nfc("가\u{11a8}"), "각");
        assert_eq!(nfc("각\u{11a8}"), "각\u{11a8}"); // an LVT syllable takes no more T
        assert_eq!(nfc("\u{1100}\u{11a8}"), "\u{1100}\u{11a8}"); // L + T is no syllable
        assert_eq!(nfc("한국어"), "한국어");
    }

    #[test]
    fn leading_marks_and_idempotence() {
        assert_eq!(nfc("\u{301}e"), "\u{301}e");
        let mixed = "Ça\u{300} 한\u{1100}\u{1161} \u{2126} ﬁ ①";
        let once = nfc(mixed).into_owned();
        assert_eq!(once, "Çà 한가 \u{3a9} ﬁ ①"); // compatibility characters stay
        assert_eq!(nfc(&once), once);
    }
}
