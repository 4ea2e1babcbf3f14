//! The byte automaton of a compiled schema: a stack of frames, one per value being written,
//! that takes the document one byte at a time (compact JSON: no whitespace), says whether a
//! byte keeps the output a prefix of a valid document, and how many bytes at least close it.

use super::schema::{
    Node, NodeId, Schema, ANY_ARRAY, ANY_LITERAL, ANY_NUMBER, ANY_OBJECT, ANY_STRING, INTEGER_LIMIT, MAX_DEPTH,
    MAX_DIGITS, MAX_EXPONENT_DIGITS,
};

/// Where a declared object is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ObjPhase {
    /// After `{`.
    Open,
    /// Matching the key of property `prop` (the first that fits the bytes so far), `pos` bytes in.
    Key { prop: u16, pos: u16 },
    /// After a value: `,` or `}`.
    AfterValue,
    /// After `,`: a key.
    AfterComma,
}

/// Where a free object is (keys are strings of their own frame).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FreePhase {
    Open,
    /// After a key: `:`.
    AfterKey,
    AfterValue,
    AfterComma,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ArrPhase {
    Open,
    AfterItem,
    AfterComma,
}

/// Inside a string: what the next bytes must finish.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Pending {
    None,
    /// After `\`.
    Escape,
    /// `\u` and `done` hex digits; `surrogate`: the first was `d` (a surrogate half, refused).
    Hex {
        done: u8,
        surrogate: bool,
    },
    /// `left` continuation bytes of a UTF-8 character, the next in `lo..=hi`.
    Utf8 {
        left: u8,
        lo: u8,
        hi: u8,
    },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum NumPhase {
    Start,
    Sign,
    Zero,
    Int(u8),
    Dot,
    Frac(u8),
    Exp,
    ExpSign,
    ExpDigits(u8),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Frame {
    /// Before the first byte of a value of `node`.
    Value {
        node: NodeId,
    },
    Object {
        node: NodeId,
        next: u16,
        phase: ObjPhase,
    },
    FreeObject {
        phase: FreePhase,
    },
    Array {
        node: NodeId,
        count: u32,
        phase: ArrPhase,
    },
    Str {
        max: u32,
        chars: u32,
        pending: Pending,
    },
    Num {
        phase: NumPhase,
    },
    /// `digits` written (0: none yet, maybe a `-`); `value`: their magnitude.
    Int {
        node: NodeId,
        negative: bool,
        value: i64,
        digits: u8,
    },
    /// Literal texts of `node`: `pos` bytes of `alt` (the first that fits them) written.
    Lit {
        node: NodeId,
        alt: u16,
        pos: u16,
    },
}

/// What a frame does with a byte.
enum Step {
    /// Took it; the frame is now this.
    Next(Frame),
    /// Took it; the frame is now the first, and the second (a value) starts above it.
    Open(Frame, Frame),
    /// The frame is now the first; the second starts above it and takes the byte.
    Enter(Frame, Frame),
    /// Took it and ended.
    Close,
    /// Ended before it: the frame below takes the byte.
    End,
    Dead,
}

/// The result of feeding a byte to a stack.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fed {
    Live,
    Dead,
    /// The bottom frame of a stack that stands for the top of another ended: with `taken`, it
    /// took the byte, else the byte is for the frame under it.
    Exited {
        taken: bool,
    },
}

/// The frames of a document being written, bottom first; `base`: frames under them that are
/// not here (when the top frame of a document is walked alone, see `mask`), which count for
/// depth; `detached`: the bottom frame ends into those ([`Fed::Exited`]) rather than ending the
/// document.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Stack {
    pub frames: Vec<Frame>,
    pub base: u8,
    pub detached: bool,
}

impl Stack {
    /// A document of `schema`, before its first byte.
    pub fn start(schema: &Schema) -> Stack {
        Stack { frames: vec![Frame::Value { node: schema.root }], base: 0, detached: false }
    }

    /// Feeds one byte.
    pub fn feed(&mut self, g: &Schema, b: u8) -> Fed {
        loop {
            let depth = usize::from(self.base) + self.frames.len();
            let Some(top) = self.frames.last_mut() else { return Fed::Dead };
            match step(g, *top, b, depth) {
                Step::Next(f) => {
                    *top = f;
                    return Fed::Live;
                }
                Step::Open(f, child) => {
                    *top = f;
                    self.frames.push(child);
                    return Fed::Live;
                }
                Step::Enter(f, child) => {
                    *top = f;
                    self.frames.push(child);
                }
                Step::Close => {
                    self.frames.pop();
                    if self.frames.is_empty() && self.detached {
                        return Fed::Exited { taken: true };
                    }
                    return Fed::Live;
                }
                Step::End => {
                    self.frames.pop();
                    if self.frames.is_empty() && self.detached {
                        return Fed::Exited { taken: false };
                    }
                }
                Step::Dead => return Fed::Dead,
            }
        }
    }

    /// Feeds bytes; false when one is refused (or the bottom frame ends).
    pub fn feed_all(&mut self, g: &Schema, bytes: &[u8]) -> bool {
        bytes.iter().all(|&b| self.feed(g, b) == Fed::Live)
    }

    /// The fewest bytes that finish the document (exactly: the shortest completion's length).
    pub fn close_len(&self, g: &Schema) -> u32 {
        self.frames.iter().map(|f| close_len(g, *f)).sum()
    }

    /// Whether the bytes so far are a whole document (it may go on: `12` may become `123`).
    pub fn is_complete(&self, g: &Schema) -> bool {
        match self.frames.as_slice() {
            [] => true,
            [only] => can_end(g, *only),
            _ => false,
        }
    }

    /// Whether any byte may follow.
    pub fn is_open(&self) -> bool {
        !self.frames.is_empty()
    }

    /// The shortest bytes that finish the document, the lowest byte first where several do.
    pub fn closing(&self, g: &Schema) -> Vec<u8> {
        let mut s = self.clone();
        let mut out = Vec::new();
        let mut need = s.close_len(g);
        while need > 0 {
            let next = (0..=255u8).find_map(|b| {
                let mut t = s.clone();
                (t.feed(g, b) == Fed::Live && t.close_len(g) + 1 == need).then_some((b, t))
            });
            // close_len is exact, so some byte takes a step towards the end; were it not, the
            // bytes so far still close what they can.
            let Some((b, t)) = next else { break };
            out.push(b);
            s = t;
            need -= 1;
        }
        out
    }
}

fn step(g: &Schema, frame: Frame, b: u8, depth: usize) -> Step {
    match frame {
        Frame::Value { node } => open(g, node, b, depth),
        Frame::Object { node, next, phase } => object(g, node, next, phase, b),
        Frame::FreeObject { phase } => free_object(phase, b),
        Frame::Array { node, count, phase } => array(g, node, count, phase, b),
        Frame::Str { max, chars, pending } => string(max, chars, pending, b),
        Frame::Num { phase } => number(phase, b),
        Frame::Int { node, negative, value, digits } => integer(g, node, negative, value, digits, b),
        Frame::Lit { node, alt, pos } => literal(g, node, alt, pos, b),
    }
}

/// The first byte of a value of `node`.
fn open(g: &Schema, node: NodeId, b: u8, depth: usize) -> Step {
    let into = |f: Frame| step(g, f, b, depth);
    match g.node(node) {
        Node::Object { .. } if b == b'{' => Step::Next(Frame::Object { node, next: 0, phase: ObjPhase::Open }),
        Node::AnyObject if b == b'{' => Step::Next(Frame::FreeObject { phase: FreePhase::Open }),
        Node::Array { .. } if b == b'[' => Step::Next(Frame::Array { node, count: 0, phase: ArrPhase::Open }),
        Node::String { max } if b == b'"' => Step::Next(Frame::Str { max: *max, chars: 0, pending: Pending::None }),
        Node::Number => into(Frame::Num { phase: NumPhase::Start }),
        Node::Integer { .. } => into(Frame::Int { node, negative: false, value: 0, digits: 0 }),
        Node::Literals(_) => into(Frame::Lit { node, alt: 0, pos: 0 }),
        Node::Any => {
            // Past the depth limit a free value is a scalar.
            let deep = depth >= MAX_DEPTH;
            let target = match b {
                b'{' if !deep => ANY_OBJECT,
                b'[' if !deep => ANY_ARRAY,
                b'"' => ANY_STRING,
                b'-' | b'0'..=b'9' => ANY_NUMBER,
                b't' | b'f' | b'n' => ANY_LITERAL,
                _ => return Step::Dead,
            };
            open(g, target, b, depth)
        }
        _ => Step::Dead,
    }
}

/// The properties that may come next in a declared object: from `next` up to and with the
/// first required one.
fn candidates(props: &[super::schema::Prop], next: u16) -> std::ops::Range<usize> {
    let from = usize::from(next).min(props.len());
    let to = props[from..].iter().position(|p| p.required).map_or(props.len(), |i| from + i + 1);
    from..to
}

fn object(g: &Schema, node: NodeId, next: u16, phase: ObjPhase, b: u8) -> Step {
    let Node::Object { props } = g.node(node) else { return Step::Dead };
    let range = candidates(props, next);
    let rest_optional = !props[range.start..].iter().any(|p| p.required);
    let at = |phase| Frame::Object { node, next, phase };
    match phase {
        ObjPhase::Open | ObjPhase::AfterComma if b == b'"' && !range.is_empty() => {
            Step::Next(at(ObjPhase::Key { prop: range.start as u16, pos: 1 }))
        }
        ObjPhase::Open | ObjPhase::AfterValue if b == b'}' && rest_optional => Step::Close,
        ObjPhase::AfterValue if b == b',' && !range.is_empty() => Step::Next(at(ObjPhase::AfterComma)),
        ObjPhase::Key { prop, pos } => {
            let (prop, pos) = (usize::from(prop), usize::from(pos));
            let written = &props[prop].key[..pos];
            let fit =
                (prop..range.end).find(|&j| props[j].key.starts_with(written) && props[j].key.get(pos) == Some(&b));
            let Some(j) = fit else { return Step::Dead };
            if pos + 1 == props[j].key.len() {
                let after = Frame::Object { node, next: j as u16 + 1, phase: ObjPhase::AfterValue };
                Step::Open(after, Frame::Value { node: props[j].value })
            } else {
                Step::Next(at(ObjPhase::Key { prop: j as u16, pos: pos as u16 + 1 }))
            }
        }
        _ => Step::Dead,
    }
}

fn free_object(phase: FreePhase, b: u8) -> Step {
    let at = |phase| Frame::FreeObject { phase };
    let key = Frame::Str { max: u32::MAX, chars: 0, pending: Pending::None };
    match (phase, b) {
        (FreePhase::Open | FreePhase::AfterComma, b'"') => Step::Open(at(FreePhase::AfterKey), key),
        (FreePhase::Open | FreePhase::AfterValue, b'}') => Step::Close,
        (FreePhase::AfterKey, b':') => Step::Open(at(FreePhase::AfterValue), Frame::Value { node: super::schema::ANY }),
        (FreePhase::AfterValue, b',') => Step::Next(at(FreePhase::AfterComma)),
        _ => Step::Dead,
    }
}

fn array(g: &Schema, node: NodeId, count: u32, phase: ArrPhase, b: u8) -> Step {
    let Node::Array { items, min, max } = *g.node(node) else { return Step::Dead };
    let item = || {
        Step::Enter(Frame::Array { node, count: count + 1, phase: ArrPhase::AfterItem }, Frame::Value { node: items })
    };
    match phase {
        ArrPhase::Open | ArrPhase::AfterItem if b == b']' && count >= min => Step::Close,
        ArrPhase::Open if max > 0 => item(),
        ArrPhase::AfterItem if b == b',' && count < max => {
            Step::Next(Frame::Array { node, count, phase: ArrPhase::AfterComma })
        }
        ArrPhase::AfterComma => item(),
        _ => Step::Dead,
    }
}

fn string(max: u32, chars: u32, pending: Pending, b: u8) -> Step {
    let at = |chars, pending| Step::Next(Frame::Str { max, chars, pending });
    // Characters are counted only where there is a limit: a free string stays one state.
    let char_starts = |pending| match max {
        u32::MAX => at(chars, pending),
        _ if chars < max => at(chars + 1, pending),
        _ => Step::Dead,
    };
    match pending {
        Pending::None => match b {
            b'"' => Step::Close,
            b'\\' => char_starts(Pending::Escape),
            0..0x20 => Step::Dead,
            0x20..0x80 => char_starts(Pending::None),
            0xC2..=0xDF => char_starts(Pending::Utf8 { left: 1, lo: 0x80, hi: 0xBF }),
            0xE0 => char_starts(Pending::Utf8 { left: 2, lo: 0xA0, hi: 0xBF }),
            0xED => char_starts(Pending::Utf8 { left: 2, lo: 0x80, hi: 0x9F }),
            0xE1..=0xEF => char_starts(Pending::Utf8 { left: 2, lo: 0x80, hi: 0xBF }),
            0xF0 => char_starts(Pending::Utf8 { left: 3, lo: 0x90, hi: 0xBF }),
            0xF1..=0xF3 => char_starts(Pending::Utf8 { left: 3, lo: 0x80, hi: 0xBF }),
            0xF4 => char_starts(Pending::Utf8 { left: 3, lo: 0x80, hi: 0x8F }),
            _ => Step::Dead,
        },
        Pending::Utf8 { left, lo, hi } if (lo..=hi).contains(&b) => match left {
            1 => at(chars, Pending::None),
            _ => at(chars, Pending::Utf8 { left: left - 1, lo: 0x80, hi: 0xBF }),
        },
        Pending::Escape => match b {
            b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => at(chars, Pending::None),
            b'u' => at(chars, Pending::Hex { done: 0, surrogate: false }),
            _ => Step::Dead,
        },
        Pending::Hex { done, surrogate } if b.is_ascii_hexdigit() => {
            if done == 1 && surrogate && !(b'0'..=b'7').contains(&b) {
                return Step::Dead;
            }
            match done {
                3 => at(chars, Pending::None),
                _ => at(chars, Pending::Hex { done: done + 1, surrogate: done == 0 && matches!(b, b'd' | b'D') }),
            }
        }
        _ => Step::Dead,
    }
}

fn number(phase: NumPhase, b: u8) -> Step {
    use NumPhase::*;
    let next = |p| Step::Next(Frame::Num { phase: p });
    match (phase, b) {
        (Start, b'-') => next(Sign),
        (Start | Sign, b'0') => next(Zero),
        (Start | Sign, b'1'..=b'9') => next(Int(1)),
        (Int(n), b'0'..=b'9') if n < MAX_DIGITS => next(Int(n + 1)),
        (Zero | Int(_), b'.') => next(Dot),
        (Dot, b'0'..=b'9') => next(Frac(1)),
        (Frac(n), b'0'..=b'9') if n < MAX_DIGITS => next(Frac(n + 1)),
        (Zero | Int(_) | Frac(_), b'e' | b'E') => next(Exp),
        (Exp, b'+' | b'-') => next(ExpSign),
        (Exp | ExpSign, b'0'..=b'9') => next(ExpDigits(1)),
        (ExpDigits(n), b'0'..=b'9') if n < MAX_EXPONENT_DIGITS => next(ExpDigits(n + 1)),
        (Zero | Int(_) | Frac(_) | ExpDigits(_), _) => Step::End,
        _ => Step::Dead,
    }
}

/// The fewest more digits (0 or more; at least one when none is written yet) that make the
/// integer written so far a value in `lo..=hi`, if any do.
fn integer_digits_needed(lo: i64, hi: i64, negative: bool, value: i64, digits: u8) -> Option<u32> {
    let first = u32::from(digits == 0);
    // A written 0 takes no more digits (no leading zeros).
    let most = if digits > 0 && value == 0 { 0 } else { u32::from(MAX_DIGITS - digits.min(MAX_DIGITS)) };
    (first..=most).find(|&k| {
        let p = 10i64.pow(k);
        // The magnitudes these k digits reach: value * 10^k + [0, 10^k - 1], no leading zero.
        let (mut from, to) = (value * p, value * p + p - 1);
        if digits == 0 {
            from = p / 10;
        }
        let to = to.min(INTEGER_LIMIT);
        let (a, z) = if negative { (-to, -from) } else { (from, to) };
        a <= z && a <= hi && z >= lo
    })
}

fn integer(g: &Schema, node: NodeId, negative: bool, value: i64, digits: u8, b: u8) -> Step {
    let Node::Integer { min, max } = *g.node(node) else { return Step::Dead };
    let fits = |negative, value, digits| integer_digits_needed(min, max, negative, value, digits).is_some();
    let next = |negative, value, digits| match fits(negative, value, digits) {
        true => Step::Next(Frame::Int { node, negative, value, digits }),
        false => Step::Dead,
    };
    match b {
        b'-' if digits == 0 && !negative => next(true, 0, 0),
        // No leading zeros, no -0.
        b'0' if digits == 0 && !negative => next(false, 0, 1),
        b'0'..=b'9' if (digits == 0 && b != b'0') || (digits > 0 && value > 0) => {
            next(negative, value * 10 + i64::from(b - b'0'), digits + 1)
        }
        _ if can_end(g, Frame::Int { node, negative, value, digits }) => Step::End,
        _ => Step::Dead,
    }
}

/// The alternatives of a literal frame that fit the bytes written so far.
fn fitting(alts: &[Vec<u8>], alt: u16, pos: u16) -> impl Iterator<Item = (usize, &Vec<u8>)> {
    let written = &alts[usize::from(alt)][..usize::from(pos)];
    alts.iter().enumerate().skip(usize::from(alt)).filter(move |(_, a)| a.starts_with(written))
}

fn literal(g: &Schema, node: NodeId, alt: u16, pos: u16, b: u8) -> Step {
    let Node::Literals(alts) = g.node(node) else { return Step::Dead };
    let Some((j, _)) = fitting(alts, alt, pos).find(|(_, a)| a.get(usize::from(pos)) == Some(&b)) else {
        return match can_end(g, Frame::Lit { node, alt, pos }) {
            true => Step::End,
            false => Step::Dead,
        };
    };
    let (alt, pos) = (j as u16, pos + 1);
    // A text that is whole and that no other one continues ends here.
    match fitting(alts, alt, pos).all(|(_, a)| a.len() == usize::from(pos)) {
        true => Step::Close,
        false => Step::Next(Frame::Lit { node, alt, pos }),
    }
}

/// Whether a frame may end before the next byte (a number, or a literal that another
/// continues).
fn can_end(g: &Schema, frame: Frame) -> bool {
    match frame {
        Frame::Num { phase } => {
            matches!(phase, NumPhase::Zero | NumPhase::Int(_) | NumPhase::Frac(_) | NumPhase::ExpDigits(_))
        }
        Frame::Int { node, negative, value, digits } => match *g.node(node) {
            Node::Integer { min, max } => integer_digits_needed(min, max, negative, value, digits) == Some(0),
            _ => false,
        },
        Frame::Lit { node, alt, pos } => match g.node(node) {
            Node::Literals(alts) => fitting(alts, alt, pos).any(|(_, a)| a.len() == usize::from(pos)),
            _ => false,
        },
        _ => false,
    }
}

/// The fewest bytes that finish a frame (the value above it finished).
fn close_len(g: &Schema, frame: Frame) -> u32 {
    match frame {
        Frame::Value { node } => g.min_len(node),
        Frame::Object { node, next, phase } => {
            let Node::Object { props } = g.node(node) else { return 0 };
            // `,"key":value` for each required property from `i` on.
            let required_from = |i: usize| -> u32 {
                props[i.min(props.len())..]
                    .iter()
                    .filter(|p| p.required)
                    .map(|p| 1 + p.key.len() as u32 + g.min_len(p.value))
                    .sum()
            };
            let next = usize::from(next);
            match phase {
                ObjPhase::Open => required_from(next).max(1),
                ObjPhase::AfterValue => 1 + required_from(next),
                ObjPhase::AfterComma => match required_from(next) {
                    0 => {
                        1 + candidates(props, next as u16)
                            .map(|j| props[j].key.len() as u32 + g.min_len(props[j].value))
                            .min()
                            .unwrap_or(0)
                    }
                    r => r,
                },
                ObjPhase::Key { prop, pos } => {
                    let (prop, pos) = (usize::from(prop), usize::from(pos));
                    let written = &props[prop].key[..pos];
                    (prop..candidates(props, next as u16).end)
                        .filter(|&j| props[j].key.starts_with(written))
                        .map(|j| {
                            (props[j].key.len() - pos) as u32 + g.min_len(props[j].value) + 1 + required_from(j + 1)
                        })
                        .min()
                        .unwrap_or(0)
                }
            }
        }
        Frame::FreeObject { phase } => match phase {
            FreePhase::Open | FreePhase::AfterValue => 1,
            // `:0}`
            FreePhase::AfterKey => 3,
            // `"":0}`
            FreePhase::AfterComma => 5,
        },
        Frame::Array { node, count, phase } => {
            let Node::Array { items, min, .. } = *g.node(node) else { return 0 };
            let item = g.min_len(items);
            match phase {
                ArrPhase::Open if min == 0 => 1,
                ArrPhase::Open => min * item + (min - 1) + 1,
                ArrPhase::AfterItem => min.saturating_sub(count) * (1 + item) + 1,
                ArrPhase::AfterComma => {
                    let n = min.saturating_sub(count).max(1);
                    n * item + (n - 1) + 1
                }
            }
        }
        Frame::Str { pending, .. } => {
            1 + match pending {
                Pending::None => 0,
                Pending::Escape => 1,
                Pending::Hex { done, .. } => 4 - u32::from(done),
                Pending::Utf8 { left, .. } => u32::from(left),
            }
        }
        Frame::Num { phase } => match phase {
            NumPhase::Start | NumPhase::Sign | NumPhase::Dot | NumPhase::Exp | NumPhase::ExpSign => 1,
            _ => 0,
        },
        Frame::Int { node, negative, value, digits } => match *g.node(node) {
            Node::Integer { min, max } => integer_digits_needed(min, max, negative, value, digits).unwrap_or(0),
            _ => 0,
        },
        Frame::Lit { node, alt, pos } => match g.node(node) {
            Node::Literals(alts) => {
                fitting(alts, alt, pos).map(|(_, a)| (a.len() - usize::from(pos)) as u32).min().unwrap_or(0)
            }
            _ => 0,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::json::parse_ordered;

    fn schema(text: &str) -> Schema {
        Schema::compile(&parse_ordered(text, 32).unwrap(), "schema").unwrap()
    }

    fn accepts(g: &Schema, text: &str) -> bool {
        let mut s = Stack::start(g);
        s.feed_all(g, text.as_bytes()) && s.is_complete(g)
    }

    #[test]
    fn documents_of_a_schema_are_taken_and_others_refused() {
        let g = schema(
            r#"{"type":"object","properties":{"n":{"type":"integer","minimum":-3,"maximum":250},
                "tags":{"type":"array","items":{"enum":["a","ab"]},"minItems":1,"maxItems":2},
                "s":{"type":"string","maxLength":2},"x":{"type":"number"},"b":{"type":"boolean"}},
                "required":["n","tags"],"additionalProperties":false}"#,
        );
        for good in [
            r#"{"n":250,"tags":["ab"]}"#,
            r#"{"n":-3,"tags":["a","ab"],"s":"é\n","x":-0.5e+12,"b":false}"#,
            r#"{"n":0,"tags":["a"],"b":true}"#,
            r#"{"n":7,"tags":["a"],"s":"\u00e9"}"#,
        ] {
            assert!(accepts(&g, good), "{good}");
        }
        for bad in [
            r#"{"tags":["a"],"n":1}"#,
            r#"{"n":251,"tags":["a"]}"#,
            r#"{"n":-4,"tags":["a"]}"#,
            r#"{"n":01,"tags":["a"]}"#,
            r#"{"n":1,"tags":[]}"#,
            r#"{"n":1,"tags":["a","a","a"]}"#,
            r#"{"n":1,"tags":["b"]}"#,
            r#"{"n":1,"tags":["a"],"s":"abc"}"#,
            r#"{"n":1,"tags":["a"],"z":1}"#,
            r#"{"n":1,"tags":["a"],"s":"\ud800"}"#,
            r#"{"n":1, "tags":["a"]}"#,
            r#"{"n":1,"tags":["a"]}x"#,
        ] {
            assert!(!accepts(&g, bad), "{bad}");
        }
        let mut s = Stack::start(&g);
        assert!(!s.feed_all(&g, b"{\"s\":\"\xff"));
    }

    #[test]
    fn the_shortest_closing_is_exact_and_closes() {
        let g = schema(
            r#"{"type":"object","properties":{"a":{"type":"array","items":{"type":"integer","minimum":120,"maximum":130},"minItems":2},
                "o":{"type":"object","properties":{"k":{"const":"xyz"}},"required":["k"]},"f":{}},"required":["a","o"]}"#,
        );
        let any = Schema::any_object();
        let cases: [(&Schema, &[u8]); 9] = [
            (&g, b""),
            (&g, b"{"),
            (&g, b"{\"a\":[1"),
            (&g, b"{\"a\":[125,"),
            (&g, b"{\"a\":[125,12"),
            (&g, b"{\"a\":[125,126],\"o\":{\"k\":\"x"),
            (&g, b"{\"a\":[125,126],\"o\":{\"k\":\"xyz\"},\"f\":[{\"\\u00"),
            (&any, b"{\"k\":[[-1.5e"),
            (&any, b"{\"\xe4"),
        ];
        for (g, prefix) in cases {
            let shown = String::from_utf8_lossy(prefix);
            let mut s = Stack::start(g);
            assert!(s.feed_all(g, prefix), "{shown}");
            let close = s.closing(g);
            assert_eq!(close.len() as u32, s.close_len(g), "{shown}");
            let mut t = s.clone();
            assert!(t.feed_all(g, &close) && t.is_complete(g), "{shown} + {}", String::from_utf8_lossy(&close));
            let whole = [prefix, &close].concat();
            assert!(std::str::from_utf8(&whole).unwrap().parse::<tinyjson::JsonValue>().is_ok(), "{shown}");
        }
    }
}
