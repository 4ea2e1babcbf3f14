//! Executes a plan whose compute nodes all run on the GPU: weights uploaded once, every
//! buffer and descriptor set made once, one command buffer recorded once with indirect
//! dispatches. A run writes the symbols (token count...) and each dispatch's workgroup counts
//! into two small host-visible buffers and replays the recording: nothing is re-recorded.
//!
//! Mixed plans (nodes left to the CPU) are the next step; `new` refuses them, naming a node.

use super::buffer::Buffer;
use super::command::CommandBuffer;
use super::descriptor::DescriptorPool;
use super::device::Device;
use super::error::{Result, VkError};
use super::kernels::{self, KernelSet, Launch, Operand, BINDINGS};
use super::memory::Location;
use crate::gguf::GgufFile;
use crate::graph::NodeId;
use crate::hrx::{runtime_ne, Device as Where, Loc, Placement, Plan};
use std::sync::Arc;

pub struct VulkanExecutor {
    plan: Plan,
    /// One buffer per external storage of the plan.
    storages: Vec<Buffer>,
    arena: Buffer,
    /// The symbols' run-time values (binding 0 of every kernel).
    sizes: Buffer,
    /// Three u32 workgroup counts per dispatch.
    args: Buffer,
    launches: Vec<(NodeId, Launch)>,
    cmd: CommandBuffer,
    max_groups: [u32; 3],
}

impl VulkanExecutor {
    /// Uploads the plan's weights (each from the tensor of its name in `files`, checked for
    /// dtype and size), allocates the arena and the run-time buffers, and records the plan.
    pub fn new(device: &Device, plan: Plan, files: &[Arc<GgufFile>]) -> Result<VulkanExecutor> {
        for (i, p) in plan.placements.iter().enumerate() {
            if let Placement::Run { device: Where::Cpu, kernel } = p {
                let name = &plan.graph.nodes[i].name;
                return Err(VkError::Invalid(format!("node {i} ({name}, {kernel}) is placed on the CPU; mixed plans are not executed yet")));
            }
        }
        let storages = plan.graph.externals.iter().map(|ext| storage(device, ext, files)).collect::<Result<Vec<_>>>()?;
        let arena = device.buffer(plan.arena_bytes as u64, Location::Device, "the arena")?;
        let sizes = device.buffer(4 * plan.graph.symbols.len().max(1) as u64, Location::Host, "run-time sizes")?;
        let n_runs = plan.placements.iter().filter(|p| matches!(p, Placement::Run { .. })).count();
        let args = device.buffer(12 * n_runs.max(1) as u64, Location::Host, "dispatch sizes")?;
        let ks = KernelSet::new(device);
        let pool = DescriptorPool::new(device, n_runs.max(1) as u32, BINDINGS)?;
        let mut cmd = CommandBuffer::new(device)?;
        cmd.begin()?;
        let mut launches = Vec::with_capacity(n_runs);
        let graph = &plan.graph;
        for (i, node) in graph.nodes.iter().enumerate() {
            if !matches!(plan.placements[i], Placement::Run { .. }) {
                continue;
            }
            let at = |id: NodeId| -> Result<(&Buffer, Operand)> {
                let loc = plan.locs[id.0].ok_or_else(|| VkError::Invalid(format!("node {i}: value {} has no address", id.0)))?;
                let (buf, offset) = match loc {
                    Loc::Arena { offset } => (&arena, offset),
                    Loc::External { storage, offset } => (&storages[storage.0], offset),
                };
                let v = graph.value(id);
                // Kernels do not bounds-check their reads: every window must lie in its buffer.
                if (offset + v.extent_bytes()) as u64 > buf.size() {
                    return Err(VkError::Invalid(format!("node {i}: value {} runs past its buffer", id.0)));
                }
                Ok((buf, Operand { dtype: v.dtype, ne: v.ne, nb: v.nb, offset }))
            };
            let ins = node.inputs.iter().map(|&id| at(id)).collect::<Result<Vec<_>>>()?;
            let (out_buf, out) = at(NodeId(i))?;
            let operands: Vec<Operand> = ins.iter().map(|(_, o)| *o).collect();
            let launch = kernels::launch(&node.op, &operands, &out, node.value.dyn_axis.map(Into::into))
                .map_err(|e| VkError::Invalid(format!("node {i} ({}): {e}", node.name)))?;
            let pipeline = ks.pipeline(launch.kernel)?;
            let mut bound = vec![&sizes];
            bound.extend(ins.iter().map(|(b, _)| *b));
            bound.push(out_buf);
            let set = pool.bind(&pipeline, &bound)?;
            cmd.dispatch_indirect(&pipeline, &set, &launch.push, &args, 12 * launches.len() as u64)?;
            cmd.barrier()?;
            launches.push((NodeId(i), launch));
        }
        cmd.finish()?;
        let max_groups = device.info().max_workgroup_count;
        Ok(VulkanExecutor { plan, storages, arena, sizes, args, launches, cmd, max_groups })
    }

    pub fn plan(&self) -> &Plan {
        &self.plan
    }

    fn named(&self, name: &str) -> Result<&Buffer> {
        let i = self.plan.graph.externals.iter().position(|e| e.name == name).ok_or_else(|| VkError::Invalid(format!("no buffer {name:?}")))?;
        Ok(&self.storages[i])
    }

    /// Fills the start of run-time buffer `name` with f32 values.
    pub fn write_f32(&self, name: &str, values: &[f32]) -> Result<()> {
        self.named(name)?.write_f32(0, values)
    }

    /// Fills the start of run-time buffer `name` with i32 values.
    pub fn write_i32(&self, name: &str, values: &[i32]) -> Result<()> {
        self.named(name)?.write(0, &values.iter().flat_map(|v| v.to_le_bytes()).collect::<Vec<u8>>())
    }

    /// Runs the recorded plan for these symbol values (each at most its planned maximum).
    pub fn run(&mut self, symbols: &[usize]) -> Result<()> {
        let graph = &self.plan.graph;
        let mut words = Vec::with_capacity(graph.symbols.len());
        for (i, (name, max)) in graph.symbols.iter().enumerate() {
            let v = symbols.get(i).copied().unwrap_or(0);
            if v > *max {
                return Err(VkError::Invalid(format!("{name} = {v} exceeds the planned maximum {max}")));
            }
            words.push(v as u32);
        }
        let mut groups = Vec::with_capacity(3 * self.launches.len());
        for (id, launch) in &self.launches {
            groups.extend(launch.groups(runtime_ne(graph, *id, symbols), self.max_groups));
        }
        if !words.is_empty() {
            self.sizes.write_u32(0, &words)?;
        }
        self.args.write_u32(0, &groups)?;
        self.cmd.submit_and_wait()
    }

    /// The contiguous f32 value of node `id` after a run, at its run-time shape.
    pub fn output(&self, id: NodeId, symbols: &[usize]) -> Result<Vec<f32>> {
        let graph = &self.plan.graph;
        let v = graph.value(id);
        if !v.is_contiguous() || v.dtype != crate::quant::DType::F32 {
            return Err(VkError::Invalid(format!("node {} is not a contiguous f32 value", id.0)));
        }
        let n: usize = runtime_ne(graph, id, symbols).iter().product();
        match self.plan.locs[id.0] {
            Some(Loc::Arena { offset }) => self.arena.read_f32(offset as u64, n),
            Some(Loc::External { storage, offset }) => self.storages[storage.0].read_f32(offset as u64, n),
            None => Err(VkError::Invalid(format!("node {} has no address", id.0))),
        }
    }
}

/// The buffer of one external storage: a weight uploaded from `files`, or a zeroed run-time
/// buffer.
fn storage(device: &Device, ext: &crate::graph::External, files: &[Arc<GgufFile>]) -> Result<Buffer> {
    if !ext.is_weight {
        let b = device.buffer(ext.bytes as u64, Location::Device, &ext.name)?;
        b.clear()?;
        return Ok(b);
    }
    let found = files.iter().find_map(|f| f.tensor(&ext.name).map(|t| (f, t)));
    let Some((file, t)) = found else {
        return Err(VkError::Invalid(format!("weight {:?} is in none of the model files", ext.name)));
    };
    if t.dtype != ext.dtype || t.n_bytes as usize != ext.bytes {
        return Err(VkError::Invalid(format!(
            "{}: tensor {:?} is {} ({} bytes), the graph expects {} ({} bytes)",
            file.path().display(),
            ext.name,
            t.dtype,
            t.n_bytes,
            ext.dtype,
            ext.bytes
        )));
    }
    let b = device.buffer(ext.bytes as u64, Location::Device, &ext.name)?;
    b.write(0, file.tensor_data(t))?;
    Ok(b)
}
