//! Choosing the next token from logits: greedy, or temperature with top-k, top-p and min-p
//! filters, with a repetition penalty, OpenAI's frequency and presence penalties and a seeded
//! generator (runs are reproducible); and the log-probabilities of a step (`logprobs`).

pub use crate::backend::cpu::reference::argmax;
use crate::rng::SplitMix64;
use std::collections::HashMap;

#[derive(Clone, Debug, PartialEq)]
pub struct SamplerConfig {
    /// 0 means greedy.
    pub temperature: f32,
    /// 0 means no limit.
    pub top_k: usize,
    /// 1.0 means no limit.
    pub top_p: f32,
    /// 0.0 means no limit.
    pub min_p: f32,
    /// 1.0 means none; > 1 makes tokens already seen less likely (llama.cpp/CTRL style).
    pub repeat_penalty: f32,
    /// How many recent tokens the penalty looks at.
    pub repeat_last_n: usize,
    /// OpenAI's: subtracted from a token's logit once per time this sampler has already chosen
    /// it (0 = off; -2..=2).
    pub frequency_penalty: f32,
    /// OpenAI's: subtracted once from the logit of every token this sampler has already chosen
    /// (0 = off; -2..=2).
    pub presence_penalty: f32,
    pub seed: u64,
}

impl Default for SamplerConfig {
    fn default() -> Self {
        SamplerConfig {
            temperature: 0.0,
            top_k: 40,
            top_p: 0.95,
            min_p: 0.05,
            repeat_penalty: 1.0,
            repeat_last_n: 64,
            frequency_penalty: 0.0,
            presence_penalty: 0.0,
            seed: 0,
        }
    }
}

impl SamplerConfig {
    /// Checks ranges; the message names the flag.
    pub fn validate(&self) -> Result<(), String> {
        if !(self.temperature >= 0.0 && self.temperature.is_finite()) {
            return Err(format!("--temp {} must be a number >= 0", self.temperature));
        }
        if !(self.top_p > 0.0 && self.top_p <= 1.0) {
            return Err(format!("--top-p {} must be in (0, 1]", self.top_p));
        }
        if !(0.0..=1.0).contains(&self.min_p) {
            return Err(format!("--min-p {} must be in [0, 1]", self.min_p));
        }
        if !(self.repeat_penalty > 0.0 && self.repeat_penalty.is_finite()) {
            return Err(format!("--repeat-penalty {} must be > 0", self.repeat_penalty));
        }
        for (flag, x) in
            [("--frequency-penalty", self.frequency_penalty), ("--presence-penalty", self.presence_penalty)]
        {
            if !(-2.0..=2.0).contains(&x) {
                return Err(format!("{flag} {x} must be in [-2, 2]"));
            }
        }
        Ok(())
    }
}

pub struct Sampler {
    config: SamplerConfig,
    rng: SplitMix64,
    /// How often each token has been chosen by this sampler: the frequency and presence
    /// penalties count the answer's own tokens, as OpenAI's do, not the prompt's.
    chosen: HashMap<u32, u32>,
}

/// A chosen token's log-probability under the model at its step, and the `top` most likely
/// tokens of that step with theirs, most likely first (the lower id first among equals). They
/// are the log-softmax of the model's logits, before penalties, temperature and filters: what
/// the model thinks of each token, the same whatever the sampling settings (OpenAI's
/// `logprobs`).
#[derive(Clone, Debug, PartialEq)]
pub struct TokenLogprob {
    pub id: u32,
    pub logprob: f32,
    pub top: Vec<(u32, f32)>,
}

/// The log-probability of an impossible token (a logit of -inf): OpenAI's stand-in, since JSON
/// has no infinities.
pub const LEAST_LOGPROB: f32 = -9999.0;

impl TokenLogprob {
    /// `id`'s entry at a step with these logits, with the `top` most likely tokens.
    pub fn new(logits: &[f32], id: u32, top: usize) -> TokenLogprob {
        let max = logits.iter().copied().filter(|l| l.is_finite()).fold(f32::NEG_INFINITY, f32::max);
        let sum: f64 = logits.iter().filter(|l| l.is_finite()).map(|&l| f64::from(l - max).exp()).sum();
        let log_total = f64::from(max) + sum.ln();
        let logprob = |l: f32| {
            let x = (f64::from(l) - log_total) as f32;
            // NaN and -inf (a broken or masked logit) both read as impossible.
            if x >= LEAST_LOGPROB {
                x
            } else {
                LEAST_LOGPROB
            }
        };
        let best = best_of(logits, top, |l| !l.is_nan());
        let chosen = logits.get(id as usize).copied().unwrap_or(f32::NEG_INFINITY);
        TokenLogprob {
            id,
            logprob: logprob(chosen),
            top: best.into_iter().map(|(i, l)| (i as u32, logprob(l))).collect(),
        }
    }
}

/// The `k` best values of `logits` that `admit` lets through with their ids, best first: the
/// higher value first (by `f32::total_cmp`), the lower id first among equals (the order of
/// sorting them all). One pass, the best kept sorted (k is small: at most `STREAMED_TOP_K`);
/// once k are held, a block of 16 values whose maximum is below the worst is passed over.
fn best_of(logits: &[f32], k: usize, admit: impl Fn(f32) -> bool) -> Vec<(usize, f32)> {
    const BLOCK: usize = 16;
    let mut best: Vec<(usize, f32)> = Vec::with_capacity(k + 1);
    if k == 0 {
        return best;
    }
    for (b, block) in logits.chunks(BLOCK).enumerate() {
        let worst = |best: &[(usize, f32)]| if best.len() == k { best.last().map(|&(_, w)| w) } else { None };
        // The maximum passes NaN over (as maxps does); one equal to the worst may still be a
        // 0.0 that beats a -0.0, so only one below it passes the block over.
        if worst(&best).is_some_and(|w| block.iter().fold(f32::NEG_INFINITY, |m, &v| if v > m { v } else { m }) < w) {
            continue;
        }
        for (j, &l) in block.iter().enumerate() {
            if !admit(l) || worst(&best).is_some_and(|w| l.total_cmp(&w).is_le()) {
                continue;
            }
            let at = best.partition_point(|&(_, v)| v.total_cmp(&l).is_ge());
            best.insert(at, (b * BLOCK + j, l));
            best.truncate(k);
        }
    }
    best
}

/// The largest top-k a step streams its candidates through (`best_of`) instead of selecting
/// them from a copy of every finite logit (151,936 on Qwen's vocabulary: most of a sampled
/// step's host time).
const STREAMED_TOP_K: usize = 256;

impl Sampler {
    pub fn new(config: SamplerConfig) -> Sampler {
        let rng = SplitMix64(config.seed);
        Sampler { config, rng, chosen: HashMap::new() }
    }

    /// The next token given the logits and the tokens so far.
    pub fn sample(&mut self, logits: &[f32], history: &[u32]) -> u32 {
        let id = self.choose(logits, history);
        *self.chosen.entry(id).or_default() += 1;
        id
    }

    /// Whether the choice is the argmax of the logits, nothing else: temperature 0 and no
    /// penalties.
    pub fn is_greedy(&self) -> bool {
        self.config.temperature == 0.0 && !self.penalized()
    }

    /// Whether penalties change some logits.
    fn penalized(&self) -> bool {
        let c = &self.config;
        c.frequency_penalty != 0.0 || c.presence_penalty != 0.0 || c.repeat_penalty != 1.0
    }

    fn choose(&mut self, logits: &[f32], history: &[u32]) -> u32 {
        if self.is_greedy() {
            return argmax(logits) as u32;
        }
        // A copy only where penalties change some logits.
        let mut logits = std::borrow::Cow::Borrowed(logits);
        if self.penalized() {
            self.penalize(logits.to_mut(), history);
        }
        let c = &self.config;
        if c.temperature == 0.0 {
            return argmax(&logits) as u32;
        }
        let order = |a: &(usize, f32), b: &(usize, f32)| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0));
        let cand = if c.top_k > 0 && c.top_k <= STREAMED_TOP_K {
            best_of(&logits, c.top_k, f32::is_finite)
        } else {
            let mut cand: Vec<(usize, f32)> =
                logits.iter().copied().enumerate().filter(|(_, l)| l.is_finite()).collect();
            if c.top_k > 0 && c.top_k < cand.len() {
                // The best k first (the same k, in the same order, as sorting all of them).
                cand.select_nth_unstable_by(c.top_k - 1, order);
                cand.truncate(c.top_k);
            }
            // Without filters the order does not matter: sorting the whole vocabulary (a
            // masked JSON step keeps most of it) would cost more than the step.
            if c.top_k > 0 || c.top_p < 1.0 || c.min_p > 0.0 {
                cand.sort_by(order);
            } else if let Some(best) = (0..cand.len()).min_by(|&i, &j| order(&cand[i], &cand[j])) {
                cand.swap(0, best);
            }
            cand
        };
        if cand.is_empty() {
            return 0;
        }
        self.draw(&cand)
    }

    /// Lowers the logits of tokens already chosen (frequency and presence penalties) or seen in
    /// the last `repeat_last_n` tokens of `history` (repetition penalty).
    fn penalize(&self, logits: &mut [f32], history: &[u32]) {
        let c = &self.config;
        if c.frequency_penalty != 0.0 || c.presence_penalty != 0.0 {
            for (&id, &n) in &self.chosen {
                if let Some(l) = logits.get_mut(id as usize) {
                    *l -= n as f32 * c.frequency_penalty + c.presence_penalty;
                }
            }
        }
        if c.repeat_penalty != 1.0 {
            let start = history.len().saturating_sub(c.repeat_last_n);
            let mut seen: Vec<u32> = history[start..].to_vec();
            seen.sort_unstable();
            seen.dedup();
            for id in seen {
                if let Some(l) = logits.get_mut(id as usize) {
                    *l = if *l > 0.0 { *l / c.repeat_penalty } else { *l * c.repeat_penalty };
                }
            }
        }
    }

    /// Draws from candidates best first (at least one): softmax at the temperature, then the
    /// min-p and top-p filters.
    fn draw(&mut self, cand: &[(usize, f32)]) -> u32 {
        let c = &self.config;
        let max = cand[0].1;
        let mut probs: Vec<f64> =
            cand.iter().map(|&(_, l)| (f64::from(l - max) / f64::from(c.temperature)).exp()).collect();
        let total: f64 = probs.iter().sum();
        probs.iter_mut().for_each(|p| *p /= total);
        // min-p: drop tokens far less likely than the best; top-p: keep the smallest head
        // whose mass reaches p.
        let floor = probs[0] * f64::from(c.min_p);
        let mut keep = probs.iter().take_while(|&&p| p >= floor).count().max(1);
        let mut mass = 0.0;
        for (i, p) in probs.iter().enumerate().take(keep) {
            mass += p;
            if mass >= f64::from(c.top_p) {
                keep = i + 1;
                break;
            }
        }
        let total: f64 = probs[..keep].iter().sum();
        let mut r = self.rng.next_f64() * total;
        for (i, p) in probs[..keep].iter().enumerate() {
            r -= p;
            if r <= 0.0 {
                return cand[i].0 as u32;
            }
        }
        cand[keep - 1].0 as u32
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn greedy_takes_the_first_maximum() {
        let mut s = Sampler::new(SamplerConfig::default());
        assert_eq!(s.sample(&[0.1, 0.9, 0.9, -1.0], &[]), 1);
    }

    #[test]
    fn repetition_penalty_moves_greedy_off_a_seen_token() {
        let config = SamplerConfig { repeat_penalty: 2.0, ..SamplerConfig::default() };
        let mut s = Sampler::new(config);
        assert_eq!(s.sample(&[1.0, 0.8], &[0]), 1);
    }

    #[test]
    fn same_seed_same_tokens_and_top_k_one_is_greedy() {
        let logits: Vec<f32> = (0..50).map(|i| ((i * 37) % 11) as f32 * 0.1).collect();
        let config =
            SamplerConfig { temperature: 1.0, top_k: 0, top_p: 1.0, min_p: 0.0, seed: 7, ..SamplerConfig::default() };
        let run = |cfg: SamplerConfig| {
            let mut s = Sampler::new(cfg);
            (0..20).map(|_| s.sample(&logits, &[])).collect::<Vec<_>>()
        };
        assert_eq!(run(config.clone()), run(config.clone()));
        let distinct: std::collections::BTreeSet<u32> = run(config.clone()).into_iter().collect();
        assert!(distinct.len() > 1, "temperature 1 over flat logits should vary");
        let top1 = SamplerConfig { top_k: 1, ..config };
        assert!(run(top1).iter().all(|&t| t as usize == argmax(&logits)));
    }

    #[test]
    fn min_p_drops_unlikely_tokens() {
        let logits = [10.0, 9.9, -10.0, -10.0];
        let config =
            SamplerConfig { temperature: 1.0, top_k: 0, top_p: 1.0, min_p: 0.5, seed: 1, ..SamplerConfig::default() };
        let mut s = Sampler::new(config);
        for _ in 0..50 {
            assert!(s.sample(&logits, &[]) < 2);
        }
    }

    #[test]
    fn frequency_and_presence_penalties_count_the_samplers_own_choices() {
        let logits = [1.0, 0.9, 0.0];
        // Greedy: token 0 until its penalty passes the 0.1 gap, then 1; the prompt's tokens
        // (history) do not count.
        let run = |frequency_penalty, presence_penalty| {
            let config = SamplerConfig { frequency_penalty, presence_penalty, ..SamplerConfig::default() };
            let mut s = Sampler::new(config);
            (0..4).map(|_| s.sample(&logits, &[0, 0, 0])).collect::<Vec<_>>()
        };
        assert_eq!(run(0.0, 0.0), [0, 0, 0, 0]);
        // Presence: once chosen, each token is 0.15 down, whatever the count.
        assert_eq!(run(0.0, 0.15), [0, 1, 0, 0]);
        // Frequency: 0.06 per choice, so 0 wins twice (1.0, 0.94) then loses to 0.9 at 0.88.
        assert_eq!(run(0.06, 0.0), [0, 0, 1, 0]);
        // A negative penalty makes repeats more likely: here it holds off the frequency one.
        assert_eq!(run(0.25, 0.0), [0, 1, 0, 1]);
        assert_eq!(run(0.25, -0.5), [0, 0, 0, 1]);
        let bad = SamplerConfig { presence_penalty: 2.5, ..SamplerConfig::default() };
        assert!(bad.validate().unwrap_err().contains("--presence-penalty"));
    }

    #[test]
    fn logprobs_are_the_log_softmax_of_the_logits_with_the_top_tokens() {
        let logits = [0.0f32, 2.0, 1.0, f32::NEG_INFINITY, 2.0];
        let e = TokenLogprob::new(&logits, 2, 3);
        let total: f64 = [0.0f64, 2.0, 1.0, 2.0].iter().map(|l| l.exp()).sum();
        let want = |l: f64| (l - total.ln()) as f32;
        assert_eq!(e.id, 2);
        assert!((e.logprob - want(1.0)).abs() < 1e-6, "{e:?}");
        let ids: Vec<u32> = e.top.iter().map(|&(i, _)| i).collect();
        assert_eq!(ids, [1, 4, 2], "most likely first, the lower id first among equals");
        assert!((e.top[0].1 - want(2.0)).abs() < 1e-6);
        assert_eq!(TokenLogprob::new(&logits, 3, 0), TokenLogprob { id: 3, logprob: LEAST_LOGPROB, top: vec![] });
        let all = TokenLogprob::new(&logits, 0, 10);
        assert_eq!(all.top.len(), 5);
        assert_eq!(all.top[4], (3, LEAST_LOGPROB));
    }

    /// The streamed best k are those of sorting every admitted value (higher first by
    /// total_cmp, lower id among equals): over ties, both zeros, NaN, infinities, more and
    /// fewer values than k, and values rising along the row (every one an insert).
    #[test]
    fn streamed_candidates_are_the_first_k_of_the_sorted_logits() {
        let mut rng = SplitMix64(11);
        let specials = [0.0, -0.0, f32::NAN, f32::INFINITY, f32::NEG_INFINITY, 1.5, 1.5];
        let order = |a: &(usize, f32), b: &(usize, f32)| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0));
        for case in 0..200 {
            let n = [1, 15, 16, 17, 100, 1000, 5000][case % 7];
            let logits: Vec<f32> = (0..n)
                .map(|i| match rng.next_f64() {
                    r if r < 0.1 => specials[i % specials.len()],
                    r if r < 0.3 => (r * 40.0).round() as f32 * 0.25,
                    _ if case % 5 == 0 => i as f32 * 0.01,
                    r => (r * 20.0 - 10.0) as f32,
                })
                .collect();
            for k in [1, 2, 20, 64, 256] {
                for (admit, name) in [(f32::is_finite as fn(f32) -> bool, "finite"), (|l: f32| !l.is_nan(), "not NaN")]
                {
                    let mut want: Vec<(usize, f32)> =
                        logits.iter().copied().enumerate().filter(|&(_, l)| admit(l)).collect();
                    want.sort_by(order);
                    want.truncate(k);
                    let got = best_of(&logits, k, admit);
                    let bits = |v: &[(usize, f32)]| v.iter().map(|&(i, l)| (i, l.to_bits())).collect::<Vec<_>>();
                    assert_eq!(bits(&got), bits(&want), "case {case}, n {n}, k {k}, {name}");
                }
            }
        }
    }

    #[test]
    fn bad_settings_are_named() {
        let bad = SamplerConfig { top_p: 0.0, ..SamplerConfig::default() };
        assert!(bad.validate().unwrap_err().contains("--top-p"));
        let bad = SamplerConfig { temperature: f32::NAN, ..SamplerConfig::default() };
        assert!(bad.validate().unwrap_err().contains("--temp"));
    }
}
