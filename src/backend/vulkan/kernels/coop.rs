//! The cooperative-matrix products' variants: which of the matrix-unit shapes a device lists
//! the kernels use, the tiles that follow from it, and the specialization constants that carry
//! both into the shaders (shaders/mul_mat_cm_tiles.glsl), so one SPIR-V module per weight type
//! serves every device.

use crate::backend::vulkan::info::CoopShape;
use crate::settings::{self, settings, Var};

/// A cooperative-matrix variant: the subgroup size the kernels run with (workgroups of four
/// subgroups, full subgroups required) and the matrix-unit shape (f16 A and B, f32
/// accumulators). The tiles follow from these two, so a plan naming them rebuilds the same
/// pipelines on the same device.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct CoopMat {
    pub subgroup: u32,
    pub shape: CoopShape,
}

impl CoopMat {
    /// A stand-in in the list of every kernel (`KernelId::all`): a plan's variant replaces it.
    pub const UNSET: CoopMat = CoopMat { subgroup: 0, shape: CoopShape { m: 0, n: 0, k: 0 } };

    /// Whether the kernels are written for this variant: subgroups of 8 to 64 lanes (a power
    /// of two) and matrix-unit sides of 8, 16 or 32, K dividing the 32-deep slices. Devices
    /// list other shapes too (f16 x f16 into f16, larger ones); those are not used.
    pub fn supported(self) -> bool {
        let side = |v: u32| matches!(v, 8 | 16 | 32);
        let s = self.subgroup;
        let sides = side(self.shape.m) && side(self.shape.n) && side(self.shape.k);
        s.is_power_of_two() && (8..=64).contains(&s) && sides && Tiles::fast(self).stages_evenly(self)
    }

    /// The best variant for a device with these shapes, subgroup sizes (those a pipeline may
    /// require, the preferred first) and shared memory: the largest supported shape (most
    /// products per instruction, then the squarest) whose kernels fit the shared memory, at the
    /// first subgroup size where they do. None where none does.
    pub fn choose(shapes: &[CoopShape], subgroups: &[u32], max_shared: u32) -> Option<CoopMat> {
        let fits =
            |cm: &CoopMat| [Tiles::fast(*cm), Tiles::exact()].iter().all(|t| t.shared_bytes(cm.shape) <= max_shared);
        let variants = subgroups
            .iter()
            .enumerate()
            .flat_map(|(rank, &subgroup)| shapes.iter().map(move |&shape| (rank, CoopMat { subgroup, shape })));
        variants
            .filter(|(_, cm)| cm.supported() && fits(cm))
            .max_by_key(|&(rank, cm)| {
                let s = cm.shape;
                (s.m * s.n * s.k, s.m.min(s.n), s.m, std::cmp::Reverse(rank))
            })
            .map(|(_, cm)| cm)
    }
}

/// The tiles of one cooperative-matrix kernel (sizes in rows of w, columns of x, and k).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tiles {
    /// One subgroup's tile of d; the four subgroups tile the workgroup's 2 x 2, or with
    /// `split` 4 each takes the whole tile over a quarter of k.
    pub sg_m: u32,
    pub sg_n: u32,
    /// Subgroups over which each slice's k is split: 1, or 4 for `mul_mat_cm_narrow`.
    pub split: u32,
    /// Split over k, the tiles of f32 sums in shared memory: one per subgroup, or one fewer
    /// where the first subgroup adds the others' to its own (`mul_mat_cm_narrow2`).
    pub sum_tiles: u32,
    /// Values of k staged per step.
    pub bk: u32,
    /// Slices staged in shared memory at once (2: the next one is stored while the current
    /// one is multiplied).
    pub buffers: u32,
    /// f16 arrays per operand and slice (2 for the exact kernel's hi and lo halves).
    pub parts: u32,
    /// `mul_mat_cm`: slices whose loads are in flight at once (register sets of each thread).
    pub depth: u32,
    /// `mul_mat_cm`, for measuring only: 1 leaves out the products, 2 the staging (0: neither).
    pub probe: u32,
}

impl Tiles {
    /// `mul_mat_cm`: 2 x 2 accumulators per subgroup (32 x 32 of 16 x 16 blocks, 64 x 64 per
    /// workgroup: a 2B model's 2,048-row products at 512 tokens are 256 workgroups, two for
    /// each of an H200's 132 multiprocessors), 64-deep slices, two buffers, each slice's loads
    /// issued two slices ahead; at least as many rows and columns per subgroup as it has lanes,
    /// so that every thread stages whole chunks of both (subgroups of 64: 128 x 128). Measured
    /// on the H200 against 64 x 32 and 64 x 64 per subgroup, 32-deep slices and one to six
    /// slices in flight (`scripts/device_bench`, step probe): the fastest at the 2B shapes.
    /// Again with x in halves (H100, 8655ae6): three or four slices in flight were no faster
    /// (2048 -> 6144 at 512 columns 103.4 / 108.4 us against 101.9).
    /// 41 KiB of shared memory at 16 x 16 x 16, 19.5 KiB at lavapipe's 8 x 8 x 8.
    ///
    /// HRX_VK_CM_TILES=SG_M,SG_N,BK,DEPTH[,PROBE] sets a subgroup's tile, the slice depth and
    /// the slices in flight instead, for measuring others (`hrx bench`), and PROBE leaves a
    /// stage out (timing only); tiles the kernel cannot stage are refused with a warning.
    pub fn fast(cm: CoopMat) -> Tiles {
        let (m, n) = (cm.shape.m, cm.shape.n);
        let default = Tiles {
            sg_m: (2 * m).max(cm.subgroup),
            sg_n: (2 * n).max(cm.subgroup),
            split: 1,
            sum_tiles: 0,
            bk: 64,
            buffers: 2,
            parts: 1,
            depth: 2,
            probe: 0,
        };
        default.overridden(cm, &settings::VK_CM_TILES)
    }

    /// `mul_mat_cm` on tiles twice `fast`'s each way: 4 x 4 accumulators per subgroup (64 x 64
    /// of 16 x 16 blocks, 128 x 128 per workgroup), slices half as deep (two matrix-unit K)
    /// and one in flight, so that both buffers fit 48 KiB (45 KiB at 16 x 16 x 16). On the H200
    /// with the 2B shape's 2048 -> 6144 products on them: pp512 20,163 against 18,826 tok/s.
    /// HRX_VK_CM_LARGE=SG_M,SG_N,BK,DEPTH[,PROBE] sets them instead, as HRX_VK_CM_TILES does
    /// `fast`'s. Measured with it on the H200 (`hrx bench --kernels -p 512`): two or three
    /// slices in flight, slices of 16 (two or four in flight) and workgroup tiles of 64 x 128 or
    /// 128 x 64 were all slower at 2048 -> 6144 (172-238 us and 183-194 us against 117; pp512
    /// 16,139-19,809 against 20,133 tok/s).
    pub fn large(cm: CoopMat) -> Tiles {
        let default = Tiles {
            sg_m: (4 * cm.shape.m).max(cm.subgroup),
            sg_n: (4 * cm.shape.n).max(cm.subgroup),
            bk: (2 * cm.shape.k).max(16),
            depth: 1,
            ..Tiles::fast(cm)
        };
        default.overridden(cm, &settings::VK_CM_LARGE)
    }

    /// These tiles with `values` (SG_M, SG_N, BK, DEPTH, PROBE, read from `var`) instead, where
    /// the kernel can stage them; a warning and these tiles where it cannot.
    fn overridden(self, cm: CoopMat, var: &Var) -> Tiles {
        let Some([sg_m, sg_n, bk, depth, probe]) = tiles_override(var) else { return self };
        let t = Tiles { sg_m, sg_n, bk, depth, probe, ..self };
        if (1..=8).contains(&depth) && probe <= 2 && t.stages_evenly(cm) {
            t
        } else {
            log::warn!(
                "{}={sg_m},{sg_n},{bk},{depth},{probe}: not tiles of {} for subgroups of {}; the default",
                var.name,
                cm.shape,
                cm.subgroup
            );
            self
        }
    }

    /// `mul_mat_cm_narrow`, for a few columns (batched decode): tiles of `blocks` (1 or 2)
    /// matrix-unit blocks each way (more where the workgroup's threads need more rows or
    /// columns to stage), each subgroup over a quarter of every slice; slices of max(16 K, 4 x
    /// subgroup) values for one block, so that a subgroup runs four or more products a slice
    /// and each thread stages whole 16-value chunks of each operand: 256 on NVIDIA and AMD (16
    /// x 16 x 16), 128 on lavapipe; half as deep for two, so that both buffers of the wider
    /// tiles fit 48 KiB (with three tiles of sums: `mul_mat_cm_narrow2`). 2048-row products at 16 columns are 128 workgroups of one block
    /// instead of `fast`'s 32. Measured on the H200 at 32 columns (`scripts/device_bench`,
    /// HRX_DEVBENCH_VARIANTS): slices of 256 beat 128 by 5-18 % on every 2B shape with one
    /// block (the kernel tests passed there with both); four slices in flight instead of two,
    /// or tiles of 16 x 32, gained nothing; two blocks (32 x 32, slices of 128) won on 2048 ->
    /// 6144 (28 us against 39) and lost on the products of fewer rows.
    /// HRX_VK_CM_NARROW=SG_M,SG_N,BK,DEPTH[,PROBE] sets the tiles of both instead, as
    /// HRX_VK_CM_TILES does `fast`'s (SG_M x SG_N is then the workgroup's tile).
    pub fn narrow(cm: CoopMat, blocks: u32) -> Tiles {
        let (m, n, k) = (cm.shape.m, cm.shape.n, cm.shape.k);
        let bk = (16 * k).max(4 * cm.subgroup) / blocks.max(1);
        // Rows (columns) that give every thread one chunk of a slice.
        let staged = (4 * cm.subgroup / (bk / 16).max(1)).max(1);
        let default = Tiles {
            sg_m: (blocks * m).max(staged),
            sg_n: (blocks * n).max(staged),
            split: 4,
            sum_tiles: if blocks > 1 { 3 } else { 4 },
            bk,
            buffers: 2,
            parts: 1,
            depth: 2,
            probe: 0,
        };
        default.overridden(cm, &settings::VK_CM_NARROW)
    }

    /// Whether `mul_mat_cm`'s staging divides evenly among the workgroup's threads: each
    /// brings whole 16-value chunks of rows of w and columns of x, at least one of each; and
    /// each subgroup's share of a slice is whole products.
    pub fn stages_evenly(self, cm: CoopMat) -> bool {
        let threads = 4 * cm.subgroup;
        let chunks = self.bk / 16;
        let even = |n: u32| n * chunks >= threads && (n * chunks).is_multiple_of(threads);
        self.bk.is_multiple_of(16)
            && matches!(self.split, 1 | 4)
            && self.bk.is_multiple_of(cm.shape.k * self.split)
            && self.sg_m.is_multiple_of(cm.shape.m)
            && self.sg_n.is_multiple_of(cm.shape.n)
            && threads.is_multiple_of(chunks)
            && even(self.rows())
            && even(self.cols())
    }

    /// `mul_mat_cm_exact`: 32 x 32 per subgroup (64 x 64 per workgroup) whatever the shape,
    /// one slice at a time: its hi and lo halves double what each slice takes.
    pub fn exact() -> Tiles {
        Tiles { sg_m: 32, sg_n: 32, split: 1, sum_tiles: 0, bk: 32, buffers: 1, parts: 2, depth: 1, probe: 0 }
    }

    /// Rows of d per workgroup.
    pub fn rows(self) -> u32 {
        if self.split == 1 {
            2 * self.sg_m
        } else {
            self.sg_m
        }
    }

    /// Columns of d per workgroup.
    pub fn cols(self) -> u32 {
        if self.split == 1 {
            2 * self.sg_n
        } else {
            self.sg_n
        }
    }

    /// Shared memory of the kernel (as mul_mat_cm_tiles.glsl and the kernels declare it):
    /// the staged slices (f16, rows padded by 8) and each subgroup's f32 output patch, or
    /// split over k, the tiles of sums.
    pub fn shared_bytes(self, shape: CoopShape) -> u32 {
        let staged = self.buffers * self.parts * (self.rows() + self.cols()) * (self.bk + 8) * 2;
        let outputs = if self.split == 1 {
            4 * shape.n * (shape.m + 4) * 4
        } else {
            self.sum_tiles * self.rows() * self.cols() * 4
        };
        staged + outputs
    }

    /// The kernels' specialization constants 0..=8 (mul_mat_cm_tiles.glsl).
    pub fn constants(self, cm: CoopMat) -> Vec<u32> {
        let s = cm.shape;
        vec![4 * cm.subgroup, s.m, s.n, s.k, self.sg_m, self.sg_n, self.bk, self.depth, self.probe]
    }
}

/// The tiles `var` (HRX_VK_CM_TILES, _LARGE, _NARROW) asks for, SG_M,SG_N,BK,DEPTH[,PROBE],
/// for measuring others.
fn tiles_override(var: &Var) -> Option<[u32; 5]> {
    let n = settings().wholes(var)?;
    let at = |i: usize| n.get(i).map_or(0, |&v| u32::try_from(v).unwrap_or(u32::MAX));
    Some([at(0), at(1), at(2), at(3), at(4)])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape(m: u32, n: u32, k: u32) -> CoopShape {
        CoopShape { m, n, k }
    }

    #[test]
    fn the_largest_shape_that_fits_wins() {
        let nvidia = [shape(16, 8, 16), shape(16, 16, 16), shape(16, 8, 8)];
        let best = CoopMat::choose(&nvidia, &[32], 49152).unwrap();
        assert_eq!(best.shape, shape(16, 16, 16));
        assert_eq!(Tiles::fast(best).shared_bytes(best.shape), 2 * (64 + 64) * 72 * 2 + 4 * 16 * 20 * 4);
        // lavapipe: 8 x 8 x 8 only, 32 KiB.
        let lvp = CoopMat::choose(&[shape(8, 8, 8)], &[8], 32768).unwrap();
        assert_eq!((lvp.subgroup, lvp.shape), (8, shape(8, 8, 8)));
        assert_eq!(Tiles::fast(lvp).constants(lvp), vec![32, 8, 8, 8, 16, 16, 64, 2, 0]);
        // 16 x 16 x 16 does not fit 40 KiB: the next shape that does, or none (32 KiB).
        let small = [shape(16, 16, 16), shape(8, 8, 16)];
        assert_eq!(CoopMat::choose(&small, &[32], 40960).map(|c| c.shape), Some(shape(8, 8, 16)));
        assert_eq!(CoopMat::choose(&[shape(16, 16, 16)], &[32], 32768), None);
        // Shapes the kernels are not written for.
        assert_eq!(CoopMat::choose(&[shape(16, 16, 64), shape(4, 4, 4)], &[32], 1 << 20), None);
        assert_eq!(CoopMat::choose(&[shape(16, 16, 16)], &[128], 1 << 20), None);
    }

    #[test]
    fn tiles_follow_the_shape() {
        let cm = |subgroup, shape| CoopMat { subgroup, shape };
        let t = Tiles::fast(cm(32, shape(16, 16, 16)));
        assert_eq!((t.rows(), t.cols(), t.bk), (64, 64, 64));
        let t = Tiles::fast(cm(32, shape(16, 8, 16)));
        assert_eq!((t.rows(), t.cols()), (64, 64));
        // Subgroups of 64 (AMD's wave64): twice the columns, so that 256 threads each stage a
        // chunk of x.
        let t = Tiles::fast(cm(64, shape(16, 16, 16)));
        assert_eq!((t.rows(), t.cols()), (128, 128));
        assert!(cm(64, shape(16, 16, 16)).supported());
        // lavapipe's 8 x 8 x 8 with subgroups of 8.
        assert!(cm(8, shape(8, 8, 8)).supported());
        assert_eq!((Tiles::fast(cm(8, shape(8, 8, 8))).rows(), Tiles::fast(cm(8, shape(8, 8, 8))).cols()), (32, 32));
        // Narrow tiles: one block each way (more where the threads need more rows to stage),
        // slices of four subgroups' four products or more.
        // Two blocks a side: slices half as deep.
        let narrow = |subgroup, s, blocks| {
            let t = Tiles::narrow(cm(subgroup, s), blocks);
            assert!(t.stages_evenly(cm(subgroup, s)), "{t:?}");
            (t.rows(), t.cols(), t.bk)
        };
        assert_eq!(narrow(32, shape(16, 16, 16), 1), (16, 16, 256));
        assert_eq!(narrow(64, shape(16, 16, 16), 1), (16, 16, 256));
        assert_eq!(narrow(8, shape(8, 8, 8), 1), (8, 8, 128));
        assert_eq!(narrow(16, shape(8, 8, 8), 1), (8, 8, 128));
        assert_eq!(narrow(32, shape(16, 8, 16), 1), (16, 8, 256));
        assert_eq!(narrow(32, shape(16, 16, 16), 2), (32, 32, 128));
        assert_eq!(narrow(64, shape(16, 16, 16), 2), (32, 32, 128));
        assert_eq!(narrow(8, shape(8, 8, 8), 2), (16, 16, 64));
        let t = Tiles::narrow(cm(32, shape(16, 16, 16)), 1);
        assert_eq!(t.shared_bytes(shape(16, 16, 16)), 2 * 32 * 264 * 2 + 4 * 16 * 16 * 4);
        assert_eq!(t.constants(cm(32, shape(16, 16, 16))), vec![128, 16, 16, 16, 16, 16, 256, 2, 0]);
        // Within the 48 KiB of NVIDIA's and AMD's drivers.
        let t = Tiles::narrow(cm(32, shape(16, 16, 16)), 2);
        assert_eq!(t.shared_bytes(shape(16, 16, 16)), 2 * 64 * 136 * 2 + 3 * 32 * 32 * 4);
        assert!(t.shared_bytes(shape(16, 16, 16)) <= 48 * 1024);
        let e = Tiles::exact();
        assert_eq!((e.rows(), e.cols()), (64, 64));
        assert_eq!(e.shared_bytes(shape(16, 16, 16)), 2 * 128 * 40 * 2 + 4 * 16 * 20 * 4);
    }
}
