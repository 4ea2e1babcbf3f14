//! The dispatcher's rules (the module doc) on hand-built graphs: a deepstack window on storage
//! the graph does not hold is skipped and reads exactly its slice; the same window registered
//! as a transient is refused; a real alias is elided.

use super::*;
use crate::backend::cpu::{CpuExecutor, Kernels};
use crate::backend::PlanId;
use crate::graph::{DynAxis, Graph, NodeId};
use crate::quant::DType;

const N_EMBD: usize = 64;
const N_TOK: usize = 8;
const SLICES: usize = 4;

/// Data that names slice, token and index.
fn wide_value(slice: usize, token: usize, i: usize) -> f32 {
    (slice * 100_000 + token * 100 + i) as f32
}

struct Deepstack {
    graph: Graph,
    window: NodeId,
    out: NodeId,
}

/// The text model's wiring in miniature: slice 0 is an external window on the wide input, the
/// deepstack slice a view of it `slice` slices further in, consumed by `consumer`.
fn deepstack_graph(slice: usize, consumer: &str) -> Deepstack {
    let mut g = Graph::new("deepstack");
    let n = g.symbol("n_tokens", N_TOK);
    let tokens = Some(DynAxis { axis: 1, sym: n, num: 1, den: 1 });
    let row = N_EMBD * SLICES * 4;
    let wide = g.external_storage("inp_wide", DType::F32, row * N_TOK, false);
    let nb = [4, row, row * N_TOK, row * N_TOK];
    let inp = g.external_window("inp_embd", wide, 0, [N_EMBD, N_TOK, 1, 1], nb, tokens).unwrap();
    let zeros = g.input("zeros", DType::F32, [N_EMBD, N_TOK, 1, 1], tokens).unwrap();
    let ones = g.input("ones", DType::F32, [N_EMBD, 1, 1, 1], None).unwrap();
    let base = g.add(zeros, inp, "base").unwrap();
    let window = g.view(inp, [N_EMBD, N_TOK, 1, 1], nb, slice * N_EMBD * 4, tokens, "deepstack").unwrap();
    let out = match consumer {
        "ADD" => g.add(zeros, window, "deepstack_add").unwrap(),
        "MUL" => g.mul(window, ones, "deepstack_mul").unwrap(),
        _ => g.rms_norm(window, ones, 1e-6, "deepstack_norm").unwrap(),
    };
    let both = g.add(base, out, "sum").unwrap();
    g.mark_output(out);
    g.mark_output(both);
    Deepstack { graph: g, window, out }
}

fn run_window(d: &Deepstack, n_tok: usize) -> Vec<f32> {
    let plan = Plan::new(d.graph.clone(), &CpuRegistry).expect("plans");
    let mut exec = CpuExecutor::new(vec![plan], &[], Kernels::Reference).unwrap();
    let wide = exec.f32_buffer(PlanId(0), "inp_wide").unwrap();
    for t in 0..N_TOK {
        for s in 0..SLICES {
            for i in 0..N_EMBD {
                wide[(t * SLICES + s) * N_EMBD + i] = wide_value(s, t, i);
            }
        }
    }
    exec.f32_buffer(PlanId(0), "ones").unwrap().fill(1.0);
    exec.run(PlanId(0), &[n_tok]).unwrap();
    exec.output(PlanId(0), d.out, &[n_tok]).unwrap().to_vec()
}

#[test]
fn external_window_at_each_slice_is_skipped_and_reads_its_slice() {
    for slice in 1..SLICES {
        let d = deepstack_graph(slice, "ADD");
        let plan = Plan::new(d.graph.clone(), &CpuRegistry).expect("the window plans");
        assert_eq!(plan.import.class[d.window.0], Class::External);
        assert_eq!(plan.import.miss[d.window.0], Some(AliasMiss::NoAliasSource));
        assert_eq!(plan.placements[d.window.0], Placement::Skipped);
        assert_eq!(plan.census().skipped, 1);
        for n_tok in [N_TOK, 3] {
            let got = run_window(&d, n_tok);
            let want: Vec<f32> = (0..n_tok).flat_map(|t| (0..N_EMBD).map(move |i| wide_value(slice, t, i))).collect();
            assert_eq!(got, want, "slice {slice}, {n_tok} tokens");
        }
    }
}

#[test]
fn the_same_window_registered_as_a_transient_is_refused_with_the_message() {
    for slice in 1..SLICES {
        let d = deepstack_graph(slice, "ADD");
        let registered = [d.window].into_iter().collect();
        let err = Plan::with_registered_transients(d.graph.clone(), &CpuRegistry, &registered).expect_err("refused");
        let w = d.window.0;
        let offs = slice * N_EMBD * 4;
        let row = N_EMBD * SLICES * 4;
        let expected = format!(
            "unsupported HRX node {w}: VIEW output={w}:f32[{N_EMBD},{N_TOK},1,1]<-VIEW inputs=[0:f32[{N_EMBD},{N_TOK},1,1]] \
             consumers=[{}:ADD] alias=not_aliasing_input(no_alias_source) storages=out{w}/in0 nb=[4,{row},{},{}] offs={offs} inputs=1",
            d.out.0,
            row * N_TOK,
            row * N_TOK
        );
        assert_eq!(err.refusals, vec![(d.window, expected)]);
        assert_eq!((err.census.refused, err.to_string().starts_with("unsupported HRX node")), (1, true));
    }
}

#[test]
fn a_window_feeding_other_consumers_plans_and_reads_its_slice() {
    for consumer in ["MUL", "RMS_NORM"] {
        let d = deepstack_graph(2, consumer);
        let plan = Plan::new(d.graph.clone(), &CpuRegistry).expect("plans");
        assert_eq!(plan.placements[d.window.0], Placement::Skipped, "{consumer}");
        let got = run_window(&d, N_TOK);
        if consumer == "MUL" {
            assert_eq!(got[N_EMBD + 5], wide_value(2, 1, 5));
        } else {
            assert!(got.iter().all(|x| x.is_finite()) && got[0] != 0.0);
        }
    }
}

#[test]
fn a_hand_made_alias_is_elided_and_reads_its_window() {
    let mut g = Graph::new("alias");
    let x = g.input("x", DType::F32, [8, 4, 1, 1], None).unwrap();
    let ones = g.input("ones", DType::F32, [8, 4, 1, 1], None).unwrap();
    let y = g.add(x, ones, "y").unwrap(); // transient [8, 4]
    let row1 = g.view(y, [8, 1, 1, 1], [4, 32, 32, 32], 32, None, "row1").unwrap();
    let flat = g.reshape(y, [32, 1, 1, 1], "flat").unwrap();
    let out = g.add(row1, row1, "double").unwrap();
    let sum = g.add(flat, flat, "sum").unwrap();
    g.mark_output(out);
    g.mark_output(sum);
    let plan = Plan::new(g, &CpuRegistry).unwrap();
    assert_eq!(plan.placements[row1.0], Placement::Elided);
    assert_eq!(plan.placements[flat.0], Placement::Elided);
    assert_eq!(plan.import.class[row1.0], Class::Alias);
    let c = plan.census();
    assert_eq!((c.elided, c.skipped, c.cpu_nodes), (2, 0, 3));
    let mut exec = CpuExecutor::new(vec![plan], &[], Kernels::Fast).unwrap();
    let xs: Vec<f32> = (0..32).map(|i| i as f32).collect();
    exec.f32_buffer(PlanId(0), "x").unwrap().copy_from_slice(&xs);
    exec.f32_buffer(PlanId(0), "ones").unwrap().fill(1.0);
    exec.run(PlanId(0), &[]).unwrap();
    let want: Vec<f32> = (8..16).map(|i| 2.0 * (i as f32 + 1.0)).collect();
    assert_eq!(exec.output(PlanId(0), out, &[]).unwrap(), want.as_slice());
}

#[test]
fn a_window_past_its_transient_source_is_refused() {
    let mut g = Graph::new("oob");
    let x = g.input("x", DType::F32, [8, 2, 1, 1], None).unwrap();
    let y = g.add(x, x, "y").unwrap();
    let past = g.view(y, [8, 2, 1, 1], [4, 32, 64, 64], 32, None, "past").unwrap();
    let out = g.add(past, past, "out").unwrap();
    g.mark_output(out);
    let err = Plan::new(g, &CpuRegistry).expect_err("refused");
    assert!(err.to_string().contains("alias=not_aliasing_input(out_of_range)"), "{err}");
    assert_eq!(err.census.refused, 1);
}

/// Ten 1 KiB ADDs in a chain, each of the previous one and the input.
fn add_chain() -> Graph {
    let mut g = Graph::new("chain");
    let x = g.input("x", DType::F32, [256, 1, 1, 1], None).unwrap();
    let mut v = x;
    for i in 0..10 {
        v = g.add(v, x, &format!("a{i}")).unwrap();
    }
    g.mark_output(v);
    g
}

#[test]
fn arena_reuses_bytes_of_dead_values() {
    let g = add_chain();
    let plan = Plan::new(g, &CpuRegistry).unwrap();
    // Ten 1 KiB values in a chain need only two live at a time.
    assert_eq!(plan.arena_bytes, 2 * 1024);
}

/// The CPU's kernels, but every node fuses with its one reader (`reserve`: keeping the first
/// node's inputs alive, or only where the arena happens to leave them clear).
struct FusesAll {
    reserve: bool,
}

impl Registry for FusesAll {
    fn device(&self) -> Where {
        Where::Cpu
    }
    fn kernel(&self, graph: &Graph, id: NodeId) -> Option<Kernel> {
        CpuRegistry.kernel(graph, id)
    }
    fn group(&self, _: &Graph, group: Group) -> Option<Fusion> {
        // Only fused readers: every ADD of the chain reads the one before and the input.
        group.folded.is_none().then(|| Fusion { kernel: Kernel::named("add_add"), reserve: self.reserve })
    }
}

/// (first, reader) of every fused pair.
fn fused_pairs(plan: &Plan) -> Vec<(NodeId, NodeId)> {
    (0..plan.placements.len())
        .filter_map(|i| match plan.placements[i] {
            Placement::Run { group: Group { fused: Some(reader), .. }, .. } => {
                assert_eq!(plan.placements[reader.0], Placement::Fused { into: NodeId(i) });
                Some((NodeId(i), reader))
            }
            _ => None,
        })
        .collect()
}

#[test]
fn a_fused_pair_keeps_the_first_nodes_inputs_alive_through_the_second() {
    let plan = Plan::new(add_chain(), &FusesAll { reserve: true }).unwrap();
    // Pairs fuse greedily along the chain: (a0, a1), (a2, a3), ... one dispatch each.
    let pairs = fused_pairs(&plan);
    assert_eq!(pairs.len(), 5, "{:?}", plan.placements);
    let census = plan.census();
    assert_eq!(
        (census.dispatches, census.fused, census.by_kernel.get(&(Where::Cpu, "add_add (ADD+ADD)".to_owned()))),
        (5, 5, Some(&5))
    );
    assert_eq!(plan.dispatches(), vec!["add_add"; 5]);
    // The reader's output is written while the first node's inputs are still read.
    for (first, reader) in pairs {
        for &input in &plan.graph.node(first).inputs {
            assert!(!plan.may_overlap(input, reader), "{first:?} {reader:?}");
        }
    }
    assert_eq!(plan.arena_bytes, 3 * 1024);
}

#[test]
fn a_fusion_without_reserved_bytes_happens_only_where_the_output_is_clear() {
    // Without reserving, the arena gives a3 the bytes of a1, which dies at a2: that pair
    // cannot fuse, and the arena stays at two values.
    let plan = Plan::new(add_chain(), &FusesAll { reserve: false }).unwrap();
    assert_eq!(plan.arena_bytes, 2 * 1024);
    let pairs = fused_pairs(&plan);
    assert!(pairs.len() < 5, "{pairs:?}");
    for (first, reader) in &pairs {
        for &input in &plan.graph.node(*first).inputs {
            assert!(!plan.may_overlap(input, *reader));
        }
    }
    // A node whose fusion was dropped runs alone.
    assert_eq!(plan.census().dispatches, 10 - pairs.len());
}

#[test]
fn transpose_and_permute_of_a_transient_alias_and_read_through_strides() {
    let mut g = Graph::new("transpose");
    let x = g.input("x", DType::F32, [3, 2, 1, 1], None).unwrap();
    let zero = g.input("zero", DType::F32, [1, 1, 1, 1], None).unwrap();
    let y = g.add(x, zero, "y").unwrap(); // transient [3, 2]
    let t = g.transpose(y, "t").unwrap(); // [2, 3]
    let p = g.permute(y, [1, 0, 2, 3], "p").unwrap();
    let out = g.cont(t, "out").unwrap();
    let out_p = g.cont(p, "out_p").unwrap();
    g.mark_output(out);
    g.mark_output(out_p);
    let plan = Plan::new(g, &CpuRegistry).unwrap();
    assert_eq!(plan.placements[t.0], Placement::Elided);
    assert_eq!(plan.placements[p.0], Placement::Elided);
    let mut exec = CpuExecutor::new(vec![plan], &[], Kernels::Reference).unwrap();
    exec.f32_buffer(PlanId(0), "x").unwrap().copy_from_slice(&[0., 1., 2., 10., 11., 12.]);
    exec.run(PlanId(0), &[]).unwrap();
    let want = [0., 10., 1., 11., 2., 12.];
    assert_eq!(exec.output(PlanId(0), out, &[]).unwrap(), &want);
    assert_eq!(exec.output(PlanId(0), out_p, &[]).unwrap(), &want);
}

/// x -> ADD -> RESHAPE -> SET_ROWS into a cache, as a layer's K rows are written; `spy`: a
/// second reader of the reshape.
fn rows_into_cache(spy: bool) -> (Graph, [NodeId; 4]) {
    let mut g = Graph::new("cache");
    let x = g.input("x", DType::F32, [4, 2, 3, 1], None).unwrap();
    let ids = g.input("ids", DType::I32, [3, 1, 1, 1], None).unwrap();
    let storage = g.external_storage("cache", DType::F32, 8 * 10 * 4, false);
    let cache = g.external_window("cache", storage, 0, [8, 10, 1, 1], [4, 32, 320, 320], None).unwrap();
    let sum = g.add(x, x, "sum").unwrap();
    let rows = g.reshape(sum, [8, 3, 1, 1], "rows").unwrap();
    let written = g.set_rows(cache, rows, ids, "write").unwrap();
    g.mark_output(written);
    if spy {
        let copy = g.add(rows, rows, "spy").unwrap();
        g.mark_output(copy);
    }
    (g, [x, ids, sum, written])
}

#[test]
fn a_reader_through_a_reshape_fuses_and_binds_no_alias_nor_its_destination() {
    let (g, [x, ids, sum, written]) = rows_into_cache(false);
    let plan = Plan::new(g, &FusesAll { reserve: true }).unwrap();
    assert_eq!(fused_pairs(&plan), vec![(sum, written)]);
    let Placement::Run { group, .. } = plan.placements[sum.0] else { panic!("{:?}", plan.placements[sum.0]) };
    // The ADD's inputs, then the SET_ROWS's ids: not the reshape, not the cache it writes.
    assert_eq!((group.inputs(&plan.graph), group.output()), (vec![x, x, ids], written));
    assert_eq!(plan.census().dispatches, 1);
    // A reshape something else reads too keeps its value: no fusion.
    let (g, [_, _, sum, _]) = rows_into_cache(true);
    let plan = Plan::new(g, &FusesAll { reserve: true }).unwrap();
    assert!(fused_pairs(&plan).iter().all(|&(first, _)| first != sum), "{:?}", plan.placements);
}

/// The CPU's kernels, keeping in halves every value that only products read as x (as the
/// Vulkan registry does for its matrix-unit products), and noting each value it was asked about.
struct HalvesForProducts {
    asked: std::cell::RefCell<Vec<NodeId>>,
}

impl Registry for HalvesForProducts {
    fn device(&self) -> Where {
        Where::Cpu
    }
    fn kernel(&self, graph: &Graph, id: NodeId) -> Option<Kernel> {
        CpuRegistry.kernel(graph, id)
    }
    fn keeps_halves(&self, graph: &Graph, id: NodeId, readers: &[NodeId]) -> bool {
        self.asked.borrow_mut().push(id);
        assert_eq!(graph.value(id).dtype, DType::F16, "asked about {id:?} before it was made halves");
        readers.iter().all(|&r| {
            let node = graph.node(r);
            node.op == Op::MatMul && graph.layout_root(node.inputs[0]) != id && graph.layout_root(node.inputs[1]) == id
        })
    }
}

/// A value only products read as x (directly and through a reshape) is kept in halves where
/// the registry takes it so: it and its view become f16 (byte strides halved: half the bytes);
/// a value something else reads, refused, stays exactly as it was; graph outputs and layout
/// nodes are never asked about.
#[test]
fn values_only_products_read_are_kept_in_halves_where_the_registry_takes_them() {
    let mut g = Graph::new("halves");
    let x = g.input("x", DType::F32, [64, 8, 1, 1], None).unwrap();
    let w = g.input("w", DType::F32, [64, 32, 1, 1], None).unwrap();
    let doubled = g.add(x, x, "doubled").unwrap();
    let seen = g.reshape(doubled, [64, 8, 1, 1], "seen").unwrap();
    let p1 = g.matmul(w, seen, "p1").unwrap();
    let p2 = g.matmul(w, doubled, "p2").unwrap();
    let both = g.add(p1, p2, "both").unwrap();
    let squared = g.mul(x, x, "squared").unwrap();
    let p3 = g.matmul(w, squared, "p3").unwrap();
    let kept = g.add(squared, squared, "kept").unwrap();
    let out = g.add(both, p3, "out").unwrap();
    g.mark_output(out);
    g.mark_output(kept);
    let registry = HalvesForProducts { asked: Default::default() };
    let plan = Plan::new(g.clone(), &registry).unwrap();
    for id in [doubled, seen] {
        let (before, after) = (g.value(id), plan.graph.value(id));
        assert_eq!((after.dtype, after.ne), (DType::F16, before.ne), "{id:?}");
        assert_eq!(after.nb, before.nb.map(|b| b / 2), "{id:?}");
    }
    // Read by an ADD too: refused, restored.
    assert_eq!(plan.graph.value(squared), g.value(squared));
    let asked = registry.asked.borrow();
    assert!(asked.contains(&doubled) && asked.contains(&squared), "{asked:?}");
    assert!(!asked.contains(&out) && !asked.contains(&seen), "{asked:?}");
    assert_eq!(2 * plan.graph.value(doubled).extent_bytes(), g.value(doubled).extent_bytes());
}
