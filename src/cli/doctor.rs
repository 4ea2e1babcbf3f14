//! `hrx doctor [--json]`: the Vulkan devices this machine offers, what each can do that hrx
//! cares about, and which one hrx would use. Exit code 1 when there is no loader or no device.

use super::flags::CHECK;
use super::{CliError, Command};

mod check;
use crate::backend::vulkan::kernels::{AttnCoop, AttnTile, Variants, TILED_MIN_QUERIES};
use crate::backend::vulkan::{DeviceInfo, Instance, VkError, VulkanRegistry};
use crate::backend::DeviceChoice;
use crate::cli::args::Args;
use crate::dispatcher::Registry;
use crate::json::Json;
use crate::settings::settings;
use std::io::Write;

pub const HELP: &str = "\
hrx doctor: show the Vulkan devices and which one hrx would use

usage: hrx doctor [--json]
       hrx doctor --check [-m MODEL.gguf --mmproj MMPROJ.gguf] [--device D] [--batch N] [--ctx N] [--image-max-pixels N]

For each device: name, type, vendor and device ids, Vulkan API version, driver name,
info and version; memory heaps (size, device-local, host-visible, host-cached); subgroup size and
operations, and whether the matrix-vector kernels use them (HRX_VK_NO_SUBGROUP=1 keeps
the portable ones); which matrix-matrix kernel the prefill and vision products use: the
portable f32 tiles (mul_mat), or on devices with cooperative matrices (Vulkan 1.3, f16 x
f16 -> f32 at subgroup scope: the shapes listed and the one used; HRX_VK_NO_COOPMAT=1
keeps the tiles) the matrix units with f16 operands and f32 sums (mul_mat_cm), with
HRX_VK_EXACT=1 f32-exact ones (mul_mat_cm_exact, split operands, slower); whether the
activations only those products read are kept in f16 (HRX_VK_F32_ACTIVATIONS=1 keeps f32);
which heads the query-tiled attention kernel takes for many queries (those whose tile fits
the shared memory; HRX_VK_NO_TILED_ATTN=1 keeps the one-query kernel everywhere); the
KV cache's values (f16, half the memory of f32; HRX_VK_KV_F32=1 or HRX_VK_EXACT=1: f32);
shared memory, workgroup and push-constant limits; the optional features hrx may use
(fp16 / int8 arithmetic and storage, subgroup size control, integer dot products,
cooperative matrices); whether dispatches can be timed (HRX_VK_PROFILE=1: timestamps on
the compute queue). Then what every command would run on, resolved as they resolve it
(HRX_DEVICE, else auto): auto picks discrete > integrated > virtual > CPU, then the most
device-local memory, and when the pick is a CPU implementation (lavapipe) hrx's own CPU
backend instead (faster there); HRX_DEVICE=N (an index below) names a device, lavapipe
included, and HRX_DEVICE=cpu the CPU backend.

Exit code 1 (with the reason) when no Vulkan loader or no device is found, or when
HRX_DEVICE names none; hrx then runs on the CPU backend only.

--check runs hrx's self-check on the device a run would use (--device, else HRX_DEVICE, else
auto), all of it again: the subgroup probe (do subgroups run as many lanes as the driver
reports?) at each size hrx's subgroup kernels take, then every kernel variant the model's
plans dispatch (its prefill, decode, with --batch its batched decode, and its vision encoder;
the default model of models.toml without -m), each once on small inputs of its kind at the
model's own row widths, against hrx's CPU kernels. What fails is left out and the plans are
made again (the next kernel of the op, or the CPU for the model where none is left), and that
is checked too. One line per check: ok with its normalized error and time, FAILED with why,
or unchecked (the check could not be made; the kernel is used). What it found is kept beside
the pipeline cache, as a first start's check is (describe, caption and serve run that check
on a device, driver and hrx build not seen before; --no-check or models.toml's
self_check = false skip it). Kernels run only at subgroup sizes a test ran (4, 8, 16, 32:
32 required wherever the device allows it, as on AMD's RDNA, whose wave64 no test ran). Exit
code 1 naming each failure with the device and driver.

  --json   one JSON object: {\"loader_version\",\"devices\":[...],\"selected\":INDEX|null,
           \"backend\":\"vulkan\"|\"cpu\",\"error\":MSG|null}

examples: HRX_DEVICE=1 hrx doctor
          hrx doctor --check -m Qwen3VL-2B-Instruct-Q4_K_M.gguf --mmproj mmproj-Qwen3VL-2B-Instruct-F16.gguf";

pub const COMMAND: Command =
    Command { name: "doctor", summary: "show Vulkan devices and the one hrx would use", help: || HELP.to_owned(), run };

fn run(mut args: Args, out: &mut dyn Write) -> Result<(), CliError> {
    let json = args.flag(&["--json"]);
    if CHECK.present(&mut args) {
        if json {
            return Err(CliError::usage("--check prints its findings as text; --json goes without it"));
        }
        return check::run(args, out);
    }
    let rest = args.finish()?;
    if !rest.is_empty() {
        return Err(CliError::usage("doctor takes no arguments"));
    }
    let report = Report::gather();
    if json {
        writeln!(out, "{}", report.json().to_string_compact())?;
    } else {
        report.write_text(out)?;
    }
    match report.error {
        Some(e) => Err(CliError::Failed(e.to_string())),
        None => Ok(()),
    }
}

/// Why doctor found nothing to use.
#[derive(Debug)]
enum Problem {
    /// No loader, no device, or the chosen one is not usable.
    Vulkan(VkError),
    /// `HRX_DEVICE` is not a device choice.
    Choice(String),
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Problem::Vulkan(e) => write!(f, "{e}"),
            Problem::Choice(m) => f.write_str(m),
        }
    }
}

struct Report {
    loader_version: Option<String>,
    devices: Vec<DeviceInfo>,
    /// The choice in force (`HRX_DEVICE`, else auto) and what it resolves to, exactly as the
    /// other commands resolve it: the device's index, or None for hrx's CPU backend.
    choice: Option<DeviceChoice>,
    selected: Option<usize>,
    error: Option<Problem>,
}

impl Report {
    fn gather() -> Report {
        // The choice first: HRX_DEVICE=cpu is the CPU backend whatever Vulkan offers.
        let (choice, choice_error) = match DeviceChoice::resolve(None) {
            Ok(c) => (Some(c), None),
            Err(e) => (None, Some(Problem::Choice(e))),
        };
        let mut r = Report { loader_version: None, devices: Vec::new(), choice, selected: None, error: None };
        let instance = match Instance::new() {
            Ok(i) => i,
            Err(e) => {
                r.error = Some(Problem::Vulkan(e));
                return r;
            }
        };
        r.loader_version = Some(instance.loader_version_str());
        match instance.devices() {
            Ok(d) => r.devices = d,
            Err(e) => {
                r.error = Some(Problem::Vulkan(e));
                return r;
            }
        }
        let Some(choice) = choice else {
            r.error = choice_error;
            return r;
        };
        match choice.pick(&r.devices) {
            Ok(i) => r.selected = i.map(|i| r.devices[i].index),
            Err(e) => r.error = Some(Problem::Vulkan(e)),
        }
        r
    }

    fn write_text(&self, out: &mut dyn Write) -> std::io::Result<()> {
        match (&self.loader_version, &self.error) {
            (Some(v), _) => writeln!(out, "Vulkan loader: version {v}, {} device(s)", self.devices.len())?,
            (None, Some(Problem::Vulkan(VkError::NoLoader(_)))) => writeln!(out, "Vulkan loader: not found")?,
            (None, _) => writeln!(out, "Vulkan loader: found, but no instance could be made")?,
        }
        for d in &self.devices {
            let mark = if self.selected == Some(d.index) { "   <- hrx uses this one" } else { "" };
            writeln!(out, "\n[{}] {}{mark}", d.index, d.name)?;
            writeln!(
                out,
                "    type            {} (vendor 0x{:04x}, device 0x{:04x})",
                d.kind.name(),
                d.vendor_id,
                d.device_id
            )?;
            writeln!(out, "    Vulkan API      {}", d.api_version_str())?;
            let driver = [d.driver_name.as_deref(), d.driver_info.as_deref()]
                .into_iter()
                .flatten()
                .collect::<Vec<_>>()
                .join(", ");
            writeln!(
                out,
                "    driver          {} (version {})",
                if driver.is_empty() { "?" } else { &driver },
                d.driver_version
            )?;
            for (i, h) in d.heaps.iter().enumerate() {
                let flags = [
                    (h.device_local, "device-local"),
                    (h.host_visible, "host-visible"),
                    (h.host_cached, "host-cached"),
                ]
                .iter()
                .filter(|(on, _)| *on)
                .map(|(_, n)| *n)
                .collect::<Vec<_>>()
                .join(", ");
                writeln!(
                    out,
                    "    memory heap {i}   {} {}",
                    bytes(h.size),
                    if flags.is_empty() { "(host)".into() } else { format!("({flags})") }
                )?;
            }
            let unified = if d.unified_memory {
                "yes: buffers are written in place"
            } else {
                "no: uploads go through staging copies"
            };
            writeln!(out, "    unified memory  {unified}")?;
            let ops = if d.subgroup_ops.is_empty() { "unknown".to_owned() } else { d.subgroup_ops.join(" ") };
            let variants = Variants::for_device(d);
            let required = if d.pins_subgroups() { ", required" } else { "" };
            let matvec = match (d.subgroup_kernels(), variants.subgroup) {
                (_, Some(s)) => format!(
                    "subgroup ones on subgroups of {s}{required} (mul_mat_vec_wide, mul_mat_vec_sg, flash_attn_split)"
                ),
                (Some(_), None) => "portable (mul_mat_vec; subgroup ones off: HRX_VK_NO_SUBGROUP=1)".to_owned(),
                (None, None) => format!(
                    "portable (mul_mat_vec: no size among those tested, {:?}, runs here)",
                    crate::backend::vulkan::TESTED_SUBGROUP_SIZES
                ),
            };
            let stage = if d.subgroup_in_compute { "" } else { " (not in compute shaders)" };
            writeln!(
                out,
                "    subgroups       size {} ({} to {} where required), ops: {ops}{stage}; matrix-vector kernels: {matvec}",
                d.subgroup_size, d.subgroup_sizes.0, d.subgroup_sizes.1
            )?;
            let matmat = match (d.coopmat_matmul(), variants.coopmat, variants.exact) {
                (_, Some(cm), false) => format!(
                    "cooperative matrices {} on subgroups of {}, f16 operands, f32 sums (mul_mat_cm, mul_mat_cm_large for many rows and columns, for a few columns mul_mat_cm_narrow, flash_attn_cm; HRX_VK_EXACT=1: f32-exact mul_mat_cm_exact; HRX_VK_NO_COOPMAT=1: f32 tiles)",
                    cm.shape, cm.subgroup
                ),
                (_, Some(cm), true) => format!(
                    "cooperative matrices {} on subgroups of {}, f32-exact split operands (mul_mat_cm_exact, HRX_VK_EXACT=1)",
                    cm.shape, cm.subgroup
                ),
                (Some(cm), None, _) => {
                    format!("portable f32 tiles (mul_mat, HRX_VK_NO_COOPMAT=1; cooperative matrices {} without it)", cm.shape)
                }
                (None, None, _) => "portable f32 tiles (mul_mat)".to_owned(),
            };
            writeln!(out, "    matrix-matrix   {matmat}")?;
            let activations = if variants.half_activations {
                "f16 where only matrix-unit products read them, as x (they stage x as f16 anyway; HRX_VK_F32_ACTIVATIONS=1: f32)"
            } else {
                "f32"
            };
            writeln!(out, "    activations     {activations}")?;
            let fits: Vec<String> = AttnTile::ALL
                .into_iter()
                .filter(|t| t.shared_bytes() <= variants.shared_memory)
                .map(|t| format!("head_dim <= {}", t.max_head_dim()))
                .collect();
            let attention = if !variants.tiled_attention {
                "one query per workgroup (flash_attn; query tiles off: HRX_VK_NO_TILED_ATTN=1)".to_owned()
            } else if let Some(cm) = variants.coop_attention() {
                let cm_fits: Vec<String> = [64, 128]
                    .into_iter()
                    .filter(|&d| AttnCoop::new(cm, d, variants.shared_memory).is_some())
                    .map(|d| format!("head_dim <= {d}"))
                    .collect();
                format!(
                    "on the matrix units (flash_attn_cm) for {TILED_MIN_QUERIES}+ queries, {}; else query tiles (flash_attn_tiled) where one fits, else flash_attn",
                    cm_fits.join(", ")
                )
            } else if fits.is_empty() {
                "one query per workgroup (flash_attn): no flash_attn_tiled tile fits the shared memory".to_owned()
            } else {
                format!(
                    "query tiles (flash_attn_tiled) for {TILED_MIN_QUERIES}+ queries, {}; else flash_attn",
                    fits.join(", ")
                )
            };
            writeln!(out, "    attention       {attention}")?;
            let cache = VulkanRegistry::for_device(d).cache_dtype().name().to_lowercase();
            writeln!(
                out,
                "    KV cache        {cache} values (f16 by default, f32 with HRX_VK_KV_F32=1 or HRX_VK_EXACT=1)"
            )?;
            writeln!(
                out,
                "    limits          shared memory {}, workgroup {} invocations, push constants {} B, storage buffer range {}",
                bytes(u64::from(d.max_shared_memory)),
                d.max_workgroup_invocations,
                d.max_push_constants,
                bytes(u64::from(d.max_storage_buffer_range))
            )?;
            let f = &d.features;
            let yn = |b: bool| if b { "yes" } else { "no" };
            writeln!(
                out,
                "    arithmetic      fp16 {}, int8 {}, int16 {}, int64 {}",
                yn(f.float16),
                yn(f.int8),
                yn(f.int16),
                yn(f.int64)
            )?;
            writeln!(out, "    storage         16-bit {}, 8-bit {}", yn(f.storage_16bit), yn(f.storage_8bit))?;
            writeln!(
                out,
                "    extensions      cooperative matrix {} (f16 shapes: {}), integer dot product {}, subgroup size control {} (full subgroups {}), memory model {}",
                yn(f.cooperative_matrix),
                shapes(&f.coopmat_f16_shapes),
                yn(f.integer_dot_product),
                yn(f.subgroup_size_control),
                yn(f.full_subgroups),
                yn(f.memory_model)
            )?;
            if d.can_time() {
                writeln!(
                    out,
                    "    timestamps      {} valid bits, {} ns per tick (HRX_VK_PROFILE=1 times dispatches)",
                    d.timestamp_bits, d.timestamp_period
                )?;
            } else {
                writeln!(
                    out,
                    "    timestamps      none on the compute queue (HRX_VK_PROFILE=1 cannot time dispatches)"
                )?;
            }
            if d.compute_queue_family.is_none() {
                writeln!(out, "    (no compute queue: hrx cannot use this device)")?;
            }
        }
        writeln!(out)?;
        if let Some(e) = &self.error {
            writeln!(out, "no usable Vulkan device: {e}")?;
        }
        match (self.selected, &self.error, self.choice) {
            (Some(i), _, _) => {
                let name = self.devices.iter().find(|d| d.index == i).map_or("", |d| d.name.as_str());
                writeln!(
                    out,
                    "hrx would use device {i}: {name} (--device N, --device cpu or HRX_DEVICE to choose another)"
                )
            }
            (None, _, Some(DeviceChoice::Cpu)) => writeln!(out, "hrx would use its CPU backend (HRX_DEVICE=cpu)"),
            (None, None, _) => writeln!(
                out,
                "hrx would use its CPU backend: the only Vulkan device is a CPU implementation, slower than hrx's own \
                 (--device N runs on device N)"
            ),
            (None, Some(_), _) => writeln!(out, "hrx would run on the CPU backend only"),
        }?;
        let set = settings();
        let shown: Vec<String> = crate::settings::ALL
            .iter()
            .filter_map(|v| set.shown(v).map(|value| format!("{}={value}", v.name)))
            .collect();
        if shown.is_empty() {
            writeln!(out, "settings: no HRX_* variable set (`hrx help env` lists them and their defaults)")?;
        } else {
            writeln!(out, "settings: {} (`hrx help env` lists every variable)", shown.join(", "))?;
        }
        for refused in &set.refused {
            writeln!(out, "settings: {refused}")?;
        }
        Ok(())
    }

    fn json(&self) -> Json {
        let opt = |s: &Option<String>| s.as_ref().map_or(Json::Null, Json::str);
        let devices = self
            .devices
            .iter()
            .map(|d| {
                let f = &d.features;
                Json::obj([
                    ("index", Json::Int(d.index as i128)),
                    ("name", Json::str(&d.name)),
                    ("type", Json::str(d.kind.name())),
                    ("vendor_id", Json::Int(d.vendor_id.into())),
                    ("device_id", Json::Int(d.device_id.into())),
                    ("api_version", Json::str(d.api_version_str())),
                    ("driver_name", opt(&d.driver_name)),
                    ("driver_info", opt(&d.driver_info)),
                    ("driver_version", Json::str(&d.driver_version)),
                    (
                        "heaps",
                        Json::Arr(
                            d.heaps
                                .iter()
                                .map(|h| {
                                    Json::obj([
                                        ("size", Json::Int(h.size.into())),
                                        ("device_local", Json::Bool(h.device_local)),
                                        ("host_visible", Json::Bool(h.host_visible)),
                                    ])
                                })
                                .collect(),
                        ),
                    ),
                    ("unified_memory", Json::Bool(d.unified_memory)),
                    ("subgroup_size", Json::Int(d.subgroup_size.into())),
                    (
                        "subgroup_sizes",
                        Json::Arr(vec![Json::Int(d.subgroup_sizes.0.into()), Json::Int(d.subgroup_sizes.1.into())]),
                    ),
                    ("subgroup_ops", Json::Arr(d.subgroup_ops.iter().map(|s| Json::str(*s)).collect())),
                    ("subgroup_in_compute", Json::Bool(d.subgroup_in_compute)),
                    ("subgroup_kernels", d.subgroup_kernels().map_or(Json::Null, |s| Json::Int(s.into()))),
                    ("subgroups_required", Json::Bool(d.pins_subgroups())),
                    ("coopmat_matmul", d.coopmat_matmul().map_or(Json::Null, |cm| Json::str(cm.shape.to_string()))),
                    ("max_shared_memory", Json::Int(d.max_shared_memory.into())),
                    ("max_workgroup_invocations", Json::Int(d.max_workgroup_invocations.into())),
                    ("max_push_constants", Json::Int(d.max_push_constants.into())),
                    ("max_storage_buffer_range", Json::Int(d.max_storage_buffer_range.into())),
                    (
                        "features",
                        Json::obj([
                            ("float16", Json::Bool(f.float16)),
                            ("int8", Json::Bool(f.int8)),
                            ("int16", Json::Bool(f.int16)),
                            ("int64", Json::Bool(f.int64)),
                            ("storage_16bit", Json::Bool(f.storage_16bit)),
                            ("storage_8bit", Json::Bool(f.storage_8bit)),
                            ("cooperative_matrix", Json::Bool(f.cooperative_matrix)),
                            (
                                "coopmat_f16_shapes",
                                Json::Arr(f.coopmat_f16_shapes.iter().map(|s| Json::str(s.to_string())).collect()),
                            ),
                            ("memory_model", Json::Bool(f.memory_model)),
                            ("full_subgroups", Json::Bool(f.full_subgroups)),
                            ("integer_dot_product", Json::Bool(f.integer_dot_product)),
                            ("subgroup_size_control", Json::Bool(f.subgroup_size_control)),
                        ]),
                    ),
                    ("compute_queue", Json::Bool(d.compute_queue_family.is_some())),
                    ("timestamp_bits", Json::Int(d.timestamp_bits.into())),
                    ("timestamp_period_ns", Json::Num(f64::from(d.timestamp_period))),
                ])
            })
            .collect();
        Json::obj([
            ("loader_version", opt(&self.loader_version)),
            ("devices", Json::Arr(devices)),
            ("selected", self.selected.map_or(Json::Null, |i| Json::Int(i as i128))),
            ("backend", Json::str(if self.selected.is_some() { "vulkan" } else { "cpu" })),
            ("error", self.error.as_ref().map_or(Json::Null, |e| Json::str(e.to_string()))),
            (
                "settings",
                Json::obj(
                    crate::settings::ALL
                        .iter()
                        .filter_map(|v| settings().shown(v).map(|value| (v.name, Json::str(value)))),
                ),
            ),
        ])
    }
}

/// "2.00 GiB"
fn bytes(n: u64) -> String {
    const UNITS: [&str; 4] = ["B", "KiB", "MiB", "GiB"];
    let mut v = n as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{n} B")
    } else {
        format!("{v:.2} {}", UNITS[u])
    }
}

/// "16x16x16 16x8x16", or "none".
fn shapes(list: &[crate::backend::vulkan::CoopShape]) -> String {
    if list.is_empty() {
        return "none".to_owned();
    }
    list.iter().map(ToString::to_string).collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    #[test]
    fn byte_sizes_read_well() {
        assert_eq!(super::bytes(128), "128 B");
        assert_eq!(super::bytes(32768), "32.00 KiB");
        assert_eq!(super::bytes(2 << 30), "2.00 GiB");
        assert_eq!(super::bytes(143_771 << 20), "140.40 GiB");
    }
}
