//! The HRX dispatcher: imports a graph once, classifies every value, plans every node once.
//!
//! Import: each value is **External** (its storage root is not a node of this graph: weights,
//! inputs, caches, a value another graph made), **Transient** (produced by a node, lives in the
//! arena between its producer and last consumer) or **Alias** (a layout op whose window lies
//! inside its input's bytes: elided). A layout op that cannot alias records why (`AliasMiss`).
//!
//! Before placing, a transient value that only compute nodes read may be kept in halves where
//! the registry takes it so (`Registry::keeps_halves`): its dtype, and its views', become f16.
//!
//! Plan, node by node:
//! 1. a compute op gets a registration on the device, or is left to the CPU (a split): a node
//!    the CPU can run never fails the graph;
//! 2. a layout op aliases if it can (elided);
//! 3. a layout op whose output is External, recorded `NoAliasSource`, is skipped: it is bound
//!    from its tensor like any other external input;
//! 4. any other layout window is a Transient nobody fills: planning fails, naming the node.
//!    This is the only way a plan fails: it fails closed only on transient windows.
//!
//! The case that made rule 3: Qwen3-VL's text model takes a wide input embedding, `n_embd x
//! (1 + n_deepstack)` values a token: slice 0 the token's embedding (or the vision merger's
//! output), slice k the deepstack feature added after text layer k - 1. The text graph reads
//! each slice as a view of the wide tensor; made in another graph, that tensor is no value of
//! the text graph, so the views cannot alias it and are bound from it as external inputs. An
//! engine that registered such a window as a transient read bytes no node wrote; here it is
//! refused instead (`tests.rs` pins both).

mod arena;

use crate::graph::{ExternalId, Graph, NodeId, Op, MAX_DIMS};
use crate::quant::DType;
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
pub enum Where {
    Cpu,
    Gpu,
}

impl Where {
    pub fn name(&self) -> &'static str {
        match self {
            Where::Cpu => "cpu",
            Where::Gpu => "gpu",
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
    /// The dispatch's pipeline requires `subgroup` (with full subgroups): it runs at exactly
    /// that size, not at whatever the driver would pick (RDNA's wave64, say).
    pub subgroup_required: bool,
    /// The matrix-unit shape (M, N, K) a cooperative-matrix variant is built around (its
    /// tiles follow from it and the subgroup size).
    pub shape: Option<[u32; 3]>,
    /// Output row ranges `(first, count)` that each run as a dispatch of their own (a product
    /// whose weights are more than one dispatch can address); empty: one dispatch.
    pub splits: Vec<(usize, usize)>,
    /// The backend's own handle of the kernel, given by its registry and taken back as it is
    /// by its executor (the name is for people); the planner never reads it.
    pub handle: Option<u32>,
}

impl Kernel {
    /// A kernel of one dispatch without a subgroup variant.
    pub fn named(name: impl Into<String>) -> Kernel {
        Kernel {
            name: name.into(),
            subgroup: None,
            subgroup_required: false,
            shape: None,
            splits: Vec::new(),
            handle: None,
        }
    }

    /// The variant as plans show it: ` (subgroup 32 required)`, ` (subgroup 32 required,
    /// 16x16x16)`, ` (subgroup 8)` (the device's one size, not required), or nothing.
    pub fn variant(&self) -> String {
        let required = if self.subgroup_required { " required" } else { "" };
        match (self.subgroup, self.shape) {
            (Some(s), Some([m, n, k])) => format!(" (subgroup {s}{required}, {m}x{n}x{k})"),
            (Some(s), None) => format!(" (subgroup {s}{required})"),
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

/// The nodes one dispatch computes: `node`; `folded`, the producer of one of `node`'s inputs,
/// computed inside the dispatch from the producer's own inputs instead of read (a norm or an
/// activation done on the fly as a product loads its input); `fused`, the one reader of
/// `node`'s value, whose output the dispatch writes (a residual ADD done in the store).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Group {
    pub node: NodeId,
    pub folded: Option<NodeId>,
    pub fused: Option<NodeId>,
}

impl Group {
    pub fn single(node: NodeId) -> Group {
        Group { node, folded: None, fused: None }
    }

    /// The values the dispatch reads, in the order kernels take them: `node`'s inputs (the
    /// folded producer's value replaced by the producer's first input), then the fused
    /// reader's inputs other than `node`'s value (read as it is or reshaped) and the storage it
    /// writes into (a SET_ROWS's destination: the output's own bytes), then the folded
    /// producer's other inputs.
    pub fn inputs(&self, graph: &Graph) -> Vec<NodeId> {
        let folded = self.folded.map(|f| &graph.node(f).inputs);
        let mut ins: Vec<NodeId> = graph
            .node(self.node)
            .inputs
            .iter()
            .map(|&i| match folded {
                Some(f_ins) if Some(i) == self.folded => f_ins[0],
                _ => i,
            })
            .collect();
        if let Some(r) = self.fused {
            let reader = graph.node(r);
            let dst = reader.op.writes_into().and_then(|i| reader.inputs.get(i).copied());
            ins.extend(reader.inputs.iter().filter(|&&i| graph.reshaped_from(i) != self.node && Some(i) != dst));
        }
        if let Some(f) = folded {
            ins.extend(f.iter().skip(1));
        }
        ins
    }

    /// The value the dispatch writes.
    pub fn output(&self) -> NodeId {
        self.fused.unwrap_or(self.node)
    }

    /// Its ops in dataflow order, `RMS_NORM+MUL_MAT+ADD`.
    pub fn ops(&self, graph: &Graph) -> String {
        let nodes = self.folded.into_iter().chain([self.node]).chain(self.fused);
        nodes.map(|n| graph.node(n).op.name()).collect::<Vec<_>>().join("+")
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
    /// A compute node and the kernel that runs it: a dispatch computing `group` (this node,
    /// perhaps with a folded producer and a fused reader).
    Run { device: Where, kernel: Kernel, group: Group },
    /// A compute node whose output the dispatch of node `into` writes (its fused reader).
    Fused { into: NodeId },
    /// A compute node computed inside the dispatch of each of its readers `into`, from its own
    /// inputs; nothing writes its value.
    Folded { into: Vec<NodeId> },
    /// A transient window nobody fills (rule 4): the plan fails, naming it.
    Refused,
}

/// How a backend runs a group of nodes as one dispatch.
#[derive(Clone, Debug, PartialEq)]
pub struct Fusion {
    pub kernel: Kernel,
    /// For a fused reader: the arena keeps the node's inputs alive through the reader, so the
    /// pair always fuses. Otherwise it fuses only where the arena happens to place the reader's
    /// output clear of the node's inputs (keeping every input alive may cost too much memory).
    /// A folded producer's inputs are always kept alive through its last reader.
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
    fn device(&self) -> Where;
    /// The kernel for node `id`, or None to leave the node to the CPU.
    fn kernel(&self, graph: &Graph, id: NodeId) -> Option<Kernel>;
    /// The dispatch computing `group` (a node with a folded producer or a fused reader, or
    /// both; the dispatch binds `Group::inputs` and writes `Group::output`), where the backend
    /// has one. The planner asks for a fused reader only when it is dispatched right after the
    /// node and is the one reader of its value, and folds a producer into every reader or none.
    fn group(&self, _graph: &Graph, _group: Group) -> Option<Fusion> {
        None
    }
    /// The most bytes one value may span where the backend binds each value as one window
    /// (a GPU's storage-buffer range, less the offset alignment), or None without such a limit.
    fn max_value_bytes(&self) -> Option<usize> {
        None
    }
    /// The element type the backend's kernels keep caches of rows in (a model's KV cache):
    /// f32, or f16 where they write and read rows as halves.
    fn cache_dtype(&self) -> DType {
        DType::F32
    }
    /// Whether the backend keeps value `id` in halves: `graph` holds it (and its views) as
    /// f16, and the backend's kernels for `id` and for each of `readers` (every compute node
    /// reading it, directly or through views) take it so, at no loss to the readers' results
    /// (they round it to f16 themselves otherwise). The planner asks for transient f32 values of
    /// compute nodes that no graph output or external storage holds.
    fn keeps_halves(&self, _graph: &Graph, _id: NodeId, _readers: &[NodeId]) -> bool {
        false
    }
}

/// The CPU runs every compute op: the fallback that keeps every graph runnable.
pub struct CpuRegistry;

impl Registry for CpuRegistry {
    fn device(&self) -> Where {
        Where::Cpu
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
    pub by_op: BTreeMap<(Where, &'static str), usize>,
    /// (device, kernel) -> dispatches; a variant built around a subgroup size (and a
    /// matrix-unit shape) shows it (`mul_mat_vec_sg_q4_k (subgroup 32 required)`,
    /// `mul_mat_cm_q4_k (subgroup 32 required, 16x16x16)`), a fused pair its ops (`... (MUL_MAT+ADD)`).
    pub by_kernel: BTreeMap<(Where, String), usize>,
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
        let mut graph = graph;
        keep_halves(&mut graph, &import, registry);
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
                let group = Group::single(id);
                match registry.kernel(&graph, id) {
                    Some(kernel) => Placement::Run { device: registry.device(), kernel, group },
                    None => Placement::Run { device: Where::Cpu, kernel: Kernel::named(node.op.name()), group },
                }
            };
            placements.push(placement);
        }
        let folds = fold_producers(&graph, &mut placements, registry);
        let fusions = candidate_fusions(&graph, &placements, registry);
        // A dispatch reads the inputs of every node it computes while it writes its output: those
        // inputs stay alive through it (a folded producer's through its last reader, a fused
        // pair's through the reader where it reserves).
        let mut keep_alive: Vec<(NodeId, usize)> = Vec::new();
        for &(producer, last) in &folds {
            keep_alive.extend(graph.node(producer).inputs.iter().map(|&i| (i, last.0)));
        }
        for (first, reader, _) in fusions.iter().filter(|(_, _, f)| f.reserve) {
            let Placement::Run { group, .. } = &placements[first.0] else { continue };
            keep_alive.extend(group.inputs(&graph).into_iter().map(|i| (i, reader.0)));
        }
        let (locs, arena_bytes) = arena::assign(&graph, &import, &keep_alive);
        let mut plan = Plan { graph, import, placements, locs, arena_bytes };
        for (first, reader, fusion) in fusions {
            let Placement::Run { group, .. } = &plan.placements[first.0] else { continue };
            let group = Group { fused: Some(reader), ..*group };
            // The fused dispatch writes the reader's output while the nodes' inputs are still
            // read: never onto their bytes.
            if plan.output_clear_of_inputs(group) {
                if let Placement::Run { kernel, group: g, .. } = &mut plan.placements[first.0] {
                    *kernel = fusion.kernel;
                    *g = group;
                }
                plan.placements[reader.0] = Placement::Fused { into: first };
            }
        }
        if !refusals.is_empty() {
            return Err(PlanError { graph: plan.graph.name.clone(), refusals, census: Box::new(plan.census()) });
        }
        Ok(plan)
    }

    /// Where each node went, a line a node: what `HRX_LOG_DISPATCH=1` has the runtime print.
    pub fn dispatch_log(&self) -> Vec<String> {
        let graph = &self.graph;
        graph
            .nodes
            .iter()
            .zip(&self.placements)
            .enumerate()
            .map(|(i, (node, p))| {
                format!(
                    "hrx dispatch: graph {} node {i} {} {:?} -> {}",
                    graph.name,
                    node.op.name(),
                    node.name,
                    placement_str(p)
                )
            })
            .collect()
    }

    pub fn census(&self) -> Census {
        let mut c = Census { nodes: self.graph.nodes.len(), ..Default::default() };
        for (node, p) in self.graph.nodes.iter().zip(&self.placements) {
            match p {
                Placement::Bound => c.bound += 1,
                Placement::Elided => c.elided += 1,
                Placement::Skipped => c.skipped += 1,
                Placement::Refused => c.refused += 1,
                Placement::Fused { .. } | Placement::Folded { .. } => c.fused += 1,
                Placement::Run { device, kernel, group } => {
                    c.dispatches += kernel.dispatches();
                    let variant = kernel.variant();
                    let name = match group.folded.or(group.fused) {
                        Some(_) => format!("{}{variant} ({})", kernel.name, group.ops(&self.graph)),
                        None => format!("{}{variant}", kernel.name),
                    };
                    *c.by_kernel.entry((device.clone(), name)).or_default() += kernel.dispatches();
                }
            }
            // A fused or folded node runs on its dispatch's device.
            let device = match p {
                Placement::Fused { into } => self.device_of(*into),
                Placement::Folded { into } => into.first().and_then(|&r| self.device_of(r)),
                Placement::Run { device, .. } => Some(device),
                _ => None,
            };
            if let Some(device) = device {
                match device {
                    Where::Cpu => c.cpu_nodes += 1,
                    Where::Gpu => c.gpu_nodes += 1,
                }
                *c.by_op.entry((device.clone(), node.op.name())).or_default() += 1;
            }
        }
        c
    }

    /// The device of node `id`'s dispatch, where it runs one.
    fn device_of(&self, id: NodeId) -> Option<&Where> {
        match &self.placements[id.0] {
            Placement::Run { device, .. } => Some(device),
            _ => None,
        }
    }

    /// Whether the output of a dispatch computing `group` shares no bytes with the values it
    /// reads (it writes while other workgroups still read them).
    fn output_clear_of_inputs(&self, group: Group) -> bool {
        group.inputs(&self.graph).into_iter().all(|input| !self.may_overlap(input, group.output()))
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

/// Values the registry keeps in halves (`Registry::keeps_halves`): a transient f32 value of a
/// compute node, read only by compute nodes (directly or through views that alias it), none of
/// it a graph output, becomes f16 (its views too: byte strides and offsets halved) where the
/// registry takes it so; as it was where not. Its bytes halve, and so do its readers' loads.
fn keep_halves(graph: &mut Graph, import: &Import, registry: &dyn Registry) {
    let n = graph.nodes.len();
    let mut readers: Vec<Vec<NodeId>> = vec![Vec::new(); n];
    for (i, node) in graph.nodes.iter().enumerate() {
        for input in &node.inputs {
            readers[input.0].push(NodeId(i));
        }
    }
    for p in 0..n {
        let node = &graph.nodes[p];
        let candidate = import.class[p] == Class::Transient
            && !node.op.is_layout()
            && node.op != Op::External
            && node.value.external.is_none()
            && node.value.dtype == DType::F32
            && !graph.outputs.contains(&NodeId(p));
        if !candidate {
            continue;
        }
        // Its views (aliases of its bytes) and the compute nodes that read it or them.
        let (mut views, mut computes, mut todo) = (Vec::new(), Vec::new(), vec![NodeId(p)]);
        let mut plain = true;
        while let Some(v) = todo.pop() {
            for &r in &readers[v.0] {
                if !graph.node(r).op.is_layout() {
                    computes.push(r);
                } else if import.class[r.0] == Class::Alias && !graph.outputs.contains(&r) {
                    views.push(r);
                    todo.push(r);
                } else {
                    plain = false;
                }
            }
        }
        computes.sort();
        computes.dedup();
        if !plain || computes.is_empty() {
            continue;
        }
        let held: Vec<NodeId> = std::iter::once(NodeId(p)).chain(views).collect();
        let saved: Vec<_> = held.iter().map(|&i| graph.node(i).value.clone()).collect();
        for &i in &held {
            let v = &mut graph.nodes[i.0].value;
            v.dtype = DType::F16;
            v.nb = v.nb.map(|b| b / 2);
            v.view_offset /= 2;
        }
        if !registry.keeps_halves(graph, NodeId(p), &computes) {
            for (&i, v) in held.iter().zip(saved) {
                graph.nodes[i.0].value = v;
            }
        }
    }
}

/// Folds producers into their readers where the registry has kernels for every reader:
/// each reader's dispatch computes the producer's value from the producer's inputs. A graph
/// output is never folded (nothing would write it). Returns each folded producer with its last
/// reader (its inputs must live until then).
fn fold_producers(graph: &Graph, placements: &mut [Placement], registry: &dyn Registry) -> Vec<(NodeId, NodeId)> {
    let mut readers: Vec<Vec<NodeId>> = vec![Vec::new(); graph.nodes.len()];
    for (i, node) in graph.nodes.iter().enumerate() {
        for input in &node.inputs {
            readers[input.0].push(NodeId(i));
        }
    }
    let on_device = |p: &Placement| matches!(p, Placement::Run { device, .. } if *device == registry.device());
    let mut folds = Vec::new();
    for p in 0..graph.nodes.len() {
        let producer = NodeId(p);
        let rs = &readers[p];
        let foldable = on_device(&placements[p])
            && !rs.is_empty()
            && !graph.outputs.contains(&producer)
            && rs.iter().all(|r| {
                matches!(&placements[r.0], Placement::Run { group, .. } if on_device(&placements[r.0]) && group.folded.is_none())
                    && graph.node(*r).inputs.iter().filter(|&&i| i == producer).count() == 1
            });
        if !foldable {
            continue;
        }
        let kernels: Option<Vec<Kernel>> = rs
            .iter()
            .map(|&r| registry.group(graph, Group { folded: Some(producer), ..Group::single(r) }).map(|f| f.kernel))
            .collect();
        let Some(kernels) = kernels else { continue };
        for (&r, k) in rs.iter().zip(kernels) {
            if let Placement::Run { kernel, group, .. } = &mut placements[r.0] {
                *kernel = k;
                group.folded = Some(producer);
            }
        }
        placements[p] = Placement::Folded { into: rs.clone() };
        folds.push((producer, *rs.iter().max_by_key(|r| r.0).unwrap_or(&producer)));
    }
    folds
}

/// The pairs the registry fuses: a compute node whose value has one use, read by the next
/// compute node placed on the same device (its folded producer, if any, stays with it).
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
        let (Placement::Run { device: a, group, .. }, Placement::Run { device: b, group: reader_group, .. }) =
            (&placements[pair[0]], &placements[pair[1]])
        else {
            continue;
        };
        let taken = out.iter().any(|(a, b, _)| *a == first || *b == first);
        if a != b || *a != registry.device() || reader_group.folded.is_some() || taken {
            continue;
        }
        if uses[first.0] != 1 || !reads_once(graph, &uses, reader, first) {
            continue;
        }
        if let Some(fusion) = registry.group(graph, Group { fused: Some(reader), ..*group }) {
            out.push((first, reader, fusion));
        }
    }
    out
}

/// Whether `reader` reads `value` once: directly, or through RESHAPEs nothing else reads (a
/// fused dispatch computes `value` and writes the reader's output; the reshapes are elided).
fn reads_once(graph: &Graph, uses: &[usize], reader: NodeId, value: NodeId) -> bool {
    let mut reads = graph.node(reader).inputs.iter().filter(|&&i| graph.reshaped_from(i) == value);
    let (Some(&read), None) = (reads.next(), reads.next()) else { return false };
    let mut id = read;
    while id != value {
        if uses[id.0] != 1 {
            return false;
        }
        id = graph.node(id).inputs[0];
    }
    true
}

fn placement_str(p: &Placement) -> String {
    match p {
        Placement::Bound => "bound (external)".to_owned(),
        Placement::Elided => "elided (alias)".to_owned(),
        Placement::Skipped => "skipped (external window, bound from its tensor)".to_owned(),
        Placement::Run { device, kernel, group } if group.folded.is_none() && group.fused.is_none() => {
            format!("{}:{kernel}", device.name())
        }
        Placement::Run { device, kernel, group } => {
            let with = group.folded.into_iter().chain(group.fused).map(|n| n.0.to_string()).collect::<Vec<_>>();
            format!("{}:{kernel} (with node {})", device.name(), with.join(" and "))
        }
        Placement::Fused { into } => format!("fused into node {}", into.0),
        Placement::Folded { into } => {
            format!("folded into nodes {}", into.iter().map(|n| n.0.to_string()).collect::<Vec<_>>().join(", "))
        }
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
    let storage_id = |n: NodeId| import.storage_owner[n.0].map_or_else(|| graph.layout_root(n).0, |o| o.0);
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
