//! GPT-2's byte-level alphabet: every byte is written as a printable character, so that
//! byte-level BPE tokens are strings. Printable Latin-1 bytes stand for themselves; the other 68
//! (controls, space, DEL, NBSP, soft hyphen) map in order to U+0100..=U+0143.

/// One past the highest code point in the alphabet.
const ALPHABET_END: usize = 0x144;

pub(super) struct ByteAlphabet {
    chars: [char; 256],
    bytes: [Option<u8>; ALPHABET_END],
}

impl ByteAlphabet {
    pub(super) fn new() -> Self {
        let mut chars = ['\0'; 256];
        let mut bytes = [None; ALPHABET_END];
        let mut next_shifted = 0x100;
        for b in 0..=255u8 {
            let printable = matches!(b, b'!'..=b'~' | 0xA1..=0xAC | 0xAE..=0xFF);
            let cp = if printable { usize::from(b) } else { next_shifted };
            next_shifted += usize::from(!printable);
            // cp < ALPHABET_END: the char and the slot exist
            if let (Some(c), Some(slot)) = (char::from_u32(cp as u32), bytes.get_mut(cp)) {
                chars[usize::from(b)] = c;
                *slot = Some(b);
            }
        }
        ByteAlphabet { chars, bytes }
    }

    pub(super) fn char_of(&self, b: u8) -> char {
        self.chars[usize::from(b)]
    }

    /// The byte that `c` stands for, or `None` if `c` is not in the alphabet.
    pub(super) fn byte_of(&self, c: char) -> Option<u8> {
        self.bytes.get(c as usize).copied().flatten()
    }
}

#[cfg(test)]
mod tests {
    use super::ByteAlphabet;

    #[test]
    fn alphabet_matches_gpt2_and_inverts() {
        let a = ByteAlphabet::new();
        assert_eq!(a.char_of(b' '), 'Ġ');
        assert_eq!(a.char_of(b'\n'), 'Ċ');
        assert_eq!(a.char_of(b'\t'), 'ĉ');
        assert_eq!(a.char_of(0), 'Ā');
        assert_eq!(a.char_of(0x7f), 'ġ');
        assert_eq!(a.char_of(0xad), 'Ń');
        assert_eq!(a.char_of(b'A'), 'A');
        assert_eq!(a.char_of(0xe4), 'ä');
        for b in 0..=255u8 {
            assert_eq!(a.byte_of(a.char_of(b)), Some(b));
        }
        for c in ['\0', ' ', '\u{7f}', '\u{a0}', '\u{ad}', 'ń' /* U+0144, one past the end */, '中'] {
            assert_eq!(a.byte_of(c), None, "{c:?}");
        }
    }
}
