//! From graphs to an executor, the one way both the text model and the vision encoder load:
//! plan every graph once for the backend; on a Vulkan device, run hrx's self-check of what the
//! plans dispatch there and plan again without what failed (`settle`); fall back to the CPU when
//! a Vulkan plan leaves a node to it (mixed plans are not executed); bind the weights.

use super::RuntimeError;
use crate::backend::cpu::Kernels;
use crate::backend::vulkan::kernels::KernelSet;
use crate::backend::vulkan::selfcheck::{self, Report, Verdict};
use crate::backend::vulkan::Device;
use crate::backend::{Backend, ExecError, Executor};
use crate::dispatcher::{Plan, Registry};
use crate::gguf::GgufFile;
use crate::graph::Graph;
use crate::quant::DType;
use crate::settings::{self, settings};
use std::sync::Arc;

/// Plans each of `graphs` for `registry` (a plan per graph, in order).
pub fn plan_all<'a>(
    graphs: impl IntoIterator<Item = &'a Graph>,
    registry: &dyn Registry,
) -> Result<Vec<Plan>, RuntimeError> {
    graphs.into_iter().map(|g| plan(g.clone(), registry)).collect()
}

/// `graph`'s plan for `registry`, each node's placement on standard error under
/// `HRX_LOG_DISPATCH=1`.
pub fn plan(graph: Graph, registry: &dyn Registry) -> Result<Plan, RuntimeError> {
    let plan = Plan::new(graph, registry)?;
    if settings().switch(&settings::LOG_DISPATCH) {
        for line in plan.dispatch_log() {
            eprintln!("{line}");
        }
    }
    Ok(plan)
}

/// An executor of the graphs `build` makes for a backend's cache element type
/// (`Registry::cache_dtype`; plan `PlanId(i)` is graph i) with weights bound from `files`, the
/// backend it runs on and the graphs: `backend`, or the CPU (with a warning naming the node,
/// the graphs built again for its caches) when a Vulkan plan leaves a node to it (no kernel for
/// an op or weight type, or none that passed the self-check there).
pub fn load<G: AsRef<Graph>>(
    build: impl Fn(DType) -> Result<Vec<G>, RuntimeError>,
    backend: &Backend,
    files: &[Arc<GgufFile>],
) -> Result<(Backend, Executor, Vec<G>), RuntimeError> {
    let t0 = std::time::Instant::now();
    let plan = || -> Result<_, RuntimeError> {
        let registry = backend.registry();
        let graphs = build(registry.cache_dtype())?;
        let plans = plan_all(graphs.iter().map(AsRef::as_ref), &*registry)?;
        Ok((graphs, plans))
    };
    let (graphs, plans) = match backend {
        Backend::Vulkan(device) if device.checks_kernels() => {
            let (graphs, plans, _) = settle(device, plan)?;
            (graphs, plans)
        }
        _ => plan()?,
    };
    log::debug!("{} graphs planned in {:.3} s", graphs.len(), t0.elapsed().as_secs_f64());
    let (backend, plans, graphs) = match backend.cpu_node(&plans) {
        None => (backend.clone(), plans, graphs),
        Some(node) => {
            match backend {
                Backend::Vulkan(d) if !d.check_failures().is_empty() => log::warn!(
                    "{node} has no Vulkan kernel that passed hrx's self-check on {} (driver {}): {}; running on the CPU",
                    d.info().name,
                    d.info().driver(),
                    d.check_failures().join("; ")
                ),
                _ => log::warn!("{node} has no Vulkan kernel; running on the CPU"),
            }
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

/// Rounds of checking and planning again at most: each leaves out a kernel that failed, so a
/// model's plans settle in a few (one, where everything passes).
const MAX_CHECK_ROUNDS: usize = 16;

/// Plans with `plan` (its graphs, or whatever goes with the plans, and the plans) until hrx's
/// self-check on `device` finds nothing broken in them: each round checks what the plans
/// dispatch that the device's record does not hold, and plans again without what failed. The
/// plans, and each round's report.
pub fn settle<T>(
    device: &Device,
    plan: impl Fn() -> Result<(T, Vec<Plan>), RuntimeError>,
) -> Result<(T, Vec<Plan>, Vec<Report>), RuntimeError> {
    let ks = KernelSet::new(device);
    let mut reports = Vec::new();
    let (mut made, mut plans) = plan()?;
    for _ in 0..MAX_CHECK_ROUNDS {
        let t0 = std::time::Instant::now();
        let report = selfcheck::check(device, &ks, &plans).map_err(ExecError::from)?;
        let failed = report.failed();
        if !report.checked.is_empty() {
            let n = report.checked.iter().filter(|c| matches!(c.verdict, Verdict::Failed { .. })).count();
            log::info!(
                "hrx's self-check on {}: {} checks, {n} failed, in {:.2} s",
                device.info().name,
                report.checked.len(),
                t0.elapsed().as_secs_f64()
            );
        }
        reports.push(report);
        if !failed {
            break;
        }
        (made, plans) = plan()?;
    }
    Ok((made, plans, reports))
}
