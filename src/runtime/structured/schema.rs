//! A JSON schema read into the nodes the grammar walks: the subset hrx guarantees, and every
//! other keyword refused by name (a schema is never followed only in part).
//!
//! Supported: `type` object (`properties`, `required`, `additionalProperties`: true or false),
//! array (`items`, `minItems`, `maxItems`), string (`maxLength`), number, integer (`minimum`,
//! `maximum`), boolean, null; `enum` and `const` (with `type`); `$ref` to `#/$defs/NAME` or
//! `#/definitions/NAME` (not recursive); the annotations `title`, `description`, `$comment`,
//! `examples`, `default` and, at the root, `$schema`. An object is written with its declared
//! properties only, in the order the schema gives them (a valid document under
//! `additionalProperties` true as well); `{}` and `{"type":"object"}` alone are any value and any
//! object.

use crate::json::Json;
use std::fmt;

pub type NodeId = u16;

/// How deep objects and arrays may nest, in a schema and in the documents generated (a free
/// value, as in `json_object`, holds only scalars past it).
pub const MAX_DEPTH: usize = 12;
/// The most digits of an integer part or a fraction, and of an exponent: a number f64 reads
/// back exactly enough, and a model cannot write digits forever.
pub const MAX_DIGITS: u8 = 15;
pub const MAX_EXPONENT_DIGITS: u8 = 2;
/// The most properties of an object, values of an enum, and `$ref`s inside one another.
pub const MAX_PROPERTIES: usize = 4096;
pub const MAX_REF_CHAIN: usize = 64;
/// The widest integer range (`minimum` / `maximum` default to it): 15 digits.
pub const INTEGER_LIMIT: i64 = 999_999_999_999_999;

#[derive(Clone, Debug, PartialEq)]
pub enum Node {
    /// Declared properties, written in this order; the optional ones may be left out.
    Object {
        props: Vec<Prop>,
    },
    /// Any keys, any values (`{"type":"object"}`, `json_object`).
    AnyObject,
    Array {
        items: NodeId,
        min: u32,
        max: u32,
    },
    /// `max`: code points at most (`u32::MAX`: no limit).
    String {
        max: u32,
    },
    Number,
    Integer {
        min: i64,
        max: i64,
    },
    /// Exact texts, compact JSON: `enum`, `const`, `boolean`, `null`.
    Literals(Vec<Vec<u8>>),
    /// Any JSON value.
    Any,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Prop {
    /// `"name":` as it is written.
    pub key: Vec<u8>,
    pub value: NodeId,
    pub required: bool,
}

/// The nodes of a free value, at fixed places: `Any` dispatches to them.
pub const ANY: NodeId = 0;
pub const ANY_OBJECT: NodeId = 1;
pub const ANY_ARRAY: NodeId = 2;
pub const ANY_STRING: NodeId = 3;
pub const ANY_NUMBER: NodeId = 4;
pub const ANY_LITERAL: NodeId = 5;

/// A compiled schema: its nodes, the root, and the fewest bytes a value of each node takes.
#[derive(Debug)]
pub struct Schema {
    pub nodes: Vec<Node>,
    pub root: NodeId,
    pub min_len: Vec<u32>,
}

/// Why a schema is refused: where in it (`schema.properties.name`), and what.
#[derive(Clone, Debug, PartialEq)]
pub struct SchemaError {
    pub at: String,
    pub message: String,
}

impl fmt::Display for SchemaError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.at, self.message)
    }
}

impl std::error::Error for SchemaError {}

const ANNOTATIONS: &[&str] = &["title", "description", "$comment", "examples", "default"];

impl Schema {
    /// Any JSON object: `{"type":"json_object"}`.
    pub fn any_object() -> Schema {
        let mut s = Schema::base();
        s.root = ANY_OBJECT;
        s.finish()
    }

    /// Compiles `schema`; errors name the place, `at` being the schema's own (e.g. `schema`).
    pub fn compile(schema: &Json, at: &str) -> Result<Schema, SchemaError> {
        let mut s = Schema::base();
        let Json::Obj(root) = schema else { return Err(err(at, "a schema must be a JSON object")) };
        let mut defs = Vec::new();
        for key in ["$defs", "definitions"] {
            if let Some(d) = get(root, key) {
                let Json::Obj(pairs) = d else { return Err(err(at, format!("{key} must be an object"))) };
                defs.extend(pairs.iter().map(|(name, v)| (format!("#/{key}/{name}"), v)));
            }
        }
        let mut c = Compiler { schema: &mut s, defs: &defs, resolving: Vec::new() };
        let root = c.node(schema, at, 0, true)?;
        s.root = root;
        Ok(s.finish())
    }

    fn base() -> Schema {
        let nodes = vec![
            Node::Any,
            Node::AnyObject,
            Node::Array { items: ANY, min: 0, max: u32::MAX },
            Node::String { max: u32::MAX },
            Node::Number,
            Node::Literals(vec![b"true".to_vec(), b"false".to_vec(), b"null".to_vec()]),
        ];
        Schema { nodes, root: ANY, min_len: Vec::new() }
    }

    /// Fills `min_len`: children come before their parents in `nodes` (compiled bottom-up),
    /// and the free nodes take a 1-byte `0` or a 2-byte `{}` / `[]` / `""`.
    fn finish(mut self) -> Schema {
        let mut min = Vec::with_capacity(self.nodes.len());
        for node in &self.nodes {
            let len = match node {
                Node::Any | Node::Number => 1,
                Node::AnyObject | Node::String { .. } => 2,
                Node::Array { items, min: n, .. } => {
                    2 + n * min.get(usize::from(*items)).copied().unwrap_or(1) + n.saturating_sub(1)
                }
                Node::Integer { min: lo, max: hi } => integer_min_len(*lo, *hi),
                Node::Literals(alts) => alts.iter().map(|a| a.len() as u32).min().unwrap_or(0),
                Node::Object { props } => {
                    let required: Vec<u32> = props
                        .iter()
                        .filter(|p| p.required)
                        .map(|p| p.key.len() as u32 + min.get(usize::from(p.value)).copied().unwrap_or(1))
                        .collect();
                    2 + required.iter().sum::<u32>() + (required.len() as u32).saturating_sub(1)
                }
            };
            min.push(len);
        }
        self.min_len = min;
        self
    }

    pub fn node(&self, id: NodeId) -> &Node {
        // Ids are made by `compile` and index `nodes`.
        &self.nodes[usize::from(id)]
    }

    pub fn min_len(&self, id: NodeId) -> u32 {
        self.min_len[usize::from(id)]
    }
}

/// The length of the shortest integer text in [lo, hi] (lo <= hi).
fn integer_min_len(lo: i64, hi: i64) -> u32 {
    let len = |v: i64| v.to_string().len() as u32;
    if lo <= 0 && hi >= 0 {
        1
    } else if lo > 0 {
        len(lo)
    } else {
        len(hi)
    }
}

fn err(at: &str, message: impl Into<String>) -> SchemaError {
    SchemaError { at: at.to_owned(), message: message.into() }
}

fn get<'a>(pairs: &'a [(String, Json)], key: &str) -> Option<&'a Json> {
    pairs.iter().find(|(k, _)| k == key).map(|(_, v)| v)
}

struct Compiler<'a, 'd> {
    schema: &'a mut Schema,
    defs: &'a [(String, &'d Json)],
    /// The `$ref`s being compiled, outermost first: one seen again is a recursion.
    resolving: Vec<String>,
}

impl Compiler<'_, '_> {
    fn push(&mut self, node: Node) -> Result<NodeId, SchemaError> {
        let id =
            NodeId::try_from(self.schema.nodes.len()).map_err(|_| err("schema", "the schema has too many parts"))?;
        self.schema.nodes.push(node);
        Ok(id)
    }

    /// A value's node; `depth`: objects and arrays around it.
    fn node(&mut self, value: &Json, at: &str, depth: usize, root: bool) -> Result<NodeId, SchemaError> {
        let Json::Obj(pairs) = value else {
            return Err(err(at, "a schema must be a JSON object (true and false schemas are not supported)"));
        };
        let mut seen: Vec<&str> = Vec::new();
        for (k, _) in pairs {
            if seen.contains(&k.as_str()) {
                return Err(err(at, format!("{k} is given twice")));
            }
            seen.push(k);
        }
        let keywords: Vec<&str> = pairs
            .iter()
            .map(|(k, _)| k.as_str())
            .filter(|k| !(ANNOTATIONS.contains(k) || (root && matches!(*k, "$schema" | "$defs" | "definitions"))))
            .collect();
        let has = |k: &str| keywords.contains(&k);
        if let Some(Json::Str(target)) = get(pairs, "$ref") {
            if let Some(other) = keywords.iter().find(|k| **k != "$ref") {
                return Err(err(at, format!("{other} beside $ref is not supported")));
            }
            return self.reference(target, at, depth);
        }
        if has("$ref") {
            return Err(err(at, "$ref must be a string"));
        }
        let kind = match get(pairs, "type") {
            None => None,
            Some(Json::Str(t)) => Some(t.as_str()),
            Some(Json::Arr(_)) => return Err(err(at, "type lists (unions of types) are not supported: give one type")),
            Some(_) => return Err(err(at, "type must be a string")),
        };
        if has("enum") || has("const") {
            return self.literals(pairs, &keywords, kind, at);
        }
        let kind = kind.or(if has("properties") || has("required") || has("additionalProperties") {
            Some("object")
        } else if has("items") || has("minItems") || has("maxItems") {
            Some("array")
        } else if has("maxLength") {
            Some("string")
        } else if has("minimum") || has("maximum") {
            Some("integer")
        } else {
            None
        });
        let allowed: &[&str] = match kind {
            None => &[],
            Some("object") => &["type", "properties", "required", "additionalProperties"],
            Some("array") => &["type", "items", "minItems", "maxItems"],
            Some("string") => &["type", "maxLength"],
            Some("integer") => &["type", "minimum", "maximum"],
            Some("number" | "boolean" | "null") => &["type"],
            Some(other) => return Err(err(at, format!("type {other:?} is not a JSON schema type"))),
        };
        if let Some(k) = keywords.iter().find(|k| !allowed.contains(k)) {
            return Err(err(at, unsupported(k, kind)));
        }
        let nested = |depth: usize| match depth < MAX_DEPTH {
            true => Ok(depth + 1),
            false => Err(err(at, format!("the schema nests objects and arrays deeper than {MAX_DEPTH} levels"))),
        };
        match kind {
            None => Ok(ANY),
            Some("object") => {
                let depth = nested(depth)?;
                self.object(pairs, at, depth)
            }
            Some("array") => {
                let depth = nested(depth)?;
                let items = match get(pairs, "items") {
                    None => ANY,
                    Some(v) => self.node(v, &format!("{at}.items"), depth, false)?,
                };
                let min = count(pairs, "minItems", at)?.unwrap_or(0);
                let max = count(pairs, "maxItems", at)?.unwrap_or(u32::MAX);
                if min > max {
                    return Err(err(at, format!("minItems {min} is over maxItems {max}")));
                }
                self.push(Node::Array { items, min, max })
            }
            Some("string") => {
                let max = count(pairs, "maxLength", at)?.unwrap_or(u32::MAX);
                self.push(Node::String { max })
            }
            Some("integer") => {
                let bound = |key: &str, default: i64| match get(pairs, key) {
                    None => Ok(default),
                    Some(Json::Int(i)) if i.unsigned_abs() <= INTEGER_LIMIT as u128 => Ok(*i as i64),
                    Some(_) => Err(err(at, format!("{key} must be an integer of at most 15 digits"))),
                };
                let (min, max) = (bound("minimum", -INTEGER_LIMIT)?, bound("maximum", INTEGER_LIMIT)?);
                if min > max {
                    return Err(err(at, format!("minimum {min} is over maximum {max}")));
                }
                self.push(Node::Integer { min, max })
            }
            Some("number") => Ok(ANY_NUMBER),
            Some("boolean") => self.push(Node::Literals(vec![b"true".to_vec(), b"false".to_vec()])),
            _ => self.push(Node::Literals(vec![b"null".to_vec()])),
        }
    }

    fn object(&mut self, pairs: &[(String, Json)], at: &str, depth: usize) -> Result<NodeId, SchemaError> {
        let closed = match get(pairs, "additionalProperties") {
            None | Some(Json::Bool(true)) => false,
            Some(Json::Bool(false)) => true,
            Some(_) => {
                return Err(err(at, "additionalProperties as a schema is not supported (true or false)"));
            }
        };
        let props = match get(pairs, "properties") {
            None => &[][..],
            Some(Json::Obj(p)) => p.as_slice(),
            Some(_) => return Err(err(at, "properties must be an object")),
        };
        let required: Vec<&str> = match get(pairs, "required") {
            None => Vec::new(),
            Some(Json::Arr(names)) => names
                .iter()
                .map(|n| if let Json::Str(s) = n { Ok(s.as_str()) } else { Err(err(at, "required must list strings")) })
                .collect::<Result<_, _>>()?,
            Some(_) => return Err(err(at, "required must be an array of names")),
        };
        if let Some(name) = required.iter().find(|r| !props.iter().any(|(k, _)| k == *r)) {
            return Err(err(at, format!("required names {name:?}, which properties does not define")));
        }
        if props.is_empty() && !closed {
            return Ok(ANY_OBJECT);
        }
        if props.len() > MAX_PROPERTIES {
            return Err(err(at, format!("more than {MAX_PROPERTIES} properties are not supported")));
        }
        let mut out = Vec::with_capacity(props.len());
        for (name, value) in props {
            let value = self.node(value, &format!("{at}.properties.{name}"), depth, false)?;
            let key = format!("{}:", Json::str(name).to_string_compact()).into_bytes();
            out.push(Prop { key, value, required: required.contains(&name.as_str()) });
        }
        self.push(Node::Object { props: out })
    }

    fn literals(
        &mut self,
        pairs: &[(String, Json)],
        keywords: &[&str],
        kind: Option<&str>,
        at: &str,
    ) -> Result<NodeId, SchemaError> {
        if let Some(k) = keywords.iter().find(|k| !matches!(**k, "type" | "enum" | "const")) {
            return Err(err(at, format!("{k} beside enum or const is not supported (only type)")));
        }
        let values: Vec<&Json> = match (get(pairs, "enum"), get(pairs, "const")) {
            (Some(_), Some(_)) => return Err(err(at, "enum and const together are not supported")),
            (Some(Json::Arr(items)), None) => items.iter().collect(),
            (Some(_), None) => return Err(err(at, "enum must be an array")),
            (None, Some(v)) => vec![v],
            (None, None) => Vec::new(),
        };
        let fits = |v: &Json| {
            matches!(
                (kind, v),
                (None, _)
                    | (Some("string"), Json::Str(_))
                    | (Some("boolean"), Json::Bool(_))
                    | (Some("null"), Json::Null)
                    | (Some("integer"), Json::Int(_))
                    | (Some("number"), Json::Int(_) | Json::Num(_))
                    | (Some("object"), Json::Obj(_))
                    | (Some("array"), Json::Arr(_))
            )
        };
        let mut alts: Vec<Vec<u8>> = Vec::new();
        for v in values.into_iter().filter(|v| fits(v)) {
            let text = v.to_string_compact().into_bytes();
            if !alts.contains(&text) {
                alts.push(text);
            }
        }
        if alts.is_empty() {
            return Err(err(at, "no value of enum or const has the schema's type"));
        }
        if alts.len() > MAX_PROPERTIES {
            return Err(err(at, format!("an enum of more than {MAX_PROPERTIES} values is not supported")));
        }
        self.push(Node::Literals(alts))
    }

    fn reference(&mut self, target: &str, at: &str, depth: usize) -> Result<NodeId, SchemaError> {
        if self.resolving.iter().any(|r| r == target) {
            return Err(err(at, format!("$ref {target:?} refers to itself (recursive schemas are not supported)")));
        }
        let Some(&(_, def)) = self.defs.iter().find(|(name, _)| name == target) else {
            return Err(err(at, format!("$ref {target:?} is not one of the root's $defs (#/$defs/NAME)")));
        };
        if self.resolving.len() == MAX_REF_CHAIN {
            return Err(err(at, format!("$refs nest deeper than {MAX_REF_CHAIN}")));
        }
        self.resolving.push(target.to_owned());
        let id = self.node(def, &format!("{at}($ref {target})"), depth, false);
        self.resolving.pop();
        id
    }
}

/// A non-negative integer keyword.
fn count(pairs: &[(String, Json)], key: &str, at: &str) -> Result<Option<u32>, SchemaError> {
    match get(pairs, key) {
        None => Ok(None),
        Some(Json::Int(n)) if (0..=i128::from(u32::MAX - 1)).contains(n) => Ok(Some(*n as u32)),
        Some(_) => Err(err(at, format!("{key} must be a non-negative integer"))),
    }
}

/// The refusal of keyword `k` on a schema of type `kind`.
fn unsupported(k: &str, kind: Option<&str>) -> String {
    let on = kind.map_or(String::new(), |t| format!(" on type {t}"));
    let hint = match k {
        "minimum" | "maximum" => " (minimum and maximum are supported on integers)",
        "anyOf" | "oneOf" | "allOf" | "not" | "if" | "then" | "else" => " (no combinations of schemas)",
        _ => "",
    };
    format!("the keyword {k} is not supported{on}{hint}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::json::parse_ordered;

    fn compile(text: &str) -> Result<Schema, SchemaError> {
        Schema::compile(&parse_ordered(text, 32).unwrap(), "schema")
    }

    #[test]
    fn objects_keep_their_order_and_refs_are_inlined() {
        let s = compile(
            r##"{"type":"object","properties":{"z":{"$ref":"#/$defs/n"},"a":{"type":"string","maxLength":3}},
                "required":["a"],"$defs":{"n":{"type":"integer","minimum":-5,"maximum":20}}}"##,
        )
        .unwrap();
        let Node::Object { props } = s.node(s.root) else { panic!("{:?}", s.nodes) };
        assert_eq!(props[0].key, b"\"z\":");
        assert_eq!((props[0].required, props[1].required), (false, true));
        assert_eq!(*s.node(props[0].value), Node::Integer { min: -5, max: 20 });
        assert_eq!(*s.node(props[1].value), Node::String { max: 3 });
        // {"a":""}
        assert_eq!(s.min_len(s.root), 8);
    }

    #[test]
    fn enums_are_exact_texts_of_the_type() {
        let s = compile(r#"{"type":"string","enum":["a","b\"",3]}"#).unwrap();
        assert_eq!(*s.node(s.root), Node::Literals(vec![b"\"a\"".to_vec(), b"\"b\\\"\"".to_vec()]));
        assert!(compile(r#"{"type":"string","enum":[1]}"#).unwrap_err().message.contains("no value"));
    }

    #[test]
    fn recursion_and_deep_nesting_are_refused() {
        let e = compile(r##"{"$defs":{"t":{"type":"array","items":{"$ref":"#/$defs/t"}}},"$ref":"#/$defs/t"}"##);
        assert!(e.unwrap_err().message.contains("refers to itself"));
        let deep = format!("{}{{}}{}", r#"{"type":"array","items":"#.repeat(13), "}".repeat(13));
        assert!(compile(&deep).unwrap_err().message.contains("deeper than 12"));
        let chain: Vec<String> = (0..100).map(|i| format!(r##""d{i}":{{"$ref":"#/$defs/d{}"}}"##, i + 1)).collect();
        let chain = format!(r##"{{"$defs":{{{},"d100":{{}}}},"$ref":"#/$defs/d0"}}"##, chain.join(","));
        assert!(compile(&chain).unwrap_err().message.contains("$refs nest deeper than 64"));
        let wide: Vec<String> = (0..5000).map(|i| format!(r#""p{i}":{{}}"#)).collect();
        let wide = format!(r#"{{"type":"object","properties":{{{}}}}}"#, wide.join(","));
        assert!(compile(&wide).unwrap_err().message.contains("more than 4096 properties"));
    }
}
