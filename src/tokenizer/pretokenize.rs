//! The Qwen2 pre-tokenizer: splits text into the pieces that
//!
//! ```text
//! (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
//! ```
//!
//! matches one after another, written out by hand for exactly this pattern. Alternatives are tried
//! in order and the first that matches wins (leftmost-first, as in Oniguruma, which the HF
//! tokenizer uses); where backtracking changes a match it is spelled out below. Every character
//! starts some alternative, so the pieces cover the text with no gaps.

use super::char_class::{classify, CharClass};

/// The pieces of `text`, in order; they concatenate to `text`.
pub(super) fn pieces(text: &str) -> Pieces<'_> {
    Pieces { rest: text }
}

pub(super) struct Pieces<'a> {
    rest: &'a str,
}

impl<'a> Iterator for Pieces<'a> {
    type Item = &'a str;

    fn next(&mut self) -> Option<&'a str> {
        let len = match_len(self.rest);
        if len == 0 {
            return None;
        }
        let (piece, rest) = self.rest.split_at_checked(len)?;
        self.rest = rest;
        Some(piece)
    }
}

fn is_newline(c: char) -> bool {
    c == '\r' || c == '\n'
}

/// Byte length of the longest prefix of `s` whose characters all satisfy `pred`.
fn run_len(s: &str, pred: impl Fn(char) -> bool) -> usize {
    s.chars().take_while(|&c| pred(c)).map(char::len_utf8).sum()
}

fn letters_len(s: &str) -> usize {
    run_len(s, |c| classify(c) == CharClass::Letter)
}

/// Byte length of the match at the start of `s`; 0 only for an empty `s`.
fn match_len(s: &str) -> usize {
    let mut chars = s.chars();
    let Some(c0) = chars.next() else { return 0 };
    let after0 = chars.as_str();
    let n0 = c0.len_utf8();
    // (?i:'s|'t|'re|'ve|'m|'ll|'d)
    if c0 == '\'' {
        if let Some(n) = contraction_len(after0) {
            return n0 + n;
        }
    }
    match classify(c0) {
        // [^\r\n\p{L}\p{N}]?\p{L}+ with the optional part empty
        CharClass::Letter => return n0 + letters_len(after0),
        // \p{N}: digits one at a time
        CharClass::Number => return n0,
        CharClass::Space | CharClass::Other => {}
    }
    // [^\r\n\p{L}\p{N}]?\p{L}+ with one leading character (a space, tab, punctuation, ...)
    let letters = letters_len(after0);
    if letters > 0 && !is_newline(c0) {
        return n0 + letters;
    }
    //  ?[^\s\p{L}\p{N}]+[\r\n]*
    let symbols_from = if c0 == ' ' { after0 } else { s };
    let symbols = run_len(symbols_from, |c| classify(c) == CharClass::Other);
    if symbols > 0 {
        let skipped = s.len() - symbols_from.len();
        let newlines = symbols_from.get(symbols..).map_or(0, |t| run_len(t, is_newline));
        return skipped + symbols + newlines;
    }
    // Only white space is left: c0 is \s.
    whitespace_len(s)
}

/// `(?i:'s|'t|'re|'ve|'m|'ll|'d)` after the apostrophe: the byte length of the suffix matched.
fn contraction_len(s: &str) -> Option<usize> {
    // Case-insensitive in the Unicode sense: besides ASCII case, U+017F LATIN SMALL LETTER LONG S
    // case-folds to 's' (CaseFolding.txt); nothing else folds to one of these letters.
    fn fold(c: char) -> char {
        if c == 'ſ' {
            's'
        } else {
            c.to_ascii_lowercase()
        }
    }
    ["s", "t", "re", "ve", "m", "ll", "d"].iter().find_map(|suffix| {
        let mut chars = s.chars();
        let mut len = 0;
        for want in suffix.chars() {
            let c = chars.next().filter(|&c| fold(c) == want)?;
            len += c.len_utf8();
        }
        Some(len)
    })
}

/// `\s*[\r\n]+|\s+(?!\S)|\s+` at a white space character.
fn whitespace_len(s: &str) -> usize {
    let mut run_end = 0;
    let mut last_start = 0;
    let mut newline_end = None;
    for (i, c) in s.char_indices() {
        if classify(c) != CharClass::Space {
            break;
        }
        last_start = i;
        run_end = i + c.len_utf8();
        if is_newline(c) {
            newline_end = Some(run_end);
        }
    }
    // \s*[\r\n]+: \s* backtracks to the last line break of the run, [\r\n]+ takes it.
    if let Some(end) = newline_end {
        return end;
    }
    // \s+(?!\S) takes the whole run at the end of the text; before a non-space it backtracks one
    // character, leaving that character to join the next piece (" word"). A single white space
    // character before a non-space falls through to \s+.
    if run_end == s.len() || last_start == 0 {
        run_end
    } else {
        last_start
    }
}

#[cfg(test)]
mod tests {
    use super::pieces;

    fn split(s: &str) -> Vec<&str> {
        pieces(s).collect()
    }

    #[test]
    fn words_take_one_leading_non_letter() {
        assert_eq!(split("Hello world"), ["Hello", " world"]);
        assert_eq!(split("(hello) x"), ["(hello", ")", " x"]);
        assert_eq!(split("tab\tseparated"), ["tab", "\tseparated"]);
        assert_eq!(split("a\nb"), ["a", "\n", "b"]);
        assert_eq!(split("a\rb"), ["a", "\r", "b"]);
        assert_eq!(split("\u{a0}nbsp"), ["\u{a0}nbsp"]);
    }

    #[test]
    fn contractions_are_case_insensitive_and_leftmost_first() {
        assert_eq!(split("don't"), ["don", "'t"]);
        assert_eq!(split("IT'S"), ["IT", "'S"]);
        assert_eq!(split("we'Ll"), ["we", "'Ll"]);
        assert_eq!(split("'start"), ["'s", "tart"]);
        assert_eq!(split("'ſx"), ["'ſ", "x"]);
        assert_eq!(split("'x"), ["'x"]);
        assert_eq!(split("' s"), ["'", " s"]);
        assert_eq!(split("'r'"), ["'r", "'"]);
    }

    #[test]
    fn digits_split_one_by_one() {
        assert_eq!(split("12345"), ["1", "2", "3", "4", "5"]);
        assert_eq!(split("x=١٢"), ["x", "=", "١", "٢"]);
        assert_eq!(split(" 42"), [" ", "4", "2"]);
        assert_eq!(split("Ⅻ²"), ["Ⅻ", "²"]);
    }

    #[test]
    fn punctuation_takes_one_space_and_trailing_newlines() {
        assert_eq!(split("hi!!!"), ["hi", "!!!"]);
        assert_eq!(split("a ...\n\nb"), ["a", " ...\n\n", "b"]);
        assert_eq!(split("x  ?"), ["x", " ", " ?"]);
        assert_eq!(split("😀😀 🚀"), ["😀😀", " 🚀"]);
    }

    #[test]
    fn whitespace_gives_back_one_char_before_non_space() {
        assert_eq!(split("a   b"), ["a", "  ", " b"]);
        assert_eq!(split("a b"), ["a", " b"]);
        assert_eq!(split("trailing   "), ["trailing", "   "]);
        assert_eq!(split("   x"), ["  ", " x"]);
        assert_eq!(split(" \t1"), [" ", "\t", "1"]);
        assert_eq!(split("\u{3000}\u{3000}中"), ["\u{3000}", "\u{3000}中"]);
    }

    #[test]
    fn line_breaks_end_whitespace_runs() {
        assert_eq!(split("\r\n"), ["\r\n"]);
        assert_eq!(split("a\r\nb"), ["a", "\r\n", "b"]);
        assert_eq!(split(" \n \n "), [" \n \n", " "]);
        assert_eq!(split("x \n\n  y"), ["x", " \n\n", " ", " y"]);
        assert_eq!(split("\n "), ["\n", " "]);
        assert_eq!(split("mixed \r\n\n\r endings"), ["mixed", " \r\n\n\r", " endings"]);
    }

    #[test]
    fn non_latin_scripts_and_emoji() {
        assert_eq!(split("你好，世界"), ["你好", "，世界"]); // punctuation leads the next word
        assert_eq!(split("Привет мир"), ["Привет", " мир"]);
        assert_eq!(split("नमस्ते"), ["नमस", "्त", "े"]); // the virama is Mn, not a letter
        assert_eq!(split("👍🏽 ok"), ["👍🏽", " ok"]);
        assert_eq!(split("e\u{301}"), ["e", "\u{301}"]);
    }

    #[test]
    fn pieces_cover_the_text() {
        let s = "It's 2024!\r\n\tΓειά σου 😀 '' ';'LL  ";
        assert_eq!(split(s).concat(), s);
        assert!(split(s).iter().all(|p| !p.is_empty()));
        assert!(split("").is_empty());
    }
}
