//! Device memory: a few large blocks per memory type, sub-allocated first-fit; an allocation
//! larger than half a block gets a block of its own. Host-visible blocks are mapped once, for
//! their whole life.

use super::error::{call, Result, VkError};
use ash::vk;
use std::ptr::NonNull;

/// Size of a shared block (smaller on devices with little memory).
pub const BLOCK_SIZE: u64 = 256 << 20;

/// Free byte ranges of one block, sorted by offset and coalesced.
#[derive(Debug)]
pub(crate) struct RangeAllocator {
    free: Vec<(u64, u64)>,
    size: u64,
}

impl RangeAllocator {
    pub fn new(size: u64) -> RangeAllocator {
        RangeAllocator { free: vec![(0, size)], size }
    }

    /// The offset of `size` bytes aligned to `align` (a power of two), first fit.
    pub fn alloc(&mut self, size: u64, align: u64) -> Option<u64> {
        let align = align.max(1);
        for i in 0..self.free.len() {
            let (o, s) = self.free[i];
            let start = o.checked_add(align - 1)? & !(align - 1);
            let end = start.checked_add(size)?;
            if end > o + s {
                continue;
            }
            let mut pieces = Vec::with_capacity(2);
            if start > o {
                pieces.push((o, start - o));
            }
            if end < o + s {
                pieces.push((end, o + s - end));
            }
            self.free.splice(i..=i, pieces);
            return Some(start);
        }
        None
    }

    pub fn free(&mut self, offset: u64, size: u64) {
        let i = self.free.partition_point(|&(o, _)| o < offset);
        self.free.insert(i, (offset, size));
        // Merge with the next range, then with the previous one.
        if i + 1 < self.free.len() && self.free[i].0 + self.free[i].1 == self.free[i + 1].0 {
            self.free[i].1 += self.free[i + 1].1;
            self.free.remove(i + 1);
        }
        if i > 0 && self.free[i - 1].0 + self.free[i - 1].1 == self.free[i].0 {
            self.free[i - 1].1 += self.free[i].1;
            self.free.remove(i);
        }
    }

    pub fn is_empty(&self) -> bool {
        self.free == [(0, self.size)]
    }
}

/// The host address of mapped device memory.
#[derive(Clone, Copy, Debug)]
pub(crate) struct MappedPtr(NonNull<u8>);

// SAFETY: the pointer addresses device memory mapped for the life of its block; it carries no
// thread affinity, and every access through it goes through `Buffer`'s bounds-checked copies.
unsafe impl Send for MappedPtr {}
// SAFETY: as above; shared references only copy the address.
unsafe impl Sync for MappedPtr {}

impl MappedPtr {
    pub fn as_ptr(self) -> *mut u8 {
        self.0.as_ptr()
    }
}

struct Block {
    memory: vk::DeviceMemory,
    type_index: u32,
    ranges: RangeAllocator,
    mapped: Option<MappedPtr>,
    /// Made for one large allocation: never shared.
    dedicated: bool,
}

/// A sub-allocation: where a buffer's bytes are.
#[derive(Debug)]
pub(crate) struct Allocation {
    block: usize,
    pub memory: vk::DeviceMemory,
    pub offset: u64,
    size: u64,
    /// Host address of the first byte, for host-visible memory.
    pub mapped: Option<MappedPtr>,
}

/// The blocks of every memory type.
pub(crate) struct Allocator {
    blocks: Vec<Option<Block>>,
    block_size: u64,
    /// Memory objects asked of the driver so far (each costs a call that may take
    /// milliseconds: counted for tests of how loads use them).
    pub driver_allocations: usize,
}

impl Allocator {
    pub fn new(largest_heap: u64) -> Allocator {
        Allocator {
            blocks: Vec::new(),
            block_size: BLOCK_SIZE.min((largest_heap / 8).max(16 << 20)),
            driver_allocations: 0,
        }
    }

    /// Memory for `req` from memory type `type_index`; `map` for host-visible types; `own`:
    /// an allocation of its own, not a share of a block.
    pub fn allocate(
        &mut self,
        raw: &ash::Device,
        req: vk::MemoryRequirements,
        type_index: u32,
        map: bool,
        own: bool,
        what: &str,
    ) -> Result<Allocation> {
        let dedicated = own || req.size > self.block_size / 2;
        if !dedicated {
            for (i, slot) in self.blocks.iter_mut().enumerate() {
                let Some(b) = slot else { continue };
                if b.type_index != type_index || b.dedicated || b.mapped.is_some() != map {
                    continue;
                }
                if let Some(offset) = b.ranges.alloc(req.size, req.alignment) {
                    return Ok(allocation(i, b, offset, req.size));
                }
            }
        }
        let size = if dedicated { req.size } else { self.block_size };
        let info = vk::MemoryAllocateInfo::default().allocation_size(size).memory_type_index(type_index);
        self.driver_allocations += 1;
        let t0 = std::time::Instant::now();
        // SAFETY: a valid allocate info for a memory type of this device.
        let memory = unsafe { raw.allocate_memory(&info, None) }.map_err(|e| match e {
            vk::Result::ERROR_OUT_OF_DEVICE_MEMORY
            | vk::Result::ERROR_OUT_OF_HOST_MEMORY
            | vk::Result::ERROR_TOO_MANY_OBJECTS => VkError::OutOfMemory { what: what.to_owned(), bytes: size },
            e => VkError::from_call("vkAllocateMemory", e),
        })?;
        let mapped = if map {
            // SAFETY: host-visible memory just allocated, mapped whole, once.
            match unsafe { raw.map_memory(memory, 0, vk::WHOLE_SIZE, vk::MemoryMapFlags::empty()) } {
                Ok(p) => NonNull::new(p.cast::<u8>()).map(MappedPtr),
                Err(e) => {
                    // SAFETY: the memory is unused.
                    unsafe { raw.free_memory(memory, None) };
                    return Err(VkError::from_call("vkMapMemory", e));
                }
            }
        } else {
            None
        };
        // Driver allocations are few, and some cost milliseconds (a cold start's budget).
        log::debug!(
            "{} MiB of memory type {type_index}{} for {what} in {:.1} ms",
            size >> 20,
            if map { ", mapped" } else { "" },
            t0.elapsed().as_secs_f64() * 1e3
        );
        let mut ranges = RangeAllocator::new(size);
        let offset = ranges
            .alloc(req.size, req.alignment)
            .ok_or_else(|| VkError::OutOfMemory { what: what.to_owned(), bytes: req.size })?;
        let block = Block { memory, type_index, ranges, mapped, dedicated };
        let i = match self.blocks.iter().position(Option::is_none) {
            Some(i) => i,
            None => {
                self.blocks.push(None);
                self.blocks.len() - 1
            }
        };
        let a = allocation(i, &block, offset, req.size);
        self.blocks[i] = Some(block);
        Ok(a)
    }

    /// Returns an allocation; a block left empty is given back to the driver.
    pub fn free(&mut self, raw: &ash::Device, a: &Allocation) {
        let Some(Some(block)) = self.blocks.get_mut(a.block) else { return };
        block.ranges.free(a.offset, a.size);
        if block.ranges.is_empty() {
            // SAFETY: no allocation of the block is alive; unmapping is implicit in freeing.
            unsafe { raw.free_memory(block.memory, None) };
            self.blocks[a.block] = None;
        }
    }

    /// Frees every block (the device is being destroyed).
    pub fn free_all(&mut self, raw: &ash::Device) {
        for b in self.blocks.drain(..).flatten() {
            // SAFETY: called once the device is idle and every buffer is gone.
            unsafe { raw.free_memory(b.memory, None) };
        }
    }
}

fn allocation(block: usize, b: &Block, offset: u64, size: u64) -> Allocation {
    // SAFETY (pointer arithmetic): `offset + size` lies inside the mapped block.
    let mapped = b.mapped.and_then(|p| NonNull::new(p.as_ptr().wrapping_add(offset as usize)).map(MappedPtr));
    Allocation { block, memory: b.memory, offset, size, mapped }
}

/// Where a buffer lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Location {
    /// Memory the device reads at full speed (also host-mapped on unified-memory devices).
    Device,
    /// Host-visible memory (staging, readback).
    Host,
    /// What the host writes before each run and the device reads during it (a step's token
    /// rows, positions, sizes): device-local memory the host can map (a resizable BAR, unified
    /// memory), so that kernels do not wait on the bus for every read. Where there is none, or
    /// it is full, `Device::buffer` gives host memory (a Host buffer).
    Input,
}

/// The memory type for `location` among the types allowed by `bits`, and whether to map it.
pub(crate) fn pick_type(
    props: &vk::PhysicalDeviceMemoryProperties,
    bits: u32,
    location: Location,
    unified: bool,
) -> Option<(u32, bool)> {
    use vk::MemoryPropertyFlags as F;
    let types = &props.memory_types[..props.memory_type_count as usize];
    let find = |want: F, avoid: F| {
        (0..types.len()).find(|&i| {
            bits & (1 << i) != 0 && types[i].property_flags.contains(want) && !types[i].property_flags.intersects(avoid)
        })
    };
    let host = F::HOST_VISIBLE | F::HOST_COHERENT;
    let (index, mapped) = match location {
        Location::Device if unified => {
            let i = find(F::DEVICE_LOCAL | host | F::HOST_CACHED, F::empty())
                .or_else(|| find(F::DEVICE_LOCAL | host, F::empty()));
            match i {
                Some(i) => (i, true),
                None => (find(F::DEVICE_LOCAL, F::empty())?, false),
            }
        }
        Location::Device => {
            (find(F::DEVICE_LOCAL, F::HOST_VISIBLE).or_else(|| find(F::DEVICE_LOCAL, F::empty()))?, false)
        }
        Location::Host => (find(host | F::HOST_CACHED, F::empty()).or_else(|| find(host, F::empty()))?, true),
        Location::Input => (find(F::DEVICE_LOCAL | host, F::empty())?, true),
    };
    Some((index as u32, mapped))
}

/// What a new buffer needs of its memory.
pub(crate) fn requirements(raw: &ash::Device, buffer: vk::Buffer) -> vk::MemoryRequirements {
    // SAFETY: `buffer` is a live buffer of this device.
    unsafe { raw.get_buffer_memory_requirements(buffer) }
}

/// Binds a new buffer to its allocation.
pub(crate) fn bind(raw: &ash::Device, buffer: vk::Buffer, a: &Allocation) -> Result<()> {
    // SAFETY: the allocation is at least as large as the buffer's requirements and aligned
    // to them; the buffer is bound once.
    unsafe { raw.bind_buffer_memory(buffer, a.memory, a.offset) }.map_err(call("vkBindBufferMemory"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_fit_with_alignment_and_coalescing() {
        let mut r = RangeAllocator::new(1024);
        let a = r.alloc(100, 1).unwrap();
        let b = r.alloc(100, 256).unwrap();
        let c = r.alloc(300, 64).unwrap();
        assert_eq!((a, b, c), (0, 256, 384));
        assert_eq!(r.alloc(1024, 1), None);
        r.free(b, 100);
        // The gap 100..356 now holds 256 bytes at 100 but not 256 aligned to 256.
        assert_eq!(r.alloc(200, 1), Some(100));
        r.free(100, 200);
        r.free(a, 100);
        r.free(c, 300);
        assert!(r.is_empty());
        assert_eq!(r.alloc(1024, 1024), Some(0));
    }

    #[test]
    fn memory_types_by_location() {
        use vk::MemoryPropertyFlags as F;
        let mut props = vk::PhysicalDeviceMemoryProperties { memory_type_count: 3, ..Default::default() };
        props.memory_types[0].property_flags = F::DEVICE_LOCAL;
        props.memory_types[1].property_flags = F::HOST_VISIBLE | F::HOST_COHERENT;
        props.memory_types[2].property_flags = F::DEVICE_LOCAL | F::HOST_VISIBLE | F::HOST_COHERENT;
        assert_eq!(pick_type(&props, 0b111, Location::Device, false), Some((0, false)));
        assert_eq!(pick_type(&props, 0b111, Location::Device, true), Some((2, true)));
        assert_eq!(pick_type(&props, 0b111, Location::Host, false), Some((1, true)));
        assert_eq!(pick_type(&props, 0b001, Location::Host, false), None);
        assert_eq!(pick_type(&props, 0b001, Location::Device, true), Some((0, false)));
        // Inputs: device-local memory the host maps, where there is some (else Buffer takes
        // host memory).
        assert_eq!(pick_type(&props, 0b111, Location::Input, false), Some((2, true)));
        assert_eq!(pick_type(&props, 0b011, Location::Input, false), None);
    }
}
