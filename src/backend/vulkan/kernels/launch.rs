//! A kernel's launch: the operands as it sees them, its push constants, grid and bindings,
//! from the plan's choice of kernel and the dispatch's ops.

use super::push::{push_block, ProbePush};
use super::rope::RopePush;
use super::*;

/// An operand as a kernel sees it: dtype, maximal shape, byte strides, byte offset in the
/// buffer bound for it, and its dynamic axis (kernels that size their work by an input, such
/// as SET_ROWS by its source rows, read it).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Operand {
    pub dtype: DType,
    pub ne: [usize; MAX_DIMS],
    pub nb: [usize; MAX_DIMS],
    pub offset: usize,
    pub dynamic: Option<Dyn>,
}

impl Operand {
    /// A contiguous, static operand at byte `offset`.
    pub fn contiguous(dtype: DType, ne: [usize; MAX_DIMS], offset: usize) -> Operand {
        Operand { dtype, ne, nb: crate::graph::contiguous_strides(dtype, ne), offset, dynamic: None }
    }
}

/// A kernel chosen for a node, with its push constants; `groups` gives the grid for a
/// run-time output shape.
#[derive(Clone, Debug, PartialEq)]
pub struct Launch {
    pub kernel: KernelId,
    pub push: PushWords,
    /// Output elements per workgroup along (rows of ne0, columns), for the grid.
    pub(super) grid: Grid,
    /// The grid follows the run-time shape of this input (SET_ROWS: its source), else the
    /// output's.
    pub grid_input: Option<usize>,
    /// The binding of each input, in the order the launch took them; empty: 1, 2, 3...
    pub slots: Vec<u32>,
    /// The scratch memory the dispatch uses (`SCRATCH_BINDING`).
    pub scratch: Scratch,
}

/// Scratch memory of a dispatch: `bytes` in all (0: none), of which those from `counters` on
/// must be zero when it starts and are zero again when it ends (the rest it writes before it
/// reads). Dispatches with the same two can share a buffer where a barrier orders them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Scratch {
    pub bytes: usize,
    pub counters: usize,
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) enum Grid {
    /// x: ne0 / rows_per_group, y: columns (ne1*ne2*ne3) / cols_per_group.
    Mat { rows: usize, cols: usize },
    /// x: all elements / per_group.
    Flat { per_group: usize },
    /// x: one group per row (ne1*ne2*ne3).
    Rows,
    /// x: one group per (ne1, tile of `queries` along ne2) (and ne3).
    QueryTiles { queries: usize },
    /// x: one group per (ne1, ne2, ne3) and split.
    Split { splits: usize },
}

impl Grid {
    /// The row-wise elementwise kernels' grid (shaders/elementwise.glsl): x, chunks of
    /// `ROW_CHUNK` (1,024) values of a row; y, the rows.
    pub(super) const ROW_CHUNKS: Grid = Grid::Mat { rows: 1024, cols: 1 };
}

impl Launch {
    /// The binding input `i` goes to.
    pub fn slot(&self, i: usize) -> u32 {
        self.slots.get(i).copied().unwrap_or(i as u32 + 1)
    }

    /// Workgroups for output shape `ne` (the run-time one), within the device's `max`. The
    /// kernels loop over what a clamped grid leaves.
    pub fn groups(&self, ne: [usize; MAX_DIMS], max: [u32; 3]) -> [u32; 3] {
        let cols = ne[1] * ne[2] * ne[3];
        let g = match self.grid {
            Grid::Mat { rows, cols: per } => [ne[0].div_ceil(rows), cols.div_ceil(per), 1],
            Grid::Flat { per_group } => [(ne[0] * cols).div_ceil(per_group), 1, 1],
            Grid::Rows => [cols, 1, 1],
            Grid::QueryTiles { queries } => [ne[1] * ne[2].div_ceil(queries) * ne[3], 1, 1],
            Grid::Split { splits } => [cols * splits, 1, 1],
        };
        [0, 1, 2].map(|i| g[i].min(max[i] as usize) as u32)
    }
}

/// A run-time length for axis `axis` of the output: `syms[sym] * num / den`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Dyn {
    pub axis: usize,
    pub sym: usize,
    pub num: usize,
    pub den: usize,
}

impl From<DynAxis> for Dyn {
    fn from(d: DynAxis) -> Dyn {
        Dyn { axis: d.axis, sym: d.sym.0, num: d.num, den: d.den }
    }
}

/// Push-constant words of a dynamic axis; axis 4 means static.
pub(super) fn dyn_words(d: Option<Dyn>) -> Result<[u32; 4]> {
    match d {
        None => Ok([4, 0, 1, 1]),
        Some(d) if d.axis < MAX_DIMS && d.den > 0 => {
            Ok([d.axis as u32, word(d.sym, "symbol")?, word(d.num, "ratio")?, word(d.den, "ratio")?])
        }
        Some(d) => Err(VkError::Operands(format!("bad dynamic axis {d:?}"))),
    }
}

/// The byte strides of an f32 or f16 operand as words of its values.
pub(super) fn stride_words(o: &Operand, what: &str) -> Result<[u32; MAX_DIMS]> {
    let mut words = [0; MAX_DIMS];
    for (w, &nb) in words.iter_mut().zip(&o.nb) {
        *w = values(o, nb, what)?;
    }
    Ok(words)
}

/// A size or offset as a push-constant word.
pub(super) fn word(v: usize, what: &str) -> Result<u32> {
    u32::try_from(v).map_err(|_| VkError::Operands(format!("{what} {v} does not fit 32 bits")))
}

/// A byte offset or stride of an f32 operand in floats.
pub(super) fn floats(bytes: usize, what: &str) -> Result<u32> {
    if !bytes.is_multiple_of(4) {
        return Err(VkError::Operands(format!("{what}: {bytes} bytes is not a whole number of floats")));
    }
    word(bytes / 4, what)
}

/// How a kernel that writes f32 or f16 values (a cache's rows, `Registry::cache_dtype`, or
/// activations kept in halves) takes its output `o`, its push constant: 0 as f32 values, 1 as
/// f16 ones (its offsets and strides then count halves).
pub(super) fn halves(o: &Operand, what: &str) -> Result<u32> {
    Ok(Values::of(o, what)? as u32)
}

/// The output `o` of a kernel that writes it as f32 values or, in pairs, as halves: its push
/// words (offset, strides: values) and the halves flag. Halves go out as whole aligned pairs
/// along contiguous rows.
pub(super) fn out_words(o: &Operand, kernel: &str) -> Result<(u32, [u32; MAX_DIMS], u32)> {
    let half = halves(o, &format!("{kernel}'s output"))?;
    let words = stride_words(o, "output stride")?;
    let offset = values(o, o.offset, "output offset")?;
    let pairs = o.ne[0].is_multiple_of(2) && offset.is_multiple_of(2) && words[1..].iter().all(|w| w.is_multiple_of(2));
    if half == 1 && (words[0] != 1 || !pairs) {
        return Err(VkError::Operands(format!("{kernel}: halves are written in pairs along contiguous rows")));
    }
    Ok((offset, words, half))
}

/// A byte offset or stride of an f32 or f16 operand `o` in its values.
pub(super) fn values(o: &Operand, bytes: usize, what: &str) -> Result<u32> {
    let size = o.dtype.block_bytes();
    if !bytes.is_multiple_of(size) {
        return Err(VkError::Operands(format!("{what}: {bytes} bytes is not a whole number of {} values", o.dtype)));
    }
    word(bytes / size, what)
}

pub(super) fn expect_f32(o: &Operand, what: &str) -> Result<()> {
    if o.dtype != DType::F32 {
        return Err(VkError::Operands(format!("{what} is {}, the kernel reads f32", o.dtype)));
    }
    Ok(())
}

/// The ops of one dispatch's nodes (`dispatcher::Group`): the node's, its folded producer's (computed
/// on the fly from the producer's inputs), its fused reader's (whose output it writes).
#[derive(Clone, Copy, Debug)]
pub struct Ops<'a> {
    pub node: &'a Op,
    pub folded: Option<&'a Op>,
    pub fused: Option<&'a Op>,
}

impl<'a> Ops<'a> {
    pub fn single(node: &'a Op) -> Ops<'a> {
        Ops { node, folded: None, fused: None }
    }

    pub(super) fn names(&self) -> String {
        let ops = self.folded.into_iter().chain([self.node]).chain(self.fused);
        ops.map(|o| o.name()).collect::<Vec<_>>().join("+")
    }
}

/// The launch of the subgroup probe at `size` lanes: one workgroup of 128 invocations, each
/// writing four words to the output (`selfcheck::probe`).
pub fn probe_launch(size: u32) -> Launch {
    Launch {
        kernel: KernelId::SubgroupProbe(size),
        push: PushWords::of(&ProbePush::default()),
        grid: Grid::Rows,
        grid_input: None,
        slots: Vec::new(),
        scratch: Scratch::default(),
    }
}

/// The push constants, grid and bindings of `kernel` (the plan's choice) running `ops` on `ins`
/// (in `dispatcher::Group::inputs` order) into `out`; an error when the kernel does not take them.
pub fn launch(kernel: KernelId, ops: Ops, ins: &[Operand], out: &Operand, dynamic: Option<Dyn>) -> Result<Launch> {
    let arg = |i: usize| ins.get(i).ok_or_else(|| VkError::Operands(format!("{} needs input {i}", kernel.name())));
    let launch = match (kernel, ops.node, ops.folded, ops.fused) {
        (KernelId::MatMul(kind, ..), Op::MatMul, folded, fused) => {
            // w, x (or the folded producer's first input), the fused ADD's residual, the folded
            // producer's second input: bindings 1, 2, 3, 4.
            let residual = match fused {
                None => None,
                Some(Op::Add) => Some(arg(2)?),
                Some(other) => return Err(VkError::Operands(format!("a product does not fuse {}", other.name()))),
            };
            let second = if residual.is_some() { 3 } else { 2 };
            let prologue = match folded {
                None => None,
                Some(Op::RmsNorm { eps }) => Some(Prologue::RmsNorm { weight: *arg(second)?, eps: *eps }),
                Some(Op::SwiGlu) => Some(Prologue::SwiGlu { up: *arg(second)? }),
                Some(other) => return Err(VkError::Operands(format!("a product does not fold {}", other.name()))),
            };
            let mut l = matmul::launch(kind, arg(0)?, arg(1)?, out, residual, prologue, dynamic)?;
            if prologue.is_some() && residual.is_none() {
                l.slots = vec![1, 2, 4];
            }
            l
        }
        (KernelId::RmsNormRope, rope, Some(norm), fused) => launch_norm_rope(norm, rope, fused, ins, out, dynamic)?,
        (
            KernelId::FlashAttnTiled(..) | KernelId::FlashAttnCm(..) | KernelId::FlashAttnSplit(..),
            Op::Attention { scale, segment },
            None,
            None,
        ) => attn::launch(kernel, ins, (*scale, *segment), out, dynamic)?,
        (_, op, None, None) => op_launch(op, ins, out, dynamic)?,
        _ => return Err(VkError::Operands(format!("{} does not run {}", kernel.name(), ops.names()))),
    };
    if launch.kernel != kernel {
        return Err(VkError::Operands(format!(
            "the plan names {}, the node needs {}",
            kernel.name(),
            launch.kernel.name()
        )));
    }
    Ok(launch)
}

/// The one kernel of a compute op other than a matrix product, with its push constants.
pub(super) fn op_launch(op: &Op, ins: &[Operand], out: &Operand, dynamic: Option<Dyn>) -> Result<Launch> {
    let arg = |i: usize| ins.get(i).ok_or_else(|| VkError::Operands(format!("{} needs input {i}", op.name())));
    match op {
        Op::Add => binary::launch(BinaryOp::Add, arg(0)?, arg(1)?, out, dynamic),
        Op::Mul => binary::launch(BinaryOp::Mul, arg(0)?, arg(1)?, out, dynamic),
        Op::SwiGlu => binary::launch(BinaryOp::SwiGlu, arg(0)?, arg(1)?, out, dynamic),
        Op::RmsNorm { eps } => norm::launch(arg(0)?, arg(1)?, *eps, out, dynamic),
        Op::LayerNorm { eps } => norm::layer_norm(arg(0)?, arg(1)?, arg(2)?, *eps, out, dynamic),
        Op::Gelu(Gelu::Tanh) => unary::launch(UnaryOp::GeluTanh, arg(0)?, out, dynamic),
        Op::Gelu(Gelu::Erf) => unary::launch(UnaryOp::GeluErf, arg(0)?, out, dynamic),
        Op::Cont => unary::launch(UnaryOp::Copy, arg(0)?, out, dynamic),
        Op::GetRows => rows::get_rows(arg(0)?, arg(1)?, None, out, dynamic),
        Op::GetRowsWeighted => rows::get_rows(arg(0)?, arg(1)?, Some(arg(2)?), out, dynamic),
        Op::SetRows => rows::set_rows(arg(0)?, arg(1)?, arg(2)?, out),
        Op::Rope { kind, theta, n_dims } => {
            Ok(rope::launch(rope::push(kind, *theta, *n_dims, arg(0)?, arg(1)?, out, dynamic)?))
        }
        Op::Attention { scale, segment } => {
            let kernel = KernelId::FlashAttn(Values::of(arg(1)?, "k")?);
            attn::launch(kernel, ins, (*scale, *segment), out, dynamic)
        }
        Op::Argmax => argmax::launch(arg(0)?, out, dynamic),
        other => Err(VkError::Operands(format!("no Vulkan kernel for {}", other.name()))),
    }
}

/// ROPE (`rope`) of an RMS_NORM (`norm`, folded: computed as the rope loads its rows) as one
/// kernel: `ins` are x and the positions, then, with a fused SET_ROWS (`scatter`), its ids,
/// then the norm weight. With the SET_ROWS, token t's rotated heads (the rope's output,
/// [head_dim, heads, tokens] reshaped to rows of head_dim * heads) go to row ids[t] of `out`,
/// the SET_ROWS's destination (a KV cache), and nothing else is written.
pub(super) fn launch_norm_rope(
    norm: &Op,
    rope: &Op,
    scatter: Option<&Op>,
    ins: &[Operand],
    out: &Operand,
    dynamic: Option<Dyn>,
) -> Result<Launch> {
    let (Op::RmsNorm { eps }, Op::Rope { kind, theta, n_dims }) = (norm, rope) else {
        return Err(VkError::Operands(format!("no fused kernel for {} then {}", norm.name(), rope.name())));
    };
    let arg = |i: usize| ins.get(i).ok_or_else(|| VkError::Operands(format!("rms_norm_rope needs input {i}")));
    let (x, pos) = (arg(0)?, arg(1)?);
    // The rope's output as the kernel writes it, and (ids offset, stride, destination rows).
    let (rotated, rows, weight) = match scatter {
        None => (*out, None, arg(2)?),
        Some(Op::SetRows) => {
            let ids = arg(2)?;
            let width = x.ne[0] * x.ne[1];
            let half = halves(out, "rms_norm_rope's destination")?;
            let size = out.dtype.block_bytes();
            // Halves go out in pairs: whole, aligned pairs of rotated halves, tails and rows.
            let pairs = half == 0 || [x.ne[0], out.offset / size, out.nb[1] / size].iter().all(|v| v.is_multiple_of(2));
            if ids.dtype != DType::I32
                || ids.ne != [x.ne[2], 1, 1, 1]
                || x.ne[3] != 1
                || out.ne[0] != width
                || out.ne[2] != 1
                || out.ne[3] != 1
                || out.nb[0] != size
                || !out.offset.is_multiple_of(size)
                || !out.nb[1].is_multiple_of(size)
                || !pairs
            {
                return Err(VkError::Operands(format!(
                    "rms_norm_rope: {:?} by ids {:?} into rows {} {:?}",
                    x.ne, ids.ne, out.dtype, out.ne
                )));
            }
            // The kernel counts the destination's offsets and strides in its values: a cache of
            // halves goes through the f32 launches' checks as floats at 4 / 2 times its bytes.
            let (row, offset) = (out.nb[1] / size * 4, out.offset / size * 4);
            let nb = [4, 4 * x.ne[0], row, row * out.ne[1]];
            let rotated = Operand { nb, dynamic: x.dynamic, ..Operand::contiguous(DType::F32, x.ne, offset) };
            let rows = Scatter {
                i_off: floats(ids.offset, "ids offset")?,
                i_nb0: floats(ids.nb[0], "ids stride")?,
                d_rows: word(out.ne[1], "rows")?,
                d_f16: half,
            };
            (rotated, Some(rows), arg(3)?)
        }
        Some(other) => return Err(VkError::Operands(format!("rms_norm_rope does not fuse {}", other.name()))),
    };
    let dynamic = if rows.is_some() { x.dynamic } else { dynamic };
    // Each half of the fused kernel accepts what its own kernel accepts.
    norm::launch(x, weight, *eps, &rotated, dynamic)?;
    let block = RmsNormRopePush {
        rope: rope::push(kind, *theta, *n_dims, x, pos, &rotated, dynamic)?,
        w_off: floats(weight.offset, "weight offset")?,
        eps: *eps,
        // Rows 0: no scatter (and f32 values).
        scatter: rows.unwrap_or_default(),
    };
    Ok(Launch {
        kernel: KernelId::RmsNormRope,
        push: PushWords::of(&block),
        grid: Grid::Rows,
        // The grid follows the rope's rows (the folded norm's value), not the destination's.
        grid_input: Some(0),
        slots: if rows.is_some() { vec![1, 3, 4, 2] } else { vec![1, 3, 2] },
        scratch: Scratch::default(),
    })
}

push_block! {
    /// `rms_norm_rope.comp`: the rope's members, the norm's, then the fused SET_ROWS's.
    pub struct RmsNormRopePush {
        rope: RopePush,
        /// The norm weight's offset (floats).
        w_off: u32,
        eps: f32,
        scatter: Scatter,
    }
}

push_block! {
    /// Where `rms_norm_rope` writes rows when a SET_ROWS is fused: ids offset and stride (ints),
    /// the destination's rows (0: no scatter), whether it holds halves.
    pub struct Scatter {
        i_off: u32,
        i_nb0: u32,
        d_rows: u32,
        d_f16: u32,
    }
}
