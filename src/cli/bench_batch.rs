//! `hrx bench --batch 1,2,4,8`: prompt, decode and total tokens/s for each number of sequences
//! decoded together, as llama-batched-bench prints them (its -npp, -ntg, -npl): B prompts of
//! PP tokens prefilled together, then TG batched steps of a token for each of the B. With a
//! projector (--mmproj), each prompt is a test image's tokens, the B images encoded before the
//! prompts, as many a run as the default pixel budget holds (as `hrx caption` does), then the
//! PP tokens: images encoded a second and captions a minute per batch size besides.

use super::bench::TestImage;
use super::CliError;
use crate::image::PreprocessConfig;
use crate::json::Json;
use crate::runtime::session::{feed_together, PromptPiece, Session};
use crate::runtime::text_model::{Read, TextModel, TextOptions};
use crate::runtime::vision_model::VisionModel;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// One batch size's run: its times in seconds (t_enc: the images' encodes, 0 without).
struct Row {
    batch: usize,
    t_enc: f64,
    t_pp: f64,
    t_tg: f64,
}

/// What to run: prompt and generated tokens per sequence, the batch sizes, and the projector
/// and image side of the test image each prompt starts with, if any.
pub struct Batches {
    pub n_prompt: usize,
    pub n_gen: usize,
    pub sizes: Vec<usize>,
    pub image: Option<(PathBuf, usize)>,
    /// Tokens per prefill call.
    pub chunk: usize,
}

/// The test image every prompt starts with, and the vision model encoding it.
struct Image {
    test: TestImage,
    vision: VisionModel,
}

/// Loads the model once for the largest batch and times each batch size after one untimed
/// warm-up round of the largest.
pub fn run(
    model: &Path,
    options: TextOptions,
    threads: Option<usize>,
    b: &Batches,
    json: bool,
    out: &mut dyn Write,
) -> Result<(), CliError> {
    let n_seq = b.sizes.iter().copied().max().unwrap_or(1);
    let test = b.image.as_ref().map(|(path, side)| TestImage::new(path, *side)).transpose()?;
    let n_image = test.as_ref().map_or(0, TestImage::slots);
    let n_ctx = n_image + b.n_prompt + b.n_gen + 1;
    let options = TextOptions { n_ctx, chunk: b.chunk, ..options.with_sequences(n_seq) };
    let mut model = TextModel::load(model, options)?;
    if let Some(n) = threads {
        model.set_threads(n);
    }
    let mut image = match test {
        Some(test) => {
            // Planned, as hrx caption's, for the default pixel budget: as many copies a run as it holds.
            let (h, w) = test.patches.resized_hw;
            let copies = PreprocessConfig::KIOSK_MAX_PIXELS / (h * w).max(1);
            Some(Image { vision: test.load(copies, threads, model.backend())?, test })
        }
        None => None,
    };
    let mut rows = Vec::new();
    for &batch in std::iter::once(&n_seq).chain(&b.sizes) {
        rows.push(time_batch(&mut model, image.as_mut(), batch, b)?);
    }
    rows.remove(0);
    let n_prompt = n_image + b.n_prompt;
    let (pp, tg) = (n_prompt as f64, b.n_gen as f64);
    let rate = |tokens: f64, seconds: f64| if seconds > 0.0 { tokens / seconds } else { 0.0 };
    // Captions a minute: a batch's images encoded, prompts prefilled and answers decoded.
    let captions = |r: &Row| rate(60.0 * r.batch as f64, r.t_enc + r.t_pp + r.t_tg);
    if json {
        let rows = rows.iter().map(|r| {
            let (n, t) = (r.batch as f64, r.t_pp + r.t_tg);
            let mut fields = vec![
                ("pp", Json::Int(n_prompt as i128)),
                ("tg", Json::Int(b.n_gen as i128)),
                ("b", Json::Int(r.batch as i128)),
                ("n_kv", Json::Int((r.batch * (n_prompt + b.n_gen)) as i128)),
                ("t_pp", Json::Num(r.t_pp)),
                ("s_pp", Json::Num(rate(n * pp, r.t_pp))),
                ("t_tg", Json::Num(r.t_tg)),
                ("s_tg", Json::Num(rate(n * tg, r.t_tg))),
                ("t", Json::Num(t)),
                ("s", Json::Num(rate(n * (pp + tg), t))),
            ];
            if image.is_some() {
                fields.push(("t_enc", Json::Num(r.t_enc)));
                fields.push(("images_per_second", Json::Num(rate(n, r.t_enc))));
                fields.push(("captions_per_minute", Json::Num(captions(r))));
            }
            Json::obj(fields)
        });
        let all =
            Json::obj([("backend", Json::str(model.backend().describe())), ("batches", Json::Arr(rows.collect()))]);
        writeln!(out, "{}", all.to_string_compact())?;
        return Ok(());
    }
    writeln!(out, "hrx batched bench on {}", model.backend().describe())?;
    writeln!(
        out,
        "|    PP |     TG |    B |   N_KV |   T_PP s | S_PP t/s |   T_TG s | S_TG t/s |      T s |    S t/s |"
    )?;
    writeln!(
        out,
        "|-------|--------|------|--------|----------|----------|----------|----------|----------|----------|"
    )?;
    for r in &rows {
        let (n, t) = (r.batch as f64, r.t_pp + r.t_tg);
        writeln!(
            out,
            "| {:5} | {:6} | {:4} | {:6} | {:8.3} | {:8.2} | {:8.3} | {:8.2} | {:8.3} | {:8.2} |",
            n_prompt,
            b.n_gen,
            r.batch,
            r.batch * (n_prompt + b.n_gen),
            r.t_pp,
            rate(n * pp, r.t_pp),
            r.t_tg,
            rate(n * tg, r.t_tg),
            t,
            rate(n * (pp + tg), t)
        )?;
    }
    if let Some(image) = &image {
        let (h, w) = image.test.patches.resized_hw;
        writeln!(
            out,
            "each prompt: a {w}x{h} image ({n_image} tokens) and {} tokens; captions of {} tokens",
            b.n_prompt, b.n_gen
        )?;
        writeln!(out, "|    B |  T_ENC s | images/s | captions/min |")?;
        writeln!(out, "|------|----------|----------|--------------|")?;
        for r in &rows {
            writeln!(
                out,
                "| {:4} | {:8.3} | {:8.2} | {:12.1} |",
                r.batch,
                r.t_enc,
                rate(r.batch as f64, r.t_enc),
                captions(r)
            )?;
        }
    }
    // HRX_VK_PROFILE=1: each plan's kernels over every batch size it ran (decode steps of n
    // sequences run the plan of the smallest power of two that holds them).
    super::bench::write_profiles(&model.recording_stats(), out)?;
    Ok(())
}

/// Encodes `batch` images, prefills `batch` prompts together (each its own sequence: an
/// image's tokens, then its own tokens), then decodes the generated tokens of all of them
/// together.
fn time_batch(model: &mut TextModel, image: Option<&mut Image>, batch: usize, b: &Batches) -> Result<Row, CliError> {
    let (n_ctx, n_vocab) = (model.options().n_ctx, model.params().n_vocab as u64);
    let token = |i: usize| ((i as u64 * 2_654_435_761 + 11) % n_vocab) as u32;
    let mut sessions: Vec<Session> = (0..batch).map(|s| Session::at(s * n_ctx)).collect();
    let t = Instant::now();
    let mut encoded = Vec::with_capacity(batch);
    if let Some(Image { test, vision }) = image {
        let [_, gh, gw] = test.patches.grid_thw;
        let merge = test.patches.merge_size.max(1);
        // As many images a run as the vision plan holds (as hrx caption encodes them).
        let per_run = (vision.max_patches() / (gh * gw).max(1)).max(1);
        let mut left = batch;
        while left > 0 {
            let images = vec![(test.patches.pixel_values.as_slice(), gh, gw); per_run.min(left)];
            left -= images.len();
            let runs = vision.encode_together(&images)?;
            encoded.extend(runs.into_iter().map(|e| (e, gh / merge, gw / merge)));
        }
    }
    let t_enc = t.elapsed().as_secs_f64();
    let t = Instant::now();
    let prompts: Vec<Vec<PromptPiece>> = (0..batch)
        .map(|s| {
            let image = encoded.get(s).map(|(embeddings, rows, cols)| PromptPiece::Image {
                embeddings,
                rows: *rows,
                cols: *cols,
            });
            image.into_iter().chain((0..b.n_prompt).map(|i| PromptPiece::Token(token(s * n_ctx + i)))).collect()
        })
        .collect();
    if prompts.iter().all(|p| !p.is_empty()) {
        let mut fed: Vec<(&mut Session, &[PromptPiece])> =
            sessions.iter_mut().zip(&prompts).map(|(s, p)| (s, p.as_slice())).collect();
        feed_together(model, &mut fed, Read::Argmax)?;
    }
    let t_pp = t.elapsed().as_secs_f64();
    let t = Instant::now();
    for i in 0..b.n_gen {
        let tokens: Vec<u32> = (0..batch).map(|s| token(s * n_ctx + b.n_prompt + i)).collect();
        let positions: Vec<i32> = sessions.iter().map(|s| s.next_position).collect();
        let slots: Vec<usize> = sessions.iter().map(Session::next_slot).collect();
        model.forward_batch(&tokens, &positions, &slots, Read::Argmax)?;
        sessions.iter_mut().for_each(Session::advance);
    }
    Ok(Row { batch, t_enc, t_pp, t_tg: t.elapsed().as_secs_f64() })
}
