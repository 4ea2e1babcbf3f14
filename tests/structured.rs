//! Structured output on the oracle models (random weights: they would write anything): for six
//! schemas, 50 runs sampled at temperature 1.0 over the whole vocabulary and a greedy one,
//! every answer parses (tinyjson, not hrx's parser) and validates (a validator of its own here,
//! over the schema as written); a budget of a few tokens still closes the document.

mod common;

use hrx::backend::DeviceChoice;
use hrx::json::parse_ordered;
use hrx::runtime::chat::{self, Message};
use hrx::runtime::generate::{generate, GenerateConfig, Generation, StopReason};
use hrx::runtime::sampler::SamplerConfig;
use hrx::runtime::session::{PromptPiece, Session};
use hrx::runtime::structured::JsonConstraint;
use hrx::runtime::text_model::{TextModel, TextOptions};
use std::collections::HashMap;
use std::sync::Arc;
use tinyjson::JsonValue;

const SCHEMAS: [&str; 6] = [
    // A record for a search index.
    r#"{"type":"object","properties":{"caption":{"type":"string","maxLength":40},
        "tags":{"type":"array","items":{"type":"string","maxLength":12},"minItems":1,"maxItems":3},
        "people":{"type":"integer","minimum":0,"maximum":20},"outdoor":{"type":"boolean"}},
        "required":["caption","tags","people","outdoor"],"additionalProperties":false}"#,
    // A door camera's yes or no.
    r#"{"type":"object","properties":{"answer":{"enum":["yes","no"]}},"required":["answer"],"additionalProperties":false}"#,
    // References, nesting, optional properties.
    r##"{"$defs":{"box":{"type":"object","properties":{"x":{"type":"integer","minimum":0,"maximum":1000},
        "y":{"type":"integer","minimum":-1000,"maximum":-10},"label":{"type":"string","maxLength":10}},"required":["x","y"]}},
        "type":"object","properties":{"objects":{"type":"array","items":{"$ref":"#/$defs/box"},"maxItems":3},
        "count":{"$ref":"#/$defs/n"}},"required":["objects"],"additionalProperties":false}"##,
    // Numbers, const, null, optional and free properties.
    r#"{"type":"object","properties":{"version":{"const":2},"score":{"type":"number"},"note":{"type":"null"},
        "extra":{"type":"string"},"meta":{}},"required":["version","score"]}"#,
    // An array at the top.
    r#"{"type":"array","items":{"type":"integer","minimum":-50,"maximum":50},"minItems":2,"maxItems":5}"#,
    // Any object (json_object).
    "json_object",
];

/// The third schema's `count`: defined after its use.
fn schema_text(i: usize) -> String {
    SCHEMAS[i].replace(r#""$defs":{"box""#, r#""$defs":{"n":{"type":"integer"},"box""#)
}

fn constraint(text: &str) -> JsonConstraint {
    match text {
        "json_object" => JsonConstraint::any_object(),
        _ => JsonConstraint::from_schema(&parse_ordered(text, 32).expect("schema JSON"), "schema").expect("compiles"),
    }
}

/// Validates `value` against `schema` (the supported keywords); `root` holds the `$defs`.
fn validate(schema: &JsonValue, root: &JsonValue, value: &JsonValue) -> Result<(), String> {
    let s: &HashMap<String, JsonValue> = schema.get().ok_or("schema is not an object")?;
    if let Some(JsonValue::String(r)) = s.get("$ref") {
        let name = r.rsplit('/').next().unwrap_or_default();
        return validate(&root["$defs"][name], root, value);
    }
    if let Some(c) = s.get("const") {
        return if c == value { Ok(()) } else { Err(format!("{value:?} is not the const")) };
    }
    if let Some(JsonValue::Array(e)) = s.get("enum") {
        return if e.contains(value) { Ok(()) } else { Err(format!("{value:?} is not in the enum")) };
    }
    let kind = s.get("type").and_then(|t| t.get::<String>()).map(String::as_str);
    match (kind, value) {
        (None, _) => Ok(()),
        (Some("object"), JsonValue::Object(o)) => {
            let props: HashMap<String, JsonValue> =
                s.get("properties").and_then(|p| p.get().cloned()).unwrap_or_default();
            if let Some(JsonValue::Array(req)) = s.get("required") {
                for r in req {
                    let name: &String = r.get().ok_or("required")?;
                    if !o.contains_key(name) {
                        return Err(format!("{name} is missing"));
                    }
                }
            }
            for (k, v) in o {
                match props.get(k) {
                    Some(p) => validate(p, root, v)?,
                    None if s.get("additionalProperties") == Some(&JsonValue::Boolean(false)) => {
                        return Err(format!("{k} is not a property"))
                    }
                    None => {}
                }
            }
            Ok(())
        }
        (Some("array"), JsonValue::Array(items)) => {
            let n = |k: &str| s.get(k).and_then(|v| v.get::<f64>()).copied();
            if n("minItems").is_some_and(|m| (items.len() as f64) < m)
                || n("maxItems").is_some_and(|m| items.len() as f64 > m)
            {
                return Err(format!("{} items", items.len()));
            }
            let item = s.get("items").cloned().unwrap_or(JsonValue::Object(HashMap::new()));
            items.iter().try_for_each(|v| validate(&item, root, v))
        }
        (Some("string"), JsonValue::String(text)) => match s.get("maxLength").and_then(|v| v.get::<f64>()) {
            Some(&m) if text.chars().count() as f64 > m => Err(format!("{text:?} is over {m} characters")),
            _ => Ok(()),
        },
        (Some("integer"), JsonValue::Number(x)) if x.fract() == 0.0 => {
            let bound = |k: &str| s.get(k).and_then(|v| v.get::<f64>()).copied();
            if bound("minimum").is_some_and(|m| *x < m) || bound("maximum").is_some_and(|m| *x > m) {
                return Err(format!("{x} is out of range"));
            }
            Ok(())
        }
        (Some("number"), JsonValue::Number(_))
        | (Some("boolean"), JsonValue::Boolean(_))
        | (Some("null"), JsonValue::Null) => Ok(()),
        (Some(t), v) => Err(format!("{v:?} is not of type {t}")),
    }
}

/// The answer's text, checked: it parses, and validates when there is a schema.
fn check(schema: &str, g: &Generation) -> JsonValue {
    let value: JsonValue = g.text.parse().unwrap_or_else(|e| panic!("{:?} does not parse: {e}", g.text));
    match schema {
        "json_object" => assert!(matches!(value, JsonValue::Object(_)), "{:?} is not an object", g.text),
        _ => {
            let s: JsonValue = schema.parse().expect("schema");
            if let Err(e) = validate(&s, &s, &value) {
                panic!("{:?} does not validate: {e}", g.text);
            }
        }
    }
    assert!(
        matches!(g.stop, StopReason::EndOfGeneration | StopReason::LengthClosed),
        "{:?} stopped by {:?}",
        g.text,
        g.stop
    );
    value
}

fn load(model: &str) -> Option<TextModel> {
    let oracle = common::oracle()?;
    let options = TextOptions { n_ctx: 1024, ..TextOptions::on(DeviceChoice::Cpu) };
    Some(TextModel::load(&oracle.join("models").join(model), options).expect("model loads"))
}

fn prompt(model: &TextModel, c: &JsonConstraint) -> Vec<PromptPiece<'static>> {
    let messages = [Message::text("system", c.instruction()), Message::text("user", "Describe the photo.")];
    let ids = chat::tokens(&messages, true, model.tokenizer(), None).expect("template");
    ids.into_iter().map(PromptPiece::Token).collect()
}

fn config(c: &Arc<JsonConstraint>, max_new_tokens: usize, sampler: SamplerConfig) -> GenerateConfig {
    GenerateConfig {
        max_new_tokens,
        sampler,
        stop_strings: vec![],
        stop_at_eog: true,
        logprobs: None,
        json: Some(Arc::clone(c)),
    }
}

fn run(model: &mut TextModel, pieces: &[PromptPiece], config: &GenerateConfig) -> Generation {
    generate(model, &mut Session::new(), pieces, config, |_| std::ops::ControlFlow::Continue(())).expect("generates")
}

/// 50 runs at temperature 1.0 over the whole vocabulary and a greedy one per schema.
fn sampled_and_greedy(model_file: &str, max_new_tokens: usize) {
    let Some(mut model) = load(model_file) else { return };
    for i in 0..SCHEMAS.len() {
        let text = schema_text(i);
        let c = Arc::new(constraint(&text));
        let pieces = prompt(&model, &c);
        let (mut cut, mut tokens) = (0, 0);
        for seed in 0..50 {
            let sampler =
                SamplerConfig { temperature: 1.0, top_k: 0, top_p: 1.0, min_p: 0.0, seed, ..SamplerConfig::default() };
            let g = run(&mut model, &pieces, &config(&c, max_new_tokens, sampler));
            check(&text, &g);
            cut += usize::from(g.stop == StopReason::LengthClosed);
            tokens += g.tokens.len();
        }
        let greedy = run(&mut model, &pieces, &config(&c, 2 * max_new_tokens, SamplerConfig::default()));
        check(&text, &greedy);
        eprintln!("{model_file} schema {i}: 50 sampled answers valid ({cut} closed at the limit, {tokens} tokens); greedy {:?}", greedy.text);
    }
}

#[test]
fn sampled_and_greedy_answers_validate_on_the_tiny_model() {
    sampled_and_greedy("tiny/qwen3vl-tiny-F16.gguf", 48);
}

#[test]
fn sampled_and_greedy_answers_validate_on_the_small_model() {
    sampled_and_greedy("small/qwen3vl-small-Q4_K_M.gguf", 40);
}

#[test]
fn a_budget_of_a_few_tokens_still_closes_the_document() {
    let Some(mut model) = load("tiny/qwen3vl-tiny-F16.gguf") else { return };
    for i in 0..SCHEMAS.len() {
        let text = schema_text(i);
        let c = Arc::new(constraint(&text));
        let pieces = prompt(&model, &c);
        // The least budget the schema allows: its shortest document, a byte a token.
        let least = c.start(model.tokenizer()).close_len();
        for (budget, seed) in [(least, 1), (least + 1, 2), (least + 3, 3)] {
            let sampler =
                SamplerConfig { temperature: 1.0, top_k: 0, top_p: 1.0, min_p: 0.0, seed, ..SamplerConfig::default() };
            let g = run(&mut model, &pieces, &config(&c, budget, sampler));
            check(&text, &g);
            assert!(g.tokens.len() <= budget, "{} tokens over {budget}", g.tokens.len());
        }
        let e = generate(
            &mut model,
            &mut Session::new(),
            &pieces,
            &config(&c, least - 1, SamplerConfig::default()),
            |_| std::ops::ControlFlow::Continue(()),
        )
        .expect_err("a budget under the shortest document is refused");
        assert!(e.to_string().contains("shortest JSON document"), "{e}");
    }
}

#[test]
fn the_validator_here_can_fail() {
    let s: JsonValue = schema_text(2).parse().unwrap();
    for bad in [
        r#"{"objects":[{"x":1}]}"#,
        r#"{"objects":[{"x":1001,"y":-10}]}"#,
        r#"{"objects":[{"x":1,"y":-10,"label":"elevenchars"}]}"#,
        r#"{"objects":[],"z":1}"#,
        r#"{"objects":[],"count":1.5}"#,
        r#"{"objects":[{"x":1,"y":-10},{"x":1,"y":-10},{"x":1,"y":-10},{"x":1,"y":-10}]}"#,
    ] {
        assert!(validate(&s, &s, &bad.parse().unwrap()).is_err(), "{bad}");
    }
    assert!(validate(&s, &s, &r#"{"objects":[{"x":1,"y":-10,"label":"é"}],"count":3}"#.parse().unwrap()).is_ok());
}
