//! The common shape of every block format once its bit fields are unpacked, and the
//! dispatch from a [`DType`] to the unpacker of its blocks.
//!
//! All ten quantized formats reduce to: `S` sub-blocks of `N / S` values, each with an
//! integer scale and min, one f32 `d` and `dmin` per block, and a signed integer quant per
//! value. Dequantization, the exact f32 dot and the integer dot are then written once.

use super::{kquants, legacy, DType};

/// One block, unpacked. Value `i` of sub-block `j` is
/// `(d * scale[j]) * q[i] - (dmin * min[j])`, evaluated in f32 in exactly that order:
/// that is the order of gguf-py's dequantizers, so the results are bit-identical to them.
/// Formats without a min have `dmin == 0.0` and `min == 0`; subtracting `+0.0` changes no
/// f32 value (not even `-0.0`).
pub(crate) struct Unpacked<const N: usize, const S: usize> {
    pub d: f32,
    pub dmin: f32,
    pub scale: [i32; S],
    pub min: [i32; S],
    pub q: [i8; N],
}

impl<const N: usize, const S: usize> Unpacked<N, S> {
    pub const SUB: usize = N / S;

    pub fn new() -> Self {
        Unpacked { d: 0.0, dmin: 0.0, scale: [0; S], min: [0; S], q: [0; N] }
    }

    pub fn dequantize(&self, out: &mut [f32; N]) {
        let subs = self.q.chunks_exact(Self::SUB).zip(out.chunks_exact_mut(Self::SUB));
        for ((q, out), (&scale, &min)) in subs.zip(self.scale.iter().zip(&self.min)) {
            let dl = self.d * scale as f32;
            let ml = self.dmin * min as f32;
            for (o, &v) in out.iter_mut().zip(q) {
                *o = dl * f32::from(v) - ml;
            }
        }
    }
}

/// Something to do with the blocks of one format, given its unpacker: a function from the
/// `B` bytes of a block to its [`Unpacked`] form. Generic over the unpacker's type, so each
/// format gets its own monomorphized, fully inlined loop.
pub(crate) trait BlockVisitor {
    type Output;
    fn visit<const B: usize, const N: usize, const S: usize>(
        self,
        unpack: impl Fn(&[u8; B], &mut Unpacked<N, S>),
    ) -> Self::Output;
}

/// Runs `v` with the unpacker of `dtype`; `None` for the float formats and Q8_K, which
/// have no blocks of this shape.
pub(crate) fn visit_blocks<V: BlockVisitor>(dtype: DType, v: V) -> Option<V::Output> {
    Some(match dtype {
        DType::Q4_0 => v.visit(legacy::unpack_q4_0),
        DType::Q4_1 => v.visit(legacy::unpack_q4_1),
        DType::Q5_0 => v.visit(legacy::unpack_q5_0),
        DType::Q5_1 => v.visit(legacy::unpack_q5_1),
        DType::Q8_0 => v.visit(legacy::unpack_q8_0),
        DType::Q2K => v.visit(kquants::unpack_q2_k),
        DType::Q3K => v.visit(kquants::unpack_q3_k),
        DType::Q4K => v.visit(kquants::unpack_q4_k),
        DType::Q5K => v.visit(kquants::unpack_q5_k),
        DType::Q6K => v.visit(kquants::unpack_q6_k),
        DType::F32 | DType::F16 | DType::BF16 | DType::Q8K | DType::I32 => return None,
    })
}

/// Writes `q = (lo | hi << lo_bits) - offset` for each value: the last step of every
/// unpacker. `hi` may be empty (no high bits).
pub(crate) fn set_quants(q: &mut [i8], lo: &[u8], hi: &[u8], lo_bits: u32, offset: i8) {
    if hi.is_empty() {
        for (q, &l) in q.iter_mut().zip(lo) {
            *q = (l as i8).wrapping_sub(offset);
        }
    } else {
        for ((q, &l), &h) in q.iter_mut().zip(lo).zip(hi) {
            *q = ((l | h << lo_bits) as i8).wrapping_sub(offset);
        }
    }
}
