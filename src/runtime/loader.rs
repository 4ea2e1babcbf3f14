//! From graphs to an executor, the one way both the text model and the vision encoder load:
//! plan every graph once for the backend, fall back to the CPU when a Vulkan plan leaves a node
//! to it (mixed plans are not executed), bind the weights.

use super::RuntimeError;
use crate::backend::cpu::Kernels;
use crate::backend::{Backend, Executor};
use crate::gguf::GgufFile;
use crate::graph::Graph;
use crate::hrx::{Plan, Registry};
use std::sync::Arc;

/// Plans each of `graphs` for `registry` (a plan per graph, in order).
pub fn plan_all(graphs: &[Graph], registry: &dyn Registry) -> Result<Vec<Plan>, RuntimeError> {
    Ok(graphs.iter().map(|g| Plan::new(g.clone(), registry)).collect::<Result<Vec<_>, _>>()?)
}

/// An executor of `graphs` (plan `PlanId(i)` is graph i) with weights bound from `files`, and
/// the backend it runs on: `backend`, or the CPU (with a warning naming the node) when a
/// Vulkan plan leaves a node to the CPU (no kernel for an op or weight type).
pub fn load(graphs: &[Graph], backend: &Backend, files: &[Arc<GgufFile>]) -> Result<(Backend, Executor), RuntimeError> {
    let t0 = std::time::Instant::now();
    let plans = plan_all(graphs, &*backend.registry())?;
    log::debug!("{} graphs planned in {:.3} s", graphs.len(), t0.elapsed().as_secs_f64());
    let (backend, plans) = match backend.cpu_node(&plans) {
        None => (backend.clone(), plans),
        Some(node) => {
            log::warn!("{node} has no Vulkan kernel; running on the CPU");
            let cpu = Backend::Cpu(Kernels::from_env());
            let plans = plan_all(graphs, &*cpu.registry())?;
            (cpu, plans)
        }
    };
    let t0 = std::time::Instant::now();
    let exec = backend.executor(plans, files)?;
    // Weight uploads, pipelines and recordings: the rest of a cold start.
    log::debug!("executor built in {:.3} s", t0.elapsed().as_secs_f64());
    Ok((backend, exec))
}
