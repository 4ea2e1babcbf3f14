//! `hrx plan`: how the dispatcher plans each graph of a model, with its census.

use super::flags::{self, ctx_help, text_options, DeviceFlags, Help, BATCH, IMAGE_MAX_PIXELS, JSON, MMPROJ, MODEL};
use super::{CliError, Command};
use crate::backend::Backend;
use crate::cli::args::Args;
use crate::dispatcher::{Census, Plan, PlanError, Where};
use crate::gguf::GgufFile;
use crate::image::PreprocessConfig;
use crate::json::Json;
use crate::model::{TextParams, VisionParams};
use crate::runtime::text_model::plan_text;
use crate::runtime::vision_model::{plan_vision, planned_patches};
use crate::runtime::RuntimeError;
use std::io::Write;

fn help() -> String {
    let mut options = vec![
        MODEL.help("the text model GGUF"),
        MMPROJ.help(format!(
            "the vision projector GGUF (its graph is planned for the largest image of the pixel budget, --image-max-pixels, default {})",
            PreprocessConfig::KIOSK_MAX_PIXELS
        )),
        IMAGE_MAX_PIXELS.help("the image pixel budget the vision graph is planned for"),
        ctx_help(),
        BATCH.help("also plan the batched decode steps of up to N sequences (a text-batch graph for 2, 4, 8, ... below N and for N: a token of each, in a KV cache of N x --ctx slots; a step runs the smallest that holds its sequences), as `hrx caption --batch N` runs it (default 1: no batched graph)"),
    ];
    options.extend(DeviceFlags::help());
    options.push(JSON.help(
        "{\"graphs\":[{\"name\",\"nodes\",\"cpu_nodes\",\"gpu_nodes\",\"fused\",\"elided\",\"skipped\",\"refused\",\"bound\",\
         \"dispatches\",\"arena_bytes\",\"census\":{\"gpu:MUL_MAT\":N,...},\"kernels\":{\"gpu:mul_mat_vec_sg_q4_k\":N,...}}]}",
    ));
    Help {
        title: "hrx plan: show how each graph of a model is planned",
        usage: "hrx plan -m MODEL.gguf [--mmproj MMPROJ.gguf [--image-max-pixels N]] [--ctx N] [--batch N] [--device D] [--json]",
        about: "Builds the model's graphs (text prefill chunk, text decode step, with --batch the\n\
                batched decode step, and the vision encoder with --mmproj), imports and plans them\n\
                exactly as a run on the same device would, and prints per graph: nodes, where compute\n\
                nodes run (cpu/gpu), nodes fused into another's dispatch, layout nodes elided as\n\
                aliases, external windows skipped (bound from their tensor), refusals, the arena size,\n\
                the census of (device, op) counts, and every kernel the executor records with its\n\
                dispatches per run: the device's variants, fused pairs as `kernel (OP+OP)`, products\n\
                split over row ranges. Nothing is executed. Exit code 1 when a graph is refused (its\n\
                refusals are listed).",
        options,
        footer: "HRX_LOG_DISPATCH=1 also logs every node's placement to standard error.\n\
                 \n\
                 example: hrx plan -m Qwen3-VL-2B-Instruct-Q4_K_M.gguf --json",
    }
    .render()
}

pub const COMMAND: Command = Command { name: "plan", summary: "show the dispatcher's plan and census", help, run };

fn run(mut args: Args, out: &mut dyn Write) -> Result<(), CliError> {
    let model = MODEL.string(&mut args)?.ok_or_else(|| CliError::usage("plan needs -m MODEL.gguf"))?;
    let mmproj = MMPROJ.string(&mut args)?;
    let json = JSON.present(&mut args);
    let max_pixels: usize = IMAGE_MAX_PIXELS.parse(&mut args)?.unwrap_or(PreprocessConfig::KIOSK_MAX_PIXELS);
    let placement = DeviceFlags::parse(&mut args)?;
    let options = text_options(&mut args, &placement)?;
    let options = options.with_sequences(flags::sequences(&mut args, &BATCH)?.unwrap_or(1));
    if !args.finish()?.is_empty() {
        return Err(CliError::usage("plan takes no positional arguments"));
    }
    // The backend a run would use, opened the same way: its registry names what would run.
    let backend = Backend::open(options.device, options.kernels, options.check);
    let registry = backend.registry();
    if !json {
        writeln!(out, "planned for: {}", backend.describe())?;
    }
    let file = GgufFile::open(&model)?;
    let params = TextParams::from_gguf(&file).map_err(RuntimeError::from)?;
    let mut plans = vec![plan_text(&params, &options, &*registry)];
    if let Some(path) = mmproj {
        let file = GgufFile::open(&path)?;
        let vision = VisionParams::from_gguf(&file).map_err(RuntimeError::from)?;
        let max_patches = planned_patches(&vision, max_pixels / (vision.patch_size * vision.patch_size), &*registry)?;
        plans.push(plan_vision(&vision, max_patches, &*registry).map(|p| vec![p]));
    }
    let mut refused = None;
    let mut graphs = Vec::new();
    for result in plans {
        match result {
            Ok(ps) => graphs.extend(ps.iter().map(|p| Graph::Planned(p.clone()))),
            Err(RuntimeError::Plan(e)) => {
                graphs.push(Graph::Refused(e.clone()));
                refused.get_or_insert(e);
            }
            Err(e) => return Err(e.into()),
        }
    }
    if json {
        writeln!(
            out,
            "{}",
            Json::obj([("graphs", Json::Arr(graphs.iter().map(Graph::json).collect()))]).to_string_compact()
        )?;
    } else {
        for g in &graphs {
            g.write_text(out)?;
        }
    }
    match refused {
        Some(e) => Err(RuntimeError::Plan(e).into()),
        None => Ok(()),
    }
}

/// A graph planned, or refused with the census of how far it got.
enum Graph {
    Planned(Plan),
    Refused(PlanError),
}

impl Graph {
    fn name(&self) -> &str {
        match self {
            Graph::Planned(p) => &p.graph.name,
            Graph::Refused(e) => &e.graph,
        }
    }

    fn census(&self) -> Census {
        match self {
            Graph::Planned(p) => p.census(),
            Graph::Refused(e) => (*e.census).clone(),
        }
    }

    fn json(&self) -> Json {
        let c = self.census();
        let count = |n: usize| Json::Int(n as i128);
        fn table<K: std::fmt::Display>(m: &std::collections::BTreeMap<(Where, K), usize>) -> Json {
            Json::Obj(
                m.iter().map(|((dev, name), n)| (format!("{}:{name}", dev.name()), Json::Int(*n as i128))).collect(),
            )
        }
        let arena = match self {
            Graph::Planned(p) => count(p.arena_bytes),
            Graph::Refused(_) => Json::Null,
        };
        Json::obj([
            ("name", Json::str(self.name())),
            ("nodes", count(c.nodes)),
            ("cpu_nodes", count(c.cpu_nodes)),
            ("gpu_nodes", count(c.gpu_nodes)),
            ("fused", count(c.fused)),
            ("elided", count(c.elided)),
            ("skipped", count(c.skipped)),
            ("refused", count(c.refused)),
            ("bound", count(c.bound)),
            ("dispatches", count(c.dispatches)),
            ("arena_bytes", arena),
            ("census", table(&c.by_op)),
            ("kernels", table(&c.by_kernel)),
        ])
    }

    fn write_text(&self, out: &mut dyn Write) -> std::io::Result<()> {
        let c = self.census();
        writeln!(out, "graph {}: {} nodes", self.name(), c.nodes)?;
        writeln!(
            out,
            "  compute: {} on gpu, {} on cpu ({} fused into another node's dispatch); layout: {} elided, {} skipped, {} refused; {} external inputs",
            c.gpu_nodes, c.cpu_nodes, c.fused, c.elided, c.skipped, c.refused, c.bound
        )?;
        match self {
            Graph::Planned(p) => {
                writeln!(out, "  arena: {} bytes ({:.1} MiB)", p.arena_bytes, p.arena_bytes as f64 / (1 << 20) as f64)?
            }
            Graph::Refused(e) => {
                for (_, message) in &e.refusals {
                    writeln!(out, "  refused: {message}")?;
                }
            }
        }
        writeln!(out, "  census:")?;
        for ((dev, op), n) in &c.by_op {
            writeln!(out, "    {:<4} {op:<18} {n}", dev.name())?;
        }
        writeln!(out, "  dispatches per run: {}", c.dispatches)?;
        for ((dev, kernel), n) in &c.by_kernel {
            writeln!(out, "    {:<4} {kernel:<40} {n}", dev.name())?;
        }
        Ok(())
    }
}
