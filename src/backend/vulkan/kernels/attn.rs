//! FLASH_ATTN: fused softmax(q k^T * scale) v with grouped K/V heads, causal through i32
//! slots or over every kv row. Two kernels with the same push constants: `flash_attn.comp`,
//! one workgroup per (head, query), for a few queries (decode steps), and
//! `flash_attn_tiled.comp`, one workgroup per tile of queries of a head, each K/V row read once
//! per tile, for many (prompt prefill, the vision encoder) where its tile fits the device's
//! shared memory, or on devices with cooperative matrices `flash_attn_cm.comp`, the same tiles
//! with Q K^T and P V on the matrix units (f16 operands, f32 sums).

use super::coop::CoopMat;
use super::push::{push_block, PushWords, Shape};
use super::{expect_f32, floats, out_words, values, word, Dyn, Grid, KernelId, Launch, Operand, Scratch, Values};
use crate::backend::vulkan::error::{Result, VkError};
use crate::quant::DType;
use crate::settings::{self, settings};

push_block! {
    /// `flash_attn_params.glsl`: every attention kernel's but `flash_attn_split`'s.
    pub struct AttnPush {
        /// The output's (= q's) shape: head_dim, heads, queries, 1.
        shape: Shape,
        q: Rows,
        k: Rows,
        v: Rows,
        d: Rows,
        kv_heads: u32,
        /// kv rows (maximal), and their run-time length: syms[kv_sym] * kv_num / kv_den
        /// (`STATIC_KV`: static).
        n_kv: u32,
        kv_sym: u32,
        kv_num: u32,
        kv_den: u32,
        /// The slots' offset (ints); `NO_SLOTS`: none (not causal).
        s_off: u32,
        scale: f32,
        /// kv rows per sequence (0: the slots are spans).
        segment: u32,
        /// 1: the output holds f16 values (flash_attn_cm only).
        d_f16: u32,
    }
}

push_block! {
    /// `flash_attn_split.comp` (`flash_attn_params.glsl` with ATTN_SPLITS).
    pub struct AttnSplitPush {
        attn: AttnPush,
        /// Most workgroups per (head, query).
        splits: u32,
    }
}

push_block! {
    /// Where an operand of attention (q, k, v, the output) is: offset, head stride, row
    /// stride (its values); unit stride along head_dim.
    pub struct Rows {
        off: u32,
        nb1: u32,
        nb2: u32,
    }
}

impl Rows {
    fn of(o: &Operand) -> Result<Rows> {
        Ok(Rows {
            off: values(o, o.offset, "offset")?,
            nb1: values(o, o.nb[1], "head stride")?,
            nb2: values(o, o.nb[2], "row stride")?,
        })
    }
}

const STATIC_KV: u32 = u32::MAX;
const NO_SLOTS: u32 = u32::MAX;
/// Largest head dimension the kernels hold.
pub const MAX_HEAD_DIM: usize = 256;
/// From this many planned queries on, the tiled kernel runs (where a tile fits): below it most
/// of a tile would be empty and the one-query kernel's workgroups per query spread wider.
pub const TILED_MIN_QUERIES: usize = 8;

/// A tile of `flash_attn_tiled.comp` (its specialization constants), one per head_dim class:
/// BR queries by BC kv rows, 64 threads each holding BR/8 x BC/8 scores and BR/8 x head/8
/// outputs in registers. Each fits lavapipe's 32 KiB of shared memory (Q, K, V and P tiles);
/// smaller head dimensions take larger tiles (more reuse of each K/V row).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AttnTile {
    /// head_dim <= 64 (the vision encoder): 32 queries x 32 kv rows.
    D64,
    /// head_dim <= 128 (text prefill): 24 x 16.
    D128,
    /// head_dim <= 256: 8 x 8.
    D256,
}

impl AttnTile {
    pub const ALL: [AttnTile; 3] = [AttnTile::D64, AttnTile::D128, AttnTile::D256];

    /// The tile for heads of `head_dim` values: the smallest class holding them.
    pub fn for_head_dim(head_dim: usize) -> Option<AttnTile> {
        AttnTile::ALL.into_iter().find(|t| head_dim <= t.max_head_dim())
    }

    pub fn max_head_dim(self) -> usize {
        match self {
            AttnTile::D64 => 64,
            AttnTile::D128 => 128,
            AttnTile::D256 => 256,
        }
    }

    /// Queries per workgroup (BR).
    pub fn queries(self) -> usize {
        match self {
            AttnTile::D64 => 32,
            AttnTile::D128 => 24,
            AttnTile::D256 => 8,
        }
    }

    /// KV rows per step (BC).
    fn kv_rows(self) -> usize {
        match self {
            AttnTile::D64 => 32,
            AttnTile::D128 => 16,
            AttnTile::D256 => 8,
        }
    }

    /// Bytes of shared memory the kernel declares with this tile: Q (BR x D), K (BC rows of
    /// D + 4), V (BC x D), P (BR x (BC + 1)), the row reductions (BR x 8) and the tile's kv
    /// spans (BR x 2 and a count), all 4-byte words.
    pub fn shared_bytes(self) -> u32 {
        let (br, bc, d) = (self.queries(), self.kv_rows(), self.max_head_dim());
        (4 * (br * d + bc * (d + 4) + bc * d + br * (bc + 1) + br * 8 + br * 2 + 1)) as u32
    }

    /// The name's suffix: `flash_attn_tiled_d64`.
    pub fn suffix(self) -> &'static str {
        match self {
            AttnTile::D64 => "d64",
            AttnTile::D128 => "d128",
            AttnTile::D256 => "d256",
        }
    }

    /// The kernel's specialization constants: BR, BC, D.
    pub fn constants(self) -> Vec<u32> {
        [self.queries(), self.kv_rows(), self.max_head_dim()].map(|x| x as u32).to_vec()
    }
}

/// `flash_attn_cm.comp`'s tile: four subgroups of `cm`'s square matrix-unit side of queries
/// each (of one head, or the same queries of the 2 or 4 heads that share a kv head: the kernel
/// picks from the group, and the grid of heads x tiles of `queries()` holds its work either
/// way), `CM_KV_ROWS` kv rows per step, heads of up to `class.max_head_dim()` values (64 or
/// 128).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct AttnCoop {
    pub class: AttnTile,
    pub cm: CoopMat,
}

/// KV rows per step of `flash_attn_cm`. On the H200, 64 for heads of 64 (with the factor
/// matrices kept in the scores' bytes to fit 48 KiB) took a 4,096-patch encode's attention from
/// 5.2 to 6.2 ms a layer (448x448: 0.21 to 0.20 ms); 32 with that saving, no faster than now.
const CM_KV_ROWS: u32 = 32;

/// `flash_attn_cm`'s kv rows per step: CM_KV_ROWS, or with HRX_VK_ATTN_CM_ROWS=16|32|64 (a
/// tuning probe, as HRX_VK_CM_TILES) that.
fn cm_kv_rows() -> u32 {
    settings().whole(&settings::VK_ATTN_CM_ROWS).map_or(CM_KV_ROWS, |n| n as u32)
}

impl AttnCoop {
    /// The tile for heads of `head_dim` values on `cm`, where the kernel is written for it: a
    /// square shape (queries, kv rows and head values in blocks of one side), subgroups of at
    /// least that many lanes (whole rows of the softmax per lane group, each lane whole vec4s of
    /// a step's kv rows), heads of at most 128 values in whole vec4s, and its shared memory
    /// within `shared_memory`.
    pub fn new(cm: CoopMat, head_dim: usize, shared_memory: u32) -> Option<AttnCoop> {
        let class = AttnTile::for_head_dim(head_dim).filter(|c| c.max_head_dim() <= 128)?;
        let r = cm.shape.m;
        let square = cm.shape.n == r && cm.shape.k == r && matches!(r, 8 | 16);
        // With r 8 or 16 (square) and subgroups of whole multiples of it, subgroup / r lanes
        // take a row, at least one.
        let lanes = square
            && cm.subgroup >= r
            && cm.subgroup.is_multiple_of(r)
            && (cm_kv_rows() / (cm.subgroup / r)).is_multiple_of(4);
        let tile = AttnCoop { class, cm };
        (lanes && head_dim.is_multiple_of(4) && tile.shared_bytes() <= shared_memory).then_some(tile)
    }

    /// Queries per workgroup.
    pub fn queries(self) -> usize {
        4 * self.cm.shape.m as usize
    }

    /// Bytes of shared memory the kernel declares: K and V tiles (f16, rows of DM + 8), each
    /// subgroup's scores (f32, rows of BC + 4), probabilities (f16, rows of BC + 8) and factor
    /// matrix (f32, R x R), and the tile's kv spans (u32, 4R x 2 and a count).
    pub fn shared_bytes(self) -> u32 {
        let (r, bc, dm) = (self.cm.shape.m, cm_kv_rows(), self.class.max_head_dim() as u32);
        2 * bc * (dm + 8) * 2 + 4 * r * ((bc + 4) * 4 + (bc + 8) * 2 + r * 4) + 4 * (4 * r * 2 + 1)
    }

    /// The kernel's specialization constants: threads, R, BC, DM.
    pub fn constants(self) -> Vec<u32> {
        vec![4 * self.cm.subgroup, self.cm.shape.m, cm_kv_rows(), self.class.max_head_dim() as u32]
    }
}

/// Fewest planned kv rows a split of `flash_attn_split` is given (its MIN_CHUNK).
const SPLIT_MIN_ROWS: usize = 16;
/// Most splits of a (head, query) the kernel takes (its MAX_SPLITS).
const MAX_SPLITS: usize = 64;
/// Splits of a (head, query) at most by default: on the H100 (2B shape, one sequence,
/// alternating in one call) 32 decoded after 1,024 and 4,096 tokens at 415.6 and 374.4 tok/s
/// against 64's 392.3 and 355.0 (longer splits: fewer workgroups, each over more rows).
const DEFAULT_SPLITS: usize = 32;

/// The most splits of a (head, query): DEFAULT_SPLITS, or HRX_VK_ATTN_SPLITS=N up to MAX_SPLITS
/// (a tuning probe, as HRX_VK_CM_TILES: `hrx bench` with each).
fn max_splits() -> usize {
    settings().whole(&settings::VK_ATTN_SPLITS).map_or(DEFAULT_SPLITS, |n| (n as usize).min(MAX_SPLITS))
}

/// How much of a head each lane of `flash_attn_split` holds: its registers, and so how many
/// of its workgroups a GPU keeps resident, grow with it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SplitWidth {
    /// 8 vec4s: heads of up to 32 x the subgroup size values.
    Wide,
    /// 2 vec4s: heads of up to 8 x the subgroup size (256 on subgroups of 32).
    Narrow,
}

impl SplitWidth {
    /// The narrowest that holds heads of `head_dim` values on subgroups of `subgroup` lanes.
    pub fn for_head(head_dim: usize, subgroup: u32) -> Option<SplitWidth> {
        [SplitWidth::Narrow, SplitWidth::Wide].into_iter().find(|w| head_dim <= w.max_head_dim(subgroup))
    }

    /// The longest head it takes on subgroups of `subgroup` lanes (and MAX_HEAD_DIM at most).
    pub fn max_head_dim(self, subgroup: u32) -> usize {
        let vec4s = match self {
            SplitWidth::Wide => 8,
            SplitWidth::Narrow => 2,
        };
        (4 * vec4s * subgroup as usize).min(MAX_HEAD_DIM)
    }
}

/// `flash_attn_split`'s variant: how much of a head each lane holds, on subgroups of how many
/// lanes (its lanes stride a head's vec4s by the subgroup's size).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct AttnSplit {
    pub width: SplitWidth,
    pub subgroup: u32,
}

impl AttnSplit {
    /// The narrowest that holds heads of `head_dim` values on subgroups of `subgroup` lanes.
    pub fn for_head(head_dim: usize, subgroup: u32) -> Option<AttnSplit> {
        SplitWidth::for_head(head_dim, subgroup).map(|width| AttnSplit { width, subgroup })
    }
}

/// The attention kernel for `out`'s planned query count and head size over `kv_rows` kv rows
/// in sequences of `segment`, of `kv` values, on a device whose workgroups may use `shared_memory` bytes: for
/// many queries, on the matrix units where the device's cooperative-matrix variant `coop`
/// takes the heads, else tiled where the tile fits; for a few, the kv rows split over many
/// workgroups where the device has subgroup arithmetic on subgroups of `subgroup` lanes (the
/// narrowest split kernel that holds the heads), else the one-query kernel. A plan of no more
/// queries than sequences is a batch of decode steps (a query per sequence): a tile would
/// span several sequences' rows, so it takes a per-query kernel.
pub fn choose(
    out: &Operand,
    (kv_rows, segment): (usize, usize),
    kv: Values,
    shared_memory: u32,
    subgroup: Option<u32>,
    coop: Option<CoopMat>,
) -> KernelId {
    // Spans (segment 0) are no sequences of the cache: a call holds a few images, each of
    // many queries.
    let sequences = kv_rows.checked_div(segment).unwrap_or(1);
    let many = out.ne[2] >= TILED_MIN_QUERIES && out.ne[2] > sequences;
    if let Some(tile) = coop.and_then(|cm| AttnCoop::new(cm, out.ne[0], shared_memory)).filter(|_| many) {
        return KernelId::FlashAttnCm(tile, kv);
    }
    match AttnTile::for_head_dim(out.ne[0]) {
        Some(tile) if many && tile.shared_bytes() <= shared_memory => KernelId::FlashAttnTiled(tile, kv),
        _ if !many => match subgroup.and_then(|s| AttnSplit::for_head(out.ne[0], s)) {
            Some(split) => KernelId::FlashAttnSplit(split, kv),
            None => KernelId::FlashAttn(kv),
        },
        _ => KernelId::FlashAttn(kv),
    }
}

/// `kernel` (an attention kernel, built for the values k and v hold) on `ins`: q, k, v and,
/// causal, the slots, whose kv rows are sequences of `segment`.
pub fn launch(
    kernel: KernelId,
    ins: &[Operand],
    (scale, segment): (f32, usize),
    out: &Operand,
    dynamic: Option<Dyn>,
) -> Result<Launch> {
    let (grid, max_head_dim) = match kernel {
        KernelId::FlashAttn(_) => (Grid::Rows, MAX_HEAD_DIM),
        KernelId::FlashAttnTiled(tile, _) => (Grid::QueryTiles { queries: tile.queries() }, tile.max_head_dim()),
        KernelId::FlashAttnCm(tile, _) => {
            if AttnCoop::new(tile.cm, ins.first().map_or(0, |q| q.ne[0]), u32::MAX) != Some(tile) {
                return Err(VkError::Operands(format!("{} does not take these heads", kernel.name())));
            }
            (Grid::QueryTiles { queries: tile.queries() }, tile.class.max_head_dim())
        }
        // Splits over the most kv rows a query sees (its sequence's); the kernel spreads the
        // run-time ones over them.
        KernelId::FlashAttnSplit(..) => {
            let most = ins.get(1).map_or(1, |k| if segment == 0 { k.ne[2] } else { k.ne[2].min(segment) });
            let splits = most.div_ceil(SPLIT_MIN_ROWS).clamp(1, max_splits());
            (Grid::Split { splits }, MAX_HEAD_DIM)
        }
        other => return Err(VkError::Operands(format!("{} is no attention kernel", other.name()))),
    };
    let [q, k, v, slots @ ..] = ins else {
        return Err(VkError::Operands(format!("flash_attn: {} inputs, not q, k, v (and slots)", ins.len())));
    };
    if slots.len() > 1 {
        return Err(VkError::Operands(format!("flash_attn: {} inputs, not q, k, v (and slots)", ins.len())));
    }
    if kernel.kv() != Some(Values::of(k, "k")?) {
        return Err(VkError::Operands(format!("{} does not read k and v of {} values", kernel.name(), k.dtype)));
    }
    let spans = segment == 0;
    if spans && slots.is_empty() || !spans && !k.ne[2].is_multiple_of(segment) {
        return Err(VkError::Operands(format!("flash_attn: {} kv rows in sequences of {segment}", k.ne[2])));
    }
    let mut block = push(q, k, v, slots.first().map(|s| (s, spans)), scale, out, dynamic, max_head_dim)?;
    block.segment = word(segment, "segment")?;
    // flash_attn_cm writes its output in f32 or f16 values (activations kept in halves), the
    // others in f32.
    let (_, _, half) = out_words(out, &kernel.name())?;
    if half == 1 && !matches!(kernel, KernelId::FlashAttnCm(..)) {
        return Err(VkError::Operands(format!("{} writes f32 values only", kernel.name())));
    }
    block.d_f16 = half;
    let mut push = PushWords::of(&block);
    let mut scratch = Scratch::default();
    if let Grid::Split { splits } = grid {
        if !out.ne[0].is_multiple_of(4) {
            return Err(VkError::Operands(format!("flash_attn_split: head_dim {} is not whole vec4s", out.ne[0])));
        }
        // Each lane reads its values of a row as one vec4 (a cache's rows are so).
        let vec4s =
            |o: &Operand| [o.offset, o.nb[1], o.nb[2]].iter().all(|b| b.is_multiple_of(4 * o.dtype.block_bytes()));
        if !vec4s(k) || !vec4s(v) {
            return Err(VkError::Operands("flash_attn_split: k and v rows are not whole vec4s".into()));
        }
        push = PushWords::of(&AttnSplitPush { attn: block, splits: word(splits, "splits")? });
        // A record (max, sum, head_dim outputs) per (query, head, split), then a counter per
        // (query, head).
        let pairs = out.ne[1] * out.ne[2];
        let counters = 4 * pairs * splits * (2 + out.ne[0]);
        scratch = Scratch { bytes: counters + 4 * pairs, counters };
        word(scratch.bytes / 4, "scratch")?;
    }
    Ok(Launch { kernel, push, grid, grid_input: None, slots: Vec::new(), scratch })
}

/// The push constants every attention kernel reads but the segment and the output's values, for heads of at most
/// `max_head_dim` values; `slots` with whether they are spans (i32 [2, n_q]).
#[allow(clippy::too_many_arguments)] // the node's operands, each checked by name
fn push(
    q: &Operand,
    k: &Operand,
    v: &Operand,
    slots: Option<(&Operand, bool)>,
    scale: f32,
    out: &Operand,
    dynamic: Option<Dyn>,
    max_head_dim: usize,
) -> Result<AttnPush> {
    expect_f32(q, "q")?;
    if v.dtype != k.dtype {
        return Err(VkError::Operands(format!("flash_attn: k is {}, v {}", k.dtype, v.dtype)));
    }
    for (o, what) in [(q, "q"), (k, "k"), (v, "v"), (out, "the output")] {
        if o.nb[0] != o.dtype.block_bytes() || o.ne[3] != 1 {
            return Err(VkError::Operands(format!(
                "flash_attn: {what} must have unit stride along head_dim and 3 axes"
            )));
        }
    }
    let (d, heads, n_q) = (q.ne[0], q.ne[1], q.ne[2]);
    let shape_ok =
        k.ne == v.ne && k.ne[0] == d && k.ne[1] > 0 && heads % k.ne[1] == 0 && out.ne == q.ne && d <= max_head_dim;
    if !shape_ok {
        return Err(VkError::Operands(format!("flash_attn: q {:?} k {:?} v {:?} -> {:?}", q.ne, k.ne, v.ne, out.ne)));
    }
    if dynamic.is_some_and(|dy| dy.axis != 2) || k.dynamic.is_some_and(|dy| dy.axis != 2) || k.dynamic != v.dynamic {
        return Err(VkError::Operands("flash_attn: only the query and kv-row axes can be dynamic".into()));
    }
    let (kv_sym, kv_num, kv_den) = match k.dynamic {
        Some(dy) if dy.den > 0 => (word(dy.sym, "symbol")?, word(dy.num, "ratio")?, word(dy.den, "ratio")?),
        Some(dy) => return Err(VkError::Operands(format!("bad dynamic axis {dy:?}"))),
        None => (STATIC_KV, 1, 1),
    };
    let s_off = match slots {
        Some((s, spans)) => {
            let ne_ok = if spans { s.ne[0] == 2 && s.ne[1] == n_q && s.nb[1] == 8 } else { s.ne[0] == n_q };
            if s.dtype != DType::I32 || !ne_ok || s.nb[0] != 4 {
                return Err(VkError::Operands(format!("flash_attn: slots {} {:?} for {n_q} queries", s.dtype, s.ne)));
            }
            let off = floats(s.offset, "slots offset")?;
            if off == NO_SLOTS {
                return Err(VkError::Operands("flash_attn: slots offset out of range".into()));
            }
            off
        }
        None => NO_SLOTS,
    };
    Ok(AttnPush {
        shape: Shape::of(out, dynamic)?,
        q: Rows::of(q)?,
        k: Rows::of(k)?,
        v: Rows::of(v)?,
        d: Rows::of(out)?,
        kv_heads: word(k.ne[1], "kv heads")?,
        n_kv: word(k.ne[2], "kv rows")?,
        kv_sym,
        kv_num,
        kv_den,
        s_off,
        scale,
        segment: 0,
        d_f16: 0,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const F32: Values = Values::F32;

    #[test]
    fn every_tile_fits_32_kib_and_its_threads() {
        for tile in AttnTile::ALL {
            assert!(tile.shared_bytes() <= 32768, "{tile:?}: {} bytes", tile.shared_bytes());
            // 8 x 8 threads: whole rows and columns of the tile each, vec4 columns of D.
            assert_eq!((tile.queries() % 8, tile.kv_rows() % 8, tile.max_head_dim() % 32), (0, 0, 0), "{tile:?}");
        }
        assert_eq!(AttnTile::for_head_dim(40), Some(AttnTile::D64));
        assert_eq!(AttnTile::for_head_dim(80), Some(AttnTile::D128));
        assert_eq!(AttnTile::for_head_dim(257), None);
    }

    #[test]
    fn many_queries_take_the_tiled_kernel_where_it_fits() {
        let out = |d, n_q| Operand::contiguous(DType::F32, [d, 16, n_q, 1], 0);
        const ONE: (usize, usize) = (4096, 4096);
        assert_eq!(choose(&out(64, 4096), ONE, F32, 32768, None, None), KernelId::FlashAttnTiled(AttnTile::D64, F32));
        assert_eq!(
            choose(&out(128, 512), ONE, F32, 49152, Some(32), None),
            KernelId::FlashAttnTiled(AttnTile::D128, F32)
        );
        assert_eq!(
            choose(&out(128, TILED_MIN_QUERIES - 1), ONE, F32, 49152, None, None),
            KernelId::FlashAttn(F32),
            "a decode step"
        );
        let split = |width, subgroup| KernelId::FlashAttnSplit(AttnSplit { width, subgroup }, F32);
        assert_eq!(
            choose(&out(128, 1), ONE, F32, 49152, Some(32), None),
            split(SplitWidth::Narrow, 32),
            "a decode step"
        );
        assert_eq!(
            choose(&out(128, 1), ONE, F32, 49152, Some(8), None),
            split(SplitWidth::Wide, 8),
            "8 lanes: 64 values narrow"
        );
        assert_eq!(
            choose(&out(256, 1), ONE, F32, 49152, Some(8), None),
            split(SplitWidth::Wide, 8),
            "8 lanes x 8 vec4s"
        );
        assert_eq!(
            choose(&out(256, 1), ONE, F32, 49152, Some(4), None),
            KernelId::FlashAttn(F32),
            "no split kernel holds it"
        );
        assert_eq!(
            choose(&out(64, 4096), ONE, F32, 16384, None, None),
            KernelId::FlashAttn(F32),
            "Vulkan's guaranteed 16 KiB"
        );
        // Cooperative matrices: many queries on them where the shape and heads allow.
        let nv = CoopMat { subgroup: 32, shape: crate::backend::vulkan::CoopShape { m: 16, n: 16, k: 16 } };
        let cm = |class| KernelId::FlashAttnCm(AttnCoop { class, cm: nv }, F32);
        assert_eq!(choose(&out(128, 512), ONE, F32, 49152, Some(32), Some(nv)), cm(AttnTile::D128));
        assert_eq!(choose(&out(64, 4096), ONE, F32, 49152, Some(32), Some(nv)), cm(AttnTile::D64));
        assert_eq!(
            choose(&out(128, 1), ONE, F32, 49152, Some(32), Some(nv)),
            split(SplitWidth::Narrow, 32),
            "a decode step"
        );
        assert_eq!(
            choose(&out(256, 512), ONE, F32, 65536, Some(32), Some(nv)),
            KernelId::FlashAttnTiled(AttnTile::D256, F32),
            "heads of 256"
        );
        assert_eq!(
            choose(&out(66, 512), ONE, F32, 49152, Some(32), Some(nv)),
            KernelId::FlashAttnTiled(AttnTile::D128, F32),
            "not vec4s"
        );
        assert_eq!(
            choose(&out(128, 512), ONE, F32, 32768, Some(32), Some(nv)),
            KernelId::FlashAttnTiled(AttnTile::D128, F32),
            "32 KiB"
        );
        let tall = CoopMat { shape: crate::backend::vulkan::CoopShape { m: 16, n: 8, k: 16 }, ..nv };
        assert_eq!(
            choose(&out(128, 512), ONE, F32, 49152, Some(32), Some(tall)),
            KernelId::FlashAttnTiled(AttnTile::D128, F32)
        );
        assert_eq!(AttnCoop { class: AttnTile::D128, cm: nv }.shared_bytes(), 36356);
    }

    #[test]
    fn a_batch_of_decode_steps_takes_a_per_query_kernel() {
        let out = |n_q| Operand::contiguous(DType::F32, [128, 16, n_q, 1], 0);
        let nv = CoopMat { subgroup: 32, shape: crate::backend::vulkan::CoopShape { m: 16, n: 16, k: 16 } };
        let split = KernelId::FlashAttnSplit(AttnSplit { width: SplitWidth::Narrow, subgroup: 32 }, F32);
        // 16 queries over 16 sequences: one each.
        assert_eq!(choose(&out(16), (16 * 512, 512), F32, 49152, Some(32), Some(nv)), split);
        assert_eq!(choose(&out(16), (16 * 512, 512), F32, 49152, None, None), KernelId::FlashAttn(F32));
        // A prefill chunk over the same cache: many queries per sequence, tiles.
        assert!(matches!(
            choose(&out(256), (16 * 512, 512), F32, 49152, Some(32), Some(nv)),
            KernelId::FlashAttnCm(..)
        ));
        // Splits over a sequence's rows, not the whole cache's.
        let (q, kv) = (out(4), Operand::contiguous(DType::F32, [128, 2, 4 * 64, 1], 0));
        let slots = Operand::contiguous(DType::I32, [4, 1, 1, 1], 0);
        let l = launch(split, &[q, kv, kv, slots], (0.1, 64), &q, None).unwrap();
        assert_eq!(l.grid, Grid::Split { splits: 4 });
        assert!(launch(split, &[q, kv, kv, slots], (0.1, 100), &q, None).is_err(), "256 rows are no sequences of 100");
        // K and V in whole vec4s only: an offset of 2 values is refused, 4 taken.
        for (values, ok) in [(2, false), (4, true)] {
            let off = Operand::contiguous(DType::F32, kv.ne, 4 * values);
            let l = launch(split, &[q, off, kv, slots], (0.1, 64), &q, None);
            assert_eq!(l.is_ok(), ok, "k at value {values}");
        }
    }

    #[test]
    fn a_tile_refuses_heads_above_its_class_and_odd_inputs() {
        let f32_op = |ne| Operand::contiguous(DType::F32, ne, 0);
        let (q, kv) = (f32_op([80, 4, 40, 1]), f32_op([80, 2, 100, 1]));
        let tiled = |tile| KernelId::FlashAttnTiled(tile, F32);
        assert!(launch(tiled(AttnTile::D128), &[q, kv, kv], (0.1, 100), &q, None).is_ok());
        assert!(launch(tiled(AttnTile::D64), &[q, kv, kv], (0.1, 100), &q, None).is_err(), "80 values in a 64 tile");
        assert!(launch(tiled(AttnTile::D128), &[q, kv], (0.1, 100), &q, None).is_err());
        let slots = Operand::contiguous(DType::I32, [40, 1, 1, 1], 0);
        assert!(launch(tiled(AttnTile::D128), &[q, kv, kv, slots], (0.1, 100), &q, None).is_ok());
        assert!(launch(tiled(AttnTile::D128), &[q, kv, kv, slots, slots], (0.1, 100), &q, None).is_err());
        assert!(launch(KernelId::RmsNorm, &[q, kv, kv], (0.1, 100), &q, None).is_err());
        // A kernel reads the values it was built for: an f16 cache takes the f16 pipeline.
        let kv16 = Operand::contiguous(DType::F16, kv.ne, 0);
        assert!(launch(tiled(AttnTile::D128), &[q, kv16, kv16], (0.1, 100), &q, None).is_err(), "f32 kernel");
        let half = KernelId::FlashAttnTiled(AttnTile::D128, Values::F16);
        assert!(launch(half, &[q, kv16, kv16], (0.1, 100), &q, None).is_ok());
        assert!(launch(half, &[q, kv, kv], (0.1, 100), &q, None).is_err(), "f16 kernel");
        assert_eq!(half.name(), "flash_attn_tiled_d128_f16");
        assert_eq!(half.constants(), [24, 16, 128, 1], "the tile's, then KV_F16");
        let l = launch(tiled(AttnTile::D128), &[q, kv, kv], (0.1, 100), &q, None).unwrap();
        // 4 heads x 2 tiles of 24 queries (of 40), in a grid clamped to 5.
        assert_eq!(l.groups([80, 4, 40, 1], [65535; 3]), [8, 1, 1]);
        assert_eq!(l.groups([80, 4, 40, 1], [5, 1, 1]), [5, 1, 1]);
    }
}
