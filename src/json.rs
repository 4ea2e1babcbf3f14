//! Ordered JSON. tinyjson parses our inputs; its objects are hash maps, so output that people
//! read (and diff) is built with this instead, keys in the order they are given; and where the
//! order of an input's keys means something (a JSON schema's properties are generated in the
//! order they are written), [`parse_ordered`] reads it into this type.

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

    /// The value of `key` in an object (its first).
    pub fn get(&self, key: &str) -> Option<&Json> {
        match self {
            Json::Obj(fields) => fields.iter().find(|(k, _)| k == key).map(|(_, v)| v),
            _ => None,
        }
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

/// Parses JSON keeping each object's keys in their order (duplicates kept: the reader decides),
/// refusing nesting deeper than `max_depth`. Integers that fit are `Int`, other numbers `Num`.
pub fn parse_ordered(text: &str, max_depth: usize) -> Result<Json, String> {
    let mut p = Parser { bytes: text.as_bytes(), at: 0, max_depth };
    let value = p.value(0)?;
    p.space();
    match p.at == p.bytes.len() {
        true => Ok(value),
        false => Err(p.error("text after the JSON value")),
    }
}

struct Parser<'a> {
    bytes: &'a [u8],
    at: usize,
    max_depth: usize,
}

impl Parser<'_> {
    fn error(&self, what: &str) -> String {
        format!("{what} at byte {}", self.at)
    }

    fn space(&mut self) {
        while self.bytes.get(self.at).is_some_and(|b| matches!(b, b' ' | b'\t' | b'\n' | b'\r')) {
            self.at += 1;
        }
    }

    fn eat(&mut self, b: u8) -> bool {
        self.space();
        let hit = self.bytes.get(self.at) == Some(&b);
        self.at += usize::from(hit);
        hit
    }

    fn literal(&mut self, word: &str, value: Json) -> Result<Json, String> {
        match self.bytes[self.at..].starts_with(word.as_bytes()) {
            true => {
                self.at += word.len();
                Ok(value)
            }
            false => Err(self.error("not a JSON value")),
        }
    }

    fn value(&mut self, depth: usize) -> Result<Json, String> {
        self.space();
        let Some(&b) = self.bytes.get(self.at) else { return Err(self.error("the JSON ends early")) };
        if matches!(b, b'[' | b'{') && depth >= self.max_depth {
            return Err(format!("JSON nested deeper than {} levels", self.max_depth));
        }
        match b {
            b'{' => {
                self.at += 1;
                let mut pairs = Vec::new();
                if self.eat(b'}') {
                    return Ok(Json::Obj(pairs));
                }
                loop {
                    self.space();
                    let key = self.string()?;
                    if !self.eat(b':') {
                        return Err(self.error("expected ':'"));
                    }
                    pairs.push((key, self.value(depth + 1)?));
                    if self.eat(b'}') {
                        return Ok(Json::Obj(pairs));
                    }
                    if !self.eat(b',') {
                        return Err(self.error("expected ',' or '}'"));
                    }
                }
            }
            b'[' => {
                self.at += 1;
                let mut items = Vec::new();
                if self.eat(b']') {
                    return Ok(Json::Arr(items));
                }
                loop {
                    items.push(self.value(depth + 1)?);
                    if self.eat(b']') {
                        return Ok(Json::Arr(items));
                    }
                    if !self.eat(b',') {
                        return Err(self.error("expected ',' or ']'"));
                    }
                }
            }
            b'"' => Ok(Json::Str(self.string()?)),
            b't' => self.literal("true", Json::Bool(true)),
            b'f' => self.literal("false", Json::Bool(false)),
            b'n' => self.literal("null", Json::Null),
            _ => self.number(),
        }
    }

    fn number(&mut self) -> Result<Json, String> {
        let start = self.at;
        let digits = |p: &mut Self| {
            let from = p.at;
            while p.bytes.get(p.at).is_some_and(u8::is_ascii_digit) {
                p.at += 1;
            }
            p.at > from
        };
        self.at += usize::from(self.bytes.get(self.at) == Some(&b'-'));
        let leading_zero = self.bytes.get(self.at) == Some(&b'0');
        if !digits(self) || (leading_zero && self.at - start > 1 + usize::from(self.bytes[start] == b'-')) {
            return Err(self.error("not a JSON value"));
        }
        let mut integer = true;
        if self.bytes.get(self.at) == Some(&b'.') {
            self.at += 1;
            integer = false;
            if !digits(self) {
                return Err(self.error("a digit must follow '.'"));
            }
        }
        if matches!(self.bytes.get(self.at), Some(b'e' | b'E')) {
            self.at += 1;
            integer = false;
            self.at += usize::from(matches!(self.bytes.get(self.at), Some(b'+' | b'-')));
            if !digits(self) {
                return Err(self.error("a digit must follow the exponent"));
            }
        }
        // The bytes are ASCII digits, signs, '.' and 'e': valid UTF-8.
        let text = std::str::from_utf8(&self.bytes[start..self.at]).map_err(|_| self.error("not a number"))?;
        if integer {
            if let Ok(i) = text.parse::<i128>() {
                return Ok(Json::Int(i));
            }
        }
        text.parse::<f64>().map(Json::Num).map_err(|_| self.error("not a number"))
    }

    fn string(&mut self) -> Result<String, String> {
        if self.bytes.get(self.at) != Some(&b'"') {
            return Err(self.error("expected a string"));
        }
        self.at += 1;
        let mut out: Vec<u8> = Vec::new();
        loop {
            let Some(&b) = self.bytes.get(self.at) else { return Err(self.error("the string does not end")) };
            self.at += 1;
            match b {
                b'"' => return String::from_utf8(out).map_err(|_| self.error("the string is not UTF-8")),
                b'\\' => {
                    let Some(&e) = self.bytes.get(self.at) else { return Err(self.error("the string does not end")) };
                    self.at += 1;
                    let c = match e {
                        b'"' => '"',
                        b'\\' => '\\',
                        b'/' => '/',
                        b'b' => '\u{8}',
                        b'f' => '\u{c}',
                        b'n' => '\n',
                        b'r' => '\r',
                        b't' => '\t',
                        b'u' => {
                            let hi = self.hex4()?;
                            let code = if (0xD800..0xDC00).contains(&hi) && self.bytes[self.at..].starts_with(b"\\u") {
                                self.at += 2;
                                let lo = self.hex4()?;
                                if !(0xDC00..0xE000).contains(&lo) {
                                    return Err(self.error("a lone surrogate"));
                                }
                                0x10000 + ((hi - 0xD800) << 10) + (lo - 0xDC00)
                            } else {
                                hi
                            };
                            char::from_u32(code).ok_or_else(|| self.error("a lone surrogate"))?
                        }
                        _ => return Err(self.error("an unknown escape")),
                    };
                    out.extend_from_slice(c.encode_utf8(&mut [0; 4]).as_bytes());
                }
                0..0x20 => return Err(self.error("a control character in a string")),
                _ => out.push(b),
            }
        }
    }

    fn hex4(&mut self) -> Result<u32, String> {
        let hex = self.bytes.get(self.at..self.at + 4).ok_or_else(|| self.error("a short \\u escape"))?;
        let text = std::str::from_utf8(hex).map_err(|_| self.error("a bad \\u escape"))?;
        let code = u32::from_str_radix(text, 16).map_err(|_| self.error("a bad \\u escape"))?;
        self.at += 4;
        Ok(code)
    }
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
    fn ordered_parse_keeps_key_order_and_reads_back_what_it_writes() {
        let text = r#" {"z":1, "a":[true,false,null,-0.5e2,"\u00e9\ud83d\ude00\n"],"m":{}} "#;
        let j = parse_ordered(text, 8).unwrap();
        let Json::Obj(pairs) = &j else { panic!("{j:?}") };
        let keys: Vec<&str> = pairs.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(keys, ["z", "a", "m"]);
        assert_eq!(
            pairs[1].1,
            Json::Arr(vec![Json::Bool(true), Json::Bool(false), Json::Null, Json::Num(-50.0), Json::str("é😀\n")])
        );
        assert_eq!(parse_ordered(&j.to_string_compact(), 8).unwrap(), j);
        for bad in ["", "{", "[1,]", "01", "1.", "\"\\ud800\"", "{\"a\" 1}", "[1] x", "\"\u{1}\"", "tru"] {
            assert!(parse_ordered(bad, 8).is_err(), "{bad:?}");
        }
        assert!(parse_ordered(&"[".repeat(10), 8).unwrap_err().contains("deeper than 8"));
    }

    #[test]
    fn untrusted_json_is_parsed_within_its_depth() {
        assert!(parse_untrusted(r#"{"a":[[1]],"s":"[[[[\"]]"}"#, 3).is_ok());
        let deep = "[".repeat(100_000);
        assert!(parse_untrusted(&deep, 64).unwrap_err().contains("deeper than 64"));
        assert!(parse_untrusted("{\"a\":", 64).is_err());
    }
}
