//! Buffers: a `VkBuffer` on a sub-allocation, freed when the last handle goes. Reads and
//! writes copy through the mapping where the memory is host-visible (unified memory, staging)
//! and through a staging buffer and a copy on the queue otherwise.
//!
//! Every submission in this backend waits for completion, so no GPU work is in flight while
//! the host reads or writes a buffer.

use super::command::CommandBuffer;
use super::device::{Device, Shared};
use super::error::{Result, VkError};
use super::memory::{self, Allocation, Location};
use super::weight_layout::Stored;
use crate::backend::cpu::pool::Pool;
use ash::vk;
use std::sync::{Arc, Mutex, PoisonError};

/// Largest staging copy at a time: a read's, and an upload's. An upload's staging buffer is
/// smaller, since host memory the GPU reads costs the NVIDIA driver ~0.3 ms a MiB to allocate
/// (a 256 MiB block: 71 ms of a 0.8 s describe on the H200) and an upload makes one per load.
const STAGING_CHUNK: u64 = 64 << 20;
const UPLOAD_CHUNK: u64 = 32 << 20;

pub(crate) struct BufferInner {
    shared: Arc<Shared>,
    pub raw: vk::Buffer,
    alloc: Allocation,
    size: u64,
    location: Location,
}

/// A device buffer (cheap to clone: a handle).
#[derive(Clone)]
pub struct Buffer {
    pub(crate) inner: Arc<BufferInner>,
}

impl Device {
    /// A buffer of `size` bytes (at least 4) usable as storage, indirect-argument, copy
    /// source and destination. `what` names it in errors.
    pub fn buffer(&self, size: u64, location: Location, what: &str) -> Result<Buffer> {
        let shared = &self.shared;
        // Larger than any heap: refuse before asking the driver (sizes past its limits are
        // invalid usage, not an error it must report).
        let largest_heap = shared.info.heaps.iter().map(|h| h.size).max().unwrap_or(0);
        let size = match size.max(4).checked_next_multiple_of(4) {
            Some(s) if s <= largest_heap => s,
            _ => {
                return Err(VkError::OutOfMemory { what: format!("{what} (larger than any memory heap)"), bytes: size })
            }
        };
        let usage = vk::BufferUsageFlags::STORAGE_BUFFER
            | vk::BufferUsageFlags::INDIRECT_BUFFER
            | vk::BufferUsageFlags::TRANSFER_SRC
            | vk::BufferUsageFlags::TRANSFER_DST;
        let create = vk::BufferCreateInfo::default().size(size).usage(usage).sharing_mode(vk::SharingMode::EXCLUSIVE);
        // SAFETY: a valid create info on a live device.
        let raw = unsafe { shared.raw.create_buffer(&create, None) }.map_err(|e| match e {
            vk::Result::ERROR_OUT_OF_DEVICE_MEMORY | vk::Result::ERROR_OUT_OF_HOST_MEMORY => {
                VkError::OutOfMemory { what: what.to_owned(), bytes: size }
            }
            e => VkError::from_call("vkCreateBuffer", e),
        })?;
        let destroy = |e| {
            // SAFETY: the buffer was never used.
            unsafe { shared.raw.destroy_buffer(raw, None) };
            e
        };
        let req = memory::requirements(&shared.raw, raw);
        let picked = memory::pick_type(&shared.memory_props, req.memory_type_bits, location, shared.map_device_memory);
        // Inputs and host buffers (staging, read-backs) are few: each gets memory of its own,
        // sized to it, not a 256 MiB block: the memory the host maps on the device may be a
        // 256 MiB BAR, and host memory the device reads costs the NVIDIA driver about 0.3 ms a
        // MiB to allocate (a 256 MiB block for a few bytes read back: 76 ms of a cold start).
        let own = matches!(location, Location::Input | Location::Host);
        let allocated =
            picked.map(|(type_index, map)| shared.allocator().allocate(&shared.raw, req, type_index, map, own, what));
        let alloc = match allocated {
            Some(Ok(alloc)) => alloc,
            failed => {
                let e = destroy(match failed {
                    Some(Err(e)) => e,
                    _ => VkError::NoMemoryType { what: format!("{what} ({location:?})") },
                });
                // Device-local memory the host maps may be missing or a small heap (a 256 MiB
                // BAR): inputs then go to host memory.
                if location == Location::Input
                    && matches!(e, VkError::OutOfMemory { .. } | VkError::NoMemoryType { .. })
                {
                    return self.buffer(size, Location::Host, what);
                }
                return Err(e);
            }
        };
        if let Err(e) = memory::bind(&shared.raw, raw, &alloc) {
            shared.allocator().free(&shared.raw, &alloc);
            return Err(destroy(e));
        }
        Ok(Buffer { inner: Arc::new(BufferInner { shared: Arc::clone(shared), raw, alloc, size, location }) })
    }
}

impl Device {
    /// A mapped host buffer for staging copies.
    fn staging(&self, size: u64, what: &str) -> Result<Buffer> {
        let b = self.buffer(size, Location::Host, what)?;
        if !b.is_mapped() {
            return Err(VkError::NoMemoryType { what: format!("{what} (host-visible, mapped)") });
        }
        Ok(b)
    }
}

impl Buffer {
    pub fn size(&self) -> u64 {
        self.inner.size
    }

    pub fn location(&self) -> Location {
        self.inner.location
    }

    /// The host writes and reads this buffer in place (no staging copy).
    pub fn is_mapped(&self) -> bool {
        self.inner.alloc.mapped.is_some()
    }

    fn device(&self) -> Device {
        Device { shared: Arc::clone(&self.inner.shared) }
    }

    /// A range of this buffer that the host may touch: inside it, on a device with no hung
    /// submission (which may still be using any buffer).
    fn check(&self, offset: u64, len: usize, what: &str) -> Result<()> {
        self.inner.shared.usable()?;
        match offset.checked_add(len as u64) {
            Some(end) if end <= self.inner.size => Ok(()),
            _ => Err(VkError::OutOfBounds(format!(
                "{what} of {len} bytes at {offset} runs past a buffer of {} bytes",
                self.inner.size
            ))),
        }
    }

    /// Copies `data` into the buffer at byte `offset`.
    pub fn write(&self, offset: u64, data: &[u8]) -> Result<()> {
        let mut up = Uploader::new(&self.device(), data.len() as u64);
        up.write(self, offset, data)?;
        up.flush()
    }

    /// Copies bytes at `offset` into `out`.
    pub fn read(&self, offset: u64, out: &mut [u8]) -> Result<()> {
        self.read_into(offset, out, &mut Readback::default())
    }

    /// Copies the bytes at `offset` into `out`, through `readback` where this buffer is not
    /// mapped (a device copy into its host buffer, then the bytes from there).
    pub fn read_into(&self, offset: u64, out: &mut [u8], readback: &mut Readback) -> Result<()> {
        let total = out.len();
        self.check(offset, total, "read")?;
        if let Some(p) = self.inner.alloc.mapped {
            // SAFETY: as in `write_mapped`: the range is inside the mapped allocation (checked
            // above), the GPU is done with it, and `out` cannot overlap it.
            let src = unsafe { std::slice::from_raw_parts(p.as_ptr().add(offset as usize), total) };
            // A step of 32 sequences reads 19 MB of logits: one thread took 2.9 ms of its 11.
            copy_on_threads(out, &[Piece::whole(Stored::AsIs(src))]);
            return Ok(());
        }
        if total == 0 {
            return Ok(());
        }
        let device = self.device();
        let chunk = STAGING_CHUNK.min(total as u64);
        let staging = match &mut readback.staging {
            Some(s) if s.size() >= chunk => s,
            kept => kept.insert(device.staging(chunk, "staging for a readback")?),
        };
        let cmd = match &mut readback.cmd {
            Some(cmd) => cmd,
            kept => kept.insert(CommandBuffer::new(&device)?),
        };
        let started = std::time::Instant::now();
        let mut copied = std::time::Duration::ZERO;
        for (k, piece) in out.chunks_mut(chunk as usize).enumerate() {
            let at = k as u64 * chunk;
            let t = std::time::Instant::now();
            cmd.begin()?;
            cmd.copy(self, offset + at, staging, 0, piece.len() as u64)?;
            cmd.finish()?;
            cmd.submit_and_wait()?;
            copied += t.elapsed();
            staging.read(0, piece)?;
        }
        // Where a readback's time goes (RUST_LOG=hrx=debug): the device's copy, the host's.
        log::debug!(
            "read {total} bytes through staging in {:.3} ms: device copy {:.3} ms",
            started.elapsed().as_secs_f64() * 1e3,
            copied.as_secs_f64() * 1e3
        );
        Ok(())
    }

    /// Writes f32 values (little-endian) at byte `offset`.
    #[cfg(target_endian = "little")]
    pub fn write_f32(&self, offset: u64, values: &[f32]) -> Result<()> {
        // SAFETY: the bytes of `values`, which outlive the view; on a little-endian host an
        // f32's bytes in memory are its little-endian bytes, so they are written as they lie
        // (a prompt's inputs are megabytes: no converted copy of them first).
        let bytes = unsafe { std::slice::from_raw_parts(values.as_ptr().cast::<u8>(), std::mem::size_of_val(values)) };
        self.write(offset, bytes)
    }

    #[cfg(not(target_endian = "little"))]
    pub fn write_f32(&self, offset: u64, values: &[f32]) -> Result<()> {
        self.write(offset, &le_bytes(values, |v| v.to_le_bytes()))
    }

    /// Runs `f` on the `len` f32 values at byte `offset` where the host maps this buffer, in
    /// place: values made straight into the memory the GPU reads (a prompt's rows, on several
    /// threads), with no copy after. False, `f` not run, where the buffer is not mapped (or
    /// the host is not little-endian): write the values with `write_f32` then.
    pub fn fill_mapped_f32(&self, offset: u64, len: usize, f: impl FnOnce(&mut [f32])) -> Result<bool> {
        self.check(offset, 4 * len, "write")?;
        let Some(p) = self.inner.alloc.mapped.filter(|_| cfg!(target_endian = "little")) else { return Ok(false) };
        // SAFETY: `offset` is inside the mapped allocation (checked above).
        let at = unsafe { p.as_ptr().add(offset as usize) };
        if !at.cast::<f32>().is_aligned() {
            return Err(VkError::OutOfBounds(format!("f32 values at byte {offset}: not 4-byte aligned")));
        }
        // SAFETY: as in `write_mapped`: the range is inside the mapped allocation (checked
        // above) and aligned for f32, which every bit pattern is; the GPU is not using it, and
        // no other reference to it lives while `f` runs.
        let values = unsafe { std::slice::from_raw_parts_mut(at.cast::<f32>(), len) };
        f(values);
        Ok(true)
    }

    /// Writes u32 values at byte `offset`.
    pub fn write_u32(&self, offset: u64, values: &[u32]) -> Result<()> {
        self.write(offset, &le_bytes(values, |v| v.to_le_bytes()))
    }

    /// Writes i32 values at byte `offset`.
    pub fn write_i32(&self, offset: u64, values: &[i32]) -> Result<()> {
        self.write(offset, &le_bytes(values, |v| v.to_le_bytes()))
    }

    /// Reads `n` f32 values at byte `offset`.
    pub fn read_f32(&self, offset: u64, n: usize) -> Result<Vec<f32>> {
        let mut values = vec![0f32; n];
        self.read_f32_into(offset, &mut values, &mut Readback::default())?;
        Ok(values)
    }

    /// Reads f32 values from byte `offset` on into `out`, through `readback` as `read_into`
    /// does.
    #[cfg(target_endian = "little")]
    pub fn read_f32_into(&self, offset: u64, out: &mut [f32], readback: &mut Readback) -> Result<()> {
        // SAFETY: the bytes of `out`, borrowed only for the copy; every bit pattern is an f32,
        // and on a little-endian host its bytes are the little-endian ones read (a decode
        // step's logits are 600 KB: read as they lie, no converting pass).
        let bytes =
            unsafe { std::slice::from_raw_parts_mut(out.as_mut_ptr().cast::<u8>(), std::mem::size_of_val(out)) };
        self.read_into(offset, bytes, readback)
    }

    #[cfg(not(target_endian = "little"))]
    pub fn read_f32_into(&self, offset: u64, out: &mut [f32], readback: &mut Readback) -> Result<()> {
        let mut bytes = vec![0u8; 4 * out.len()];
        self.read_into(offset, &mut bytes, readback)?;
        for (v, w) in out.iter_mut().zip(bytes.chunks_exact(4)) {
            *v = f32::from_le_bytes([w[0], w[1], w[2], w[3]]);
        }
        Ok(())
    }

    /// Fills the buffer with zero bytes.
    pub fn clear(&self) -> Result<()> {
        let mut up = Uploader::new(&self.device(), 0);
        up.clear(self)?;
        up.flush()
    }

    /// Its first `len` bytes from `pieces` laid end to end (a mapped staging buffer's).
    fn write_pieces(&self, len: u64, pieces: &[Piece]) -> Result<()> {
        self.check(0, len as usize, "write")?;
        let Some(p) = self.inner.alloc.mapped else {
            return Err(VkError::OutOfBounds("a staging buffer that is not mapped".into()));
        };
        if pieces.iter().map(|d| d.len as u64).sum::<u64>() != len {
            return Err(VkError::OutOfBounds(format!("staged pieces do not make {len} bytes")));
        }
        // SAFETY: as in `write_mapped`: the range is inside the mapped allocation (checked
        // above), no submission reading it runs (the uploader waits for its slot's), and the
        // pieces (the caller's data) cannot overlap it.
        let dst = unsafe { std::slice::from_raw_parts_mut(p.as_ptr(), len as usize) };
        copy_on_threads(dst, pieces);
        Ok(())
    }

    /// Copies `data` into this mapped buffer at byte `offset`; false when it is not mapped.
    fn write_mapped(&self, offset: u64, data: Stored) -> Result<bool> {
        self.check(offset, data.len(), "write")?;
        let Some(p) = self.inner.alloc.mapped else { return Ok(false) };
        // SAFETY: the range is inside this buffer's mapped allocation (checked above), the GPU
        // is not using it (every submission is waited for, and none is left running: `check`
        // refuses a hung device), no other reference to mapped memory lives past the call that
        // makes it (writes and reads of one range come from one thread: the executor's run
        // and the uploader are sequential), and `data` cannot overlap it.
        let dst = unsafe { std::slice::from_raw_parts_mut(p.as_ptr().add(offset as usize), data.len()) };
        copy_on_threads(dst, &[Piece::whole(data)]);
        Ok(true)
    }
}

/// What reads of buffers the host cannot map go through, kept by a caller that reads often: a
/// host buffer (replaced by a larger one when a read needs more, up to `STAGING_CHUNK`) and a
/// command buffer, both made at the first such read. Made for each read, a 448x448 image's
/// 6.4 MB of encoder rows took 2.4 ms to read on the H200, of which the device's copy 0.28
/// and the host's 0.56-0.86: the rest went to making and destroying them.
#[derive(Default)]
pub struct Readback {
    staging: Option<Buffer>,
    cmd: Option<CommandBuffer>,
}

/// Copies of at least this many bytes are spread over threads: on the H200 one thread read a
/// batched step's 19 MB of logits in 2.9 ms, several in 1.7; from 2 MB a 448x448 image's 6.4 MB
/// of encoder rows are spread too (0.56-0.86 ms from the staging buffer).
const PARALLEL_COPY: usize = 2 << 20;

/// Bytes `from..from + len` of what `bytes` stores: a piece of a staging buffer's bytes.
#[derive(Clone, Copy, Debug)]
struct Piece<'a> {
    bytes: Stored<'a>,
    from: usize,
    len: usize,
}

impl<'a> Piece<'a> {
    fn whole(bytes: Stored<'a>) -> Piece<'a> {
        Piece { bytes, from: 0, len: bytes.len() }
    }
}

/// `pieces`, laid end to end, copied into `dst` (as long as they are together), on several
/// threads for large copies, each a contiguous share of the bytes whatever the pieces' sizes:
/// a model's weights go from the file's mapping to mapped device or staging memory (a staging
/// buffer's many weights in one round of threads, not a round each), and a batched step's
/// logits back, at several times one core's rate (one thread copied the 2B model's 1.1 GB in
/// 0.24 s on the H200's host).
fn copy_on_threads(dst: &mut [u8], pieces: &[Piece]) {
    debug_assert_eq!(pieces.iter().map(|p| p.len).sum::<usize>(), dst.len());
    // The size first: `available_parallelism` reads cgroup files (tens of microseconds),
    // and a prompt's rows are hundreds of small writes.
    let threads =
        if dst.len() < PARALLEL_COPY { 1 } else { std::thread::available_parallelism().map_or(1, |n| n.get().min(8)) };
    // The bytes `start..` of the pieces into `share`.
    let copy_share = |share: &mut [u8], start: usize| {
        let (mut at, mut filled) = (0, 0);
        for p in pieces {
            let (first, end) = (at, at + p.len);
            at = end;
            if end <= start {
                continue;
            }
            if filled == share.len() {
                break;
            }
            let from = start.saturating_sub(first);
            let n = (p.len - from).min(share.len() - filled);
            p.bytes.copy_range(&mut share[filled..filled + n], p.from + from);
            filled += n;
        }
    };
    if threads < 2 {
        copy_share(dst, 0);
        return;
    }
    // Shares handed out to whichever thread asks: the process's parked threads where they are
    // free, else threads of this copy's own (the text and vision models upload side by side).
    let per = dst.len().div_ceil(threads);
    let shares = Mutex::new(dst.chunks_mut(per).enumerate());
    let work = || loop {
        let Some((t, share)) = shares.lock().unwrap_or_else(PoisonError::into_inner).next() else { break };
        copy_share(share, t * per);
    };
    if !Pool::global().try_run(threads, &work) {
        std::thread::scope(|s| {
            for _ in 1..threads {
                s.spawn(work);
            }
            work();
        });
    }
}

/// Writes into buffers through staging buffers, many copies per submission: a model's hundreds
/// of weights go up in a few submissions from two staging allocations (a staging buffer per
/// weight, each in a host block given back to the driver when it went, took 27 s for the 2B
/// model on NVIDIA's driver). A staging buffer is filled when it is full (or flushed), all its
/// pieces at once on several threads; while the device copies out of one (its submission
/// waited for on a thread of its own), the host fills the other. Mapped buffers are written in
/// place at once; an unmapped one has its bytes at the next `flush`.
pub struct Uploader<'a> {
    device: Device,
    /// Bytes each staging buffer is made for: at most `UPLOAD_CHUNK`.
    staging_bytes: u64,
    /// The slot being filled; its staging buffer's first `used` bytes are read by recorded
    /// copies, and are `pending`'s bytes, end to end, once it is submitted.
    filling: Option<Slot>,
    used: u64,
    pending: Vec<Piece<'a>>,
    /// The slot filled before, its copies running.
    running: Option<std::thread::JoinHandle<Result<Slot>>>,
    /// A slot whose copies are done.
    spare: Option<Slot>,
}

/// A staging buffer (made at its first write) and the command buffer whose copies read it.
struct Slot {
    staging: Option<Buffer>,
    cmd: CommandBuffer,
}

impl<'a> Uploader<'a> {
    /// An uploader for about `bytes` bytes of writes (they size its staging buffers).
    pub fn new(device: &Device, bytes: u64) -> Uploader<'a> {
        Uploader {
            device: device.clone(),
            staging_bytes: bytes.clamp(4, UPLOAD_CHUNK),
            filling: None,
            used: 0,
            pending: Vec::new(),
            running: None,
            spare: None,
        }
    }

    /// Copies `data` into `dst` at byte `offset`.
    pub fn write(&mut self, dst: &Buffer, offset: u64, data: &'a [u8]) -> Result<()> {
        self.write_stored(dst, offset, Stored::AsIs(data))
    }

    /// Copies `data` into `dst` at byte `offset` as the device stores it.
    pub fn write_stored(&mut self, dst: &Buffer, offset: u64, data: Stored<'a>) -> Result<()> {
        if dst.write_mapped(offset, data)? {
            return Ok(());
        }
        let mut done = 0;
        while done < data.len() {
            if self.used == self.staging_bytes {
                self.submit()?;
            }
            let (at, staging_bytes, device) = (self.used, self.staging_bytes, self.device.clone());
            let slot = self.slot()?;
            let staging = match &slot.staging {
                Some(s) => s.clone(),
                None => slot.staging.insert(device.staging(staging_bytes, "staging for an upload")?).clone(),
            };
            let n = (data.len() - done).min((staging_bytes - at) as usize);
            recording(&mut slot.cmd)?.copy(&staging, at, dst, offset + done as u64, n as u64)?;
            self.pending.push(Piece { bytes: data, from: done, len: n });
            self.used += n as u64;
            done += n;
        }
        Ok(())
    }

    /// Fills `dst` with zero bytes (at the next `flush`).
    pub fn clear(&mut self, dst: &Buffer) -> Result<()> {
        recording(&mut self.slot()?.cmd)?.fill(dst, 0)
    }

    /// Runs what was recorded and waits for it.
    pub fn flush(&mut self) -> Result<()> {
        self.submit()?;
        self.wait()
    }

    /// The slot being filled: the one before, or a spare, or a new one.
    fn slot(&mut self) -> Result<&mut Slot> {
        let slot = match (self.filling.take(), self.spare.take()) {
            (Some(s), spare) => {
                self.spare = spare;
                s
            }
            (None, Some(s)) => s,
            (None, None) => Slot { staging: None, cmd: CommandBuffer::new(&self.device)? },
        };
        Ok(self.filling.insert(slot))
    }

    /// Fills the staging buffer and starts the copies recorded so far, once those before them
    /// are done (one queue, in order).
    fn submit(&mut self) -> Result<()> {
        let used = std::mem::take(&mut self.used);
        let pending = std::mem::take(&mut self.pending);
        // Filled while the running copies still run: no submission reads this slot's staging
        // buffer (a spare's was waited for).
        if let Some(staging) = self.filling.as_ref().and_then(|slot| slot.staging.as_ref()) {
            staging.write_pieces(used, &pending)?;
        }
        self.wait()?;
        let Some(mut slot) = self.filling.take() else { return Ok(()) };
        if !slot.cmd.is_recording() {
            self.filling = Some(slot);
            return Ok(());
        }
        slot.cmd.finish()?;
        self.running = Some(std::thread::spawn(move || slot.cmd.submit_and_wait().map(|()| slot)));
        Ok(())
    }

    /// Waits for the running copies; their slot becomes the spare.
    fn wait(&mut self) -> Result<()> {
        if let Some(running) = self.running.take() {
            let slot = running.join().map_err(|_| VkError::Thread("an upload thread panicked".into()))??;
            self.spare = Some(slot);
        }
        Ok(())
    }
}

/// `cmd`, begun if it was not recording.
fn recording(cmd: &mut CommandBuffer) -> Result<&mut CommandBuffer> {
    if !cmd.is_recording() {
        cmd.begin()?;
    }
    Ok(cmd)
}

/// The bytes of `values`, each as `bytes` gives it: filled in place (a prompt's inputs are
/// megabytes; collecting a flat_map of them byte by byte took longer than the GPU's work).
fn le_bytes<T: Copy, const N: usize>(values: &[T], bytes: impl Fn(T) -> [u8; N]) -> Vec<u8> {
    let mut out = vec![0u8; values.len() * N];
    for (chunk, &v) in out.chunks_exact_mut(N).zip(values) {
        chunk.copy_from_slice(&bytes(v));
    }
    out
}

impl Drop for BufferInner {
    fn drop(&mut self) {
        // SAFETY: the last handle is gone, and command buffers hold handles to what they
        // use, so no recorded command refers to this buffer any more.
        unsafe { self.shared.raw.destroy_buffer(self.raw, None) };
        self.shared.allocator().free(&self.shared.raw, &self.alloc);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Pieces of every size, some empty, some crossing the threads' shares, land end to end.
    #[test]
    fn pieces_are_copied_end_to_end_across_the_threads_shares() {
        let sizes = [0, 1, 3 << 20, 0, 17, 1 << 20, 999_999, 2, 5 << 20];
        let data: Vec<Vec<u8>> = sizes
            .iter()
            .enumerate()
            .map(|(i, &n)| (0..n).map(|j| (i * 31 + j * 7 + j / 257) as u8).collect())
            .collect();
        let pieces: Vec<Piece> = data.iter().map(|d| Piece::whole(Stored::AsIs(d))).collect();
        let want: Vec<u8> = data.concat();
        assert!(want.len() >= PARALLEL_COPY, "several threads");
        let mut got = vec![0xAAu8; want.len()];
        copy_on_threads(&mut got, &pieces);
        assert!(got == want);
        // One piece, below the threads' threshold too.
        let mut small = vec![0u8; 100];
        copy_on_threads(&mut small, &[Piece { bytes: Stored::AsIs(&want), from: 5, len: 100 }]);
        assert_eq!(small, want[5..105]);
        // Weights stored by quads, cut into pieces (as staging buffers cut them) and across the
        // threads' shares: the same bytes as the whole.
        let quads: Vec<u8> = (0..840 * 5000).map(|j| (j * 13 + j / 211) as u8).collect();
        let mut whole = vec![0u8; quads.len()];
        Stored::Quads(&quads).copy_range(&mut whole, 0);
        let cuts = [0, 1_000_001, 2_500_000, quads.len()];
        let pieces: Vec<Piece> =
            cuts.windows(2).map(|c| Piece { bytes: Stored::Quads(&quads), from: c[0], len: c[1] - c[0] }).collect();
        let mut got = vec![0u8; quads.len()];
        copy_on_threads(&mut got, &pieces);
        assert!(got == whole && whole != quads);
        // From inside a job of the process's pool (busy then: the copy finds threads of its
        // own), on every thread that takes the job at once.
        let copies = Mutex::new(0);
        Pool::global().run(2, &|| {
            let mut got = vec![0u8; quads.len()];
            copy_on_threads(&mut got, &pieces);
            assert!(got == whole);
            *copies.lock().unwrap_or_else(PoisonError::into_inner) += 1;
        });
        assert!(*copies.lock().unwrap_or_else(PoisonError::into_inner) >= 1);
    }
}
