//! Reference kernels: one plain loop nest per op, element by element through the strides,
//! accumulating in f64 where a sum is long. Obviously right first; `fast` is checked against
//! these.

use super::tensor::{In, Out};
use super::KernelError;
use crate::graph::{Gelu, RopeKind};

fn each_index(ne: [usize; 4], mut f: impl FnMut([usize; 4])) {
    for i3 in 0..ne[3] {
        for i2 in 0..ne[2] {
            for i1 in 0..ne[1] {
                for i0 in 0..ne[0] {
                    f([i0, i1, i2, i3]);
                }
            }
        }
    }
}

fn each_row(ne: [usize; 4], mut f: impl FnMut(usize, usize, usize)) {
    for i3 in 0..ne[3] {
        for i2 in 0..ne[2] {
            for i1 in 0..ne[1] {
                f(i1, i2, i3);
            }
        }
    }
}

/// Checks a row id against the table size.
pub fn row_id(id: i32, n_rows: usize, what: &str) -> Result<usize, KernelError> {
    usize::try_from(id)
        .ok()
        .filter(|&r| r < n_rows)
        .ok_or_else(|| KernelError::Fault(format!("{what} {id} out of range 0..{n_rows}")))
}

pub fn get_rows(table: &In, ids: &In, out: &mut Out) -> Result<(), KernelError> {
    let mut buf = Vec::new();
    for r in 0..out.ne[1] {
        let row = row_id(ids.i32_at([r, 0, 0, 0]), table.ne[1], "row id")?;
        let values = table.row_f32(row, 0, 0, &mut buf);
        for (i0, &x) in values.iter().enumerate() {
            out.set([i0, r, 0, 0], x);
        }
    }
    Ok(())
}

pub fn get_rows_weighted(table: &In, ids: &In, weights: &In, out: &mut Out) -> Result<(), KernelError> {
    let mut buf = Vec::new();
    for p in 0..out.ne[1] {
        let mut acc = vec![0f64; out.ne[0]];
        for k in 0..ids.ne[0] {
            let row = row_id(ids.i32_at([k, p, 0, 0]), table.ne[1], "row id")?;
            let w = f64::from(weights.f32_at([k, p, 0, 0]));
            for (a, &x) in acc.iter_mut().zip(table.row_f32(row, 0, 0, &mut buf)) {
                *a += w * f64::from(x);
            }
        }
        for (i0, a) in acc.into_iter().enumerate() {
            out.set([i0, p, 0, 0], a as f32);
        }
    }
    Ok(())
}

pub fn set_rows(src: &In, ids: &In, out: &mut Out) -> Result<(), KernelError> {
    for r in 0..src.ne[1] {
        let slot = row_id(ids.i32_at([r, 0, 0, 0]), out.ne[1], "slot")?;
        for i0 in 0..src.ne[0] {
            out.set([i0, slot, 0, 0], src.f32_at([i0, r, 0, 0]));
        }
    }
    Ok(())
}

pub fn matmul(w: &In, x: &In, out: &mut Out) {
    let mut wbuf = Vec::new();
    each_row(out.ne, |m, i2, i3| {
        let xs: Vec<f32> = (0..x.ne[0]).map(|k| x.f32_at([k, m, i2, i3])).collect();
        for n in 0..out.ne[0] {
            let wrow = w.row_f32(n, 0, 0, &mut wbuf);
            let dot: f64 = wrow.iter().zip(&xs).map(|(&a, &b)| f64::from(a) * f64::from(b)).sum();
            out.set([n, m, i2, i3], dot as f32);
        }
    });
}

pub fn binary(a: &In, b: &In, out: &mut Out, f: impl Fn(f32, f32) -> f32) {
    each_index(out.ne, |i| {
        let j = [i[0] % b.ne[0], i[1] % b.ne[1], i[2] % b.ne[2], i[3] % b.ne[3]];
        out.set(i, f(a.f32_at(i), b.f32_at(j)));
    });
}

pub fn rms_norm(x: &In, weight: &In, eps: f32, out: &mut Out) {
    each_row(out.ne, |i1, i2, i3| {
        let n = x.ne[0];
        let ss: f64 = (0..n).map(|i0| f64::from(x.f32_at([i0, i1, i2, i3])).powi(2)).sum();
        let scale = 1.0 / (ss / n as f64 + f64::from(eps)).sqrt();
        for i0 in 0..n {
            let y = f64::from(x.f32_at([i0, i1, i2, i3])) * scale * f64::from(weight.f32_at([i0, 0, 0, 0]));
            out.set([i0, i1, i2, i3], y as f32);
        }
    });
}

pub fn layer_norm(x: &In, weight: &In, bias: &In, eps: f32, out: &mut Out) {
    let n = x.ne[0];
    each_row(out.ne, |i1, i2, i3| {
        layer_norm_row(
            n,
            |i0| x.f32_at([i0, i1, i2, i3]),
            |i0| (weight.f32_at([i0, 0, 0, 0]), bias.f32_at([i0, 0, 0, 0])),
            eps,
            |i0, y| out.set([i0, i1, i2, i3], y),
        );
    });
}

/// One row of [`layer_norm`]: value `i` of the row is `x(i)`, its weight and bias `wb(i)`;
/// `set(i, y)` takes each output. In f64; the fast kernel calls it too (the same values).
#[inline(always)]
pub fn layer_norm_row(
    n: usize,
    x: impl Fn(usize) -> f32,
    wb: impl Fn(usize) -> (f32, f32),
    eps: f32,
    mut set: impl FnMut(usize, f32),
) {
    let get = |i| f64::from(x(i));
    let mean = (0..n).map(get).sum::<f64>() / n as f64;
    let var = (0..n).map(|i| (get(i) - mean).powi(2)).sum::<f64>() / n as f64;
    let inv = 1.0 / (var + f64::from(eps)).sqrt();
    for i in 0..n {
        let (w, b) = wb(i);
        set(i, ((get(i) - mean) * inv * f64::from(w) + f64::from(b)) as f32);
    }
}

/// For rotary frequency `j` of `n_dims / 2`: which position component it turns with, and its
/// inverse frequency.
pub fn rope_frequency(kind: &RopeKind, theta: f32, n_dims: usize, j: usize) -> (usize, f64) {
    let theta = f64::from(theta);
    match kind {
        RopeKind::MropeInterleaved { sections } => {
            let comp = if j % 3 == 1 && j < 3 * sections[1] {
                1
            } else if j % 3 == 2 && j < 3 * sections[2] {
                2
            } else {
                0
            };
            (comp, theta.powf(-2.0 * j as f64 / n_dims as f64))
        }
        RopeKind::Axial2d => {
            let quarter = n_dims / 4;
            let (comp, jj) = if j < quarter { (0, j) } else { (1, j - quarter) };
            (comp, theta.powf(-2.0 * jj as f64 / (n_dims / 2) as f64))
        }
    }
}

pub fn rope(x: &In, pos: &In, kind: &RopeKind, theta: f32, n_dims: usize, out: &mut Out) {
    let half = n_dims / 2;
    let freqs: Vec<(usize, f64)> = (0..half).map(|j| rope_frequency(kind, theta, n_dims, j)).collect();
    // Every head of a token turns by the same angles: (sin, cos) per pair, for token `at`.
    let mut trig = vec![(0f64, 0f64); half];
    let mut at = None;
    each_row(out.ne, |h, t, i3| {
        if at != Some(t) {
            for (tj, &(comp, inv_freq)) in trig.iter_mut().zip(&freqs) {
                *tj = (f64::from(pos.i32_at([t, comp, 0, 0])) * inv_freq).sin_cos();
            }
            at = Some(t);
        }
        for (j, &(sin, cos)) in trig.iter().enumerate() {
            let a = f64::from(x.f32_at([j, h, t, i3]));
            let b = f64::from(x.f32_at([j + half, h, t, i3]));
            out.set([j, h, t, i3], (a * cos - b * sin) as f32);
            out.set([j + half, h, t, i3], (b * cos + a * sin) as f32);
        }
        for i0 in n_dims..x.ne[0] {
            out.set([i0, h, t, i3], x.f32_at([i0, h, t, i3]));
        }
    });
}

pub fn silu(x: f32) -> f32 {
    x / (1.0 + (-x).exp())
}

/// erf with |error| < 1.2e-7 (Numerical Recipes' erfc Chebyshev fit), in f64.
pub fn erf(x: f64) -> f64 {
    let z = x.abs();
    let t = 1.0 / (1.0 + 0.5 * z);
    let poly = -z * z - 1.26551223
        + t * (1.00002368
            + t * (0.37409196
                + t * (0.09678418
                    + t * (-0.18628806
                        + t * (0.27886807
                            + t * (-1.13520398 + t * (1.48851587 + t * (-0.82215223 + t * 0.17087277))))))));
    let erfc = t * poly.exp();
    if x >= 0.0 {
        1.0 - erfc
    } else {
        erfc - 1.0
    }
}

pub fn gelu(kind: Gelu, x: f32) -> f32 {
    let x = f64::from(x);
    let y = match kind {
        Gelu::Tanh => 0.5 * x * (1.0 + ((2.0 / std::f64::consts::PI).sqrt() * (x + 0.044715 * x * x * x)).tanh()),
        Gelu::Erf => 0.5 * x * (1.0 + erf(x / std::f64::consts::SQRT_2)),
    };
    y as f32
}

pub fn unary(x: &In, out: &mut Out, f: impl Fn(f32) -> f32) {
    each_index(out.ne, |i| out.set(i, f(x.f32_at(i))));
}

/// Index of the largest value (the first of equal ones, as argmax in torch; NaN is never the
/// largest; 0 when every value is NaN).
pub fn argmax(logits: &[f32]) -> usize {
    // Two passes the compiler vectorizes (a batched step takes the argmax of a 151,936-wide
    // row per sequence: one pass tracking indices does not vectorize and took 7x as long):
    // the maximum over 16 lanes, then the first block holding it.
    const LANES: usize = 16;
    let mut lanes = [f32::NEG_INFINITY; LANES];
    let mut blocks = logits.chunks_exact(LANES);
    for block in &mut blocks {
        for (m, &x) in lanes.iter_mut().zip(block) {
            *m = if x > *m { x } else { *m };
        }
    }
    let max = blocks.remainder().iter().chain(&lanes).fold(f32::NEG_INFINITY, |m, &x| if x > m { x } else { m });
    let first = |xs: &[f32]| xs.iter().position(|&x| x == max);
    let mut blocks = logits.chunks_exact(LANES);
    for (b, block) in (&mut blocks).enumerate() {
        if block.iter().fold(false, |hit, &x| hit | (x == max)) {
            return b * LANES + first(block).unwrap_or(0);
        }
    }
    first(blocks.remainder()).map_or(0, |i| logits.len() - blocks.remainder().len() + i)
}

/// ARGMAX: the index of each row's largest value ([`argmax`]), as an f32.
pub fn argmax_rows(x: &In, out: &mut Out) {
    let mut buf = Vec::new();
    each_row(out.ne, |i1, i2, i3| {
        let at = argmax(x.row_f32(i1, i2, i3, &mut buf));
        out.set([0, i1, i2, i3], at as f32);
    });
}

/// The kv rows `first..end` query `t` sees: with slots, those of its sequence (`segment` rows
/// each) up to its own slot, or with `segment` 0 its span; without, all of them.
pub fn kv_range(
    slots: Option<&In>,
    t: usize,
    n_kv: usize,
    segment: usize,
) -> Result<std::ops::Range<usize>, KernelError> {
    match slots {
        Some(s) if segment == 0 => {
            let (first, end) = (s.i32_at([0, t, 0, 0]), s.i32_at([1, t, 0, 0]));
            match (usize::try_from(first), usize::try_from(end)) {
                (Ok(first), Ok(end)) if first < end && end <= n_kv => Ok(first..end),
                _ => Err(KernelError::Fault(format!(
                    "attention span {first}..{end} of query {t} is not within {n_kv} kv rows"
                ))),
            }
        }
        Some(s) => {
            let slot = row_id(s.i32_at([t, 0, 0, 0]), n_kv, "kv slot")?;
            Ok(slot - slot % segment..slot + 1)
        }
        None => Ok(0..n_kv),
    }
}

/// q: [d, n_head, n_q], k/v: [d, n_kv_head, n_kv]; causal through `slots` when given.
pub fn attention(
    q: &In,
    k: &In,
    v: &In,
    slots: Option<&In>,
    scale: f32,
    segment: usize,
    out: &mut Out,
) -> Result<(), KernelError> {
    let (d, n_head, n_q) = (q.ne[0], q.ne[1], q.ne[2]);
    let group = n_head / k.ne[1];
    for t in 0..n_q {
        let rows = kv_range(slots, t, k.ne[2], segment)?;
        for h in 0..n_head {
            let kh = h / group;
            let scores: Vec<f64> = rows
                .clone()
                .map(|j| {
                    (0..d).map(|i| f64::from(q.f32_at([i, h, t, 0])) * f64::from(k.f32_at([i, kh, j, 0]))).sum::<f64>()
                        * f64::from(scale)
                })
                .collect();
            let max = scores.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            let weights: Vec<f64> = scores.iter().map(|s| (s - max).exp()).collect();
            let total: f64 = weights.iter().sum();
            for i in 0..d {
                let y: f64 =
                    rows.clone().zip(&weights).map(|(j, w)| w * f64::from(v.f32_at([i, kh, j, 0]))).sum::<f64>()
                        / total;
                out.set([i, h, t, 0], y as f32);
            }
        }
    }
    Ok(())
}
