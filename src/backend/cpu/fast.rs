//! Fast CPU kernels: threads over rows, contiguous inner loops the compiler vectorizes, dot
//! products on quantized blocks without dequantizing whole matrices. Each returns None when
//! its layout preconditions do not hold, and the reference kernel runs instead.

use super::reference;
use super::tensor::{In, Out};
use super::KernelError;
use crate::graph::Op;
use crate::quant::{self, DType};

pub fn execute(op: &Op, ins: &[In], out: &mut Out, threads: usize) -> Option<Result<(), KernelError>> {
    match op {
        Op::MatMul => matmul(ins.first()?, ins.get(1)?, out, threads),
        Op::Attention { scale } => attention(ins.first()?, ins.get(1)?, ins.get(2)?, ins.get(3), *scale, out, threads),
        Op::RmsNorm { eps } => rms_norm(ins.first()?, ins.get(1)?, *eps, out),
        _ => None,
    }
}

/// Out is a plain [ne0, rows] matrix: rows ne0 apart, unit stride. The stride of an axis of
/// length 1 is never used, so it does not matter (a dynamic axis run below its planned maximum
/// leaves the planned strides on the axes above it).
fn out_is_matrix(out: &Out) -> bool {
    let mut packed = 4;
    out.nb[0] == 4
        && (1..4).all(|i| {
            packed *= out.ne[i - 1];
            out.ne[i] <= 1 || out.nb[i] == packed
        })
}

/// Splits `n` items into at most `threads` contiguous ranges and runs `f` on each in parallel,
/// with the matching chunk of `data` (`stride` elements per item).
fn par_chunks<F>(data: &mut [f32], n: usize, stride: usize, threads: usize, f: F)
where
    F: Fn(std::ops::Range<usize>, &mut [f32]) + Sync,
{
    let threads = threads.clamp(1, n.max(1));
    let per = n.div_ceil(threads);
    if threads == 1 || n < 2 {
        f(0..n, &mut data[..n * stride]);
        return;
    }
    std::thread::scope(|s| {
        for (t, chunk) in data[..n * stride].chunks_mut(per * stride).enumerate() {
            let f = &f;
            let start = t * per;
            let end = (start + per).min(n);
            s.spawn(move || f(start..end, chunk));
        }
    });
}

fn matmul(w: &In, x: &In, out: &mut Out, threads: usize) -> Option<Result<(), KernelError>> {
    let (k, n_out) = (w.ne[0], w.ne[1]);
    if !out_is_matrix(out) || w.ne[2] != 1 || w.ne[3] != 1 {
        return None;
    }
    let m_total = out.n_rows();
    // Gather activations as contiguous f32 rows once.
    let mut xs = Vec::with_capacity(m_total * k);
    let mut buf = Vec::new();
    for m in 0..m_total {
        let (i1, i2, i3) = super::tensor::row_coords(m, &x.ne);
        xs.extend_from_slice(x.row_f32(i1, i2, i3, &mut buf));
    }
    let rows: Vec<&[u8]> = (0..n_out).map(|n| w.row_bytes(n, 0, 0)).collect::<Option<_>>()?;
    let dtype = w.dtype;
    let data = &mut out.data[out.offset / 4..];
    // Each activation row is quantized once (Q8_0 / Q8_K, as llama.cpp does) for formats with
    // an integer dot product; float weights dot the f32 row directly.
    let prepared: Vec<Activation> = match xs.chunks(k.max(1)).take(m_total).map(|xrow| Activation::new(dtype, xrow)).collect() {
        Ok(p) => p,
        Err(e) => return Some(Err(e)),
    };
    if m_total >= threads {
        par_chunks(data, m_total, n_out, threads, |range, chunk| {
            for (m, out_row) in range.zip(chunk.chunks_mut(n_out)) {
                for (o, row) in out_row.iter_mut().zip(&rows) {
                    *o = prepared[m].dot(dtype, row);
                }
            }
        });
    } else {
        for (m, act) in prepared.iter().enumerate() {
            let out_row = &mut data[m * n_out..(m + 1) * n_out];
            par_chunks(out_row, n_out, 1, threads, |range, chunk| {
                for (o, row) in chunk.iter_mut().zip(&rows[range]) {
                    *o = act.dot(dtype, row);
                }
            });
        }
    }
    Some(Ok(()))
}

/// An activation row ready for dot products with weight rows of one dtype.
enum Activation<'a> {
    F32(&'a [f32]),
    Quantized(quant::ActivationQ),
}

impl<'a> Activation<'a> {
    fn new(dtype: DType, x: &'a [f32]) -> Result<Activation<'a>, KernelError> {
        if quant::activation_dtype(dtype).is_none() {
            return Ok(Activation::F32(x));
        }
        quant::quantize_activation(dtype, x).map(Activation::Quantized).map_err(|e| KernelError(e.to_string()))
    }

    /// Row and activation lengths were checked when the rows were sliced (`row_bytes` of
    /// ne0) and gathered (ne0 values), so the dot products cannot fail on length; NaN would
    /// mark a broken invariant rather than hide it.
    fn dot(&self, dtype: DType, row: &[u8]) -> f32 {
        match self {
            Activation::F32(x) => quant::vec_dot_f32(dtype, row, x).unwrap_or(f32::NAN),
            Activation::Quantized(q) => quant::vec_dot_quantized(dtype, row, q).unwrap_or(f32::NAN),
        }
    }
}

fn rms_norm(x: &In, weight: &In, eps: f32, out: &mut Out) -> Option<Result<(), KernelError>> {
    if !out_is_matrix(out) {
        return None;
    }
    let n = x.ne[0];
    let mut wbuf = Vec::new();
    let w = weight.row_f32(0, 0, 0, &mut wbuf).to_vec();
    let n_rows = out.n_rows();
    let data = &mut out.data[out.offset / 4..];
    let mut xbuf = Vec::new();
    for r in 0..n_rows {
        let (i1, i2, i3) = super::tensor::row_coords(r, &x.ne);
        let xs = x.row_f32(i1, i2, i3, &mut xbuf);
        let ss: f32 = xs.iter().map(|v| v * v).sum();
        let scale = 1.0 / (ss / n as f32 + eps).sqrt();
        for ((o, &v), &g) in data[r * n..(r + 1) * n].iter_mut().zip(xs).zip(&w) {
            *o = v * scale * g;
        }
    }
    Some(Ok(()))
}

/// One query row against its kv head: online softmax over contiguous K/V rows.
fn attend(q: &[f32], k: &In, v: &In, kh: usize, n_kv: usize, scale: f32, out: &mut [f32], kbuf: &mut Vec<f32>, vbuf: &mut Vec<f32>) {
    let d = q.len();
    let mut max = f32::NEG_INFINITY;
    let mut total = 0f32;
    out.iter_mut().for_each(|o| *o = 0.0);
    for j in 0..n_kv {
        let krow = k.row_f32(kh, j, 0, kbuf);
        let s = q.iter().zip(krow).map(|(a, b)| a * b).sum::<f32>() * scale;
        let vrow = v.row_f32(kh, j, 0, vbuf);
        if s > max {
            let correction = (max - s).exp();
            total *= correction;
            out.iter_mut().for_each(|o| *o *= correction);
            max = s;
        }
        let p = (s - max).exp();
        total += p;
        for (o, &vv) in out.iter_mut().zip(&vrow[..d]) {
            *o += p * vv;
        }
    }
    let inv = 1.0 / total;
    out.iter_mut().for_each(|o| *o *= inv);
}

fn attention(q: &In, k: &In, v: &In, slots: Option<&In>, scale: f32, out: &mut Out, threads: usize) -> Option<Result<(), KernelError>> {
    if !out_is_matrix(out) || k.dtype != DType::F32 && k.dtype != DType::F16 {
        return None;
    }
    let (d, n_head, n_q) = (q.ne[0], q.ne[1], q.ne[2]);
    let group = n_head / k.ne[1];
    let mut kv_len = Vec::with_capacity(n_q);
    for t in 0..n_q {
        kv_len.push(match slots {
            Some(s) => match reference::row_id(s.i32_at([t, 0, 0, 0]), k.ne[2], "kv slot") {
                Ok(r) => r + 1,
                Err(e) => return Some(Err(e)),
            },
            None => k.ne[2],
        });
    }
    let data = &mut out.data[out.offset / 4..];
    // Work items are (token, head) rows of the output.
    par_chunks(data, n_q * n_head, d, threads, |range, chunk| {
        let (mut qbuf, mut kbuf, mut vbuf) = (Vec::new(), Vec::new(), Vec::new());
        for (item, o) in range.zip(chunk.chunks_mut(d)) {
            let (t, h) = (item / n_head, item % n_head);
            let qrow = q.row_f32(h, t, 0, &mut qbuf).to_vec();
            attend(&qrow, k, v, h / group, kv_len[t], scale, o, &mut kbuf, &mut vbuf);
        }
    });
    Some(Ok(()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_below_the_planned_maximum_are_still_a_matrix() {
        let mut data = vec![0f32; 64];
        let mut out = |ne, nb| out_is_matrix(&Out { data: &mut data, offset: 0, ne, nb });
        // [8, 3] of a plan for [8, 10]: axes 2 and 3 keep the planned strides.
        assert!(out([8, 3, 1, 1], [4, 32, 320, 320]));
        // [4, 2, 3] of a plan for [4, 2, 10].
        assert!(out([4, 2, 3, 1], [4, 16, 32, 320]));
        // Rows not packed: a strided window, or planes apart by the planned row count.
        assert!(!out([8, 3, 1, 1], [4, 64, 192, 192]));
        assert!(!out([8, 3, 2, 1], [4, 32, 320, 640]));
        assert!(!out([8, 3, 1, 1], [8, 64, 192, 192]));
    }
}
