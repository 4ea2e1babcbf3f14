//! Structured output: answers that are JSON documents of a schema, by constrained decoding.
//! At each step only the tokens whose bytes keep the answer a prefix of a valid document may
//! be sampled, the end only once it is whole, and near the token limit only the shortest way
//! to close it; so every answer parses and validates.
//!
//! `schema` reads a JSON schema (or `json_object`) into nodes, refusing what it does not
//! support by name; `grammar` is the byte automaton over them; `mask` turns it into token sets
//! over the vocabulary trie, cached.

pub mod grammar;
pub mod mask;
pub mod schema;

use super::chat::{Content, Message};
use crate::json::Json;
use crate::tokenizer::Tokenizer;
use grammar::Stack;
use mask::{ClosingPath, Masks};
pub use schema::{Schema, SchemaError};
use std::sync::Arc;

/// A schema ready for generation, with its masks (kept across the runs that share it).
pub struct JsonConstraint {
    schema: Schema,
    /// The system line that tells the model the schema.
    instruction: String,
    masks: Masks,
}

impl std::fmt::Debug for JsonConstraint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JsonConstraint").field("instruction", &self.instruction).finish_non_exhaustive()
    }
}

impl JsonConstraint {
    /// Answers that follow `schema` (`at`: what errors call it, e.g. `--json-schema FILE`).
    pub fn from_schema(schema: &Json, at: &str) -> Result<JsonConstraint, SchemaError> {
        let instruction = format!(
            "Answer with a JSON object that follows this JSON schema, and nothing else:\n{}",
            schema.to_string_compact()
        );
        Ok(JsonConstraint { schema: Schema::compile(schema, at)?, instruction, masks: Masks::new() })
    }

    /// Answers that are any JSON object (OpenAI's `json_object`).
    pub fn any_object() -> JsonConstraint {
        let instruction = "Answer with a JSON object, and nothing else.".to_owned();
        JsonConstraint { schema: Schema::any_object(), instruction, masks: Masks::new() }
    }

    /// The system line that tells the model what to write (the model card's advice for JSON
    /// answers: say so, with the schema, in the system turn).
    pub fn instruction(&self) -> &str {
        &self.instruction
    }

    /// `system` with the instruction after it (or alone).
    pub fn system_with_instruction(&self, system: Option<&str>) -> String {
        match system {
            Some(s) if !s.is_empty() => format!("{s}\n\n{}", self.instruction),
            _ => self.instruction.clone(),
        }
    }

    /// Tells the model the schema in `messages`' system turn: after its text, or in a new
    /// system turn first.
    pub fn instruct(&self, messages: &mut Vec<Message>) {
        match messages.first_mut() {
            Some(m) if m.role == "system" => m.content.push(Content::Text(format!("\n\n{}", self.instruction))),
            _ => messages.insert(0, Message::text("system", &self.instruction)),
        }
    }

    /// A new document over `tokenizer`'s vocabulary (holding the constraint: a document may
    /// outlive whoever asked for it, as a request's does in a batch).
    pub fn start<'a>(self: &Arc<Self>, tokenizer: &'a Tokenizer) -> Document<'a> {
        let c = Arc::clone(self);
        Document { stack: Stack::start(&c.schema), c, tokenizer, forced: false, closing: None }
    }
}

/// A document being generated.
pub struct Document<'a> {
    c: Arc<JsonConstraint>,
    tokenizer: &'a Tokenizer,
    stack: Stack,
    /// The token limit decided a step: only the shortest closing was allowed.
    pub forced: bool,
    /// Once the limit decides, the closing the document follows to its end.
    closing: Option<ClosingPath>,
}

/// What may come next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Next {
    /// Sample from the masked logits.
    Sample,
    /// The document is whole and nothing more fits (or may follow): stop.
    Done,
}

impl Document<'_> {
    /// The fewest tokens that can close the document from here (along its shortest closing
    /// bytes).
    pub fn close_len(&self) -> usize {
        let trie = self.tokenizer.trie();
        match &self.closing {
            Some(path) => path.tokens_left() as usize,
            None => ClosingPath::new(trie, self.stack.closing(&self.c.schema)).tokens_left() as usize,
        }
    }

    /// Masks `logits` to the tokens that may come next with `left` tokens to go (this one
    /// included, so at least 1, and at least [`Document::close_len`]); `eog`: end tokens allowed
    /// once the document is whole (none: the caller goes on past them).
    ///
    /// While the bytes any allowed token leaves to close the document fit in what is left after
    /// it (a byte a token at worst), the model writes what it likes; past that, the document
    /// follows its shortest closing bytes, in the fewest tokens the budget needs.
    pub fn mask(&mut self, logits: &mut [f32], left: usize, eog: &[u32]) -> Next {
        let g = &self.c.schema;
        if !self.stack.is_open() {
            return Next::Done;
        }
        let complete = self.stack.is_complete(g);
        let trie = self.tokenizer.trie();
        let n = self.tokenizer.n_vocab();
        if self.closing.is_none() {
            let mask = self.c.masks.of(g, trie, n, &self.stack);
            if (mask.max_close as usize) < left {
                if complete && mask.allowed.is_empty() && eog.is_empty() {
                    return Next::Done;
                }
                apply(&mask.allowed, logits, complete, eog);
                return Next::Sample;
            }
            self.forced = true;
            self.closing = Some(ClosingPath::new(trie, self.stack.closing(g)));
        }
        match &self.closing {
            Some(path) if !path.is_done() => {
                apply(&path.allowed(trie, n, left), logits, false, eog);
                Next::Sample
            }
            _ => Next::Done,
        }
    }

    /// Takes a sampled token (not an end one); false when its bytes do not fit the document,
    /// which a masked sample never gives.
    pub fn take(&mut self, id: u32) -> bool {
        match self.tokenizer.token_to_bytes(id) {
            Ok(bytes) if !self.tokenizer.is_control(id) => {
                self.closing.as_mut().is_none_or(|path| path.take(bytes)) && self.stack.feed_all(&self.c.schema, bytes)
            }
            _ => false,
        }
    }

    pub fn is_complete(&self) -> bool {
        self.stack.is_complete(&self.c.schema)
    }
}

/// Masks `logits` to `allowed`, and to the end tokens `eog` too when `complete`.
fn apply(allowed: &mask::TokenSet, logits: &mut [f32], complete: bool, eog: &[u32]) {
    let kept: Vec<(usize, f32)> = match complete {
        true => eog.iter().filter_map(|&id| logits.get(id as usize).map(|&l| (id as usize, l))).collect(),
        false => Vec::new(),
    };
    allowed.apply(logits);
    for (id, l) in kept {
        logits[id] = l;
    }
}
