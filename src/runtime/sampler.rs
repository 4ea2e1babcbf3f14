//! Choosing the next token from logits: greedy, or temperature with top-k, top-p and min-p
//! filters, with a repetition penalty and a seeded generator (runs are reproducible).

use crate::rng::SplitMix64;

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
        Ok(())
    }
}

pub struct Sampler {
    config: SamplerConfig,
    rng: SplitMix64,
}

/// Index of the largest value (the first of equal ones, as argmax in torch).
pub fn argmax(logits: &[f32]) -> usize {
    let mut best = 0;
    for (i, &x) in logits.iter().enumerate() {
        if x > logits[best] {
            best = i;
        }
    }
    best
}

impl Sampler {
    pub fn new(config: SamplerConfig) -> Sampler {
        let rng = SplitMix64(config.seed);
        Sampler { config, rng }
    }

    /// The next token given the logits and the tokens so far.
    pub fn sample(&mut self, logits: &[f32], history: &[u32]) -> u32 {
        let c = &self.config;
        let mut logits = logits.to_vec();
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
        if c.temperature == 0.0 {
            return argmax(&logits) as u32;
        }
        let mut cand: Vec<(usize, f32)> = logits.iter().copied().enumerate().filter(|(_, l)| l.is_finite()).collect();
        if cand.is_empty() {
            return 0;
        }
        cand.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        if c.top_k > 0 {
            cand.truncate(c.top_k);
        }
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
    fn bad_settings_are_named() {
        let bad = SamplerConfig { top_p: 0.0, ..SamplerConfig::default() };
        assert!(bad.validate().unwrap_err().contains("--top-p"));
        let bad = SamplerConfig { temperature: f32::NAN, ..SamplerConfig::default() };
        assert!(bad.validate().unwrap_err().contains("--temp"));
    }
}
