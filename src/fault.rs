//! Faults the tests inject, through `HRX_TEST_FAULT` (never set in use): what hrx must
//! survive on a user's GPU but no test machine does on its own. A comma-separated list of
//!
//! - `selfcheck:KERNEL`: the self-check finds kernel KERNEL (its name as `hrx plan` shows it,
//!   `rms_norm`) giving wrong results: its output is spoiled before the comparison;
//! - `device-lost:N`: the Nth run of a plan on a Vulkan device (counted from one over the
//!   process) finds the device lost, as `VK_ERROR_DEVICE_LOST` would: that run and everything
//!   after it on that device fail.
//!
//! An item that reads as none of these is warned about and ignored.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

#[derive(Debug, Default, PartialEq)]
struct Faults {
    spoiled: Vec<String>,
    lost_at: Vec<u64>,
}

fn parse(text: &str) -> Faults {
    let mut f = Faults::default();
    for item in text.split(',').map(str::trim).filter(|i| !i.is_empty()) {
        match item.split_once(':') {
            Some(("selfcheck", kernel)) if !kernel.is_empty() => f.spoiled.push(kernel.to_owned()),
            Some(("device-lost", n)) if n.parse::<u64>().is_ok_and(|n| n > 0) => {
                f.lost_at.extend(n.parse::<u64>().ok())
            }
            _ => log::warn!("HRX_TEST_FAULT: {item:?} is no fault (selfcheck:KERNEL or device-lost:N); ignored"),
        }
    }
    f
}

fn faults() -> &'static Faults {
    static FAULTS: OnceLock<Faults> = OnceLock::new();
    FAULTS.get_or_init(|| crate::settings::settings().text(&crate::settings::TEST_FAULT).map(parse).unwrap_or_default())
}

/// Whether the self-check is to find `kernel` broken.
pub fn corrupts_check(kernel: &str) -> bool {
    faults().spoiled.iter().any(|k| k == kernel)
}

/// Counts a run of a plan on a Vulkan device: whether it is one that loses the device.
pub fn run_loses_device() -> bool {
    static RUNS: AtomicU64 = AtomicU64::new(0);
    let faults = faults();
    if faults.lost_at.is_empty() {
        return false;
    }
    let n = RUNS.fetch_add(1, Ordering::SeqCst) + 1;
    faults.lost_at.contains(&n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn faults_read_as_written() {
        let f = parse("selfcheck:rms_norm, device-lost:3,device-lost:7");
        assert_eq!(f, Faults { spoiled: vec!["rms_norm".into()], lost_at: vec![3, 7] });
        assert_eq!(parse("device-lost:0,selfcheck:,nothing"), Faults::default());
    }
}
