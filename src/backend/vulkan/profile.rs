//! GPU time per run and per kernel. Every recording on a device that writes timestamps
//! writes one before its first dispatch and one after its last: `RunTimes` adds up the
//! difference, the GPU time of a run, which beside the wall time of a run says how much of it
//! the host took (submission, waiting, reading back). A profiled recording (`HRX_VK_PROFILE=1`)
//! writes timestamp 0 before its first dispatch and timestamp k + 1 after dispatch k, with a
//! barrier between every two dispatches so that each difference is one dispatch's time alone
//! (without those barriers, dispatches that may overlap would share time: a difference would
//! be the time between two ends). `KernelTimes` adds the differences up by kernel, run after
//! run.

use super::timestamps::valid_mask;

/// One kernel's part of a graph's GPU time.
#[derive(Clone, Debug, PartialEq)]
pub struct KernelTime {
    /// The kernel's name, as plans show it: `flash_attn`, `rms_norm`; a product's with its
    /// weight shape, `mul_mat_vec_sg_q4_k 2048x6144`.
    pub kernel: String,
    /// Its dispatches in one run of the graph.
    pub dispatches: usize,
    /// Nanoseconds over every run so far.
    pub nanos: f64,
}

/// A graph's GPU time by kernel, the largest first.
#[derive(Clone, Debug, PartialEq)]
pub struct Profile {
    pub runs: usize,
    pub kernels: Vec<KernelTime>,
}

impl Profile {
    pub fn total_nanos(&self) -> f64 {
        self.kernels.iter().map(|k| k.nanos).sum()
    }
}

/// GPU time of a recording's runs: the first timestamp of each run to its last.
#[derive(Clone, Debug, PartialEq)]
pub struct RunTimes {
    pub runs: usize,
    /// Nanoseconds over every run so far.
    pub nanos: f64,
    ns_per_tick: f64,
    mask: u64,
}

impl RunTimes {
    /// No runs yet, on a device whose timestamps have `valid_bits` bits and tick every
    /// `ns_per_tick` nanoseconds.
    pub fn new(valid_bits: u32, ns_per_tick: f32) -> RunTimes {
        RunTimes { runs: 0, nanos: 0.0, ns_per_tick: f64::from(ns_per_tick), mask: valid_mask(valid_bits) }
    }

    /// Adds one run's timestamps, in recording order.
    pub fn add(&mut self, ticks: &[u64]) {
        if let (Some(first), Some(last)) = (ticks.first(), ticks.last()) {
            // The counter may wrap past its valid bits between the two.
            self.nanos += (last.wrapping_sub(*first) & self.mask) as f64 * self.ns_per_tick;
            self.runs += 1;
        }
    }

    /// The runs after `earlier`, a copy of these totals taken before them.
    pub fn since(&self, earlier: &RunTimes) -> RunTimes {
        RunTimes { runs: self.runs.saturating_sub(earlier.runs), nanos: self.nanos - earlier.nanos, ..*self }
    }

    /// Mean GPU time of a run in milliseconds (None before the first).
    pub fn mean_ms(&self) -> Option<f64> {
        (self.runs > 0).then(|| self.nanos / 1e6 / self.runs as f64)
    }
}

/// Running totals for one recording.
pub struct KernelTimes {
    /// Index into `totals` of each dispatch, in recording order.
    slot: Vec<usize>,
    totals: Vec<KernelTime>,
    runs: usize,
    ns_per_tick: f64,
    mask: u64,
}

impl KernelTimes {
    /// Totals for dispatches of these kernels, in recording order, on a device whose
    /// timestamps have `valid_bits` bits and tick every `ns_per_tick` nanoseconds.
    pub fn new(kernels: impl IntoIterator<Item = String>, valid_bits: u32, ns_per_tick: f32) -> KernelTimes {
        let mut totals: Vec<KernelTime> = Vec::new();
        let slot = kernels
            .into_iter()
            .map(|kernel| match totals.iter().position(|t| t.kernel == kernel) {
                Some(i) => {
                    totals[i].dispatches += 1;
                    i
                }
                None => {
                    totals.push(KernelTime { kernel, dispatches: 1, nanos: 0.0 });
                    totals.len() - 1
                }
            })
            .collect();
        KernelTimes { slot, totals, runs: 0, ns_per_tick: f64::from(ns_per_tick), mask: valid_mask(valid_bits) }
    }

    /// Timestamps needed per run: one before the first dispatch and one after each.
    pub fn timestamps(&self) -> usize {
        self.slot.len() + 1
    }

    /// Adds one run's timestamps (`timestamps()` of them, in recording order).
    pub fn add(&mut self, ticks: &[u64]) {
        for (pair, &slot) in ticks.windows(2).zip(&self.slot) {
            // The counter may wrap past its valid bits between two timestamps.
            let ticks = pair[1].wrapping_sub(pair[0]) & self.mask;
            self.totals[slot].nanos += ticks as f64 * self.ns_per_tick;
        }
        self.runs += 1;
    }

    pub fn profile(&self) -> Profile {
        let mut kernels = self.totals.clone();
        kernels.sort_by(|a, b| b.nanos.total_cmp(&a.nanos).then(a.kernel.cmp(&b.kernel)));
        Profile { runs: self.runs, kernels }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn time_between_timestamps_goes_to_the_dispatch_before_them() {
        let mut t = KernelTimes::new(["rms_norm", "mul_mat_vec_q4_k", "rms_norm", "add"].map(String::from), 64, 2.0);
        assert_eq!(t.timestamps(), 5);
        t.add(&[100, 110, 160, 165, 166]);
        t.add(&[0, 10, 60, 65, 66]);
        let p = t.profile();
        assert_eq!(p.runs, 2);
        let got: Vec<(&str, usize, f64)> =
            p.kernels.iter().map(|k| (k.kernel.as_str(), k.dispatches, k.nanos)).collect();
        // Ticks of 2 ns: the mat-vec 2 * 50, the two norms 2 * (10 + 5), the add 2 * 1.
        assert_eq!(got, [("mul_mat_vec_q4_k", 1, 200.0), ("rms_norm", 2, 60.0), ("add", 1, 4.0)]);
        assert_eq!(p.total_nanos(), 264.0);
    }

    #[test]
    fn a_counter_that_wraps_past_its_valid_bits_still_counts_forward() {
        let mut t = KernelTimes::new(["flash_attn".to_owned()], 36, 1.0);
        let top = (1u64 << 36) - 5;
        t.add(&[top, 7]);
        assert_eq!(t.profile().kernels[0].nanos, 12.0);
        let mut runs = RunTimes::new(36, 1.0);
        runs.add(&[top, 2, 7]);
        assert_eq!((runs.runs, runs.nanos), (1, 12.0));
    }

    #[test]
    fn a_run_lasts_from_its_first_timestamp_to_its_last() {
        let mut runs = RunTimes::new(64, 2.0);
        assert_eq!(runs.mean_ms(), None);
        runs.add(&[100, 110, 600]);
        runs.add(&[0, 1_000_000]);
        // Ticks of 2 ns: 1,000 ns and 2,000,000 ns.
        assert_eq!((runs.runs, runs.nanos), (2, 2_001_000.0));
        assert_eq!(runs.mean_ms(), Some(1.0005));
        runs.add(&[]);
        assert_eq!(runs.runs, 2);
        let earlier = runs.clone();
        runs.add(&[0, 500]);
        assert_eq!(runs.since(&earlier).mean_ms(), Some(0.001));
    }
}
