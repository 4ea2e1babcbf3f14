//! The HRX dispatcher: imports a graph once, classifies every value, plans every node once.
//!
//! Import: each value is **External** (its storage root is not a node of this graph: weights,
//! inputs, caches, a value another graph made), **Transient** (produced by a node, lives in the
//! arena between its producer and last consumer) or **Alias** (a layout op whose window lies
//! inside its input's bytes: elided). A layout op that cannot alias records why (`AliasMiss`).
//!
//! Plan, node by node (DESIGN.md):
//! 1. a compute op gets a registration on the device, or is left to the CPU (a split);
//! 2. a layout op aliases if it can (elided);
//! 3. a layout op whose output is External, recorded `NoAliasSource`, is skipped: it is bound
//!    from its tensor like any other external input;
//! 4. any other layout window is a Transient nobody fills: planning fails, naming the node.

mod arena;

use crate::graph::{ExternalId, Graph, NodeId, Op, MAX_DIMS};
use std::collections::{BTreeMap, HashSet};
use std::fmt;

/// Where a value's bytes come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Class {
    External,
    Transient,
    Alias,
}

/// Why a layout op could not alias its input.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AliasMiss {
    /// The input's storage is not a value of this graph.
    NoAliasSource,
    /// The window runs past its source's bytes.
    OutOfRange,
}

impl AliasMiss {
    pub fn name(self) -> &'static str {
        match self {
            AliasMiss::NoAliasSource => "no_alias_source",
            AliasMiss::OutOfRange => "out_of_range",
        }
    }
}

/// Which processor runs a compute node.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Device {
    Cpu,
    Gpu,
}

impl Device {
    pub fn name(&self) -> &'static str {
        match self {
            Device::Cpu => "cpu",
            Device::Gpu => "gpu",
        }
    }
}

/// What runs a compute node, decided once at plan time by the backend's registry: executors
/// bind and record exactly this.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Kernel {
    /// The backend's name for it, the device's variant included: `mul_mat_vec_sg_q4_k`.
    pub name: String,
    /// The subgroup size the variant is built around, where it is one.
    pub subgroup: Option<u32>,
    /// The matrix-unit shape (M, N, K) a cooperative-matrix variant is built around (its
    /// tiles follow from it and the subgroup size).
    pub shape: Option<[u32; 3]>,
    /// Output row ranges `(first, count)` that each run as a dispatch of their own (a product
    /// whose weights are more than one dispatch can address); empty: one dispatch.
    pub splits: Vec<(usize, usize)>,
}

impl Kernel {
    /// A kernel of one dispatch without a subgroup variant.
    pub fn named(name: impl Into<String>) -> Kernel {
        Kernel { name: name.into(), subgroup: None, shape: None, splits: Vec::new() }
    }

    /// The variant as plans show it: ` (subgroup 32)`, ` (subgroup 32, 16x16x16)`, or nothing.
    pub fn variant(&self) -> String {
        match (self.subgroup, self.shape) {
            (Some(s), Some([m, n, k])) => format!(" (subgroup {s}, {m}x{n}x{k})"),
            (Some(s), None) => format!(" (subgroup {s})"),
            (None, Some([m, n, k])) => format!(" ({m}x{n}x{k})"),
            (None, None) => String::new(),
        }
    }

    /// How many dispatches it records.
    pub fn dispatches(&self) -> usize {
        self.splits.len().max(1)
    }
}

impl fmt::Display for Kernel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}{}", self.name, self.variant())?;
        if !self.splits.is_empty() {
            write!(f, " x{} row ranges", self.splits.len())?;
        }
        Ok(())
    }
}

/// What the plan does with a node.
#[derive(Clone, Debug, PartialEq)]
pub enum Placement {
    /// An external input, bound from its tensor at run time.
    Bound,
    /// A layout op aliasing its input (rule 2).
    Elided,
    /// A layout window on external storage without an alias source (rule 3).
    Skipped,
    /// A compute node and the kernel that runs it. With `fused`, the same dispatch also
    /// computes that node (the one reader of this node's value) and writes its output.
    Run { device: Device, kernel: Kernel, fused: Option<NodeId> },
    /// A compute node computed by the dispatch of node `into`.
    Fused { into: NodeId },
    /// A transient window nobody fills (rule 4): the plan fails, naming it.
    Refused,
}

/// How a backend runs a node and the one node reading its value as one dispatch.
#[derive(Clone, Debug, PartialEq)]
pub struct Fusion {
    pub kernel: Kernel,
    /// The arena keeps the node's inputs alive through the reader, so the pair always fuses.
    /// Otherwise it fuses only where the arena happens to place the reader's output clear of
    /// the node's inputs (keeping every input alive may cost too much memory).
    pub reserve: bool,
}

/// A byte address: a storage and an offset in it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Loc {
    External { storage: ExternalId, offset: usize },
    Arena { offset: usize },
}

impl Loc {
    fn plus(self, delta: usize) -> Loc {
        match self {
            Loc::External { storage, offset } => Loc::External { storage, offset: offset + delta },
            Loc::Arena { offset } => Loc::Arena { offset: offset + delta },
        }
    }
}

/// A backend's table of kernels: which compute nodes it can run, with what.
pub trait Registry {
    fn device(&self) -> Device;
    /// The kernel for node `id`, or None to leave the node to the CPU.
    fn kernel(&self, graph: &Graph, id: NodeId) -> Option<Kernel>;
    /// The dispatch running node `id` and `reader` (the one node reading its value, dispatched
    /// right after it) together, writing `reader`'s output while still reading `id`'s inputs;
    /// None where the backend has none. The fused dispatch binds `id`'s inputs, then
    /// `reader`'s inputs other than `id`'s value.
    fn fuse(&self, _graph: &Graph, _id: NodeId, _reader: NodeId) -> Option<Fusion> {
        None
    }
}

/// The CPU runs every compute op: the fallback that keeps every graph runnable.
pub struct CpuRegistry;

impl Registry for CpuRegistry {
    fn device(&self) -> Device {
        Device::Cpu
    }

    fn kernel(&self, graph: &Graph, id: NodeId) -> Option<Kernel> {
        let op = &graph.node(id).op;
        (!op.is_layout() && *op != Op::External).then(|| Kernel::named(op.name()))
    }
}

/// A plan refused under rule 4: transient windows nobody fills.
#[derive(Debug, Clone, PartialEq)]
pub struct PlanError {
    pub graph: String,
    /// Each refused node, with the engine's message for it.
    pub refusals: Vec<(NodeId, String)>,
    /// The census of the plan as far as it went (`refused` counts the refusals).
    pub census: Box<Census>,
}

impl fmt::Display for PlanError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.refusals.as_slice() {
            [] => write!(f, "graph {}: refused", self.graph),
            [(_, first)] => f.write_str(first),
            [(_, first), rest @ ..] => {
                write!(f, "{first} (and {} more refused nodes in graph {})", rest.len(), self.graph)
            }
        }
    }
}

impl std::error::Error for PlanError {}

/// The result of import: per value, its class, alias miss and storage.
#[derive(Debug, Clone)]
pub struct Import {
    pub class: Vec<Class>,
    pub miss: Vec<Option<AliasMiss>>,
    /// The node owning each value's storage (itself for compute nodes and missed windows, the
    /// source's owner for aliases); None for values on external storage.
    pub storage_owner: Vec<Option<NodeId>>,
}

/// Classifies every value. `registered_transient` forces values to be treated as transients
/// (what a backend that registers a window as its own buffer would do; tests use it).
pub fn import(graph: &Graph, registered_transient: &HashSet<NodeId>) -> Import {
    let n = graph.nodes.len();
    let mut class = Vec::with_capacity(n);
    let mut miss = vec![None; n];
    let mut storage_owner: Vec<Option<NodeId>> = Vec::with_capacity(n);
    for (i, node) in graph.nodes.iter().enumerate() {
        let id = NodeId(i);
        let (c, owner) = if node.op == Op::External || node.value.external.is_some() {
            (Class::External, None)
        } else if node.op.is_layout() {
            let input = node.inputs[0];
            match storage_owner[input.0] {
                None => {
                    // The chain ends in storage this graph does not hold.
                    miss[i] = Some(AliasMiss::NoAliasSource);
                    (Class::External, None)
                }
                Some(_) if !window_fits(graph, id) => {
                    miss[i] = Some(AliasMiss::OutOfRange);
                    (Class::Transient, Some(id))
                }
                Some(owner) => (Class::Alias, Some(owner)),
            }
        } else {
            (Class::Transient, Some(id))
        };
        if registered_transient.contains(&id) {
            class.push(Class::Transient);
            storage_owner.push(Some(id));
        } else {
            class.push(c);
            storage_owner.push(owner);
        }
    }
    Import { class, miss, storage_owner }
}

/// Whether layout node `id`'s window lies inside its input's bytes.
fn window_fits(graph: &Graph, id: NodeId) -> bool {
    let node = graph.node(id);
    let input = graph.value(node.inputs[0]);
    node.value.view_offset + node.value.extent_bytes() <= input.extent_bytes()
}

/// A graph planned once: placements, addresses, arena size, census.
#[derive(Debug, Clone)]
pub struct Plan {
    pub graph: Graph,
    pub import: Import,
    pub placements: Vec<Placement>,
    /// Address of every value (a value that is never read may have none).
    pub locs: Vec<Option<Loc>>,
    pub arena_bytes: usize,
}

/// Counts of a plan, for `hrx plan`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Census {
    pub nodes: usize,
    pub cpu_nodes: usize,
    pub gpu_nodes: usize,
    pub elided: usize,
    pub skipped: usize,
    pub refused: usize,
    pub bound: usize,
    /// Compute nodes run inside another node's dispatch.
    pub fused: usize,
    /// Dispatches a run records (a split product counts each of its row ranges).
    pub dispatches: usize,
    /// (device, op) -> count, for compute nodes.
    pub by_op: BTreeMap<(String, String), usize>,
    /// (device, kernel) -> dispatches; a variant built around a subgroup size (and a
    /// matrix-unit shape) shows it (`mul_mat_vec_sg_q4_k (subgroup 32)`,
    /// `mul_mat_cm_q4_k (subgroup 32, 16x16x16)`), a fused pair its ops (`... (MUL_MAT+ADD)`).
    pub by_kernel: BTreeMap<(String, String), usize>,
}

impl Plan {
    /// Imports and plans `graph` for `registry`'s device (CPU fallback where it has no kernel).
    pub fn new(graph: Graph, registry: &dyn Registry) -> Result<Plan, PlanError> {
        Self::with_registered_transients(graph, registry, &HashSet::new())
    }

    pub fn with_registered_transients(
        graph: Graph,
        registry: &dyn Registry,
        registered_transient: &HashSet<NodeId>,
    ) -> Result<Plan, PlanError> {
        let import = import(&graph, registered_transient);
        let mut placements = Vec::with_capacity(graph.nodes.len());
        let mut refusals = Vec::new();
        for (i, node) in graph.nodes.iter().enumerate() {
            let id = NodeId(i);
            let placement = if node.op == Op::External {
                Placement::Bound
            } else if node.op.is_layout() {
                match (import.class[i], import.miss[i]) {
                    (Class::Alias, _) => Placement::Elided,
                    (Class::External, Some(AliasMiss::NoAliasSource)) => Placement::Skipped,
                    _ => {
                        refusals.push((id, refusal(&graph, &import, id)));
                        Placement::Refused
                    }
                }
            } else {
                match registry.kernel(&graph, id) {
                    Some(kernel) => Placement::Run { device: registry.device(), kernel, fused: None },
                    None => Placement::Run { device: Device::Cpu, kernel: Kernel::named(node.op.name()), fused: None },
                }
            };
            placements.push(placement);
        }
        let fusions = candidate_fusions(&graph, &placements, registry);
        let reserved: HashSet<(NodeId, NodeId)> =
            fusions.iter().filter(|(_, _, f)| f.reserve).map(|&(a, b, _)| (a, b)).collect();
        let (locs, arena_bytes) = arena::assign(&graph, &import, &|id, reader| reserved.contains(&(id, reader)));
        let mut plan = Plan { graph, import, placements, locs, arena_bytes };
        for (first, reader, fusion) in fusions {
            // The fused dispatch writes the reader's output while the first node's inputs are
            // still read: never onto their bytes.
            let clear = plan.graph.node(first).inputs.iter().all(|&input| !plan.may_overlap(input, reader));
            if clear {
                if let Placement::Run { kernel, fused, .. } = &mut plan.placements[first.0] {
                    *kernel = fusion.kernel;
                    *fused = Some(reader);
                }
                plan.placements[reader.0] = Placement::Fused { into: first };
            }
        }
        if std::env::var("HRX_LOG_DISPATCH").is_ok_and(|v| v == "1") {
            for (i, (node, p)) in plan.graph.nodes.iter().zip(&plan.placements).enumerate() {
                eprintln!(
                    "hrx dispatch: graph {} node {i} {} {:?} -> {}",
                    plan.graph.name,
                    node.op.name(),
                    node.name,
                    placement_str(p)
                );
            }
        }
        if !refusals.is_empty() {
            return Err(PlanError { graph: plan.graph.name.clone(), refusals, census: Box::new(plan.census()) });
        }
        Ok(plan)
    }

    pub fn census(&self) -> Census {
        let mut c = Census { nodes: self.graph.nodes.len(), ..Default::default() };
        for (node, p) in self.graph.nodes.iter().zip(&self.placements) {
            match p {
                Placement::Bound => c.bound += 1,
                Placement::Elided => c.elided += 1,
                Placement::Skipped => c.skipped += 1,
                Placement::Refused => c.refused += 1,
                Placement::Fused { .. } => c.fused += 1,
                Placement::Run { device, kernel, fused } => {
                    c.dispatches += kernel.dispatches();
                    let variant = kernel.variant();
                    let name = match fused {
                        Some(reader) => format!(
                            "{}{variant} ({}+{})",
                            kernel.name,
                            node.op.name(),
                            self.graph.node(*reader).op.name()
                        ),
                        None => format!("{}{variant}", kernel.name),
                    };
                    *c.by_kernel.entry((device.name().to_owned(), name)).or_default() += kernel.dispatches();
                }
            }
            // A fused node runs on its dispatch's device.
            let device = match p {
                Placement::Fused { into } => match &self.placements[into.0] {
                    Placement::Run { device, .. } => Some(device),
                    _ => None,
                },
                Placement::Run { device, .. } => Some(device),
                _ => None,
            };
            if let Some(device) = device {
                match device {
                    Device::Cpu => c.cpu_nodes += 1,
                    Device::Gpu => c.gpu_nodes += 1,
                }
                *c.by_op.entry((device.name().to_owned(), node.op.name().to_owned())).or_default() += 1;
            }
        }
        c
    }

    /// Each dispatch a run records, in order: the kernel's name (a split product once per row
    /// range). What an executor records must be exactly this.
    pub fn dispatches(&self) -> Vec<&str> {
        let mut out = Vec::new();
        for p in &self.placements {
            if let Placement::Run { kernel, .. } = p {
                out.extend(std::iter::repeat_n(kernel.name.as_str(), kernel.dispatches()));
            }
        }
        out
    }

    /// Whether the bytes of values `a` and `b` may overlap in the plan's memory (true when
    /// unsure: a value without an address).
    pub fn may_overlap(&self, a: NodeId, b: NodeId) -> bool {
        let span = |id: NodeId| -> Option<(Loc, usize)> {
            Some((self.locs.get(id.0).copied().flatten()?, self.graph.value(id).extent_bytes()))
        };
        let (Some((la, na)), Some((lb, nb))) = (span(a), span(b)) else { return true };
        let ranges = |x: usize, y: usize| x < y + nb && y < x + na;
        match (la, lb) {
            (Loc::Arena { offset: x }, Loc::Arena { offset: y }) => ranges(x, y),
            (Loc::External { storage: s, offset: x }, Loc::External { storage: t, offset: y }) => {
                s == t && ranges(x, y)
            }
            _ => false,
        }
    }
}

/// The pairs the registry fuses: a compute node whose value has one use, read by the next
/// compute node placed on the same device.
fn candidate_fusions(
    graph: &Graph,
    placements: &[Placement],
    registry: &dyn Registry,
) -> Vec<(NodeId, NodeId, Fusion)> {
    let mut uses = vec![0usize; graph.nodes.len()];
    for id in graph.nodes.iter().flat_map(|n| n.inputs.iter()).chain(&graph.outputs) {
        uses[id.0] += 1;
    }
    let runs: Vec<usize> = (0..placements.len()).filter(|&i| matches!(placements[i], Placement::Run { .. })).collect();
    let mut out: Vec<(NodeId, NodeId, Fusion)> = Vec::new();
    for pair in runs.windows(2) {
        let (first, reader) = (NodeId(pair[0]), NodeId(pair[1]));
        let same_device = matches!((&placements[pair[0]], &placements[pair[1]]), (Placement::Run { device: a, .. }, Placement::Run { device: b, .. }) if a == b && *a == registry.device());
        let taken = out.iter().any(|(a, b, _)| *a == first || *b == first);
        if !same_device || taken || uses[first.0] != 1 || !graph.node(reader).inputs.contains(&first) {
            continue;
        }
        if let Some(fusion) = registry.fuse(graph, first, reader) {
            out.push((first, reader, fusion));
        }
    }
    out
}

fn placement_str(p: &Placement) -> String {
    match p {
        Placement::Bound => "bound (external)".to_owned(),
        Placement::Elided => "elided (alias)".to_owned(),
        Placement::Skipped => "skipped (external window, bound from its tensor)".to_owned(),
        Placement::Run { device, kernel, fused: None } => format!("{}:{kernel}", device.name()),
        Placement::Run { device, kernel, fused: Some(reader) } => {
            format!("{}:{kernel} (with node {})", device.name(), reader.0)
        }
        Placement::Fused { into } => format!("fused into node {}", into.0),
        Placement::Refused => "refused (a transient window nobody fills)".to_owned(),
    }
}

/// The rule-4 message, in the engine's format.
fn refusal(graph: &Graph, import: &Import, id: NodeId) -> String {
    let node = graph.node(id);
    let v = &node.value;
    let input = node.inputs[0];
    let inputs =
        node.inputs.iter().map(|&i| format!("{}:{}", i.0, graph.value(i).shape_str())).collect::<Vec<_>>().join(",");
    let consumers = graph
        .consumers(id)
        .iter()
        .map(|&c| format!("{}:{}", c.0, graph.node(c).op.name()))
        .collect::<Vec<_>>()
        .join(",");
    let alias = match import.miss[id.0] {
        Some(m) => format!("not_aliasing_input({})", m.name()),
        None => "registered_transient".to_owned(),
    };
    let storage_id = |n: NodeId| import.storage_owner[n.0].map_or_else(|| external_root(graph, n).0, |o| o.0);
    let nb = v.nb.iter().map(usize::to_string).collect::<Vec<_>>().join(",");
    format!(
        "unsupported HRX node {}: {} output={}:{}<-{} inputs=[{inputs}] consumers=[{consumers}] alias={alias} storages=out{}/in{} nb=[{nb}] offs={} inputs={}",
        id.0,
        node.op.name(),
        id.0,
        v.shape_str(),
        node.op.name(),
        storage_id(id),
        storage_id(input),
        v.view_offset,
        node.inputs.len()
    )
}

/// The external leaf at the end of a layout chain.
fn external_root(graph: &Graph, mut id: NodeId) -> NodeId {
    while graph.node(id).op.is_layout() {
        id = graph.node(id).inputs[0];
    }
    id
}

/// Run-time length of every axis of value `id` given the symbol values.
pub fn runtime_ne(graph: &Graph, id: NodeId, symbols: &[usize]) -> [usize; MAX_DIMS] {
    let v = graph.value(id);
    let mut ne = v.ne;
    if let Some(d) = v.dyn_axis {
        let s = symbols.get(d.sym.0).copied().unwrap_or(0);
        ne[d.axis] = (s * d.num / d.den).min(v.ne[d.axis]);
    }
    ne
}

#[cfg(test)]
mod tests;
