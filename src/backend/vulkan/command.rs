//! Command buffers: record once, submit any number of times (plan once, replay). Each one has
//! its own pool and fence, so recording needs no lock, and it holds handles to every buffer,
//! pipeline and descriptor set its commands use, so none is destroyed while it may run.

use super::buffer::Buffer;
use super::descriptor::DescriptorSet;
use super::device::{Device, Shared};
use super::error::{call, Result, VkError};
use super::pipeline::Pipeline;
use super::timestamps::TimestampPool;
use ash::vk;
use std::any::Any;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    Empty,
    Recording,
    Ready,
}

pub struct CommandBuffer {
    shared: Arc<Shared>,
    pool: vk::CommandPool,
    raw: vk::CommandBuffer,
    fence: vk::Fence,
    keep: Vec<Arc<dyn Any + Send + Sync>>,
    state: State,
    commands: usize,
    /// A submission timed out: the GPU may still run it, so it is never re-recorded, and drop
    /// leaves it (and what it uses) to the driver rather than wait for it.
    pending: AtomicBool,
}

impl CommandBuffer {
    pub fn new(device: &Device) -> Result<CommandBuffer> {
        let shared = Arc::clone(&device.shared);
        let pool_info = vk::CommandPoolCreateInfo::default().queue_family_index(shared.queue_family);
        // SAFETY: valid create infos on a live device; on failure what was made is destroyed.
        unsafe {
            let pool = shared.raw.create_command_pool(&pool_info, None).map_err(call("vkCreateCommandPool"))?;
            let alloc = vk::CommandBufferAllocateInfo::default()
                .command_pool(pool)
                .level(vk::CommandBufferLevel::PRIMARY)
                .command_buffer_count(1);
            let raw = match shared.raw.allocate_command_buffers(&alloc) {
                Ok(v) => v[0],
                Err(e) => {
                    shared.raw.destroy_command_pool(pool, None);
                    return Err(VkError::from_call("vkAllocateCommandBuffers", e));
                }
            };
            let fence = match shared.raw.create_fence(&vk::FenceCreateInfo::default(), None) {
                Ok(f) => f,
                Err(e) => {
                    shared.raw.destroy_command_pool(pool, None);
                    return Err(VkError::from_call("vkCreateFence", e));
                }
            };
            Ok(CommandBuffer {
                shared,
                pool,
                raw,
                fence,
                keep: Vec::new(),
                state: State::Empty,
                commands: 0,
                pending: AtomicBool::new(false),
            })
        }
    }

    fn expect(&self, state: State, what: &str) -> Result<()> {
        if self.state != state {
            return Err(VkError::Recording(format!("{what} on a command buffer that is {:?}", self.state)));
        }
        Ok(())
    }

    /// Starts recording, dropping whatever was recorded before.
    pub fn begin(&mut self) -> Result<()> {
        if *self.pending.get_mut() {
            return Err(VkError::Recording(
                "a command buffer whose last run timed out cannot be recorded again".into(),
            ));
        }
        // SAFETY: the buffer is not executing (every submission is waited for); resetting
        // the pool resets its one command buffer.
        unsafe {
            self.shared
                .raw
                .reset_command_pool(self.pool, vk::CommandPoolResetFlags::empty())
                .map_err(call("vkResetCommandPool"))?;
            self.shared
                .raw
                .begin_command_buffer(self.raw, &vk::CommandBufferBeginInfo::default())
                .map_err(call("vkBeginCommandBuffer"))?;
        }
        self.keep.clear();
        self.commands = 0;
        self.state = State::Recording;
        Ok(())
    }

    /// Binds `pipeline` with `set` and `push` constants (exactly the pipeline's size).
    fn bind(&mut self, pipeline: &Pipeline, set: &DescriptorSet, push: &[u32]) -> Result<()> {
        self.expect(State::Recording, "a dispatch")?;
        let p = &pipeline.inner;
        if push.len() * 4 != p.push_bytes as usize {
            return Err(VkError::Binding(format!(
                "{}: {} bytes of push constants, the pipeline takes {}",
                p.name,
                push.len() * 4,
                p.push_bytes
            )));
        }
        // Every set layout here is `bindings` storage buffers: same count, compatible layout.
        if set.inner.bindings != p.bindings {
            return Err(VkError::Binding(format!(
                "{}: a set of {} buffers for a pipeline of {}",
                p.name, set.inner.bindings, p.bindings
            )));
        }
        let bytes: Vec<u8> = push.iter().flat_map(|v| v.to_le_bytes()).collect();
        // SAFETY: recording; pipeline, layout and set are alive (kept below) and compatible.
        unsafe {
            let d = &self.shared.raw;
            d.cmd_bind_pipeline(self.raw, vk::PipelineBindPoint::COMPUTE, p.raw);
            d.cmd_bind_descriptor_sets(self.raw, vk::PipelineBindPoint::COMPUTE, p.layout, 0, &[set.inner.raw], &[]);
            if !bytes.is_empty() {
                d.cmd_push_constants(self.raw, p.layout, vk::ShaderStageFlags::COMPUTE, 0, &bytes);
            }
        }
        self.keep.push(Arc::clone(&pipeline.inner) as Arc<dyn Any + Send + Sync>);
        self.keep.push(Arc::clone(&set.inner) as Arc<dyn Any + Send + Sync>);
        Ok(())
    }

    /// A dispatch of `groups` workgroups.
    pub fn dispatch(&mut self, pipeline: &Pipeline, set: &DescriptorSet, push: &[u32], groups: [u32; 3]) -> Result<()> {
        self.bind(pipeline, set, push)?;
        let max = self.shared.info.max_workgroup_count;
        if groups.iter().zip(max).any(|(&g, m)| g > m) {
            return Err(VkError::Binding(format!(
                "{}: {groups:?} workgroups exceed the device's {max:?}",
                pipeline.inner.name
            )));
        }
        // SAFETY: recording, with a compute pipeline bound.
        unsafe { self.shared.raw.cmd_dispatch(self.raw, groups[0], groups[1], groups[2]) };
        self.commands += 1;
        Ok(())
    }

    /// A dispatch whose workgroup counts are read at run time from `args` (three u32 at
    /// byte `offset`): the size can change between replays of the same recording.
    pub fn dispatch_indirect(
        &mut self,
        pipeline: &Pipeline,
        set: &DescriptorSet,
        push: &[u32],
        args: &Buffer,
        offset: u64,
    ) -> Result<()> {
        self.bind(pipeline, set, push)?;
        if !offset.is_multiple_of(4) || offset + 12 > args.size() {
            return Err(VkError::Binding(format!(
                "indirect arguments at {offset} do not fit a buffer of {} bytes",
                args.size()
            )));
        }
        // SAFETY: recording; the argument buffer has INDIRECT usage and is kept alive.
        unsafe { self.shared.raw.cmd_dispatch_indirect(self.raw, args.inner.raw, offset) };
        self.keep.push(Arc::clone(&args.inner) as Arc<dyn Any + Send + Sync>);
        self.commands += 1;
        Ok(())
    }

    /// Copies `size` bytes between buffers.
    pub fn copy(&mut self, src: &Buffer, src_offset: u64, dst: &Buffer, dst_offset: u64, size: u64) -> Result<()> {
        self.expect(State::Recording, "a copy")?;
        let fits = |b: &Buffer, o: u64| o.checked_add(size).is_some_and(|e| e <= b.size());
        if !fits(src, src_offset) || !fits(dst, dst_offset) {
            return Err(VkError::OutOfBounds(format!("copy of {size} bytes runs past a buffer")));
        }
        if size > 0 {
            let region = [vk::BufferCopy { src_offset, dst_offset, size }];
            // SAFETY: recording; both ranges are inside their buffers, which are kept alive.
            unsafe { self.shared.raw.cmd_copy_buffer(self.raw, src.inner.raw, dst.inner.raw, &region) };
        }
        self.keep.push(Arc::clone(&src.inner) as Arc<dyn Any + Send + Sync>);
        self.keep.push(Arc::clone(&dst.inner) as Arc<dyn Any + Send + Sync>);
        self.commands += 1;
        Ok(())
    }

    /// Fills a whole buffer with a repeated u32.
    pub fn fill(&mut self, dst: &Buffer, value: u32) -> Result<()> {
        self.expect(State::Recording, "a fill")?;
        // SAFETY: recording; the buffer's size is a multiple of 4 (see `Device::buffer`).
        unsafe { self.shared.raw.cmd_fill_buffer(self.raw, dst.inner.raw, 0, vk::WHOLE_SIZE, value) };
        self.keep.push(Arc::clone(&dst.inner) as Arc<dyn Any + Send + Sync>);
        self.commands += 1;
        Ok(())
    }

    /// Resets every query of `pool`: needed before a replay writes them again.
    pub fn reset_timestamps(&mut self, pool: &TimestampPool) -> Result<()> {
        self.expect(State::Recording, "a query reset")?;
        // SAFETY: recording, outside any render pass; the pool is kept alive.
        unsafe { self.shared.raw.cmd_reset_query_pool(self.raw, pool.inner.raw, 0, pool.inner.count) };
        self.keep.push(Arc::clone(&pool.inner) as Arc<dyn Any + Send + Sync>);
        Ok(())
    }

    /// Writes query `index` of `pool` once every command recorded before it has finished
    /// (bottom of the pipe). Commands after it may already run: without a barrier between
    /// dispatches, the difference of two timestamps is the time between their ends.
    pub fn write_timestamp(&mut self, pool: &TimestampPool, index: u32) -> Result<()> {
        self.expect(State::Recording, "a timestamp")?;
        if index >= pool.inner.count {
            return Err(VkError::OutOfBounds(format!("timestamp {index} of a pool of {}", pool.inner.count)));
        }
        // SAFETY: recording; the query exists, was reset earlier in this recording (see
        // `reset_timestamps`) and is kept alive with its pool.
        unsafe {
            self.shared.raw.cmd_write_timestamp(self.raw, vk::PipelineStageFlags::BOTTOM_OF_PIPE, pool.inner.raw, index)
        };
        self.keep.push(Arc::clone(&pool.inner) as Arc<dyn Any + Send + Sync>);
        Ok(())
    }

    /// Makes every write recorded so far visible to every command recorded after.
    pub fn barrier(&mut self) -> Result<()> {
        self.expect(State::Recording, "a barrier")?;
        self.memory_barrier(
            vk::PipelineStageFlags::COMPUTE_SHADER | vk::PipelineStageFlags::TRANSFER,
            vk::PipelineStageFlags::COMPUTE_SHADER
                | vk::PipelineStageFlags::TRANSFER
                | vk::PipelineStageFlags::DRAW_INDIRECT,
            vk::AccessFlags::INDIRECT_COMMAND_READ
                | vk::AccessFlags::SHADER_READ
                | vk::AccessFlags::SHADER_WRITE
                | vk::AccessFlags::TRANSFER_READ
                | vk::AccessFlags::TRANSFER_WRITE,
        );
        Ok(())
    }

    /// Makes the writes of the compute dispatches recorded so far visible to the compute
    /// dispatches recorded after: the barrier between two dependent nodes of a graph. Lighter
    /// than `barrier` (no transfer or indirect-command stages): a driver need not stall its
    /// command processor, which fetches the next dispatches' indirect arguments ahead.
    pub fn compute_barrier(&mut self) -> Result<()> {
        self.expect(State::Recording, "a barrier")?;
        self.memory_barrier(
            vk::PipelineStageFlags::COMPUTE_SHADER,
            vk::PipelineStageFlags::COMPUTE_SHADER,
            vk::AccessFlags::SHADER_READ | vk::AccessFlags::SHADER_WRITE,
        );
        Ok(())
    }

    fn memory_barrier(
        &mut self,
        src: vk::PipelineStageFlags,
        dst: vk::PipelineStageFlags,
        dst_access: vk::AccessFlags,
    ) {
        let barrier = [vk::MemoryBarrier::default()
            .src_access_mask(vk::AccessFlags::SHADER_WRITE | vk::AccessFlags::TRANSFER_WRITE)
            .dst_access_mask(dst_access)];
        // SAFETY: recording; a global memory barrier between valid stages.
        unsafe {
            self.shared.raw.cmd_pipeline_barrier(self.raw, src, dst, vk::DependencyFlags::empty(), &barrier, &[], &[])
        };
    }

    /// Ends recording; results become visible to the host after each submission.
    pub fn finish(&mut self) -> Result<()> {
        self.expect(State::Recording, "finish")?;
        self.memory_barrier(
            vk::PipelineStageFlags::COMPUTE_SHADER | vk::PipelineStageFlags::TRANSFER,
            vk::PipelineStageFlags::HOST,
            vk::AccessFlags::HOST_READ,
        );
        // SAFETY: recording.
        unsafe { self.shared.raw.end_command_buffer(self.raw) }.map_err(call("vkEndCommandBuffer"))?;
        self.state = State::Ready;
        Ok(())
    }

    /// Number of dispatches, copies and fills recorded.
    pub fn len(&self) -> usize {
        self.commands
    }

    pub fn is_empty(&self) -> bool {
        self.commands == 0
    }

    /// Begun and not yet finished.
    pub fn is_recording(&self) -> bool {
        self.state == State::Recording
    }

    /// Runs the recording and waits for it to finish; may be called again (a replay).
    pub fn submit_and_wait(&self) -> Result<()> {
        // After a time-out the device refuses every submission (`VkError::Hung`), this one's too.
        self.expect(State::Ready, "a submission")?;
        let result = self.shared.submit_and_wait(self.raw, self.fence, "a command buffer");
        if matches!(result, Err(VkError::Timeout { .. })) {
            self.pending.store(true, Ordering::Release);
        }
        result
    }
}

impl Drop for CommandBuffer {
    fn drop(&mut self) {
        if *self.pending.get_mut() {
            // Still running, perhaps for ever (a hung GPU; lavapipe, until the work is done):
            // waiting would hang whoever drops it, and destroying it, its pool, its fence or
            // anything it uses while it runs is invalid. So they are all leaked, the device too
            // (each kept object holds it, and so does this clone), and reclaimed at exit.
            std::mem::forget(std::mem::take(&mut self.keep));
            std::mem::forget(Arc::clone(&self.shared));
            return;
        }
        // SAFETY: every submission was waited for and finished (one that did not is handled
        // above), so the buffer is not executing; the pool frees its command buffer.
        unsafe {
            self.shared.raw.destroy_fence(self.fence, None);
            self.shared.raw.destroy_command_pool(self.pool, None);
        }
    }
}
