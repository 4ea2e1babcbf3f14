//! Normalised pixels cut into the rows of `pixel_values`, in the processor's order.

use super::RgbImage;

/// (row, col) in patches of every patch, in `pixel_values` row order: merge blocks row-major,
/// and within each `merge x merge` block its patches row-major. This is also the order of the
/// vision tower's 2D RoPE positions and position-embedding rows. `grid_h` and `grid_w` are
/// multiples of `merge` for any grid [`preprocess`](super::preprocess) makes.
pub fn patch_positions(grid_h: usize, grid_w: usize, merge: usize) -> Vec<(usize, usize)> {
    let mut out = Vec::with_capacity(grid_h * grid_w);
    for block_row in 0..grid_h / merge.max(1) {
        for block_col in 0..grid_w / merge.max(1) {
            for r in 0..merge {
                for c in 0..merge {
                    out.push((block_row * merge + r, block_col * merge + c));
                }
            }
        }
    }
    out
}

/// The normalised value of every uint8 level, per channel, computed as torchvision's fused
/// rescale + normalize does in f32: (x - mean * 255) / (std * 255).
pub(crate) fn level_table(mean: [f32; 3], std: [f32; 3]) -> [[f32; 256]; 3] {
    let mut table = [[0f32; 256]; 3];
    for (c, levels) in table.iter_mut().enumerate() {
        let (m, s) = (mean[c] * 255.0, std[c] * 255.0);
        for (x, v) in levels.iter_mut().enumerate() {
            *v = (x as f32 - m) / s;
        }
    }
    table
}

/// Rows of `3 * temporal * patch * patch` values ordered [channel][temporal][y][x]; the still
/// image fills every temporal slice. `img` must be a whole number of merge blocks in each axis.
pub(crate) fn patchify(
    img: &RgbImage,
    patch: usize,
    merge: usize,
    temporal: usize,
    levels: &[[f32; 256]; 3],
) -> Vec<f32> {
    let (grid_h, grid_w) = (img.height() / patch, img.width() / patch);
    let plane = patch * patch;
    let mut out = Vec::with_capacity(grid_h * grid_w * 3 * temporal * plane);
    let data = img.data();
    for (row, col) in patch_positions(grid_h, grid_w, merge) {
        for (c, level) in levels.iter().enumerate() {
            let start = out.len();
            for y in 0..patch {
                let base = ((row * patch + y) * img.width() + col * patch) * 3;
                out.extend(data[base..][..patch * 3].chunks_exact(3).map(|px| level[usize::from(px[c])]));
            }
            for _ in 1..temporal {
                out.extend_from_within(start..start + plane);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positions_walk_merge_blocks() {
        let p = patch_positions(4, 6, 2);
        assert_eq!(p.len(), 24);
        assert_eq!(&p[..8], &[(0, 0), (0, 1), (1, 0), (1, 1), (0, 2), (0, 3), (1, 2), (1, 3)]);
        assert_eq!(p[12], (2, 0));
        assert_eq!(patch_positions(2, 2, 1), vec![(0, 0), (0, 1), (1, 0), (1, 1)]);
    }

    #[test]
    fn levels_match_hf_normalisation() {
        let t = level_table([0.5; 3], [0.5; 3]);
        assert_eq!(t[0][0], -1.0);
        assert_eq!(t[1][255], 1.0);
        assert_eq!(t[2][128], 0.5 / 127.5);
        for (x, &v) in t[0].iter().enumerate() {
            assert_eq!(v * 127.5 + 127.5, x as f32, "level {x} must round-trip exactly");
        }
    }

    #[test]
    fn rows_are_channel_temporal_y_x() {
        // 4x4 image, patch 2, merge 1, temporal 2: pixel (y, x) has R = 10y + x, G = 100, B = 200.
        let data: Vec<u8> = (0..4).flat_map(|y| (0..4).flat_map(move |x| [10 * y + x, 100, 200])).collect();
        let img = RgbImage::from_parts(4, 4, data);
        let mut identity = [[0f32; 256]; 3];
        for levels in identity.iter_mut() {
            for (x, v) in levels.iter_mut().enumerate() {
                *v = x as f32;
            }
        }
        let rows = patchify(&img, 2, 1, 2, &identity);
        assert_eq!(rows.len(), 4 * 24);
        // Patch (0, 1): R plane twice, then G twice, then B twice.
        let second = &rows[24..48];
        assert_eq!(&second[..8], &[2.0, 3.0, 12.0, 13.0, 2.0, 3.0, 12.0, 13.0]);
        assert!(second[8..16].iter().all(|&v| v == 100.0) && second[16..].iter().all(|&v| v == 200.0));
    }
}
