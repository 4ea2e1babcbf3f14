//! Executes plans whose compute nodes all run on the GPU: weights uploaded once, every buffer
//! and descriptor set made once, one command buffer per plan recorded once with indirect
//! dispatches, exactly the dispatches the plan names (its kernels, fused pairs and row ranges:
//! the registry decided them at plan time). A run writes the symbols (token count...) and each
//! dispatch's workgroup counts and replays the recording: nothing is re-recorded.
//!
//! Several plans (prefill, decode) share run-time buffers by name (the KV cache), weights by
//! name, and one arena (plans run one at a time), as `CpuExecutor` does. Every value is bound
//! as a window of its buffer: the whole buffer when it fits the device's storage-buffer range,
//! else a window around the value (aligned down to minStorageBufferOffsetAlignment) with the
//! rest of the offset passed to the kernel in its push constants.
//!
//! Dispatches are separated by a barrier only where one must wait for another (hazard.rs):
//! independent nodes recorded back to back (the FFN's gate and up projections) may run at
//! the same time. When the device profiles (`HRX_VK_PROFILE=1`), the recording also writes a
//! timestamp after every dispatch and each run adds the times up per kernel (profile.rs).
//!
//! Mixed plans (nodes left to the CPU) are refused, naming a node: the registry puts every
//! node of both Qwen3-VL graphs on the GPU.

use super::buffer::{Buffer, Readback, Uploader};
use super::command::CommandBuffer;
use super::descriptor::{DescriptorPool, Window};
use super::device::Device;
use super::error::{Result, VkError};
use super::hazard::{Access, Hazards};
use super::info::DeviceInfo;
use super::kernels::{
    self, KernelId, KernelSet, Launch, MatKind, Operand, Ops, Scratch, BINDINGS, MAX_INPUTS, OUTPUT_BINDING,
    SCRATCH_BINDING, SPLIT_MIN_SUBGROUP,
};
use super::memory::Location;
use super::profile::{KernelTimes, Profile, RunTimes};
use super::timestamps::TimestampPool;
use super::weight_layout::Stored;
use crate::dispatcher::{runtime_ne, Loc, Placement, Plan, Where};
use crate::gguf::GgufFile;
use crate::graph::{External, Graph, NodeId, Value};
use crate::quant::DType;
use std::sync::Arc;

use crate::backend::PlanId;

/// One recorded dispatch.
struct Dispatch {
    /// The value whose run-time shape sizes the grid.
    grid_value: NodeId,
    /// For a matrix split over row ranges: the rows of this piece (the grid's ne0).
    rows: Option<usize>,
    launch: Launch,
    /// What its GPU time is profiled under (`profile_label`).
    label: String,
}

/// The kernel's name, and for a product the weight's K x N: a product's time depends far more
/// on its shape than on its kernel (`mul_mat_vec_wide_q4_k 2048x6144`).
fn profile_label(kernel: KernelId, operands: &[Operand]) -> String {
    match (kernel, operands.first()) {
        (KernelId::MatMul(..), Some(w)) => format!("{} {}x{}", kernel.name(), w.ne[0], w.ne[1]),
        _ => kernel.name(),
    }
}

struct Recorded {
    /// The scratch memory of the dispatches that use some, kept alive with the recording.
    scratch: Vec<Buffer>,
    plan: Plan,
    /// The plan's external ids mapped to indices into `storages`.
    storage_of: Vec<usize>,
    /// The per-run words the kernels and indirect dispatches read.
    words: RunWords,
    launches: Vec<Dispatch>,
    /// Pipeline barriers in the recording.
    barriers: usize,
    cmd: CommandBuffer,
    /// Host-visible copies of the graph's outputs, made by the recording.
    readback: Vec<(NodeId, Buffer)>,
    /// Where the device writes timestamps: those each run writes and their totals.
    timing: Option<Timing>,
}

/// The timestamps of a recording: one before its first dispatch and one after its last (its
/// GPU time per run), or when profiling one after every dispatch (each one's time too).
struct Timing {
    pool: TimestampPool,
    runs: RunTimes,
    kernels: Option<KernelTimes>,
}

/// What one plan's recording holds and, when profiling, where its GPU time went.
#[derive(Clone, Debug, PartialEq)]
pub struct RecordingStats {
    pub graph: String,
    pub dispatches: usize,
    /// The kernel of every dispatch, in recording order (what the plan's `dispatches` names).
    pub kernels: Vec<String>,
    /// While profiling, one between every two dispatches (see profile.rs).
    pub barriers: usize,
    /// Scratch buffers the recording holds (dispatches of one layout ordered by barriers share).
    pub scratch_buffers: usize,
    /// Its runs' GPU time, first dispatch to last (where the device writes timestamps).
    pub gpu: Option<RunTimes>,
    pub profile: Option<Profile>,
}

/// Outputs of at most this many bytes are copied to the host by every run of their recording
/// (a decoding step's chosen tokens); larger ones (a step's logits, 19 MB for 32 sequences on
/// Qwen's vocabulary) only when read: a greedy step does not want them.
const RECORDED_OUTPUT_BYTES: u64 = 64 << 10;

pub struct VulkanExecutor {
    device: Device,
    plans: Vec<Recorded>,
    storages: Vec<Buffer>,
    arena: Buffer,
    max_groups: [u32; 3],
    recordings: usize,
    /// What reads of outputs and run-time buffers (`output`, `read_f32_into`) go through, kept.
    readback: Readback,
}

impl VulkanExecutor {
    /// Uploads the plans' weights (each from the tensor of its name in `files`, checked for
    /// dtype and size), allocates the arena and the run-time buffers (one per name and size
    /// across plans), and records every plan once.
    pub fn new(device: &Device, plans: Vec<Plan>, files: &[Arc<GgufFile>]) -> Result<VulkanExecutor> {
        for plan in &plans {
            for (i, p) in plan.placements.iter().enumerate() {
                if let Placement::Run { device: Where::Cpu, kernel, .. } = p {
                    let name = &plan.graph.nodes[i].name;
                    return Err(VkError::Plan(format!(
                        "graph {} node {i} ({name}, {kernel}) is placed on the CPU; mixed plans are not executed",
                        plan.graph.name
                    )));
                }
            }
        }
        // One storage per (name, size) across plans.
        let mut keys: Vec<(String, usize)> = Vec::new();
        let mut exts: Vec<&External> = Vec::new();
        let mut maps = Vec::with_capacity(plans.len());
        for plan in &plans {
            let mut map = Vec::with_capacity(plan.graph.externals.len());
            for ext in &plan.graph.externals {
                match keys.iter().position(|(n, b)| *n == ext.name && *b == ext.bytes) {
                    Some(i) => map.push(i),
                    None => {
                        keys.push((ext.name.clone(), ext.bytes));
                        exts.push(ext);
                        map.push(keys.len() - 1);
                    }
                }
            }
            maps.push(map);
        }
        // Storages some dispatch writes (KV caches, outputs written into a caller's buffer)
        // live in device memory; the other run-time buffers are inputs the host fills before
        // each run, written in place (no staging copy per token). A dispatch writes its group's
        // output: a fused reader's (the SET_ROWS of a norm-rope writes the cache).
        let mut gpu_written = vec![false; keys.len()];
        for (plan, map) in plans.iter().zip(&maps) {
            for placement in &plan.placements {
                let Placement::Run { group, .. } = placement else { continue };
                if let Some(Loc::External { storage, .. }) = plan.locs[group.output().0] {
                    gpu_written[map[storage.0]] = true;
                }
            }
        }
        let t0 = std::time::Instant::now();
        let storages = exts
            .iter()
            .zip(&gpu_written)
            .map(|(ext, &written)| storage(device, ext, written))
            .collect::<Result<Vec<_>>>()?;
        let arena_bytes = plans.iter().map(|p| p.arena_bytes).max().unwrap_or(0);
        let arena = device.buffer(arena_bytes as u64, Location::Device, "the arena")?;
        log::debug!("{} storages and the arena allocated in {:.3} s", storages.len(), t0.elapsed().as_secs_f64());
        let ks = KernelSet::new(device);
        let t0 = std::time::Instant::now();
        let (chosen, filled) = std::thread::scope(|s| {
            // The weights go up while the pipelines every plan uses are made, those on threads
            // side by side (on an empty driver cache each takes 0.1-0.8 s to compile).
            let filled = s.spawn(|| {
                fill(device, &exts, &storages, files)?;
                log::debug!(
                    "{} storages filled (weights uploaded) in {:.3} s",
                    storages.len(),
                    t0.elapsed().as_secs_f64()
                );
                Ok(())
            });
            let chosen = plans
                .iter()
                .zip(&maps)
                .map(|(plan, storage_of)| choose(device.info(), plan, storage_of, &storages, &arena))
                .collect::<Result<Vec<_>>>()
                .and_then(|chosen| {
                    ks.prepare(chosen.iter().flatten().map(|c| c.launch.kernel))?;
                    log::debug!("pipelines made in {:.3} s", t0.elapsed().as_secs_f64());
                    Ok(chosen)
                });
            (chosen, filled.join().unwrap_or_else(|_| Err(VkError::Plan("the upload thread panicked".into()))))
        });
        filled?;
        let chosen = chosen?;
        let t1 = std::time::Instant::now();
        let mut recorded = Vec::with_capacity(plans.len());
        let mut recordings = 0;
        for ((plan, storage_of), chosen) in plans.into_iter().zip(maps).zip(chosen) {
            recorded.push(record(device, &ks, plan, storage_of, chosen, &storages, &arena)?);
            recordings += 1;
        }
        log::debug!(
            "{recordings} plans recorded in {:.3} s ({:.3} s after the upload)",
            t0.elapsed().as_secs_f64(),
            t1.elapsed().as_secs_f64()
        );
        let max_groups = device.info().max_workgroup_count;
        Ok(VulkanExecutor {
            device: device.clone(),
            plans: recorded,
            storages,
            arena,
            max_groups,
            recordings,
            readback: Readback::default(),
        })
    }

    pub fn plan(&self, id: PlanId) -> &Plan {
        &self.plans[id.0].plan
    }

    /// How many command buffers were recorded: one per plan, at `new`, never per run.
    pub fn recordings(&self) -> usize {
        self.recordings
    }

    /// Dispatches and pipeline barriers in each plan's recording, by graph name, for reports.
    pub fn recording_stats(&self) -> Vec<RecordingStats> {
        self.plans
            .iter()
            .map(|r| RecordingStats {
                graph: r.plan.graph.name.clone(),
                dispatches: r.launches.len(),
                kernels: r.launches.iter().map(|d| d.launch.kernel.name()).collect(),
                barriers: r.barriers,
                scratch_buffers: r.scratch.len(),
                gpu: r.timing.as_ref().map(|t| t.runs.clone()),
                profile: r.timing.as_ref().and_then(|t| t.kernels.as_ref()).map(KernelTimes::profile),
            })
            .collect()
    }

    fn recorded(&self, id: PlanId) -> Result<&Recorded> {
        self.plans.get(id.0).ok_or_else(|| VkError::Plan(format!("no plan {}", id.0)))
    }

    /// Where run-time buffer `name` of `plan` lives (device memory when a dispatch writes it).
    pub fn location(&self, plan: PlanId, name: &str) -> Result<Location> {
        Ok(self.named(plan, name)?.0.location())
    }

    /// The buffer of external `name` of `plan`, and its dtype.
    fn named(&self, plan: PlanId, name: &str) -> Result<(&Buffer, DType)> {
        let r = self.recorded(plan)?;
        let ext = r
            .plan
            .graph
            .externals
            .iter()
            .position(|e| e.name == name)
            .ok_or_else(|| VkError::Plan(format!("no buffer {name:?}")))?;
        Ok((&self.storages[r.storage_of[ext]], r.plan.graph.externals[ext].dtype))
    }

    /// Writes f32 values into run-time buffer `name` of `plan`, starting `offset` values in.
    pub fn write_f32(&self, plan: PlanId, name: &str, offset: usize, values: &[f32]) -> Result<()> {
        match self.named(plan, name)? {
            (b, DType::F32) => b.write_f32(4 * offset as u64, values),
            (_, d) => Err(VkError::Plan(format!("buffer {name:?} holds {d}, not f32"))),
        }
    }

    /// Writes i32 values into run-time buffer `name` of `plan`, starting `offset` values in.
    pub fn write_i32(&self, plan: PlanId, name: &str, offset: usize, values: &[i32]) -> Result<()> {
        match self.named(plan, name)? {
            (b, DType::I32) => b.write_i32(4 * offset as u64, values),
            (_, d) => Err(VkError::Plan(format!("buffer {name:?} holds {d}, not i32"))),
        }
    }

    /// Runs `f` on f32 values `offset..offset + len` of run-time buffer `name` of `plan` in
    /// place where the host maps the buffer (`Buffer::fill_mapped_f32`); false where it does
    /// not (then `write_f32`).
    pub fn fill_f32(
        &self,
        plan: PlanId,
        name: &str,
        offset: usize,
        len: usize,
        f: impl FnOnce(&mut [f32]),
    ) -> Result<bool> {
        match self.named(plan, name)? {
            (b, DType::F32) => b.fill_mapped_f32(4 * offset as u64, len, f),
            (_, d) => Err(VkError::Plan(format!("buffer {name:?} holds {d}, not f32"))),
        }
    }

    /// Reads the first `out.len()` values of f32 run-time buffer `name` of `plan` into `out`.
    pub fn read_f32_into(&mut self, plan: PlanId, name: &str, out: &mut [f32]) -> Result<()> {
        match self.named(plan, name)? {
            (b, DType::F32) => b.clone().read_f32_into(0, out, &mut self.readback),
            (_, d) => Err(VkError::Plan(format!("buffer {name:?} holds {d}, not f32"))),
        }
    }

    /// Runs the recorded plan for these symbol values (each at most its planned maximum).
    pub fn run(&mut self, plan: PlanId, symbols: &[usize]) -> Result<()> {
        let (max_groups, device) = (self.max_groups, &self.device);
        let r = self.plans.get_mut(plan.0).ok_or_else(|| VkError::Plan(format!("no plan {}", plan.0)))?;
        let graph = &r.plan.graph;
        let mut words = Vec::with_capacity(graph.symbols.len());
        for (i, (name, max)) in graph.symbols.iter().enumerate() {
            let v = symbols.get(i).copied().unwrap_or(0);
            if v > *max {
                return Err(VkError::Plan(format!("{name} = {v} exceeds the planned maximum {max}")));
            }
            words.push(v as u32);
        }
        let mut groups = Vec::with_capacity(3 * r.launches.len());
        for d in &r.launches {
            let mut ne = runtime_ne(graph, d.grid_value, symbols);
            if let Some(rows) = d.rows {
                ne[0] = rows;
            }
            groups.extend(d.launch.groups(ne, max_groups));
        }
        let target = r.words.written();
        if !words.is_empty() {
            target.write_u32(0, &words)?;
        }
        if !groups.is_empty() {
            target.write_u32(r.words.args_at, &groups)?;
        }
        if crate::fault::run_loses_device() {
            device.lose();
            return Err(VkError::DeviceLost { during: format!("a run of graph {} (HRX_TEST_FAULT)", graph.name) });
        }
        r.cmd.submit_and_wait()?;
        if let Some(t) = &mut r.timing {
            match t.pool.ticks() {
                Ok(ticks) => {
                    t.runs.add(&ticks);
                    if let Some(kernels) = &mut t.kernels {
                        kernels.add(&ticks);
                    }
                }
                // Profiling asked for the times. Otherwise the GPU time per run is a report:
                // queries a driver has not made available (none should, after the wait) cost
                // the report a run, not the run itself.
                Err(e) if t.kernels.is_some() => return Err(e),
                Err(e) => log::debug!("graph {}: a run's timestamps: {e}", r.plan.graph.name),
            }
        }
        Ok(())
    }

    /// The contiguous f32 value of node `id` of `plan` after a run, at its run-time shape.
    pub fn output(&mut self, plan: PlanId, id: NodeId, symbols: &[usize]) -> Result<Vec<f32>> {
        let mut values = Vec::new();
        self.output_into(plan, id, symbols, &mut values)?;
        Ok(values)
    }

    /// The contiguous f32 value of node `id` of `plan` after a run, at its run-time shape, into
    /// `out` (its memory reused: resized, never zeroed where it already holds values).
    pub fn output_into(&mut self, plan: PlanId, id: NodeId, symbols: &[usize], out: &mut Vec<f32>) -> Result<()> {
        let r = self.plans.get(plan.0).ok_or_else(|| VkError::Plan(format!("no plan {}", plan.0)))?;
        let graph = &r.plan.graph;
        let v = graph.nodes.get(id.0).map(|n| &n.value).ok_or_else(|| VkError::Plan(format!("no node {}", id.0)))?;
        if !v.is_contiguous() || v.dtype != DType::F32 {
            return Err(VkError::Plan(format!("node {} is not a contiguous f32 value", id.0)));
        }
        let n: usize = runtime_ne(graph, id, symbols).iter().product();
        let (buf, offset) = match (r.readback.iter().find(|(o, _)| *o == id), r.plan.locs[id.0]) {
            (Some((_, host)), _) => (host, 0),
            (None, Some(Loc::Arena { offset })) => (&self.arena, offset),
            (None, Some(Loc::External { storage, offset })) => (&self.storages[r.storage_of[storage.0]], offset),
            (None, None) => return Err(VkError::Plan(format!("node {} has no address", id.0))),
        };
        out.resize(n, 0.0);
        buf.read_f32_into(offset as u64, out, &mut self.readback)
    }
}

/// The words of one run: the symbols' values (binding 0 of every kernel, from byte 0) and
/// three workgroup counts per dispatch (from `args_at`). Every workgroup of every kernel reads
/// the symbols and every dispatch its counts, so they live in device memory: the host writes
/// them in place where it can map device memory, else into a staging copy that the recording
/// starts by copying over (one small transfer per run instead of reads of host memory across
/// the bus per workgroup).
struct RunWords {
    local: Buffer,
    staging: Option<Buffer>,
    args_at: u64,
}

impl RunWords {
    fn new(device: &Device, symbols: usize, dispatches: usize) -> Result<RunWords> {
        let args_at = (4 * symbols.max(1) as u64).next_multiple_of(16);
        let bytes = args_at + 12 * dispatches.max(1) as u64;
        // Device memory the host writes in place where there is some; else a device copy of a
        // host buffer.
        let written = device.buffer(bytes, Location::Input, "run-time sizes")?;
        if written.location() == Location::Input {
            return Ok(RunWords { local: written, staging: None, args_at });
        }
        let local = device.buffer(bytes, Location::Device, "run-time sizes")?;
        Ok(RunWords { local, staging: Some(written), args_at })
    }

    /// The buffer `run` writes.
    fn written(&self) -> &Buffer {
        self.staging.as_ref().unwrap_or(&self.local)
    }

    /// Records the copy into device memory (and the barrier after it), where there is one.
    fn record_upload(&self, cmd: &mut CommandBuffer) -> Result<bool> {
        let Some(staging) = &self.staging else { return Ok(false) };
        cmd.copy(staging, 0, &self.local, 0, self.local.size())?;
        cmd.barrier()?;
        Ok(true)
    }
}

/// The workgroup counts of a dispatch whose grid is the same at every run-time size the plan
/// allows but none (`grid_value`'s shape with each symbol at 1 and at its maximum: a decode
/// step's one token), or None where the counts follow the run: such a dispatch is recorded
/// with its counts, which the GPU then need not read from memory.
fn fixed_grid(
    graph: &Graph,
    grid_value: NodeId,
    piece: Option<(usize, usize)>,
    launch: &Launch,
    max_groups: [u32; 3],
) -> Option<[u32; 3]> {
    let at = |each: &dyn Fn(usize) -> usize| {
        let symbols: Vec<usize> = graph.symbols.iter().map(|(_, max)| each(*max)).collect();
        let mut ne = runtime_ne(graph, grid_value, &symbols);
        if let Some((_, rows)) = piece {
            ne[0] = rows;
        }
        launch.groups(ne, max_groups)
    };
    let largest = at(&|max| max);
    (largest == at(&|_| 1)).then_some(largest)
}

/// One dispatch of a plan, chosen and bound at load before it is recorded: the kernels of
/// every plan are known before any is recorded, so their pipelines are made together.
struct Chosen<'a> {
    launch: Launch,
    /// The windows of its inputs, in the order the launch takes them, and of its output.
    ins: Vec<Window<'a>>,
    out: Window<'a>,
    /// It waits for the dispatches before it (a barrier first).
    wait: bool,
    /// For a matrix split over row ranges: the piece's first row and rows.
    piece: Option<(usize, usize)>,
    grid_value: NodeId,
    label: String,
}

/// Every dispatch `plan` names, in order, with the plan's kernels, fusions and row ranges.
fn choose<'a>(
    info: &DeviceInfo,
    plan: &Plan,
    storage_of: &[usize],
    storages: &'a [Buffer],
    arena: &'a Buffer,
) -> Result<Vec<Chosen<'a>>> {
    let graph = &plan.graph;
    let (max_range, align) =
        (u64::from(info.max_storage_buffer_range), info.min_storage_buffer_offset_alignment.max(1));
    let mut chosen = Vec::with_capacity(plan.dispatches().len());
    let mut hazards = Hazards::default();
    for (i, node) in graph.nodes.iter().enumerate() {
        let Placement::Run { kernel, group, .. } = &plan.placements[i] else { continue };
        let failed = |e: String| VkError::Plan(format!("graph {} node {i} ({}): {e}", graph.name, node.name));
        let kernel_id = KernelId::of_plan(kernel)
            .ok_or_else(|| failed(format!("the plan names {kernel}, which this backend does not have")))?;
        check_variant(kernel_id, info).map_err(failed)?;
        // The buffer of value `id`, its byte offset there, and the value.
        let locate = |id: NodeId| -> Result<(&'a Buffer, usize, Value)> {
            let loc = plan.locs[id.0].ok_or_else(|| failed(format!("value {} has no address", id.0)))?;
            let (buf, offset) = match loc {
                Loc::Arena { offset } => (arena, offset),
                Loc::External { storage, offset } => (&storages[storage_of[storage.0]], offset),
            };
            Ok((buf, offset, graph.value(id).clone()))
        };
        // The group's inputs in the order its kernel takes them; its output.
        let input_ids = group.inputs(graph);
        let op = |id: NodeId| &graph.node(id).op;
        let ops = Ops { node: &node.op, folded: group.folded.map(op), fused: group.fused.map(op) };
        if input_ids.len() > MAX_INPUTS {
            return Err(failed(format!("{} inputs", input_ids.len())));
        }
        let ins = input_ids.iter().map(|&id| locate(id)).collect::<Result<Vec<_>>>()?;
        let out = locate(group.output())?;
        // What the node reads and writes, whole: the row ranges of a split product read the
        // same input and disjoint weight rows and write disjoint output rows, so they need no
        // barrier between them (and the arena never gives a node's output the bytes of one of
        // its inputs: their lifetimes overlap at the node).
        let reads = ins.iter().map(|(b, o, v)| Access::of_value(b.inner.raw, *o, v)).collect();
        let mut wait = hazards.access(reads, vec![Access::of_value(out.0.inner.raw, out.1, &out.2)]);
        let pieces: Vec<Option<(usize, usize)>> =
            if kernel.splits.is_empty() { vec![None] } else { kernel.splits.iter().copied().map(Some).collect() };
        for piece in pieces {
            let mut ins = ins.clone();
            let mut out = out.clone();
            if let Some((r0, rows)) = piece {
                // Weight rows r0..r0 + rows, output values r0..r0 + rows of every column.
                ins[0].1 += r0 * ins[0].2.nb[1];
                ins[0].2.ne[1] = rows;
                out.1 += r0 * out.2.nb[0];
                out.2.ne[0] = rows;
            }
            let bound_ins = ins
                .iter()
                .map(|(b, o, v)| bind_window(b, *o, v, max_range, align).map_err(failed))
                .collect::<Result<Vec<_>>>()?;
            let (out_window, out_op) = bind_window(out.0, out.1, &out.2, max_range, align).map_err(failed)?;
            let operands: Vec<Operand> = bound_ins.iter().map(|(_, o)| *o).collect();
            let launch = kernels::launch(kernel_id, ops, &operands, &out_op, out.2.dyn_axis.map(Into::into))
                .map_err(|e| failed(e.to_string()))?;
            let grid_value = launch.grid_input.and_then(|k| node.inputs.get(k).copied()).unwrap_or(NodeId(i));
            let label = profile_label(launch.kernel, &operands);
            chosen.push(Chosen {
                launch,
                ins: bound_ins.into_iter().map(|(w, _)| w).collect(),
                out: out_window,
                wait: std::mem::take(&mut wait),
                piece,
                grid_value,
                label,
            });
        }
    }
    Ok(chosen)
}

/// Records `plan` once: a descriptor set and a dispatch (indirect where its grid follows the
/// run) per chosen dispatch, with pipelines from `ks`.
fn record(
    device: &Device,
    ks: &KernelSet,
    plan: Plan,
    storage_of: Vec<usize>,
    chosen: Vec<Chosen>,
    storages: &[Buffer],
    arena: &Buffer,
) -> Result<Recorded> {
    let graph = &plan.graph;
    let info = device.info();
    let n_runs = chosen.len();
    let words = RunWords::new(device, graph.symbols.len(), n_runs)?;
    let (sizes, args, args_at) = (&words.local, &words.local, words.args_at);
    let pool = DescriptorPool::new(device, n_runs.max(1) as u32, BINDINGS)?;
    let mut cmd = CommandBuffer::new(device)?;
    cmd.begin()?;
    let mut barriers = usize::from(words.record_upload(&mut cmd)?);
    // Timestamp 0 before the first dispatch and one after the last; profiling: k + 1 after
    // dispatch k (profile.rs).
    let profiling = device.profiling();
    let timestamps = match n_runs {
        0 => None,
        n if profiling => Some(TimestampPool::new(device, n as u32 + 1)?),
        _ if info.can_time() => Some(TimestampPool::new(device, 2)?),
        _ => None,
    };
    if let Some(pool) = &timestamps {
        cmd.reset_timestamps(pool)?;
        cmd.write_timestamp(pool, 0)?;
    }
    let mut launches = Vec::with_capacity(n_runs);
    // Scratch buffers by layout, each with the barrier count at its last dispatch.
    let mut scratch: Vec<(Scratch, usize, Buffer)> = Vec::new();
    for c in chosen {
        let Chosen { launch, ins, out, wait, piece, grid_value, label } = c;
        let pipeline = ks.pipeline(launch.kernel)?;
        let sizes_window = Window { buffer: sizes, offset: 0, range: args_at };
        // Each input at its binding; the bindings nothing takes hold the sizes.
        let mut bound = vec![sizes_window; BINDINGS as usize];
        for (k, w) in ins.into_iter().enumerate() {
            bound[launch.slot(k) as usize] = w;
        }
        bound[OUTPUT_BINDING as usize] = out;
        // Profiling times each dispatch alone: a barrier before every one but the first.
        // Between dispatches only compute waits for compute: the indirect arguments and run
        // sizes were made visible once, by the barrier after their upload.
        if wait || (profiling && !launches.is_empty()) {
            cmd.compute_barrier()?;
            barriers += 1;
        }
        // Scratch: a buffer of the same layout whose last dispatch a barrier has ordered
        // before this one (the attention of every layer shares one), else one of its own.
        if launch.scratch.bytes > 0 {
            let free = scratch.iter().position(|(layout, last, _)| *layout == launch.scratch && *last < barriers);
            let at = match free {
                Some(at) => at,
                None => {
                    let buffer = device.buffer(launch.scratch.bytes as u64, Location::Device, "kernel scratch")?;
                    buffer.clear()?;
                    scratch.push((launch.scratch, barriers, buffer));
                    scratch.len() - 1
                }
            };
            scratch[at].1 = barriers;
            let buffer = &scratch[at].2;
            bound[SCRATCH_BINDING as usize] = Window { buffer, offset: 0, range: buffer.size() };
        }
        let set = pool.bind_windows(&pipeline, &bound)?;
        match fixed_grid(graph, grid_value, piece, &launch, info.max_workgroup_count) {
            Some(groups) => cmd.dispatch(&pipeline, &set, &launch.push, groups)?,
            None => cmd.dispatch_indirect(&pipeline, &set, &launch.push, args, args_at + 12 * launches.len() as u64)?,
        }
        if let Some(pool) = timestamps.as_ref().filter(|_| profiling) {
            cmd.write_timestamp(pool, launches.len() as u32 + 1)?;
        }
        launches.push(Dispatch { grid_value, rows: piece.map(|(_, rows)| rows), launch, label });
    }
    // One barrier after the last dispatch, always: the readback copies below wait for it,
    // and so does every command of the next replay (a barrier orders everything after it in
    // submission order, later submissions included).
    if let Some(pool) = timestamps.as_ref().filter(|_| !profiling) {
        cmd.write_timestamp(pool, 1)?;
    }
    if !launches.is_empty() {
        cmd.barrier()?;
        barriers += 1;
    }
    // The graph's small outputs (a step's chosen tokens) are copied at the end of the
    // recording into host-visible buffers when their own memory is not mapped: reading them
    // needs no further submission. Larger ones (logits) are read when asked for (`output`).
    let mut readback = Vec::new();
    for &id in &graph.outputs {
        let (buf, offset) = match plan.locs[id.0] {
            Some(Loc::Arena { offset }) => (arena, offset),
            Some(Loc::External { storage, offset }) => (&storages[storage_of[storage.0]], offset),
            None => continue,
        };
        let bytes = graph.value(id).extent_bytes() as u64;
        if buf.is_mapped() || bytes > RECORDED_OUTPUT_BYTES {
            continue;
        }
        let host = device.buffer(bytes, Location::Host, "an output read back")?;
        cmd.copy(buf, offset as u64, &host, 0, bytes)?;
        readback.push((id, host));
    }
    cmd.finish()?;
    let timing = match timestamps {
        Some(pool) => {
            let kernels = profiling.then(|| {
                KernelTimes::new(launches.iter().map(|d| d.label.clone()), info.timestamp_bits, info.timestamp_period)
            });
            // A query no dispatch wrote would never become available: every read would fail.
            let written = kernels.as_ref().map_or(2, KernelTimes::timestamps);
            if written != pool.queries() {
                return Err(VkError::Plan(format!(
                    "graph {}: {} timestamps for {} dispatches",
                    graph.name,
                    pool.queries(),
                    launches.len()
                )));
            }
            Some(Timing { pool, runs: RunTimes::new(info.timestamp_bits, info.timestamp_period), kernels })
        }
        None => None,
    };
    let scratch = scratch.into_iter().map(|(_, _, buffer)| buffer).collect();
    Ok(Recorded { plan, storage_of, words, launches, barriers, cmd, readback, timing, scratch })
}

/// Refuses a kernel variant the device cannot run (a plan made for another device).
fn check_variant(kernel: KernelId, info: &DeviceInfo) -> std::result::Result<(), String> {
    let runs = match kernel {
        KernelId::MatMul(MatKind::VecSg { subgroup } | MatKind::VecWide { subgroup, .. }, ..) => {
            info.subgroup_kernels() == Some(subgroup)
        }
        KernelId::MatMul(kind, ..) => kind.coop().is_none_or(|cm| info.coopmat_matmul() == Some(cm)),
        KernelId::FlashAttnCm(tile, _) => info.coopmat_matmul() == Some(tile.cm),
        KernelId::FlashAttnSplit(split, _) => {
            info.subgroup_kernels() == Some(split.subgroup) && split.subgroup >= SPLIT_MIN_SUBGROUP
        }
        _ => true,
    };
    if runs {
        Ok(())
    } else {
        Err(format!(
            "the plan names {} (subgroup {:?}, shape {:?}), which {} cannot run: a plan for another device",
            kernel.name(),
            kernel.subgroup(),
            kernel.shape(),
            info.name
        ))
    }
}

/// The window of a value at byte `offset` of `buf`, and its operand relative to that window:
/// the whole buffer when it fits the storage-buffer range, else a window starting at the
/// value (aligned down to the offset alignment).
fn bind_window<'a>(
    buf: &'a Buffer,
    offset: usize,
    v: &Value,
    max_range: u64,
    align: u64,
) -> std::result::Result<(Window<'a>, Operand), String> {
    let end = (offset + v.extent_bytes()) as u64;
    // Kernels do not bounds-check their reads: every window must lie in its buffer.
    if end > buf.size() {
        return Err("a value runs past its buffer".to_owned());
    }
    let start = if buf.size() <= max_range { 0 } else { offset as u64 / align * align };
    let range = (buf.size() - start).min(max_range);
    if end > start + range {
        return Err(format!(
            "a value spans {} bytes, more than the device's storage-buffer range of {max_range}",
            end - offset as u64
        ));
    }
    let operand = Operand {
        dtype: v.dtype,
        ne: v.ne,
        nb: v.nb,
        offset: offset - start as usize,
        dynamic: v.dyn_axis.map(Into::into),
    };
    Ok((Window { buffer: buf, offset: start, range }, operand))
}

/// The buffer of one external storage: a weight's (filled by `fill`), or a run-time buffer
/// (device memory when `gpu_written`, else input memory the host writes: `Location::Input`).
fn storage(device: &Device, ext: &External, gpu_written: bool) -> Result<Buffer> {
    let location = if ext.is_weight || gpu_written { Location::Device } else { Location::Input };
    device.buffer(ext.bytes as u64, location, &ext.name)
}

/// Uploads each weight storage's tensor from `files` (checked for dtype and size) and zeroes
/// the run-time ones, through one staging buffer.
fn fill(device: &Device, exts: &[&External], storages: &[Buffer], files: &[Arc<GgufFile>]) -> Result<()> {
    let weight_bytes = exts.iter().filter(|e| e.is_weight).map(|e| e.bytes as u64).sum();
    let mut up = Uploader::new(device, weight_bytes);
    for (ext, b) in exts.iter().zip(storages) {
        if ext.is_weight {
            let (file, i) = crate::backend::find_weight(ext, files).map_err(VkError::Plan)?;
            let tensor = &file.tensors()[i];
            let data = file.tensor_data(tensor);
            let row_values = tensor.shape().first().map_or(0, |&n| n as usize);
            let stored = Stored::of(ext.dtype, row_values, data)
                .map_err(|e| VkError::Plan(format!("weight {:?}: {e}", ext.name)))?;
            up.write_stored(b, 0, stored)?;
        } else {
            up.clear(b)?;
        }
    }
    up.flush()
}
