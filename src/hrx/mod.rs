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

/// What the plan does with a node.
#[derive(Clone, Debug, PartialEq)]
pub enum Placement {
    /// An external input, bound from its tensor at run time.
    Bound,
    /// A layout op aliasing its input (rule 2).
    Elided,
    /// A layout window on external storage without an alias source (rule 3).
    Skipped,
    /// A compute node and the kernel that runs it.
    Run { device: Device, kernel: &'static str },
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

/// A backend's table of kernels: which compute nodes it can run.
pub trait Registry {
    fn device(&self) -> Device;
    /// The kernel for node `id`, or None to leave the node to the CPU.
    fn register(&self, graph: &Graph, id: NodeId) -> Option<&'static str>;
    /// Whether the backend may run node `id` and `reader`, the one node reading its value, as
    /// one kernel: the arena then keeps `id`'s inputs alive through `reader` (the fused
    /// kernel writes `reader`'s output while still reading them).
    fn fuses(&self, _graph: &Graph, _id: NodeId, _reader: NodeId) -> bool {
        false
    }
}

/// The CPU runs every compute op: the fallback that keeps every graph runnable.
pub struct CpuRegistry;

impl Registry for CpuRegistry {
    fn device(&self) -> Device {
        Device::Cpu
    }

    fn register(&self, graph: &Graph, id: NodeId) -> Option<&'static str> {
        let op = &graph.node(id).op;
        (!op.is_layout() && *op != Op::External).then(|| op.name())
    }
}

/// A plan refused under rule 4: a transient window nobody fills.
#[derive(Debug, Clone, PartialEq)]
pub struct PlanError(pub String);

impl fmt::Display for PlanError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
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
    /// (device, op) -> count, for compute nodes.
    pub by_op: BTreeMap<(String, String), usize>,
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
        let log = std::env::var("HRX_LOG_DISPATCH").is_ok_and(|v| v == "1");
        let mut placements = Vec::with_capacity(graph.nodes.len());
        for (i, node) in graph.nodes.iter().enumerate() {
            let id = NodeId(i);
            let placement = if node.op == Op::External {
                Placement::Bound
            } else if node.op.is_layout() {
                match (import.class[i], import.miss[i]) {
                    (Class::Alias, _) => Placement::Elided,
                    (Class::External, Some(AliasMiss::NoAliasSource)) => Placement::Skipped,
                    _ => return Err(PlanError(refusal(&graph, &import, id))),
                }
            } else {
                match registry.register(&graph, id) {
                    Some(kernel) => Placement::Run { device: registry.device(), kernel },
                    None => Placement::Run { device: Device::Cpu, kernel: node.op.name() },
                }
            };
            if log {
                eprintln!("hrx dispatch: graph {} node {i} {} {:?} -> {}", graph.name, node.op.name(), node.name, placement_str(&placement));
            }
            placements.push(placement);
        }
        let (locs, arena_bytes) = arena::assign(&graph, &import, &|id, reader| registry.fuses(&graph, id, reader));
        Ok(Plan { graph, import, placements, locs, arena_bytes })
    }

    pub fn census(&self) -> Census {
        let mut c = Census { nodes: self.graph.nodes.len(), ..Default::default() };
        for (node, p) in self.graph.nodes.iter().zip(&self.placements) {
            match p {
                Placement::Bound => c.bound += 1,
                Placement::Elided => c.elided += 1,
                Placement::Skipped => c.skipped += 1,
                Placement::Run { device, .. } => {
                    match device {
                        Device::Cpu => c.cpu_nodes += 1,
                        Device::Gpu => c.gpu_nodes += 1,
                    }
                    *c.by_op.entry((device.name().to_owned(), node.op.name().to_owned())).or_default() += 1;
                }
            }
        }
        c
    }
}

fn placement_str(p: &Placement) -> String {
    match p {
        Placement::Bound => "bound (external)".to_owned(),
        Placement::Elided => "elided (alias)".to_owned(),
        Placement::Skipped => "skipped (external window, bound from its tensor)".to_owned(),
        Placement::Run { device, kernel } => format!("{}:{kernel}", device.name()),
    }
}

/// The rule-4 message, in the engine's format.
fn refusal(graph: &Graph, import: &Import, id: NodeId) -> String {
    let node = graph.node(id);
    let v = &node.value;
    let input = node.inputs[0];
    let inputs = node.inputs.iter().map(|&i| format!("{}:{}", i.0, graph.value(i).shape_str())).collect::<Vec<_>>().join(",");
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
