//! A pool of GPU timestamps: a recording resets it and writes one query after each dispatch
//! (`CommandBuffer::reset_timestamps`, `write_timestamp`); after the submission is waited
//! for, the host reads the ticks. Only made when profiling (`HRX_VK_PROFILE=1`).

use super::device::{Device, Shared};
use super::error::{call, Result, VkError};
use ash::vk;
use std::sync::Arc;

pub(crate) struct PoolInner {
    shared: Arc<Shared>,
    pub raw: vk::QueryPool,
    pub count: u32,
}

/// `count` timestamp queries; command buffers that write them hold the pool alive.
pub struct TimestampPool {
    pub(crate) inner: Arc<PoolInner>,
}

impl TimestampPool {
    pub fn new(device: &Device, count: u32) -> Result<TimestampPool> {
        let info = device.info();
        if !info.can_time() {
            return Err(VkError::Unsupported {
                device: info.name.clone(),
                what: "no timestamps on the compute queue".into(),
            });
        }
        let create = vk::QueryPoolCreateInfo::default().query_type(vk::QueryType::TIMESTAMP).query_count(count.max(1));
        // SAFETY: a valid create info on a live device.
        let raw = unsafe { device.shared.raw.create_query_pool(&create, None) }.map_err(call("vkCreateQueryPool"))?;
        Ok(TimestampPool {
            inner: Arc::new(PoolInner { shared: Arc::clone(&device.shared), raw, count: count.max(1) }),
        })
    }

    /// How many timestamps the pool holds.
    pub fn queries(&self) -> usize {
        self.inner.count as usize
    }

    /// The ticks of every query, masked to the device's valid bits, after a submission that
    /// reset and wrote all of them has been waited for. A query it did not write is an error
    /// (VK_NOT_READY), not a wait: nothing would ever write it.
    pub fn ticks(&self) -> Result<Vec<u64>> {
        let p = &self.inner;
        let mut ticks = vec![0u64; p.count as usize];
        // SAFETY: the pool belongs to this device and no submission that writes it is running;
        // 64-bit results fill `ticks` exactly.
        unsafe { p.shared.raw.get_query_pool_results(p.raw, 0, &mut ticks, vk::QueryResultFlags::TYPE_64) }
            .map_err(call("vkGetQueryPoolResults"))?;
        let mask = valid_mask(p.shared.info.timestamp_bits);
        Ok(ticks.into_iter().map(|t| t & mask).collect())
    }
}

/// The bits of a timestamp with `bits` valid bits.
pub fn valid_mask(bits: u32) -> u64 {
    if bits >= 64 {
        u64::MAX
    } else {
        (1u64 << bits) - 1
    }
}

impl Drop for PoolInner {
    fn drop(&mut self) {
        // SAFETY: the last handle is gone: no command buffer that writes the pool exists (each
        // holds a handle), and every submission was waited for.
        unsafe { self.shared.raw.destroy_query_pool(self.raw, None) };
    }
}
