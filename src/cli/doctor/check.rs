//! `hrx doctor --check`: hrx's self-check on this machine's GPU, all of it, shown: the subgroup
//! probe and every kernel variant a model's plans dispatch, each against the CPU, then the
//! plans again without what failed, until what hrx would run passed. Its findings go into the
//! device's record, as a first start's do.

use crate::backend::vulkan::selfcheck::{Checked, Verdict};
use crate::backend::Backend;
use crate::cli::args::Args;
use crate::cli::flags::{self, text_options, DeviceFlags, BATCH, IMAGE_MAX_PIXELS, MMPROJ, MODEL, NO_CHECK};
use crate::cli::CliError;
use crate::gguf::GgufFile;
use crate::image::PreprocessConfig;
use crate::model::{TextParams, VisionParams};
use crate::runtime::loader::settle;
use crate::runtime::text_model::plan_text;
use crate::runtime::vision_model::{plan_vision, planned_patches};
use crate::runtime::RuntimeError;
use std::io::Write;

pub fn run(mut args: Args, out: &mut dyn Write) -> Result<(), CliError> {
    if NO_CHECK.present(&mut args) {
        return Err(CliError::usage("--no-check cannot go with --check"));
    }
    let model = MODEL.string(&mut args)?;
    let mmproj = MMPROJ.string(&mut args)?;
    let max_pixels: usize = IMAGE_MAX_PIXELS.parse(&mut args)?.unwrap_or(PreprocessConfig::KIOSK_MAX_PIXELS);
    let placement = DeviceFlags::parse(&mut args)?;
    if placement.threads.is_some() {
        return Err(CliError::usage("--threads: doctor --check's CPU side uses every core"));
    }
    let options = text_options(&mut args, &placement)?;
    let options = options.with_sequences(flags::sequences(&mut args, &BATCH)?.unwrap_or(1));
    if !args.finish()?.is_empty() {
        return Err(CliError::usage("doctor --check takes no positional arguments"));
    }
    let (model, mmproj) = crate::cli::describe::model_files(model, mmproj)?;
    let backend = Backend::open(placement.device, options.kernels, true);
    let Backend::Vulkan(device) = &backend else {
        writeln!(
            out,
            "hrx runs on {} here: no Vulkan GPU kernel to check (hrx doctor lists the devices; --device N names one)",
            backend.describe()
        )?;
        return Ok(());
    };
    let info = device.info();
    writeln!(out, "hrx's self-check on {} (driver {})", info.name, info.driver())?;
    writeln!(out, "model {} + {}", model.display(), mmproj.display())?;
    let text = TextParams::from_gguf(&GgufFile::open(&model)?).map_err(RuntimeError::from)?;
    let vision = VisionParams::from_gguf(&GgufFile::open(&mmproj)?).map_err(RuntimeError::from)?;
    let plan = || {
        let registry = backend.registry();
        let mut plans = plan_text(&text, &options, &*registry)?;
        let patches = planned_patches(&vision, max_pixels / (vision.patch_size * vision.patch_size), &*registry)?;
        plans.push(plan_vision(&vision, patches, &*registry)?);
        Ok(((), plans))
    };
    // All of it again, from plans made without what an earlier check left out.
    device.forget_checks();
    let t0 = std::time::Instant::now();
    let (_, plans, reports) = settle(device, plan)?;
    let mut failed = Vec::new();
    for (round, report) in reports.iter().enumerate() {
        if round > 0 {
            writeln!(out, "planned again without what failed; checking what that brought in:")?;
        }
        for c in &report.checked {
            writeln!(out, "{}", line(c))?;
            if let Verdict::Failed { kernel, why } = &c.verdict {
                failed.push(format!("{}: {why}", kernel.name()));
            }
        }
    }
    let checks: usize = reports.iter().map(|r| r.checked.len()).sum();
    let seconds = t0.elapsed().as_secs_f64();
    let cpu = backend.cpu_node(&plans);
    match (failed.is_empty(), cpu) {
        (true, _) => {
            writeln!(out, "{checks} checks in {seconds:.2} s: every kernel the model uses passed on this device")?;
            Ok(())
        }
        (false, cpu) => {
            let then = match cpu {
                Some(node) => format!("{node} has no kernel left here, so the model runs on the CPU"),
                None => "hrx runs the next kernel of each such op instead, which passed".to_owned(),
            };
            writeln!(out, "{checks} checks in {seconds:.2} s: {} failed; {then}", failed.len())?;
            Err(CliError::Failed(format!(
                "hrx's self-check failed on {} (driver {}): {}",
                info.name,
                info.driver(),
                failed.join("; ")
            )))
        }
    }
}

/// One check as a line: verdict, error and time, what ran, where.
fn line(c: &Checked) -> String {
    let (word, detail) = match &c.verdict {
        Verdict::Passed => ("ok", c.error.map_or(String::new(), |e| format!("{e:.1e}"))),
        Verdict::Failed { why, .. } => ("FAILED", why.clone()),
        Verdict::Unchecked(why) => ("unchecked", why.clone()),
    };
    let at = if c.label.is_empty() { String::new() } else { format!("  [{}]", c.label) };
    match &c.verdict {
        Verdict::Passed => format!("  {word:<9} {detail:>8} {:>8.1} ms  {}{at}", c.seconds * 1e3, c.what),
        _ => format!("  {word:<9} {:>17.1} ms  {}{at}\n            {detail}", c.seconds * 1e3, c.what),
    }
}
