//! What names a kernel: its op's variant, weight and value types, subgroup size and tiles
//! ([`KernelId`]), the SPIR-V module and specialization constants that make its pipeline, and
//! the handle a plan carries for it.

use super::*;

/// The kernels planned in this process, in the order their handles were given.
static PLANNED: Mutex<Vec<KernelId>> = Mutex::new(Vec::new());

/// The elementwise ops of `binary.comp` (its specialization constant).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BinaryOp {
    Add = 0,
    Mul = 1,
    SwiGlu = 2,
}

/// The elementwise one-input ops of `unary.comp` (its specialization constant).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum UnaryOp {
    Copy = 0,
    GeluTanh = 1,
    GeluErf = 2,
}

/// The values an operand holds where a kernel takes either kind: K and V of an attention kernel
/// (the KV cache's, `Registry::cache_dtype`: its specialization constant KV_F16,
/// shaders/attn_kv.glsl), x of a matrix-unit product (activations kept in halves,
/// `Registry::keeps_halves`: X_F16, shaders/mul_mat_cm_tiles.glsl), so that a pipeline reads one
/// kind with no branch among its loads; the output of a kernel that writes halves in pairs (a
/// push constant: its stores are few).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Values {
    F32 = 0,
    F16 = 1,
}

impl Values {
    pub const ALL: [Values; 2] = [Values::F32, Values::F16];

    /// Those `o` holds (`what` names it in the refusal).
    pub fn of(o: &Operand, what: &str) -> Result<Values> {
        match o.dtype {
            DType::F32 => Ok(Values::F32),
            DType::F16 => Ok(Values::F16),
            other => Err(VkError::Operands(format!("{what} is {other}, the kernel takes f32 or f16 values"))),
        }
    }

    /// The suffix of the kernel's name: none for f32 values.
    fn suffix(self) -> &'static str {
        match self {
            Values::F32 => "",
            Values::F16 => "_f16",
        }
    }
}

/// A kernel: one pipeline.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum KernelId {
    /// A product of weights of this type; x of these values (f16: `MatKind::takes_halves`).
    MatMul(MatKind, WType, Values),
    Binary(BinaryOp),
    RmsNorm,
    LayerNorm,
    Unary(UnaryOp),
    /// A table of this type; weighted (GET_ROWS_WEIGHTED) or not.
    GetRows(WType, bool),
    SetRows,
    Rope,
    /// RMS_NORM then ROPE of its output, in one dispatch.
    RmsNormRope,
    /// Attention for a few queries: a workgroup per (head, query). Each attention kernel reads
    /// K and V of one kind of values.
    FlashAttn(Values),
    /// Attention for many queries: a workgroup per (head, tile of queries).
    FlashAttnTiled(AttnTile, Values),
    /// As `FlashAttnTiled`, on the matrix units.
    FlashAttnCm(AttnCoop, Values),
    /// Attention for a few queries over long contexts: the kv rows of each (head, query) split
    /// over many workgroups, combined by the last to finish.
    FlashAttnSplit(AttnSplit, Values),
    /// The index of each row's largest value.
    Argmax,
    /// 16-byte words from input 1 to the output: the copy bandwidth `hrx bench --kernels`
    /// compares products with; no graph node runs it.
    Copy,
    /// What a subgroup of this many lanes is here (`selfcheck::probe`); no graph node runs it.
    SubgroupProbe(u32),
}

impl KernelId {
    /// Every kernel, each once (subgroup sizes and shapes 0: they are filled in from a plan's
    /// kernel).
    pub fn all() -> Vec<KernelId> {
        let mut all = Vec::new();
        for w in WType::ALL {
            for kind in MatKind::all() {
                let xs = if kind.takes_halves() { &Values::ALL[..] } else { &[Values::F32][..] };
                all.extend(xs.iter().map(|&x| KernelId::MatMul(kind, w, x)));
            }
            all.extend([KernelId::GetRows(w, false), KernelId::GetRows(w, true)]);
        }
        all.extend([BinaryOp::Add, BinaryOp::Mul, BinaryOp::SwiGlu].map(KernelId::Binary));
        all.extend([UnaryOp::Copy, UnaryOp::GeluTanh, UnaryOp::GeluErf].map(KernelId::Unary));
        all.extend([
            KernelId::RmsNorm,
            KernelId::LayerNorm,
            KernelId::SetRows,
            KernelId::Rope,
            KernelId::RmsNormRope,
            KernelId::Argmax,
            KernelId::Copy,
            KernelId::SubgroupProbe(0),
        ]);
        for kv in Values::ALL {
            all.push(KernelId::FlashAttn(kv));
            all.extend(
                [SplitWidth::Wide, SplitWidth::Narrow]
                    .map(|width| KernelId::FlashAttnSplit(AttnSplit { width, subgroup: 0 }, kv)),
            );
            all.extend(AttnTile::ALL.map(|tile| KernelId::FlashAttnTiled(tile, kv)));
            all.extend(
                [AttnTile::D64, AttnTile::D128]
                    .map(|class| KernelId::FlashAttnCm(AttnCoop { class, cm: CoopMat::UNSET }, kv)),
            );
        }
        all
    }

    /// The handle a plan carries for this kernel (`dispatcher::Kernel::handle`): its place in
    /// the process's table of kernels planned, so the executor takes the kernel back without
    /// reading its name.
    pub fn handle(self) -> u32 {
        let mut planned = PLANNED.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let at = planned.iter().position(|&k| k == self).unwrap_or_else(|| {
            planned.push(self);
            planned.len() - 1
        });
        u32::try_from(at).unwrap_or(u32::MAX)
    }

    /// The kernel of a plan's `kernel`: by the handle this backend's registry gave it.
    pub fn of_plan(kernel: &crate::dispatcher::Kernel) -> Option<KernelId> {
        let planned = PLANNED.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        planned.get(usize::try_from(kernel.handle?).ok()?).copied()
    }

    /// The kernel a record names (the self-check's file): `name` as [`KernelId::name`] gives
    /// it, with the subgroup size (and matrix-unit shape) of a variant built around one.
    pub fn from_name(kernel: &crate::dispatcher::Kernel) -> Option<KernelId> {
        let id = KernelId::all().into_iter().find(|k| k.name() == kernel.name)?;
        match (id, kernel.subgroup, kernel.shape) {
            (KernelId::MatMul(kind, w, x), subgroup, shape) => {
                Some(KernelId::MatMul(kind.with_variant(subgroup, shape)?, w, x))
            }
            (KernelId::SubgroupProbe(_), Some(subgroup), None) => Some(KernelId::SubgroupProbe(subgroup)),
            (KernelId::FlashAttnSplit(split, kv), Some(subgroup), None) => {
                Some(KernelId::FlashAttnSplit(AttnSplit { subgroup, ..split }, kv))
            }
            (KernelId::FlashAttnCm(tile, kv), Some(subgroup), Some([m, n, k])) => {
                let cm = CoopMat { subgroup, shape: crate::backend::vulkan::info::CoopShape { m, n, k } };
                Some(KernelId::FlashAttnCm(AttnCoop { cm, ..tile }, kv))
            }
            (id, None, None) => Some(id),
            _ => None,
        }
    }

    /// The subgroup size the kernel is built around, where it is one: it runs at exactly that
    /// size (its pipeline requires it where the device allows, `DeviceInfo::pins_subgroups`).
    pub fn subgroup(self) -> Option<u32> {
        match self {
            KernelId::MatMul(kind, ..) => kind.subgroup(),
            KernelId::FlashAttnCm(tile, _) => Some(tile.cm.subgroup),
            KernelId::FlashAttnSplit(split, _) => Some(split.subgroup),
            KernelId::SubgroupProbe(subgroup) => Some(subgroup),
            _ => None,
        }
    }

    /// The values K and V hold, for an attention kernel.
    pub fn kv(self) -> Option<Values> {
        match self {
            KernelId::FlashAttn(kv)
            | KernelId::FlashAttnTiled(_, kv)
            | KernelId::FlashAttnCm(_, kv)
            | KernelId::FlashAttnSplit(_, kv) => Some(kv),
            _ => None,
        }
    }

    /// This attention kernel reading `kv` values; any other kernel as it is.
    pub fn with_kv(self, kv: Values) -> KernelId {
        match self {
            KernelId::FlashAttn(_) => KernelId::FlashAttn(kv),
            KernelId::FlashAttnTiled(tile, _) => KernelId::FlashAttnTiled(tile, kv),
            KernelId::FlashAttnCm(tile, _) => KernelId::FlashAttnCm(tile, kv),
            KernelId::FlashAttnSplit(split, _) => KernelId::FlashAttnSplit(split, kv),
            other => other,
        }
    }

    /// The matrix-unit shape (M, N, K) the kernel is built around, where it is one.
    pub fn shape(self) -> Option<[u32; 3]> {
        match self {
            KernelId::MatMul(kind, ..) => kind.shape(),
            KernelId::FlashAttnCm(tile, _) => Some([tile.cm.shape.m, tile.cm.shape.n, tile.cm.shape.k]),
            _ => None,
        }
    }

    /// Its family in the kernel table (shaders/modules.txt).
    fn family(self) -> &'static str {
        match self {
            KernelId::MatMul(MatKind::Vec, ..) => "mul_mat_vec",
            KernelId::MatMul(MatKind::VecSg { .. }, ..) => "mul_mat_vec_sg",
            KernelId::MatMul(MatKind::VecWide { rows: 2, .. }, ..) => "mul_mat_vec_wide",
            KernelId::MatMul(MatKind::VecWide { rows: 4, .. }, ..) => "mul_mat_vec_wide4",
            KernelId::MatMul(MatKind::VecWide { .. }, ..) => "mul_mat_vec_wide8",
            KernelId::MatMul(MatKind::Tiled, ..) => "mul_mat",
            KernelId::MatMul(MatKind::Coop(_) | MatKind::CoopLarge(_), ..) => "mul_mat_cm",
            KernelId::MatMul(MatKind::CoopNarrow { blocks: 1, .. }, ..) => "mul_mat_cm_narrow",
            KernelId::MatMul(MatKind::CoopNarrow { .. }, ..) => "mul_mat_cm_narrow2",
            KernelId::MatMul(MatKind::CoopExact(_), ..) => "mul_mat_cm_exact",
            KernelId::MatMul(MatKind::Rows, ..) => "mul_mat_rows",
            KernelId::Binary(_) => "binary",
            KernelId::RmsNorm => "rms_norm",
            KernelId::LayerNorm => "layer_norm",
            KernelId::Unary(_) => "unary",
            KernelId::GetRows(..) => "get_rows",
            KernelId::SetRows => "set_rows",
            KernelId::Rope => "rope",
            KernelId::RmsNormRope => "rms_norm_rope",
            KernelId::FlashAttn(_) => "flash_attn",
            KernelId::FlashAttnTiled(..) => "flash_attn_tiled",
            KernelId::FlashAttnCm(..) => "flash_attn_cm",
            KernelId::FlashAttnSplit(AttnSplit { width: SplitWidth::Wide, .. }, _) => "flash_attn_split",
            KernelId::FlashAttnSplit(AttnSplit { width: SplitWidth::Narrow, .. }, _) => "flash_attn_split_narrow",
            KernelId::Argmax => "argmax",
            KernelId::Copy => "copy",
            KernelId::SubgroupProbe(_) => "subgroup_probe",
        }
    }

    fn wtype(self) -> Option<WType> {
        match self {
            KernelId::MatMul(_, w, _) | KernelId::GetRows(w, _) => Some(w),
            _ => None,
        }
    }

    /// Its SPIR-V module: the family, and the weight type for families compiled per type.
    pub fn module(self) -> String {
        match self.wtype() {
            Some(w) => format!("{}_{}", self.family(), w.suffix()),
            None => self.family().to_owned(),
        }
    }

    /// The name plans, logs and profiles show: the module's, or for modules that run several
    /// ops through a specialization constant, the op's (`add`, `gelu_erf`,
    /// `get_rows_weighted_q4_k`); an attention kernel's over f16 values ends in `_f16`, a
    /// product's of x in f16 values in `_x_f16`.
    pub fn name(self) -> String {
        let name = self.base_name();
        match (self, self.kv()) {
            (_, Some(kv)) => name + kv.suffix(),
            (KernelId::MatMul(.., Values::F16), None) => name + "_x_f16",
            _ => name,
        }
    }

    fn base_name(self) -> String {
        match self {
            KernelId::Binary(BinaryOp::Add) => "add".into(),
            KernelId::Binary(BinaryOp::Mul) => "mul".into(),
            KernelId::Binary(BinaryOp::SwiGlu) => "swiglu".into(),
            KernelId::Unary(UnaryOp::Copy) => "cont".into(),
            KernelId::Unary(UnaryOp::GeluTanh) => "gelu".into(),
            KernelId::Unary(UnaryOp::GeluErf) => "gelu_erf".into(),
            KernelId::GetRows(w, true) => format!("get_rows_weighted_{}", w.suffix()),
            KernelId::FlashAttnTiled(tile, _) => format!("flash_attn_tiled_{}", tile.suffix()),
            KernelId::FlashAttnCm(tile, _) => format!("flash_attn_cm_{}", tile.class.suffix()),
            KernelId::MatMul(MatKind::VecWide { cols, .. }, ..) if cols > 1 => format!("{}_x{cols}", self.module()),
            KernelId::MatMul(MatKind::CoopLarge(_), w, _) => format!("mul_mat_cm_large_{}", w.suffix()),
            other => other.module(),
        }
    }

    /// The members of the kernel's push-constant block, as its struct lays them out.
    pub(super) fn push_members(self) -> Vec<Member> {
        match self {
            KernelId::MatMul(..) => members::<matmul::MatMulPush>(),
            KernelId::Binary(_) => members::<binary::BinaryPush>(),
            KernelId::RmsNorm => members::<norm::RmsNormPush>(),
            KernelId::LayerNorm => members::<norm::LayerNormPush>(),
            KernelId::Unary(_) => members::<unary::UnaryPush>(),
            KernelId::GetRows(..) => members::<rows::GetRowsPush>(),
            KernelId::SetRows => members::<rows::SetRowsPush>(),
            KernelId::Rope => members::<rope::RopePush>(),
            KernelId::RmsNormRope => members::<launch::RmsNormRopePush>(),
            KernelId::FlashAttn(_) | KernelId::FlashAttnTiled(..) | KernelId::FlashAttnCm(..) => {
                members::<attn::AttnPush>()
            }
            KernelId::FlashAttnSplit(..) => members::<attn::AttnSplitPush>(),
            KernelId::Argmax => members::<argmax::ArgmaxPush>(),
            KernelId::Copy => members::<push::CopyPush>(),
            KernelId::SubgroupProbe(_) => members::<push::ProbePush>(),
        }
    }

    /// The bytes of the kernel's push-constant block.
    pub(super) fn push_bytes(self) -> u32 {
        self.push_members().iter().map(|m| 4 * m.words() as u32).sum()
    }

    pub(super) fn constants(self) -> Vec<u32> {
        match self {
            KernelId::Binary(op) => vec![op as u32],
            KernelId::Unary(op) => vec![op as u32],
            KernelId::GetRows(_, weighted) => vec![u32::from(weighted)],
            KernelId::MatMul(MatKind::VecWide { cols, .. }, ..) => vec![cols],
            // The workgroup (four subgroups), the matrix-unit shape and the tiles, then X_F16.
            KernelId::MatMul(kind, _, x) => {
                kind.coop_tiles().map_or_else(Vec::new, |(cm, tiles)| [tiles.constants(cm), vec![x as u32]].concat())
            }
            // The tile's, then KV_F16.
            KernelId::FlashAttnTiled(tile, kv) => [tile.constants(), vec![kv as u32]].concat(),
            KernelId::FlashAttnCm(tile, kv) => [tile.constants(), vec![kv as u32]].concat(),
            KernelId::FlashAttn(kv) | KernelId::FlashAttnSplit(_, kv) => vec![kv as u32],
            _ => Vec::new(),
        }
    }
}
