//! One dispatch of a plan checked on its own: the plan's kernel (its variant, fusions and
//! folds) on the plan's operands, at small run-time sizes, random inputs, against the CPU.
//!
//! The operands are the plan's: dtypes, planned shapes, strides, offsets (modulo 256, so their
//! alignment is kept), the run-time sizes in the sizes buffer as a run has them. What is
//! smaller: each symbol's run-time value (`check_symbols`), and a product's weight rows
//! (`kernels::check_rows`: its row width, the model's, is kept). The CPU computes the same
//! nodes with its own kernels from the same bytes, and the output is compared by normalized
//! mean squared error.

use super::super::buffer::Buffer;
use super::super::error::{Result, VkError};
use super::super::kernels::{self, check_rows, KernelId, KernelSet, Operand, Ops};
use super::super::memory::Location;
use super::super::once;
use super::super::registry::operand;
use super::super::weight_layout::Stored;
use crate::backend::cpu::tensor::{Data, In, Out};
use crate::backend::cpu::{execute, Kernels};
use crate::dispatcher::{Group, Kernel, Plan};
use crate::graph::{Graph, NodeId, Op, MAX_DIMS};
use crate::quant::{quantize_row, DType};
use crate::rng::SplitMix64;
use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};

/// Offsets keep their position modulo this: every alignment a kernel or a device asks for.
const OFFSET_CLASS: usize = 256;
/// Each symbol's run-time value at most: past a 64-wide tile, so partial and whole ones run.
const CHECK_TOKENS: usize = 72;
/// Distinct random rows of a weight (its other rows repeat them): quantizing stays cheap at
/// any row count.
const DISTINCT_ROWS: usize = 64;
/// Query-row pairs an attention check's queries see at most, all together (its CPU side).
const ATTENTION_PAIRS: usize = 1 << 15;
/// Rows a destination written in place (a KV cache) keeps at most: past every row a check's
/// tokens write (`CHECK_TOKENS`), so rows left alone are compared too.
const CHECK_DEST_ROWS: usize = 256;
/// Sequences of an attention over several (a batch's caches) a check keeps: two, so that a
/// query's reach stopping at its own sequence's edge is checked.
const CHECK_SEQUENCES: usize = 2;

/// A dispatch of a plan, as the self-check runs it.
pub struct Case<'p> {
    plan: &'p Plan,
    group: Group,
    pub kernel: KernelId,
    /// What the record knows it by: the kernel and variant, the ops, the operands at check size.
    pub key: String,
    /// Where it is in the plan, for messages: `graph text-decode node 12 (blk.0.attn_q)`.
    pub label: String,
    syms: Vec<usize>,
    ins: Vec<Operand>,
    out: Operand,
    /// Weight rows of a product at check size.
    rows: Option<usize>,
}

impl<'p> Case<'p> {
    /// The dispatch of node `node` of `plan` (a GPU dispatch of `kernel` computing `group`).
    pub fn new(plan: &'p Plan, node: NodeId, kernel: KernelId, group: Group) -> Case<'p> {
        let graph = &plan.graph;
        let syms = check_symbols(graph);
        let mut ins: Vec<Operand> = group.inputs(graph).iter().map(|&i| class_offset(operand(graph, i))).collect();
        let mut out = class_offset(operand(graph, group.output()));
        let rows = match kernel {
            KernelId::MatMul(kind, ..) => {
                let rows = check_rows(kind, out.ne[0]);
                if let Some(w) = ins.first_mut() {
                    w.ne[1] = rows;
                }
                // The output, and a fused residual laid out as it or a bias row.
                for o in std::iter::once(&mut out).chain(ins.get_mut(2).filter(|_| group.fused.is_some())) {
                    o.ne[0] = rows;
                }
                Some(rows)
            }
            _ => None,
        };
        // The destination a dispatch writes into, at `CHECK_DEST_ROWS` rows: filling and
        // comparing a 4,096-row cache cost a quarter of a second a check.
        let last = graph.node(group.output());
        if let Some(dest) = last.op.writes_into().and_then(|k| last.inputs.get(k)) {
            out.ne[1] = out.ne[1].min(CHECK_DEST_ROWS);
            let inputs = group.inputs(graph);
            for (o, _) in ins.iter_mut().zip(&inputs).filter(|(_, &id)| id == *dest) {
                o.ne[1] = out.ne[1];
            }
        }
        // An attention over many sequences' caches at two of them: 32 sequences of 4,096 rows
        // cost three seconds a check on an H100.
        let attention = graph.node(group.node);
        if let Op::Attention { segment, .. } = attention.op {
            let inputs = group.inputs(graph);
            for kv in attention.inputs.iter().skip(1).take(2) {
                for (o, _) in ins.iter_mut().zip(&inputs).filter(|(_, id)| *id == kv) {
                    if segment > 0 && o.ne[2] > CHECK_SEQUENCES * segment {
                        o.ne[2] = CHECK_SEQUENCES * segment;
                    }
                }
            }
        }
        let ops = group_nodes(group).map(|n| describe_op(&graph.node(n).op)).collect::<Vec<_>>().join("+");
        let shapes: Vec<String> = ins.iter().chain([&out]).map(shape).collect();
        let named = Kernel { subgroup: kernel.subgroup(), shape: kernel.shape(), ..Kernel::named(kernel.name()) };
        let key = format!("{named} {ops} {}", shapes.join(" "));
        let node_name = &graph.node(node).name;
        let label = format!("graph {} node {} ({node_name})", graph.name, node.0);
        Case { plan, group, kernel, key, label, syms, ins, out, rows }
    }

    /// Runs the dispatch on the GPU and its nodes on the CPU; the normalized mean squared error
    /// of the output, or why the kernel failed. `corrupt` spoils the GPU's output (a test's
    /// fault).
    pub fn run(&self, ks: &KernelSet, threads: usize, corrupt: bool) -> std::result::Result<f64, Failure> {
        let graph = &self.plan.graph;
        let ops = Ops {
            node: &graph.node(self.group.node).op,
            folded: self.group.folded.map(|f| &graph.node(f).op),
            fused: self.group.fused.map(|f| &graph.node(f).op),
        };
        let out_id = self.group.output();
        let launch =
            kernels::launch(self.kernel, ops, &self.ins, &self.out, graph.value(out_id).dyn_axis.map(Into::into))
                .map_err(|e| Failure::Unchecked(format!("the kernel refuses the check's operands: {e}")))?;
        let started = std::time::Instant::now();
        let mut rng = SplitMix64(0x5e1f_c4ec ^ self.key.len() as u64);
        let input_ids = self.group.inputs(graph);
        let datas: Vec<Vec<u8>> = input_ids
            .iter()
            .zip(&self.ins)
            .map(|(&id, o)| self.input_bytes(id, o, &mut rng, threads))
            .collect::<std::result::Result<_, _>>()?;
        // The output: NaN where it is written (a value left unwritten shows), or for a kernel
        // that writes into a value (SET_ROWS), random values both sides start from.
        let in_place = graph.node(out_id).op.writes_into().is_some();
        let out_rt = runtime(&self.out, &self.syms);
        let out_span = span(&self.out, &out_rt);
        let mut out_bytes = vec![0u8; out_span];
        let start: Vec<f32> = if in_place {
            fill_floats(&mut out_bytes[self.out.offset..], self.out.dtype, &mut rng);
            gather(&out_bytes, &self.out, &out_rt)
        } else {
            fill_nan(&mut out_bytes[self.out.offset..], self.out.dtype);
            Vec::new()
        };
        // The GPU.
        // Buffers span the planned shapes, as a plan's do (a kernel may load a whole tile past
        // the run-time edge), zeros past the run-time values.
        let dev = ks.device();
        let upload = |bytes: &[u8], o: &Operand, what: &str| -> Result<Buffer> {
            let b = dev.buffer(bytes.len().max(span(o, &o.ne)).max(4) as u64, Location::Device, what)?;
            b.clear()?;
            b.write(0, bytes)?;
            Ok(b)
        };
        let weights: Vec<Option<Vec<u8>>> = datas
            .iter()
            .zip(&input_ids)
            .zip(&self.ins)
            .map(|((bytes, &id), o)| (is_weight(graph, id) == Some(true)).then(|| stored(bytes, o)).transpose())
            .collect::<std::result::Result<_, _>>()
            .map_err(Failure::Unchecked)?;
        let gpu = || -> Result<Vec<u8>> {
            let bufs: Vec<Buffer> = datas
                .iter()
                .zip(&weights)
                .zip(&self.ins)
                .map(|((bytes, weight), o)| match weight {
                    Some(w) => upload(w, o, "a checked weight"),
                    None => upload(bytes, o, "a checked input"),
                })
                .collect::<Result<_>>()?;
            let out_buf = upload(&out_bytes, &self.out, "a checked output")?;
            let syms: Vec<u32> = self.syms.iter().map(|&s| s as u32).collect();
            let grid_ne = self.grid_ne(launch.grid_input);
            let groups = launch.groups(grid_ne, dev.info().max_workgroup_count);
            let ins: Vec<&Buffer> = bufs.iter().collect();
            once::dispatch(ks, &launch, &syms, &ins, &out_buf, groups)?;
            let mut got = vec![0u8; out_span];
            out_buf.read(0, &mut got)?;
            Ok(got)
        };
        let inputs_made = started.elapsed();
        let got_bytes = gpu().map_err(Failure::Vulkan)?;
        let gpu_done = started.elapsed();
        let mut got = gather(&got_bytes, &self.out, &out_rt);
        if corrupt {
            got.iter_mut().for_each(|v| *v *= 0.5);
        }
        // The CPU, node by node.
        let want = self.reference(&input_ids, &datas, start, threads).map_err(Failure::Unchecked)?;
        let ms = |d: std::time::Duration| d.as_secs_f64() * 1e3;
        log::debug!(
            "self-check {}: inputs {:.1} ms, GPU {:.1} ms, CPU {:.1} ms",
            self.key,
            ms(inputs_made),
            ms(gpu_done - inputs_made),
            ms(started.elapsed() - gpu_done)
        );
        if want.len() != got.len() {
            return Err(Failure::Unchecked(format!("{} values from the GPU, {} from the CPU", got.len(), want.len())));
        }
        let bad = got.iter().zip(&want).filter(|(g, w)| !g.is_finite() && w.is_finite()).count();
        if bad > 0 {
            return Err(Failure::Wrong(format!(
                "{bad} of {} output values not finite (unwritten or overflowed)",
                got.len()
            )));
        }
        let e = nmse(&got, &want);
        let limit = tolerance(self.kernel);
        if e.is_nan() || e > limit {
            return Err(Failure::Wrong(format!("normalized error {e:.3e} against the CPU (at most {limit:.0e})")));
        }
        Ok(e)
    }

    /// The shape the dispatch's grid follows at check size: the kernel's grid input's (SET_ROWS:
    /// its source) or the node's output, a product's at its check rows.
    fn grid_ne(&self, grid_input: Option<usize>) -> [usize; MAX_DIMS] {
        let graph = &self.plan.graph;
        let node = graph.node(self.group.node);
        let id = grid_input.and_then(|k| node.inputs.get(k).copied()).unwrap_or(self.group.node);
        let mut ne = crate::dispatcher::runtime_ne(graph, id, &self.syms);
        if let Some(rows) = self.rows {
            ne[0] = rows;
        }
        ne
    }

    /// Random bytes for group input `id` laid out as `o` (its run-time extent): values of its
    /// dtype, or the i32 its reader takes (ids in range, positions, a query's kv rows).
    fn input_bytes(
        &self,
        id: NodeId,
        o: &Operand,
        rng: &mut SplitMix64,
        threads: usize,
    ) -> std::result::Result<Vec<u8>, Failure> {
        let rt = runtime(o, &self.syms);
        let mut bytes = vec![0u8; span(o, &rt)];
        match o.dtype {
            DType::I32 => {
                let values = self.ints(id, &rt, rng)?;
                scatter_i32(&mut bytes, o, &rt, &values);
            }
            DType::F32 | DType::F16 | DType::BF16 if is_weight(&self.plan.graph, id) != Some(true) => {
                fill_floats(&mut bytes[o.offset..], o.dtype, rng)
            }
            dtype => {
                // Weight rows: DISTINCT_ROWS random rows quantized (on threads: a k-quant's
                // search took 40 ms for 64 rows of 6,144), repeated.
                let row_bytes = dtype
                    .row_bytes(o.ne[0] as u64)
                    .ok_or_else(|| Failure::Unchecked(format!("{dtype} rows of {} values", o.ne[0])))?
                    as usize;
                let rows: usize = rt[1..].iter().product();
                let n_distinct = DISTINCT_ROWS.min(rows).max(1);
                let mut distinct = vec![0u8; row_bytes * n_distinct];
                let seeded: Vec<(u64, &mut [u8])> =
                    distinct.chunks_mut(row_bytes).map(|r| (rng.next_u64(), r)).collect();
                let failed = Mutex::new(None);
                crate::backend::cpu::pool::par_items(threads.min(n_distinct), seeded.into_iter(), |(seed, row)| {
                    let mut rng = SplitMix64(seed);
                    let values: Vec<f32> = (0..o.ne[0]).map(|_| uniform(&mut rng)).collect();
                    if let Err(e) = quantize_row(dtype, &values, row) {
                        *failed.lock().unwrap_or_else(PoisonError::into_inner) = Some(e.to_string());
                    }
                });
                if let Some(why) = failed.into_inner().unwrap_or_else(PoisonError::into_inner) {
                    return Err(Failure::Unchecked(why));
                }
                for r in 0..rows {
                    let (i1, i2, i3) = crate::backend::cpu::tensor::row_coords(r, &rt);
                    let at = o.offset + i1 * o.nb[1] + i2 * o.nb[2] + i3 * o.nb[3];
                    let from = (r % n_distinct) * row_bytes;
                    bytes[at..at + row_bytes].copy_from_slice(&distinct[from..from + row_bytes]);
                }
            }
        }
        Ok(bytes)
    }

    /// Group input `id`'s run-time shape as the check lays it out.
    fn input_ne(&self, id: NodeId) -> Option<[usize; MAX_DIMS]> {
        let at = self.group.inputs(&self.plan.graph).iter().position(|&i| i == id)?;
        self.ins.get(at).map(|o| runtime(o, &self.syms))
    }

    /// The i32 values of group input `id` at run-time shape `rt`, as its reader takes them.
    fn ints(&self, id: NodeId, rt: &[usize; MAX_DIMS], rng: &mut SplitMix64) -> std::result::Result<Vec<i32>, Failure> {
        let graph = &self.plan.graph;
        let n: usize = rt.iter().product();
        let below = |rng: &mut SplitMix64, n: usize| (rng.next_u64() % n.max(1) as u64) as i32;
        let (reader, index) = group_nodes(self.group)
            .flat_map(|r| graph.node(r).inputs.iter().enumerate().map(move |(k, &i)| (r, k, i)))
            .find(|&(_, _, i)| i == id)
            .map(|(r, k, _)| (r, k))
            .ok_or_else(|| Failure::Unchecked(format!("no node of the dispatch reads value {}", id.0)))?;
        let node = graph.node(reader);
        let input_rt = |k: usize| crate::dispatcher::runtime_ne(graph, node.inputs[k], &self.syms);
        Ok(match (&node.op, index) {
            // Rows of the table.
            (Op::GetRows | Op::GetRowsWeighted, 1) => (0..n).map(|_| below(rng, input_rt(0)[1])).collect(),
            // Distinct rows of the destination.
            (Op::SetRows, 2) => {
                // The destination's rows, at check size where the dispatch writes into it.
                let rows =
                    if reader == self.group.output() { self.out.ne[1] } else { graph.value(node.inputs[0]).ne[1] };
                let mut all: Vec<i32> = (0..rows as i32).collect();
                for i in 0..n.min(rows) {
                    let j = i + below(rng, rows - i) as usize;
                    all.swap(i, j);
                }
                all.truncate(n);
                all
            }
            (Op::Rope { .. }, 1) => (0..n).map(|_| below(rng, 4096)).collect(),
            (Op::Attention { segment, .. }, 3) => {
                let kv = self.input_ne(node.inputs[1]).unwrap_or_else(|| input_rt(1))[2];
                let queries = input_rt(0)[2].max(1);
                let reach = (ATTENTION_PAIRS / queries).max(64);
                if *segment == 0 {
                    // Spans [first, end) of each query, laid out as [2, n_q].
                    (0..queries)
                        .flat_map(|_| {
                            let first = below(rng, kv);
                            let len = 1 + below(rng, (kv - first as usize).min(reach));
                            [first, first + len]
                        })
                        .collect()
                } else {
                    // A slot in a sequence of `segment` rows, within `reach` of its start.
                    (0..n)
                        .map(|_| {
                            let sequence = below(rng, kv / segment) as usize;
                            (sequence * segment) as i32 + below(rng, (*segment).min(reach))
                        })
                        .collect()
                }
            }
            (op, k) => {
                return Err(Failure::Unchecked(format!("no check values for i32 input {k} of {}", op.name())));
            }
        })
    }

    /// The group's nodes on the CPU from the same inputs: the output's values in order.
    fn reference(
        &self,
        input_ids: &[NodeId],
        datas: &[Vec<u8>],
        start: Vec<f32>,
        threads: usize,
    ) -> std::result::Result<Vec<f32>, String> {
        let graph = &self.plan.graph;
        // Each input as the CPU kernels read it: weights as their bytes, values as contiguous
        // f32 or i32 at their run-time shape.
        enum Host {
            Bytes(usize),
            F32(Vec<f32>, [usize; MAX_DIMS]),
            I32(Vec<i32>, [usize; MAX_DIMS]),
        }
        let mut host: HashMap<NodeId, Host> = HashMap::new();
        for (k, &id) in input_ids.iter().enumerate() {
            let o = &self.ins[k];
            let rt = runtime(o, &self.syms);
            let h = match (o.dtype, is_weight(graph, id)) {
                (DType::I32, _) => Host::I32(gather_i32(&datas[k], o, &rt), rt),
                (_, Some(true)) => Host::Bytes(k),
                (DType::F32 | DType::F16 | DType::BF16, _) => Host::F32(gather(&datas[k], o, &rt), rt),
                (dtype, _) => return Err(format!("input {} of {dtype} values is no weight", id.0)),
            };
            host.insert(id, h);
        }
        let contiguous = |ne: [usize; MAX_DIMS]| crate::graph::contiguous_strides(DType::F32, ne);
        let mut computed: HashMap<NodeId, (Vec<f32>, [usize; MAX_DIMS])> = HashMap::new();
        let nodes: Vec<NodeId> = group_nodes(self.group).collect();
        let mut start = Some(start);
        let last = nodes.len() - 1;
        for (at, &n) in nodes.iter().enumerate() {
            let node = graph.node(n);
            let mut ins: Vec<In> = Vec::with_capacity(node.inputs.len());
            for (k, &i) in node.inputs.iter().enumerate() {
                if node.op.writes_into() == Some(k) {
                    ins.push(In { data: Data::F32(&[]), dtype: DType::F32, offset: 0, ne: [0; 4], nb: [0; 4] });
                    continue;
                }
                let source = graph.reshaped_from(i);
                let input = if let Some((values, made)) = computed.get(&source) {
                    // As made, or reshaped (the run-time shape of the reshape).
                    let ne = if source == i { *made } else { crate::dispatcher::runtime_ne(graph, i, &self.syms) };
                    In { data: Data::F32(values), dtype: DType::F32, offset: 0, ne, nb: contiguous(ne) }
                } else {
                    match host.get(&i) {
                        Some(Host::Bytes(k)) => {
                            let o = &self.ins[*k];
                            In {
                                data: Data::Bytes(&datas[*k]),
                                dtype: o.dtype,
                                offset: o.offset,
                                ne: runtime(o, &self.syms),
                                nb: o.nb,
                            }
                        }
                        Some(Host::F32(v, ne)) => {
                            In { data: Data::F32(v), dtype: DType::F32, offset: 0, ne: *ne, nb: contiguous(*ne) }
                        }
                        Some(Host::I32(v, ne)) => {
                            In { data: Data::I32(v), dtype: DType::I32, offset: 0, ne: *ne, nb: contiguous(*ne) }
                        }
                        None => return Err(format!("value {} is neither an input nor made by the dispatch", i.0)),
                    }
                };
                ins.push(input);
            }
            let mut ne = crate::dispatcher::runtime_ne(graph, n, &self.syms);
            if at == last {
                ne = runtime(&self.out, &self.syms);
            } else if let (Some(rows), true) = (self.rows, n == self.group.node) {
                ne[0] = rows;
            }
            let mut values = match (at == last, node.op.writes_into().is_some()) {
                (true, true) => start.take().unwrap_or_default(),
                _ => vec![0.0; ne.iter().product()],
            };
            let mut out = Out { data: &mut values, offset: 0, ne, nb: contiguous(ne) };
            execute(&node.op, &ins, &mut out, Kernels::Fast, threads).map_err(|e| e.to_string())?;
            drop(ins);
            computed.insert(n, (values, ne));
        }
        computed.remove(&nodes[last]).map(|(v, _)| v).ok_or_else(|| "nothing computed".to_owned())
    }
}

/// Why a check did not pass.
#[derive(Debug)]
pub enum Failure {
    /// The kernel's output is wrong.
    Wrong(String),
    /// The device failed running it (lost, hung, a pipeline it cannot make...).
    Vulkan(VkError),
    /// The check could not be made (a case it has no inputs for): says nothing of the kernel.
    Unchecked(String),
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failure::Wrong(m) | Failure::Unchecked(m) => f.write_str(m),
            Failure::Vulkan(e) => write!(f, "{e}"),
        }
    }
}

/// The largest normalized error a kernel passes with: a product's or attention's f16 operands
/// and the CPU's quantized activations stay near 1e-5; f16 outputs (halves kept) near 1e-7.
/// What breaks on a driver (lanes missing from a sum, a tile skipped) is 1e-3 and more.
fn tolerance(kernel: KernelId) -> f64 {
    match kernel {
        KernelId::MatMul(..)
        | KernelId::FlashAttn(_)
        | KernelId::FlashAttnTiled(..)
        | KernelId::FlashAttnCm(..)
        | KernelId::FlashAttnSplit(..) => 5e-4,
        _ => 1e-5,
    }
}

/// The nodes a group computes, in dataflow order.
fn group_nodes(group: Group) -> impl Iterator<Item = NodeId> {
    group.folded.into_iter().chain([group.node]).chain(group.fused)
}

/// An op for the record: its name, and what picks a kernel's path (RoPE's kind, attention's
/// mask).
fn describe_op(op: &Op) -> String {
    match op {
        Op::Rope { kind, n_dims, .. } => format!("ROPE({kind:?},{n_dims})"),
        Op::Attention { segment, .. } => format!("FLASH_ATTN({})", if *segment == 0 { "spans" } else { "causal" }),
        other => other.name().to_owned(),
    }
}

fn shape(o: &Operand) -> String {
    let dynamic = o.dynamic.map_or(String::new(), |d| format!("~{}", d.axis));
    format!("{}[{},{},{},{}]{dynamic}", o.dtype.name().to_lowercase(), o.ne[0], o.ne[1], o.ne[2], o.ne[3])
}

/// `o` at its offset's position modulo `OFFSET_CLASS`.
fn class_offset(o: Operand) -> Operand {
    Operand { offset: o.offset % OFFSET_CLASS, ..o }
}

/// Each symbol's run-time value for the check: `CHECK_TOKENS` at most (and the plan's maximum),
/// a multiple of every divisor a dynamic axis applies to it, so that values derived from one
/// symbol stay consistent (4 patches a merged token).
fn check_symbols(graph: &Graph) -> Vec<usize> {
    let lcm = |a: usize, b: usize| a / gcd(a, b) * b;
    graph
        .symbols
        .iter()
        .enumerate()
        .map(|(s, (_, max))| {
            let step = graph
                .nodes
                .iter()
                .filter_map(|n| n.value.dyn_axis)
                .filter(|d| d.sym.0 == s && d.den > 0)
                .fold(1, |acc, d| lcm(acc, d.den));
            let v = (*max).min(CHECK_TOKENS) / step * step;
            if v == 0 {
                (*max).min(step)
            } else {
                v
            }
        })
        .collect()
}

fn gcd(a: usize, b: usize) -> usize {
    if b == 0 {
        a.max(1)
    } else {
        gcd(b, a % b)
    }
}

/// Whether value `id` is (a window of) a weight of the model: None where it is no external.
fn is_weight(graph: &Graph, id: NodeId) -> Option<bool> {
    let root = graph.layout_root(id);
    let (ext, _) = graph.value(root).external?;
    graph.externals.get(ext.0).map(|e| e.is_weight)
}

/// The run-time shape of `o` for these symbol values.
fn runtime(o: &Operand, syms: &[usize]) -> [usize; MAX_DIMS] {
    let mut ne = o.ne;
    if let Some(d) = o.dynamic.filter(|d| d.axis < MAX_DIMS && d.den > 0) {
        let s = syms.get(d.sym).copied().unwrap_or(0);
        ne[d.axis] = (s * d.num / d.den).min(o.ne[d.axis]);
    }
    ne
}

/// Bytes from the start of `o`'s buffer to the end of its elements at shape `ne`.
fn span(o: &Operand, ne: &[usize; MAX_DIMS]) -> usize {
    if ne.contains(&0) {
        return o.offset;
    }
    let row = o.dtype.row_bytes(ne[0] as u64).unwrap_or(0) as usize;
    let last: usize = (1..MAX_DIMS).map(|i| (ne[i] - 1) * o.nb[i]).sum();
    (o.offset + last + row.max(o.nb[0])).next_multiple_of(4)
}

fn uniform(rng: &mut SplitMix64) -> f32 {
    (rng.next_u64() >> 40) as f32 / (1u64 << 23) as f32 - 1.0
}

/// Random values in [-1, 1) over `bytes`, as `dtype` (f32, f16 or bf16).
fn fill_floats(bytes: &mut [u8], dtype: DType, rng: &mut SplitMix64) {
    match dtype {
        DType::F16 => {
            bytes.chunks_exact_mut(2).for_each(|c| c.copy_from_slice(&half::f16::from_f32(uniform(rng)).to_le_bytes()))
        }
        DType::BF16 => {
            bytes.chunks_exact_mut(2).for_each(|c| c.copy_from_slice(&half::bf16::from_f32(uniform(rng)).to_le_bytes()))
        }
        _ => bytes.chunks_exact_mut(4).for_each(|c| c.copy_from_slice(&uniform(rng).to_le_bytes())),
    }
}

fn fill_nan(bytes: &mut [u8], dtype: DType) {
    match dtype {
        DType::F16 => bytes.chunks_exact_mut(2).for_each(|c| c.copy_from_slice(&half::f16::NAN.to_le_bytes())),
        _ => bytes.chunks_exact_mut(4).for_each(|c| c.copy_from_slice(&f32::NAN.to_le_bytes())),
    }
}

/// Element offsets of `o` at shape `ne`, in order.
fn offsets(o: &Operand, ne: &[usize; MAX_DIMS]) -> impl Iterator<Item = usize> {
    let (o, ne) = (*o, *ne);
    (0..ne[3]).flat_map(move |i3| {
        (0..ne[2]).flat_map(move |i2| {
            (0..ne[1]).flat_map(move |i1| {
                (0..ne[0]).map(move |i0| o.offset + i0 * o.nb[0] + i1 * o.nb[1] + i2 * o.nb[2] + i3 * o.nb[3])
            })
        })
    })
}

/// The f32, f16 or bf16 values of `o` at shape `ne`, in order.
fn gather(bytes: &[u8], o: &Operand, ne: &[usize; MAX_DIMS]) -> Vec<f32> {
    let two = |b: usize| [bytes[b], bytes[b + 1]];
    offsets(o, ne)
        .map(|b| match o.dtype {
            DType::F16 => half::f16::from_le_bytes(two(b)).to_f32(),
            DType::BF16 => half::bf16::from_le_bytes(two(b)).to_f32(),
            _ => f32::from_le_bytes([bytes[b], bytes[b + 1], bytes[b + 2], bytes[b + 3]]),
        })
        .collect()
}

fn gather_i32(bytes: &[u8], o: &Operand, ne: &[usize; MAX_DIMS]) -> Vec<i32> {
    offsets(o, ne).map(|b| i32::from_le_bytes([bytes[b], bytes[b + 1], bytes[b + 2], bytes[b + 3]])).collect()
}

fn scatter_i32(bytes: &mut [u8], o: &Operand, ne: &[usize; MAX_DIMS], values: &[i32]) {
    for (b, v) in offsets(o, ne).zip(values) {
        bytes[b..b + 4].copy_from_slice(&v.to_le_bytes());
    }
}

/// The bytes of a weight laid out as the device stores weights (`weight_layout`): its whole
/// rows from its offset on.
fn stored(bytes: &[u8], o: &Operand) -> std::result::Result<Vec<u8>, String> {
    let mut out = bytes.to_vec();
    let rows = (bytes.len() - o.offset) / o.nb[1].max(1) * o.nb[1];
    let tensor = &bytes[o.offset..o.offset + rows];
    Stored::of(o.dtype, o.ne[0], tensor)?.copy_range(&mut out[o.offset..o.offset + rows], 0);
    Ok(out)
}

/// Normalized mean squared error of `got` against `want` (llama.cpp's test-backend-ops): the
/// squared errors' sum over the squared reference's.
pub fn nmse(got: &[f32], want: &[f32]) -> f64 {
    let err: f64 = got.iter().zip(want).map(|(&g, &w)| (f64::from(g) - f64::from(w)).powi(2)).sum();
    let norm: f64 = want.iter().map(|&w| f64::from(w).powi(2)).sum();
    if norm == 0.0 {
        err
    } else {
        err / norm
    }
}
