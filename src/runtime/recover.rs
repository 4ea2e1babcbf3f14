//! Surviving a lost GPU in a command that runs on (`hrx serve`, `hrx caption`): a driver reset,
//! a hang past `HRX_VK_TIMEOUT` or `VK_ERROR_DEVICE_LOST` leaves every model on that device
//! unusable, and a kiosk or a nightly job cannot call anyone. The command loads its models again
//! on a new device and goes on; from the `MAX_LOSSES`th loss within `WINDOW` on, on the CPU: a
//! device that keeps failing serves no one.

use super::describe::Describer;
use super::RuntimeError;
use crate::backend::vulkan::VkError;
use crate::backend::ExecError;
use std::time::{Duration, Instant};

/// Losses within [`WINDOW`] after which the models go to the CPU.
pub const MAX_LOSSES: usize = 3;
pub const WINDOW: Duration = Duration::from_secs(600);

/// Whether `e` says the device was lost or hung: nothing more runs on it.
pub fn is_device_lost(e: &RuntimeError) -> bool {
    matches!(
        e,
        RuntimeError::Exec(ExecError::Vulkan(
            VkError::DeviceLost { .. } | VkError::Timeout { .. } | VkError::Hung { .. }
        ))
    )
}

/// The device losses a command has met, each when.
#[derive(Debug, Default)]
pub struct Losses(Vec<Instant>);

impl Losses {
    /// Loads `lost`'s models again after its device was lost (`why`): on a new device of the
    /// same choice, or on the CPU from the `MAX_LOSSES`th loss within `WINDOW` on, or where the
    /// device fails to load them. Said in the log; an error only where the CPU fails too.
    pub fn recover(&mut self, lost: &Describer, why: &str) -> Result<Describer, RuntimeError> {
        let now = Instant::now();
        self.0.retain(|&t| now.duration_since(t) < WINDOW);
        self.0.push(now);
        let losses = self.0.len();
        let on_cpu = losses >= MAX_LOSSES;
        let device = lost.text().backend().describe();
        match on_cpu {
            true => log::warn!(
                "{device} was lost ({why}), {losses} times in {} minutes: loading the models on the CPU",
                WINDOW.as_secs() / 60
            ),
            false => log::warn!("{device} was lost ({why}): loading the models again on a new device"),
        }
        let t0 = Instant::now();
        let reopened = match lost.reopen(on_cpu) {
            Err(e) if !on_cpu => {
                log::warn!("loading the models again on the device failed ({e}): loading them on the CPU");
                lost.reopen(true)
            }
            other => other,
        }?;
        log::warn!(
            "the models run again, on {}, loaded in {:.1} s",
            reopened.text().backend().describe(),
            t0.elapsed().as_secs_f64()
        );
        Ok(reopened)
    }
}
