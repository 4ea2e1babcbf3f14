//! The tokenizer: every oracle case (HF ids) with the oracle GGUF's vocabulary, NFC on and off,
//! round trips, streaming decoding, errors, and large inputs.

mod common;

use std::collections::HashMap;
use std::sync::OnceLock;

use hrx::gguf::GgufFile;
use hrx::tokenizer::{Beyond, StreamDecoder, Tokenizer, TokenizerError, Within};
use tinyjson::JsonValue;

/// The oracle is looked for by every caller, so that each test without it is counted as a skip.
fn load_oracle_tokenizer(cell: &'static OnceLock<Tokenizer>, nfc: bool) -> Option<&'static Tokenizer> {
    let path = common::oracle()?.join("models/tiny/qwen3vl-tiny-F16.gguf");
    Some(cell.get_or_init(|| {
        let file = GgufFile::open(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        Tokenizer::from_gguf(&file).expect("the oracle GGUF's tokenizer").with_nfc(nfc)
    }))
}

/// The tokenizer of the oracle's tiny model (shared by the tests), or None (loudly) without
/// the oracle.
fn oracle_tokenizer() -> Option<&'static Tokenizer> {
    static TOKENIZER: OnceLock<Tokenizer> = OnceLock::new();
    load_oracle_tokenizer(&TOKENIZER, true)
}

/// The same with NFC off, as llama.cpp tokenizes.
fn oracle_tokenizer_without_nfc() -> Option<&'static Tokenizer> {
    static TOKENIZER: OnceLock<Tokenizer> = OnceLock::new();
    load_oracle_tokenizer(&TOKENIZER, false)
}

struct Case {
    text: String,
    ids: Vec<u32>,
    /// HF's ids of the raw text, for the cases that NFC changes.
    ids_without_nfc: Option<Vec<u32>>,
}

/// A JSON array of token ids.
fn json_ids(v: &JsonValue) -> Vec<u32> {
    let items: &Vec<JsonValue> = v.get().expect("an array of ids");
    items.iter().map(|x| *x.get::<f64>().expect("an id") as u32).collect()
}

fn oracle_cases() -> Option<Vec<Case>> {
    let path = common::oracle()?.join("tokenizer/cases.jsonl");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let cases: Vec<Case> = text
        .lines()
        .map(|line| {
            let v: JsonValue = line.parse().expect("a JSON line");
            let o: &HashMap<String, JsonValue> = v.get().expect("an object");
            Case {
                text: o["text"].get::<String>().expect("text").clone(),
                ids: json_ids(&o["ids"]),
                ids_without_nfc: o.get("ids_without_nfc").map(json_ids),
            }
        })
        .collect();
    assert_eq!(cases.len(), 398, "{}", path.display());
    Some(cases)
}

/// Runs `check` on every case and fails with all the mismatches, after printing the pass count.
fn check_all(what: &str, cases: &[&Case], check: impl Fn(&Case) -> Result<(), String>) {
    let failures: Vec<String> = cases.iter().filter_map(|c| check(c).err()).collect();
    eprintln!("{what}: {}/{} agree", cases.len() - failures.len(), cases.len());
    assert!(failures.is_empty(), "{what}: {} mismatches:\n{}", failures.len(), failures.join("\n"));
}

#[test]
fn every_oracle_case_matches_hf_ids() {
    let (Some(tok), Some(cases)) = (oracle_tokenizer(), oracle_cases()) else { return };
    check_all("oracle ids with NFC", &cases.iter().collect::<Vec<_>>(), |c| {
        let got = tok.encode(&c.text, true);
        (got == c.ids).then_some(()).ok_or_else(|| format!("{:?}\n  got  {got:?}\n  want {:?}", c.text, c.ids))
    });
}

#[test]
fn without_nfc_the_nfc_cases_give_the_raw_text_ids() {
    let (Some(tok), Some(raw), Some(cases)) = (oracle_tokenizer(), oracle_tokenizer_without_nfc(), oracle_cases())
    else {
        return;
    };
    let nfc_cases: Vec<&Case> = cases.iter().filter(|c| c.ids_without_nfc.is_some()).collect();
    assert_eq!(nfc_cases.len(), 20);
    check_all("oracle ids_without_nfc, NFC off", &nfc_cases, |c| {
        let want = c.ids_without_nfc.as_ref().unwrap();
        let got = raw.encode(&c.text, true);
        (&got == want).then_some(()).ok_or_else(|| format!("{:?}\n  got  {got:?}\n  want {want:?}", c.text))
    });
    // The two differ on every such case, so NFC is what makes the difference.
    for c in &nfc_cases {
        assert_ne!(tok.encode(&c.text, true), raw.encode(&c.text, true), "{:?}", c.text);
    }
    // Where NFC changes nothing, switching it off changes nothing either.
    for c in cases.iter().filter(|c| c.ids_without_nfc.is_none()) {
        assert_eq!(raw.encode(&c.text, true), c.ids, "{:?}", c.text);
    }
}

#[test]
fn oracle_texts_round_trip_through_encode_and_decode() {
    let (Some(tok), Some(cases)) = (oracle_tokenizer(), oracle_cases()) else { return };
    let stable: Vec<&Case> = cases.iter().filter(|c| c.ids_without_nfc.is_none()).collect();
    check_all("decode(encode(text)) == text", &stable, |c| {
        let back = tok.decode(&tok.encode(&c.text, true)).map_err(|e| e.to_string())?;
        (back == c.text).then_some(()).ok_or_else(|| format!("{:?} came back as {back:?}", c.text))
    });
    // Streaming the HF ids one at a time gives the same text, each piece whole.
    for c in &cases {
        let mut stream = StreamDecoder::new(tok);
        let mut text = String::new();
        for &id in &c.ids {
            text += &stream.push(id).expect("a known id");
        }
        text += &stream.finish();
        assert_eq!(text, tok.decode(&c.ids).unwrap());
        if c.ids_without_nfc.is_none() {
            assert_eq!(text, c.text);
        }
    }
}

#[test]
fn metadata_special_tokens_and_added_tokens() {
    let Some(tok) = oracle_tokenizer() else { return };
    assert_eq!(tok.n_vocab(), 151936);
    assert_eq!(
        format!("{tok:?}"),
        "Tokenizer { n_vocab: 151936, bos: Some(151643), eos: Some(151645), eog: [151645, 151643], nfc: true, .. }"
    );
    assert_eq!((tok.bos(), tok.eos()), (Some(151643), Some(151645)));
    assert_eq!(tok.token_id("<|im_end|>"), Some(151645));
    assert_eq!(tok.token_id("Ġworld"), Some(1879));
    assert_eq!(tok.token_str(1879), Ok("Ġworld"));
    assert_eq!(tok.token_to_bytes(1879), Ok(&b" world"[..]));
    assert!(tok.is_eog(151645) && tok.is_eog(151643) && !tok.is_eog(1879)); // <|endoftext|> too, by its text
    assert!(tok.is_control(151644) && !tok.is_control(151667) && !tok.is_control(1879)); // <think> is user-defined
                                                                                         // Unused padding rows of the vocabulary decode to nothing, as in HF and llama.cpp.
    assert_eq!(tok.token_str(151724), Ok("[PAD151724]"));
    assert_eq!(tok.token_to_bytes(151724), Ok(&b""[..]));
    let chat = "<|im_start|>user\nHi<|im_end|>\n<think>";
    let ids = tok.encode(chat, true);
    assert_eq!(ids.first(), Some(&151644));
    assert_eq!(ids.last(), Some(&151667));
    assert_eq!(tok.decode(&ids).unwrap(), chat);
    // Without parse_special the markers are plain text.
    let plain = tok.encode(chat, false);
    assert!(plain.iter().all(|&id| id < 151643), "{plain:?}");
    assert_eq!(tok.decode(&plain).unwrap(), chat);
}

/// The model cases' prompts give their input ids (with `<|image_pad|>` repeated for the image),
/// and their generated ids decode to HF's text, with and without special tokens.
#[test]
fn model_case_prompts_and_greedy_texts() {
    let (Some(tok), Some(oracle)) = (oracle_tokenizer(), common::oracle()) else { return };
    let image_pad = tok.token_id("<|image_pad|>").expect("<|image_pad|>");
    let mut n = 0;
    for dir in ["tiny", "small", "tiny-q8", "small-q4km"] {
        for case in ["T1", "T2", "T3", "I1", "I2", "I3", "I4", "I5", "I6"] {
            let path = oracle.join("cases").join(dir).join(format!("{case}.json"));
            let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            let v: JsonValue = text.parse().expect("JSON");
            let fields: &HashMap<String, JsonValue> = v.get().expect("an object");
            let n_image = fields.get("image").map_or(0, |i| *i["n_image_tokens"].get::<f64>().unwrap() as usize);
            let prompt: &String = v["prompt"].get().expect("prompt");
            let expanded: Vec<u32> = tok
                .encode(prompt, true)
                .into_iter()
                .flat_map(|id| std::iter::repeat_n(id, if id == image_pad { n_image } else { 1 }))
                .collect();
            assert_eq!(expanded, json_ids(&v["input_ids"]), "{}", path.display());
            let greedy = json_ids(&v["greedy"]["ids"]);
            assert_eq!(
                &tok.decode(&greedy).unwrap(),
                v["greedy"]["text"].get::<String>().unwrap(),
                "{}",
                path.display()
            );
            let shown: Vec<u32> = greedy.into_iter().filter(|&id| !tok.is_control(id)).collect();
            assert_eq!(&tok.decode(&shown).unwrap(), v["greedy"]["text_skip_special"].get::<String>().unwrap());
            n += 1;
        }
    }
    assert_eq!(n, 36);
}

#[test]
fn unknown_ids_are_errors() {
    let Some(tok) = oracle_tokenizer() else { return };
    let unknown = TokenizerError::UnknownId { id: 151936, n_vocab: 151936 };
    assert_eq!(tok.decode(&[9707, 151936]), Err(unknown.clone()));
    assert_eq!(tok.token_to_bytes(u32::MAX), Err(TokenizerError::UnknownId { id: u32::MAX, n_vocab: 151936 }));
    assert_eq!(tok.token_str(151936), Err(unknown.clone()));
    assert_eq!(StreamDecoder::new(tok).push(151936), Err(unknown));
    assert!(!tok.is_eog(u32::MAX) && !tok.is_control(u32::MAX));
}

/// A fixed pseudo-random sequence (xorshift64).
fn random_numbers(mut x: u64) -> impl Iterator<Item = u64> {
    std::iter::repeat_with(move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    })
}

/// At least `len` bytes of characters drawn from `alphabet`.
fn random_text(len: usize, alphabet: &str) -> String {
    let chars: Vec<char> = alphabet.chars().collect();
    let mut s = String::with_capacity(len + 4);
    for x in random_numbers(0x9E37_79B9_7F4A_7C15) {
        if s.len() >= len {
            break;
        }
        s.push(chars[(x % chars.len() as u64) as usize]);
    }
    s
}

#[test]
fn a_megabyte_of_random_text_encodes_and_round_trips() {
    let (Some(tok), Some(raw)) = (oracle_tokenizer(), oracle_tokenizer_without_nfc()) else { return };
    // NFC-stable characters of many classes, so that decoding must give the text back.
    let text =
        random_text(1 << 20, "abcdefghijklmnopqrstuvwxyz ABCXYZ 0123456789 .,;!?'\n\t\r 中文字符한국어 éàü 😀🚀 <|>");
    let ids = tok.encode(&text, true);
    assert!(ids.len() > text.len() / 8, "{} ids", ids.len());
    assert_eq!(tok.decode(&ids).unwrap(), text);
    // Combining marks and jamo go through NFC reordering and composition at this size too.
    let marks = random_text(1 << 20, "aeiouAEIOU \u{300}\u{301}\u{308}\u{323}\u{327}\u{1100}\u{1161}\u{11a8}");
    assert_eq!(raw.decode(&raw.encode(&marks, false)).unwrap(), marks);
    let ids = tok.encode(&marks, false);
    let normalized = tok.decode(&ids).unwrap();
    assert!(normalized.len() < marks.len(), "NFC composes some pairs");
    // NFC is idempotent, so the normalized text encodes to the same ids.
    assert_eq!(tok.encode(&normalized, false), ids);
}

#[test]
fn any_code_points_encode_and_round_trip() {
    let (Some(tok), Some(raw)) = (oracle_tokenizer(), oracle_tokenizer_without_nfc()) else { return };
    // Random scalar values from all planes: unassigned, private use, controls, marks, ...
    let text: String = random_numbers(0x2545_F491_4F6C_DD1D)
        .filter_map(|x| char::from_u32((x % 0x11_0000) as u32))
        .take(200_000)
        .collect();
    assert_eq!(raw.decode(&raw.encode(&text, false)).unwrap(), text);
    let normalized = tok.decode(&tok.encode(&text, false)).unwrap();
    assert_ne!(normalized, text, "some of these characters have canonical decompositions");
    assert_eq!(tok.decode(&tok.encode(&normalized, false)).unwrap(), normalized);
}

#[test]
fn long_words_of_repeated_characters_encode() {
    let Some(tok) = oracle_tokenizer() else { return };
    for word in ["a".repeat(10_000), "ab".repeat(5_000), "中".repeat(4_000), "!".repeat(10_000)] {
        let ids = tok.encode(&word, false);
        assert!(ids.len() <= word.len() / 2, "{} ids for {} bytes", ids.len(), word.len());
        assert_eq!(tok.decode(&ids).unwrap(), word);
    }
}

/// GPT-2's byte alphabet, written out independently of the crate: printable Latin-1 bytes stand
/// for themselves, the others are U+0100, U+0101, ... in byte order.
fn gpt2_char(b: u8) -> char {
    let printable = |b: u8| matches!(b, b'!'..=b'~' | 0xA1..=0xAC | 0xAE..=0xFF);
    if printable(b) {
        char::from(b)
    } else {
        char::from_u32(0x100 + (0..b).filter(|&x| !printable(x)).count() as u32).unwrap()
    }
}

/// Ids 0..=255 are the single bytes, then `extra` (normal tokens, then one control token
/// "<|end|>"), with `merges`.
fn small_tokenizer(extra: &[&str], merges: &[&str]) -> Tokenizer {
    let mut tokens: Vec<String> = (0..=255u8).map(|b| gpt2_char(b).to_string()).collect();
    tokens.extend(extra.iter().map(|s| s.to_string()));
    tokens.push("<|end|>".into());
    let mut types = vec![1; tokens.len()];
    *types.last_mut().unwrap() = 3;
    let end = tokens.len() as u32 - 1;
    Tokenizer::new(tokens, types, merges, None, Some(end)).expect("a valid small vocabulary")
}

#[test]
fn stream_decoder_holds_back_characters_split_over_tokens() {
    let tok = small_tokenizer(&[], &[]);
    let text = "aé中😀";
    let ids = tok.encode(text, false);
    assert_eq!(ids, text.bytes().map(u32::from).collect::<Vec<_>>(), "no merges: one token per byte");
    let mut stream = StreamDecoder::new(&tok);
    let pieces: Vec<String> = ids.iter().map(|&id| stream.push(id).unwrap()).collect();
    assert_eq!(pieces, ["a", "", "é", "", "", "中", "", "", "", "😀"]);
    assert_eq!(stream.finish(), "");
}

#[test]
fn stream_decoder_replaces_invalid_bytes_like_decode() {
    let tok = small_tokenizer(&[], &[]);
    let ids = [0xFF, u32::from(b'a'), 0xE4, 0xB8, u32::from(b'b'), 0xF0, 0x9F];
    let mut stream = StreamDecoder::new(&tok);
    let pieces: Vec<String> = ids.iter().map(|&id| stream.push(id).unwrap()).collect();
    // 0xFF can never start a character; E4 B8 is cut off by 'b'; F0 9F is cut off by the end.
    assert_eq!(pieces, ["\u{FFFD}", "a", "", "", "\u{FFFD}b", "", ""]);
    assert_eq!(stream.finish(), "\u{FFFD}");
    assert_eq!(tok.decode(&ids).unwrap(), "\u{FFFD}a\u{FFFD}b\u{FFFD}");

    // On any byte sequence, streaming gives exactly what decoding all at once gives.
    // Mostly bytes that make or break UTF-8 sequences.
    let bytes = [0x41, 0xC3, 0xA9, 0xE4, 0xB8, 0xAD, 0xF0, 0x9F, 0x98, 0x80, 0xFF, 0x80];
    let mut random = random_numbers(12345);
    for len in 0..300 {
        let ids: Vec<u32> = random.by_ref().take(len % 12).map(|x| bytes[(x % 12) as usize]).collect();
        let mut stream = StreamDecoder::new(&tok);
        let mut text: String = ids.iter().map(|&id| stream.push(id).unwrap()).collect();
        text += &stream.finish();
        assert_eq!(text, tok.decode(&ids).unwrap(), "{ids:x?}");
    }
}

#[test]
fn small_vocabulary_merges_and_control_tokens() {
    let tok =
        small_tokenizer(&["Ã©", "he", "hel", "hell", "hello", "Ġw"], &["Ã ©", "h e", "he l", "hel l", "hell o", "Ġ w"]);
    let [e_acute, hello, space_w, end] = [256, 260, 261, 262];
    assert_eq!(tok.encode("hello wé", false), [hello, space_w, e_acute]);
    // NFC first: e + combining acute is é, which has a merge
    assert_eq!(tok.encode("e\u{301}", false), [e_acute]);
    assert_eq!(tok.with_nfc(false).encode("e\u{301}", false), [u32::from(b'e'), 0xCC, 0x81]);
    let tok =
        small_tokenizer(&["Ã©", "he", "hel", "hell", "hello", "Ġw"], &["Ã ©", "h e", "he l", "hel l", "hell o", "Ġ w"]);
    assert_eq!(tok.encode("hello<|end|>", true), [hello, end]);
    assert_eq!(tok.encode("<|end|>", false).len(), 7);
    assert!(tok.is_eog(end) && tok.is_control(end) && !tok.is_control(hello));
    assert_eq!(tok.decode(&[hello, end]).unwrap(), "hello<|end|>");
}

#[test]
fn tokenizer_can_be_shared_between_threads() {
    fn shareable<T: Send + Sync>() {}
    shareable::<Tokenizer>();
    let tok = small_tokenizer(&["he"], &["h e"]);
    let results: Vec<Vec<u32>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..4).map(|_| s.spawn(|| tok.encode("he he he", false))).collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert!(results.iter().all(|r| r == &[256, 32, 256, 32, 256]), "{results:?}");
}

#[test]
fn bad_vocabularies_are_typed_errors() {
    let bytes = || (0..=255u8).map(|b| gpt2_char(b).to_string()).collect::<Vec<String>>();
    let none: &[&str] = &[];
    assert_eq!(
        Tokenizer::new(bytes(), vec![1; 255], none, None, None).err(),
        Some(TokenizerError::TypeCountMismatch { tokens: 256, types: 255 })
    );
    assert_eq!(
        Tokenizer::new(bytes(), vec![1; 256], none, Some(256), None).err(),
        Some(TokenizerError::SpecialIdOutOfRange { name: "BOS", id: 256, n_vocab: 256 })
    );
    assert_eq!(
        Tokenizer::new(bytes(), vec![1; 256], &["a b"], None, None).err(),
        Some(TokenizerError::MergeTokenUnknown { rank: 0, token: "ab".into() })
    );
    assert_eq!(
        Tokenizer::new(bytes(), vec![1; 256], &["ab"], None, None).err(),
        Some(TokenizerError::MalformedMerge { rank: 0, merge: "ab".into() })
    );
    assert_eq!(
        Tokenizer::new(bytes()[1..].to_vec(), vec![1; 255], none, None, None).err(),
        Some(TokenizerError::MissingByteToken(0))
    );
    let mut with_space = bytes();
    with_space.push("a b".into());
    assert_eq!(
        Tokenizer::new(with_space, vec![1; 257], none, None, None).err(),
        Some(TokenizerError::NotByteLevel { id: 256, token: "a b".into() })
    );
}

/// Counting within bounds gives the ids `encode` gives where the text fits them; a text whose
/// bytes alone make more tokens than the bound is refused with that lower bound, one with a
/// longer pre-token than the bound before its BPE.
#[test]
fn counting_within_bounds_is_encoding_or_a_refusal_before_the_work() {
    let Some(tok) = oracle_tokenizer() else { return };
    let Some(cases) = oracle_cases() else { return };
    let roomy = Within { tokens: 1 << 20, piece_bytes: 1 << 20 };
    for case in &cases {
        let mut ids = Vec::new();
        tok.encode_within(&case.text, roomy, &mut ids).unwrap();
        assert_eq!(ids, tok.encode(&case.text, false), "{:?}", case.text);
    }
    // The longest token's bytes bound a text's tokens from below.
    let text = "word ".repeat(2000);
    let n = tok.encode(&text, false).len();
    let mut ids = Vec::new();
    match tok.encode_within(&text, Within { tokens: 8, ..roomy }, &mut ids) {
        Err(Beyond::Tokens { at_least }) => assert!(at_least > 8 && at_least <= n, "{at_least} of {n}"),
        other => panic!("{other:?}"),
    }
    assert!(ids.is_empty(), "nothing counted");
    let run = "a".repeat(5000);
    assert_eq!(tok.encode_within(&run, Within { piece_bytes: 4096, ..roomy }, &mut ids), Err(Beyond::Piece(5000)));
    assert!(ids.is_empty());
}
