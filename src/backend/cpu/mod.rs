//! The CPU backend: executes a plan node by node over an f32 arena, weights read in place from
//! the model file. Two kernel sets behind one interface: `reference` (plain loops, the numeric
//! reference; `HRX_KERNELS=reference`) and `fast` (threads, quantized dot products).

mod attention;
mod fast;
pub mod pool;
pub mod reference;
pub mod tensor;
#[cfg(target_arch = "x86_64")]
mod x86_attend;

use super::PlanId;
use crate::dispatcher::{runtime_ne, Loc, Placement, Plan, Where};
use crate::gguf::GgufFile;
use crate::graph::{ExternalId, NodeId, Op, MAX_DIMS};
use crate::quant::{DType, QuantError};
use std::fmt;
use std::sync::Arc;
use tensor::{Data, In, Out};

/// Why the CPU executor stopped.
#[derive(Debug, Clone, PartialEq)]
pub enum KernelError {
    /// A kernel refusing its operands (an id out of range, say), or the executor's memory not
    /// holding what the plan says.
    Fault(String),
    /// A block-format dot product refusing its operands.
    Quant(QuantError),
    /// A weight or run-time buffer the plan names could not be bound.
    Bind(String),
    /// A symbol's run-time value past the maximum the plan was made for.
    PastPlan { symbol: String, value: usize, max: usize },
    /// A plan this executor does not run (nodes placed on another device or fused).
    NotCpu { graph: String, node: usize, placement: String },
    /// `source` stopped node `node` (`name`) of graph `graph`.
    Node { graph: String, node: usize, name: String, source: Box<KernelError> },
}

impl fmt::Display for KernelError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KernelError::Fault(m) | KernelError::Bind(m) => f.write_str(m),
            KernelError::Quant(e) => write!(f, "{e}"),
            KernelError::PastPlan { symbol, value, max } => {
                write!(f, "{symbol} = {value} exceeds the planned maximum {max}")
            }
            KernelError::NotCpu { graph, node, placement } => {
                write!(f, "graph {graph} node {node} is placed {placement}; the CPU executor runs CPU plans")
            }
            KernelError::Node { graph, node, name, source } => {
                write!(f, "graph {graph} node {node} ({name}): {source}")
            }
        }
    }
}

impl std::error::Error for KernelError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            KernelError::Quant(e) => Some(e),
            KernelError::Node { source, .. } => Some(source.as_ref()),
            _ => None,
        }
    }
}

/// Which kernels run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kernels {
    Reference,
    Fast,
}

impl Kernels {
    /// `HRX_KERNELS=reference` selects the reference kernels; anything else the fast ones.
    pub fn from_env() -> Kernels {
        match crate::settings::settings().choice(&crate::settings::KERNELS) {
            Some("reference") => Kernels::Reference,
            _ => Kernels::Fast,
        }
    }
}

/// The bytes behind an external storage.
pub enum Storage {
    Weight { file: Arc<GgufFile>, tensor: usize },
    F32(Vec<f32>),
    I32(Vec<i32>),
}

/// Executes a set of plans (e.g. prefill, decode, vision) that share run-time buffers by name
/// (the KV cache) and one arena (plans run one at a time).
pub struct CpuExecutor {
    plans: Vec<Plan>,
    /// Per plan: its external ids mapped to indices into `storages`.
    storage_of: Vec<Vec<usize>>,
    storages: Vec<Storage>,
    arena: Vec<f32>,
    kernels: Kernels,
    threads: usize,
    /// What this run computed once for several nodes (see `run_node`).
    memo: Box<fast::RunMemo>,
    /// The external storage of the positions that `memo`'s RoPE angles were made from.
    trig_storage: Option<usize>,
}

impl CpuExecutor {
    /// Binds every weight of the plans to the tensor of that name in `files` (checked for
    /// dtype and size), and allocates the arena and every run-time buffer; externals with the
    /// same name in several plans share one buffer.
    pub fn new(plans: Vec<Plan>, files: &[Arc<GgufFile>], kernels: Kernels) -> Result<CpuExecutor, KernelError> {
        // It runs compute nodes one by one: a plan whose registry placed them elsewhere or fused
        // them names kernels this executor does not have.
        for plan in &plans {
            for (i, p) in plan.placements.iter().enumerate() {
                let cpu = matches!(
                    p,
                    Placement::Run {
                        device: Where::Cpu,
                        group: crate::dispatcher::Group { folded: None, fused: None, .. },
                        ..
                    } | Placement::Bound
                        | Placement::Elided
                        | Placement::Skipped
                );
                if !cpu {
                    return Err(KernelError::NotCpu {
                        graph: plan.graph.name.clone(),
                        node: i,
                        placement: format!("{p:?}"),
                    });
                }
            }
        }
        let mut storages: Vec<Storage> = Vec::new();
        let mut storage_names: Vec<String> = Vec::new();
        let mut storage_of = Vec::with_capacity(plans.len());
        for plan in &plans {
            let mut map = Vec::with_capacity(plan.graph.externals.len());
            for ext in &plan.graph.externals {
                // One buffer per name across plans (the KV cache); per-call inputs sized for
                // each plan's shapes get their own.
                if let Some(i) = (0..storages.len())
                    .find(|&i| storage_names[i] == ext.name && storage_bytes(&storages[i]) == ext.bytes)
                {
                    map.push(i);
                    continue;
                }
                storages.push(new_storage(ext, files)?);
                storage_names.push(ext.name.clone());
                map.push(storages.len() - 1);
            }
            storage_of.push(map);
        }
        let arena_bytes = plans.iter().map(|p| p.arena_bytes).max().unwrap_or(0);
        let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
        Ok(CpuExecutor {
            plans,
            storage_of,
            storages,
            arena: vec![0.0; arena_bytes / 4],
            kernels,
            threads,
            memo: Box::default(),
            trig_storage: None,
        })
    }

    pub fn plan(&self, id: PlanId) -> &Plan {
        &self.plans[id.0]
    }

    pub fn set_threads(&mut self, n: usize) {
        self.threads = n.max(1);
    }

    fn named(&mut self, plan: PlanId, name: &str) -> Option<&mut Storage> {
        let graph = &self.plans.get(plan.0)?.graph;
        let ext = graph.externals.iter().position(|e| e.name == name)?;
        let i = *self.storage_of[plan.0].get(ext)?;
        self.storages.get_mut(i)
    }

    /// The f32 run-time buffer `name` of `plan`, to fill before a run or read after it.
    pub fn f32_buffer(&mut self, plan: PlanId, name: &str) -> Option<&mut [f32]> {
        match self.named(plan, name)? {
            Storage::F32(v) => Some(v),
            _ => None,
        }
    }

    /// The i32 run-time buffer `name` of `plan`.
    pub fn i32_buffer(&mut self, plan: PlanId, name: &str) -> Option<&mut [i32]> {
        match self.named(plan, name)? {
            Storage::I32(v) => Some(v),
            _ => None,
        }
    }

    /// Runs every compute node of a plan with the symbols' run-time values.
    pub fn run(&mut self, plan: PlanId, symbols: &[usize]) -> Result<(), KernelError> {
        let graph = &self.plans[plan.0].graph;
        for (i, (sym_name, max)) in graph.symbols.iter().enumerate() {
            let v = symbols.get(i).copied().unwrap_or(0);
            if v > *max {
                return Err(KernelError::PastPlan { symbol: sym_name.clone(), value: v, max: *max });
            }
        }
        // Values of the last run are gone (their bytes and inputs rewritten).
        *self.memo = fast::RunMemo::default();
        for i in 0..graph.nodes.len() {
            if let Placement::Run { .. } = self.plans[plan.0].placements[i] {
                self.run_node(plan, NodeId(i), symbols).map_err(|e| {
                    let graph = &self.plans[plan.0].graph;
                    KernelError::Node {
                        graph: graph.name.clone(),
                        node: i,
                        name: graph.nodes[i].name.clone(),
                        source: Box::new(e),
                    }
                })?;
            }
        }
        Ok(())
    }

    /// The contiguous f32 value of a node of `plan` after a run, at its run-time shape.
    pub fn output(&self, plan: PlanId, id: NodeId, symbols: &[usize]) -> Option<&[f32]> {
        let p = &self.plans[plan.0];
        let v = p.graph.value(id);
        let n: usize = runtime_ne(&p.graph, id, symbols).iter().product();
        if !v.is_contiguous() {
            return None;
        }
        match p.locs[id.0]? {
            Loc::Arena { offset } => self.arena.get(offset / 4..offset / 4 + n),
            Loc::External { storage, offset } => match self.storages.get(*self.storage_of[plan.0].get(storage.0)?)? {
                Storage::F32(buf) => buf.get(offset / 4..offset / 4 + n),
                _ => None,
            },
        }
    }

    fn run_node(&mut self, plan: PlanId, id: NodeId, symbols: &[usize]) -> Result<(), KernelError> {
        let p = &self.plans[plan.0];
        let map = &self.storage_of[plan.0];
        let global = |loc: Loc| match loc {
            Loc::External { storage, offset } => map
                .get(storage.0)
                .map(|&g| Loc::External { storage: ExternalId(g), offset })
                .ok_or_else(|| KernelError::Fault(format!("no storage {}", storage.0))),
            arena => Ok(arena),
        };
        let graph = &p.graph;
        let node = graph.node(id);
        let out_loc = global(p.locs[id.0].ok_or_else(|| KernelError::Fault("output has no address".into()))?)?;
        let out_ne = runtime_ne(graph, id, symbols);
        let out_extent = extent_f32(&out_ne, &node.value.nb);
        let (sources, out_data, out_offset) =
            split_for_output(&mut self.arena, &mut self.storages, out_loc, out_extent)?;
        let mut ins = Vec::with_capacity(node.inputs.len());
        for (k, &input) in node.inputs.iter().enumerate() {
            if node.op == Op::SetRows && k == 0 {
                // The destination is the output itself; the kernel never reads it as an input.
                ins.push(In {
                    data: Data::F32(&[]),
                    dtype: DType::F32,
                    offset: 0,
                    ne: [0; MAX_DIMS],
                    nb: [0; MAX_DIMS],
                });
                continue;
            }
            let loc = global(
                p.locs[input.0].ok_or_else(|| KernelError::Fault(format!("input {} has no address", input.0)))?,
            )?;
            let v = graph.value(input);
            ins.push(sources.input(loc, v.dtype, runtime_ne(graph, input, symbols), v.nb)?);
        }
        let mut out = Out { data: out_data, offset: out_offset, ne: out_ne, nb: node.value.nb };
        // A product's quantized activation rows serve the next products that read the same
        // value while nothing else runs: products write only their own outputs, which in the
        // arena never share bytes with a value still to be read (an external output might).
        if node.op != Op::MatMul || !matches!(out_loc, Loc::Arena { .. }) {
            self.memo.quantized = None;
        }
        // RoPE's angles stay true while no node writes the storage of their positions (an
        // arena value is never rewritten while it can still be read).
        if let (Loc::External { storage, .. }, Some(pos)) = (out_loc, self.trig_storage) {
            if storage.0 == pos {
                self.memo.trig = None;
            }
        }
        if matches!(node.op, Op::Rope { .. }) {
            let pos = node.inputs.get(1).and_then(|id| p.locs[id.0]).map(global).transpose()?;
            let storage = match pos {
                Some(Loc::External { storage, .. }) => Some(storage.0),
                _ => None,
            };
            if storage != self.trig_storage {
                self.memo.trig = None;
                self.trig_storage = storage;
            }
        }
        execute_with(&node.op, &ins, &mut out, self.kernels, self.threads, Some((&node.inputs, &mut self.memo)))
    }
}

fn storage_bytes(s: &Storage) -> usize {
    match s {
        Storage::Weight { file, tensor } => file.tensors()[*tensor].n_bytes as usize,
        Storage::F32(v) => v.len() * 4,
        Storage::I32(v) => v.len() * 4,
    }
}

fn new_storage(ext: &crate::graph::External, files: &[Arc<GgufFile>]) -> Result<Storage, KernelError> {
    if ext.is_weight {
        let (file, i) = super::find_weight(ext, files).map_err(KernelError::Bind)?;
        return Ok(Storage::Weight { file: Arc::clone(file), tensor: i });
    }
    match ext.dtype {
        DType::I32 => Ok(Storage::I32(vec![0; ext.bytes.div_ceil(4)])),
        DType::F32 => Ok(Storage::F32(vec![0.0; ext.bytes.div_ceil(4)])),
        d => Err(KernelError::Bind(format!("run-time buffer {:?} of {d} is not supported", ext.name))),
    }
}

/// Runs one op with the chosen kernel set.
pub fn execute(op: &Op, ins: &[In], out: &mut Out, kernels: Kernels, threads: usize) -> Result<(), KernelError> {
    execute_with(op, ins, out, kernels, threads, None)
}

/// [`execute`] with the run's [`fast::RunMemo`] and the node's inputs.
fn execute_with(
    op: &Op,
    ins: &[In],
    out: &mut Out,
    kernels: Kernels,
    threads: usize,
    memo: Option<(&[NodeId], &mut fast::RunMemo)>,
) -> Result<(), KernelError> {
    if kernels == Kernels::Fast {
        if let Some(result) = fast::execute(op, ins, out, threads, memo) {
            return result;
        }
    }
    let arg = |i: usize| ins.get(i).ok_or_else(|| KernelError::Fault(format!("{} needs input {i}", op.name())));
    match op {
        Op::GetRows => reference::get_rows(arg(0)?, arg(1)?, out),
        Op::GetRowsWeighted => reference::get_rows_weighted(arg(0)?, arg(1)?, arg(2)?, out),
        Op::SetRows => reference::set_rows(arg(1)?, arg(2)?, out),
        Op::MatMul => {
            reference::matmul(arg(0)?, arg(1)?, out);
            Ok(())
        }
        Op::Add => {
            reference::binary(arg(0)?, arg(1)?, out, |a, b| a + b);
            Ok(())
        }
        Op::Mul => {
            reference::binary(arg(0)?, arg(1)?, out, |a, b| a * b);
            Ok(())
        }
        Op::RmsNorm { eps } => {
            reference::rms_norm(arg(0)?, arg(1)?, *eps, out);
            Ok(())
        }
        Op::LayerNorm { eps } => {
            reference::layer_norm(arg(0)?, arg(1)?, arg(2)?, *eps, out);
            Ok(())
        }
        Op::Rope { kind, theta, n_dims } => {
            reference::rope(arg(0)?, arg(1)?, kind, *theta, *n_dims, out);
            Ok(())
        }
        Op::SwiGlu => {
            reference::binary(arg(0)?, arg(1)?, out, |g, u| reference::silu(g) * u);
            Ok(())
        }
        Op::Gelu(kind) => {
            reference::unary(arg(0)?, out, |x| reference::gelu(*kind, x));
            Ok(())
        }
        Op::Cont => {
            reference::unary(arg(0)?, out, |x| x);
            Ok(())
        }
        Op::Attention { scale, segment } => {
            reference::attention(arg(0)?, arg(1)?, arg(2)?, ins.get(3), *scale, *segment, out)
        }
        Op::Argmax => {
            reference::argmax_rows(arg(0)?, out);
            Ok(())
        }
        Op::External | Op::View | Op::Reshape | Op::Permute { .. } | Op::Transpose => {
            Err(KernelError::Fault(format!("{} is not a compute op", op.name())))
        }
    }
}

/// f32 elements spanned by a value of shape `ne` and strides `nb`.
fn extent_f32(ne: &[usize; MAX_DIMS], nb: &[usize; MAX_DIMS]) -> usize {
    if ne.contains(&0) {
        return 0;
    }
    (4 + (0..MAX_DIMS).map(|i| (ne[i] - 1) * nb[i]).sum::<usize>()) / 4
}

/// Everything a node may read while its output is borrowed mutably.
struct Sources<'a> {
    arena_lo: &'a [f32],
    arena_hi: &'a [f32],
    /// Element index where `arena_hi` starts.
    hi_start: usize,
    storages_lo: &'a [Storage],
    storages_hi: &'a [Storage],
    /// The storage being written (unreadable for this node), if the output is external.
    hole: Option<usize>,
}

impl<'a> Sources<'a> {
    fn input(
        &self,
        loc: Loc,
        dtype: DType,
        ne: [usize; MAX_DIMS],
        nb: [usize; MAX_DIMS],
    ) -> Result<In<'a>, KernelError> {
        let view = |data, offset| In { data, dtype, offset, ne, nb };
        match loc {
            Loc::Arena { offset } => {
                let (start, len) = (offset / 4, extent_f32(&ne, &nb));
                if start + len <= self.arena_lo.len() {
                    Ok(view(Data::F32(self.arena_lo), offset))
                } else if start >= self.hi_start {
                    Ok(view(Data::F32(self.arena_hi), offset - self.hi_start * 4))
                } else {
                    Err(KernelError::Fault("an input overlaps the output in the arena".into()))
                }
            }
            Loc::External { storage, offset } => {
                let s = storage.0;
                let st = match self.hole {
                    Some(h) if s == h => {
                        return Err(KernelError::Fault("an input is in the storage being written".into()))
                    }
                    Some(h) if s > h => self.storages_hi.get(s - h - 1),
                    _ => self.storages_lo.get(s),
                }
                .ok_or_else(|| KernelError::Fault(format!("no storage {s}")))?;
                Ok(match st {
                    Storage::Weight { file, tensor } => {
                        view(Data::Bytes(file.tensor_data(&file.tensors()[*tensor])), offset)
                    }
                    Storage::F32(v) => view(Data::F32(v), offset),
                    Storage::I32(v) => view(Data::I32(v), offset),
                })
            }
        }
    }
}

/// Splits the arena and storages so the output region is mutable and everything else readable.
fn split_for_output<'a>(
    arena: &'a mut [f32],
    storages: &'a mut [Storage],
    out: Loc,
    extent: usize,
) -> Result<(Sources<'a>, &'a mut [f32], usize), KernelError> {
    match out {
        Loc::Arena { offset } => {
            let start = offset / 4;
            if start + extent > arena.len() {
                return Err(KernelError::Fault("output runs past the arena".into()));
            }
            let (lo, rest) = arena.split_at_mut(start);
            let (mid, hi) = rest.split_at_mut(extent);
            let sources = Sources {
                arena_lo: lo,
                arena_hi: hi,
                hi_start: start + extent,
                storages_lo: storages,
                storages_hi: &[],
                hole: None,
            };
            Ok((sources, mid, 0))
        }
        Loc::External { storage, offset } => {
            if storage.0 >= storages.len() {
                return Err(KernelError::Fault(format!("no storage {}", storage.0)));
            }
            let (lo, rest) = storages.split_at_mut(storage.0);
            let (mid, hi) = rest.split_at_mut(1);
            let Storage::F32(buf) = &mut mid[0] else {
                return Err(KernelError::Fault("output storage is not an f32 buffer".into()));
            };
            let sources = Sources {
                arena_lo: arena,
                arena_hi: &[],
                hi_start: usize::MAX,
                storages_lo: lo,
                storages_hi: hi,
                hole: Some(storage.0),
            };
            Ok((sources, buf.as_mut_slice(), offset))
        }
    }
}

#[cfg(test)]
mod tests;
