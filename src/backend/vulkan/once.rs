//! One kernel launch run on its own, outside any plan: what the self-check and the kernel tests
//! do with every kernel. Its bindings are whole buffers: the sizes (the run-time symbols), the
//! inputs at the slots the launch gives them, the output, and zeroed scratch where it wants some.

use super::buffer::Buffer;
use super::command::CommandBuffer;
use super::descriptor::DescriptorPool;
use super::error::Result;
use super::kernels::{KernelSet, Launch, BINDINGS, OUTPUT_BINDING, SCRATCH_BINDING};
use super::memory::Location;

/// Runs `launch` once: symbols `syms`, inputs `ins` (at most four), output `out`, a grid of
/// `groups` workgroups; returns when it finished.
pub fn dispatch(
    kernels: &KernelSet,
    launch: &Launch,
    syms: &[u32],
    ins: &[&Buffer],
    out: &Buffer,
    groups: [u32; 3],
) -> Result<()> {
    let dev = kernels.device();
    let sizes = dev.buffer(4 * syms.len().max(1) as u64, Location::Host, "sizes")?;
    sizes.write_u32(0, syms)?;
    let pipeline = kernels.pipeline(launch.kernel)?;
    let pool = DescriptorPool::new(dev, 1, BINDINGS)?;
    let scratch = dev.buffer(launch.scratch.bytes.max(4) as u64, Location::Device, "scratch")?;
    scratch.clear()?;
    let mut bound = vec![&sizes; BINDINGS as usize];
    for (k, &b) in ins.iter().enumerate() {
        bound[launch.slot(k) as usize] = b;
    }
    bound[OUTPUT_BINDING as usize] = out;
    bound[SCRATCH_BINDING as usize] = &scratch;
    let set = pool.bind(&pipeline, &bound)?;
    let mut cmd = CommandBuffer::new(dev)?;
    cmd.begin()?;
    cmd.dispatch(&pipeline, &set, &launch.push, groups)?;
    cmd.finish()?;
    cmd.submit_and_wait()
}
