//! Which dispatch must wait for the ones before it. Dispatches recorded with no barrier
//! between them may run at the same time, in any order; a barrier is only needed before a
//! dispatch that reads bytes a pending dispatch writes (read after write), or writes bytes a
//! pending dispatch reads or writes (write after read, write after write: the arena gives the
//! bytes of dead values to new ones). `Hazards` holds the byte ranges read and written since
//! the last barrier, per buffer (buffers compared by their Vulkan handle).

use crate::graph::{Value, MAX_DIMS};
use ash::vk;
use std::ops::Range;

/// Bytes `range` of `buffer`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Access {
    pub buffer: vk::Buffer,
    pub range: Range<u64>,
}

impl Access {
    /// The bytes value `v` spans at byte `offset` of `buffer`; the rest of the buffer from
    /// `offset` on when its span cannot be worked out (assume the worst).
    pub fn of_value(buffer: vk::Buffer, offset: usize, v: &Value) -> Access {
        let start = offset as u64;
        let end = span(v).and_then(|s| start.checked_add(s)).unwrap_or(u64::MAX);
        Access { buffer, range: start..end }
    }

    fn overlaps(&self, other: &Access) -> bool {
        // Empty ranges touch nothing; adjacent ranges ([a, b) and [b, c)) share no byte.
        let (a, b) = (&self.range, &other.range);
        self.buffer == other.buffer && !a.is_empty() && !b.is_empty() && a.start < b.end && b.start < a.end
    }
}

/// Bytes from a value's first byte to one past its last, at its maximal shape (a run-time
/// shape touches a subset), for any strides: transposed and permuted views step through
/// memory along axis 0 by `nb[0]`, not the element size. None when the shape does not
/// divide into whole blocks or the sum overflows.
pub fn span(v: &Value) -> Option<u64> {
    if v.ne.contains(&0) {
        return Some(0);
    }
    let (block_len, block_bytes) = (v.dtype.block_len(), v.dtype.block_bytes());
    if block_len == 0 || !v.ne[0].is_multiple_of(block_len) {
        return None;
    }
    let mut last = ((v.ne[0] / block_len - 1) as u64).checked_mul(v.nb[0] as u64)?;
    for i in 1..MAX_DIMS {
        last = last.checked_add(((v.ne[i] - 1) as u64).checked_mul(v.nb[i] as u64)?)?;
    }
    last.checked_add(block_bytes as u64)
}

/// The accesses of dispatches recorded since the last barrier.
#[derive(Default)]
pub struct Hazards {
    reads: Vec<Access>,
    writes: Vec<Access>,
}

impl Hazards {
    pub fn record_read(&mut self, a: Access) {
        self.reads.push(a);
    }

    pub fn record_write(&mut self, a: Access) {
        self.writes.push(a);
    }

    /// Whether a dispatch making these accesses must wait for the pending ones.
    pub fn needs_barrier(&self, reads: &[Access], writes: &[Access]) -> bool {
        let raw = reads.iter().any(|r| self.writes.iter().any(|w| w.overlaps(r)));
        let war_waw = writes.iter().any(|w| self.reads.iter().chain(&self.writes).any(|p| p.overlaps(w)));
        raw || war_waw
    }

    /// A barrier was recorded: nothing is pending.
    pub fn clear(&mut self) {
        self.reads.clear();
        self.writes.clear();
    }

    /// Counts a dispatch making these accesses as pending; true when a barrier must be
    /// recorded before it (the accesses before that barrier are then no longer pending).
    pub fn access(&mut self, reads: Vec<Access>, writes: Vec<Access>) -> bool {
        let barrier = self.needs_barrier(&reads, &writes);
        if barrier {
            self.clear();
        }
        reads.into_iter().for_each(|a| self.record_read(a));
        writes.into_iter().for_each(|a| self.record_write(a));
        barrier
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quant::DType;
    use ash::vk::Handle;

    fn at(buffer: u64, range: Range<u64>) -> Access {
        Access { buffer: vk::Buffer::from_raw(buffer), range }
    }

    /// Pending: buffer 1 written at [100, 200), read at [300, 400).
    fn pending() -> Hazards {
        let mut h = Hazards::default();
        h.record_write(at(1, 100..200));
        h.record_read(at(1, 300..400));
        h
    }

    #[test]
    fn reading_bytes_a_pending_dispatch_writes_needs_a_barrier() {
        let h = pending();
        assert!(h.needs_barrier(&[at(1, 150..160)], &[]));
        assert!(h.needs_barrier(&[at(1, 0..101)], &[]), "one byte of overlap");
        assert!(h.needs_barrier(&[at(1, 199..250)], &[]), "one byte of overlap");
        assert!(h.needs_barrier(&[at(1, 0..1000)], &[]), "a range around the write");
    }

    #[test]
    fn adjacent_and_disjoint_ranges_do_not() {
        let h = pending();
        assert!(!h.needs_barrier(&[at(1, 0..100)], &[]), "ends where the write starts");
        assert!(!h.needs_barrier(&[at(1, 200..300)], &[]), "starts where the write ends");
        assert!(!h.needs_barrier(&[at(1, 500..600)], &[at(1, 400..500)]));
        assert!(!h.needs_barrier(&[at(1, 150..150)], &[at(1, 350..350)]), "empty ranges");
    }

    #[test]
    fn reads_after_reads_do_not() {
        let h = pending();
        assert!(!h.needs_barrier(&[at(1, 300..400), at(1, 350..360)], &[]));
    }

    #[test]
    fn other_buffers_do_not_conflict() {
        let h = pending();
        assert!(!h.needs_barrier(&[at(2, 100..200)], &[at(2, 300..400), at(2, 100..200)]));
    }

    #[test]
    fn writing_bytes_a_pending_dispatch_reads_needs_a_barrier() {
        assert!(pending().needs_barrier(&[], &[at(1, 399..500)]));
    }

    #[test]
    fn writing_bytes_a_pending_dispatch_writes_needs_a_barrier() {
        assert!(pending().needs_barrier(&[], &[at(1, 0..101)]));
    }

    #[test]
    fn a_barrier_clears_every_hazard() {
        let mut h = pending();
        h.clear();
        assert!(!h.needs_barrier(&[at(1, 0..1000)], &[at(1, 0..1000)]));
    }

    /// Random dispatches over two small buffers: every pair in conflict (one writes bytes
    /// the other reads or writes) has a barrier between them; and some pairs share a batch.
    #[test]
    fn every_conflicting_pair_is_separated_by_a_barrier() {
        let mut rng = crate::rng::SplitMix64(5);
        let range = |rng: &mut crate::rng::SplitMix64| {
            let start = rng.next_u64() % 64;
            at(1 + rng.next_u64() % 2, start..start + rng.next_u64() % 16)
        };
        let mut shared = 0;
        for _ in 0..200 {
            let n = 12;
            let ops: Vec<(Vec<Access>, Vec<Access>)> = (0..n)
                .map(|_| {
                    (
                        (0..rng.next_u64() % 3).map(|_| range(&mut rng)).collect(),
                        (0..rng.next_u64() % 2).map(|_| range(&mut rng)).collect(),
                    )
                })
                .collect();
            let mut h = Hazards::default();
            let barrier_before: Vec<bool> = ops.iter().map(|(r, w)| h.access(r.clone(), w.clone())).collect();
            for j in 0..n {
                for i in 0..j {
                    let ((ri, wi), (rj, wj)) = (&ops[i], &ops[j]);
                    let any = |a: &[Access], b: &[Access]| a.iter().any(|x| b.iter().any(|y| x.overlaps(y)));
                    let conflict = any(wi, rj) || any(wi, wj) || any(ri, wj);
                    let separated = barrier_before[i + 1..=j].contains(&true);
                    assert!(separated || !conflict, "ops {i} and {j} conflict with no barrier between: {ops:?}");
                    shared += usize::from(!separated);
                }
            }
        }
        assert!(shared > 0, "no two dispatches ever shared a batch");
    }

    #[test]
    fn contiguous_values_span_their_bytes() {
        let v = Value::contiguous(DType::F32, [10, 3, 1, 1]);
        assert_eq!(span(&v), Some(120));
        // Q4_K rows of 256 values are 144-byte blocks.
        assert_eq!(span(&Value::contiguous(DType::Q4K, [512, 2, 1, 1])), Some(4 * 144));
        assert_eq!(span(&Value::contiguous(DType::F32, [10, 0, 1, 1])), Some(0));
    }

    #[test]
    fn a_transposed_view_spans_the_bytes_of_its_source() {
        // f32 [4, 3] transposed: ne [3, 4], nb [16, 4]; its last element is at byte 44.
        let mut v = Value::contiguous(DType::F32, [4, 3, 1, 1]);
        v.ne.swap(0, 1);
        v.nb.swap(0, 1);
        assert_eq!(span(&v), Some(48));
        // A strided view: every other row of 8 floats, 5 rows.
        let mut w = Value::contiguous(DType::F32, [8, 5, 1, 1]);
        w.nb[1] = 64;
        assert_eq!(span(&w), Some(4 * 64 + 32));
    }

    #[test]
    fn an_unknown_span_reaches_the_end_of_the_buffer() {
        // 100 values of a 256-value block type: not whole blocks.
        let mut v = Value::contiguous(DType::F32, [4, 1, 1, 1]);
        v.dtype = DType::Q4K;
        v.ne[0] = 100;
        assert_eq!(span(&v), None);
        let a = Access::of_value(vk::Buffer::from_raw(1), 64, &v);
        assert_eq!(a.range, 64..u64::MAX);
    }
}
