//! The character classes that the Qwen2 pre-tokenizer regex distinguishes.

use super::ranges::range_value;
use super::unicode_tables::{ASCII_CLASSES, CLASS_RANGES};

/// `\p{L}`, `\p{N}`, `\s` (White_Space, as Oniguruma defines `\s` for Unicode) or none of them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum CharClass {
    Letter,
    Number,
    Space,
    Other,
}

pub(crate) fn classify(c: char) -> CharClass {
    match ASCII_CLASSES.get(c as usize) {
        Some(&class) => class,
        None => range_value(CLASS_RANGES, c).unwrap_or(CharClass::Other),
    }
}

#[cfg(test)]
mod tests {
    use super::{classify, CharClass::*};

    #[test]
    fn classes_follow_unicode_not_ascii() {
        let cases = [
            ('a', Letter),
            ('Z', Letter),
            ('7', Number),
            ('_', Other),
            (' ', Space),
            ('\u{b}', Space),
            ('\u{1c}', Other), // Python's isspace() says yes; White_Space says no
            ('\u{85}', Space),
            ('\u{a0}', Space),
            ('\u{2028}', Space),
            ('\u{3000}', Space),
            ('\u{200b}', Other), // zero width space is Cf, not White_Space
            ('é', Letter),
            ('ß', Letter),
            ('中', Letter),
            ('ー', Letter),     // Lm
            ('\u{94d}', Other), // Devanagari virama is Mn
            ('²', Number),      // No
            ('Ⅻ', Number),      // Nl
            ('١', Number),      // Nd
            ('𝟏', Number),
            ('𝐀', Letter),
            ('😀', Other),
            ('\u{10ffff}', Other),
        ];
        for (c, want) in cases {
            assert_eq!(classify(c), want, "{c:?} U+{:04X}", c as u32);
        }
    }
}
