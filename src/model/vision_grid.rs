//! The bilinear taps of the learned position grid for each patch, computed on the CPU once per
//! image (HF `fast_pos_embed_interpolate`, align_corners=True). Patch order is the image
//! module's [`crate::image::patch_positions`].

/// Taps per patch: (r0, c0), (r0, c1), (r1, c0), (r1, c1).
pub const TAPS: usize = 4;

/// Bilinear resampling of a `side x side` grid of table rows onto patch positions.
#[derive(Clone, Debug, PartialEq)]
pub struct PosTaps {
    /// Table rows, `TAPS` per patch.
    pub ids: Vec<i32>,
    /// Their weights, `TAPS` per patch (summing to 1).
    pub weights: Vec<f32>,
}

/// One axis of `n` samples over `side` grid points, corners aligned: sample i sits at
/// i * (side - 1) / (n - 1) (0 when n = 1). Returns the lower tap, the upper tap (clamped to
/// the grid) and the upper tap's weight, exact in rational arithmetic.
fn axis_taps(side: usize, n: usize, i: usize) -> (usize, usize, f64) {
    if n <= 1 {
        return (0, 0, 0.0);
    }
    let (num, den) = (i * (side - 1), n - 1);
    let lo = num / den;
    (lo, (lo + 1).min(side - 1), (num % den) as f64 / den as f64)
}

/// The taps of every patch of a `grid_h x grid_w` image, in `patches` order (e.g.
/// [`crate::image::patch_positions`]); `side` is the position grid's side.
pub fn pos_taps(side: usize, grid_h: usize, grid_w: usize, patches: &[(usize, usize)]) -> PosTaps {
    let mut ids = Vec::with_capacity(patches.len() * TAPS);
    let mut weights = Vec::with_capacity(patches.len() * TAPS);
    for &(row, col) in patches {
        let (r0, r1, fr) = axis_taps(side, grid_h, row);
        let (c0, c1, fc) = axis_taps(side, grid_w, col);
        for (r, c, w) in
            [(r0, c0, (1.0 - fr) * (1.0 - fc)), (r0, c1, (1.0 - fr) * fc), (r1, c0, fr * (1.0 - fc)), (r1, c1, fr * fc)]
        {
            ids.push((r * side + c) as i32);
            weights.push(w as f32);
        }
    }
    PosTaps { ids, weights }
}
