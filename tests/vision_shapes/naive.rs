//! A plain f64 re-implementation of the Qwen3-VL vision encoder, written from the HF model
//! code (oracle README note 4), to check the graph on shapes the oracle does not cover.

use super::mmproj::Shape;
use hrx::gguf::GgufFile;
use hrx::quant::dequantize_row;

type Rows = Vec<Vec<f64>>;

struct Weights<'a>(&'a GgufFile);

impl Weights<'_> {
    fn get(&self, name: &str) -> Vec<f64> {
        let t = self.0.tensor(name).unwrap_or_else(|| panic!("no tensor {name}"));
        let n = t.shape().iter().product::<u64>() as usize;
        let mut out = vec![0f32; n];
        dequantize_row(t.dtype, self.0.tensor_data(t), &mut out).expect("dequantize");
        out.into_iter().map(f64::from).collect()
    }

    /// y = W x + b for every row; W stored [n_in, n_out] (rows of n_in).
    fn linear(&self, name: &str, x: &Rows) -> Rows {
        let (w, b) = (self.get(&format!("{name}.weight")), self.get(&format!("{name}.bias")));
        x.iter()
            .map(|xr| {
                b.iter()
                    .enumerate()
                    .map(|(o, bo)| bo + w[o * xr.len()..][..xr.len()].iter().zip(xr).map(|(a, c)| a * c).sum::<f64>())
                    .collect()
            })
            .collect()
    }

    fn layer_norm(&self, name: &str, x: &Rows) -> Rows {
        let (w, b) = (self.get(&format!("{name}.weight")), self.get(&format!("{name}.bias")));
        x.iter()
            .map(|r| {
                let n = r.len() as f64;
                let mean = r.iter().sum::<f64>() / n;
                let var = r.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / n;
                r.iter().enumerate().map(|(i, v)| (v - mean) / (var + 1e-6).sqrt() * w[i] + b[i]).collect()
            })
            .collect()
    }
}

fn gelu_tanh(x: f64) -> f64 {
    0.5 * x * (1.0 + ((2.0 / std::f64::consts::PI).sqrt() * (x + 0.044715 * x.powi(3))).tanh())
}

/// erf by its Taylor series (|x| < 6 converges well in f64; beyond, erf is ±1 to 1e-17).
fn erf(x: f64) -> f64 {
    if x.abs() >= 6.0 {
        return x.signum();
    }
    let (mut term, mut sum, mut n) = (x, x, 0.0);
    while term.abs() > 1e-17 * sum.abs().max(1e-300) {
        n += 1.0;
        term *= -x * x / n;
        sum += term / (2.0 * n + 1.0);
    }
    sum * 2.0 / std::f64::consts::PI.sqrt()
}

fn gelu_erf(x: f64) -> f64 {
    0.5 * x * (1.0 + erf(x / std::f64::consts::SQRT_2))
}

fn add(a: &Rows, b: &Rows) -> Rows {
    a.iter().zip(b).map(|(x, y)| x.iter().zip(y).map(|(p, q)| p + q).collect()).collect()
}

fn map(x: &Rows, f: fn(f64) -> f64) -> Rows {
    x.iter().map(|r| r.iter().map(|&v| f(v)).collect()).collect()
}

/// Concatenates each run of `k` consecutive rows.
fn concat(x: &Rows, k: usize) -> Rows {
    x.chunks(k).map(|c| c.concat()).collect()
}

/// Linear interpolation point of sample i of n over a grid of `side`, corners aligned.
fn sample(side: usize, n: usize, i: usize) -> (usize, usize, f64) {
    let s = if n == 1 { 0.0 } else { i as f64 * (side - 1) as f64 / (n - 1) as f64 };
    let lo = s.floor() as usize;
    (lo, (lo + 1).min(side - 1), s - lo as f64)
}

/// HF's 2-D rotary embedding of one head vector at (row, col): rotate_half pairs (i, i + d/2).
fn rope(x: &[f64], row: usize, col: usize) -> Vec<f64> {
    let d = x.len();
    let inv = |j: usize| 10000f64.powf(-2.0 * j as f64 / (d / 2) as f64);
    let angle = |i: usize| {
        let i = i % (d / 2);
        if i < d / 4 {
            row as f64 * inv(i)
        } else {
            col as f64 * inv(i - d / 4)
        }
    };
    (0..d)
        .map(|i| {
            let rot = if i < d / 2 { -x[i + d / 2] } else { x[i - d / 2] };
            x[i] * angle(i).cos() + rot * angle(i).sin()
        })
        .collect()
}

fn attention(qkv: &Rows, pos: &[(usize, usize)], heads: usize) -> Rows {
    let vh = qkv[0].len() / 3;
    let d = vh / heads;
    let mut out = vec![vec![0.0; vh]; qkv.len()];
    for h in 0..heads {
        let part = |r: &Vec<f64>, which: usize| r[which * vh + h * d..][..d].to_vec();
        let q: Rows = qkv.iter().zip(pos).map(|(r, &(y, x))| rope(&part(r, 0), y, x)).collect();
        let k: Rows = qkv.iter().zip(pos).map(|(r, &(y, x))| rope(&part(r, 1), y, x)).collect();
        let v: Rows = qkv.iter().map(|r| part(r, 2)).collect();
        for (i, qi) in q.iter().enumerate() {
            let s: Vec<f64> =
                k.iter().map(|kj| qi.iter().zip(kj).map(|(a, b)| a * b).sum::<f64>() / (d as f64).sqrt()).collect();
            let max = s.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            let e: Vec<f64> = s.iter().map(|x| (x - max).exp()).collect();
            let total: f64 = e.iter().sum();
            for (j, vj) in v.iter().enumerate() {
                for c in 0..d {
                    out[i][h * d + c] += e[j] / total * vj[c];
                }
            }
        }
    }
    out
}

/// The encoder's output for one image: per merged token, the merger's output then each
/// deepstack feature (the layout `VisionModel::encode` returns).
pub fn encode(file: &GgufFile, s: &Shape, pixels: &[f32], grid_h: usize, grid_w: usize) -> Vec<f64> {
    let w = Weights(file);
    let (m, p, c_n, t_n) = (s.merge, s.patch, s.channels, s.temporal);
    let mut pos = Vec::new();
    for br in 0..grid_h / m {
        for bc in 0..grid_w / m {
            for r in 0..m {
                for c in 0..m {
                    pos.push((br * m + r, bc * m + c));
                }
            }
        }
    }
    // Patch embedding: a Conv3d with stride = kernel, pixel rows [channel][temporal][y][x].
    let kernels: Vec<Vec<f64>> = (0..t_n)
        .map(|t| w.get(&if t == 0 { "v.patch_embd.weight".to_owned() } else { format!("v.patch_embd.weight.{t}") }))
        .collect();
    let bias = w.get("v.patch_embd.bias");
    let table = w.get("v.position_embd.weight");
    let mut x: Rows = Vec::new();
    for (i, &(row, col)) in pos.iter().enumerate() {
        let px = &pixels[i * s.patch_row()..][..s.patch_row()];
        let (r0, r1, fr) = sample(s.side, grid_h, row);
        let (c0, c1, fc) = sample(s.side, grid_w, col);
        let taps = [
            (r0, c0, (1.0 - fr) * (1.0 - fc)),
            (r0, c1, (1.0 - fr) * fc),
            (r1, c0, fr * (1.0 - fc)),
            (r1, c1, fr * fc),
        ];
        x.push(
            (0..s.vh)
                .map(|e| {
                    let mut acc = bias[e];
                    for (t, k) in kernels.iter().enumerate() {
                        for ch in 0..c_n {
                            for yx in 0..p * p {
                                acc += k[(e * c_n + ch) * p * p + yx] * f64::from(px[(ch * t_n + t) * p * p + yx]);
                            }
                        }
                    }
                    acc + taps.iter().map(|&(r, c, wt)| wt * table[(r * s.side + c) * s.vh + e]).sum::<f64>()
                })
                .collect(),
        );
    }
    let mut features = Vec::new();
    for il in 0..s.depth() {
        let b = |n: &str| format!("v.blk.{il}.{n}");
        let qkv = w.linear(&b("attn_qkv"), &w.layer_norm(&b("ln1"), &x));
        x = add(&x, &w.linear(&b("attn_out"), &attention(&qkv, &pos, s.heads)));
        let h = map(&w.linear(&b("ffn_up"), &w.layer_norm(&b("ln2"), &x)), gelu_tanh);
        x = add(&x, &w.linear(&b("ffn_down"), &h));
        if s.deepstack[il] {
            let d = |n: &str| format!("v.deepstack.{il}.{n}");
            let h = map(&w.linear(&d("fc1"), &w.layer_norm(&d("norm"), &concat(&x, m * m))), gelu_erf);
            features.push(w.linear(&d("fc2"), &h));
        }
    }
    let h = map(&w.linear("mm.0", &concat(&w.layer_norm("v.post_ln", &x), m * m)), gelu_erf);
    let merged = w.linear("mm.2", &h);
    let mut out = Vec::new();
    for (i, row) in merged.iter().enumerate() {
        out.extend_from_slice(row);
        for f in &features {
            out.extend_from_slice(&f[i]);
        }
    }
    out
}
