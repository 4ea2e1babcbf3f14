//! Finding added tokens (control and user-defined, e.g. `<|im_start|>`, `<think>`) written in
//! the text, so that a chat template's markers become single tokens.

/// Part of a text: plain text to tokenize, or an added token found in it.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Segment<'a> {
    Text(&'a str),
    Token(u32),
}

pub(super) struct AddedTokens {
    /// Longest first, so that the first match at a position is the longest one.
    tokens: Vec<(String, u32)>,
    /// Whether some token starts with this byte; most positions are rejected with one look-up.
    first_bytes: [bool; 256],
}

impl AddedTokens {
    pub(super) fn new(tokens: impl IntoIterator<Item = (String, u32)>) -> Self {
        // An empty token would match everywhere and consume nothing.
        let mut tokens: Vec<_> = tokens.into_iter().filter(|(t, _)| !t.is_empty()).collect();
        tokens.sort_by(|a, b| b.0.len().cmp(&a.0.len()).then(a.1.cmp(&b.1)));
        let mut first_bytes = [false; 256];
        for (t, _) in &tokens {
            if let Some(&b) = t.as_bytes().first() {
                first_bytes[usize::from(b)] = true;
            }
        }
        AddedTokens { tokens, first_bytes }
    }

    /// `text` cut at the leftmost-longest occurrences of added tokens.
    pub(super) fn split<'a>(&'a self, text: &'a str) -> Split<'a> {
        Split { added: self, rest: text, pending: None }
    }

    /// The leftmost position in `text` where a token starts, with the longest token there.
    fn find(&self, text: &str) -> Option<(usize, &str, u32)> {
        text.bytes().enumerate().filter(|&(_, b)| self.first_bytes[usize::from(b)]).find_map(|(i, _)| {
            let here = text.get(i..)?;
            let (t, id) = self.tokens.iter().find(|(t, _)| here.starts_with(t.as_str()))?;
            Some((i, t.as_str(), *id))
        })
    }
}

pub(super) struct Split<'a> {
    added: &'a AddedTokens,
    rest: &'a str,
    /// A token found after the text segment just returned.
    pending: Option<u32>,
}

impl<'a> Iterator for Split<'a> {
    type Item = Segment<'a>;

    fn next(&mut self) -> Option<Segment<'a>> {
        if let Some(id) = self.pending.take() {
            return Some(Segment::Token(id));
        }
        if self.rest.is_empty() {
            return None;
        }
        let Some((start, token, id)) = self.added.find(self.rest) else {
            return Some(Segment::Text(std::mem::take(&mut self.rest)));
        };
        let (before, from) = self.rest.split_at_checked(start)?;
        self.rest = from.get(token.len()..)?;
        if before.is_empty() {
            return Some(Segment::Token(id));
        }
        self.pending = Some(id);
        Some(Segment::Text(before))
    }
}

#[cfg(test)]
mod tests {
    use super::{AddedTokens, Segment::*};

    fn added() -> AddedTokens {
        let toks = [("<|im_start|>", 1), ("<|im_end|>", 2), ("<think>", 3), ("<", 4), ("<|im", 5), ("", 6)];
        AddedTokens::new(toks.map(|(t, id)| (t.to_string(), id)))
    }

    #[test]
    fn splits_at_leftmost_longest_tokens() {
        let a = added();
        let got: Vec<_> = a.split("<|im_start|>user\nhi<|im_end|><think>x<|im").collect();
        assert_eq!(got, [Token(1), Text("user\nhi"), Token(2), Token(3), Text("x"), Token(5)]);
        let got: Vec<_> = a.split("a <|im_sta b").collect();
        assert_eq!(got, [Text("a "), Token(5), Text("_sta b")]);
        assert_eq!(a.split("").count(), 0);
        assert_eq!(a.split("plain é").collect::<Vec<_>>(), [Text("plain é")]);
    }
}
