//! `hrx bench --kernels`: every matrix kernel the device has, on every weight shape of a model's
//! products, against the hardware: GB/s of weight bytes for one column (decode), TFLOP/s for
//! many (prefill), beside the copy bandwidth measured in the same run.

use super::CliError;
use crate::backend::vulkan::bench::{copy_bandwidth, time_matmul, MatCase, MatTiming};
use crate::backend::vulkan::kernels::{
    wide_cols, KernelId, KernelSet, MatKind, Values, WType, WIDE_MAX_SUBGROUP, WIDE_ROWS,
};
use crate::backend::{Backend, DeviceChoice};
use crate::dispatcher::CpuRegistry;
use crate::gguf::GgufFile;
use crate::graph::Op;
use crate::json::Json;
use crate::model::{TextParams, VisionParams};
use crate::runtime::text_model::{plan_text, TextOptions};
use crate::runtime::vision_model::plan_vision;
use crate::runtime::RuntimeError;
use std::io::Write;

/// Bytes copied to measure the copy bandwidth: far more than any last-level cache.
const COPY_BYTES: u64 = 1 << 30;

/// Most columns (-p) the vector kernels are timed at too: sequences decoded together.
const BATCH_MAX_COLS: usize = 32;

/// The distinct (weight type, K, N) of every product the model's graphs plan (the text
/// decoder, and the vision encoder with `mmproj`).
fn product_shapes(model: &str, mmproj: Option<&str>) -> Result<Vec<(crate::quant::DType, usize, usize)>, CliError> {
    let file = GgufFile::open(model)?;
    let params = TextParams::from_gguf(&file).map_err(RuntimeError::from)?;
    let mut plans = plan_text(&params, &TextOptions::on(DeviceChoice::Cpu), &CpuRegistry)?;
    if let Some(path) = mmproj {
        let file = GgufFile::open(path)?;
        let vision = VisionParams::from_gguf(&file).map_err(RuntimeError::from)?;
        plans.push(plan_vision(&vision, vision.merge_patches(), &CpuRegistry)?);
    }
    let mut shapes = Vec::new();
    for plan in &plans {
        for node in plan.graph.nodes.iter().filter(|n| n.op == Op::MatMul) {
            let w = plan.graph.value(node.inputs[0]);
            let shape = (w.dtype, w.ne[0], w.ne[1]);
            if !shapes.contains(&shape) {
                shapes.push(shape);
            }
        }
    }
    Ok(shapes)
}

/// `only`: time only the kernels whose name contains it (all with "").
pub fn run(
    model: &str,
    mmproj: Option<&str>,
    columns: usize,
    only: &str,
    device: DeviceChoice,
    json: bool,
    out: &mut dyn Write,
) -> Result<(), CliError> {
    let shapes = product_shapes(model, mmproj)?;
    let Backend::Vulkan(dev) = Backend::open(device, crate::backend::cpu::Kernels::from_env(), false) else {
        return Err(CliError::Failed(
            "bench --kernels times Vulkan kernels: no Vulkan device (see `hrx doctor`; --device N)".into(),
        ));
    };
    let info = dev.info().clone();
    let failed =
        |e: crate::backend::vulkan::VkError| CliError::Failed(format!("bench --kernels on {}: {e}", info.name));
    let ks = KernelSet::new(&dev);
    let (copy, copied) = copy_bandwidth(&dev, &ks, COPY_BYTES).map_err(failed)?;
    // Every kernel the device has: the vector ones for one column and for -p (the columns of a
    // few sequences decoded together), the tiled ones for -p.
    let vec_kinds = |m: usize| {
        let mut kinds = vec![MatKind::Vec];
        if let Some(subgroup) = info.subgroup_kernels() {
            kinds.push(MatKind::VecSg { subgroup });
            if subgroup <= WIDE_MAX_SUBGROUP {
                let cols = wide_cols(m);
                kinds.extend(WIDE_ROWS.map(|rows| MatKind::VecWide { subgroup, rows, cols }));
            }
        }
        kinds
    };
    let mut mat_kinds = vec![MatKind::Tiled];
    if let Some(cm) = info.coopmat_matmul() {
        let narrow = [1, 2].map(|blocks| MatKind::CoopNarrow { cm, blocks });
        mat_kinds.extend(
            [MatKind::Coop(cm), MatKind::CoopLarge(cm)].into_iter().chain(narrow).chain([MatKind::CoopExact(cm)]),
        );
    }
    let mut runs = vec![(1, vec_kinds(1))];
    if (2..=BATCH_MAX_COLS).contains(&columns) {
        runs.push((columns, vec_kinds(columns)));
    }
    runs.push((columns, mat_kinds));
    let mut timings: Vec<MatTiming> = Vec::new();
    for &(dtype, k, n) in &shapes {
        for &(m, ref kinds) in &runs {
            // Each kind with x in f32 values, and in halves where it takes them.
            let xs = |k: MatKind| if k.takes_halves() { &Values::ALL[..] } else { &[Values::F32][..] };
            let named = |k: MatKind, x: Values| {
                WType::from_dtype(dtype).is_some_and(|w| KernelId::MatMul(k, w, x).name().contains(only))
            };
            for &kind in kinds {
                for &x in xs(kind).iter().filter(|&&x| named(kind, x)) {
                    if let Some(t) = time_matmul(&dev, &ks, MatCase { dtype, k, n, m }, kind, x).map_err(failed)? {
                        timings.push(t);
                    }
                }
            }
        }
    }
    if json {
        let rows = timings.iter().map(|t| {
            Json::obj([
                ("kernel", Json::str(&t.kernel)),
                ("dtype", Json::str(t.case.dtype.to_string())),
                ("k", Json::Int(t.case.k as i128)),
                ("n", Json::Int(t.case.n as i128)),
                ("m", Json::Int(t.case.m as i128)),
                ("microseconds", Json::Num(t.seconds * 1e6)),
                ("weight_gb_per_second", Json::Num(t.weight_gbps())),
                ("tflops", Json::Num(t.tflops())),
            ])
        });
        let j = Json::obj([
            ("device", Json::str(&info.name)),
            ("copy_gb_per_second", Json::Num(copy)),
            ("kernels", Json::Arr(rows.collect())),
        ]);
        writeln!(out, "{}", j.to_string_compact())?;
        return Ok(());
    }
    writeln!(out, "device: {} ({})", info.name, info.kind.name())?;
    writeln!(out, "copy bandwidth: {copy:.0} GB/s (read + write, a kernel copying {} MiB)", copied >> 20)?;
    writeln!(
        out,
        "{:<26} {:>6} {:>6} {:>7} {:>5} {:>10} {:>9} {:>7} {:>8}",
        "kernel", "type", "K", "N", "M", "us", "GB/s", "% copy", "TFLOP/s"
    )?;
    for t in &timings {
        writeln!(
            out,
            "{:<26} {:>6} {:>6} {:>7} {:>5} {:>10.2} {:>9.0} {:>6.0}% {:>8.2}",
            t.kernel,
            t.case.dtype.to_string(),
            t.case.k,
            t.case.n,
            t.case.m,
            t.seconds * 1e6,
            t.weight_gbps(),
            100.0 * t.weight_gbps() / copy,
            t.tflops()
        )?;
    }
    Ok(())
}
