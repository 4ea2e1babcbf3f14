//! The tensor graph IR: values with ggml-style shapes and byte strides, nodes that produce them,
//! and a builder that checks shapes as it goes. No model and no device knowledge.
//!
//! Every node produces exactly one value, so a node id is also a value id. A value has a
//! maximal shape `ne` (elements per axis, innermost first) and byte strides `nb`; at most one
//! axis may be *dynamic*: its length at run time is `symbol * num / den` (at most `ne`), which
//! is how one plan serves every prompt length or image size up to the planned maximum.

mod op;

pub use op::{Gelu, Op, RopeKind};

use crate::quant::DType;
use std::fmt;

pub const MAX_DIMS: usize = 4;

/// Index of a node (and of the value it produces) in its graph.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NodeId(pub usize);

/// Which kv rows each query of an attention sees.
#[derive(Clone, Copy, Debug)]
pub enum AttnMask {
    /// All of them.
    Full,
    /// Its own sequence's up to its slot: the slots (i32 [n_q]) and the kv rows per sequence
    /// (a divisor of n_kv).
    Causal { slots: NodeId, segment: usize },
    /// Its own span: i32 [2, n_q], each query's first kv row and the end.
    Spans(NodeId),
}

/// A run-time size, e.g. the number of tokens in a prefill chunk.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SymId(pub usize);

/// A dynamic axis: its run-time length is `value(sym) * num / den`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DynAxis {
    pub axis: usize,
    pub sym: SymId,
    pub num: usize,
    pub den: usize,
}

/// Where an external value's bytes live: a storage the graph does not own, named so the
/// runtime can bind it (a GGUF tensor, the KV cache, the wide input embedding...).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ExternalId(pub usize);

#[derive(Clone, Debug, PartialEq)]
pub struct External {
    pub name: String,
    pub dtype: DType,
    /// Size of the storage in bytes (every window on it must fit).
    pub bytes: usize,
    /// Bound to a weight of the model file (as opposed to a run-time buffer).
    pub is_weight: bool,
}

/// A value: dtype, shape, strides, and where its bytes start.
#[derive(Clone, Debug, PartialEq)]
pub struct Value {
    pub dtype: DType,
    pub ne: [usize; MAX_DIMS],
    pub nb: [usize; MAX_DIMS],
    pub dyn_axis: Option<DynAxis>,
    /// For `Op::External` values and compute nodes that write into an external storage: that
    /// storage and the byte offset of the value in it.
    pub external: Option<(ExternalId, usize)>,
    /// For layout ops: the byte offset of this window relative to the input's first byte.
    pub view_offset: usize,
}

impl Value {
    /// Contiguous f32-or-other value of shape `ne`.
    pub fn contiguous(dtype: DType, ne: [usize; MAX_DIMS]) -> Value {
        Value { dtype, ne, nb: contiguous_strides(dtype, ne), dyn_axis: None, external: None, view_offset: 0 }
    }

    pub fn n_elements(&self) -> usize {
        self.ne.iter().product()
    }

    /// Bytes spanned from the first to one past the last element (maximal shape).
    pub fn extent_bytes(&self) -> usize {
        if self.ne.contains(&0) {
            return 0;
        }
        let row = self.dtype.row_bytes(self.ne[0] as u64).unwrap_or(0) as usize;
        row + (1..MAX_DIMS).map(|i| (self.ne[i] - 1) * self.nb[i]).sum::<usize>()
    }

    pub fn is_contiguous(&self) -> bool {
        self.nb == contiguous_strides(self.dtype, self.ne)
    }

    /// Text form used in plan messages: `f32[2048,2,1,1]`.
    pub fn shape_str(&self) -> String {
        format!("{}[{},{},{},{}]", self.dtype.name().to_lowercase(), self.ne[0], self.ne[1], self.ne[2], self.ne[3])
    }
}

/// Byte strides of a contiguous value (rows of whole blocks for quantized types).
pub fn contiguous_strides(dtype: DType, ne: [usize; MAX_DIMS]) -> [usize; MAX_DIMS] {
    let row = (ne[0] / dtype.block_len()) * dtype.block_bytes();
    [dtype.block_bytes(), row, row * ne[1], row * ne[1] * ne[2]]
}

#[derive(Clone, Debug, PartialEq)]
pub struct Node {
    pub op: Op,
    pub inputs: Vec<NodeId>,
    pub value: Value,
    /// A name for logs and tests, e.g. `blk.3.attn_out`.
    pub name: String,
}

/// A shape or type mismatch found while building node `node`: a bug in the builder's caller or
/// a model file whose tensors disagree with its metadata.
#[derive(Debug, Clone, PartialEq)]
pub struct GraphError {
    /// The name of the node (or weight) being added, e.g. `blk.3.attn_out`.
    pub node: String,
    pub message: String,
}

impl GraphError {
    pub fn new(node: impl Into<String>, message: impl Into<String>) -> GraphError {
        GraphError { node: node.into(), message: message.into() }
    }
}

impl fmt::Display for GraphError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.node, self.message)
    }
}

impl std::error::Error for GraphError {}

pub type Result<T> = std::result::Result<T, GraphError>;

#[derive(Clone, Debug, Default)]
pub struct Graph {
    pub name: String,
    pub nodes: Vec<Node>,
    pub externals: Vec<External>,
    /// Symbol names and their planned maxima.
    pub symbols: Vec<(String, usize)>,
    /// Values the caller reads after a run.
    pub outputs: Vec<NodeId>,
}

fn err<T>(node: &str, message: String) -> Result<T> {
    Err(GraphError::new(node, message))
}

// Graphs and the builders' records that hold one (a text graph with its outputs' ids) load alike.
impl AsRef<Graph> for Graph {
    fn as_ref(&self) -> &Graph {
        self
    }
}

impl Graph {
    pub fn new(name: &str) -> Graph {
        Graph { name: name.to_owned(), ..Default::default() }
    }

    pub fn node(&self, id: NodeId) -> &Node {
        &self.nodes[id.0]
    }

    pub fn value(&self, id: NodeId) -> &Value {
        &self.nodes[id.0].value
    }

    /// The value whose bytes `id` is: `id` itself, or what a chain of RESHAPEs of it reads.
    pub fn reshaped_from(&self, mut id: NodeId) -> NodeId {
        while let (Op::Reshape, Some(&input)) = (&self.nodes[id.0].op, self.nodes[id.0].inputs.first()) {
            id = input;
        }
        id
    }

    /// The value a chain of layout ops from `id` windows (`id` itself where it is no layout op).
    pub fn layout_root(&self, mut id: NodeId) -> NodeId {
        while let (true, Some(&input)) = (self.nodes[id.0].op.is_layout(), self.nodes[id.0].inputs.first()) {
            id = input;
        }
        id
    }

    /// Nodes that read `id`, in order.
    pub fn consumers(&self, id: NodeId) -> Vec<NodeId> {
        (0..self.nodes.len()).map(NodeId).filter(|&n| self.nodes[n.0].inputs.contains(&id)).collect()
    }

    /// The largest value that is not (a window of) a weight, and the bytes it spans at the
    /// planned maxima: what a device must bind as one window for the graph's run-time values.
    /// Weights are left out: their size does not follow the planned shapes, and the backends
    /// split products over weights larger than one window.
    pub fn largest_run_value(&self) -> Option<(NodeId, usize)> {
        let is_weight = |mut id: NodeId| {
            while self.node(id).op.is_layout() {
                id = self.node(id).inputs[0];
            }
            self.value(id).external.is_some_and(|(storage, _)| self.externals[storage.0].is_weight)
        };
        (0..self.nodes.len())
            .map(NodeId)
            .filter(|&id| !is_weight(id))
            .map(|id| (id, self.value(id).extent_bytes()))
            .max_by_key(|&(_, bytes)| bytes)
    }

    pub fn symbol(&mut self, name: &str, max: usize) -> SymId {
        self.symbols.push((name.to_owned(), max));
        SymId(self.symbols.len() - 1)
    }

    pub fn mark_output(&mut self, id: NodeId) {
        if !self.outputs.contains(&id) {
            self.outputs.push(id);
        }
    }

    fn push(&mut self, op: Op, inputs: Vec<NodeId>, value: Value, name: &str) -> NodeId {
        self.nodes.push(Node { op, inputs, value, name: name.to_owned() });
        NodeId(self.nodes.len() - 1)
    }

    /// Declares a storage owned by someone else.
    pub fn external_storage(&mut self, name: &str, dtype: DType, bytes: usize, is_weight: bool) -> ExternalId {
        self.externals.push(External { name: name.to_owned(), dtype, bytes, is_weight });
        ExternalId(self.externals.len() - 1)
    }

    /// A value that is a window of an external storage.
    pub fn external_window(
        &mut self,
        name: &str,
        storage: ExternalId,
        offset: usize,
        ne: [usize; MAX_DIMS],
        nb: [usize; MAX_DIMS],
        dyn_axis: Option<DynAxis>,
    ) -> Result<NodeId> {
        let ext = &self.externals[storage.0];
        let value = Value { dtype: ext.dtype, ne, nb, dyn_axis, external: Some((storage, offset)), view_offset: 0 };
        if offset + value.extent_bytes() > ext.bytes {
            return err(
                name,
                format!("window {ne:?} at {offset} runs past storage {:?} ({} bytes)", ext.name, ext.bytes),
            );
        }
        Ok(self.push(Op::External, vec![], value, name))
    }

    /// A contiguous external value with its own storage.
    pub fn input(
        &mut self,
        name: &str,
        dtype: DType,
        ne: [usize; MAX_DIMS],
        dyn_axis: Option<DynAxis>,
    ) -> Result<NodeId> {
        let probe = Value::contiguous(dtype, ne);
        let storage = self.external_storage(name, dtype, probe.extent_bytes(), false);
        self.external_window(name, storage, 0, ne, probe.nb, dyn_axis)
    }

    /// A contiguous weight bound from the model file.
    pub fn weight(&mut self, name: &str, dtype: DType, ne: [usize; MAX_DIMS]) -> Result<NodeId> {
        if dtype.row_bytes(ne[0] as u64).is_none() {
            return err(name, format!("row of {} is not whole {dtype} blocks", ne[0]));
        }
        let probe = Value::contiguous(dtype, ne);
        let storage = self.external_storage(name, dtype, probe.extent_bytes(), true);
        self.external_window(name, storage, 0, ne, probe.nb, None)
    }

    // ---- layout ops ----

    /// A window on `input`: `offset` bytes in, with its own shape and strides.
    pub fn view(
        &mut self,
        input: NodeId,
        ne: [usize; MAX_DIMS],
        nb: [usize; MAX_DIMS],
        offset: usize,
        dyn_axis: Option<DynAxis>,
        name: &str,
    ) -> Result<NodeId> {
        let dtype = self.value(input).dtype;
        let value = Value { dtype, ne, nb, dyn_axis, external: None, view_offset: offset };
        Ok(self.push(Op::View, vec![input], value, name))
    }

    /// Same bytes, new shape. The dynamic axis (if any) must be the outermost non-unit axis
    /// before and after, so the inner size is the same at every run-time length.
    pub fn reshape(&mut self, input: NodeId, ne: [usize; MAX_DIMS], name: &str) -> Result<NodeId> {
        let src = self.value(input).clone();
        if !src.is_contiguous() {
            return err(name, format!("reshape of a non-contiguous value {}", src.shape_str()));
        }
        if src.n_elements() != ne.iter().product::<usize>() {
            return err(name, format!("reshape {} to {ne:?} changes the element count", src.shape_str()));
        }
        let dyn_axis = match src.dyn_axis {
            None => None,
            Some(d) => {
                // Run-time length: the outermost non-unit axis of the result carries the
                // dynamic size, scaled by the ratio of the inner sizes.
                let inner_src: usize = src.ne[..d.axis].iter().product();
                // Prefer the axis with the same inner size (the dynamic length carries over
                // unchanged), else the outermost non-unit one.
                let above_unit = |i: usize| ne[i + 1..].iter().all(|&x| x == 1);
                let axis = (0..MAX_DIMS)
                    .find(|&i| above_unit(i) && ne[..i].iter().product::<usize>() == inner_src)
                    .unwrap_or_else(|| (0..MAX_DIMS).rev().find(|&i| ne[i] != 1).unwrap_or(0));
                let inner_dst: usize = ne[..axis].iter().product();
                let outer_ok = src.ne[d.axis + 1..].iter().all(|&x| x == 1);
                let ratio_ok = inner_src > 0
                    && inner_dst > 0
                    && (inner_src.is_multiple_of(inner_dst) || inner_dst.is_multiple_of(inner_src));
                if !outer_ok || !ratio_ok {
                    return err(name, format!("reshape {} to {ne:?} moves its dynamic axis", src.shape_str()));
                }
                let (num, den) = (d.num * inner_src, d.den * inner_dst);
                let g = gcd(num, den);
                Some(DynAxis { axis, sym: d.sym, num: num / g, den: den / g })
            }
        };
        let value = Value { dyn_axis, ..Value::contiguous(src.dtype, ne) };
        Ok(self.push(Op::Reshape, vec![input], value, name))
    }

    /// Output axis i is input axis `axes[i]`.
    pub fn permute(&mut self, input: NodeId, axes: [usize; 4], name: &str) -> Result<NodeId> {
        let mut seen = [false; 4];
        for &a in &axes {
            if a >= MAX_DIMS || seen[a] {
                return err(name, format!("{axes:?} is not a permutation"));
            }
            seen[a] = true;
        }
        let src = self.value(input).clone();
        let mut value = src.clone();
        for (i, &a) in axes.iter().enumerate() {
            value.ne[i] = src.ne[a];
            value.nb[i] = src.nb[a];
        }
        value.dyn_axis =
            src.dyn_axis.map(|d| DynAxis { axis: axes.iter().position(|&a| a == d.axis).unwrap_or(d.axis), ..d });
        value.external = None;
        value.view_offset = 0;
        Ok(self.push(Op::Permute { axes }, vec![input], value, name))
    }

    /// Axes 0 and 1 swapped.
    pub fn transpose(&mut self, input: NodeId, name: &str) -> Result<NodeId> {
        let mut value = self.value(input).clone();
        value.ne.swap(0, 1);
        value.nb.swap(0, 1);
        value.dyn_axis = value.dyn_axis.map(|d| DynAxis { axis: [1, 0, 2, 3][d.axis], ..d });
        value.external = None;
        value.view_offset = 0;
        Ok(self.push(Op::Transpose, vec![input], value, name))
    }

    // ---- compute ops ----

    fn f32_out(
        &mut self,
        op: Op,
        inputs: Vec<NodeId>,
        ne: [usize; 4],
        dyn_axis: Option<DynAxis>,
        name: &str,
    ) -> NodeId {
        let value = Value { dyn_axis, ..Value::contiguous(DType::F32, ne) };
        self.push(op, inputs, value, name)
    }

    fn expect_f32(&self, id: NodeId, what: &str, name: &str) -> Result<()> {
        match self.value(id).dtype {
            DType::F32 => Ok(()),
            d => err(name, format!("{what} is {d}, expected f32")),
        }
    }

    fn expect_i32_ids(&self, id: NodeId, name: &str) -> Result<()> {
        match self.value(id).dtype {
            DType::I32 => Ok(()),
            d => err(name, format!("ids are {d}, expected i32")),
        }
    }

    pub fn get_rows(&mut self, table: NodeId, ids: NodeId, name: &str) -> Result<NodeId> {
        self.expect_i32_ids(ids, name)?;
        let (t, i) = (self.value(table).clone(), self.value(ids).clone());
        if t.ne[2] != 1 || t.ne[3] != 1 || i.ne[1] != 1 || i.ne[2] != 1 || i.ne[3] != 1 {
            return err(name, format!("get_rows of {} by {}", t.shape_str(), i.shape_str()));
        }
        let dyn_axis = i.dyn_axis.map(|d| DynAxis { axis: 1, ..d });
        Ok(self.f32_out(Op::GetRows, vec![table, ids], [t.ne[0], i.ne[0], 1, 1], dyn_axis, name))
    }

    pub fn get_rows_weighted(&mut self, table: NodeId, ids: NodeId, weights: NodeId, name: &str) -> Result<NodeId> {
        self.expect_i32_ids(ids, name)?;
        self.expect_f32(weights, "weights", name)?;
        let (t, i, w) = (self.value(table).clone(), self.value(ids).clone(), self.value(weights).clone());
        if i.ne != w.ne || t.ne[2] != 1 || i.ne[2] != 1 {
            return err(name, format!("weighted rows of {} by {} / {}", t.shape_str(), i.shape_str(), w.shape_str()));
        }
        let dyn_axis = i.dyn_axis.map(|d| DynAxis { axis: 1, ..d });
        Ok(self.f32_out(Op::GetRowsWeighted, vec![table, ids, weights], [t.ne[0], i.ne[1], 1, 1], dyn_axis, name))
    }

    /// Writes rows of `src` into the external `dst` at rows `ids`; returns the updated `dst`.
    pub fn set_rows(&mut self, dst: NodeId, src: NodeId, ids: NodeId, name: &str) -> Result<NodeId> {
        self.expect_f32(src, "src", name)?;
        let (d, s) = (self.value(dst).clone(), self.value(src).clone());
        if d.external.is_none() {
            return err(name, "set_rows needs an external destination".into());
        }
        if !matches!(d.dtype, DType::F32 | DType::F16) {
            return err(name, format!("set_rows into {}: only f32 and f16 rows are written", d.dtype));
        }
        self.expect_i32_ids(ids, name)?;
        if d.ne[0] != s.ne[0] || self.value(ids).ne[0] != s.ne[1] {
            return err(name, format!("set_rows of {} into {}", s.shape_str(), d.shape_str()));
        }
        let value = Value { view_offset: 0, ..d };
        Ok(self.push(Op::SetRows, vec![dst, src, ids], value, name))
    }

    pub fn matmul(&mut self, w: NodeId, x: NodeId, name: &str) -> Result<NodeId> {
        self.expect_f32(x, "x", name)?;
        let (wv, xv) = (self.value(w).clone(), self.value(x).clone());
        if wv.ne[0] != xv.ne[0] || wv.ne[2] != 1 || wv.ne[3] != 1 {
            return err(name, format!("matmul {} x {}", wv.shape_str(), xv.shape_str()));
        }
        Ok(self.f32_out(Op::MatMul, vec![w, x], [wv.ne[1], xv.ne[1], xv.ne[2], xv.ne[3]], xv.dyn_axis, name))
    }

    fn broadcast(&mut self, op: Op, a: NodeId, b: NodeId, name: &str) -> Result<NodeId> {
        self.expect_f32(a, "a", name)?;
        self.expect_f32(b, "b", name)?;
        let (av, bv) = (self.value(a).clone(), self.value(b).clone());
        let fits = (0..MAX_DIMS).all(|i| bv.ne[i] > 0 && av.ne[i] % bv.ne[i] == 0);
        let b_dyn_ok = match (bv.dyn_axis, av.dyn_axis) {
            (None, _) => true,
            (Some(db), Some(da)) => db == da,
            (Some(_), None) => false,
        };
        if !fits || !b_dyn_ok {
            return err(name, format!("{} cannot broadcast {}", av.shape_str(), bv.shape_str()));
        }
        Ok(self.f32_out(op, vec![a, b], av.ne, av.dyn_axis, name))
    }

    pub fn add(&mut self, a: NodeId, b: NodeId, name: &str) -> Result<NodeId> {
        self.broadcast(Op::Add, a, b, name)
    }

    pub fn mul(&mut self, a: NodeId, b: NodeId, name: &str) -> Result<NodeId> {
        self.broadcast(Op::Mul, a, b, name)
    }

    fn row_param(&self, x: NodeId, p: NodeId, name: &str) -> Result<()> {
        let (xv, pv) = (self.value(x), self.value(p));
        if pv.ne != [xv.ne[0], 1, 1, 1] {
            return err(name, format!("parameter {} for rows of {}", pv.shape_str(), xv.shape_str()));
        }
        Ok(())
    }

    pub fn rms_norm(&mut self, x: NodeId, weight: NodeId, eps: f32, name: &str) -> Result<NodeId> {
        self.expect_f32(x, "x", name)?;
        self.row_param(x, weight, name)?;
        let v = self.value(x).clone();
        Ok(self.f32_out(Op::RmsNorm { eps }, vec![x, weight], v.ne, v.dyn_axis, name))
    }

    pub fn layer_norm(&mut self, x: NodeId, weight: NodeId, bias: NodeId, eps: f32, name: &str) -> Result<NodeId> {
        self.expect_f32(x, "x", name)?;
        self.row_param(x, weight, name)?;
        self.row_param(x, bias, name)?;
        let v = self.value(x).clone();
        Ok(self.f32_out(Op::LayerNorm { eps }, vec![x, weight, bias], v.ne, v.dyn_axis, name))
    }

    /// `x`: [head_dim, n_head, n]; `positions`: i32 [n * components].
    pub fn rope(
        &mut self,
        x: NodeId,
        positions: NodeId,
        kind: RopeKind,
        theta: f32,
        n_dims: usize,
        name: &str,
    ) -> Result<NodeId> {
        self.expect_f32(x, "x", name)?;
        let v = self.value(x).clone();
        if n_dims == 0 || n_dims > v.ne[0] || !n_dims.is_multiple_of(4) {
            return err(name, format!("rope over {n_dims} of {} dims", v.ne[0]));
        }
        if let RopeKind::MropeInterleaved { sections } = &kind {
            if sections.iter().sum::<usize>() > n_dims / 2 {
                return err(name, format!("rope sections {sections:?} exceed {} frequencies", n_dims / 2));
            }
        }
        self.expect_i32_ids(positions, name)?;
        let components = match kind {
            RopeKind::MropeInterleaved { .. } => 3,
            RopeKind::Axial2d => 2,
        };
        if self.value(positions).n_elements() != v.ne[2] * components {
            return err(name, format!("{} positions for {} rows", self.value(positions).shape_str(), v.ne[2]));
        }
        Ok(self.f32_out(Op::Rope { kind, theta, n_dims }, vec![x, positions], v.ne, v.dyn_axis, name))
    }

    pub fn swiglu(&mut self, gate: NodeId, up: NodeId, name: &str) -> Result<NodeId> {
        let (g, u) = (self.value(gate).clone(), self.value(up).clone());
        if g.ne != u.ne {
            return err(name, format!("swiglu of {} and {}", g.shape_str(), u.shape_str()));
        }
        Ok(self.f32_out(Op::SwiGlu, vec![gate, up], g.ne, g.dyn_axis, name))
    }

    pub fn gelu(&mut self, x: NodeId, kind: Gelu, name: &str) -> Result<NodeId> {
        self.expect_f32(x, "x", name)?;
        let v = self.value(x).clone();
        Ok(self.f32_out(Op::Gelu(kind), vec![x], v.ne, v.dyn_axis, name))
    }

    pub fn cont(&mut self, x: NodeId, name: &str) -> Result<NodeId> {
        self.expect_f32(x, "x", name)?;
        let v = self.value(x).clone();
        Ok(self.f32_out(Op::Cont, vec![x], v.ne, v.dyn_axis, name))
    }

    /// The index of the largest value of each row of `x` (see [`Op::Argmax`]).
    pub fn argmax(&mut self, x: NodeId, name: &str) -> Result<NodeId> {
        self.expect_f32(x, "x", name)?;
        let v = self.value(x).clone();
        if v.ne[0] == 0 || v.ne[0] > MAX_ARGMAX_ROW || v.dyn_axis.is_some_and(|d| d.axis == 0) {
            return err(name, format!("argmax along rows of {} (1 to 2^24, not dynamic)", v.shape_str()));
        }
        Ok(self.f32_out(Op::Argmax, vec![x], [1, v.ne[1], v.ne[2], v.ne[3]], v.dyn_axis, name))
    }

    /// q: [d, n_head, n_q], k/v: [d, n_kv_head, n_kv]; which kv rows each query sees by
    /// `mask`, see [`Op::Attention`].
    pub fn attention(
        &mut self,
        q: NodeId,
        k: NodeId,
        v: NodeId,
        mask: AttnMask,
        scale: f32,
        name: &str,
    ) -> Result<NodeId> {
        let (qv, kv, vv) = (self.value(q).clone(), self.value(k).clone(), self.value(v).clone());
        let ok = qv.ne[0] == kv.ne[0]
            && kv.ne == vv.ne
            && kv.ne[1] > 0
            && qv.ne[1] % kv.ne[1] == 0
            && qv.ne[3] == 1
            && kv.ne[3] == 1
            && qv.dtype == DType::F32
            && kv.dtype == vv.dtype
            && matches!(kv.dtype, DType::F32 | DType::F16);
        if !ok {
            return err(name, format!("attention q {} k {} v {}", qv.shape_str(), kv.shape_str(), vv.shape_str()));
        }
        let mut inputs = vec![q, k, v];
        let segment = match mask {
            AttnMask::Full => kv.ne[2],
            AttnMask::Causal { slots, segment } => {
                self.expect_i32_ids(slots, name)?;
                if self.value(slots).ne[0] != qv.ne[2] {
                    return err(name, format!("{} slots for {} queries", self.value(slots).ne[0], qv.ne[2]));
                }
                if segment == 0 || !kv.ne[2].is_multiple_of(segment) {
                    return err(name, format!("{} kv rows are no whole sequences of {segment}", kv.ne[2]));
                }
                inputs.push(slots);
                segment
            }
            AttnMask::Spans(spans) => {
                let sv = self.value(spans);
                if sv.dtype != DType::I32 || sv.ne[..] != [2, qv.ne[2], 1, 1] {
                    return err(name, format!("spans {} {} for {} queries", sv.dtype, sv.shape_str(), qv.ne[2]));
                }
                inputs.push(spans);
                0
            }
        };
        Ok(self.f32_out(Op::Attention { scale, segment }, inputs, qv.ne, qv.dyn_axis, name))
    }

    /// Makes compute node `id` write its output into a window of an external storage (for
    /// example a slice of a buffer another graph reads) instead of the arena.
    pub fn write_into(&mut self, id: NodeId, storage: ExternalId, offset: usize, nb: [usize; MAX_DIMS]) -> Result<()> {
        let node = &self.nodes[id.0];
        if node.op.is_layout() || node.op == Op::External {
            return err(&node.name, "only a compute node can write into a storage".into());
        }
        let mut value = node.value.clone();
        value.nb = nb;
        value.external = Some((storage, offset));
        let ext = &self.externals[storage.0];
        if offset + value.extent_bytes() > ext.bytes || value.dtype != ext.dtype {
            return err(
                &node.name,
                format!("window {} at {offset} does not fit storage {:?}", value.shape_str(), ext.name),
            );
        }
        self.nodes[id.0].value = value;
        Ok(())
    }
}

/// The longest row ARGMAX takes: every index below it is an exact f32.
pub const MAX_ARGMAX_ROW: usize = 1 << 24;

fn gcd(a: usize, b: usize) -> usize {
    if b == 0 {
        a.max(1)
    } else {
        gcd(b, a % b)
    }
}
