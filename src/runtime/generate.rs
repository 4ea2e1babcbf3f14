//! The generation loop: prefill, then sample and decode one token at a time, streaming text
//! that is complete UTF-8 and not the start of a stop string.

use super::sampler::{Sampler, SamplerConfig, TokenLogprob};
use super::session::{PromptPiece, Session};
use super::structured::{Document, JsonConstraint, Next};
use super::text_model::{Outputs, Read, Scores, TextModel};
use super::RuntimeError;
use crate::tokenizer::{StreamDecoder, Tokenizer};
use std::ops::ControlFlow;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

#[derive(Clone, Debug)]
pub struct GenerateConfig {
    pub max_new_tokens: usize,
    pub sampler: SamplerConfig,
    /// Generation stops before any of these strings (which are not printed).
    pub stop_strings: Vec<String>,
    /// Stop at end-of-generation tokens (the greedy oracle runs do not).
    pub stop_at_eog: bool,
    /// Log-probabilities of each generated token with this many alternatives (None: none).
    pub logprobs: Option<usize>,
    /// The answer is a JSON document of this schema (constrained decoding); no stop strings
    /// then (one could cut the document).
    pub json: Option<Arc<JsonConstraint>>,
}

/// What one step of generation gives `on_text`: the text that became final (often empty while
/// a character or a possible stop string is incomplete) and, when asked for, the logprob entry
/// of the token just generated (none for the last call, which flushes held-back text).
pub struct Delta<'a> {
    pub text: &'a str,
    pub logprob: Option<&'a TokenLogprob>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StopReason {
    Length,
    EndOfGeneration,
    StopString,
    ContextFull,
    /// The caller's `on_text` asked to stop (a streaming client that went away).
    Cancelled,
    /// A JSON answer the token limit (or the context) cut short: its last tokens were the
    /// shortest way to close the document, which is whole.
    LengthClosed,
}

impl StopReason {
    pub fn name(self) -> &'static str {
        match self {
            StopReason::Length => "length",
            StopReason::EndOfGeneration => "eog",
            StopReason::StopString => "stop_string",
            StopReason::ContextFull => "context_full",
            StopReason::Cancelled => "cancelled",
            StopReason::LengthClosed => "length_closed",
        }
    }
}

#[derive(Clone, Debug)]
pub struct Generation {
    pub tokens: Vec<u32>,
    pub text: String,
    pub stop: StopReason,
    /// Logits at the last prompt position ([`generate`]'s; a batch's conversations keep none:
    /// empty, their prompts' logits are read only where their first choice wants them).
    pub prompt_logits: Vec<f32>,
    /// With `GenerateConfig::logprobs`: an entry per generated token but an end-of-generation
    /// one (which has no text).
    pub logprobs: Vec<TokenLogprob>,
    pub n_prompt: usize,
    pub prompt_seconds: f64,
    pub generate_seconds: f64,
}

/// Holds back text that might begin a stop string; finds a complete one.
struct StopFilter {
    stops: Vec<String>,
    pending: String,
}

impl StopFilter {
    /// Adds text; returns what can be shown now and whether a stop string was hit.
    fn push(&mut self, text: &str) -> (String, bool) {
        self.pending.push_str(text);
        if let Some(at) =
            self.stops.iter().filter(|s| !s.is_empty()).filter_map(|s| self.pending.find(s.as_str())).min()
        {
            let shown = self.pending[..at].to_owned();
            self.pending.clear();
            return (shown, true);
        }
        // Keep the longest suffix that is a proper prefix of a stop string.
        let mut keep = 0;
        for s in &self.stops {
            for (i, _) in s.char_indices().skip(1) {
                if self.pending.ends_with(&s[..i]) {
                    keep = keep.max(i);
                }
            }
        }
        let cut = self.pending.len() - keep;
        let shown = self.pending[..cut].to_owned();
        self.pending.drain(..cut);
        (shown, false)
    }
}

/// One sequence's generation after its prompt: its own settings, sampler, stop filter, stream
/// decoder, JSON constraint and what it made so far. Both the one-sequence loop ([`generate`])
/// and the batched one ([`super::batch`]) drive it: logits in, the next token to feed or a stop
/// out.
pub struct Decoding<'a> {
    config: GenerateConfig,
    tokenizer: &'a Tokenizer,
    /// The model file, named in a tokenizer error.
    file: PathBuf,
    sampler: Sampler,
    filter: StopFilter,
    decoder: StreamDecoder<'a>,
    document: Option<Document<'a>>,
    /// The prompt's text tokens and those generated (the sampler's repetition window).
    history: Vec<u32>,
    /// Tokens a JSON answer may take, its closing ones included.
    budget: usize,
    tokens: Vec<u32>,
    logprobs: Vec<TokenLogprob>,
    text: String,
    stop: StopReason,
}

/// What `Decoding::choose` decided: the token sampled (with the model's own logits where a
/// mask changed them and the logprobs want them), or that the sequence stops.
pub enum Choice {
    Token { id: u32, raw: Option<Vec<f32>> },
    Stop,
}

/// What a sequence made: its tokens, text, logprobs and why it stopped.
pub struct Made {
    pub tokens: Vec<u32>,
    pub text: String,
    pub logprobs: Vec<TokenLogprob>,
    pub stop: StopReason,
}

/// The tokens an answer after a prompt of `n_prompt` slots may have in a sequence of `n_ctx`
/// (every sampled token takes a slot but the last), and its JSON document where `config` asks
/// for one; an error where the document could not close within them, whatever was sampled.
pub fn answer_budget<'a>(
    config: &GenerateConfig,
    tokenizer: &'a Tokenizer,
    n_prompt: usize,
    n_ctx: usize,
) -> Result<(usize, Option<Document<'a>>), RuntimeError> {
    let budget = config.max_new_tokens.min(n_ctx.saturating_sub(n_prompt) + 1);
    let document = config.json.as_ref().map(|c| c.start(tokenizer));
    if let Some(d) = &document {
        if !config.stop_strings.is_empty() {
            return Err(RuntimeError::Usage(
                "stop strings cannot go with a JSON schema: one could cut the document".into(),
            ));
        }
        if d.close_len() > budget {
            return Err(RuntimeError::Usage(format!(
                "the shortest JSON document of the schema takes up to {} tokens, and the answer may have {budget} (raise the token limit)",
                d.close_len()
            )));
        }
    }
    Ok((budget, document))
}

impl<'a> Decoding<'a> {
    /// The state after a prompt of `n_prompt` slots, whose text tokens were `history`, in a
    /// sequence of `n_ctx` slots, with the vocabulary of the model in `file`.
    pub fn new(
        config: GenerateConfig,
        (tokenizer, file): (&'a Tokenizer, &Path),
        history: Vec<u32>,
        n_prompt: usize,
        n_ctx: usize,
    ) -> Result<Decoding<'a>, RuntimeError> {
        let (budget, document) = answer_budget(&config, tokenizer, n_prompt, n_ctx)?;
        Ok(Decoding {
            tokenizer,
            file: file.to_owned(),
            sampler: Sampler::new(config.sampler.clone()),
            filter: StopFilter { stops: config.stop_strings.clone(), pending: String::new() },
            config,
            decoder: StreamDecoder::new(tokenizer),
            document,
            history,
            budget,
            tokens: Vec::new(),
            logprobs: Vec::new(),
            text: String::new(),
            stop: StopReason::Length,
        })
    }

    /// Samples from `logits` (of the last token fed) and hands the token's text to `on_text`;
    /// returns the token to feed next, or None when the sequence stopped (`full`: its cache
    /// has no slot left for another).
    pub fn step(
        &mut self,
        mut scores: Scores,
        full: bool,
        on_text: &mut dyn FnMut(&Delta) -> ControlFlow<()>,
    ) -> Result<Option<u32>, RuntimeError> {
        let choice = self.choose(&mut scores);
        self.take(choice, scores.logits(), full, on_text)
    }

    /// What this sequence's steps need read back: the argmax of the logits alone when the
    /// choice is nothing else (greedy, no penalties, no JSON document, no logprobs), else the
    /// logits.
    pub fn read(&self) -> Read {
        if self.sampler.is_greedy() && self.document.is_none() && self.config.logprobs.is_none() {
            Read::Argmax
        } else {
            Read::Logits
        }
    }

    /// The first half of `step`, which needs nothing but this sequence and its scores (so
    /// that sequences decoded together choose on threads side by side): the token sampled
    /// from the logits (masked to the JSON document, if any) or the argmax read in their
    /// place (as [`Decoding::read`] asked), or that the sequence stops.
    pub fn choose(&mut self, scores: &mut Scores) -> Choice {
        let config = &self.config;
        if self.tokens.len() >= config.max_new_tokens {
            self.stop = StopReason::Length;
            return Choice::Stop;
        }
        let logits = match scores {
            Scores::Argmax(id) => return Choice::Token { id: *id, raw: None },
            Scores::Logits(logits) => logits,
        };
        let eog: &[u32] = if config.stop_at_eog { self.tokenizer.eog() } else { &[] };
        // The model's own logits stay for the logprobs; the sample is of the masked ones.
        let raw = (self.document.is_some() && config.logprobs.is_some()).then(|| logits.to_vec());
        if let Some(d) = &mut self.document {
            if d.mask(logits, self.budget - self.tokens.len(), eog) == Next::Done {
                self.stop = if d.forced { StopReason::LengthClosed } else { StopReason::EndOfGeneration };
                return Choice::Stop;
            }
        }
        Choice::Token { id: self.sampler.sample(logits, &self.history), raw }
    }

    /// The second half of `step`: takes `choice` (made by `choose` from `logits`) and hands
    /// the token's text to `on_text`.
    pub fn take(
        &mut self,
        choice: Choice,
        logits: &[f32],
        full: bool,
        on_text: &mut dyn FnMut(&Delta) -> ControlFlow<()>,
    ) -> Result<Option<u32>, RuntimeError> {
        let Choice::Token { id, raw } = choice else { return Ok(None) };
        let config = &self.config;
        self.tokens.push(id);
        self.history.push(id);
        if config.stop_at_eog && self.tokenizer.is_eog(id) {
            self.stop = match &self.document {
                Some(d) if d.forced => StopReason::LengthClosed,
                _ => StopReason::EndOfGeneration,
            };
            return Ok(None);
        }
        if let Some(d) = &mut self.document {
            if !d.take(id) {
                return Err(RuntimeError::Usage(format!("internal: token {id} does not fit the JSON document")));
            }
        }
        let piece =
            self.decoder.push(id).map_err(|source| RuntimeError::Tokenizer { file: self.file.clone(), source })?;
        let (shown, hit) = self.filter.push(&piece);
        self.text.push_str(&shown);
        if let Some(top) = config.logprobs {
            self.logprobs.push(TokenLogprob::new(raw.as_deref().unwrap_or(logits), id, top));
        }
        if on_text(&Delta { text: &shown, logprob: self.logprobs.last() }).is_break() {
            self.stop = StopReason::Cancelled;
            return Ok(None);
        }
        if hit {
            self.stop = StopReason::StopString;
            return Ok(None);
        }
        if self.tokens.len() == config.max_new_tokens {
            self.stop = StopReason::Length;
            return Ok(None);
        }
        if full {
            self.stop = StopReason::ContextFull;
            return Ok(None);
        }
        Ok(Some(id))
    }

    /// Stops the sequence as its caller asked (between steps: a reader that went away).
    pub fn cancel(&mut self) {
        self.stop = StopReason::Cancelled;
    }

    /// After the last step: flushes held-back text to `on_text` and says what was made.
    pub fn finish(self, on_text: &mut dyn FnMut(&Delta) -> ControlFlow<()>) -> Made {
        let Decoding { document, mut stop, mut filter, decoder, mut text, tokens, logprobs, .. } = self;
        // A JSON answer is whole when the limit or the context ends it (its budget saw to
        // that): say whether the limit cut it short.
        if let Some(d) = &document {
            if matches!(stop, StopReason::Length | StopReason::ContextFull) {
                stop = if d.forced { StopReason::LengthClosed } else { StopReason::EndOfGeneration };
            }
        }
        if !matches!(stop, StopReason::StopString | StopReason::Cancelled) {
            let (rest, _) = filter.push(&decoder.finish());
            let tail = rest + &filter.pending;
            text.push_str(&tail);
            // The last text: nothing is left to stop.
            let _ = on_text(&Delta { text: &tail, logprob: None });
        }
        Made { tokens, text, logprobs, stop }
    }
}

/// The text tokens of a prompt (the sampler's repetition window starts with them).
pub fn prompt_tokens(pieces: &[PromptPiece]) -> Vec<u32> {
    pieces.iter().filter_map(|p| if let PromptPiece::Token(t) = p { Some(*t) } else { None }).collect()
}

/// Prefills `pieces` and generates; `on_text` receives text as it becomes final, once per
/// generated token and once at the end.
pub fn generate(
    model: &mut TextModel,
    session: &mut Session,
    pieces: &[PromptPiece],
    config: &GenerateConfig,
    mut on_text: impl FnMut(&Delta) -> ControlFlow<()>,
) -> Result<Generation, RuntimeError> {
    let t0 = Instant::now();
    let prompt_logits = session.feed(model, pieces)?;
    let prompt_seconds = t0.elapsed().as_secs_f64();
    let n_prompt = session.n_past;
    let t1 = Instant::now();
    // Borrow the tokenizer apart from the model: decoding and running interleave.
    let tokenizer = Arc::clone(model.tokenizer());
    let n_ctx = model.options().n_ctx;
    let vocab = (&*tokenizer, model.file().path());
    let mut decoding = Decoding::new(config.clone(), vocab, prompt_tokens(pieces), n_prompt, n_ctx)?;
    let mut outputs = Outputs::Logits(prompt_logits.clone());
    let n_vocab = model.params().n_vocab;
    loop {
        let full = session.is_full(model);
        let scores =
            outputs.rows(n_vocab).pop().ok_or_else(|| RuntimeError::Usage("internal: a step read nothing".into()))?;
        let Some(id) = decoding.step(scores, full, &mut on_text)? else { break };
        model.take_back(std::mem::replace(&mut outputs, Outputs::Argmax(Vec::new())));
        outputs = session.step(model, id, decoding.read())?;
    }
    let Made { tokens, text, logprobs, stop } = decoding.finish(&mut on_text);
    Ok(Generation {
        tokens,
        text,
        stop,
        prompt_logits,
        logprobs,
        n_prompt,
        prompt_seconds,
        generate_seconds: t1.elapsed().as_secs_f64(),
    })
}

#[cfg(test)]
mod tests {
    use super::StopFilter;

    #[test]
    fn stop_filter_holds_back_prefixes_and_cuts_at_the_stop() {
        let mut f = StopFilter { stops: vec!["END".to_string()], pending: String::new() };
        assert_eq!(f.push("hello E"), ("hello ".to_string(), false));
        assert_eq!(f.push("N"), (String::new(), false));
        assert_eq!(f.push("Xy"), ("ENXy".to_string(), false));
        assert_eq!(f.push("a END b"), ("a ".to_string(), true));
    }
}
