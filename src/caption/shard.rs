//! Shards: one caption job spread over many processes or boxes, each taking a stable share of
//! the images by a hash of the image's path within its input folder. An image's shard depends
//! on its own path only, so images added later move none of the others.

use std::path::Path;

/// Shard `index` of `count` (numbered from 0).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shard {
    pub index: usize,
    pub count: usize,
}

/// Where `--shard auto` looked, for its error.
pub const AUTO_SOURCES: &str = "JOB_COMPLETION_INDEX (a Kubernetes Indexed Job, with --shards N) or \
                                SLURM_ARRAY_TASK_ID and SLURM_ARRAY_TASK_COUNT (a Slurm job array)";

impl Shard {
    /// `K/N`, or `auto`: the scheduler's index read from `env` (`shards`: `--shards N`).
    pub fn parse(spec: &str, shards: Option<usize>, env: impl Fn(&str) -> Option<String>) -> Result<Shard, String> {
        let shard = match spec {
            "auto" => auto(shards, env)?,
            _ => {
                if shards.is_some() {
                    return Err(format!("--shards goes with --shard auto (--shard {spec} says how many)"));
                }
                let (k, n) = spec.split_once('/').ok_or_else(|| format!("--shard {spec}: K/N or auto"))?;
                let number = |s: &str| s.parse::<usize>().map_err(|_| format!("--shard {spec}: K/N or auto"));
                Shard { index: number(k)?, count: number(n)? }
            }
        };
        if shard.count == 0 || shard.index >= shard.count {
            return Err(format!(
                "shard {} of {}: shards are numbered from 0 to one less than their count",
                shard.index, shard.count
            ));
        }
        Ok(shard)
    }

    /// Whether the image at `relative` (its path within its input folder) is this shard's.
    pub fn takes(&self, relative: &Path) -> bool {
        use std::os::unix::ffi::OsStrExt;
        fnv1a(relative.as_os_str().as_bytes()) % self.count as u64 == self.index as u64
    }
}

/// The shard a scheduler gave this process: a Kubernetes Indexed Job's completion index (with
/// the job's completions as `shards`), or a Slurm job array's task (its first id and step taken
/// into account). Never a guess: neither set, or both, is an error.
fn auto(shards: Option<usize>, env: impl Fn(&str) -> Option<String>) -> Result<Shard, String> {
    let read = |name: &str| -> Result<Option<usize>, String> {
        match env(name) {
            None => Ok(None),
            Some(v) => v.trim().parse().map(Some).map_err(|_| format!("{name}={v} is not a number")),
        }
    };
    let kubernetes = read("JOB_COMPLETION_INDEX")?;
    let slurm = read("SLURM_ARRAY_TASK_ID")?;
    match (kubernetes, slurm) {
        (Some(_), Some(_)) => {
            Err("--shard auto: both JOB_COMPLETION_INDEX and SLURM_ARRAY_TASK_ID are set; give --shard K/N".into())
        }
        (Some(index), None) => {
            let count =
                shards.ok_or("--shard auto in a Kubernetes Indexed Job needs --shards N (the job's completions)")?;
            Ok(Shard { index, count })
        }
        (None, Some(id)) => {
            let count = read("SLURM_ARRAY_TASK_COUNT")?.ok_or("--shard auto: SLURM_ARRAY_TASK_COUNT is not set")?;
            if shards.is_some_and(|n| n != count) {
                return Err(format!("--shards {} but the Slurm array has {count} tasks", shards.unwrap_or(0)));
            }
            let (min, step) = (read("SLURM_ARRAY_TASK_MIN")?.unwrap_or(0), read("SLURM_ARRAY_TASK_STEP")?.unwrap_or(1));
            if id < min || step == 0 || (id - min) % step != 0 {
                return Err(format!("--shard auto: task {id} is not in the Slurm array from {min} by {step}"));
            }
            Ok(Shard { index: (id - min) / step, count })
        }
        (None, None) => Err(format!("--shard auto found no scheduler's index: it reads {AUTO_SOURCES}")),
    }
}

/// 64-bit FNV-1a: the same number for the same bytes in every build and on every machine.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;
    use std::path::PathBuf;

    fn paths(n: usize) -> Vec<PathBuf> {
        (0..n).map(|i| PathBuf::from(format!("2026/{:02}/IMG_{i:05}.jpg", i % 12))).collect()
    }

    fn env(vars: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let vars: HashMap<String, String> = vars.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        move |name| vars.get(name).cloned()
    }

    #[test]
    fn every_image_is_in_exactly_one_shard_of_any_count() {
        let all = paths(1000);
        for count in 1..=7 {
            let shards: Vec<Shard> = (0..count).map(|index| Shard { index, count }).collect();
            for p in &all {
                assert_eq!(shards.iter().filter(|s| s.takes(p)).count(), 1, "{} of {count}", p.display());
            }
            // And the shares are even enough to spread the work.
            for s in &shards {
                let n = all.iter().filter(|p| s.takes(p)).count();
                assert!(n * count > 700 && n * count < 1300, "shard {} of {count}: {n}", s.index);
            }
        }
    }

    #[test]
    fn images_added_move_no_other_image() {
        let (before, after) = (paths(300), paths(400));
        let shard_of = |p: &Path| (0..5).find(|&index| Shard { index, count: 5 }.takes(p));
        for p in &before {
            assert_eq!(shard_of(p), after.iter().find(|q| *q == p).and_then(|q| shard_of(q)));
        }
        // Pinned (FNV-1a's published value): a build that hashed differently would reshuffle
        // every box's share.
        assert_eq!(fnv1a(b"a"), 0xaf63_dc4c_8601_ec8c);
    }

    #[test]
    fn shards_are_read_from_the_flag_or_the_scheduler() {
        let none = env(&[]);
        assert_eq!(Shard::parse("2/5", None, &none), Ok(Shard { index: 2, count: 5 }));
        for bad in ["5/5", "1/0", "x/2", "3", "-1/2"] {
            assert!(Shard::parse(bad, None, &none).is_err(), "{bad}");
        }
        assert!(Shard::parse("1/2", Some(2), &none).unwrap_err().contains("--shards goes with --shard auto"));
        // Kubernetes: the completion index, the count from --shards.
        let k8s = env(&[("JOB_COMPLETION_INDEX", "3")]);
        assert_eq!(Shard::parse("auto", Some(4), &k8s), Ok(Shard { index: 3, count: 4 }));
        assert!(Shard::parse("auto", None, &k8s).unwrap_err().contains("needs --shards N"));
        assert!(Shard::parse("auto", Some(3), &k8s).is_err(), "index 3 of 3");
        // Slurm: ids from the array's first by its step (--array=1-9:2 is 1, 3, 5, 7, 9).
        let slurm = env(&[("SLURM_ARRAY_TASK_ID", "7"), ("SLURM_ARRAY_TASK_COUNT", "5")]);
        let slurm_from = |min: &str, step: &str| {
            env(&[
                ("SLURM_ARRAY_TASK_ID", "7"),
                ("SLURM_ARRAY_TASK_COUNT", "5"),
                ("SLURM_ARRAY_TASK_MIN", min),
                ("SLURM_ARRAY_TASK_STEP", step),
            ])
        };
        assert!(Shard::parse("auto", None, &slurm).is_err(), "id 7 of 5 from 0");
        assert_eq!(Shard::parse("auto", None, slurm_from("1", "2")), Ok(Shard { index: 3, count: 5 }));
        assert_eq!(Shard::parse("auto", Some(5), slurm_from("3", "1")), Ok(Shard { index: 4, count: 5 }));
        assert!(Shard::parse("auto", Some(4), slurm_from("3", "1")).unwrap_err().contains("has 5 tasks"));
        assert!(Shard::parse("auto", None, slurm_from("2", "2")).is_err(), "7 is not 2 + 2k");
        // Neither, both: no guess.
        assert!(Shard::parse("auto", Some(2), &none).unwrap_err().contains("found no scheduler's index"));
        let both = env(&[("JOB_COMPLETION_INDEX", "0"), ("SLURM_ARRAY_TASK_ID", "0"), ("SLURM_ARRAY_TASK_COUNT", "2")]);
        assert!(Shard::parse("auto", Some(2), &both).unwrap_err().contains("both"));
        let garbled = env(&[("JOB_COMPLETION_INDEX", "one")]);
        assert!(Shard::parse("auto", Some(2), &garbled).unwrap_err().contains("not a number"));
    }
}
