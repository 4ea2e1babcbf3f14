//! Ordered JSON output. tinyjson parses our inputs; its objects are hash maps, so output that
//! people read (and diff) is built with this instead, keys in the order they are given.

use std::fmt::Write;

#[derive(Clone, Debug, PartialEq)]
pub enum Json {
    Null,
    Bool(bool),
    /// Integers are kept exact (u64 offsets, i64 metadata).
    Int(i128),
    Num(f64),
    Str(String),
    Arr(Vec<Json>),
    Obj(Vec<(String, Json)>),
}

impl Json {
    /// An object from `(key, value)` pairs.
    pub fn obj<K: Into<String>>(pairs: impl IntoIterator<Item = (K, Json)>) -> Json {
        Json::Obj(pairs.into_iter().map(|(k, v)| (k.into(), v)).collect())
    }

    pub fn str(s: impl Into<String>) -> Json {
        Json::Str(s.into())
    }

    /// Compact text.
    pub fn to_string_compact(&self) -> String {
        let mut out = String::new();
        self.write(&mut out);
        out
    }

    fn write(&self, out: &mut String) {
        match self {
            Json::Null => out.push_str("null"),
            Json::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
            Json::Int(i) => {
                let _ = write!(out, "{i}");
            }
            // JSON has no NaN or infinity.
            Json::Num(x) if !x.is_finite() => out.push_str("null"),
            Json::Num(x) => {
                let _ = write!(out, "{x:?}");
            }
            Json::Str(s) => write_str(out, s),
            Json::Arr(items) => {
                out.push('[');
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    item.write(out);
                }
                out.push(']');
            }
            Json::Obj(pairs) => {
                out.push('{');
                for (i, (k, v)) in pairs.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    write_str(out, k);
                    out.push(':');
                    v.write(out);
                }
                out.push('}');
            }
        }
    }
}

/// Parses untrusted JSON with tinyjson, refusing nesting deeper than `max_depth` first:
/// tinyjson recurses once per level, so `[[[[…` would otherwise overflow the stack.
pub fn parse_untrusted(text: &str, max_depth: usize) -> Result<tinyjson::JsonValue, String> {
    let (mut depth, mut in_string, mut escaped) = (0usize, false, false);
    for b in text.bytes() {
        match (in_string, b) {
            (true, _) if escaped => escaped = false,
            (true, b'\\') => escaped = true,
            (true, b'"') | (false, b'"') => in_string = !in_string,
            (false, b'[' | b'{') => {
                depth += 1;
                if depth > max_depth {
                    return Err(format!("JSON nested deeper than {max_depth} levels"));
                }
            }
            (false, b']' | b'}') => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    text.parse().map_err(|e: tinyjson::JsonParseError| e.to_string())
}

fn write_str(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_ordered_escaped_json_that_tinyjson_reads_back() {
        let j = Json::obj([
            ("b", Json::Int(u64::MAX as i128)),
            ("a", Json::str("q\"\\\n\u{1}é")),
            ("n", Json::Arr(vec![Json::Num(0.5), Json::Num(f64::NAN), Json::Null, Json::Bool(true)])),
        ]);
        let text = j.to_string_compact();
        assert!(text.starts_with("{\"b\":18446744073709551615,\"a\":"));
        let parsed: tinyjson::JsonValue = text.parse().expect("valid JSON");
        let a: &String = parsed["a"].get().expect("string");
        assert_eq!(a, "q\"\\\n\u{1}é");
    }

    #[test]
    fn untrusted_json_is_parsed_within_its_depth() {
        assert!(parse_untrusted(r#"{"a":[[1]],"s":"[[[[\"]]"}"#, 3).is_ok());
        let deep = "[".repeat(100_000);
        assert!(parse_untrusted(&deep, 64).unwrap_err().contains("deeper than 64"));
        assert!(parse_untrusted("{\"a\":", 64).is_err());
    }
}
