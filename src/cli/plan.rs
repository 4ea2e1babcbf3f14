//! `hrx plan`: how the dispatcher plans each graph of a model, with its census.

use super::{CliError, Command};
use crate::cli::args::Args;
use crate::gguf::GgufFile;
use crate::hrx::Plan;
use crate::json::Json;
use crate::backend::vulkan::{Instance, VulkanRegistry};
use crate::backend::DeviceChoice;
use crate::hrx::{CpuRegistry, Registry};
use crate::model::{plan_vision_for, TextParams, VisionParams};
use crate::runtime::text_model::{plan_text, TextOptions};
use std::io::Write;

pub const HELP: &str = "\
hrx plan: show how each graph of a model is planned

usage: hrx plan -m MODEL.gguf [--mmproj MMPROJ.gguf [--image-max-pixels N]] [--ctx N]
                [--device N|cpu|auto] [--json]

Builds the model's graphs (text prefill chunk, text decode step, and the vision
encoder with --mmproj), imports and plans them exactly as a run would, and prints
per graph: nodes, where compute nodes run (cpu/gpu), layout nodes elided as
aliases, external windows skipped (bound from their tensor), refusals, the arena
size, and the census of (device, op) counts. Nothing is executed.

  -m, --model FILE     the text model GGUF
  --mmproj FILE        the vision projector GGUF (its graph is planned for the largest
                       image of the pixel budget, --image-max-pixels, default 1048576)
  --ctx N              context length the KV cache is planned for (default 4096)
  --device D           plan for the Vulkan kernels (auto, the default, when a Vulkan
                       device is present, lavapipe included; N: that device) or for
                       the CPU (cpu); also HRX_DEVICE
  --json               {\"graphs\":[{\"name\",\"nodes\",\"cpu_nodes\",\"gpu_nodes\",\"elided\",
                        \"skipped\",\"refused\",\"arena_bytes\",\"census\":{\"cpu:MUL_MAT\":N,...}}]}

HRX_LOG_DISPATCH=1 also logs every node's placement to standard error.

example: hrx plan -m Qwen3-VL-2B-Instruct-Q4_K_M.gguf --json";

pub const COMMAND: Command = Command { name: "plan", summary: "show the dispatcher's plan and census", help: HELP, run };

fn run(mut args: Args, out: &mut dyn Write) -> Result<(), CliError> {
    let model = args.value(&["-m", "--model"])?.ok_or_else(|| CliError::usage("plan needs -m MODEL.gguf"))?;
    let mmproj = args.value(&["--mmproj"])?;
    let json = args.flag(&["--json"]);
    let max_pixels: usize = args.parsed(&["--image-max-pixels"])?.unwrap_or(crate::image::PreprocessConfig::KIOSK_MAX_PIXELS);
    let mut options = TextOptions::default();
    options.n_ctx = args.parsed(&["--ctx"])?.unwrap_or(options.n_ctx);
    if let Some(d) = args.value(&["--device"])? {
        options.device = DeviceChoice::parse(&d).map_err(CliError::usage)?;
    }
    if !args.finish()?.is_empty() {
        return Err(CliError::usage("plan takes no positional arguments"));
    }
    let (registry, target) = planning_target(options.device);
    if !json {
        writeln!(out, "planned for: {target}")?;
    }
    let file = GgufFile::open(&model)?;
    let params = TextParams::from_gguf(&file).map_err(|e| CliError::Failed(e.to_string()))?;
    let mut plans = plan_text(&params, &options, &*registry).map_err(|e| CliError::Failed(e.to_string()))?;
    if let Some(path) = mmproj {
        let file = GgufFile::open(&path)?;
        let vision = VisionParams::from_gguf(&file).map_err(|e| CliError::Failed(e.to_string()))?;
        let max_patches = max_pixels / (vision.patch_size * vision.patch_size);
        plans.push(plan_vision_for(&vision, max_patches, &*registry).map_err(|e| CliError::Failed(e.to_string()))?);
    }
    let graphs: Vec<Json> = plans.iter().map(plan_json).collect();
    if json {
        writeln!(out, "{}", Json::obj([("graphs", Json::Arr(graphs))]).to_string_compact())?;
    } else {
        for plan in &plans {
            write_text(plan, out)?;
        }
    }
    Ok(())
}

/// The kernel table to plan with: Vulkan's when a Vulkan device is present (planning needs no
/// device, but a plan for kernels nothing can run would mislead), the CPU's otherwise.
fn planning_target(choice: DeviceChoice) -> (Box<dyn Registry>, String) {
    if choice == DeviceChoice::Cpu {
        return (Box::new(CpuRegistry), "cpu (--device cpu)".to_owned());
    }
    let devices = Instance::new().and_then(|i| i.devices());
    match devices {
        Ok(d) if !d.is_empty() => {
            let pick = match choice {
                DeviceChoice::Vulkan(i) => d.iter().find(|x| x.index == i),
                _ => d.iter().max_by_key(|x| x.kind),
            };
            match pick {
                Some(x) => (Box::new(VulkanRegistry::for_device(x)), format!("vulkan kernels (device {}: {})", x.index, x.name)),
                None => (Box::new(VulkanRegistry::PORTABLE), "vulkan kernels (the chosen device does not exist here; portable kernels)".to_owned()),
            }
        }
        Ok(_) => (Box::new(CpuRegistry), "cpu (the Vulkan loader found no device)".to_owned()),
        Err(e) => (Box::new(CpuRegistry), format!("cpu ({e})")),
    }
}

fn plan_json(plan: &Plan) -> Json {
    let c = plan.census();
    let census = c.by_op.iter().map(|((dev, op), n)| (format!("{dev}:{op}"), Json::Int(*n as i128))).collect();
    Json::obj([
        ("name", Json::str(&plan.graph.name)),
        ("nodes", Json::Int(c.nodes as i128)),
        ("cpu_nodes", Json::Int(c.cpu_nodes as i128)),
        ("gpu_nodes", Json::Int(c.gpu_nodes as i128)),
        ("elided", Json::Int(c.elided as i128)),
        ("skipped", Json::Int(c.skipped as i128)),
        ("refused", Json::Int(c.refused as i128)),
        ("bound", Json::Int(c.bound as i128)),
        ("arena_bytes", Json::Int(plan.arena_bytes as i128)),
        ("census", Json::Obj(census)),
    ])
}

fn write_text(plan: &Plan, out: &mut dyn Write) -> std::io::Result<()> {
    let c = plan.census();
    writeln!(out, "graph {}: {} nodes", plan.graph.name, c.nodes)?;
    writeln!(
        out,
        "  compute: {} on gpu, {} on cpu; layout: {} elided, {} skipped, {} refused; {} external inputs",
        c.gpu_nodes, c.cpu_nodes, c.elided, c.skipped, c.refused, c.bound
    )?;
    writeln!(out, "  arena: {} bytes ({:.1} MiB)", plan.arena_bytes, plan.arena_bytes as f64 / (1 << 20) as f64)?;
    writeln!(out, "  census:")?;
    for ((dev, op), n) in &c.by_op {
        writeln!(out, "    {dev:<4} {op:<18} {n}")?;
    }
    Ok(())
}
