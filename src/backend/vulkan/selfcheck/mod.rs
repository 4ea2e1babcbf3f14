//! hrx's self-check on the user's own device: before a model's plans first run there, every
//! kernel variant they dispatch runs once on small inputs against the CPU, and the subgroup
//! kernels' subgroups are probed (`probe`). A variant that fails is never used on that device:
//! the plans are made again without it (the next kernel of its op), and where an op has none
//! left its node goes to the CPU, and with it the model (`runtime::loader`). What was found is
//! kept beside the pipeline cache (`record`), so a later start checks only what is new.
//!
//! Users of other engines have met drivers and GPUs that give garbage or lose the device on
//! some kernels and not others; a kiosk cannot tell anyone, so hrx looks for itself.

mod case;
mod probe;
mod record;

pub use case::nmse;
use case::{Case, Failure};
pub use probe::probe;
pub use record::{build_id, Verdict};

use super::device::Device;
use super::error::{Result, VkError};
use super::info::DeviceInfo;
use super::kernels::{KernelId, KernelSet, Variants};
use super::memory::Location;
use crate::dispatcher::{Placement, Plan, Where};
use record::Record;
use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Instant;

/// A device's checks: whether they run, what they found (its record), and where that is kept.
pub(crate) struct Checks {
    enabled: bool,
    path: Option<PathBuf>,
    build: String,
    found: Mutex<Record>,
}

impl Checks {
    /// The checks of `info`'s device: `enabled` or not, their record at `dir` (None: kept for
    /// this process only), read now.
    pub fn new(info: &DeviceInfo, enabled: bool, dir: Option<&std::path::Path>) -> Checks {
        let build = build_id();
        let path = dir.map(|d| record::file_for(d, info));
        let found = match (&path, enabled) {
            (Some(p), true) => record::load(p, &build),
            _ => Record::default(),
        };
        Checks { enabled, path, build, found: Mutex::new(found) }
    }

    fn found(&self) -> MutexGuard<'_, Record> {
        self.found.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// `variants` less what the checks found broken: every kernel built around a subgroup size
    /// where a probe failed, each kernel that failed.
    pub fn apply(&self, variants: Variants) -> Variants {
        let found = self.found();
        let variants = if found.probes.values().any(Option::is_some) { variants.without_subgroups() } else { variants };
        let mut refused: Vec<(KernelId, String)> = Vec::new();
        for verdict in found.cases.values() {
            if let Verdict::Failed { kernel, why } = verdict {
                if !refused.iter().any(|(k, _)| k == kernel) {
                    refused.push((*kernel, why.clone()));
                }
            }
        }
        Variants { refused, ..variants }
    }

    pub fn enabled(&self) -> bool {
        self.enabled
    }

    /// Forgets what was found (on disk too, at the next save): everything is checked again.
    pub fn forget(&self) {
        *self.found() = Record::default();
    }

    /// Every failure found, one line each: the kernel and why.
    pub fn failures(&self) -> Vec<String> {
        let found = self.found();
        let probes = found.probes.values().flatten().map(|e| format!("subgroup kernels: {e}"));
        let cases = found.cases.values().filter_map(|v| match v {
            Verdict::Failed { kernel, why } => Some(format!("{}: {why}", kernel.name())),
            _ => None,
        });
        let mut lines: Vec<String> = probes.chain(cases).collect();
        lines.dedup();
        lines
    }
}

/// One check's outcome, for reports.
#[derive(Clone, Debug)]
pub struct Checked {
    /// What ran: `subgroup probe at 32 lanes`, or the case's kernel, variant, ops and operands.
    pub what: String,
    /// Where in the plans (empty for a probe).
    pub label: String,
    pub verdict: Verdict,
    /// The normalized error of a case that passed.
    pub error: Option<f64>,
    pub seconds: f64,
}

/// What a check of some plans did.
#[derive(Clone, Debug, Default)]
pub struct Report {
    pub checked: Vec<Checked>,
    pub seconds: f64,
}

impl Report {
    /// Whether anything failed.
    pub fn failed(&self) -> bool {
        self.checked.iter().any(|c| matches!(c.verdict, Verdict::Failed { .. }))
    }
}

/// Checks what `plans` dispatch on `device` that its record does not hold (`Device::forget_checks`
/// makes that all of it): the subgroup probe at each size their kernels run at, then each
/// distinct dispatch. Failures go into the
/// device's record (saved before returning), so the variants it gives from then on leave them
/// out (`Device::variants`). An error only where the device itself failed (lost, hung, out of
/// memory); a kernel that lost the device is recorded as failed first.
pub fn check(device: &Device, ks: &KernelSet, plans: &[Plan]) -> Result<Report> {
    let checks = &device.shared.checks;
    let t0 = Instant::now();
    let mut report = Report::default();
    let mut dispatches = Vec::new();
    for plan in plans {
        for (i, p) in plan.placements.iter().enumerate() {
            let Placement::Run { device: Where::Gpu, kernel, group } = p else { continue };
            let id = KernelId::of_plan(kernel)
                .ok_or_else(|| VkError::Plan(format!("the plan names {kernel}, which this backend does not have")))?;
            dispatches.push((plan, crate::graph::NodeId(i), id, *group));
        }
    }
    let sizes: BTreeSet<u32> = dispatches.iter().filter_map(|(_, _, id, _)| id.subgroup()).collect();
    // The pipelines side by side first (a cold driver cache compiles each for a while); one
    // that cannot be made fails its case below, with its reason.
    let _ = ks.prepare(dispatches.iter().map(|d| d.2).chain(sizes.iter().map(|&s| KernelId::SubgroupProbe(s))));
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    // A memory block left empty goes back to the driver, so each case's buffers would take a
    // fresh 256 MiB block of each kind (16 ms a case on an H100): one small buffer of each
    // kind holds them for the whole check.
    let _blocks = [Location::Device, Location::Host].map(|at| device.buffer(4, at, "the self-check's memory"));
    let result = (|| -> Result<()> {
        for size in sizes {
            if checks.found().probes.contains_key(&size) {
                continue;
            }
            let t = Instant::now();
            let outcome = probe(ks, size)?;
            if let Err(why) = &outcome {
                log::warn!("hrx's self-check: {why}: hrx's subgroup kernels are not used on it");
            }
            checks.found().probes.insert(size, outcome.clone().err());
            report.checked.push(Checked {
                what: format!("subgroup probe at {size} lanes"),
                label: String::new(),
                verdict: match outcome {
                    Ok(()) => Verdict::Passed,
                    Err(why) => Verdict::Failed { kernel: KernelId::SubgroupProbe(size), why },
                },
                error: None,
                seconds: t.elapsed().as_secs_f64(),
            });
        }
        // A failed probe leaves every subgroup kernel out: the plans are made again first.
        if report.failed() {
            return Ok(());
        }
        let mut seen = BTreeSet::new();
        for &(plan, node, id, group) in &dispatches {
            let case = Case::new(plan, node, id, group);
            if !seen.insert(case.key.clone()) || checks.found().cases.contains_key(&case.key) {
                continue;
            }
            let t = Instant::now();
            let corrupt = crate::fault::corrupts_check(&id.name());
            let (verdict, error, lost) = match case.run(ks, threads, corrupt) {
                Ok(e) => (Verdict::Passed, Some(e), None),
                Err(Failure::Unchecked(why)) => (Verdict::Unchecked(why), None, None),
                Err(Failure::Wrong(why)) => (Verdict::Failed { kernel: id, why }, None, None),
                Err(Failure::Vulkan(e)) => {
                    let fatal =
                        matches!(e, VkError::DeviceLost { .. } | VkError::Timeout { .. } | VkError::Hung { .. });
                    let its_own = fatal || matches!(e, VkError::Pipeline { .. });
                    if !its_own {
                        return Err(e);
                    }
                    (Verdict::Failed { kernel: id, why: e.to_string() }, None, fatal.then_some(e))
                }
            };
            match &verdict {
                Verdict::Failed { why, .. } => log::warn!(
                    "hrx's self-check: {} failed on {}: {why} ({}); it is not used on this device",
                    id.name(),
                    device.info().name,
                    case.label
                ),
                Verdict::Unchecked(why) => {
                    log::warn!("hrx's self-check could not check {} ({}): {why}", id.name(), case.label)
                }
                Verdict::Passed => {}
            }
            checks.found().cases.insert(case.key.clone(), verdict.clone());
            report.checked.push(Checked {
                what: case.key.clone(),
                label: case.label.clone(),
                verdict,
                error,
                seconds: t.elapsed().as_secs_f64(),
            });
            if let Some(e) = lost {
                return Err(e);
            }
        }
        Ok(())
    })();
    if !report.checked.is_empty() {
        if let Some(path) = &checks.path {
            record::save(path, &checks.found(), &checks.build, device.info());
        }
    }
    report.seconds = t0.elapsed().as_secs_f64();
    result.map(|()| report)
}
