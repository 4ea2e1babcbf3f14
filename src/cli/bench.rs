//! `hrx bench`: prompt processing and generation speed, cold start and peak memory.

use super::flags::{json_schema, DeviceFlags, Flag, Help, JSON, JSON_SCHEMA, MAX_BATCH, MMPROJ, MODEL};
use super::{CliError, Command};
use crate::backend::vulkan::{Profile, RecordingStats, RunTimes};
use crate::cli::args::Args;
use crate::json::Json;
use crate::runtime::sampler::argmax;
use crate::runtime::session::{PromptPiece, Session};
use crate::runtime::structured::{JsonConstraint, Next};
use crate::runtime::text_model::{Read, TextModel, TextOptions, GATHERED_CHUNK};
use crate::runtime::RuntimeError;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

fn help() -> String {
    let mut options = vec![
        MODEL.help("the text model GGUF"),
        MMPROJ.help("the vision projector GGUF: also time image encode"),
        IMAGE_SIZE.help("side of the square test image in pixels (default 448)"),
        PROMPT_LEN.help("prompt length for pp (default 512; 0: no pp)"),
        GEN_LEN.help("tokens for tg (default 128; 0: no tg)"),
        DEPTH.help("tokens already in the KV cache before pp and tg, as llama-bench's -d (default 0)"),
        REPS.help("repetitions, after one untimed warm-up round (default 3)"),
        KERNELS.help(
            "instead: time each matrix kernel the device has on every weight shape of the model's \
             products (and the projector's, with --mmproj), one column (decode) and -p columns \
             (prefill; up to 32, the vector kernels too: sequences decoded together), in GB/s of weight bytes and TFLOP/s beside the device's copy bandwidth",
        ),
        ONLY.help("with --kernels: only the kernels whose name contains TEXT (e.g. mul_mat_cm)"),
        BATCHES.help(
            "instead: for each number B of sequences, B prompts of -p tokens prefilled together \
             (as hrx caption does), then -n steps decoding a token of each of the B together \
             (each step reading back the B greedy tokens, the argmax taken on the device); \
             prompt, decode and total tokens/s as llama-batched-bench prints them (its -npp, -ntg, \
             -npl); with --mmproj each prompt starts with an --image-size test image, the B \
             images encoded before the prompts, as many a run as the default pixel budget \
             holds, and images/s and captions/min are printed too",
        ),
        UBATCH.help(format!(
            "with --batch: tokens per prefill call, the B prompts' tokens one after another \
             (default {GATHERED_CHUNK}, as hrx caption --batch)"
        )),
        JSON_SCHEMA.help(
            "also run tg constrained to the schema in FILE (greedy, a new document whenever one \
             ends) and time the mask of each step: its share of a step (the first, untimed round \
             fills the mask caches, and is printed apart)",
        ),
    ];
    options.extend(DeviceFlags::help());
    options.push(JSON.help("one JSON object with every number"));
    Help {
        title: "hrx bench: measure speed and memory",
        usage: "hrx bench -m MODEL.gguf [--mmproj MMPROJ.gguf [--image-size N]] [-p N] [-n N] [-r N] [--threads N] [--device D] [--json]\n\
                \x20      hrx bench -m MODEL.gguf --batch 1,2,4,8 [--mmproj MMPROJ.gguf [--image-size N]] [-p N] [-n N] [-ub N] [--threads N] [--device D] [--json]",
        about: "Measures, like llama-bench: cold start (open the file, build and plan the graphs,\n\
                bind the weights), prompt processing (pp: a prompt of N tokens in one go, tokens/s),\n\
                token generation (tg: N tokens one at a time after a short prompt, tokens/s; each\n\
                step reads back its greedy token, the argmax taken on the device), and\n\
                the process's peak resident memory; with --mmproj also image encode (the vision\n\
                tower on an N x N image, default 448: seconds per image). Each test runs -r times;\n\
                the mean and standard deviation are printed. Token ids and pixels are fixed\n\
                pseudo-random values, so any model works. On Vulkan it also prints each graph's\n\
                dispatches and pipeline barriers per run and, where the device writes timestamps,\n\
                its GPU time per run from the first dispatch to the last: beside tg's time per\n\
                token, what the host adds to a step (--json: \"graphs\").",
        options,
        footer: "environment: HRX_KERNELS=reference benchmarks the reference kernels. HRX_VK_PROFILE=1\n\
                 (Vulkan) times every dispatch with GPU timestamps and prints, per graph, each kernel's\n\
                 dispatches per run, total GPU time over all runs and share (--json: \"profile\" of each\n\
                 graph; --batch: each plan's over every size it ran, in the text output only);\n\
                 while profiling a barrier separates every two dispatches, so that each time is\n\
                 one kernel's alone, and the speeds measured are lower. Kernel choices to compare:\n\
                 HRX_VK_NO_COOPMAT=1 (many-column products and attention in f32 tiles instead\n\
                 of on cooperative matrices with f16 operands), HRX_VK_EXACT=1 (cooperative-matrix\n\
                 products with f32-exact split operands), HRX_VK_KV_F32=1 (a KV cache of f32 values),\n\
                 HRX_VK_F32_ACTIVATIONS=1 (activations the matrix-unit products read kept in f32),\n\
                 HRX_VK_NO_SUBGROUP=1 (portable matrix-vector kernels),\n\
                 HRX_VK_MATVEC=sg (the one-subgroup-per-row matrix-vector kernel instead of the\n\
                 wide one), HRX_VK_NO_NARROW=1 (5 to 32 columns on 64x64 cooperative-matrix tiles\n\
                 or the wide matrix-vector kernel, not narrow tiles), HRX_VK_NO_FUSE=1 (no fused or folded dispatches),\n\
                 HRX_VK_NO_TILED_ATTN=1 (one-query attention for prefill and vision too).\n\
                 While profiling, each pipeline's driver statistics (registers, spills, shared\n\
                 memory, as the driver names them) are logged at info level (RUST_LOG=info) where\n\
                 the device has VK_KHR_pipeline_executable_properties. HRX_VK_CM_TILES=SG_M,SG_N,\n\
                 BK,DEPTH[,PROBE] sets the cooperative-matrix product's tiles for measuring others;\n\
                 PROBE 1 leaves out its products and 2 its staging (wrong results: timing only);\n\
                 HRX_VK_CM_LARGE, in the same form, the large tiles' (for many rows and columns);\n\
                 HRX_VK_CM_NARROW the narrow tiles' (SG_M x SG_N per workgroup).\n\
                 \n\
                 example: hrx bench -m Qwen3-VL-2B-Instruct-Q4_K_M.gguf -p 512 -n 128 --json",
    }
    .render()
}

pub const COMMAND: Command =
    Command { name: "bench", summary: "measure prompt/generation speed, start-up and memory", help, run };

const IMAGE_SIZE: Flag = Flag { names: &["--image-size"], value: "N" };
const PROMPT_LEN: Flag = Flag { names: &["-p"], value: "N" };
const GEN_LEN: Flag = Flag { names: &["-n"], value: "N" };
const REPS: Flag = Flag { names: &["-r"], value: "N" };
const DEPTH: Flag = Flag { names: &["-d"], value: "N" };
const KERNELS: Flag = Flag { names: &["--kernels"], value: "" };
const ONLY: Flag = Flag { names: &["--only"], value: "TEXT" };
const BATCHES: Flag = Flag { names: &["--batch"], value: "B,B,..." };
const UBATCH: Flag = Flag { names: &["-ub"], value: "N" };

/// `--batch 1,2,4,8`: each size in 1..=MAX_BATCH.
fn batch_sizes(list: &str) -> Result<Vec<usize>, CliError> {
    list.split(',')
        .map(|b| match b.trim().parse::<usize>() {
            Ok(n) if (1..=MAX_BATCH).contains(&n) => Ok(n),
            _ => Err(CliError::usage(format!("--batch {list:?}: each size must be in 1..={MAX_BATCH}"))),
        })
        .collect()
}

fn mean_sd(xs: &[f64]) -> (f64, f64) {
    let n = xs.len().max(1) as f64;
    let mean = xs.iter().sum::<f64>() / n;
    let var = xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / n;
    (mean, var.sqrt())
}

/// Peak resident set size in bytes (Linux), if known.
fn peak_rss_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

fn run(mut args: Args, out: &mut dyn Write) -> Result<(), CliError> {
    let model_path = MODEL.string(&mut args)?.ok_or_else(|| CliError::usage("bench needs -m MODEL.gguf"))?;
    let n_prompt: usize = PROMPT_LEN.parse(&mut args)?.unwrap_or(512);
    let n_gen: usize = GEN_LEN.parse(&mut args)?.unwrap_or(128);
    let reps: usize = REPS.parse(&mut args)?.unwrap_or(3);
    let depth: usize = DEPTH.parse(&mut args)?.unwrap_or(0);
    let kernels = KERNELS.present(&mut args);
    let only = ONLY.string(&mut args)?;
    let DeviceFlags { device, threads, check } = DeviceFlags::parse(&mut args)?;
    let mmproj = MMPROJ.string(&mut args)?;
    let image_size: Option<usize> = IMAGE_SIZE.parse(&mut args)?;
    let json = JSON.present(&mut args);
    let schema = json_schema(&mut args)?;
    let batches = BATCHES.string(&mut args)?.map(|list| batch_sizes(&list)).transpose()?;
    let ubatch: Option<usize> = UBATCH.parse(&mut args)?;
    if !args.finish()?.is_empty() {
        return Err(CliError::usage("bench takes no positional arguments"));
    }
    if image_size.is_some() && mmproj.is_none() {
        return Err(CliError::usage("--image-size sizes the test image of --mmproj: give --mmproj too"));
    }
    let image_size = image_size.unwrap_or(448);
    if ubatch.is_some() && batches.is_none() {
        return Err(CliError::usage("-ub sets the prefill calls of --batch: give --batch too"));
    }
    if ubatch == Some(0) {
        return Err(CliError::usage("-ub 0: a prefill call takes at least 1 token"));
    }
    if let Some(sizes) = batches {
        if kernels || schema.is_some() || depth > 0 {
            return Err(CliError::usage(
                "--batch goes with -p, -n, --mmproj, --image-size, --device, --threads and --json only",
            ));
        }
        let image = mmproj.map(|path| (PathBuf::from(path), image_size));
        let chunk = ubatch.unwrap_or(GATHERED_CHUNK);
        let b = super::bench_batch::Batches { n_prompt, n_gen, sizes, image, chunk };
        return super::bench_batch::run(
            Path::new(&model_path),
            TextOptions { check, ..TextOptions::on(device) },
            threads,
            &b,
            json,
            out,
        );
    }
    if schema.is_some() && n_gen == 0 {
        return Err(CliError::usage("--json-schema times the mask of tg steps: give -n N"));
    }
    if kernels {
        let only = only.unwrap_or_default();
        return super::bench_kernels::run(&model_path, mmproj.as_deref(), n_prompt.max(1), &only, device, json, out);
    }
    if only.is_some() {
        return Err(CliError::usage("--only chooses kernels for --kernels"));
    }
    if reps == 0 || (n_prompt == 0 && n_gen == 0 && mmproj.is_none()) {
        return Err(CliError::usage("-r must be at least 1, and -p or -n (or --mmproj) must ask for something"));
    }
    // Room for the depth, then the longer of the two tests (one prompt token before tg).
    let n_ctx = depth + n_prompt.max(n_gen + 1) + 8;
    let chunk = if n_prompt > 0 { n_prompt.min(512) } else { 512 };
    let options = TextOptions { n_ctx, chunk, check, ..TextOptions::on(device) };
    let t0 = Instant::now();
    let mut model = TextModel::load(Path::new(&model_path), options)?;
    let cold_start = t0.elapsed().as_secs_f64();
    let recorded_at_load = model.recordings();
    if let Some(n) = threads {
        model.set_threads(n);
    }
    let n_vocab = model.params().n_vocab as u64;
    let token = |i: usize| ((i as u64 * 2_654_435_761 + 11) % n_vocab) as u32;
    let tokens = |from: usize, n: usize| -> Vec<PromptPiece> {
        (from..from + n).map(|i| PromptPiece::Token(token(i))).collect()
    };
    // The cache filled with `depth` tokens first (llama-bench's -d), untimed.
    let mut at_depth = Session::new();
    if depth > 0 {
        at_depth.feed(&mut model, &tokens(0, depth))?;
    }
    let (mut pp, mut tg, mut tg_json, mut mask_share, mut mask_ms) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let mut cold_mask_ms = None;
    // The recordings' totals after the warm-up round: GPU times are of the timed rounds.
    let mut warmed = Vec::new();
    // One untimed round first, as llama-bench warms up: first runs pay for first touches.
    for rep in 0..=reps {
        if n_prompt > 0 {
            let mut session = at_depth.clone();
            let t = Instant::now();
            session.feed(&mut model, &tokens(depth, n_prompt))?;
            pp.push(n_prompt as f64 / t.elapsed().as_secs_f64());
        }
        if n_gen > 0 {
            let mut session = at_depth.clone();
            session.feed(&mut model, &tokens(depth, 1))?;
            let t = Instant::now();
            for i in 0..n_gen {
                session.step(&mut model, token(depth + 1 + i), Read::Argmax)?;
            }
            tg.push(n_gen as f64 / t.elapsed().as_secs_f64());
        }
        if let Some(c) = &schema {
            let (seconds, mask_seconds) = constrained_tg(&mut model, &at_depth, c, n_gen, token(depth))?;
            tg_json.push(n_gen as f64 / seconds);
            mask_share.push(100.0 * mask_seconds / seconds);
            mask_ms.push(1e3 * mask_seconds / n_gen as f64);
        }
        if rep == 0 {
            warmed = model.recording_stats();
            pp.clear();
            tg.clear();
            cold_mask_ms = mask_ms.pop();
            tg_json.clear();
            mask_share.clear();
        }
    }
    // Each Vulkan graph's dispatches and barriers per run (none on the CPU), its GPU time
    // over the timed rounds.
    let mut graphs = after_warm_up(model.recording_stats(), &warmed);
    let encode = match &mmproj {
        None => None,
        Some(path) => Some(bench_encode(Path::new(path), image_size, reps, threads, model.backend(), &mut graphs)?),
    };
    // A test's tokens/s (mean, sd), or None when it was not asked for.
    let rate = |xs: &[f64]| (!xs.is_empty()).then(|| mean_sd(xs));
    let (pp_rate, tg_rate) = (rate(&pp), rate(&tg));
    let constrained = rate(&tg_json).zip(rate(&mask_ms)).zip(rate(&mask_share));
    let rate_json = |tokens: usize, r: Option<(f64, f64)>| {
        r.map_or(Json::Null, |(mean, sd)| {
            Json::obj([
                ("tokens", Json::Int(tokens as i128)),
                ("depth", Json::Int(depth as i128)),
                ("tokens_per_second", Json::Num(mean)),
                ("sd", Json::Num(sd)),
            ])
        })
    };
    // Plan once: the Vulkan executor's command buffers, recorded at load and only replayed.
    let recordings = recorded_at_load.zip(model.recordings());
    let peak = peak_rss_bytes();
    let weights: u64 = model.file().tensors().iter().map(|t| t.n_bytes).sum();
    if json {
        let j = Json::obj([
            ("model", Json::str(&model_path)),
            ("backend", Json::str(model.backend().describe())),
            ("kernels", Json::str(format!("{:?}", model.options().kernels).to_lowercase())),
            ("threads", threads.map_or(Json::Null, |t| Json::Int(t as i128))),
            ("weight_bytes", Json::Int(weights.into())),
            ("cold_start_seconds", Json::Num(cold_start)),
            ("pp", rate_json(n_prompt, pp_rate)),
            ("tg", rate_json(n_gen, tg_rate)),
            (
                "tg_json_schema",
                constrained.map_or(Json::Null, |((rate, (ms, ms_sd)), (share, share_sd))| {
                    Json::obj([
                        ("tokens_per_second", Json::Num(rate.0)),
                        ("sd", Json::Num(rate.1)),
                        ("mask_ms_per_token", Json::Num(ms)),
                        ("mask_ms_sd", Json::Num(ms_sd)),
                        ("mask_share_percent", Json::Num(share)),
                        ("mask_share_sd", Json::Num(share_sd)),
                        ("first_round_mask_ms_per_token", cold_mask_ms.map_or(Json::Null, Json::Num)),
                    ])
                }),
            ),
            ("peak_rss_bytes", peak.map_or(Json::Null, |p| Json::Int(p.into()))),
            (
                "image_encode",
                encode.map_or(Json::Null, |(side, mean, sd)| {
                    Json::obj([("size", Json::Int(side as i128)), ("seconds", Json::Num(mean)), ("sd", Json::Num(sd))])
                }),
            ),
            ("command_buffer_recordings", recordings.map_or(Json::Null, |(_, after)| Json::Int(after as i128))),
            ("graphs", Json::Arr(graphs.iter().map(graph_json).collect())),
        ]);
        writeln!(out, "{}", j.to_string_compact())?;
    } else {
        writeln!(
            out,
            "model: {model_path} ({:.1} MiB of weights), backend {}",
            weights as f64 / 1048576.0,
            model.backend().describe()
        )?;
        writeln!(out, "cold start: {:.3} s", cold_start)?;
        let at = if depth > 0 { format!(" @ d{depth}") } else { String::new() };
        if let Some((mean, sd)) = pp_rate {
            writeln!(out, "pp{n_prompt}{at}: {mean:.1} ± {sd:.1} tokens/s")?;
        }
        if let Some((mean, sd)) = tg_rate {
            writeln!(out, "tg{n_gen}{at}: {mean:.2} ± {sd:.2} tokens/s")?;
        }
        if let Some(((rate, (ms, ms_sd)), (share, share_sd))) = constrained {
            writeln!(
                out,
                "tg{n_gen}{at} with --json-schema: {:.2} ± {:.2} tokens/s; mask {ms:.3} ± {ms_sd:.3} ms a token, {share:.1} ± {share_sd:.1} % of a step (first round, filling the caches: {:.3} ms a token)",
                rate.0,
                rate.1,
                cold_mask_ms.unwrap_or(f64::NAN)
            )?;
        }
        if let Some((side, mean, sd)) = encode {
            writeln!(out, "image encode {side}x{side}: {mean:.3} ± {sd:.3} s")?;
        }
        if let Some(p) = peak {
            writeln!(out, "peak memory: {:.1} MiB", p as f64 / 1048576.0)?;
        }
        if let Some((load, after)) = recordings {
            writeln!(out, "command buffers recorded: {load} at load, {after} after every run")?;
        }
        for g in &graphs {
            write!(out, "graph {}: {} dispatches, {} barriers per run", g.graph, g.dispatches, g.barriers)?;
            match g.gpu.as_ref().and_then(|t| t.mean_ms().map(|ms| (ms, t.runs))) {
                Some((ms, runs)) => writeln!(out, "; GPU {ms:.3} ms a run, first dispatch to last (mean of {runs})")?,
                None => writeln!(out)?,
            }
        }
        write_profiles(&graphs, out)?;
    }
    Ok(())
}

/// `n_gen` greedy tokens after `first` constrained to `c`, a new document whenever one ends:
/// the seconds they take and the seconds of those spent on masks.
fn constrained_tg(
    model: &mut TextModel,
    at_depth: &Session,
    c: &std::sync::Arc<JsonConstraint>,
    n_gen: usize,
    first: u32,
) -> Result<(f64, f64), RuntimeError> {
    let tokenizer = std::sync::Arc::clone(model.tokenizer());
    let mut session = at_depth.clone();
    let mut logits = session.feed(model, &[PromptPiece::Token(first)])?;
    let mut document = c.start(&tokenizer);
    // No limit on a document here: the budget is what the context leaves, well past any.
    let left = 1 << 20;
    let (t, mut mask_seconds) = (Instant::now(), 0.0);
    for _ in 0..n_gen {
        let m = Instant::now();
        while document.mask(&mut logits, left, &[]) == Next::Done {
            document = c.start(&tokenizer);
        }
        mask_seconds += m.elapsed().as_secs_f64();
        // Choosing the token is the sampler's work, which an unconstrained step does too.
        let id = argmax(&logits) as u32;
        let m = Instant::now();
        if !document.take(id) {
            return Err(RuntimeError::Usage(format!("internal: token {id} does not fit the JSON document")));
        }
        mask_seconds += m.elapsed().as_secs_f64();
        logits = session.step(model, id, Read::Logits)?.logits()?;
    }
    Ok((t.elapsed().as_secs_f64(), mask_seconds))
}

/// One Vulkan graph's recording, for --json.
fn graph_json(g: &RecordingStats) -> Json {
    let profile = g.profile.as_ref().map_or(Json::Null, |p| {
        let total = p.total_nanos();
        let kernels = p.kernels.iter().map(|k| {
            Json::obj([
                ("kernel", Json::str(&k.kernel)),
                ("dispatches", Json::Int(k.dispatches as i128)),
                ("total_ms", Json::Num(k.nanos / 1e6)),
                ("share", Json::Num(share(k.nanos, total))),
            ])
        });
        Json::obj([
            ("runs", Json::Int(p.runs as i128)),
            ("total_ms", Json::Num(total / 1e6)),
            ("kernels", Json::Arr(kernels.collect())),
        ])
    });
    Json::obj([
        ("name", Json::str(&g.graph)),
        ("dispatches", Json::Int(g.dispatches as i128)),
        ("barriers", Json::Int(g.barriers as i128)),
        ("runs", g.gpu.as_ref().map_or(Json::Null, |t| Json::Int(t.runs as i128))),
        ("gpu_ms_per_run", g.gpu.as_ref().and_then(RunTimes::mean_ms).map_or(Json::Null, Json::Num)),
        ("profile", profile),
    ])
}

/// `part` of `total` in percent (0 when nothing was timed).
fn share(part: f64, total: f64) -> f64 {
    if total > 0.0 {
        100.0 * part / total
    } else {
        0.0
    }
}

/// The GPU time of each profiled graph by kernel, the largest first (HRX_VK_PROFILE=1).
pub(super) fn write_profiles(graphs: &[RecordingStats], out: &mut dyn Write) -> std::io::Result<()> {
    let profiled: Vec<(&str, &Profile)> =
        graphs.iter().filter_map(|g| g.profile.as_ref().map(|p| (g.graph.as_str(), p))).collect();
    if profiled.is_empty() {
        if crate::settings::settings().switch(&crate::settings::VK_PROFILE) {
            writeln!(
                out,
                "GPU profile: none (HRX_VK_PROFILE=1 times Vulkan devices that write timestamps; this run has none)"
            )?;
        }
        return Ok(());
    }
    writeln!(out, "GPU time per kernel (HRX_VK_PROFILE=1: a barrier between every two dispatches, so each time is one kernel's alone):")?;
    for (graph, p) in profiled {
        let total = p.total_nanos();
        let per_run = if p.runs > 0 { total / p.runs as f64 } else { 0.0 };
        let plural = if p.runs == 1 { "" } else { "s" };
        writeln!(
            out,
            "graph {graph}: {:.3} ms per run ({} run{plural}: {:.3} ms)",
            per_run / 1e6,
            p.runs,
            total / 1e6
        )?;
        writeln!(out, "  {:<40} {:>14} {:>12} {:>7}", "kernel", "dispatches/run", "total ms", "share")?;
        for k in &p.kernels {
            writeln!(
                out,
                "  {:<40} {:>14} {:>12.3} {:>6.1}%",
                k.kernel,
                k.dispatches,
                k.nanos / 1e6,
                share(k.nanos, total)
            )?;
        }
    }
    Ok(())
}

/// Recordings' stats with their GPU times counted from `warmed`, the same recordings' stats
/// after the warm-up round.
fn after_warm_up(mut graphs: Vec<RecordingStats>, warmed: &[RecordingStats]) -> Vec<RecordingStats> {
    for (g, w) in graphs.iter_mut().zip(warmed) {
        g.gpu = g.gpu.as_ref().zip(w.gpu.as_ref()).map(|(now, then)| now.since(then));
    }
    graphs
}

/// Seconds to encode a pseudo-random `side` x `side` image on the text model's backend:
/// (side, mean, sd); the encoder's recording goes to `graphs` (Vulkan).
fn bench_encode(
    path: &Path,
    side: usize,
    reps: usize,
    threads: Option<usize>,
    backend: &crate::backend::Backend,
    graphs: &mut Vec<RecordingStats>,
) -> Result<(usize, f64, f64), CliError> {
    let image = TestImage::new(path, side)?;
    let mut vision = image.load(1, threads, backend)?;
    let patches = &image.patches;
    let [_, gh, gw] = patches.grid_thw;
    let mut times = Vec::with_capacity(reps);
    // One untimed encode first (first touches), as for pp and tg.
    vision.encode(&patches.pixel_values, gh, gw)?;
    let warmed = vision.recording_stats();
    for _ in 0..reps {
        let t = Instant::now();
        vision.encode(&patches.pixel_values, gh, gw)?;
        times.push(t.elapsed().as_secs_f64());
    }
    let (mean, sd) = mean_sd(&times);
    graphs.extend(after_warm_up(vision.recording_stats(), &warmed));
    Ok((patches.resized_hw.0, mean, sd))
}

/// A `side` x `side` test image (fixed pseudo-random pixels) preprocessed for the projector
/// at `path`, which is loaded later (`TestImage::load`): the image's size in tokens decides the
/// text model's context first.
pub(super) struct TestImage {
    file: std::sync::Arc<crate::gguf::GgufFile>,
    pub patches: crate::image::Patches,
}

impl TestImage {
    pub(super) fn new(path: &Path, side: usize) -> Result<TestImage, CliError> {
        use crate::image::{preprocess, PreprocessConfig, RgbImage};
        if side == 0 || side > 8192 {
            return Err(CliError::usage("--image-size must be in 1..=8192"));
        }
        let pixels: Vec<u8> = (0..side * side * 3).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8).collect();
        let img = RgbImage::from_raw(side, side, pixels)
            .ok_or_else(|| CliError::Failed(format!("a {side}x{side} test image")))?;
        let file = std::sync::Arc::new(crate::gguf::GgufFile::open(path)?);
        let params = crate::model::VisionParams::from_gguf(&file).map_err(RuntimeError::from)?;
        let cfg = PreprocessConfig {
            patch_size: params.patch_size,
            merge_size: params.merge,
            max_pixels: (side * side).max(PreprocessConfig::HF_MIN_PIXELS),
            ..PreprocessConfig::hf()
        };
        let patches = preprocess(&img, &cfg).map_err(RuntimeError::from)?;
        Ok(TestImage { file, patches })
    }

    /// KV slots the image's tokens take: one per merged patch.
    pub(super) fn slots(&self) -> usize {
        let merge = self.patches.merge_size.max(1);
        self.patches.n_patches() / (merge * merge)
    }

    /// The projector's vision model on `backend`, planned for `copies` of the image in a run.
    pub(super) fn load(
        &self,
        copies: usize,
        threads: Option<usize>,
        backend: &crate::backend::Backend,
    ) -> Result<crate::runtime::vision_model::VisionModel, CliError> {
        let patches = self.patches.n_patches() * copies.max(1);
        let mut vision = crate::runtime::vision_model::VisionModel::load_on(self.file.clone(), patches, backend)?;
        if let Some(n) = threads {
            vision.set_threads(n);
        }
        Ok(vision)
    }
}
