//! The vision encoder ready to run: parameters, the graph planned once for the largest image,
//! and the executor that replays it for every image.

use super::{loader, RuntimeError};
use crate::backend::cpu::Kernels;
use crate::backend::{Backend, Executor, PlanId};
use crate::dispatcher::{Plan, Registry};
use crate::gguf::GgufFile;
use crate::image::patch_positions;
use crate::model::vision::{self, VisionGraph};
use crate::model::vision_grid::pos_taps;
use crate::model::VisionParams;
use std::path::Path;
use std::sync::Arc;

pub struct VisionModel {
    file: Arc<GgufFile>,
    params: VisionParams,
    max_patches: usize,
    backend: Backend,
    exec: Executor,
    plan: PlanId,
    /// The buffers runs read their rows into, kept for later runs (see [`ImageRows`]).
    runs: Vec<Arc<Vec<f32>>>,
}

/// Run buffers a vision model keeps: a caption batch has a few runs' images waiting for their
/// prompts at once (five 448x448 images a run are 32 MB).
const KEPT_RUNS: usize = 6;

/// An image's rows of the wide embedding ([`VisionModel::encode`]), in the buffer its vision
/// run read them into: one per run, shared by the run's images and reused by a later run once
/// they are all dropped. Fresh memory for each run cost the H200's host 3-5 ms of page faults
/// in a 6-10 ms read of five 448x448 images' rows (`hrx caption`).
#[derive(Clone, Debug)]
pub struct ImageRows {
    run: Arc<Vec<f32>>,
    range: std::ops::Range<usize>,
}

impl std::ops::Deref for ImageRows {
    type Target = [f32];

    fn deref(&self) -> &[f32] {
        self.run.get(self.range.clone()).unwrap_or_default()
    }
}

/// The vision plan for `registry`, for `hrx plan` and tests (built without binding weights).
pub fn plan_vision(params: &VisionParams, max_patches: usize, registry: &dyn Registry) -> Result<Plan, RuntimeError> {
    let VisionGraph { graph, .. } = vision::build(params, max_patches)?;
    loader::plan(graph, registry)
}

/// Why a vision plan holds fewer patches than asked: at the asked size, its largest run-time
/// value spans more bytes than the device binds as one window.
#[derive(Clone, Debug, PartialEq)]
pub struct PatchLimit {
    pub asked: usize,
    /// The node of that value and the bytes it spans.
    pub value: String,
    pub bytes: usize,
    pub max_bytes: usize,
}

/// The most patches, whole merge blocks and at most `max_patches`, whose vision graph keeps
/// every run-time value within what `registry`'s device binds as one window
/// ([`Registry::max_value_bytes`]); and, when that is fewer than asked, why. The sizes come
/// from the graph itself, so every model shape is fitted by its own largest value.
pub fn fit_patches(
    params: &VisionParams,
    max_patches: usize,
    registry: &dyn Registry,
) -> Result<(usize, Option<PatchLimit>), RuntimeError> {
    let merge = params.merge_patches();
    let blocks = max_patches / merge;
    if blocks == 0 {
        return Err(RuntimeError::Usage(format!(
            "a vision plan needs room for at least one {0}x{0} merge block",
            params.merge
        )));
    }
    let Some(max_bytes) = registry.max_value_bytes() else { return Ok((blocks * merge, None)) };
    let largest = |blocks: usize| -> Result<(String, usize), RuntimeError> {
        let VisionGraph { graph, .. } = vision::build(params, blocks * merge)?;
        Ok(graph.largest_run_value().map_or((String::new(), 0), |(id, bytes)| (graph.node(id).name.clone(), bytes)))
    };
    let (value, bytes) = largest(blocks)?;
    if bytes <= max_bytes {
        return Ok((blocks * merge, None));
    }
    // Every run-time value grows with the patches: bisect for the most blocks that fit.
    let (mut fits, mut fails) = (0, blocks);
    while fails - fits > 1 {
        let mid = fits + (fails - fits) / 2;
        if largest(mid)?.1 <= max_bytes {
            fits = mid;
        } else {
            fails = mid;
        }
    }
    if fits == 0 {
        return Err(RuntimeError::Usage(format!(
            "the vision graph of one {0}x{0} merge block holds a value of more than the {max_bytes} bytes the device binds at once",
            params.merge
        )));
    }
    Ok((fits * merge, Some(PatchLimit { asked: blocks * merge, value, bytes, max_bytes })))
}

/// [`fit_patches`], with a warning where the device holds fewer patches than asked: the
/// patches to plan for.
pub fn planned_patches(
    params: &VisionParams,
    max_patches: usize,
    registry: &dyn Registry,
) -> Result<usize, RuntimeError> {
    let (fitted, limit) = fit_patches(params, max_patches, registry)?;
    if let Some(l) = limit {
        let pixels = |patches: usize| patches * params.patch_size * params.patch_size;
        log::warn!(
            "the vision plan for images of {} pixels ({} patches) holds a value of {} bytes ({}), more than the {} this device binds at once: images are resized to at most {} pixels ({fitted} patches) instead",
            pixels(l.asked),
            l.asked,
            l.bytes,
            l.value,
            l.max_bytes,
            pixels(fitted)
        );
    }
    Ok(fitted)
}

impl VisionModel {
    /// Opens an mmproj file and plans its encoder on the CPU with `kernels` for images of up to
    /// `max_patches` patches (rounded down to whole merge blocks).
    pub fn load(path: &Path, max_patches: usize, kernels: Kernels) -> Result<VisionModel, RuntimeError> {
        Self::load_on(Arc::new(GgufFile::open(path)?), max_patches, &Backend::Cpu(kernels))
    }

    /// On `backend`: planned for its registry, weights bound (uploaded) once. Where the
    /// device cannot bind the values of `max_patches` patches ([`fit_patches`]), the plan is
    /// for the most it can, with a warning: [`VisionModel::max_patches`] says how many.
    pub fn load_on(file: Arc<GgufFile>, max_patches: usize, backend: &Backend) -> Result<VisionModel, RuntimeError> {
        let params = VisionParams::from_gguf(&file)?;
        let max_patches = planned_patches(&params, max_patches, &*backend.registry())?;
        // The encoder keeps no caches: one graph for every backend.
        let build = |_| Ok(vec![vision::build(&params, max_patches)?.graph]);
        let (backend, exec, _) = loader::load(build, backend, &[Arc::clone(&file)])?;
        Ok(VisionModel { file, params, max_patches, backend, exec, plan: PlanId(0), runs: Vec::new() })
    }

    /// This encoder again on `backend`, planned for the images it took (`runtime::recover`).
    pub fn reload_on(&self, backend: &Backend) -> Result<VisionModel, RuntimeError> {
        Self::load_on(Arc::clone(&self.file), self.max_patches, backend)
    }

    pub fn params(&self) -> &VisionParams {
        &self.params
    }

    pub fn max_patches(&self) -> usize {
        self.max_patches
    }

    pub fn plan(&self) -> &Plan {
        self.exec.plan(self.plan)
    }

    /// Where the plan runs (the CPU when a Vulkan plan could not take every node).
    pub fn backend(&self) -> &Backend {
        &self.backend
    }

    pub fn set_threads(&mut self, n: usize) {
        self.exec.set_threads(n);
    }

    /// Dispatches and barriers of the encoder's recording (Vulkan; empty on the CPU).
    pub fn recording_stats(&self) -> Vec<crate::backend::vulkan::RecordingStats> {
        self.exec.recording_stats()
    }

    /// Encodes one image: `pixel_values` holds `grid_h * grid_w` rows of
    /// [`VisionParams::patch_row`] values in merge-block order. Returns one row of
    /// [`VisionParams::wide_width`] values per merged token (row-major over the merged grid):
    /// the merger's output, then each deepstack feature.
    pub fn encode(&mut self, pixel_values: &[f32], grid_h: usize, grid_w: usize) -> Result<ImageRows, RuntimeError> {
        self.encode_together(&[(pixel_values, grid_h, grid_w)])?
            .pop()
            .ok_or_else(|| RuntimeError::Usage("internal: a vision run of one image gave none".into()))
    }

    /// Encodes several images in one run (their patches one after another, each attending
    /// over its own), as [`VisionModel::encode`] each: their patches must fit the planned
    /// maximum together. Many small images then fill the products of one run instead of a
    /// run each.
    pub fn encode_together(&mut self, images: &[(&[f32], usize, usize)]) -> Result<Vec<ImageRows>, RuntimeError> {
        let p = &self.params;
        let (merge, row, max, width) = (p.merge, p.patch_row(), self.max_patches, p.wide_width());
        let input = |m: String| RuntimeError::Usage(format!("vision input: {m}"));
        let n: usize = images.iter().map(|&(_, h, w)| h * w).sum();
        if images.is_empty() {
            return Ok(Vec::new());
        }
        if n > max {
            return Err(input(format!("{n} patches exceed the planned maximum of {max}")));
        }
        let started = std::time::Instant::now();
        let plan = self.plan;
        let (mut taps, mut weights) = (Vec::new(), Vec::new());
        let (mut rows, mut cols, mut spans) = (Vec::with_capacity(n), Vec::with_capacity(n), Vec::with_capacity(2 * n));
        for &(pixel_values, grid_h, grid_w) in images {
            let count = grid_h * grid_w;
            if grid_h == 0 || grid_w == 0 || !grid_h.is_multiple_of(merge) || !grid_w.is_multiple_of(merge) {
                return Err(input(format!("a {grid_h}x{grid_w} patch grid is not whole {merge}x{merge} merge blocks")));
            }
            if pixel_values.len() != count * row {
                return Err(input(format!("{} pixel values for {count} patches of {row}", pixel_values.len())));
            }
            let patches = patch_positions(grid_h, grid_w, merge);
            let t = pos_taps(p.pos_side, grid_h, grid_w, &patches);
            let first = rows.len() as i32;
            self.exec.write_f32(plan, vision::PIXELS, first as usize * row, pixel_values)?;
            taps.extend(t.ids);
            weights.extend(t.weights);
            rows.extend(patches.iter().map(|&(r, _)| r as i32));
            cols.extend(patches.iter().map(|&(_, c)| c as i32));
            spans.extend((0..count).flat_map(|_| [first, first + count as i32]));
        }
        self.exec.write_i32(plan, vision::POS_TAPS, 0, &taps)?;
        self.exec.write_f32(plan, vision::POS_WEIGHTS, 0, &weights)?;
        // Rope positions: the row of every patch, then the column, at the planned stride.
        self.exec.write_i32(plan, vision::ROPE_POS, 0, &rows)?;
        self.exec.write_i32(plan, vision::ROPE_POS, max, &cols)?;
        self.exec.write_i32(plan, vision::ATTN_SPANS, 0, &spans)?;
        let written = started.elapsed();
        self.exec.run(plan, &[n])?;
        let ran = started.elapsed();
        let lens: Vec<usize> = images.iter().map(|&(_, h, w)| h * w / p.merge_patches() * width).collect();
        let total = lens.iter().sum();
        let mut values = self.run_buffer(total);
        self.exec.read_f32_into(plan, vision::WIDE_OUT, &mut values[..total])?;
        let run = Arc::new(values);
        if self.runs.len() < KEPT_RUNS {
            self.runs.push(Arc::clone(&run));
        }
        let mut at = 0;
        let encoded = lens
            .iter()
            .map(|&len| {
                at += len;
                ImageRows { run: Arc::clone(&run), range: at - len..at }
            })
            .collect();
        // Where an encode's time goes on the host's side (RUST_LOG=hrx=debug).
        log::debug!(
            "encode: {} images, {n} patches: inputs {:.3} ms, run {:.3} ms, outputs {:.3} ms",
            images.len(),
            written.as_secs_f64() * 1e3,
            (ran - written).as_secs_f64() * 1e3,
            (started.elapsed() - ran).as_secs_f64() * 1e3
        );
        Ok(encoded)
    }

    /// A buffer of at least `len` values that no image holds: a kept one all of whose images
    /// were dropped, else a new one.
    fn run_buffer(&mut self, len: usize) -> Vec<f32> {
        let free = self.runs.iter().position(|r| Arc::strong_count(r) == 1);
        match free.map(|i| Arc::try_unwrap(self.runs.swap_remove(i))) {
            Some(Ok(v)) if v.len() >= len => v,
            // Fresh zeroed memory: its pages are touched by the parallel read, not here.
            _ => vec![0f32; len],
        }
    }
}
