//! Executors of a plan. Kernels know nothing of the model.
//!
//! [`Backend`] is where a model runs: the CPU (reference or fast kernels) or a Vulkan device.
//! [`DeviceChoice`] is how a user picks it (`--device N|cpu|auto`, `HRX_DEVICE`), resolved in
//! one place for every command, and [`Executor`] is the one interface the runtime drives
//! either executor through: fill named run-time buffers, run a plan with its symbols, read
//! values back. The two backends know nothing of each other or of the model.
//!
//! Choice `auto` (the default) takes the best Vulkan device when it is a GPU; on a machine
//! whose only Vulkan device is a CPU implementation (Mesa's lavapipe) it keeps the CPU
//! backend, which is faster there: lavapipe runs when asked for by index. Without a loader or
//! device hrx runs on the CPU (said at info level: `hrx doctor` is where it is news); a device
//! that was named or found and does not open is a warning, and a CPU run.

pub mod cpu;
pub mod vulkan;

use crate::dispatcher::{CpuRegistry, Placement, Plan, Registry};
use crate::gguf::GgufFile;
use crate::graph::NodeId;
use cpu::{CpuExecutor, KernelError, Kernels};
use std::fmt;
use std::sync::Arc;
use vulkan::{DeviceKind, VkError, VulkanExecutor, VulkanRegistry};

/// The file and tensor index a graph's weight `ext` binds to, checked for dtype and size; the
/// error says what is wrong (both executors bind weights through this).
pub fn find_weight<'f>(
    ext: &crate::graph::External,
    files: &'f [Arc<GgufFile>],
) -> Result<(&'f Arc<GgufFile>, usize), String> {
    let found = files.iter().find_map(|f| f.tensors().iter().position(|t| t.name == ext.name).map(|i| (f, i)));
    let Some((file, i)) = found else {
        return Err(format!("weight {:?} is in none of the model files", ext.name));
    };
    let t = &file.tensors()[i];
    if t.dtype != ext.dtype || t.n_bytes as usize != ext.bytes {
        return Err(format!(
            "{}: tensor {:?} is {} ({} bytes), the graph expects {} ({} bytes)",
            file.path().display(),
            ext.name,
            t.dtype,
            t.n_bytes,
            ext.dtype,
            ext.bytes
        ));
    }
    Ok((file, i))
}

/// Which plan of an executor (both executors hold several plans sharing buffers by name).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PlanId(pub usize);

/// Which backend the user asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeviceChoice {
    /// The best Vulkan GPU, else the CPU.
    Auto,
    /// The CPU backend.
    Cpu,
    /// Vulkan device N (`hrx doctor` lists them), whatever its kind, and who named it (a
    /// device that does not open is blamed on that).
    Vulkan(usize, ChosenBy),
}

/// Where a device choice was written: a command's `--device` or `HRX_DEVICE`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChosenBy {
    Flag,
    Env,
}

impl fmt::Display for ChosenBy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ChosenBy::Flag => "--device",
            ChosenBy::Env => "HRX_DEVICE",
        })
    }
}

impl DeviceChoice {
    /// `auto` (or empty), `cpu`, or a device index, written in `by`; errors name `by`.
    fn parse(value: &str, by: ChosenBy) -> Result<DeviceChoice, String> {
        match value.trim() {
            "" | "auto" => Ok(DeviceChoice::Auto),
            "cpu" => Ok(DeviceChoice::Cpu),
            v => v.parse().map(|i| DeviceChoice::Vulkan(i, by)).map_err(|_| {
                format!("{by}: device {value:?}: expected a Vulkan device index (see `hrx doctor`), `cpu` or `auto`")
            }),
        }
    }

    /// The choice in force: `flag` (a command's `--device`) when given, else `HRX_DEVICE`,
    /// else `auto`. The one place `HRX_DEVICE` is read: every command, `hrx doctor`'s
    /// "hrx uses" line and the tests resolve the device through it.
    pub fn resolve(flag: Option<&str>) -> Result<DeviceChoice, String> {
        match (flag, crate::settings::settings().text(&crate::settings::DEVICE)) {
            (Some(v), _) => DeviceChoice::parse(v, ChosenBy::Flag),
            (None, Some(v)) => DeviceChoice::parse(v, ChosenBy::Env),
            (None, None) => Ok(DeviceChoice::Auto),
        }
    }

    /// Which of `devices` (as the loader lists them) a run under this choice uses: its
    /// position there, or None for the CPU backend. `auto` takes the best device
    /// (`vulkan::pick`) unless it is a CPU implementation such as lavapipe, where hrx's own CPU
    /// backend is faster (lavapipe runs when named by index).
    pub fn pick(self, devices: &[vulkan::DeviceInfo]) -> Result<Option<usize>, VkError> {
        match self {
            DeviceChoice::Cpu => Ok(None),
            DeviceChoice::Auto => {
                let best = vulkan::pick(devices, &vulkan::Selection::Best)?;
                Ok((devices[best].kind != DeviceKind::Cpu).then_some(best))
            }
            DeviceChoice::Vulkan(i, _) => vulkan::pick(devices, &vulkan::Selection::Index(i)).map(Some),
        }
    }
}

/// Where plans run.
#[derive(Clone)]
pub enum Backend {
    Cpu(Kernels),
    Vulkan(vulkan::Device),
}

impl Backend {
    /// Opens the backend `choice` names, with hrx's self-check of its kernels before a model
    /// first runs there or not (`check`); never fails: without a usable Vulkan device it
    /// returns the CPU backend with `kernels`. A device that was named and does not open is
    /// a warning that blames `--device` or `HRX_DEVICE`; under `auto`, a machine without a
    /// Vulkan loader or device is no news (logged at info level: `hrx doctor` says it), one
    /// whose device fails to open is a warning.
    pub fn open(choice: DeviceChoice, kernels: Kernels, check: bool) -> Backend {
        if choice == DeviceChoice::Cpu {
            return Backend::Cpu(kernels);
        }
        let t0 = std::time::Instant::now();
        let opened = vulkan::Instance::new().and_then(|instance| {
            let devices = instance.devices()?;
            log::debug!("vulkan instance made, {} devices found, in {:.3} s", devices.len(), t0.elapsed().as_secs_f64());
            match choice.pick(&devices)? {
                Some(i) => {
                    let t0 = std::time::Instant::now();
                    let options = vulkan::DeviceOptions { self_check: check, ..vulkan::DeviceOptions::from_env() };
                    let device = vulkan::Device::open(instance, devices[i].clone(), &options);
                    log::debug!("vulkan device opened in {:.3} s", t0.elapsed().as_secs_f64());
                    device.map(Some)
                }
                None => {
                    log::info!("the only Vulkan device is a CPU implementation; hrx's CPU backend is faster (--device N runs on it)");
                    Ok(None)
                }
            }
        });
        match (opened, choice) {
            (Ok(Some(d)), _) => return Backend::Vulkan(d),
            (Ok(None), _) => {}
            (Err(e), DeviceChoice::Vulkan(i, by)) => log::warn!("{by} {i}: {e}; running on the CPU"),
            (Err(e @ (VkError::NoLoader(_) | VkError::NoDevice)), _) => log::info!("{e}; running on the CPU"),
            (Err(e), _) => log::warn!("no usable Vulkan device ({e}); running on the CPU"),
        }
        Backend::Cpu(kernels)
    }

    /// The kernel table plans are made with.
    pub fn registry(&self) -> Box<dyn Registry> {
        match self {
            Backend::Cpu(_) => Box::new(CpuRegistry),
            Backend::Vulkan(d) => Box::new(VulkanRegistry::with_variants(d.info(), d.variants())),
        }
    }

    /// The first node of `plans` this backend would leave to the CPU, described for a warning
    /// (a Vulkan plan with such a node is not executed: the runtime re-plans for the CPU).
    pub fn cpu_node(&self, plans: &[Plan]) -> Option<String> {
        if let Backend::Cpu(_) = self {
            return None;
        }
        plans.iter().find_map(|plan| {
            let i = plan
                .placements
                .iter()
                .position(|p| matches!(p, Placement::Run { device: crate::dispatcher::Where::Cpu, .. }))?;
            let node = &plan.graph.nodes[i];
            let ins: Vec<String> = node.inputs.iter().map(|&id| plan.graph.value(id).shape_str()).collect();
            Some(format!(
                "graph {} node {i} ({}, {} of {})",
                plan.graph.name,
                node.name,
                node.op.name(),
                ins.join(", ")
            ))
        })
    }

    /// An executor of `plans` (planned with `registry()`), weights bound from `files`.
    pub fn executor(&self, plans: Vec<Plan>, files: &[Arc<GgufFile>]) -> Result<Executor, ExecError> {
        Ok(match self {
            Backend::Cpu(k) => Executor::Cpu(CpuExecutor::new(plans, files, *k)?),
            Backend::Vulkan(d) => Executor::Vulkan(VulkanExecutor::new(d, plans, files)?),
        })
    }

    /// Bytes of memory plans and weights may take: the device's local memory, or on the CPU
    /// what the system has available (`MemAvailable` of /proc/meminfo; None where unknown).
    pub fn memory_bytes(&self) -> Option<u64> {
        match self {
            Backend::Vulkan(d) => Some(d.info().device_local_bytes()).filter(|&b| b > 0),
            Backend::Cpu(_) => {
                let info = std::fs::read_to_string("/proc/meminfo").ok()?;
                let line = info.lines().find_map(|l| l.strip_prefix("MemAvailable:"))?;
                let kib: u64 = line.trim().trim_end_matches("kB").trim().parse().ok()?;
                kib.checked_mul(1024)
            }
        }
    }

    /// Whether its device was lost or hung (a Vulkan device that fails every submission now);
    /// never for the CPU.
    pub fn lost(&self) -> bool {
        match self {
            Backend::Vulkan(d) => d.is_lost(),
            Backend::Cpu(_) => false,
        }
    }

    /// Saves what outlives the process (the Vulkan pipeline cache), as closing the device
    /// would: for a process about to end without closing it.
    pub fn save_caches(&self) {
        if let Backend::Vulkan(d) = self {
            d.save_pipeline_cache();
        }
    }

    /// For logs and reports: `cpu (fast kernels)`, `vulkan: NVIDIA H200 (discrete)`.
    pub fn describe(&self) -> String {
        match self {
            Backend::Cpu(k) => format!("cpu ({} kernels)", format!("{k:?}").to_lowercase()),
            Backend::Vulkan(d) => format!("vulkan: {} ({})", d.info().name, d.info().kind.name()),
        }
    }
}

/// A failure of either executor, or a named buffer a plan does not have.
#[derive(Debug, Clone, PartialEq)]
pub enum ExecError {
    Cpu(KernelError),
    Vulkan(VkError),
    NoBuffer(String),
}

impl fmt::Display for ExecError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ExecError::Cpu(e) => write!(f, "{e}"),
            ExecError::Vulkan(e) => write!(f, "vulkan: {e}"),
            ExecError::NoBuffer(name) => write!(f, "the plan has no buffer {name:?} of that type and size"),
        }
    }
}

impl std::error::Error for ExecError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ExecError::Cpu(e) => Some(e),
            ExecError::Vulkan(e) => Some(e),
            ExecError::NoBuffer(_) => None,
        }
    }
}

impl From<KernelError> for ExecError {
    fn from(e: KernelError) -> Self {
        ExecError::Cpu(e)
    }
}

impl From<VkError> for ExecError {
    fn from(e: VkError) -> Self {
        ExecError::Vulkan(e)
    }
}

/// Either executor, driven the same way.
pub enum Executor {
    Cpu(CpuExecutor),
    Vulkan(VulkanExecutor),
}

impl Executor {
    pub fn plan(&self, id: PlanId) -> &Plan {
        match self {
            Executor::Cpu(e) => e.plan(id),
            Executor::Vulkan(e) => e.plan(id),
        }
    }

    /// Threads of the CPU kernels (the Vulkan executor ignores it).
    pub fn set_threads(&mut self, n: usize) {
        if let Executor::Cpu(e) = self {
            e.set_threads(n);
        }
    }

    /// Writes f32 `values` into run-time buffer `name` of `plan`, `offset` values in.
    pub fn write_f32(&mut self, plan: PlanId, name: &str, offset: usize, values: &[f32]) -> Result<(), ExecError> {
        match self {
            Executor::Cpu(e) => {
                let buf = e.f32_buffer(plan, name).ok_or_else(|| ExecError::NoBuffer(name.to_owned()))?;
                buf.get_mut(offset..offset + values.len())
                    .ok_or_else(|| ExecError::NoBuffer(name.to_owned()))?
                    .copy_from_slice(values);
                Ok(())
            }
            Executor::Vulkan(e) => Ok(e.write_f32(plan, name, offset, values)?),
        }
    }

    /// Runs `f` on f32 values `offset..offset + len` of run-time buffer `name` of `plan` in
    /// place, where the host holds it (the CPU's buffers) or maps it (Vulkan's, mostly): true;
    /// false where it can only be written (`write_f32`).
    pub fn fill_f32(
        &mut self,
        plan: PlanId,
        name: &str,
        offset: usize,
        len: usize,
        f: impl FnOnce(&mut [f32]),
    ) -> Result<bool, ExecError> {
        match self {
            Executor::Cpu(e) => {
                let buf = e.f32_buffer(plan, name).ok_or_else(|| ExecError::NoBuffer(name.to_owned()))?;
                let end = offset.checked_add(len).ok_or_else(|| ExecError::NoBuffer(name.to_owned()))?;
                f(buf.get_mut(offset..end).ok_or_else(|| ExecError::NoBuffer(name.to_owned()))?);
                Ok(true)
            }
            Executor::Vulkan(e) => Ok(e.fill_f32(plan, name, offset, len, f)?),
        }
    }

    /// Writes i32 `values` into run-time buffer `name` of `plan`, `offset` values in.
    pub fn write_i32(&mut self, plan: PlanId, name: &str, offset: usize, values: &[i32]) -> Result<(), ExecError> {
        match self {
            Executor::Cpu(e) => {
                let buf = e.i32_buffer(plan, name).ok_or_else(|| ExecError::NoBuffer(name.to_owned()))?;
                buf.get_mut(offset..offset + values.len())
                    .ok_or_else(|| ExecError::NoBuffer(name.to_owned()))?
                    .copy_from_slice(values);
                Ok(())
            }
            Executor::Vulkan(e) => Ok(e.write_i32(plan, name, offset, values)?),
        }
    }

    /// The first `out.len()` values of f32 run-time buffer `name` of `plan`, into `out`.
    pub fn read_f32_into(&mut self, plan: PlanId, name: &str, out: &mut [f32]) -> Result<(), ExecError> {
        match self {
            Executor::Cpu(e) => {
                let buf = e.f32_buffer(plan, name).ok_or_else(|| ExecError::NoBuffer(name.to_owned()))?;
                out.copy_from_slice(buf.get(..out.len()).ok_or_else(|| ExecError::NoBuffer(name.to_owned()))?);
                Ok(())
            }
            Executor::Vulkan(e) => Ok(e.read_f32_into(plan, name, out)?),
        }
    }

    /// Runs `plan` for these symbol values.
    pub fn run(&mut self, plan: PlanId, symbols: &[usize]) -> Result<(), ExecError> {
        match self {
            Executor::Cpu(e) => Ok(e.run(plan, symbols)?),
            Executor::Vulkan(e) => Ok(e.run(plan, symbols)?),
        }
    }

    /// The contiguous f32 value of node `id` of `plan` after a run, at its run-time shape.
    pub fn output(&mut self, plan: PlanId, id: NodeId, symbols: &[usize]) -> Result<Vec<f32>, ExecError> {
        let mut values = Vec::new();
        self.output_into(plan, id, symbols, &mut values)?;
        Ok(values)
    }

    /// As `output`, into `out`: its memory reused (resized, never zeroed where it already
    /// holds values).
    pub fn output_into(
        &mut self,
        plan: PlanId,
        id: NodeId,
        symbols: &[usize],
        out: &mut Vec<f32>,
    ) -> Result<(), ExecError> {
        match self {
            Executor::Cpu(e) => {
                let values = e
                    .output(plan, id, symbols)
                    .ok_or_else(|| ExecError::NoBuffer(format!("value of node {}", id.0)))?;
                out.clear();
                out.extend_from_slice(values);
                Ok(())
            }
            Executor::Vulkan(e) => Ok(e.output_into(plan, id, symbols, out)?),
        }
    }

    /// Command buffers recorded so far (Vulkan: one per plan, at load); None on the CPU.
    pub fn recordings(&self) -> Option<usize> {
        match self {
            Executor::Cpu(_) => None,
            Executor::Vulkan(e) => Some(e.recordings()),
        }
    }

    /// Dispatches and barriers of each plan's recording (Vulkan); empty on the CPU.
    pub fn recording_stats(&self) -> Vec<vulkan::RecordingStats> {
        match self {
            Executor::Cpu(_) => Vec::new(),
            Executor::Vulkan(e) => e.recording_stats(),
        }
    }
}
