//! From graphs to an executor, the one way both the text model and the vision encoder load:
//! plan every graph once for the backend, fall back to the CPU when a Vulkan plan leaves a node
//! to it (mixed plans are not executed), bind the weights.

use super::RuntimeError;
use crate::backend::cpu::Kernels;
use crate::backend::{Backend, Executor};
use crate::gguf::GgufFile;
use crate::graph::Graph;
use crate::hrx::{Plan, Registry};
use crate::quant::DType;
use std::sync::Arc;

/// Plans each of `graphs` for `registry` (a plan per graph, in order).
pub fn plan_all<'a>(
    graphs: impl IntoIterator<Item = &'a Graph>,
    registry: &dyn Registry,
) -> Result<Vec<Plan>, RuntimeError> {
    Ok(graphs.into_iter().map(|g| Plan::new(g.clone(), registry)).collect::<Result<Vec<_>, _>>()?)
}

/// An executor of the graphs `build` makes for a backend's cache element type
/// (`Registry::cache_dtype`; plan `PlanId(i)` is graph i) with weights bound from `files`, the
/// backend it runs on and the graphs: `backend`, or the CPU (with a warning naming the node,
/// the graphs built again for its caches) when a Vulkan plan leaves a node to it (no kernel for
/// an op or weight type).
pub fn load<G: AsRef<Graph>>(
    build: impl Fn(DType) -> Result<Vec<G>, RuntimeError>,
    backend: &Backend,
    files: &[Arc<GgufFile>],
) -> Result<(Backend, Executor, Vec<G>), RuntimeError> {
    let t0 = std::time::Instant::now();
    let registry = backend.registry();
    let graphs = build(registry.cache_dtype())?;
    let plans = plan_all(graphs.iter().map(AsRef::as_ref), &*registry)?;
    log::debug!("{} graphs planned in {:.3} s", graphs.len(), t0.elapsed().as_secs_f64());
    let (backend, plans, graphs) = match backend.cpu_node(&plans) {
        None => (backend.clone(), plans, graphs),
        Some(node) => {
            log::warn!("{node} has no Vulkan kernel; running on the CPU");
            let cpu = Backend::Cpu(Kernels::from_env());
            let registry = cpu.registry();
            let graphs = build(registry.cache_dtype())?;
            let plans = plan_all(graphs.iter().map(AsRef::as_ref), &*registry)?;
            (cpu, plans, graphs)
        }
    };
    let t0 = std::time::Instant::now();
    let exec = backend.executor(plans, files)?;
    // Weight uploads, pipelines and recordings: the rest of a cold start.
    log::debug!("executor built in {:.3} s", t0.elapsed().as_secs_f64());
    Ok((backend, exec, graphs))
}
