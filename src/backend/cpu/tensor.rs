//! Strided views that CPU kernels read and write: a buffer, a byte offset, ne and nb.

use crate::graph::MAX_DIMS;
use crate::quant::DType;

/// The bytes behind an input view.
#[derive(Clone, Copy)]
pub enum Data<'a> {
    /// f32 values (the arena, f32 run-time buffers).
    F32(&'a [f32]),
    /// i32 values (ids, positions).
    I32(&'a [i32]),
    /// Raw bytes of any dtype (weights in the model file).
    Bytes(&'a [u8]),
}

/// An input: `data` holds the value's bytes starting `offset` bytes in.
#[derive(Clone, Copy)]
pub struct In<'a> {
    pub data: Data<'a>,
    pub dtype: DType,
    pub offset: usize,
    pub ne: [usize; MAX_DIMS],
    pub nb: [usize; MAX_DIMS],
}

impl<'a> In<'a> {
    /// Byte offset of element (i0, i1, i2, i3) from the start of `data` (i0 in whole values
    /// for float types).
    #[inline]
    pub fn byte_at(&self, i: [usize; 4]) -> usize {
        self.offset + i[0] * self.nb[0] + i[1] * self.nb[1] + i[2] * self.nb[2] + i[3] * self.nb[3]
    }

    /// One f32-convertible element (f32, f16, bf16 data or f32 buffers).
    #[inline]
    pub fn f32_at(&self, i: [usize; 4]) -> f32 {
        let b = self.byte_at(i);
        match self.data {
            Data::F32(v) => v[b / 4],
            Data::I32(v) => v[b / 4] as f32,
            Data::Bytes(raw) => match self.dtype {
                DType::F16 => half::f16::from_le_bytes([raw[b], raw[b + 1]]).to_f32(),
                DType::BF16 => half::bf16::from_le_bytes([raw[b], raw[b + 1]]).to_f32(),
                _ => f32::from_le_bytes([raw[b], raw[b + 1], raw[b + 2], raw[b + 3]]),
            },
        }
    }

    #[inline]
    pub fn i32_at(&self, i: [usize; 4]) -> i32 {
        let b = self.byte_at(i);
        match self.data {
            Data::I32(v) => v[b / 4],
            Data::F32(v) => v[b / 4] as i32,
            Data::Bytes(raw) => i32::from_le_bytes([raw[b], raw[b + 1], raw[b + 2], raw[b + 3]]),
        }
    }

    /// A contiguous f32 row (i1, i2, i3) when the data is an f32 buffer with unit stride.
    #[inline]
    pub fn f32_row(&self, i1: usize, i2: usize, i3: usize) -> Option<&'a [f32]> {
        match self.data {
            Data::F32(v) if self.nb[0] == 4 => {
                let start = self.byte_at([0, i1, i2, i3]) / 4;
                v.get(start..start + self.ne[0])
            }
            _ => None,
        }
    }

    /// All rows, `ne[0]` values each, as one slice when the data is an f32 buffer holding them
    /// back to back (an axis of length 1 may have any stride: it is never stepped).
    pub fn f32_rows(&self) -> Option<&'a [f32]> {
        let Data::F32(v) = self.data else { return None };
        let mut packed = 4;
        let back_to_back = (0..4).all(|i| {
            let ok = self.ne[i] <= 1 || self.nb[i] == packed;
            packed *= self.ne[i];
            ok
        });
        let start = self.offset / 4;
        (back_to_back && self.offset.is_multiple_of(4)).then(|| v.get(start..start + packed / 4)).flatten()
    }

    /// The encoded bytes of row (i1, i2, i3) of a weight (any dtype, contiguous row).
    #[inline]
    pub fn row_bytes(&self, i1: usize, i2: usize, i3: usize) -> Option<&'a [u8]> {
        let len = self.dtype.row_bytes(self.ne[0] as u64)? as usize;
        match self.data {
            Data::Bytes(raw) => {
                let start = self.byte_at([0, i1, i2, i3]);
                raw.get(start..start + len)
            }
            _ => None,
        }
    }

    /// Row (i1, i2, i3) as f32 values, converted into `buf` unless it can be borrowed.
    pub fn row_f32<'b>(&self, i1: usize, i2: usize, i3: usize, buf: &'b mut Vec<f32>) -> &'b [f32]
    where
        'a: 'b,
    {
        if let Some(row) = self.f32_row(i1, i2, i3) {
            return row;
        }
        buf.clear();
        if let Some(bytes) = self.row_bytes(i1, i2, i3) {
            buf.resize(self.ne[0], 0.0);
            if crate::quant::dequantize_row(self.dtype, bytes, buf).is_ok() {
                return buf;
            }
            buf.clear();
        }
        buf.extend((0..self.ne[0]).map(|i0| self.f32_at([i0, i1, i2, i3])));
        buf
    }
}

/// An output: f32 elements written at `offset` bytes into `data` with strides `nb`.
pub struct Out<'a> {
    pub data: &'a mut [f32],
    pub offset: usize,
    pub ne: [usize; MAX_DIMS],
    pub nb: [usize; MAX_DIMS],
}

impl<'a> Out<'a> {
    #[inline]
    pub fn index(&self, i: [usize; 4]) -> usize {
        (self.offset + i[0] * self.nb[0] + i[1] * self.nb[1] + i[2] * self.nb[2] + i[3] * self.nb[3]) / 4
    }

    #[inline]
    pub fn set(&mut self, i: [usize; 4], x: f32) {
        let k = self.index(i);
        self.data[k] = x;
    }

    /// Number of rows (product of ne[1..]).
    pub fn n_rows(&self) -> usize {
        self.ne[1] * self.ne[2] * self.ne[3]
    }

    /// Whether rows are contiguous runs of ne[0] values.
    pub fn unit_stride(&self) -> bool {
        self.nb[0] == 4
    }
}

/// (i1, i2, i3) of flat row index r for shape ne.
#[inline]
pub fn row_coords(r: usize, ne: &[usize; MAX_DIMS]) -> (usize, usize, usize) {
    let i1 = r % ne[1];
    let i2 = (r / ne[1]) % ne[2];
    let i3 = r / (ne[1] * ne[2]);
    (i1, i2, i3)
}
