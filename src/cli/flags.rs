//! The flags several commands share, each defined once: its spellings, its help line with the
//! default it really has, and how it is parsed. A command's `--help` is built from the groups
//! it takes ([`Help`]), so what a command accepts and what its help says cannot drift apart.

use super::args::Args;
use super::model_defaults::{default_text, ModelSettings};
use super::CliError;
use crate::backend::DeviceChoice;
use crate::image::{Limits, PreprocessConfig};
use crate::runtime::batch::MAX_DEFAULT_SEQUENCES;
use crate::runtime::describe::ImageOptions;
use crate::runtime::generate::GenerateConfig;
use crate::runtime::sampler::SamplerConfig;
use crate::runtime::structured::JsonConstraint;
use crate::runtime::text_model::TextOptions;
use std::sync::Arc;

/// A flag: its spellings and the value it takes ("" for a switch).
pub struct Flag {
    pub names: &'static [&'static str],
    pub value: &'static str,
}

impl Flag {
    /// Its help line: spellings, value, text.
    pub fn help(&self, text: impl Into<String>) -> (String, String) {
        let mut spelled = self.names.join(", ");
        if !self.value.is_empty() {
            spelled = format!("{spelled} {}", self.value);
        }
        (spelled, text.into())
    }

    /// Its value, parsed, when given (refused when given twice).
    pub fn parse<T: std::str::FromStr>(&self, args: &mut Args) -> Result<Option<T>, CliError> {
        Ok(args.parsed(self.names)?)
    }

    /// Its value as given.
    pub fn string(&self, args: &mut Args) -> Result<Option<String>, CliError> {
        Ok(args.value(self.names)?)
    }

    /// Every value of a repeatable flag, in order.
    pub fn strings(&self, args: &mut Args) -> Result<Vec<String>, CliError> {
        Ok(args.values(self.names)?)
    }

    /// Whether a switch is present.
    pub fn present(&self, args: &mut Args) -> bool {
        args.flag(self.names)
    }
}

pub const MODEL: Flag = Flag { names: &["-m", "--model"], value: "FILE" };
pub const MMPROJ: Flag = Flag { names: &["--mmproj"], value: "FILE" };
pub const DEVICE: Flag = Flag { names: &["--device"], value: "D" };
// Second spellings are llama.cpp's, where they mean the same: -t, -c/--ctx-size, -s,
// --n-predict, --image, --temp (and OpenAI's --temperature).
pub const THREADS: Flag = Flag { names: &["-t", "--threads"], value: "N" };
pub const CTX: Flag = Flag { names: &["-c", "--ctx", "--ctx-size"], value: "N" };
pub const JSON: Flag = Flag { names: &["--json"], value: "" };
pub const BATCH: Flag = Flag { names: &["--batch"], value: "N" };
/// llama-server's spellings.
pub const PARALLEL: Flag = Flag { names: &["--parallel", "-np"], value: "N" };
/// The most sequences --batch takes (each holds a KV cache of --ctx slots).
pub const MAX_BATCH: usize = 256;
pub const PROMPT: Flag = Flag { names: &["-p", "--prompt"], value: "TEXT" };
pub const SYSTEM: Flag = Flag { names: &["--system"], value: "TEXT" };
pub const MAX_TOKENS: Flag = Flag { names: &["-n", "--max-tokens", "--n-predict"], value: "N" };
pub const TEMP: Flag = Flag { names: &["--temp", "--temperature"], value: "T" };
pub const TOP_K: Flag = Flag { names: &["--top-k"], value: "K" };
pub const TOP_P: Flag = Flag { names: &["--top-p"], value: "P" };
pub const MIN_P: Flag = Flag { names: &["--min-p"], value: "P" };
pub const REPEAT_PENALTY: Flag = Flag { names: &["--repeat-penalty"], value: "R" };
pub const FREQUENCY_PENALTY: Flag = Flag { names: &["--frequency-penalty"], value: "F" };
pub const PRESENCE_PENALTY: Flag = Flag { names: &["--presence-penalty"], value: "F" };
pub const SEED: Flag = Flag { names: &["-s", "--seed"], value: "S" };
pub const STOP: Flag = Flag { names: &["--stop"], value: "STR" };
pub const IGNORE_EOS: Flag = Flag { names: &["--ignore-eos"], value: "" };
pub const IMAGE_MAX_PIXELS: Flag = Flag { names: &["--image-max-pixels"], value: "N" };
pub const IMAGE_MIN_PIXELS: Flag = Flag { names: &["--image-min-pixels"], value: "N" };
pub const MAX_IMAGE_MP: Flag = Flag { names: &["--max-image-mp"], value: "N" };
pub const IMAGE: Flag = Flag { names: &["--image"], value: "FILE" };
pub const JSON_SCHEMA: Flag = Flag { names: &["--json-schema"], value: "FILE" };
pub const NO_SCHEMA_PROMPT: Flag = Flag { names: &["--no-schema-prompt"], value: "" };
/// llama.cpp's layer offload count: accepted so its command lines run, and answered (hrx
/// places every layer itself).
pub const GPU_LAYERS: Flag = Flag { names: &["-ngl", "--gpu-layers", "--n-gpu-layers"], value: "N" };
pub const NO_CHECK: Flag = Flag { names: &["--no-check"], value: "" };
pub const CHECK: Flag = Flag { names: &["--check"], value: "" };

/// `--device`, `--threads` and `--no-check`: where the model runs.
pub struct DeviceFlags {
    pub device: DeviceChoice,
    pub threads: Option<usize>,
    /// Whether hrx's self-check runs on a Vulkan device before the model (not `--no-check`,
    /// nor `self_check = false` in models.toml).
    pub check: bool,
}

impl DeviceFlags {
    pub fn help() -> Vec<(String, String)> {
        vec![
            DEVICE.help(
                "where to run: auto (the default: the best Vulkan GPU, else the CPU; a CPU Vulkan \
                 driver such as lavapipe only when named), N (Vulkan device N, see `hrx doctor`) \
                 or cpu; also HRX_DEVICE",
            ),
            THREADS.help("CPU threads (default: all cores)"),
            GPU_LAYERS.help(
                "llama.cpp's layer offload: 0 runs on the CPU, as llama.cpp's -ngl 0; any other N is \
                 not needed, hrx places every layer itself (all of them on the device --device picks)",
            ),
            NO_CHECK.help(
                "skip hrx's self-check: by default, the first start on a Vulkan device, driver and hrx \
                 build not seen before runs every kernel the model would use on small inputs against the \
                 CPU (a second or so) and leaves out any that is wrong there (`hrx doctor --check` shows \
                 it; models.toml's self_check = false skips it on a box)",
            ),
        ]
    }

    pub fn parse(args: &mut Args) -> Result<DeviceFlags, CliError> {
        let named = DEVICE.string(args)?;
        let device = DeviceChoice::resolve(named.as_deref()).map_err(CliError::usage)?;
        let device = match GPU_LAYERS.parse::<i64>(args)? {
            // llama.cpp's "no layer on the GPU": the CPU, unless --device names a device.
            Some(0) if named.is_none() || device == DeviceChoice::Cpu => DeviceChoice::Cpu,
            Some(0) => {
                return Err(CliError::usage(format!(
                    "-ngl 0 (no layer on the GPU: the CPU) and --device {} disagree: give one",
                    named.unwrap_or_default()
                )))
            }
            Some(n) => {
                eprintln!(
                    "hrx: -ngl {n} is not needed: hrx places every layer itself (all on the device --device picks)"
                );
                device
            }
            None => device,
        };
        let threads = THREADS.parse(args)?;
        if threads == Some(0) {
            return Err(CliError::usage("--threads must be at least 1"));
        }
        let check = !NO_CHECK.present(args) && crate::catalog::Catalog::load()?.0.self_check;
        Ok(DeviceFlags { device, threads, check })
    }
}

/// `--batch N` (caption, plan) or `--parallel N` (serve): sequences decoded together (None
/// when not given), refused outside 1..=MAX_BATCH naming `flag`.
pub fn sequences(args: &mut Args, flag: &Flag) -> Result<Option<usize>, CliError> {
    let n: Option<usize> = flag.parse(args)?;
    if n.is_some_and(|n| n == 0 || n > MAX_BATCH) {
        return Err(CliError::usage(format!("{} must be in 1..={MAX_BATCH}", flag.names[0])));
    }
    Ok(n)
}

/// How the default of `--batch` / `--parallel` is picked, for their help.
pub fn sequences_default_help() -> String {
    format!(
        "default: as many as a quarter of the device's memory\n\
         left by the model files holds caches for, 1 to {MAX_DEFAULT_SEQUENCES}; on the CPU, of the memory the\n\
         system has available; more than all of that memory holds is refused"
    )
}

/// `--ctx`: the context the KV cache is planned for.
pub fn ctx_help() -> (String, String) {
    CTX.help(format!("context length in tokens (default {})", TextOptions::on(DeviceChoice::Auto).n_ctx))
}

/// Text-model options from `--ctx` for `placement`'s device and self-check.
pub fn text_options(args: &mut Args, placement: &DeviceFlags) -> Result<TextOptions, CliError> {
    let mut text = TextOptions { check: placement.check, ..TextOptions::on(placement.device) };
    text.n_ctx = CTX.parse(args)?.unwrap_or(text.n_ctx);
    if text.n_ctx == 0 || text.n_ctx > 1 << 20 {
        return Err(CliError::usage("--ctx must be in 1..=1048576"));
    }
    Ok(text)
}

/// Defaults of the generation flags: hrx's own, or a model's catalog entry.
#[derive(Clone, Debug)]
pub struct GenerationDefaults {
    pub sampler: SamplerConfig,
    pub max_tokens: usize,
}

impl Default for GenerationDefaults {
    fn default() -> Self {
        GenerationDefaults { sampler: SamplerConfig::default(), max_tokens: 256 }
    }
}

impl GenerationDefaults {
    /// Help lines of the generation flags, each with its real default: hrx's own and, where they
    /// differ, that of the models models.toml lists (which a file that is one of them takes).
    pub fn help() -> Vec<(String, String)> {
        let s = GenerationDefaults::default();
        let t = |f: fn(&SamplerConfig) -> f32| default_text(f(&s.sampler), |m| f(&m.defaults.sampler));
        let n = default_text(s.max_tokens, |m| m.defaults.max_tokens);
        let k = default_text(s.sampler.top_k, |m| m.defaults.sampler.top_k);
        vec![
            MAX_TOKENS.help(format!("tokens to generate at most ({n})")),
            TEMP.help(format!("sampling temperature; 0 = greedy ({})", t(|c| c.temperature))),
            TOP_K.help(format!("keep the K most likely tokens; 0 = all ({k})")),
            TOP_P.help(format!("keep the smallest set with probability >= P ({})", t(|c| c.top_p))),
            MIN_P.help(format!("drop tokens below P x the best one's probability ({})", t(|c| c.min_p))),
            REPEAT_PENALTY.help(format!("penalise recently seen tokens; 1 = off ({})", t(|c| c.repeat_penalty))),
            FREQUENCY_PENALTY.help(format!(
                "OpenAI's: lower a token's logit by F for each time the answer already has it; -2..2, 0 = off ({})",
                t(|c| c.frequency_penalty)
            )),
            PRESENCE_PENALTY.help(format!(
                "OpenAI's: lower the logit of every token the answer already has by F; -2..2, 0 = off ({})",
                t(|c| c.presence_penalty)
            )),
            SEED.help(format!(
                "random seed for sampling ({})",
                default_text(s.sampler.seed, |m| m.defaults.sampler.seed)
            )),
            STOP.help("stop before this text (repeatable)"),
            IGNORE_EOS.help("keep going past end-of-generation tokens"),
        ]
    }

    /// Length, sampling and stops from the flags, these defaults where a flag is absent.
    pub fn parse(&self, args: &mut Args) -> Result<GenerateConfig, CliError> {
        let s = &self.sampler;
        let sampler = SamplerConfig {
            temperature: TEMP.parse(args)?.unwrap_or(s.temperature),
            top_k: TOP_K.parse(args)?.unwrap_or(s.top_k),
            top_p: TOP_P.parse(args)?.unwrap_or(s.top_p),
            min_p: MIN_P.parse(args)?.unwrap_or(s.min_p),
            repeat_penalty: REPEAT_PENALTY.parse(args)?.unwrap_or(s.repeat_penalty),
            frequency_penalty: FREQUENCY_PENALTY.parse(args)?.unwrap_or(s.frequency_penalty),
            presence_penalty: PRESENCE_PENALTY.parse(args)?.unwrap_or(s.presence_penalty),
            seed: SEED.parse(args)?.unwrap_or(s.seed),
            ..s.clone()
        };
        sampler.validate().map_err(CliError::usage)?;
        Ok(GenerateConfig {
            max_new_tokens: MAX_TOKENS.parse(args)?.unwrap_or(self.max_tokens),
            sampler,
            stop_strings: STOP.strings(args)?,
            stop_at_eog: !IGNORE_EOS.present(args),
            logprobs: None,
            json: None,
        })
    }
}

/// `--json-schema FILE`: answers that are JSON documents of the schema in FILE.
pub fn json_schema_help() -> (String, String) {
    JSON_SCHEMA.help(
        "answer with a JSON document of the schema in FILE, decoding constrained token by token \
         (README: Structured output lists what a schema may use; anything else is refused by name)",
    )
}

/// `--no-schema-prompt`: the help line.
pub fn no_schema_prompt_help() -> (String, String) {
    NO_SCHEMA_PROMPT.help(
        "with a schema, do not add the system line that gives the model the schema (by default \
         it is added after --system, as the model card advises for JSON answers)",
    )
}

/// Reads `--json-schema FILE`; a file that is not JSON, or a schema hrx cannot guarantee, is a
/// wrong command line (exit 2), naming the keyword.
pub fn json_schema(args: &mut Args) -> Result<Option<Arc<JsonConstraint>>, CliError> {
    let Some(path) = JSON_SCHEMA.string(args)? else { return Ok(None) };
    let text = std::fs::read_to_string(&path).map_err(CliError::os(format!("--json-schema {path}")))?;
    let value = crate::json::parse_ordered(&text, 64)
        .map_err(|e| CliError::usage(format!("--json-schema {path} is not JSON: {e}")))?;
    let constraint = JsonConstraint::from_schema(&value, "schema")
        .map_err(|e| CliError::usage(format!("--json-schema {path}: {e}")))?;
    Ok(Some(Arc::new(constraint)))
}

/// The image budget and limits: `--image-max-pixels`, `--image-min-pixels`, `--max-image-mp`.
pub struct ImageFlags;

impl ImageFlags {
    /// Help lines, with the real defaults: hrx's own and models.toml's models' where they differ.
    pub fn help() -> Vec<(String, String)> {
        let own = ModelSettings::own();
        let why = format!("~1 MP keeps a kiosk answer near a second; HF's own is {}", PreprocessConfig::HF_MAX_PIXELS);
        vec![
            IMAGE_MAX_PIXELS.help(format!(
                "resize larger images down to about N pixels ({}; {why})",
                default_text(own.max_pixels, |m| m.max_pixels)
            )),
            IMAGE_MIN_PIXELS.help(format!(
                "resize smaller images up to N pixels ({})",
                default_text(own.min_pixels, |m| m.min_pixels)
            )),
            MAX_IMAGE_MP.help(format!(
                "refuse images whose header declares more than N megapixels, before decoding (default {})",
                Limits::DEFAULT_MAX_PIXELS / 1_000_000
            )),
        ]
    }

    /// The options from the flags, with the budget of the model's `settings` as the default.
    pub fn parse(args: &mut Args, settings: &ModelSettings) -> Result<ImageOptions, CliError> {
        let mut images = ImageOptions {
            max_pixels: IMAGE_MAX_PIXELS.parse(args)?.unwrap_or(settings.max_pixels),
            min_pixels: IMAGE_MIN_PIXELS.parse(args)?.unwrap_or(settings.min_pixels),
            ..ImageOptions::default()
        };
        if let Some(mp) = MAX_IMAGE_MP.parse::<f64>(args)? {
            if !(mp > 0.0 && mp <= 1e4) {
                return Err(CliError::usage("--max-image-mp must be in (0, 10000]"));
            }
            images.limits.max_pixels = (mp * 1e6) as u64;
        }
        if images.max_pixels == 0 || images.max_pixels > 1 << 28 {
            return Err(CliError::usage("--image-max-pixels must be in 1..=268435456"));
        }
        if images.min_pixels > images.max_pixels {
            return Err(CliError::usage(format!(
                "--image-max-pixels {} is below --image-min-pixels {} (the size smaller images are resized up to)",
                images.max_pixels, images.min_pixels
            )));
        }
        Ok(images)
    }
}

/// A command's `--help`: what it does, its options (its own, then the shared groups it takes),
/// and a footer (environment, examples).
pub struct Help {
    pub title: &'static str,
    pub usage: &'static str,
    pub about: &'static str,
    pub options: Vec<(String, String)>,
    pub footer: &'static str,
}

impl Help {
    pub fn render(&self) -> String {
        let mut s = format!("{}\n\nusage: {}\n", self.title, self.usage);
        if !self.about.is_empty() {
            s.push_str(&format!("\n{}\n", self.about));
        }
        if !self.options.is_empty() {
            s.push('\n');
            let width = self.options.iter().map(|(f, _)| f.len()).max().unwrap_or(0).min(26);
            for (flag, text) in &self.options {
                s.push_str(&format!("  {}\n", wrap(flag, text, width)));
            }
        }
        if !self.footer.is_empty() {
            s.push_str(&format!("\n{}", self.footer));
        }
        s.trim_end().to_owned()
    }
}

/// `flag` then `text` wrapped at 88 columns, continuation lines aligned under the text.
fn wrap(flag: &str, text: &str, width: usize) -> String {
    let indent = 2 + width + 2;
    let mut out =
        if flag.len() > width { format!("{flag}\n{}", " ".repeat(indent)) } else { format!("{flag:<width$}  ") };
    let mut col = indent;
    for (i, word) in text.split_whitespace().enumerate() {
        if i > 0 && col + 1 + word.len() > 88 {
            out.push('\n');
            out.push_str(&" ".repeat(indent));
            col = indent;
        } else if i > 0 {
            out.push(' ');
            col += 1;
        }
        out.push_str(word);
        col += word.len();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn help_lines_wrap_under_their_text() {
        let h = Help {
            title: "hrx x: test",
            usage: "hrx x",
            about: "",
            options: vec![MODEL.help("the model"), DEVICE.help("word ".repeat(30))],
            footer: "",
        };
        let text = h.render();
        assert!(text.contains("  -m, --model FILE  the model"), "{text}");
        assert!(text.lines().all(|l| l.len() <= 88), "{text}");
    }

    #[test]
    fn placement_refuses_a_bad_device_by_name() {
        let mut args = Args::new(vec!["--device".into(), "gpu".into()]);
        let e = DeviceFlags::parse(&mut args).err().expect("refused");
        assert!(e.to_string().contains("--device"), "{e}");
    }
}
