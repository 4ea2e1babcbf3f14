//! Every Vulkan kernel against the CPU reference kernel (`cpu::execute` with
//! `Kernels::Reference`) on random data and odd shapes, by normalized mean squared error with
//! llama.cpp's test-backend-ops thresholds: 1e-7 elementwise and norms, 5e-4 matrix products
//! (tighter for the cooperative-matrix kernels, below).
//! Runs on lavapipe in CI (a missing device fails there) and on any GPU elsewhere. The
//! cooperative-matrix kernels run where the device has cooperative matrices: CI runs this
//! binary a second time on Mesa 26.1's lavapipe, which has them (8 x 8 x 8), with
//! HRX_EXPECT_COOPMAT=1 (scripts/lib/lavapipe_coopmat.sh); elsewhere they are skipped loudly.

mod vulkan_common;

use hrx::backend::cpu::tensor::{Data, In, Out};
use hrx::backend::cpu::{execute, Kernels};
use hrx::backend::vulkan::kernels::{
    self, CoopMat, Dyn, KernelId, KernelSet, Launch, MatKind, Operand, Ops, Values, Variants, WType, FOLD_MAX_ROWS,
    WIDE_MAX_SUBGROUP,
};
use hrx::backend::vulkan::{selfcheck, Buffer, CommandBuffer, DescriptorPool, Location, TESTED_SUBGROUP_SIZES};
use hrx::graph::{contiguous_strides, Gelu, Op, RopeKind};
use hrx::quant::{quantize_row, DType};
use vulkan_common::{f32_bytes, nmse, run, upload, Rng};

const MAT_NMSE: f64 = 5e-4;
/// The exact cooperative-matrix kernel's products of split f16 pairs must stay f32-accurate:
/// the f32 kernels give 1e-14..1e-12 here, plain f16 operands about 1e-7.
const EXACT_NMSE: f64 = 1e-10;
/// The f16 cooperative-matrix kernel rounds both operands to f16 (unit roundoff u = 2^-11)
/// and sums in f32. On these random products (independent rounding errors, terms of random
/// sign) that gives an NMSE of about u^2/3 per rounded operand, 1.6e-7 for two; measured on
/// lavapipe: 2e-8..9e-8 over many outputs, up to 1.2e-6 for a single output value (its sum
/// may cancel). 1e-5 leaves room for that and still fails on what a broken kernel does: a
/// missed or doubled slice, block or column (1e-3 and up over these shapes).
const F16_NMSE: f64 = 1e-5;
const ELEM_NMSE: f64 = 1e-7;

/// An f32 tensor laid out with padded strides (`pad` extra floats per row) at a byte offset.
struct Strided {
    ne: [usize; 4],
    nb: [usize; 4],
    offset: usize,
    /// The whole backing store, `offset / 4` floats of zeros first.
    data: Vec<f32>,
}

impl Strided {
    fn new(rng: &mut Rng, ne: [usize; 4], pad: usize, offset_floats: usize) -> Strided {
        let row = ne[0] + pad;
        let nb = [4, 4 * row, 4 * row * ne[1], 4 * row * ne[1] * ne[2]];
        let n = offset_floats + row * ne[1] * ne[2] * ne[3];
        let mut data = vec![0.0; n];
        for v in data[offset_floats..].iter_mut() {
            *v = rng.uniform();
        }
        Strided { ne, nb, offset: offset_floats * 4, data }
    }

    fn operand(&self) -> Operand {
        Operand { dtype: DType::F32, ne: self.ne, nb: self.nb, offset: self.offset, dynamic: None }
    }

    fn input(&self) -> In<'_> {
        In { data: Data::F32(&self.data), dtype: DType::F32, offset: self.offset, ne: self.ne, nb: self.nb }
    }

    /// Elements in logical order.
    fn gather(&self, store: &[f32]) -> Vec<f32> {
        let mut out = Vec::new();
        for i3 in 0..self.ne[3] {
            for i2 in 0..self.ne[2] {
                for i1 in 0..self.ne[1] {
                    for i0 in 0..self.ne[0] {
                        out.push(
                            store[(self.offset
                                + i0 * self.nb[0]
                                + i1 * self.nb[1]
                                + i2 * self.nb[2]
                                + i3 * self.nb[3])
                                / 4],
                        );
                    }
                }
            }
        }
        out
    }
}

/// Runs `op` on the GPU with `launch` and on the CPU reference; returns the NMSE.
fn compare(
    ks: &KernelSet,
    op: &Op,
    launch: &Launch,
    ins: [(&[u8], In); 2],
    out: &Strided,
    max: Option<[u32; 3]>,
) -> f64 {
    let dev = ks.device();
    let bufs = ins.map(|(bytes, input)| upload(dev, &vulkan_common::stored(bytes, &input), 0));
    let out_buf = dev.buffer((out.data.len() * 4) as u64, Location::Device, "test output").unwrap();
    out_buf.write_f32(0, &vec![f32::NAN; out.data.len()]).unwrap();
    run(ks, launch, &[], &[&bufs[0], &bufs[1]], &out_buf, out.ne, max);
    let got = out.gather(&out_buf.read_f32(0, out.data.len()).unwrap());
    let mut want_store = vec![0.0; out.data.len()];
    let mut o = Out { data: &mut want_store, offset: out.offset, ne: out.ne, nb: out.nb };
    let [(_, a), (_, b)] = ins;
    execute(op, &[a, b], &mut o, Kernels::Reference, 1).unwrap();
    let want = out.gather(&want_store);
    written_nmse(launch, &got, &want, out.ne)
}

/// The NMSE of `got` against `want`, after checking that the kernel wrote every element (the
/// output starts as NaN): how many it left, and where, otherwise.
fn written_nmse(launch: &Launch, got: &[f32], want: &[f32], ne: [usize; 4]) -> f64 {
    let unwritten: Vec<usize> = (0..got.len()).filter(|&i| !got[i].is_finite()).collect();
    assert!(
        unwritten.is_empty(),
        "{}: non-finite output (an element was not written): {} of {}, the first at {:?} (ne {ne:?})",
        launch.kernel.name(),
        unwritten.len(),
        got.len(),
        &unwritten[..unwritten.len().min(8)],
    );
    nmse(got, want)
}

fn quantized(rng: &mut Rng, dtype: DType, k: usize, n: usize) -> Vec<u8> {
    let row = dtype.row_bytes(k as u64).unwrap() as usize;
    let mut out = vec![0u8; row * n];
    for r in 0..n {
        quantize_row(dtype, &rng.vec(k), &mut out[r * row..(r + 1) * row]).unwrap();
    }
    out
}

/// The cooperative-matrix variant of `ks`'s device, or None after a loud message: the
/// cooperative-matrix kernels are then not tested by this run. With HRX_EXPECT_COOPMAT=1 (a
/// run meant to test them, such as CI's on Mesa 26.1's lavapipe) a device without them fails.
fn coop_variant(ks: &KernelSet) -> Option<CoopMat> {
    let info = ks.device().info();
    let cm = info.coopmat_matmul();
    if cm.is_none() {
        let msg = format!(
            "{} (Vulkan {}): no cooperative-matrix variant (f16 shapes {:?}, subgroup size {})",
            info.name,
            info.api_version_str(),
            info.features.coopmat_f16_shapes,
            info.subgroup_size
        );
        assert!(!std::env::var("HRX_EXPECT_COOPMAT").is_ok_and(|v| v == "1"), "HRX_EXPECT_COOPMAT=1: {msg}");
        // Once per run, straight to stderr (the harness captures eprintln! of passing tests).
        static SAID: std::sync::Once = std::sync::Once::new();
        SAID.call_once(|| {
            use std::io::Write;
            let _ = writeln!(std::io::stderr(), "!!!!! {msg}: the cooperative-matrix kernels are NOT TESTED !!!!!");
        });
    }
    cm
}

/// The matrix kernels `ks`'s device runs: the portable ones, the subgroup vector kernel
/// where the device has subgroup arithmetic (lavapipe does: CI runs both vector kernels), and
/// the cooperative-matrix ones (f16 on 64 x 64 tiles and on narrow tiles of one and two
/// blocks, and exact) where it has f16 cooperative matrices (the H200 and Mesa 26.1's
/// lavapipe do).
fn mat_kinds(ks: &KernelSet) -> Vec<MatKind> {
    let info = ks.device().info();
    let mut kinds = vec![MatKind::Vec, MatKind::Tiled, MatKind::Rows];
    kinds.extend(info.subgroup_kernels().map(|subgroup| MatKind::VecSg { subgroup }));
    kinds.extend(
        info.subgroup_kernels()
            .filter(|&s| s <= WIDE_MAX_SUBGROUP)
            .into_iter()
            .flat_map(|subgroup| WIDE_VARIANTS.map(|(rows, cols)| MatKind::VecWide { subgroup, rows, cols })),
    );
    if let Some(cm) = coop_variant(ks) {
        let narrow = [1, 2].map(|blocks| MatKind::CoopNarrow { cm, blocks });
        kinds.extend(
            [MatKind::Coop(cm), MatKind::CoopLarge(cm)].into_iter().chain(narrow).chain([MatKind::CoopExact(cm)]),
        );
    }
    kinds
}

/// The wide mat-vec kernel's (rows per thread, columns per workgroup) the tests run: every
/// row and every column count, not every pair (each is a pipeline of its own).
const WIDE_VARIANTS: [(u32, u32); 6] = [(2, 1), (4, 1), (8, 1), (2, 2), (4, 4), (2, 8)];

/// The NMSE a matrix kernel must stay under.
fn mat_tolerance(kind: MatKind) -> f64 {
    match kind {
        MatKind::Coop(_) | MatKind::CoopLarge(_) | MatKind::CoopNarrow { .. } => F16_NMSE,
        MatKind::CoopExact(_) => EXACT_NMSE,
        _ => MAT_NMSE,
    }
}

/// w [k, n] of `dtype` at byte offset `w_off`, x [k, cols...] strided; every kernel.
fn check_matmul(
    ks: &KernelSet,
    rng: &mut Rng,
    dtype: DType,
    k: usize,
    n: usize,
    cols: [usize; 3],
    max: Option<[u32; 3]>,
) {
    let w_off = 64;
    let mut w_bytes = vec![0u8; w_off];
    w_bytes.extend(quantized(rng, dtype, k, n));
    let w_ne = [k, n, 1, 1];
    let w_op = Operand { dtype, ne: w_ne, nb: contiguous_strides(dtype, w_ne), offset: w_off, dynamic: None };
    let w_in = In { data: Data::Bytes(&w_bytes), dtype, offset: w_off, ne: w_ne, nb: w_op.nb };
    // Columns of x padded and at an offset: of 3 and 5 floats, and of 4 and 8 (the 16-byte
    // aligned columns the wide kernel needs).
    let x_odd = Strided::new(rng, [k, cols[0], cols[1], cols[2]], 3, 5);
    let x_vec4 = Strided::new(rng, [k, cols[0], cols[1], cols[2]], 4, 8);
    let out = Strided::new(rng, [n, cols[0], cols[1], cols[2]], 1, 7);
    for kind in mat_kinds(ks) {
        // The wide kernel takes rows of whole 32-value units only; the fast cooperative-matrix
        // one whole 32-value slices of rows aligned for its 16-byte loads (2-byte for the types
        // whose blocks are).
        let row_bytes = w_op.nb[1];
        let aligned = matches!(dtype, DType::Q6K | DType::Q8_0) || (row_bytes.is_multiple_of(16) && w_off % 16 == 0);
        let wide = matches!(kind, MatKind::VecWide { .. });
        let refused = match kind {
            MatKind::VecWide { .. } => !k.is_multiple_of(32),
            MatKind::Coop(cm) => !(k.is_multiple_of(kernels::Tiles::fast(cm).bk as usize) && aligned),
            MatKind::CoopLarge(cm) => !(k.is_multiple_of(kernels::Tiles::large(cm).bk as usize) && aligned),
            MatKind::CoopNarrow { cm, blocks } => {
                !(k.is_multiple_of(kernels::Tiles::narrow(cm, blocks).bk as usize) && aligned)
            }
            _ => false,
        };
        if refused || wide {
            assert!(vulkan_common::launch_mat(kind, &w_op, &x_odd.operand(), &out.operand(), None, None).is_err());
        }
        if refused {
            continue;
        }
        let x = if wide { &x_vec4 } else { &x_odd };
        let x_bytes = f32_bytes(&x.data);
        let launch = vulkan_common::launch_mat(kind, &w_op, &x.operand(), &out.operand(), None, None).unwrap();
        let e = compare(ks, &Op::MatMul, &launch, [(&w_bytes, w_in), (&x_bytes, x.input())], &out, max);
        eprintln!("{:<24} K={k:<4} N={n:<3} cols={cols:?} max={max:?}: nmse {e:.3e}", launch.kernel.name());
        assert!(e < mat_tolerance(kind), "{} K={k} N={n} cols={cols:?}: nmse {e}", launch.kernel.name());
    }
}

/// The shared device's kernels: each pipeline compiled once per run of this binary.
fn kernel_set() -> Option<&'static KernelSet> {
    static SHARED: std::sync::OnceLock<Option<KernelSet>> = std::sync::OnceLock::new();
    SHARED.get_or_init(|| vulkan_common::device().map(|d| KernelSet::new(&d))).as_ref()
}

/// The device runs subgroups of the size this run asked for, as hrx's subgroup probe sees
/// them (gl_SubgroupSize, and subgroupAdd(1) over each subgroup, in every invocation):
/// scripts/test runs this binary at each width lavapipe can be given (LP_NATIVE_VECTOR_WIDTH)
/// with HRX_EXPECT_SUBGROUP the size it reports, so a driver ignoring the width fails here, and
/// at 1024 and 2048 bits with HRX_EXPECT_LANES=16, the lanes lavapipe runs there: the probe
/// must then fail, naming the driver (hrx leaves its subgroup kernels out on it). The subgroup
/// kernels' own size is one a test ran, and the probe passes there too.
#[test]
fn the_subgroup_probe_sees_what_the_device_runs() {
    let Some(ks) = kernel_set() else { return };
    let info = ks.device().info();
    let size = info.subgroup_size;
    match std::env::var("HRX_EXPECT_SUBGROUP") {
        Ok(want) => {
            assert_eq!(size.to_string(), want, "{}: subgroups of {size}, HRX_EXPECT_SUBGROUP={want}", info.name)
        }
        Err(_) => assert!(size.is_power_of_two(), "{}: subgroups of {size}", info.name),
    }
    let (min, max) = info.subgroup_sizes;
    assert!((min..=max).contains(&size), "{}: subgroups of {size} outside {min}..={max}", info.name);
    let probed = selfcheck::probe(ks, size).unwrap();
    match std::env::var("HRX_EXPECT_LANES") {
        Ok(lanes) if lanes != size.to_string() => {
            let why = probed.expect_err("the probe passed a size the device does not run");
            let driver = info.driver_name.clone().unwrap_or_default();
            assert!(why.contains(&driver) && why.contains(&format!("runs [{lanes}] lanes")), "{why}");
            eprintln!("subgroup probe at {size}: {why}");
        }
        _ => assert_eq!(probed, Ok(()), "{}: subgroups of {size}", info.name),
    }
    if let Some(s) = info.subgroup_kernels() {
        assert!(TESTED_SUBGROUP_SIZES.contains(&s), "{}: subgroup kernels at {s}", info.name);
        if std::env::var("HRX_EXPECT_LANES").is_err() {
            assert_eq!(selfcheck::probe(ks, s).unwrap(), Ok(()), "{}: subgroup kernels at {s}", info.name);
        }
    }
}

#[test]
fn matmul_float_weights_odd_shapes() {
    let Some(ks) = kernel_set() else { return };
    let mut rng = Rng::new(1);
    for dtype in [DType::F32, DType::F16, DType::BF16] {
        for (k, n, cols) in
            [(1, 1, [1, 1, 1]), (33, 7, [3, 1, 1]), (64, 67, [1, 1, 1]), (129, 5, [70, 1, 1]), (35, 65, [13, 3, 2])]
        {
            check_matmul(ks, &mut rng, dtype, k, n, cols, None);
        }
    }
}

#[test]
fn matmul_q8_0() {
    let Some(ks) = kernel_set() else { return };
    let mut rng = Rng::new(2);
    for (k, n, cols) in [(32, 1, [1, 1, 1]), (96, 7, [2, 1, 1]), (320, 67, [5, 2, 1]), (64, 130, [67, 1, 1])] {
        check_matmul(ks, &mut rng, DType::Q8_0, k, n, cols, None);
    }
}

#[test]
fn matmul_k_quants() {
    let Some(ks) = kernel_set() else { return };
    let mut rng = Rng::new(3);
    for dtype in [DType::Q4K, DType::Q5K, DType::Q6K] {
        for (k, n, cols) in
            [(256, 1, [1, 1, 1]), (512, 7, [3, 1, 1]), (768, 67, [1, 2, 1]), (256, 65, [70, 1, 1]), (512, 3, [9, 2, 2])]
                .into_iter()
                // Rows of whole quads of blocks: Q6_K's stored by quads (weight_layout).
                .chain([(1024, 9, [3, 1, 1]), (2048, 5, [1, 1, 1])])
        {
            check_matmul(ks, &mut rng, dtype, k, n, cols, None);
        }
    }
}

#[test]
fn subgroup_kernel_is_chosen_where_the_device_has_subgroup_arithmetic() {
    let Some(ks) = kernel_set() else { return };
    let info = ks.device().info();
    let Some(subgroup) = info.subgroup_kernels() else {
        eprintln!(
            "{}: no subgroup kernels (size {}, ops {:?}, in compute {})",
            info.name, info.subgroup_size, info.subgroup_ops, info.subgroup_in_compute
        );
        assert!(
            !info.name.contains("llvmpipe") || std::env::var_os("HRX_VK_NO_SUBGROUP").is_some(),
            "lavapipe has subgroup arithmetic"
        );
        return;
    };
    let variants = Variants::for_device(info);
    if std::env::var("HRX_VK_NO_SUBGROUP").is_ok_and(|v| v == "1") {
        assert_eq!(variants.mat_kinds(512, 64, 1)[0], MatKind::Vec);
        return;
    }
    // The wide kernel where subgroups are at most 64 lanes (and HRX_VK_MATVEC is not sg), the
    // subgroup one next, the portable one last.
    let want = |rows| {
        let wide = variants.wide_matvec.then_some(MatKind::VecWide { subgroup, rows, cols: 1 });
        wide.into_iter().chain([MatKind::VecSg { subgroup }, MatKind::Vec]).collect::<Vec<_>>()
    };
    // Four rows per thread for one column, whatever the weight type and the number of rows (a
    // vocabulary's too: WIDE_LONG_ROWS, 65,536 and more, changes only the threads a row).
    for n in [6144, 2048, 1024, 5, 65_535, 65_536, 151_936] {
        assert_eq!(variants.mat_kinds(512, n, 1), want(4), "{n} rows");
    }
    // A few sequences decoded together: every column in one workgroup, fewer rows per thread
    // for more columns (at most 16 sums a thread).
    if variants.wide_matvec {
        let first = |cols| variants.mat_kinds(512, 6144, cols)[0];
        assert_eq!(first(2), MatKind::VecWide { subgroup, rows: 4, cols: 2 });
        assert_eq!(first(3), MatKind::VecWide { subgroup, rows: 4, cols: 4 });
        // From 5 columns narrow cooperative-matrix tiles where the device has them.
        let narrow = variants.coopmat.filter(|_| variants.narrow && !variants.exact);
        let narrow = narrow.map(|cm| MatKind::CoopNarrow { cm, blocks: 1 });
        assert_eq!(first(8), narrow.unwrap_or(MatKind::VecWide { subgroup, rows: 2, cols: 8 }));
        assert_eq!(first(4), MatKind::VecWide { subgroup, rows: 4, cols: 4 });
        // A vocabulary head at 8 columns: too many narrow tiles, so the fast ones, and no
        // wide kernel after them (a folded norm would choose it).
        let fast = variants.coopmat.filter(|_| !variants.exact).map(MatKind::Coop);
        let head = variants.mat_kinds(2048, 151_936, 8);
        assert_eq!(head[0], fast.unwrap_or(MatKind::VecWide { subgroup, rows: 2, cols: 8 }), "{head:?}");
        assert_eq!(fast.is_some(), !head.iter().any(|k| matches!(k, MatKind::VecWide { .. })), "{head:?}");
    }
    // Rows not whole units of 32 values never take the wide kernel.
    assert!(!variants.mat_kinds(520, 6144, 1).iter().any(|k| matches!(k, MatKind::VecWide { .. })));
    // Only the vector kernels have subgroup variants (the tiled one may have cooperative ones).
    assert!(matches!(variants.mat_kinds(512, 64, 64)[0], MatKind::Tiled | MatKind::Coop(_) | MatKind::CoopExact(_)));
    assert_eq!(variants.mat_kinds(64, 64, 1), [MatKind::Rows]);
}

/// The wide mat-vec kernel folds an RMS norm into products of up to `FOLD_MAX_ROWS` rows, and
/// into more only for one column (each of their many workgroups would redo the norm's loads
/// for every column); the other kinds fold nothing. Launches only: no device needed.
#[test]
fn a_norm_folds_only_into_wide_products_of_bounded_rows() {
    let k = 256;
    let norm = Op::RmsNorm { eps: 1e-6 };
    let ops = Ops { node: &Op::MatMul, folded: Some(&norm), fused: None };
    let weight = Operand::contiguous(DType::F32, [k, 1, 1, 1], 0);
    let x = Operand::contiguous(DType::F32, [k, 1, 1, 1], 0);
    let wide = |cols| MatKind::VecWide { subgroup: 32, rows: 2, cols };
    for (kind, n, folds) in [
        (wide(1), FOLD_MAX_ROWS + 256, true),
        (wide(2), FOLD_MAX_ROWS, true),
        (wide(2), FOLD_MAX_ROWS + 256, false),
        (wide(8), FOLD_MAX_ROWS + 256, false),
        (MatKind::VecSg { subgroup: 32 }, 1024, false),
        (MatKind::Vec, 1024, false),
    ] {
        let w = Operand::contiguous(DType::Q4K, [k, n, 1, 1], 0);
        let out = Operand::contiguous(DType::F32, [n, 1, 1, 1], 0);
        let got = kernels::launch(KernelId::MatMul(kind, WType::Q4K, Values::F32), ops, &[w, x, weight], &out, None);
        assert_eq!(got.is_ok(), folds, "{kind:?} into {n} rows: {:?}", got.err());
    }
}

#[test]
fn matmul_with_a_fused_residual_every_kernel() {
    // d = w^T x + r in one dispatch (the executor fuses a product with the ADD consuming it).
    let Some(ks) = kernel_set() else { return };
    let mut rng = Rng::new(16);
    let (k, n) = (512, 70);
    let w_bytes = quantized(&mut rng, DType::Q4K, k, n);
    let w_ne = [k, n, 1, 1];
    let w_op =
        Operand { dtype: DType::Q4K, ne: w_ne, nb: contiguous_strides(DType::Q4K, w_ne), offset: 0, dynamic: None };
    let w_in = In { data: Data::Bytes(&w_bytes), dtype: DType::Q4K, offset: 0, ne: w_ne, nb: w_op.nb };
    // 130 columns: several tiles of every kernel, ragged.
    // A residual laid out as the output, and a bias: one row added to every column.
    for (cols, bias) in [(3, false), (20, false), (130, false), (1, true), (20, true), (130, true)] {
        let x = Strided::new(&mut rng, [k, cols, 1, 1], 0, 0);
        let out = Strided::new(&mut rng, [n, cols, 1, 1], 0, 0);
        let residual = Strided::new(&mut rng, [n, if bias { 1 } else { cols }, 1, 1], 0, 0);
        let mut want = vec![0.0; out.data.len()];
        let mut o = Out { data: &mut want, offset: 0, ne: out.ne, nb: out.nb };
        execute(&Op::MatMul, &[w_in, x.input()], &mut o, Kernels::Reference, 1).unwrap();
        want.iter_mut().enumerate().for_each(|(i, v)| *v += residual.data[i % residual.data.len()]);
        let dev = ks.device();
        let bufs =
            [upload(dev, &w_bytes, 0), upload(dev, &f32_bytes(&x.data), 0), upload(dev, &f32_bytes(&residual.data), 0)];
        for kind in mat_kinds(ks) {
            let launch =
                vulkan_common::launch_mat(kind, &w_op, &x.operand(), &out.operand(), Some(&residual.operand()), None)
                    .unwrap();
            let out_buf = dev.buffer((out.data.len() * 4) as u64, Location::Device, "test output").unwrap();
            out_buf.write_f32(0, &vec![f32::NAN; out.data.len()]).unwrap();
            run(ks, &launch, &[], &[&bufs[0], &bufs[1], &bufs[2]], &out_buf, out.ne, None);
            let got = out_buf.read_f32(0, out.data.len()).unwrap();
            let e = nmse(&got, &want);
            let what = if bias { "bias" } else { "residual" };
            eprintln!("{:<24} + {what}, cols={cols}: nmse {e:.3e}", launch.kernel.name());
            assert!(e < mat_tolerance(kind), "{} + {what} cols={cols}: nmse {e}", launch.kernel.name());
        }
    }
    // A residual laid out otherwise than the output, or a row of another length, is refused.
    let x_op = Operand::contiguous(DType::F32, [k, 3, 1, 1], 0);
    let d_op = Operand::contiguous(DType::F32, [n, 3, 1, 1], 0);
    for r_ne in [[n, 4, 1, 1], [n + 1, 1, 1, 1], [n, 1, 3, 1]] {
        let r_op = Operand::contiguous(DType::F32, r_ne, 0);
        assert!(vulkan_common::launch_mat(MatKind::Tiled, &w_op, &x_op, &d_op, Some(&r_op), None).is_err(), "{r_ne:?}");
    }
}

#[test]
fn coopmat_kernel_is_chosen_where_the_device_has_cooperative_matrices() {
    let Some(ks) = kernel_set() else { return };
    let info = ks.device().info();
    let variants = Variants::for_device(info);
    let many = variants.mat_kinds(512, 64, 64)[0];
    let switch = |name: &str| std::env::var(name).is_ok_and(|v| v == "1");
    match coop_variant(ks) {
        Some(_) if switch("HRX_VK_NO_COOPMAT") => {
            assert_eq!(many, MatKind::Tiled);
            assert!(!variants.f16_products());
        }
        Some(cm) if switch("HRX_VK_EXACT") => assert_eq!(many, MatKind::CoopExact(cm)),
        Some(cm) => {
            // The default: f16 operands on the device's best shape.
            assert_eq!(many, MatKind::Coop(cm));
            // A few columns (sequences decoded together) on the narrow tiles, unless HRX_VK_NO_NARROW=1
            // or a product has 64 x 64 tiles enough to fill the GPU (a vocabulary head).
            let first = |n, cols| variants.mat_kinds(2048, n, cols)[0];
            let narrow = |blocks| if variants.narrow { MatKind::CoopNarrow { cm, blocks } } else { MatKind::Coop(cm) };
            assert!(matches!(first(2048, 16), MatKind::CoopNarrow { .. }) == variants.narrow);
            // Tiles of two blocks where the columns fill them and they still make many
            // workgroups (6,144 rows), of one where they would not (512 rows).
            assert_eq!(first(6144, 32), narrow(2));
            assert_eq!(first(512, 32), narrow(1));
            assert_eq!(variants.mat_kinds(2048, 151_936, 32)[0], MatKind::Coop(cm));
            assert_eq!(variants.mat_kinds(2048, 2048, 33)[0], MatKind::Coop(cm));
            // The large tiles for products of many rows and columns that still make enough
            // workgroups of them (the 2B shape's 2048 -> 6144 at 512 tokens), not for fewer rows.
            let large = kernels::Tiles::large(cm);
            if large.stages_evenly(cm) && large.shared_bytes(cm.shape) <= info.max_shared_memory {
                let rows = 48 * large.rows() as usize;
                assert_eq!(variants.mat_kinds(2048, rows, 4 * large.cols() as usize)[0], MatKind::CoopLarge(cm));
                assert_eq!(variants.mat_kinds(2048, rows / 3, 512)[0], MatKind::Coop(cm));
                assert_eq!(variants.mat_kinds(2048, rows, large.cols() as usize)[0], MatKind::Coop(cm));
            }
            assert!(variants.f16_products());
            assert!(info.features.coopmat_f16_shapes.contains(&cm.shape));
            assert_eq!(cm.subgroup, info.subgroup_size);
        }
        None => {
            assert_eq!(many, MatKind::Tiled);
            assert!(!variants.f16_products());
            // The H200 of the device runs (scripts/device_vulkan_tests) has them.
            assert!(!info.name.contains("NVIDIA H200"), "{:?}", info.features);
        }
    }
    // Vector products never take them.
    assert!(!variants.mat_kinds(512, 64, 1).iter().any(|k| matches!(k, MatKind::Coop(_) | MatKind::CoopExact(_))));
    // A variant the kernels are not written for is refused at launch, not run.
    let odd = CoopMat { subgroup: 32, shape: hrx::backend::vulkan::CoopShape { m: 16, n: 16, k: 64 } };
    let w_op = Operand::contiguous(DType::F32, [64, 4, 1, 1], 0);
    let x_op = Operand::contiguous(DType::F32, [64, 16, 1, 1], 0);
    let d_op = Operand::contiguous(DType::F32, [4, 16, 1, 1], 0);
    assert!(vulkan_common::launch_mat(MatKind::Coop(odd), &w_op, &x_op, &d_op, None, None).is_err());
}

#[test]
fn plans_for_a_device_name_its_kernel_variants() {
    let Some(ks) = kernel_set() else { return };
    let info = ks.device().info();
    let mut g = hrx::graph::Graph::new("variants");
    let one = g.input("one", DType::F32, [512, 1, 1, 1], None).unwrap();
    let many = g.input("many", DType::F32, [512, 64, 1, 1], None).unwrap();
    let w = g.weight("w", DType::Q4K, [512, 100, 1, 1]).unwrap();
    let vec = g.matmul(w, one, "vec").unwrap();
    let mat = g.matmul(w, many, "mat").unwrap();
    g.mark_output(vec);
    g.mark_output(mat);
    let plan = hrx::dispatcher::Plan::new(g, &hrx::backend::vulkan::VulkanRegistry::for_device(info)).unwrap();
    let kernel = |id: hrx::graph::NodeId| match &plan.placements[id.0] {
        hrx::dispatcher::Placement::Run { kernel, .. } => kernel.clone(),
        other => panic!("{other:?}"),
    };
    let variants = Variants::for_device(info);
    let want_vec = match (variants.subgroup, variants.wide_matvec) {
        (Some(_), true) => "mul_mat_vec_wide4_q4_k",
        (Some(_), false) => "mul_mat_vec_sg_q4_k",
        (None, _) => "mul_mat_vec_q4_k",
    };
    let want_mat = match (variants.coopmat, variants.exact) {
        (Some(_), false) => "mul_mat_cm_q4_k",
        (Some(_), true) => "mul_mat_cm_exact_q4_k",
        (None, _) => "mul_mat_q4_k",
    };
    assert_eq!((kernel(vec).name.as_str(), kernel(mat).name.as_str()), (want_vec, want_mat));
    assert_eq!((kernel(vec).subgroup, kernel(vec).shape), (variants.subgroup, None));
    // A cooperative-matrix variant is named with its subgroup size and shape (a record
    // rebuilds the same kernel from them), and the plan's handle is that kernel.
    let cm = variants.coopmat;
    assert_eq!(kernel(mat).subgroup, cm.map(|c| c.subgroup));
    assert_eq!(kernel(mat).shape, cm.map(|c| [c.shape.m, c.shape.n, c.shape.k]));
    let selected = KernelId::MatMul(variants.mat_kinds(512, 64, 64)[0], kernels::WType::Q4K, Values::F32);
    assert_eq!(KernelId::from_name(&kernel(mat)), Some(selected));
    assert_eq!(KernelId::of_plan(&kernel(mat)), Some(selected));
}

#[test]
fn coopmat_kernel_large_and_ragged_tiles() {
    // Several tiles with ragged edges in both directions, odd and even numbers of slices (the
    // fast kernel's loads run two slices ahead), a clamped grid: the cooperative-matrix kernels
    // where the device has them (128 x 64 and 64 x 64 tiles at 16 x 16 x 16, 64 x 32 and 64 x
    // 64 at lavapipe's 8 x 8 x 8), the portable tiled one everywhere. K not a multiple of 32
    // (float weights): the exact and tiled kernels; the fast one refuses it (check_matmul).
    let Some(ks) = kernel_set() else { return };
    let mut rng = Rng::new(12);
    for dtype in [DType::F16, DType::Q4K, DType::Q5K, DType::Q6K, DType::Q8_0, DType::F32, DType::BF16] {
        // Slices of 64 (the fast kernel's default): 768, 12; 320, 5; 64, one; 224 and 200 are
        // not whole slices of it (the exact and tiled kernels), 200 not of 32 either. The
        // narrow kernel's slices of 128 on lavapipe and 256 on NVIDIA: 768, 6 and 3; 256, 2 and
        // 1; 384, 3 (F16; not whole slices of 256).
        let ks_of = if dtype.block_len() == 256 {
            vec![768, 256]
        } else if dtype == DType::Q8_0 {
            vec![320, 64, 224]
        } else if dtype == DType::F16 {
            vec![320, 384, 64, 224, 200]
        } else {
            vec![320, 64, 224, 200]
        };
        for k in ks_of {
            check_matmul(ks, &mut rng, dtype, k, 150, [131, 1, 1], None);
            check_matmul(ks, &mut rng, dtype, k, 70, [65, 2, 1], Some([1, 1, 1]));
        }
    }
    // Three tiles of 128 in both directions, the last ones ragged, over 3 x 2 workgroups.
    check_matmul(ks, &mut rng, DType::Q4K, 512, 293, [275, 1, 1], Some([3, 2, 1]));
    check_matmul(ks, &mut rng, DType::F16, 320, 300, [97, 3, 1], None);
    check_matmul(ks, &mut rng, DType::F16, 259, 300, [97, 3, 1], None);
}

/// The wide mat-vec kernel at decode's row lengths: 64 threads per row taking one, two or three
/// 32-value units each (K = 2048, 4096 with 128 threads, 6144), ragged row groups of each
/// number of rows per thread, and weights
/// at an offset that is only 2-byte aligned for the types it reads by words (a Q4_K row must be
/// 16-byte aligned: refused otherwise), x in padded columns at an offset (16-byte aligned ones:
/// x is read as vec4s, and refused otherwise).
#[test]
fn wide_matvec_at_decode_shapes() {
    let Some(ks) = kernel_set() else { return };
    let Some(subgroup) = ks.device().info().subgroup_kernels().filter(|&s| s <= WIDE_MAX_SUBGROUP) else {
        eprintln!("no subgroups of at most {WIDE_MAX_SUBGROUP} lanes: the wide kernel is not checked");
        return;
    };
    let mut rng = Rng::new(21);
    // Q6_K at a 2-byte and an 8-byte aligned offset: stored by quads, the kernel reads the
    // pieces of its rows as words around them, or (8-byte aligned) a load each.
    let types =
        [(DType::Q4K, 32), (DType::Q6K, 6), (DType::Q6K, 8), (DType::Q8_0, 2), (DType::F16, 2), (DType::Q5K, 4)];
    for (dtype, w_off) in types {
        // Ragged rows for each rows-per-thread variant, and ragged column groups (one
        // workgroup column, so it loops over them) for each columns-per-workgroup one.
        // A vocabulary's worth of rows (from WIDE_LONG_ROWS: 32 threads a row), ragged too. The
        // grid is clamped to two workgroups (each loops over row groups) but for it: thousands
        // of iterations of a workgroup, each with its barriers, end early on Debian 12's
        // lavapipe (Mesa 22.3; 26.1 runs them).
        let cases = [
            (2048, 19, 2, 1),
            (4096, 6, 4, 1),
            (6144, 21, 8, 1),
            (2048, 35, 8, 2),
            (2048, 21, 4, 4),
            (4096, 9, 2, 8),
            (512, 65_541, 2, 1),
        ];
        for (k, n, rows, cols) in cases {
            let kind = MatKind::VecWide { subgroup, rows, cols };
            let columns = if cols == 1 { 2 } else { 2 * cols as usize - 1 };
            let mut w_bytes = vec![0u8; w_off];
            w_bytes.extend(quantized(&mut rng, dtype, k, n));
            let w_ne = [k, n, 1, 1];
            let w_op = Operand { dtype, ne: w_ne, nb: contiguous_strides(dtype, w_ne), offset: w_off, dynamic: None };
            let w_in = In { data: Data::Bytes(&w_bytes), dtype, offset: w_off, ne: w_ne, nb: w_op.nb };
            let x = Strided::new(&mut rng, [k, columns, 1, 1], 4, 8);
            let out = Strided::new(&mut rng, [n, columns, 1, 1], 1, 0);
            let x_bytes = f32_bytes(&x.data);
            let launch = vulkan_common::launch_mat(kind, &w_op, &x.operand(), &out.operand(), None, None).unwrap();
            let max = if n > 4096 { [1024, 1, 1] } else { [2, 1, 1] };
            let e = compare(ks, &Op::MatMul, &launch, [(&w_bytes, w_in), (&x_bytes, x.input())], &out, Some(max));
            eprintln!("{:<24} K={k} N={n} columns={columns}: nmse {e:.3e}", launch.kernel.name());
            assert!(e < MAT_NMSE, "{} K={k} N={n} columns={columns}: nmse {e}", launch.kernel.name());
        }
    }
    let kind = MatKind::VecWide { subgroup, rows: 2, cols: 1 };
    let misaligned = Operand { offset: 8, ..Operand::contiguous(DType::Q4K, [2048, 4, 1, 1], 0) };
    let x_op = Operand::contiguous(DType::F32, [2048, 1, 1, 1], 0);
    let d_op = Operand::contiguous(DType::F32, [4, 1, 1, 1], 0);
    assert!(vulkan_common::launch_mat(kind, &misaligned, &x_op, &d_op, None, None).is_err());
    let w_op = Operand::contiguous(DType::Q4K, [2048, 4, 1, 1], 0);
    let x_unaligned = Operand { offset: 12, ..x_op };
    assert!(vulkan_common::launch_mat(kind, &w_op, &x_unaligned, &d_op, None, None).is_err());
    assert!(vulkan_common::launch_mat(kind, &w_op, &x_op, &d_op, None, None).is_ok());
    for (rows, cols) in [(3, 1), (2, 3), (2, 16)] {
        let odd = MatKind::VecWide { subgroup, rows, cols };
        assert!(vulkan_common::launch_mat(odd, &w_op, &x_op, &d_op, None, None).is_err(), "{odd:?}");
    }
}

#[test]
fn subgroup_kernel_fits_any_grid() {
    // The grid follows the subgroup size given at launch; the kernel follows the one it runs
    // with. A size other than the device's only changes how many workgroups loop.
    let Some(ks) = kernel_set() else { return };
    if ks.device().info().subgroup_kernels().is_none() {
        return;
    }
    let mut rng = Rng::new(8);
    for dtype in [DType::Q4K, DType::Q6K, DType::Q8_0, DType::F16] {
        // Weights at an offset that is not a multiple of 4: the decoders' word reads straddle.
        let (k, n, cols, w_off) = (1024, 37, [2, 1, 1], 6);
        let mut w_bytes = vec![0u8; w_off];
        w_bytes.extend(quantized(&mut rng, dtype, k, n));
        let w_ne = [k, n, 1, 1];
        let w_op = Operand { dtype, ne: w_ne, nb: contiguous_strides(dtype, w_ne), offset: w_off, dynamic: None };
        let w_in = In { data: Data::Bytes(&w_bytes), dtype, offset: w_off, ne: w_ne, nb: w_op.nb };
        let x = Strided::new(&mut rng, [k, cols[0], cols[1], cols[2]], 0, 0);
        let out = Strided::new(&mut rng, [n, cols[0], cols[1], cols[2]], 0, 0);
        let x_bytes = f32_bytes(&x.data);
        for subgroup in [4, 8, 32, 128] {
            let launch =
                vulkan_common::launch_mat(MatKind::VecSg { subgroup }, &w_op, &x.operand(), &out.operand(), None, None)
                    .unwrap();
            let e = compare(ks, &Op::MatMul, &launch, [(&w_bytes, w_in), (&x_bytes, x.input())], &out, None);
            eprintln!("{:<20} grid for subgroup {subgroup}: nmse {e:.3e}", launch.kernel.name());
            assert!(e < MAT_NMSE, "{} grid for subgroup {subgroup}: nmse {e}", launch.kernel.name());
        }
    }
    let w_op = Operand::contiguous(DType::F32, [64, 4, 1, 1], 0);
    let x_op = Operand::contiguous(DType::F32, [64, 1, 1, 1], 0);
    let d_op = Operand::contiguous(DType::F32, [4, 1, 1, 1], 0);
    assert!(vulkan_common::launch_mat(MatKind::VecSg { subgroup: 48 }, &w_op, &x_op, &d_op, None, None).is_err());
}

#[test]
fn kernels_loop_over_a_clamped_grid() {
    let Some(ks) = kernel_set() else { return };
    let mut rng = Rng::new(4);
    let max = Some([2, 3, 1]);
    check_matmul(ks, &mut rng, DType::Q4K, 256, 131, [67, 2, 1], max);
    check_matmul(ks, &mut rng, DType::F16, 40, 9, [5, 1, 1], max);
    check_binary(ks, &mut rng, Op::Add, [300, 7, 3, 1], [300, 1, 3, 1], max);
    check_rms_norm(ks, &mut rng, [77, 9, 2, 1], max);
}

fn check_binary(ks: &KernelSet, rng: &mut Rng, op: Op, ne: [usize; 4], b_ne: [usize; 4], max: Option<[u32; 3]>) {
    let a = Strided::new(rng, ne, 2, 3);
    let b = Strided::new(rng, b_ne, 1, 0);
    let out = Strided::new(rng, ne, 5, 1);
    let launch = vulkan_common::launch(&op, &[a.operand(), b.operand()], &out.operand(), None).unwrap();
    let (ab, bb) = (f32_bytes(&a.data), f32_bytes(&b.data));
    let e = compare(ks, &op, &launch, [(&ab, a.input()), (&bb, b.input())], &out, max);
    eprintln!("{:<18} {ne:?} by {b_ne:?}: nmse {e:.3e}", launch.kernel.name());
    assert!(e < ELEM_NMSE, "{} {ne:?} by {b_ne:?}: nmse {e}", launch.kernel.name());
}

#[test]
fn add_mul_broadcast_and_swiglu() {
    let Some(ks) = kernel_set() else { return };
    let mut rng = Rng::new(5);
    let ne = [13, 7, 3, 2];
    for op in [Op::Add, Op::Mul] {
        for b_ne in [[13, 1, 1, 1], [1, 7, 1, 1], [13, 7, 3, 2], [1, 1, 3, 1], [13, 7, 1, 2], [1, 1, 1, 1]] {
            check_binary(ks, &mut rng, op.clone(), ne, b_ne, None);
        }
    }
    for ne in [[1, 1, 1, 1], [13, 7, 3, 2], [1000, 3, 1, 1]] {
        check_binary(ks, &mut rng, Op::SwiGlu, ne, ne, None);
    }
}

fn check_rms_norm(ks: &KernelSet, rng: &mut Rng, ne: [usize; 4], max: Option<[u32; 3]>) {
    let x = Strided::new(rng, ne, 3, 1);
    let w = Strided::new(rng, [ne[0], 1, 1, 1], 0, 4);
    let out = Strided::new(rng, ne, 0, 0);
    let op = Op::RmsNorm { eps: 1e-6 };
    let launch = vulkan_common::launch(&op, &[x.operand(), w.operand()], &out.operand(), None).unwrap();
    let (xb, wb) = (f32_bytes(&x.data), f32_bytes(&w.data));
    let e = compare(ks, &op, &launch, [(&xb, x.input()), (&wb, w.input())], &out, max);
    eprintln!("{:<18} {ne:?}: nmse {e:.3e}", launch.kernel.name());
    assert!(e < ELEM_NMSE, "rms_norm {ne:?}: nmse {e}");
}

#[test]
fn rms_norm_odd_rows() {
    let Some(ks) = kernel_set() else { return };
    let mut rng = Rng::new(6);
    for ne in [[1, 1, 1, 1], [7, 3, 1, 1], [256, 5, 2, 1], [1000, 3, 1, 2], [2048, 2, 1, 1]] {
        check_rms_norm(ks, &mut rng, ne, None);
    }
}

/// ARGMAX gives each row's index exactly as the CPU does: the first of equal maxima, NaN
/// skipped, -inf rows at 0; over rows shorter than a workgroup's chunk, of many chunks (the 2B
/// vocabulary's 151,936 values), with ragged ends, and on a clamped grid.
#[test]
fn argmax_takes_each_rows_first_maximum() {
    let Some(ks) = kernel_set() else { return };
    let mut rng = Rng::new(31);
    let cases: [([usize; 4], Option<[u32; 3]>); 5] = [
        ([5, 3, 1, 1], None),
        ([2048, 2, 1, 1], None),
        ([4097, 3, 2, 1], None),
        ([151_936, 2, 1, 1], None),
        ([9000, 5, 1, 1], Some([3, 1, 1])),
    ];
    for (ne, max) in cases {
        let mut x = Strided::new(&mut rng, ne, 3, 1);
        let rows = ne[1] * ne[2] * ne[3];
        let row_floats = x.nb[1] / 4;
        let mut planted = Vec::new();
        for r in 0..rows {
            let row = &mut x.data[x.offset / 4 + r * row_floats..][..ne[0]];
            if r == 1 {
                // Every value -inf but a NaN: the first index.
                row.fill(f32::NEG_INFINITY);
                row[ne[0] / 2] = f32::NAN;
                planted.push(0.0);
                continue;
            }
            // The maximum twice (the first counts), a NaN before it.
            let at = (r * 7919 + 3) % ne[0];
            row[at] = 2.0;
            row[ne[0] - 1 - (ne[0] - 1 - at) / 2] = 2.0;
            if at > 0 {
                row[0] = f32::NAN;
            }
            planted.push(at as f32);
        }
        let out = Strided::new(&mut rng, [1, ne[1], ne[2], ne[3]], 0, 2);
        let launch = vulkan_common::launch(&Op::Argmax, &[x.operand()], &out.operand(), None).unwrap();
        let dev = ks.device();
        let x_buf = upload(dev, &f32_bytes(&x.data), 0);
        let out_buf = dev.buffer((out.data.len() * 4) as u64, Location::Device, "test output").unwrap();
        out_buf.write_f32(0, &vec![f32::NAN; out.data.len()]).unwrap();
        run(ks, &launch, &[], &[&x_buf], &out_buf, out.ne, max);
        let got = out.gather(&out_buf.read_f32(0, out.data.len()).unwrap());
        let mut want_store = vec![0.0; out.data.len()];
        let mut o = Out { data: &mut want_store, offset: out.offset, ne: out.ne, nb: out.nb };
        execute(&Op::Argmax, &[x.input()], &mut o, Kernels::Reference, 1).unwrap();
        assert_eq!(got, out.gather(&want_store), "{ne:?} grid {max:?}: the CPU's indices");
        assert_eq!(got, planted, "{ne:?} grid {max:?}: the planted maxima");
    }
}

/// Plan once, replay: one recording with indirect dispatch serves every token count; only
/// the sizes buffer and the dispatch arguments change between submissions.
#[test]
fn one_recording_replays_for_any_token_count() {
    let Some(ks) = kernel_set() else { return };
    let dev = ks.device();
    let mut rng = Rng::new(7);
    let (k, n, max_m) = (512, 40, 24);
    let w_bytes = quantized(&mut rng, DType::Q4K, k, n);
    let w_ne = [k, n, 1, 1];
    let w_op =
        Operand { dtype: DType::Q4K, ne: w_ne, nb: contiguous_strides(DType::Q4K, w_ne), offset: 0, dynamic: None };
    let x = rng.vec(k * max_m);
    let x_op = Operand::contiguous(DType::F32, [k, max_m, 1, 1], 0);
    let d_op = Operand::contiguous(DType::F32, [n, max_m, 1, 1], 0);
    let dynamic = Some(Dyn { axis: 1, sym: 0, num: 1, den: 1 });
    let w_buf = upload(dev, &w_bytes, 0);
    let x_buf = upload(dev, &f32_bytes(&x), 0);
    let d_buf = dev.buffer((n * max_m * 4) as u64, Location::Device, "d").unwrap();
    let sizes = dev.buffer(4, Location::Host, "sizes").unwrap();
    let kinds: Vec<MatKind> = mat_kinds(ks).into_iter().filter(|k| *k != MatKind::Rows).collect();
    let args = dev.buffer(12 * kinds.len() as u64, Location::Host, "indirect args").unwrap();
    let pool = DescriptorPool::new(dev, kinds.len() as u32, kernels::BINDINGS).unwrap();
    let mut cmd = CommandBuffer::new(dev).unwrap();
    cmd.begin().unwrap();
    let mut launches = Vec::new();
    for (i, &kind) in kinds.iter().enumerate() {
        let launch = vulkan_common::launch_mat(kind, &w_op, &x_op, &d_op, None, dynamic).unwrap();
        let pipeline = ks.pipeline(launch.kernel).unwrap();
        let set = pool.bind(&pipeline, &[&sizes, &w_buf, &x_buf, &sizes, &sizes, &d_buf, &sizes]).unwrap();
        cmd.dispatch_indirect(&pipeline, &set, &launch.push, &args, 12 * i as u64).unwrap();
        cmd.barrier().unwrap();
        launches.push(launch);
    }
    cmd.finish().unwrap();
    for (round, m) in [24usize, 1, 5, 17, 3, 9].into_iter().enumerate() {
        // Round r runs kernel r % kinds (tiled, vector, subgroup vector where there is one).
        let limits = dev.info().max_workgroup_count;
        let mut words = Vec::new();
        for (i, launch) in launches.iter().enumerate() {
            let g = if i == round % launches.len() { launch.groups([n, m, 1, 1], limits) } else { [0, 0, 0] };
            words.extend(g);
        }
        args.write_u32(0, &words).unwrap();
        sizes.write_u32(0, &[m as u32]).unwrap();
        d_buf.write_f32(0, &vec![f32::NAN; n * max_m]).unwrap();
        cmd.submit_and_wait().unwrap();
        let got = d_buf.read_f32(0, n * max_m).unwrap();
        let mut want = vec![0.0; n * m];
        let w_in = In { data: Data::Bytes(&w_bytes), dtype: DType::Q4K, offset: 0, ne: w_ne, nb: w_op.nb };
        let x_in = In { data: Data::F32(&x), dtype: DType::F32, offset: 0, ne: [k, m, 1, 1], nb: x_op.nb };
        let mut out = Out { data: &mut want, offset: 0, ne: [n, m, 1, 1], nb: d_op.nb };
        execute(&Op::MatMul, &[w_in, x_in], &mut out, Kernels::Reference, 1).unwrap();
        let e = nmse(&got[..n * m], &want);
        let kind = kinds[round % launches.len()];
        eprintln!("replay {} m={m}: nmse {e:.3e}", launches[round % launches.len()].kernel.name());
        assert!(e < mat_tolerance(kind), "{kind:?} m={m}: nmse {e}");
        assert!(got[n * m..].iter().all(|v| v.is_nan()), "m={m}: columns past the run-time count were written");
    }
    assert_eq!(cmd.len(), kinds.len());
}

#[test]
fn operands_no_kernel_takes_are_refused() {
    let f32_op = |ne| Operand::contiguous(DType::F32, ne, 0);
    let x = f32_op([64, 2, 1, 1]);
    // Q3_K weights, a K mismatch, a misaligned f32 offset, a GELU changing shape: all
    // refused, none panic.
    let q5 = Operand::contiguous(DType::Q3K, [256, 4, 1, 1], 0);
    assert!(vulkan_common::launch(&Op::MatMul, &[q5, f32_op([256, 2, 1, 1])], &f32_op([4, 2, 1, 1]), None).is_err());
    assert!(vulkan_common::launch(&Op::MatMul, &[f32_op([63, 4, 1, 1]), x], &f32_op([4, 2, 1, 1]), None).is_err());
    let shifted = Operand { offset: 2, ..x };
    assert!(vulkan_common::launch(&Op::Add, &[shifted, x], &x, None).is_err());
    assert!(vulkan_common::launch(&Op::Add, &[x, f32_op([3, 1, 1, 1])], &x, None).is_err());
    assert!(vulkan_common::launch(&Op::Gelu(hrx::graph::Gelu::Erf), &[x], &f32_op([3, 1, 1, 1]), None).is_err());
    assert!(vulkan_common::launch(&Op::Add, &[x], &x, None).is_err());
    assert!(vulkan_common::launch(&Op::Add, &[x, x], &x, None).is_ok());
}

/// An input of a general comparison: its bytes (uploaded as a buffer) and its CPU view.
struct Arg<'a> {
    bytes: Vec<u8>,
    view: In<'a>,
}

fn f32_arg(s: &Strided) -> Arg<'_> {
    Arg { bytes: f32_bytes(&s.data), view: s.input() }
}

fn i32_arg(v: &[i32], ne: [usize; 4]) -> Arg<'_> {
    Arg {
        bytes: v.iter().flat_map(|x| x.to_le_bytes()).collect(),
        view: In { data: Data::I32(v), dtype: DType::I32, offset: 0, ne, nb: contiguous_strides(DType::I32, ne) },
    }
}

fn i32_operand(ne: [usize; 4]) -> Operand {
    Operand::contiguous(DType::I32, ne, 0)
}

/// Runs `op` on the GPU and the CPU reference with any inputs; the output store starts as
/// `init` on both sides (NaN on the GPU when None, so unwritten elements show). The grid
/// follows `grid_ne`. Returns the NMSE over the output's elements.
fn compare_args(
    ks: &KernelSet,
    op: &Op,
    launch: &Launch,
    args: &[Arg],
    out: &Strided,
    init: Option<&[f32]>,
    grid_ne: [usize; 4],
) -> f64 {
    let dev = ks.device();
    let bufs: Vec<_> = args.iter().map(|a| upload(dev, &vulkan_common::stored(&a.bytes, &a.view), 0)).collect();
    let refs: Vec<_> = bufs.iter().collect();
    let out_buf = dev.buffer((out.data.len() * 4) as u64, Location::Device, "test output").unwrap();
    let start = init.map_or_else(|| vec![f32::NAN; out.data.len()], <[f32]>::to_vec);
    out_buf.write_f32(0, &start).unwrap();
    run(ks, launch, &[], &refs, &out_buf, grid_ne, None);
    let got_store = out_buf.read_f32(0, out.data.len()).unwrap();
    let mut want_store = init.map_or_else(|| vec![0.0; out.data.len()], <[f32]>::to_vec);
    let mut o = Out { data: &mut want_store, offset: out.offset, ne: out.ne, nb: out.nb };
    let views: Vec<In> = args.iter().map(|a| a.view).collect();
    execute(op, &views, &mut o, Kernels::Reference, 1).unwrap();
    let (got, want) = (out.gather(&got_store), out.gather(&want_store));
    written_nmse(launch, &got, &want, out.ne)
}

#[test]
fn get_rows_of_every_table_type() {
    let Some(ks) = kernel_set() else { return };
    let mut rng = Rng::new(21);
    let types = [DType::F32, DType::F16, DType::BF16, DType::Q8_0, DType::Q4K, DType::Q5K, DType::Q6K];
    // And Q6_K rows of whole quads of blocks (stored by quads, weight_layout).
    for (dtype, k) in
        types.map(|d| (d, if d.block_len() > 32 { 512 } else { 96 })).into_iter().chain([(DType::Q6K, 1024)])
    {
        let (rows, n) = (37, 11);
        let table_bytes = quantized(&mut rng, dtype, k, rows);
        let t_ne = [k, rows, 1, 1];
        let t_op = Operand { dtype, ne: t_ne, nb: contiguous_strides(dtype, t_ne), offset: 0, dynamic: None };
        let ids: Vec<i32> = (0..n).map(|_| (rng.next_u64() % rows as u64) as i32).collect();
        let out = Strided::new(&mut rng, [k, n, 1, 1], 3, 2);
        let launch =
            vulkan_common::launch(&Op::GetRows, &[t_op, i32_operand([n, 1, 1, 1])], &out.operand(), None).unwrap();
        let table = Arg {
            view: In { data: Data::Bytes(&table_bytes), dtype, offset: 0, ne: t_ne, nb: t_op.nb },
            bytes: table_bytes.clone(),
        };
        let e = compare_args(ks, &Op::GetRows, &launch, &[table, i32_arg(&ids, [n, 1, 1, 1])], &out, None, out.ne);
        eprintln!("{:<22} {t_ne:?} x {n}: nmse {e:.3e}", launch.kernel.name());
        assert!(e < ELEM_NMSE, "get_rows {dtype}: nmse {e}");
    }
}

#[test]
fn get_rows_weighted_f32_and_f16_tables() {
    let Some(ks) = kernel_set() else { return };
    let mut rng = Rng::new(22);
    let (k, rows, taps, n) = (40, 29, 4, 13);
    for dtype in [DType::F32, DType::F16] {
        let table_bytes = quantized(&mut rng, dtype, k, rows);
        let t_ne = [k, rows, 1, 1];
        let t_op = Operand { dtype, ne: t_ne, nb: contiguous_strides(dtype, t_ne), offset: 0, dynamic: None };
        let ids: Vec<i32> = (0..taps * n).map(|_| (rng.next_u64() % rows as u64) as i32).collect();
        let weights = Strided::new(&mut rng, [taps, n, 1, 1], 0, 0);
        let out = Strided::new(&mut rng, [k, n, 1, 1], 1, 0);
        let op = Op::GetRowsWeighted;
        let launch =
            vulkan_common::launch(&op, &[t_op, i32_operand([taps, n, 1, 1]), weights.operand()], &out.operand(), None)
                .unwrap();
        let table = Arg {
            view: In { data: Data::Bytes(&table_bytes), dtype, offset: 0, ne: t_ne, nb: t_op.nb },
            bytes: table_bytes.clone(),
        };
        let e = compare_args(
            ks,
            &op,
            &launch,
            &[table, i32_arg(&ids, [taps, n, 1, 1]), f32_arg(&weights)],
            &out,
            None,
            out.ne,
        );
        eprintln!("{:<22} {t_ne:?} x {taps}x{n}: nmse {e:.3e}", launch.kernel.name());
        assert!(e < ELEM_NMSE, "get_rows_weighted {dtype}: nmse {e}");
    }
}

#[test]
fn set_rows_writes_only_the_given_rows() {
    let Some(ks) = kernel_set() else { return };
    let mut rng = Rng::new(23);
    let (w, slots, n) = (48, 19, 5);
    let dst = Strided::new(&mut rng, [w, slots, 1, 1], 0, 0);
    let src = Strided::new(&mut rng, [w, n, 1, 1], 3, 1);
    let ids: Vec<i32> = vec![7, 0, 18, 3, 11];
    let op = Op::SetRows;
    let launch =
        vulkan_common::launch(&op, &[dst.operand(), src.operand(), i32_operand([n, 1, 1, 1])], &dst.operand(), None)
            .unwrap();
    // The reference never reads the destination as an input (it is the output).
    let dst_arg = Arg {
        bytes: vec![0; 4],
        view: In { data: Data::F32(&[]), dtype: DType::F32, offset: 0, ne: [0; 4], nb: [0; 4] },
    };
    let e = compare_args(
        ks,
        &op,
        &launch,
        &[dst_arg, f32_arg(&src), i32_arg(&ids, [n, 1, 1, 1])],
        &dst,
        Some(&dst.data),
        src.ne,
    );
    eprintln!("set_rows {w}x{n} into {slots}: nmse {e:.3e}");
    assert!(e < ELEM_NMSE, "set_rows: nmse {e}");
}

/// Bytes of an f16 store of `n` halves, each NaN (so unwritten halves show).
fn nan_halves(n: usize) -> Vec<u8> {
    std::iter::repeat_n(half::f16::NAN.to_le_bytes(), n).flatten().collect()
}

/// The halves of `bytes`.
fn halves(bytes: &[u8]) -> Vec<half::f16> {
    bytes.chunks_exact(2).map(|b| half::f16::from_le_bytes([b[0], b[1]])).collect()
}

/// Whether the GPU's half `got` is `want` rounded to f16: within one step of f16's grid there
/// (the conversion's rounding is the implementation's).
fn rounded_from(got: half::f16, want: f32) -> bool {
    let near = half::f16::from_f32(want);
    let step = (half::f16::from_bits(near.to_bits() + 1).to_f32() - near.to_f32()).abs();
    (got.to_f32() - want).abs() < step
}

/// SET_ROWS into a cache of f16 values (`Registry::cache_dtype`): rows ids[r] hold src's rows
/// rounded to f16, two halves a thread; every other half keeps its bytes; rows that are no whole
/// aligned pairs of halves are refused.
#[test]
fn set_rows_into_an_f16_cache() {
    let Some(ks) = kernel_set() else { return };
    let mut rng = Rng::new(27);
    let (w, slots, n) = (48, 19, 5);
    let ids: Vec<i32> = vec![7, 0, 18, 3, 11];
    let src = Strided::new(&mut rng, [w, n, 1, 1], 3, 1);
    // The destination 6 halves in, rows padded to 52 halves.
    let (offset, row) = (6, 52);
    let dst = Operand {
        dtype: DType::F16,
        ne: [w, slots, 1, 1],
        nb: [2, 2 * row, 2 * row * slots, 2 * row * slots],
        offset: 2 * offset,
        dynamic: None,
    };
    let launch =
        vulkan_common::launch(&Op::SetRows, &[dst, src.operand(), i32_operand([n, 1, 1, 1])], &dst, None).unwrap();
    let dev = ks.device();
    let store = offset + row * slots;
    let before = nan_halves(store);
    let out_buf = upload(dev, &before, 0);
    let ids_arg = i32_arg(&ids, [n, 1, 1, 1]);
    let bufs = [upload(dev, &[0; 4], 0), upload(dev, &f32_bytes(&src.data), 0), upload(dev, &ids_arg.bytes, 0)];
    run(ks, &launch, &[], &[&bufs[0], &bufs[1], &bufs[2]], &out_buf, src.ne, None);
    let mut bytes = vec![0; 2 * store];
    out_buf.read(0, &mut bytes).unwrap();
    let got = halves(&bytes);
    let values = src.gather(&src.data);
    assert!(got[..offset].iter().all(|h| h.is_nan()), "a half before the destination was written");
    for (i, h) in got.iter().enumerate().skip(offset) {
        let (r, c) = ((i - offset) / row, (i - offset) % row);
        match ids.iter().position(|&id| id as usize == r).filter(|_| c < w) {
            Some(t) => assert!(rounded_from(*h, values[t * w + c]), "row {r} value {c}: {h} for {}", values[t * w + c]),
            None => assert!(h.is_nan(), "half {i} (row {r}) was written"),
        }
    }
    // An odd offset, an odd row stride or an odd row width: no whole pairs.
    for (off, stride, width) in [(7, 52, 48), (6, 51, 48), (6, 52, 47)] {
        let dst = Operand {
            offset: 2 * off,
            nb: [2, 2 * stride, 2 * stride * slots, 2 * stride * slots],
            ne: [width, slots, 1, 1],
            ..dst
        };
        let src = Operand { ne: [width, n, 1, 1], ..src.operand() };
        assert!(
            vulkan_common::launch(&Op::SetRows, &[dst, src, i32_operand([n, 1, 1, 1])], &dst, None).is_err(),
            "{off} {stride} {width}"
        );
    }
}

#[test]
fn rope_mrope_and_axial() {
    let Some(ks) = kernel_set() else { return };
    let mut rng = Rng::new(24);
    // The last value: positions are below it (4096: a long context's angles).
    let cases = [
        (RopeKind::MropeInterleaved { sections: [11, 11, 10] }, 64, 64, 3, 7, 300),
        (RopeKind::MropeInterleaved { sections: [3, 2, 2] }, 24, 16, 2, 5, 300),
        (RopeKind::Axial2d, 32, 32, 4, 9, 300),
        (RopeKind::Axial2d, 40, 16, 1, 3, 300),
        (RopeKind::MropeInterleaved { sections: [24, 20, 20] }, 128, 128, 2, 16, 4096),
    ];
    for (kind, hd, n_dims, heads, n, max_pos) in cases {
        let comps = if matches!(kind, RopeKind::Axial2d) { 2 } else { 3 };
        let x = Strided::new(&mut rng, [hd, heads, n, 1], 2, 3);
        let out = Strided::new(&mut rng, [hd, heads, n, 1], 0, 0);
        let pos: Vec<i32> = (0..n * comps).map(|_| (rng.next_u64() % max_pos) as i32).collect();
        let op = Op::Rope { kind: kind.clone(), theta: 10000.0, n_dims };
        let launch =
            vulkan_common::launch(&op, &[x.operand(), i32_operand([n, comps, 1, 1])], &out.operand(), None).unwrap();
        let e = compare_args(ks, &op, &launch, &[f32_arg(&x), i32_arg(&pos, [n, comps, 1, 1])], &out, None, out.ne);
        eprintln!("rope {kind:?} hd={hd} n_dims={n_dims} heads={heads} n={n} positions<{max_pos}: nmse {e:.3e}");
        assert!(e < ELEM_NMSE, "rope {kind:?}: nmse {e}");
    }
}

#[test]
fn rms_norm_then_rope_in_one_kernel() {
    // The executor records a per-head RMS_NORM folded into the ROPE consuming it as one
    // dispatch; with the SET_ROWS that writes the rope's rows into a cache fused too (`slots`:
    // the cache rows, ids scattered over them, one out of range), only the ids' rows change.
    let Some(ks) = kernel_set() else { return };
    let mut rng = Rng::new(25);
    let cases = [
        (RopeKind::MropeInterleaved { sections: [24, 20, 20] }, 128, 128, 4, 9, None),
        (RopeKind::MropeInterleaved { sections: [24, 20, 20] }, 128, 128, 8, 1, Some(7)),
        (RopeKind::MropeInterleaved { sections: [3, 2, 2] }, 24, 16, 2, 5, Some(12)),
        (RopeKind::Axial2d, 40, 16, 3, 3, None),
        (RopeKind::MropeInterleaved { sections: [11, 11, 10] }, 300, 64, 1, 2, Some(3)),
    ];
    for (kind, hd, n_dims, heads, n, slots) in cases {
        let comps = if matches!(kind, RopeKind::Axial2d) { 2 } else { 3 };
        let x = Strided::new(&mut rng, [hd, heads, n, 1], 2, 3);
        let w = Strided::new(&mut rng, [hd, 1, 1, 1], 0, 1);
        let pos: Vec<i32> = (0..n * comps).map(|_| (rng.next_u64() % 5000) as i32).collect();
        // Token t to row ids[t] of the cache: distinct rows from the end, the last one past it.
        let ids: Vec<i32> = match slots {
            Some(rows) => {
                (0..n).map(|t| if t + 1 == n && n > 1 { rows as i32 } else { (rows - 1 - t) as i32 }).collect()
            }
            None => Vec::new(),
        };
        let out = match slots {
            Some(rows) => Strided::new(&mut rng, [hd * heads, rows, 1, 1], 0, 2),
            None => Strided::new(&mut rng, [hd, heads, n, 1], 1, 0),
        };
        let norm = Op::RmsNorm { eps: 1e-6 };
        let rope = Op::Rope { kind: kind.clone(), theta: 1_000_000.0, n_dims };
        let pos_arg = i32_arg(&pos, [n, comps, 1, 1]);
        let ids_arg = i32_arg(&ids, [n, 1, 1, 1]);
        let dev = ks.device();
        let mut operands = vec![x.operand(), i32_operand([n, comps, 1, 1])];
        let mut bufs = vec![upload(dev, &f32_bytes(&x.data), 0), upload(dev, &pos_arg.bytes, 0)];
        if slots.is_some() {
            operands.push(i32_operand([n, 1, 1, 1]));
            bufs.push(upload(dev, &ids_arg.bytes, 0));
        }
        operands.push(w.operand());
        bufs.push(upload(dev, &f32_bytes(&w.data), 0));
        let set_rows = Op::SetRows;
        let ops = Ops { node: &rope, folded: Some(&norm), fused: slots.map(|_| &set_rows) };
        let launch = kernels::launch(KernelId::RmsNormRope, ops, &operands, &out.operand(), None).unwrap();
        let out_buf = upload(dev, &f32_bytes(&out.data), 0);
        let buf_refs: Vec<&Buffer> = bufs.iter().collect();
        run(ks, &launch, &[], &buf_refs, &out_buf, x.ne, Some([2, 1, 1]));
        let got = out.gather(&out_buf.read_f32(0, out.data.len()).unwrap());
        // The CPU reference: the norm into a contiguous value, the rope, the rows written.
        let ne = [hd, heads, n, 1];
        let contiguous = |data| In { data, dtype: DType::F32, offset: 0, ne, nb: contiguous_strides(DType::F32, ne) };
        let mut normed = vec![0.0; hd * heads * n];
        let mut o = Out { data: &mut normed, offset: 0, ne, nb: contiguous_strides(DType::F32, ne) };
        execute(&norm, &[x.input(), w.input()], &mut o, Kernels::Reference, 1).unwrap();
        let mut want_store = out.data.clone();
        match slots {
            Some(_) => {
                let mut rotated = vec![0.0; hd * heads * n];
                let mut o = Out { data: &mut rotated, offset: 0, ne, nb: contiguous_strides(DType::F32, ne) };
                execute(&rope, &[contiguous(Data::F32(&normed)), pos_arg.view], &mut o, Kernels::Reference, 1).unwrap();
                // SET_ROWS as the kernel does it: an id out of range writes nothing.
                let width = hd * heads;
                for (t, &id) in ids.iter().enumerate().filter(|(_, &id)| (id as usize) < out.ne[1]) {
                    let row = (out.offset + id as usize * out.nb[1]) / 4;
                    want_store[row..row + width].copy_from_slice(&rotated[t * width..(t + 1) * width]);
                }
            }
            None => {
                let mut o = Out { data: &mut want_store, offset: out.offset, ne: out.ne, nb: out.nb };
                execute(&rope, &[contiguous(Data::F32(&normed)), pos_arg.view], &mut o, Kernels::Reference, 1).unwrap();
            }
        }
        let want = out.gather(&want_store);
        let e = nmse(&got, &want);
        eprintln!("rms_norm_rope {kind:?} hd={hd} n_dims={n_dims} heads={heads} n={n} into {slots:?}: nmse {e:.3e}");
        assert!(e < ELEM_NMSE, "rms_norm_rope {kind:?} into {slots:?}: nmse {e}");
        if slots.is_some() {
            // Rows no id names keep their bytes exactly.
            let untouched = |r: usize| !ids.contains(&(r as i32));
            for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                if untouched(i / (hd * heads)) {
                    assert_eq!(g.to_bits(), w.to_bits(), "row {} changed", i / (hd * heads));
                }
            }
        }
    }
}

/// The norm and rope with the SET_ROWS into a cache of f16 values fused: rows ids[t] hold what
/// the kernel writes into an f32 cache (checked against the reference above) rounded to f16,
/// two halves a thread, the unrotated tail too; every other half keeps its bytes. Heads of an
/// odd length or a destination at an odd half are refused (no whole pairs).
#[test]
fn rms_norm_rope_into_an_f16_cache() {
    let Some(ks) = kernel_set() else { return };
    let mut rng = Rng::new(26);
    let dev = ks.device();
    let (norm, set_rows) = (Op::RmsNorm { eps: 1e-6 }, Op::SetRows);
    let cases = [([24, 20, 20], 128, 128, 8, 3, 7), ([3, 2, 2], 24, 16, 2, 5, 12), ([3, 2, 2], 22, 12, 2, 5, 12)];
    for (sections, hd, n_dims, heads, n, rows) in cases {
        let rope = Op::Rope { kind: RopeKind::MropeInterleaved { sections }, theta: 1_000_000.0, n_dims };
        let x = Strided::new(&mut rng, [hd, heads, n, 1], 2, 3);
        let w = Strided::new(&mut rng, [hd, 1, 1, 1], 0, 1);
        let pos: Vec<i32> = (0..n * 3).map(|_| (rng.next_u64() % 5000) as i32).collect();
        let ids: Vec<i32> = (0..n).map(|t| (rows - 1 - 2 * t) as i32).collect();
        let operands = [x.operand(), i32_operand([n, 3, 1, 1]), i32_operand([n, 1, 1, 1]), w.operand()];
        let (pos_arg, ids_arg) = (i32_arg(&pos, [n, 3, 1, 1]), i32_arg(&ids, [n, 1, 1, 1]));
        let bufs =
            [&f32_bytes(&x.data), &pos_arg.bytes, &ids_arg.bytes, &f32_bytes(&w.data)].map(|b| upload(dev, b, 0));
        let ops = Ops { node: &rope, folded: Some(&norm), fused: Some(&set_rows) };
        let width = hd * heads;
        // The cache 2 values in, as values (NaN where nothing was written).
        let cache = |dtype: DType| {
            let size = dtype.block_bytes();
            let ne = [width, rows, 1, 1];
            Operand { dtype, ne, nb: contiguous_strides(dtype, ne), offset: 2 * size, dynamic: None }
        };
        let run_into = |dtype: DType| -> Vec<f32> {
            let out = cache(dtype);
            let launch = kernels::launch(KernelId::RmsNormRope, ops, &operands, &out, None).unwrap();
            let values = 2 + width * rows;
            let start = match dtype {
                DType::F16 => nan_halves(values),
                _ => f32_bytes(&vec![f32::NAN; values]),
            };
            let out_buf = upload(dev, &start, 0);
            run(ks, &launch, &[], &[&bufs[0], &bufs[1], &bufs[2], &bufs[3]], &out_buf, x.ne, Some([2, 1, 1]));
            let mut bytes = vec![0; start.len()];
            out_buf.read(0, &mut bytes).unwrap();
            match dtype {
                DType::F16 => halves(&bytes).iter().map(|h| h.to_f32()).collect(),
                _ => bytes.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect(),
            }
        };
        let (full, half) = (run_into(DType::F32), run_into(DType::F16));
        for (i, (&f, &h)) in full.iter().zip(&half).enumerate() {
            let row = i.checked_sub(2).map(|v| v / width);
            if f.is_nan() {
                assert!(h.is_nan(), "hd={hd}: half {i} (row {row:?}) was written");
            } else {
                assert!(rounded_from(half::f16::from_f32(h), f), "hd={hd}: half {i} (row {row:?}): {h} for {f}");
            }
        }
        let written = full.iter().filter(|v| !v.is_nan()).count();
        assert_eq!(written, n * width, "hd={hd}: every token's rows");
        eprintln!(
            "rms_norm_rope hd={hd} n_dims={n_dims} heads={heads} n={n} into f16 rows of {rows}: {written} halves"
        );
        let odd = Operand { offset: 2, ..cache(DType::F16) };
        assert!(kernels::launch(KernelId::RmsNormRope, ops, &operands, &odd, None).is_err(), "an odd half");
    }
    // Heads of 23 values: their rows start at odd halves.
    let x = Operand::contiguous(DType::F32, [23, 2, 3, 1], 0);
    let w = Operand::contiguous(DType::F32, [23, 1, 1, 1], 0);
    let out = Operand::contiguous(DType::F16, [46, 5, 1, 1], 0);
    let operands = [x, i32_operand([3, 3, 1, 1]), i32_operand([3, 1, 1, 1]), w];
    let rope = Op::Rope { kind: RopeKind::MropeInterleaved { sections: [3, 2, 2] }, theta: 10_000.0, n_dims: 16 };
    let ops = Ops { node: &rope, folded: Some(&norm), fused: Some(&set_rows) };
    assert!(kernels::launch(KernelId::RmsNormRope, ops, &operands, &out, None).is_err(), "heads of 23 halves");
}

/// An attention case: q [d, heads, n_q]; k and v head views of a [d * kv_heads, n_kv] cache
/// (as the text graph's); causal with `slots` (one per query), else over every kv row.
/// `run`: the run-time (queries, kv rows) of a plan made for n_q and n_kv (both axes dynamic),
/// `max`: the grid's limit (the device's when None), `gain`: q's scale (large: peaked
/// softmaxes whose maximum moves from tile to tile).
struct AttnCase {
    d: usize,
    heads: usize,
    kv_heads: usize,
    n_q: usize,
    n_kv: usize,
    slots: Option<Vec<i32>>,
    /// Kv rows per sequence (the whole cache when None).
    segment: Option<usize>,
    run: Option<(usize, usize)>,
    max: Option<[u32; 3]>,
    gain: f32,
    /// q, k and v 16-byte aligned (offsets and strides whole vec4s), as a model's are; else
    /// padded rows and odd offsets.
    aligned: bool,
    /// K and V of f16 values (a GPU's KV cache, `Registry::cache_dtype`), else f32.
    f16: bool,
}

impl AttnCase {
    fn new((d, heads, kv_heads, n_q, n_kv): (usize, usize, usize, usize, usize)) -> AttnCase {
        AttnCase {
            d,
            heads,
            kv_heads,
            n_q,
            n_kv,
            slots: None,
            segment: None,
            run: None,
            max: None,
            gain: 1.0,
            aligned: false,
            f16: false,
        }
    }

    fn f16(self) -> AttnCase {
        AttnCase { f16: true, ..self }
    }

    fn aligned(self) -> AttnCase {
        AttnCase { aligned: true, ..self }
    }

    /// Causal: query t sees kv rows 0..=slots[t].
    fn slots(self, slots: Vec<i32>) -> AttnCase {
        assert_eq!(slots.len(), self.n_q);
        AttnCase { slots: Some(slots), ..self }
    }

    /// Random slots below `below`: many smaller than their query's index, some equal.
    fn random_slots(self, rng: &mut Rng, below: usize) -> AttnCase {
        let slots = (0..self.n_q).map(|_| (rng.next_u64() % below as u64) as i32).collect();
        self.slots(slots)
    }

    /// Causal over sequences of `segment` rows: query t sees its sequence's rows up to slots[t].
    fn segments(self, segment: usize, slots: Vec<i32>) -> AttnCase {
        assert!(self.n_kv.is_multiple_of(segment));
        AttnCase { segment: Some(segment), ..self.slots(slots) }
    }

    /// Query t sees rows spans[t].0 .. spans[t].1 (several images in one call; segment 0).
    fn spans(self, spans: &[(i32, i32)]) -> AttnCase {
        assert_eq!(spans.len(), self.n_q);
        AttnCase { slots: Some(spans.iter().flat_map(|&(f, e)| [f, e]).collect()), segment: Some(0), ..self }
    }

    /// Query t's kv rows: its span, or its sequence's up to its slot, or all of them.
    fn sees(&self, t: usize) -> std::ops::Range<usize> {
        match (&self.slots, self.segment) {
            (Some(s), Some(0)) => s[2 * t] as usize..s[2 * t + 1] as usize,
            (Some(s), segment) if s[t] >= 0 => {
                let (slot, segment) = (s[t] as usize, segment.unwrap_or(self.n_kv));
                slot - slot % segment..slot + 1
            }
            (Some(_), _) => 0..0,
            (None, _) => 0..self.n_kv,
        }
    }

    fn run(self, n_q: usize, n_kv: usize) -> AttnCase {
        AttnCase { run: Some((n_q, n_kv)), ..self }
    }

    fn max(self, max: [u32; 3]) -> AttnCase {
        AttnCase { max: Some(max), ..self }
    }

    fn gain(self, gain: f32) -> AttnCase {
        AttnCase { gain, ..self }
    }

    fn name(&self, kernel: KernelId) -> String {
        let (d, h, kvh, n_q, n_kv) = (self.d, self.heads, self.kv_heads, self.n_q, self.n_kv);
        let causal = match (&self.slots, self.segment) {
            (Some(_), Some(0)) => "spans".into(),
            (Some(_), Some(segment)) => format!("causal in sequences of {segment}"),
            (Some(_), None) => "causal".into(),
            (None, _) => "full".into(),
        };
        let (run, max, gain, aligned) = (self.run, self.max, self.gain, self.aligned);
        let kv = if self.f16 { "f16" } else { "f32" };
        format!(
            "{} d={d} heads={h}/{kvh} n_q={n_q} n_kv={n_kv} {causal} run={run:?} max={max:?} gain={gain} aligned={aligned} kv={kv}",
            kernel.name()
        )
    }
}

/// The split attention kernels whose heads hold `d` values on the device's subgroups (the
/// narrow one only where they are wide enough: on lavapipe's 8 lanes, heads of up to 64; none
/// on subgroups below `SPLIT_MIN_SUBGROUP`).
fn split_kernels(info: &hrx::backend::vulkan::DeviceInfo, d: usize) -> Vec<KernelId> {
    let Some(subgroup) = info.subgroup_kernels().filter(|&s| s >= kernels::SPLIT_MIN_SUBGROUP) else {
        return Vec::new();
    };
    [kernels::SplitWidth::Wide, kernels::SplitWidth::Narrow]
        .into_iter()
        .filter(|w| d <= w.max_head_dim(subgroup))
        .map(|width| KernelId::FlashAttnSplit(kernels::AttnSplit { width, subgroup }, Values::F32))
        .collect()
}

/// The attention kernels the test device runs for `d`: the one-query kernel, the split one
/// where the device has subgroup arithmetic (lavapipe does) and K and V are whole vec4s
/// (`vec4s`), the tiled one of its head size (every tile fits lavapipe's 32 KiB) and, where the
/// device has cooperative matrices, the one on them (heads of up to 128 values).
fn attn_kernels(ks: &KernelSet, d: usize, vec4s: bool) -> Vec<KernelId> {
    let info = ks.device().info();
    let mut kernels = vec![KernelId::FlashAttn(Values::F32)];
    if vec4s && d.is_multiple_of(4) {
        kernels.extend(split_kernels(info, d));
    }
    let tile = kernels::AttnTile::for_head_dim(d).expect("a tile for every head size up to 256");
    if tile.shared_bytes() <= info.max_shared_memory {
        kernels.push(KernelId::FlashAttnTiled(tile, Values::F32));
    }
    if let Some(cm) = coop_variant(ks) {
        let tile = kernels::AttnCoop::new(cm, d, info.max_shared_memory);
        assert_eq!(tile.is_some(), d <= 128 && d.is_multiple_of(4), "d={d}: the cooperative-matrix attention");
        kernels.extend(tile.map(|tile| KernelId::FlashAttnCm(tile, Values::F32)));
    }
    kernels
}

/// Runs `case` with `kernel` (the one built for its cache values) on the GPU and the CPU
/// reference; returns the NMSE over the
/// run-time queries, after checking that no later query was written.
fn check_attention(ks: &KernelSet, rng: &mut Rng, case: &AttnCase, kernel: KernelId) -> f64 {
    let AttnCase { d, heads, kv_heads, n_q, n_kv, .. } = *case;
    // The kernel built for the case's cache values.
    let kernel = kernel.with_kv(if case.f16 { Values::F16 } else { Values::F32 });
    let (q_pad, q_off, kv_off) = if case.aligned { (0, 4, 8) } else { (1, 2, 1) };
    let mut q = Strided::new(rng, [d, heads, n_q, 1], q_pad, q_off);
    q.data.iter_mut().for_each(|x| *x *= case.gain);
    let row = d * kv_heads;
    // Causal: the kv rows no query sees are NaN, as a cache's unwritten rows may be (a kernel
    // must not read them, even to multiply them by zero).
    let seen = |r: usize| (0..n_q).any(|t| case.sees(t).contains(&r));
    let cache = |rng: &mut Rng| {
        let mut s = Strided::new(rng, [row, n_kv, 1, 1], 0, kv_off);
        s.ne = [d, kv_heads, n_kv, 1];
        s.nb = [4, 4 * d, 4 * row, 4 * row * n_kv];
        for r in (0..n_kv).filter(|&r| !seen(r)) {
            s.data[kv_off + r * row..][..row].fill(f32::NAN);
        }
        s
    };
    let (k, v) = (cache(rng), cache(rng));
    // Queries (symbol 0) and kv rows (symbol 1) at their run-time lengths.
    let (run_q, run_kv) = case.run.unwrap_or((n_q, n_kv));
    let dynamic = case.run.map(|_| Dyn { axis: 2, sym: 0, num: 1, den: 1 });
    let kv_dyn = case.run.map(|_| Dyn { axis: 2, sym: 1, num: 1, den: 1 });
    let kv_ne = [d, kv_heads, run_kv, 1];
    // An f16 cache: the same values rounded, at the same element offsets and strides.
    let kv_dtype = if case.f16 { DType::F16 } else { DType::F32 };
    let kv_bytes = |s: &Strided| match kv_dtype {
        DType::F16 => s.data.iter().flat_map(|&x| half::f16::from_f32(x).to_le_bytes()).collect(),
        _ => f32_bytes(&s.data),
    };
    let (k_bytes, v_bytes) = (kv_bytes(&k), kv_bytes(&v));
    let size = kv_dtype.block_bytes();
    let kv_operand = |s: &Strided| Operand {
        dtype: kv_dtype,
        offset: s.offset / 4 * size,
        nb: s.nb.map(|b| b / 4 * size),
        dynamic: kv_dyn,
        ..s.operand()
    };
    let out = Strided::new(rng, [d, heads, n_q, 1], 3, 1);
    let op = Op::Attention { scale: 1.0 / (d as f32).sqrt(), segment: case.segment.unwrap_or(n_kv) };
    let mut ops = vec![q.operand(), kv_operand(&k), kv_operand(&v)];
    let spans = case.segment == Some(0);
    let slots_ne = |n: usize| if spans { [2, n, 1, 1] } else { [n, 1, 1, 1] };
    if case.slots.is_some() {
        ops.push(i32_operand(slots_ne(n_q)));
    }
    let out_op = Operand { dynamic, ..out.operand() };
    let launch = kernels::launch(kernel, Ops::single(&op), &ops, &out_op, dynamic).unwrap();
    // The GPU: every planned row bound, the run-time lengths in the sizes buffer.
    let dev = ks.device();
    let mut bufs = vec![upload(dev, &f32_bytes(&q.data), 0), upload(dev, &k_bytes, 0), upload(dev, &v_bytes, 0)];
    if let Some(slots) = &case.slots {
        bufs.push(upload(dev, &slots.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>(), 0));
    }
    let out_buf = dev.buffer((out.data.len() * 4) as u64, Location::Device, "test output").unwrap();
    out_buf.write_f32(0, &vec![f32::NAN; out.data.len()]).unwrap();
    let run_ne = [d, heads, run_q, 1];
    let refs: Vec<_> = bufs.iter().collect();
    run(ks, &launch, &[run_q as u32, run_kv as u32], &refs, &out_buf, run_ne, case.max);
    let store = out_buf.read_f32(0, out.data.len()).unwrap();
    // The CPU reference on the run-time rows.
    let (ko, vo) = (kv_operand(&k), kv_operand(&v));
    let mut views = vec![
        In { ne: run_ne, ..q.input() },
        In { data: Data::Bytes(&k_bytes), dtype: kv_dtype, offset: ko.offset, ne: kv_ne, nb: ko.nb },
        In { data: Data::Bytes(&v_bytes), dtype: kv_dtype, offset: vo.offset, ne: kv_ne, nb: vo.nb },
    ];
    let per_query = if spans { 2 } else { 1 };
    let slot_arg = case.slots.as_ref().map(|s| i32_arg(&s[..per_query * run_q], slots_ne(run_q)));
    views.extend(slot_arg.as_ref().map(|a| a.view));
    let mut want_store = vec![0.0; out.data.len()];
    let mut o = Out { data: &mut want_store, offset: out.offset, ne: run_ne, nb: out.nb };
    execute(&op, &views, &mut o, Kernels::Reference, 1).unwrap();
    let all = out.gather(&store);
    let run_len = d * heads * run_q;
    assert!(
        all[run_len..].iter().all(|x| x.is_nan()),
        "{}: queries past the run-time count were written",
        case.name(kernel)
    );
    let got = &all[..run_len];
    assert!(got.iter().all(|x| x.is_finite()), "{}: an element was not written", case.name(kernel));
    let e = nmse(got, &out.gather(&want_store)[..run_len]);
    eprintln!("{}: nmse {e:.3e}", case.name(kernel));
    // The matrix-unit kernel rounds Q, K, V and P to f16 (1e-7..1e-6 here).
    let tolerance = if matches!(kernel, KernelId::FlashAttnCm(..)) { F16_NMSE } else { MAT_NMSE };
    assert!(e < tolerance, "{}: nmse {e}", case.name(kernel));
    e
}

/// Every attention kernel of the case's head size.
fn check_attention_kernels(ks: &KernelSet, rng: &mut Rng, case: AttnCase) {
    for kernel in attn_kernels(ks, case.d, case.aligned) {
        check_attention(ks, rng, &case, kernel);
    }
}

/// Queries of several sequences in one call, as a batch of decode steps (one query per
/// sequence, each at its own depth), a prompt chunk that ends one sequence and starts the
/// next, prompts prefilled together (some shorter than a tile, some at a depth) and images
/// encoded together (spans) give them: each sees only its own sequence's (image's) rows, and
/// the rows between (NaN) are never read.
#[test]
fn attention_over_several_sequences_in_one_call() {
    let Some(ks) = kernel_set() else { return };
    let mut rng = Rng::new(41);
    let mut decode = |n_seq: usize, segment: usize| -> Vec<i32> {
        (0..n_seq).map(|s| (s * segment) as i32 + (rng.next_u64() % segment as u64) as i32).collect()
    };
    let (five, eight, three) = (decode(5, 100), decode(8, 256), decode(3, 70));
    // The last 20 slots of sequence 0 then the first 20 of sequence 1; a chunk over three.
    let straddle: Vec<i32> = (44..84).collect();
    let three_seqs: Vec<i32> = (10..40).chain(64..80).chain(128 + 50..128 + 64).collect();
    let prompts = [(0, 0, 5), (1, 10, 3), (2, 0, 30), (3, 40, 17), (4, 0, 1), (5, 20, 40)];
    let packed: Vec<i32> = prompts.iter().flat_map(|&(s, from, n)| s * 64 + from..s * 64 + from + n).collect();
    // Sequences shorter than a chunk of kv rows: a chunk that ends a sequence's span has the
    // next sequence's rows in its tail.
    let short: Vec<i32> = (0..5).chain(8..14).chain(16..24).chain(27..30).collect();
    // Images of 24, 4 and 24 patches in one call, each attending over its own.
    let images: Vec<(i32, i32)> = [(0, 24), (24, 28), (28, 52)]
        .iter()
        .flat_map(|&(f, e)| std::iter::repeat_n((f, e), (e - f) as usize))
        .collect();
    let cases = [
        AttnCase::new((64, 4, 2, 5, 500)).segments(100, five),
        AttnCase::new((128, 4, 2, 8, 8 * 256)).segments(256, eight).aligned(),
        AttnCase::new((80, 3, 1, 3, 210)).segments(70, three),
        AttnCase::new((64, 4, 2, 40, 192)).segments(64, straddle.clone()),
        AttnCase::new((128, 2, 1, 40, 128)).segments(64, straddle).aligned(),
        AttnCase::new((64, 2, 2, 60, 192)).segments(64, three_seqs).aligned(),
        AttnCase::new((64, 4, 2, 96, 384)).segments(64, packed.clone()),
        AttnCase::new((128, 2, 1, 96, 384)).segments(64, packed).aligned(),
        AttnCase::new((64, 4, 2, 22, 64)).segments(8, short.clone()),
        AttnCase::new((128, 2, 1, 22, 32)).segments(8, short[..19].iter().copied().chain(24..27).collect()).aligned(),
        AttnCase::new((64, 4, 4, 52, 52)).spans(&images),
        AttnCase::new((128, 2, 2, 52, 52)).spans(&images).aligned(),
    ];
    for case in cases {
        check_attention_kernels(ks, &mut rng, case);
    }
}

#[test]
fn flash_attention_causal_grouped_and_full() {
    let Some(ks) = kernel_set() else { return };
    let mut rng = Rng::new(25);
    let cases = [
        AttnCase::new((64, 4, 2, 5, 150)).random_slots(&mut rng, 150),
        AttnCase::new((128, 2, 1, 1, 70)).random_slots(&mut rng, 70),
        AttnCase::new((40, 3, 3, 9, 9)),
        AttnCase::new((16, 2, 1, 3, 130)),
    ];
    for case in cases {
        check_attention_kernels(ks, &mut rng, case);
    }
}

/// The slots of a prompt chunk of `n_q` tokens ending a sequence of `n_kv` (causal: each sees
/// the rows up to its own).
fn prefill_slots(n_q: usize, n_kv: usize) -> Vec<i32> {
    (0..n_q).map(|t| (n_kv - n_q + t) as i32).collect()
}

/// K and V of f16 values, as a GPU keeps its KV cache (`Registry::cache_dtype`): every kernel
/// reads the same rounded values the reference does, aligned (quads of halves) and at odd
/// offsets and strides (single halves), causal over sequences, decode steps over a long cache,
/// grouped heads, run-time lengths and peaked softmaxes.
#[test]
fn attention_over_an_f16_cache() {
    let Some(ks) = kernel_set() else { return };
    let mut rng = Rng::new(43);
    let cases = [
        AttnCase::new((128, 4, 2, 5, 500)).segments(100, vec![30, 199, 200, 350, 499]).aligned(),
        AttnCase::new((64, 4, 2, 5, 150)).random_slots(&mut rng, 150),
        AttnCase::new((128, 4, 2, 1, 2000)).random_slots(&mut rng, 2000).aligned(),
        AttnCase::new((128, 2, 1, 40, 600)).slots(prefill_slots(40, 600)).aligned().gain(20.0),
        AttnCase::new((64, 2, 2, 64, 900)).run(50, 300).slots(prefill_slots(64, 300)),
        AttnCase::new((40, 3, 3, 9, 9)),
        // Heads of whole quads of halves but not of eights (no 16-byte loads); groups of four
        // heads (a tile of the matrix-unit kernel takes four heads' queries).
        AttnCase::new((36, 4, 2, 70, 130)).slots(prefill_slots(70, 130)).aligned(),
        AttnCase::new((128, 8, 2, 100, 300)).slots(prefill_slots(100, 300)).aligned(),
    ];
    for case in cases {
        check_attention_kernels(ks, &mut rng, case.f16());
    }
}

/// Decode steps over long caches: the split kernel spreads 2,000 and 4,096 rows over its
/// workgroups (and a short one over few), each query its own limit, grouped heads, a clamped
/// grid; the last workgroup of each (head, query) combines the splits, and a replay finds the
/// counters reset.
#[test]
fn split_attention_over_long_caches() {
    let Some(ks) = kernel_set() else { return };
    if ks.device().info().subgroup_kernels().is_none() {
        eprintln!("no subgroup arithmetic: the split attention kernel is not checked");
        return;
    }
    let mut rng = Rng::new(31);
    let cases = [
        AttnCase::new((128, 4, 2, 1, 2000)).random_slots(&mut rng, 2000),
        AttnCase::new((128, 4, 2, 1, 4096)).slots(vec![4095]),
        AttnCase::new((64, 2, 1, 3, 1500)).random_slots(&mut rng, 1500),
        AttnCase::new((128, 2, 2, 1, 4096)).run(1, 300).slots(vec![299]),
        AttnCase::new((256, 2, 1, 2, 700)).random_slots(&mut rng, 700).max([5, 1, 1]),
        AttnCase::new((128, 4, 2, 1, 2000)).random_slots(&mut rng, 2000).gain(30.0),
        // Groups of 4 and of 3 heads.
        AttnCase::new((64, 8, 2, 2, 900)).random_slots(&mut rng, 900),
        AttnCase::new((64, 3, 1, 1, 600)).random_slots(&mut rng, 600),
    ];
    // K and V in whole vec4s, as the kernel takes them (a cache's rows are).
    for case in cases.map(AttnCase::aligned) {
        for kernel in split_kernels(ks.device().info(), case.d) {
            // Twice: the second run starts from the counters the first left.
            check_attention(ks, &mut rng, &case, kernel);
            check_attention(ks, &mut rng, &case, kernel);
        }
    }
}

/// Prompt chunks deep in a long cache, every attention kernel of the head size (the tiled and
/// matrix-unit ones stream thousands of kv rows through each tile), run twice.
#[test]
fn attention_of_a_prompt_chunk_over_a_long_cache() {
    let Some(ks) = kernel_set() else { return };
    let mut rng = Rng::new(33);
    let cases = [
        AttnCase::new((128, 4, 2, 40, 2000)).slots(prefill_slots(40, 2000)).aligned(),
        AttnCase::new((64, 2, 1, 70, 1500)).random_slots(&mut rng, 1500).gain(20.0),
        // Fewer rows at run time than planned: fewer splits, the others skip.
        AttnCase::new((128, 2, 2, 64, 4096)).run(50, 900).slots(prefill_slots(64, 900)).aligned(),
        // Not causal: every query sees every row.
        AttnCase::new((64, 2, 1, 20, 1200)).aligned(),
    ];
    for case in cases {
        for kernel in attn_kernels(ks, case.d, case.aligned) {
            check_attention(ks, &mut rng, &case, kernel);
            check_attention(ks, &mut rng, &case, kernel);
        }
    }
}

#[test]
fn tiled_attention_odd_tiles_heads_and_limits() {
    // Query counts and kv lengths off the tiles (32 x 32 at head_dim 64, 24 x 16 at 128,
    // 8 x 8 at 256), head sizes off the classes (40, 80), grouped and ungrouped heads.
    let Some(ks) = kernel_set() else { return };
    let mut rng = Rng::new(28);
    // A prefill chunk at the end of a cache: query t sees rows 0..=base + t.
    let cases = [
        AttnCase::new((64, 4, 2, 37, 150)).random_slots(&mut rng, 150),
        AttnCase::new((128, 4, 2, 50, 90)).slots(prefill_slots(50, 90)),
        AttnCase::new((64, 2, 1, 70, 70)).slots(prefill_slots(70, 70)),
        // Every query the same limit, one below a tile edge.
        AttnCase::new((80, 3, 1, 30, 77)).slots(vec![31; 30]),
        AttnCase::new((40, 2, 2, 33, 1)).slots(vec![0; 33]),
        AttnCase::new((64, 3, 1, 45, 100)),
        AttnCase::new((128, 2, 2, 25, 17)),
        AttnCase::new((256, 2, 1, 17, 20)).random_slots(&mut rng, 20),
        AttnCase::new((256, 1, 1, 9, 9)),
        AttnCase::new((16, 2, 1, 13, 130)),
        // Scores spanning hundreds: the running maximum moves, rows rescale.
        AttnCase::new((64, 2, 1, 40, 200)).gain(30.0),
        AttnCase::new((128, 2, 1, 30, 100)).slots(prefill_slots(30, 100)).gain(20.0),
        // Operands laid out as a model's (the vec4 loads), several tiles of queries.
        AttnCase::new((128, 4, 2, 150, 150)).slots(prefill_slots(150, 150)).aligned(),
        AttnCase::new((64, 2, 2, 200, 200)).aligned(),
        AttnCase::new((80, 2, 1, 70, 90)).slots(prefill_slots(70, 90)).aligned(),
        // Groups of four and eight heads: the matrix-unit kernel's tiles take four heads.
        AttnCase::new((64, 8, 2, 70, 150)).random_slots(&mut rng, 150),
        AttnCase::new((40, 8, 1, 33, 90)).slots(prefill_slots(33, 90)).gain(20.0),
    ];
    for case in cases {
        check_attention_kernels(ks, &mut rng, case);
    }
}

#[test]
fn tiled_attention_runtime_lengths_and_clamped_grids() {
    // A plan for 70 queries and 100 kv rows replayed with fewer of each (the text prefill's
    // dynamic axes), and grids clamped below the tiles x heads the kernel needs.
    let Some(ks) = kernel_set() else { return };
    let mut rng = Rng::new(29);
    let cases = [
        AttnCase::new((64, 4, 2, 70, 100)).run(45, 60).random_slots(&mut rng, 60),
        AttnCase::new((128, 4, 2, 70, 100)).run(33, 50).random_slots(&mut rng, 50),
        AttnCase::new((64, 4, 4, 70, 100)).run(70, 31),
        AttnCase::new((80, 2, 1, 64, 64)).run(9, 40),
        AttnCase::new((64, 4, 2, 70, 100)).random_slots(&mut rng, 100).max([3, 1, 1]),
        AttnCase::new((128, 3, 1, 50, 40)).max([1, 1, 1]),
        AttnCase::new((64, 4, 2, 70, 100)).run(40, 100).max([5, 1, 1]),
        AttnCase::new((128, 4, 2, 140, 200)).run(100, 160).random_slots(&mut rng, 160).aligned(),
    ];
    for case in cases {
        check_attention_kernels(ks, &mut rng, case);
    }
}

#[test]
fn attention_over_many_queries_plans_the_tiled_kernel() {
    let Some(ks) = kernel_set() else { return };
    let info = ks.device().info();
    let variants = Variants::for_device(info);
    let ops = |d: usize, n_q: usize| {
        let q = Operand::contiguous(DType::F32, [d, 4, n_q, 1], 0);
        let kv = Operand::contiguous(DType::F32, [d, 2, 300, 1], 0);
        (vec![q, kv, kv, i32_operand([n_q, 1, 1, 1])], q)
    };
    let op = Op::Attention { scale: 0.125, segment: 300 };
    for (d, n_q) in [(64, 4096), (128, 512), (80, 8), (128, 7), (64, 1)] {
        let (ins, out) = ops(d, n_q);
        let got = kernels::select(Ops::single(&op), &ins, &out, None, &variants).unwrap();
        let tile = kernels::AttnTile::for_head_dim(d).unwrap();
        let tiled = n_q >= kernels::TILED_MIN_QUERIES
            && variants.tiled_attention
            && tile.shared_bytes() <= info.max_shared_memory;
        // A few queries: kv rows split over workgroups where the device has subgroups of 8 or
        // more lanes.
        let split = variants.subgroup.filter(|&s| s >= kernels::SPLIT_MIN_SUBGROUP);
        let few = n_q < kernels::TILED_MIN_QUERIES && variants.tiled_attention && split.is_some();
        // Many queries on the matrix units where the device has them.
        let coop = variants
            .coop_attention()
            .and_then(|cm| kernels::AttnCoop::new(cm, d, info.max_shared_memory))
            .filter(|_| n_q >= kernels::TILED_MIN_QUERIES);
        let want = match (coop, tiled, few) {
            (Some(tile), _, _) => KernelId::FlashAttnCm(tile, Values::F32),
            (None, true, _) => KernelId::FlashAttnTiled(tile, Values::F32),
            (None, false, true) => match split.and_then(|s| kernels::AttnSplit::for_head(d, s)) {
                Some(split) => KernelId::FlashAttnSplit(split, Values::F32),
                None => KernelId::FlashAttn(Values::F32),
            },
            (None, false, false) => KernelId::FlashAttn(Values::F32),
        };
        assert_eq!(got, want, "d={d} n_q={n_q}");
        // The plan's name (and variant) leads back to the kernel.
        let named = hrx::dispatcher::Kernel {
            subgroup: got.subgroup(),
            shape: got.shape(),
            ..hrx::dispatcher::Kernel::named(got.name())
        };
        assert_eq!(KernelId::from_name(&named), Some(got));
        // Vulkan's guaranteed 16 KiB holds no tile: the one-query kernel.
        assert_eq!(
            kernels::select(Ops::single(&op), &ins, &out, None, &Variants::PORTABLE).unwrap(),
            KernelId::FlashAttn(Values::F32)
        );
    }
    if info.max_shared_memory >= 32768 && variants.tiled_attention {
        let (ins, out) = ops(64, 4096);
        let want = if variants.coop_attention().is_some() { "flash_attn_cm_d64" } else { "flash_attn_tiled_d64" };
        assert_eq!(kernels::select(Ops::single(&op), &ins, &out, None, &variants).unwrap().name(), want);
    }
    // A decode step over K and V off whole vec4s (2 values in): the split kernel refuses them,
    // the one-query kernel takes them.
    let (mut ins, out) = ops(128, 1);
    ins[1].offset = 8;
    let got = kernels::select(Ops::single(&op), &ins, &out, None, &variants).unwrap();
    assert_eq!(got, KernelId::FlashAttn(Values::F32));
}

/// Times attention of `heads` (over `kv_heads`) x `n` queries x `n` kv rows x `d` with every
/// kernel of `d`, causal as a prompt prefill (query t sees rows 0..=t) or not: the tiled kernel
/// over every query, the one-query kernel over the first `slice` (its time grows with the
/// queries; a whole run of it can outlast lavapipe's command-buffer timeout), scaled up.
/// Prints the times, asserts none; checks that the kernels agree on the first `slice`.
fn time_attention(ks: &KernelSet, (d, heads, kv_heads, n): (usize, usize, usize, usize), causal: bool, slice: usize) {
    let dev = ks.device();
    let mut rng = Rng::new(30);
    let slice = slice.min(n);
    let x = |rng: &mut Rng, h: usize| upload(dev, &f32_bytes(&rng.vec(d * h * n)), 0);
    let (q, k, v) = (x(&mut rng, heads), x(&mut rng, kv_heads), x(&mut rng, kv_heads));
    let slots: Vec<i32> = (0..n as i32).collect();
    let slot_buf = upload(dev, &slots.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>(), 0);
    let kv = Operand::contiguous(DType::F32, [d, kv_heads, n, 1], 0);
    let attn = Op::Attention { scale: 1.0 / (d as f32).sqrt(), segment: n };
    let mut outs = Vec::new();
    for kernel in attn_kernels(ks, d, true) {
        let n_q = if kernel == KernelId::FlashAttn(Values::F32) { slice } else { n };
        let ne = [d, heads, n_q, 1];
        let qo = Operand::contiguous(DType::F32, ne, 0);
        let mut ins = vec![qo, kv, kv];
        let mut bufs = vec![&q, &k, &v];
        if causal {
            ins.push(i32_operand([n_q, 1, 1, 1]));
            bufs.push(&slot_buf);
        }
        let launch = kernels::launch(kernel, Ops::single(&attn), &ins, &qo, None).unwrap();
        let out = dev.buffer((d * heads * n_q * 4) as u64, Location::Device, "out").unwrap();
        run(ks, &launch, &[], &bufs, &out, [d, heads, 8, 1], None); // compiled, warm
        let t = std::time::Instant::now();
        run(ks, &launch, &[], &bufs, &out, ne, None);
        let secs = t.elapsed().as_secs_f64();
        // The one-query kernel's time per query grows with its kv rows when causal.
        let work = |m: usize| if causal { (m * (m + 1) / 2) as f64 } else { m as f64 };
        let secs = secs * work(n) / work(n_q);
        let what = if causal { "causal" } else { "full" };
        eprintln!(
            "{:<22} {heads}/{kv_heads} heads x {n} queries x {n} kv rows x d {d} {what}: {secs:.2} s (ran {n_q} queries)",
            kernel.name()
        );
        outs.push(out.read_f32(0, d * heads * slice).unwrap());
    }
    for o in &outs[1..] {
        let e = nmse(o, &outs[0]);
        eprintln!("tiled against one-query over the first {slice} queries: nmse {e:.3e}");
        assert!(e < MAT_NMSE, "nmse {e}");
    }
}

/// Vision-sized attention (16 heads, 4096 queries and kv rows, head_dim 64; HRX_ATTN_N=N for
/// N of each) and a text prefill's (16 over 8 kv heads, 512 queries, head_dim 128, causal).
/// Slow on lavapipe: `cargo test --release --test vulkan_kernels -- --ignored --nocapture`.
#[test]
#[ignore]
fn attention_speed_vision_and_prefill_shapes() {
    let Some(ks) = kernel_set() else { return };
    let n: usize = std::env::var("HRX_ATTN_N").ok().and_then(|v| v.parse().ok()).unwrap_or(4096);
    time_attention(ks, (64, 16, 16, n), false, 256);
    time_attention(ks, (128, 16, 8, 512), true, 512);
}

#[test]
fn layer_norm_odd_rows() {
    let Some(ks) = kernel_set() else { return };
    let mut rng = Rng::new(26);
    for ne in [[1, 1, 1, 1], [7, 3, 1, 1], [300, 5, 2, 1], [1000, 3, 1, 2]] {
        let x = Strided::new(&mut rng, ne, 3, 1);
        let w = Strided::new(&mut rng, [ne[0], 1, 1, 1], 0, 4);
        let b = Strided::new(&mut rng, [ne[0], 1, 1, 1], 0, 2);
        let out = Strided::new(&mut rng, ne, 1, 0);
        let op = Op::LayerNorm { eps: 1e-6 };
        let launch =
            vulkan_common::launch(&op, &[x.operand(), w.operand(), b.operand()], &out.operand(), None).unwrap();
        let e = compare_args(ks, &op, &launch, &[f32_arg(&x), f32_arg(&w), f32_arg(&b)], &out, None, out.ne);
        eprintln!("layer_norm {ne:?}: nmse {e:.3e}");
        assert!(e < ELEM_NMSE, "layer_norm {ne:?}: nmse {e}");
    }
}

#[test]
fn gelu_gelu_erf_and_cont_strided() {
    let Some(ks) = kernel_set() else { return };
    let mut rng = Rng::new(27);
    for op in [Op::Gelu(Gelu::Tanh), Op::Gelu(Gelu::Erf), Op::Cont] {
        for ne in [[1, 1, 1, 1], [13, 7, 3, 2], [1000, 3, 1, 1]] {
            let mut x = Strided::new(&mut rng, ne, 2, 3);
            for v in x.data.iter_mut() {
                *v *= 6.0;
            }
            // A transposed view for CONT: the input walks its second axis fastest.
            if op == Op::Cont {
                x.ne.swap(0, 1);
                x.nb.swap(0, 1);
            }
            let out = Strided::new(&mut rng, x.ne, 0, 0);
            let launch = vulkan_common::launch(&op, &[x.operand()], &out.operand(), None).unwrap();
            let e = compare_args(ks, &op, &launch, &[f32_arg(&x)], &out, None, out.ne);
            eprintln!("{:<10} {:?}: nmse {e:.3e}", launch.kernel.name(), x.ne);
            assert!(e < ELEM_NMSE, "{} {ne:?}: nmse {e}", launch.kernel.name());
        }
    }
}

/// Runs `launch` into a buffer of `n` halves (NaN first) and returns them.
fn run_into_halves(ks: &KernelSet, launch: &Launch, ins: &[&Buffer], n: usize, out_ne: [usize; 4]) -> Vec<half::f16> {
    let out_buf = upload(ks.device(), &nan_halves(n), 0);
    run(ks, launch, &[], ins, &out_buf, out_ne, None);
    let mut bytes = vec![0; 2 * n];
    out_buf.read(0, &mut bytes).unwrap();
    halves(&bytes)
}

/// Runs `launch` into a buffer of `n` floats (NaN first) and returns them.
fn run_into_floats(ks: &KernelSet, launch: &Launch, ins: &[&Buffer], n: usize, out_ne: [usize; 4]) -> Vec<f32> {
    let out_buf = ks.device().buffer((4 * n) as u64, Location::Device, "test output").unwrap();
    out_buf.write_f32(0, &vec![f32::NAN; n]).unwrap();
    run(ks, launch, &[], ins, &out_buf, out_ne, None);
    out_buf.read_f32(0, n).unwrap()
}

/// `o` holding f16 values at the same element offset and strides.
fn as_halves(o: Operand) -> Operand {
    Operand { dtype: DType::F16, offset: o.offset / 2, nb: o.nb.map(|b| b / 2), ..o }
}

/// Activations kept in halves (`Registry::keeps_halves`): the kernels that make them (RMS and
/// layer norms, SwiGLU, GELU, attention on the matrix units) write, in pairs, what they write as f32
/// rounded to f16 (within one step of f16's grid: the conversion's rounding is the
/// implementation's), and nothing past the output's rows; outputs that are no whole pairs
/// along contiguous rows are refused, as are the kernels that write only f32.
#[test]
fn norms_activations_and_attention_write_halves() {
    let Some(ks) = kernel_set() else { return };
    let dev = ks.device();
    let mut rng = Rng::new(41);
    // Rows of 48 values padded to 52, 4 floats in: even offsets and strides in halves.
    let ne = [48, 5, 2, 1];
    let out32 = Strided::new(&mut rng, ne, 4, 4);
    let out16 = as_halves(out32.operand());
    let n = out32.data.len();
    let check = |what: &str, launch32: &Launch, launch16: &Launch, ins: &[&Buffer], out_ne: [usize; 4]| {
        let want = out32.gather(&run_into_floats(ks, launch32, ins, n, out_ne));
        let got = run_into_halves(ks, launch16, ins, n, out_ne);
        let got: Vec<half::f16> = out32
            .gather(&got.iter().map(|h| h.to_f32()).collect::<Vec<f32>>())
            .into_iter()
            .map(half::f16::from_f32)
            .collect();
        assert_eq!(launch16.kernel, launch32.kernel, "{what}: one kernel writes both");
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            assert!(w.is_finite() && rounded_from(*g, *w), "{what}: value {i} is {g}, f32 gives {w}");
        }
        let written = out32.gather(&(0..n).map(|i| i as f32).collect::<Vec<f32>>());
        let all = run_into_halves(ks, launch16, ins, n, out_ne);
        for (i, h) in all.iter().enumerate() {
            assert_eq!(h.is_nan(), !written.contains(&(i as f32)), "{what}: half {i} of the store");
        }
    };
    // RMS norm.
    let x = Strided::new(&mut rng, ne, 3, 1);
    let w = Strided::new(&mut rng, [ne[0], 1, 1, 1], 0, 4);
    let norm = Op::RmsNorm { eps: 1e-6 };
    let (xb, wb) = (upload(dev, &f32_bytes(&x.data), 0), upload(dev, &f32_bytes(&w.data), 0));
    let launch = |out: &Operand| vulkan_common::launch(&norm, &[x.operand(), w.operand()], out, None);
    check("rms_norm", &launch(&out32.operand()).unwrap(), &launch(&out16).unwrap(), &[&xb, &wb], ne);
    // Layer norm (the bias a second row of the weight's).
    let bias = Strided::new(&mut rng, [ne[0], 1, 1, 1], 0, 2);
    let bb = upload(dev, &f32_bytes(&bias.data), 0);
    let layer = Op::LayerNorm { eps: 1e-6 };
    let launch = |out: &Operand| vulkan_common::launch(&layer, &[x.operand(), w.operand(), bias.operand()], out, None);
    check("layer_norm", &launch(&out32.operand()).unwrap(), &launch(&out16).unwrap(), &[&xb, &wb, &bb], ne);
    // GELU, both forms.
    for op in [Op::Gelu(Gelu::Tanh), Op::Gelu(Gelu::Erf)] {
        let launch = |out: &Operand| vulkan_common::launch(&op, &[x.operand()], out, None);
        check(op.name(), &launch(&out32.operand()).unwrap(), &launch(&out16).unwrap(), &[&xb], ne);
    }
    // SwiGLU (and ADD, one kernel).
    let (a, b) = (Strided::new(&mut rng, ne, 2, 3), Strided::new(&mut rng, ne, 1, 0));
    let (ab, bb) = (upload(dev, &f32_bytes(&a.data), 0), upload(dev, &f32_bytes(&b.data), 0));
    for op in [Op::SwiGlu, Op::Add] {
        let launch = |out: &Operand| vulkan_common::launch(&op, &[a.operand(), b.operand()], out, None);
        check(op.name(), &launch(&out32.operand()).unwrap(), &launch(&out16).unwrap(), &[&ab, &bb], ne);
    }
    // Attention on the matrix units: heads of 48 (5 heads over 1 kv head, 2 queries), every kv row.
    let attn = Op::Attention { scale: 0.2, segment: 7 };
    let q = Strided::new(&mut rng, ne, 0, 4);
    let kv = |rng: &mut Rng| Strided::new(rng, [48, 1, 7, 1], 0, 8);
    let (k, v) = (kv(&mut rng), kv(&mut rng));
    let ins = [q.operand(), k.operand(), v.operand()];
    let bufs = [&q, &k, &v].map(|s| upload(dev, &f32_bytes(&s.data), 0));
    let refs: Vec<&Buffer> = bufs.iter().collect();
    if let Some(cm) = coop_variant(ks) {
        let tile = kernels::AttnCoop::new(cm, 48, dev.info().max_shared_memory).unwrap();
        let kernel = KernelId::FlashAttnCm(tile, Values::F32);
        let launch = |out: &Operand| kernels::launch(kernel, Ops::single(&attn), &ins, out, None);
        check(&kernel.name(), &launch(&out32.operand()).unwrap(), &launch(&out16).unwrap(), &refs, ne);
    }
    // The others write f32 only.
    let tile = kernels::AttnTile::for_head_dim(48).unwrap();
    for kernel in [KernelId::FlashAttn(Values::F32), KernelId::FlashAttnTiled(tile, Values::F32)] {
        assert!(kernels::launch(kernel, Ops::single(&attn), &ins, &out16, None).is_err(), "{}", kernel.name());
    }
    // No whole pairs: an odd offset, an odd row stride, an odd row width, a strided row.
    let odd = [
        Operand { offset: out16.offset + 2, ..out16 },
        Operand { nb: [2, 102, 510, 1020], ..out16 },
        Operand { ne: [47, 5, 2, 1], ..out16 },
        Operand { nb: [4, 208, 1040, 2080], ..out16 },
    ];
    for out in odd {
        let x_op = Operand { ne: out.ne, ..x.operand() };
        let a_op = Operand { ne: out.ne, ..a.operand() };
        let w_op = Operand { ne: [out.ne[0], 1, 1, 1], ..w.operand() };
        assert!(vulkan_common::launch(&norm, &[x_op, w_op], &out, None).is_err(), "rms_norm into {out:?}");
        let layer_ins = [x_op, w_op, Operand { ne: w_op.ne, ..bias.operand() }];
        assert!(vulkan_common::launch(&layer, &layer_ins, &out, None).is_err(), "layer_norm into {out:?}");
        assert!(vulkan_common::launch(&Op::Gelu(Gelu::Erf), &[x_op], &out, None).is_err(), "gelu into {out:?}");
        assert!(vulkan_common::launch(&Op::SwiGlu, &[a_op, a_op], &out, None).is_err(), "swiglu into {out:?}");
    }
}

/// The matrix-unit products take x in halves (activations kept so, `Registry::keeps_halves`):
/// they stage x as f16 either way, so a product of x in halves gives exactly what it gives on
/// the same values in f32. x must then lie in whole 16-byte words of its columns; the other
/// kinds, and a product with a folded producer, refuse halves.
#[test]
fn products_of_x_in_halves_are_those_of_the_same_x_in_f32() {
    let Some(ks) = kernel_set() else { return };
    let Some(cm) = coop_variant(ks) else { return };
    let dev = ks.device();
    let mut rng = Rng::new(43);
    let (k, n, cols) = (256, 96, [37, 2, 1]);
    let w_bytes = quantized(&mut rng, DType::Q4K, k, n);
    let w_op = Operand::contiguous(DType::Q4K, [k, n, 1, 1], 0);
    // x's values f16's, in columns padded to 264 values, 8 in.
    let mut x32 = Strided::new(&mut rng, [k, cols[0], cols[1], cols[2]], 8, 8);
    x32.data.iter_mut().for_each(|v| *v = half::f16::from_f32(*v).to_f32());
    let x16 = as_halves(x32.operand());
    let x16_bytes: Vec<u8> = x32.data.iter().flat_map(|&v| half::f16::from_f32(v).to_le_bytes()).collect();
    let out = Strided::new(&mut rng, [n, cols[0], cols[1], cols[2]], 1, 7);
    let (wb, xb32, xb16) =
        (upload(dev, &w_bytes, 0), upload(dev, &f32_bytes(&x32.data), 0), upload(dev, &x16_bytes, 0));
    let out_ne = out.ne;
    let mut kinds = vec![MatKind::Coop(cm), MatKind::CoopLarge(cm)];
    kinds.extend([1, 2].map(|blocks| MatKind::CoopNarrow { cm, blocks }));
    for kind in kinds {
        let from32 = vulkan_common::launch_mat(kind, &w_op, &x32.operand(), &out.operand(), None, None).unwrap();
        let from16 = vulkan_common::launch_mat(kind, &w_op, &x16, &out.operand(), None, None).unwrap();
        assert_eq!(from16.kernel, KernelId::MatMul(kind, WType::Q4K, Values::F16));
        let want = out.gather(&run_into_floats(ks, &from32, &[&wb, &xb32], out.data.len(), out_ne));
        let got = out.gather(&run_into_floats(ks, &from16, &[&wb, &xb16], out.data.len(), out_ne));
        assert!(want.iter().all(|v| v.is_finite()), "{}: an output was not written", from32.kernel.name());
        let same = got.iter().zip(&want).all(|(g, w)| g.to_bits() == w.to_bits());
        assert!(same, "{}: {:?} against {:?}", from16.kernel.name(), &got[..4], &want[..4]);
        // Columns off 16-byte words, an offset off them.
        for x in [Operand { nb: [2, 514, 514 * 37, 514 * 74], ..x16 }, Operand { offset: x16.offset + 8, ..x16 }] {
            assert!(vulkan_common::launch_mat(kind, &w_op, &x, &out.operand(), None, None).is_err(), "{x:?}");
        }
    }
    for kind in [MatKind::Tiled, MatKind::Vec, MatKind::Rows, MatKind::CoopExact(cm)] {
        assert!(vulkan_common::launch_mat(kind, &w_op, &x16, &out.operand(), None, None).is_err(), "{kind:?}");
    }
    let weight = Operand::contiguous(DType::F32, [k, 1, 1, 1], 0);
    let ops = Ops { folded: Some(&Op::RmsNorm { eps: 1e-6 }), ..Ops::single(&Op::MatMul) };
    let kernel = KernelId::MatMul(MatKind::Coop(cm), WType::Q4K, Values::F16);
    assert!(kernels::launch(kernel, ops, &[w_op, x16, weight], &out.operand(), None).is_err(), "a folded norm");
}
