//! JSON schemas the structured-output tests share.

/// A schema per keyword (or construct) hrx does not support, each refused naming it: the CLI
/// (exit 2) and the server (400) are held to every one.
pub const UNSUPPORTED: &[(&str, &str)] = &[
    ("pattern", r#"{"type":"string","pattern":"^a"}"#),
    ("format", r#"{"type":"string","format":"date"}"#),
    ("minLength", r#"{"type":"string","minLength":2}"#),
    ("multipleOf", r#"{"type":"integer","multipleOf":2}"#),
    ("exclusiveMinimum", r#"{"type":"integer","exclusiveMinimum":2}"#),
    ("exclusiveMaximum", r#"{"type":"integer","exclusiveMaximum":2}"#),
    ("minimum", r#"{"type":"number","minimum":0}"#),
    ("uniqueItems", r#"{"type":"array","uniqueItems":true}"#),
    ("prefixItems", r#"{"type":"array","prefixItems":[]}"#),
    ("contains", r#"{"type":"array","contains":{}}"#),
    ("minProperties", r#"{"type":"object","minProperties":1}"#),
    ("maxProperties", r#"{"type":"object","maxProperties":1}"#),
    ("patternProperties", r#"{"type":"object","patternProperties":{}}"#),
    ("propertyNames", r#"{"type":"object","propertyNames":{}}"#),
    ("dependentRequired", r#"{"type":"object","dependentRequired":{}}"#),
    ("additionalProperties as a schema", r#"{"type":"object","additionalProperties":{"type":"string"}}"#),
    ("anyOf", r#"{"anyOf":[{"type":"string"}]}"#),
    ("oneOf", r#"{"oneOf":[{"type":"string"}]}"#),
    ("allOf", r#"{"allOf":[{"type":"string"}]}"#),
    ("not", r#"{"not":{"type":"string"}}"#),
    ("if", r#"{"if":{"type":"string"}}"#),
    ("type lists", r#"{"type":["string","null"]}"#),
    ("maxLength beside enum", r#"{"type":"string","enum":["a"],"maxLength":1}"#),
    ("refers to itself", r##"{"$defs":{"a":{"$ref":"#/$defs/a"}},"$ref":"#/$defs/a"}"##),
    ("$id", r#"{"$id":"x","type":"string"}"#),
    (
        "deeper than 12",
        r#"{"type":"array","items":{"type":"array","items":{"type":"array","items":{"type":"array","items":{"type":"array","items":{"type":"array","items":{"type":"array","items":{"type":"array","items":{"type":"array","items":{"type":"array","items":{"type":"array","items":{"type":"array","items":{"type":"array"}}}}}}}}}}}}}"#,
    ),
];
