//! How a weight's bytes lie in device memory: as in the file, except the rows of Q6_K weights
//! that are whole runs of four blocks (1,024 values): those are stored by quads, each run of
//! four blocks (840 bytes) as the four blocks' ql (4 x 128 bytes), then their qh (4 x 64),
//! scales (4 x 16) and d (4 x 2). Same size, same row stride; the pieces a decode product's
//! thread reads (8 bytes of ql, 8 of qh, 8 scales) are then 8-byte aligned where a file's
//! 210-byte blocks are 2-byte aligned, so it reads them in 5 loads where it took 13. On the
//! H100 (2B shape, README) the 151,936-row head then took 126 us against 151 and a decode step
//! ran at 448-450 against 435-440 tokens/s. The shaders apply the same rule
//! (shaders/wtypes/q6_k.glsl, `q6_k_block`).

use crate::quant::DType;

/// Values a quad of Q6_K blocks holds: rows of a multiple of it are stored by quads.
pub const QUAD_VALUES: usize = 1024;

/// Bytes of a quad: four 210-byte blocks.
const QUAD_BYTES: usize = 840;

/// The pieces of a quad: (byte offset in the stored quad, in the file's four blocks, bytes).
const PIECES: [(usize, usize, usize); 16] = {
    let mut pieces = [(0, 0, 0); 16];
    let mut b = 0;
    while b < 4 {
        pieces[4 * b] = (128 * b, 210 * b, 128);
        pieces[4 * b + 1] = (512 + 64 * b, 210 * b + 128, 64);
        pieces[4 * b + 2] = (768 + 16 * b, 210 * b + 192, 16);
        pieces[4 * b + 3] = (832 + 2 * b, 210 * b + 208, 2);
        b += 1;
    }
    pieces
};

/// Whether a weight of `dtype` with rows of `row_values` values is stored by quads.
pub fn by_quads(dtype: DType, row_values: usize) -> bool {
    dtype == DType::Q6K && row_values.is_multiple_of(QUAD_VALUES)
}

/// Bytes of a weight as the device stores them: as in the file, or by quads.
#[derive(Clone, Copy, Debug)]
pub enum Stored<'a> {
    AsIs(&'a [u8]),
    /// The file's bytes of Q6_K rows of whole quads (a multiple of 840 bytes).
    Quads(&'a [u8]),
}

impl<'a> Stored<'a> {
    /// The bytes of a weight of `dtype` with rows of `row_values` values, as stored: by quads
    /// where `by_quads` says. An error where those are not whole quads (rows of whole quads
    /// are): the kernels would read them as quads all the same.
    pub fn of(dtype: DType, row_values: usize, data: &'a [u8]) -> Result<Stored<'a>, String> {
        if !by_quads(dtype, row_values) {
            Ok(Stored::AsIs(data))
        } else if data.len().is_multiple_of(QUAD_BYTES) {
            Ok(Stored::Quads(data))
        } else {
            Err(format!("{} bytes of {dtype} rows of {row_values} values: not whole runs of four blocks", data.len()))
        }
    }

    pub(crate) fn len(&self) -> usize {
        match self {
            Stored::AsIs(b) | Stored::Quads(b) => b.len(),
        }
    }

    /// Copies stored bytes `from..from + dst.len()` into `dst`.
    pub fn copy_range(&self, dst: &mut [u8], from: usize) {
        match *self {
            Stored::AsIs(src) => dst.copy_from_slice(&src[from..from + dst.len()]),
            Stored::Quads(src) => copy_quads(dst, src, from),
        }
    }
}

/// Bytes `from..from + dst.len()` of `src` (whole quads of the file's layout) stored by quads,
/// into `dst`: each stored piece's overlap with the range.
fn copy_quads(dst: &mut [u8], src: &[u8], from: usize) {
    let end = from + dst.len();
    let mut quad = from / QUAD_BYTES * QUAD_BYTES;
    while quad < end {
        for (stored, file, n) in PIECES {
            let (lo, hi) = ((quad + stored).max(from), (quad + stored + n).min(end));
            if lo < hi {
                let at = quad + file + (lo - quad - stored);
                dst[lo - from..hi - from].copy_from_slice(&src[at..at + (hi - lo)]);
            }
        }
        quad += QUAD_BYTES;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every byte of a quad lands once, where the pieces say, and any range of the stored
    /// bytes is the same bytes as the whole's.
    #[test]
    fn quads_move_every_byte_once_and_any_range_agrees() {
        let src: Vec<u8> = (0..2 * QUAD_BYTES).map(|i| (i * 7 % 251) as u8).collect();
        let mut whole = vec![0u8; src.len()];
        Stored::Quads(&src).copy_range(&mut whole, 0);
        let mut sorted = whole.clone();
        sorted.sort_unstable();
        let mut want = src.clone();
        want.sort_unstable();
        assert_eq!(sorted, want);
        // Block 2's d (file bytes 628..630) at 836..838, its first scale at 800, qh at 640.
        assert_eq!(whole[836..838], src[628..630]);
        assert_eq!(whole[800], src[420 + 192]);
        assert_eq!(whole[640..704], src[420 + 128..420 + 192]);
        assert_eq!(whole[QUAD_BYTES + 128..QUAD_BYTES + 256], src[QUAD_BYTES + 210..QUAD_BYTES + 338]);
        for (from, len) in [(0, 1), (5, 830), (839, 3), (100, 1500), (1679, 1)] {
            let mut part = vec![0u8; len];
            Stored::Quads(&src).copy_range(&mut part, from);
            assert_eq!(part, whole[from..from + len], "{from}+{len}");
        }
        assert!(by_quads(DType::Q6K, 2048) && !by_quads(DType::Q6K, 768) && !by_quads(DType::Q4K, 2048));
        assert!(matches!(Stored::of(DType::Q6K, 1024, &src), Ok(Stored::Quads(_))));
        assert!(matches!(Stored::of(DType::Q6K, 768, &src[..630]), Ok(Stored::AsIs(_))));
        assert!(Stored::of(DType::Q6K, 1024, &src[..630]).is_err());
    }
}
