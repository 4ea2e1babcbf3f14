//! Descriptor sets: which buffers a dispatch reads and writes. Made once per node when a plan
//! is recorded (or once per test dispatch), from a pool sized for them; a set holds handles to
//! its buffers and its pool.

use super::buffer::Buffer;
use super::device::{Device, Shared};
use super::error::{call, Result, VkError};
use super::pipeline::Pipeline;
use ash::vk;
use std::sync::{Arc, Mutex};

pub(crate) struct PoolInner {
    shared: Arc<Shared>,
    raw: Mutex<vk::DescriptorPool>,
}

/// A pool of descriptor sets, freed all at once when the pool and all its sets are gone.
pub struct DescriptorPool {
    inner: Arc<PoolInner>,
}

pub(crate) struct SetInner {
    _pool: Arc<PoolInner>,
    _buffers: Vec<Buffer>,
    pub raw: vk::DescriptorSet,
    pub bindings: u32,
}

/// A byte range of a buffer bound to one binding.
#[derive(Clone, Copy)]
pub struct Window<'a> {
    pub buffer: &'a Buffer,
    pub offset: u64,
    pub range: u64,
}

/// One set of buffers bound to a pipeline's bindings 0..n.
#[derive(Clone)]
pub struct DescriptorSet {
    pub(crate) inner: Arc<SetInner>,
}

impl DescriptorPool {
    /// Room for `max_sets` sets of up to `max_buffers_per_set` buffers each.
    pub fn new(device: &Device, max_sets: u32, max_buffers_per_set: u32) -> Result<DescriptorPool> {
        let sizes = [vk::DescriptorPoolSize {
            ty: vk::DescriptorType::STORAGE_BUFFER,
            descriptor_count: max_sets.max(1) * max_buffers_per_set.max(1),
        }];
        let info = vk::DescriptorPoolCreateInfo::default().max_sets(max_sets.max(1)).pool_sizes(&sizes);
        // SAFETY: a valid create info on a live device.
        let raw =
            unsafe { device.shared.raw.create_descriptor_pool(&info, None) }.map_err(call("vkCreateDescriptorPool"))?;
        Ok(DescriptorPool { inner: Arc::new(PoolInner { shared: Arc::clone(&device.shared), raw: Mutex::new(raw) }) })
    }

    /// A set binding `buffers[i]` (whole) at binding i of `pipeline`.
    pub fn bind(&self, pipeline: &Pipeline, buffers: &[&Buffer]) -> Result<DescriptorSet> {
        let windows: Vec<Window> = buffers.iter().map(|&b| Window { buffer: b, offset: 0, range: b.size() }).collect();
        self.bind_windows(pipeline, &windows)
    }

    /// A set binding `windows[i]` at binding i of `pipeline`: each a byte range of a buffer,
    /// starting at a multiple of the device's minStorageBufferOffsetAlignment and no longer
    /// than its maxStorageBufferRange (how a buffer larger than that range is read).
    pub fn bind_windows(&self, pipeline: &Pipeline, windows: &[Window]) -> Result<DescriptorSet> {
        let p = &pipeline.inner;
        if windows.len() != p.bindings as usize {
            return Err(VkError::Binding(format!("{}: {} buffers for {} bindings", p.name, windows.len(), p.bindings)));
        }
        let info = &self.inner.shared.info;
        let max_range = u64::from(info.max_storage_buffer_range);
        let align = info.min_storage_buffer_offset_alignment.max(1);
        for w in windows {
            if w.range > max_range {
                return Err(VkError::Binding(format!(
                    "{}: a window of {} bytes exceeds the device's storage-buffer range of {max_range}",
                    p.name, w.range
                )));
            }
            if w.offset % align != 0
                || !matches!(w.offset.checked_add(w.range), Some(e) if e <= w.buffer.size())
                || w.range == 0
            {
                return Err(VkError::Binding(format!(
                    "{}: window {}+{} of a buffer of {} bytes (offset alignment {align})",
                    p.name,
                    w.offset,
                    w.range,
                    w.buffer.size()
                )));
            }
        }
        let d = &self.inner.shared.raw;
        let layouts = [p.set_layout];
        let raw = {
            let pool = self.inner.raw.lock().unwrap_or_else(|e| e.into_inner());
            let info = vk::DescriptorSetAllocateInfo::default().descriptor_pool(*pool).set_layouts(&layouts);
            // SAFETY: the pool is externally synchronised by the lock; the layout is alive.
            unsafe { d.allocate_descriptor_sets(&info) }.map_err(|e| match e {
                vk::Result::ERROR_OUT_OF_POOL_MEMORY | vk::Result::ERROR_FRAGMENTED_POOL => {
                    VkError::Recording(format!("{}: the descriptor pool is full", p.name))
                }
                e => VkError::from_call("vkAllocateDescriptorSets", e),
            })?[0]
        };
        let infos: Vec<[vk::DescriptorBufferInfo; 1]> = windows
            .iter()
            .map(|w| [vk::DescriptorBufferInfo { buffer: w.buffer.inner.raw, offset: w.offset, range: w.range }])
            .collect();
        let writes: Vec<_> = infos
            .iter()
            .enumerate()
            .map(|(i, info)| {
                vk::WriteDescriptorSet::default()
                    .dst_set(raw)
                    .dst_binding(i as u32)
                    .descriptor_type(vk::DescriptorType::STORAGE_BUFFER)
                    .buffer_info(info)
            })
            .collect();
        // SAFETY: the set was just allocated and is not in use; every buffer is alive and each
        // window lies in its buffer, aligned and within the storage-buffer range (checked above).
        unsafe { d.update_descriptor_sets(&writes, &[]) };
        Ok(DescriptorSet {
            inner: Arc::new(SetInner {
                _pool: Arc::clone(&self.inner),
                _buffers: windows.iter().map(|w| w.buffer.clone()).collect(),
                raw,
                bindings: p.bindings,
            }),
        })
    }
}

impl Drop for PoolInner {
    fn drop(&mut self) {
        let raw = *self.raw.get_mut().unwrap_or_else(|e| e.into_inner());
        // SAFETY: the pool and every set from it are gone (sets hold the pool), and command
        // buffers that used the sets hold them, so none is pending.
        unsafe { self.shared.raw.destroy_descriptor_pool(raw, None) };
    }
}
