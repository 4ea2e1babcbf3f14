//! Every `HRX_*` environment variable hrx reads, declared once here: its name, the values it
//! takes, its default and what it does. `hrx help env` prints the table, `hrx doctor` the
//! values in force. They are read once, at first use, into [`Settings`], each by the one parser
//! of its kind; a value that kind does not take is warned about, naming the variable and the
//! value, and the default is kept. Where a value is used, it is asked of [`settings()`] by its
//! declaration ([`Settings::switch`] for [`VK_EXACT`], ...), never read from the environment
//! again.

use std::collections::HashMap;
use std::ffi::OsString;
use std::sync::OnceLock;

/// What a variable takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// `1`, `0`, `true` or `false`.
    Switch,
    /// A whole number, one of `allowed` where that is not empty, else within `min..=max`.
    Whole { min: u64, max: u64, allowed: &'static [u64] },
    /// A positive number of seconds.
    Seconds,
    /// One of these words.
    Choice(&'static [&'static str]),
    /// Comma-separated positive whole numbers, as many as one of `counts`.
    Wholes { counts: &'static [usize] },
    /// Text the code that uses it checks, saying what it expected (a device, faults).
    Text,
    /// Folders, separated as `PATH` separates them.
    Paths,
    /// No longer read: setting it only brings this message.
    Retired(&'static str),
}

/// One variable.
#[derive(Debug)]
pub struct Var {
    pub name: &'static str,
    pub kind: Kind,
    /// The default, as a user reads it.
    pub default: &'static str,
    pub doc: &'static str,
}

const SWITCH_OFF: &str = "0";

pub const DEVICE: Var = Var {
    name: "HRX_DEVICE",
    kind: Kind::Text,
    default: "auto",
    doc: "the device, as --device takes it (auto, cpu or a Vulkan device index: hrx doctor lists them); --device wins",
};
pub const MODELS: Var = Var {
    name: "HRX_MODELS",
    kind: Kind::Paths,
    default: "unset",
    doc: "more folders to search for model files, after ./models and before ~/.local/share/hrx/models and /var/lib/hrx/models",
};
pub const CACHE_DIR: Var = Var {
    name: "HRX_CACHE_DIR",
    kind: Kind::Text,
    default: "$XDG_CACHE_HOME/hrx or ~/.cache/hrx",
    doc: "where the Vulkan pipeline cache and the self-check's findings are kept (empty: nowhere, everything is made again each start)",
};
pub const KERNELS: Var = Var {
    name: "HRX_KERNELS",
    kind: Kind::Choice(&["fast", "reference"]),
    default: "fast",
    doc: "the CPU backend's kernels: reference runs the plain numeric reference ones (slow; for checking)",
};
pub const SIMD: Var = Var {
    name: "HRX_SIMD",
    kind: Kind::Choice(&["scalar", "avx2", "avx512"]),
    default: "the best the CPU has",
    doc: "the highest CPU instruction set hrx's kernels may use",
};
pub const LOG_DISPATCH: Var = Var {
    name: "HRX_LOG_DISPATCH",
    kind: Kind::Switch,
    default: SWITCH_OFF,
    doc: "log where every graph node is placed (device, kernel, fused, skipped) to standard error",
};
pub const TEST_FAULT: Var = Var {
    name: "HRX_TEST_FAULT",
    kind: Kind::Text,
    default: "unset",
    doc: "for tests only: faults to inject, comma-separated: selfcheck:KERNEL (the self-check finds KERNEL wrong), device-lost:N (the Nth run loses the device)",
};
pub const VK_PROFILE: Var = Var {
    name: "HRX_VK_PROFILE",
    kind: Kind::Switch,
    default: SWITCH_OFF,
    doc: "time every Vulkan dispatch (a barrier between every two; hrx bench prints GPU time per kernel)",
};
pub const VK_TIMEOUT: Var = Var {
    name: "HRX_VK_TIMEOUT",
    kind: Kind::Seconds,
    default: "120",
    doc: "seconds one GPU submission may run: past it the run fails saying so and the process submits nothing more to that device",
};
pub const VK_SPIN_US: Var = Var {
    name: "HRX_VK_SPIN_US",
    kind: Kind::Whole { min: 0, max: 10_000_000, allowed: &[] },
    default: "50000",
    doc: "microseconds a wait for the GPU polls before it sleeps in the driver (0: sleep at once; never on a CPU device such as lavapipe)",
};
pub const VK_NO_COOPMAT: Var = Var {
    name: "HRX_VK_NO_COOPMAT",
    kind: Kind::Switch,
    default: SWITCH_OFF,
    doc: "matrix products on f32 tiles, not cooperative matrices",
};
pub const VK_EXACT: Var = Var {
    name: "HRX_VK_EXACT",
    kind: Kind::Switch,
    default: SWITCH_OFF,
    doc: "f32-exact kernels everywhere (f32 KV cache and activations, mul_mat_cm_exact): slower, for checking",
};
pub const VK_NO_NARROW: Var = Var {
    name: "HRX_VK_NO_NARROW",
    kind: Kind::Switch,
    default: SWITCH_OFF,
    doc: "no narrow cooperative-matrix products for a few columns",
};
pub const VK_NO_SUBGROUP: Var = Var {
    name: "HRX_VK_NO_SUBGROUP",
    kind: Kind::Switch,
    default: SWITCH_OFF,
    doc: "no kernel built around a subgroup size: the portable ones",
};
pub const VK_MATVEC: Var = Var {
    name: "HRX_VK_MATVEC",
    kind: Kind::Choice(&["wide", "sg"]),
    default: "wide",
    doc: "the matrix-vector kernels on subgroups: mul_mat_vec_wide (wide) or mul_mat_vec_sg (sg)",
};
pub const VK_NO_FUSE: Var = Var {
    name: "HRX_VK_NO_FUSE",
    kind: Kind::Switch,
    default: SWITCH_OFF,
    doc: "no fused or folded dispatches: one kernel a node",
};
pub const VK_NO_TILED_ATTN: Var = Var {
    name: "HRX_VK_NO_TILED_ATTN",
    kind: Kind::Switch,
    default: SWITCH_OFF,
    doc: "the one-query attention kernel for prefill and vision too, not query tiles",
};
pub const VK_KV_F32: Var =
    Var { name: "HRX_VK_KV_F32", kind: Kind::Switch, default: SWITCH_OFF, doc: "keep the KV cache in f32, not f16" };
pub const VK_F32_ACTIVATIONS: Var = Var {
    name: "HRX_VK_F32_ACTIVATIONS",
    kind: Kind::Switch,
    default: SWITCH_OFF,
    doc: "f32 activations where only matrix-unit products read them (f16 by default)",
};
pub const VK_CM_TILES: Var = Var {
    name: "HRX_VK_CM_TILES",
    kind: Kind::Wholes { counts: &[4, 5] },
    default: "the device's",
    doc: "SG_M,SG_N,BK,DEPTH[,PROBE]: the cooperative-matrix product's tiles, for measuring others (hrx bench --help)",
};
pub const VK_CM_LARGE: Var = Var {
    name: "HRX_VK_CM_LARGE",
    kind: Kind::Wholes { counts: &[4, 5] },
    default: "the device's",
    doc: "as HRX_VK_CM_TILES, for mul_mat_cm_large (many rows and columns)",
};
pub const VK_CM_NARROW: Var = Var {
    name: "HRX_VK_CM_NARROW",
    kind: Kind::Wholes { counts: &[4, 5] },
    default: "the device's",
    doc: "as HRX_VK_CM_TILES, for mul_mat_cm_narrow (a few columns)",
};
pub const VK_ATTN_SPLITS: Var = Var {
    name: "HRX_VK_ATTN_SPLITS",
    kind: Kind::Whole { min: 1, max: 64, allowed: &[] },
    default: "32",
    doc: "at most this many splits of one head's kv rows in flash_attn_split (decode attention)",
};
pub const VK_ATTN_CM_ROWS: Var = Var {
    name: "HRX_VK_ATTN_CM_ROWS",
    kind: Kind::Whole { min: 16, max: 64, allowed: &[16, 32, 64] },
    default: "32",
    doc: "kv rows a step of flash_attn_cm takes",
};
pub const VK_WIDE_ROWS: Var = Var {
    name: "HRX_VK_WIDE_ROWS",
    kind: Kind::Whole { min: 2, max: 8, allowed: &[2, 4, 8] },
    default: "4",
    doc: "rows a workgroup of mul_mat_vec_wide computes",
};
pub const VK_WIDE_TPR: Var = Var {
    name: "HRX_VK_WIDE_TPR",
    kind: Kind::Whole { min: 8, max: 128, allowed: &[8, 16, 32, 64, 128] },
    default: "by row count",
    doc: "threads a row of mul_mat_vec_wide (whole subgroups of the device)",
};
pub const VK_COOPMAT: Var = Var {
    name: "HRX_VK_COOPMAT",
    kind: Kind::Retired(
        "cooperative matrices are the default where the device has them (HRX_VK_NO_COOPMAT=1 keeps the f32 tiles)",
    ),
    default: "retired",
    doc: "no longer read",
};
pub const VK_KV_F16: Var = Var {
    name: "HRX_VK_KV_F16",
    kind: Kind::Retired("the KV cache keeps f16 values by default (HRX_VK_KV_F32=1 keeps f32)"),
    default: "retired",
    doc: "no longer read",
};

/// Every variable, in the order `hrx help env` lists them.
pub const ALL: &[&Var] = &[
    &DEVICE,
    &MODELS,
    &CACHE_DIR,
    &KERNELS,
    &SIMD,
    &LOG_DISPATCH,
    &TEST_FAULT,
    &VK_PROFILE,
    &VK_TIMEOUT,
    &VK_SPIN_US,
    &VK_NO_COOPMAT,
    &VK_EXACT,
    &VK_NO_NARROW,
    &VK_NO_SUBGROUP,
    &VK_MATVEC,
    &VK_NO_FUSE,
    &VK_NO_TILED_ATTN,
    &VK_KV_F32,
    &VK_F32_ACTIVATIONS,
    &VK_CM_TILES,
    &VK_CM_LARGE,
    &VK_CM_NARROW,
    &VK_ATTN_SPLITS,
    &VK_ATTN_CM_ROWS,
    &VK_WIDE_ROWS,
    &VK_WIDE_TPR,
    &VK_COOPMAT,
    &VK_KV_F16,
];

/// A value as its kind reads it.
#[derive(Clone, Debug, PartialEq)]
enum Value {
    Switch(bool),
    Whole(u64),
    Seconds(f64),
    Choice(&'static str),
    Wholes(Vec<u64>),
    Text(String),
    Paths(OsString),
}

/// The variables set, read once.
#[derive(Debug, Default)]
pub struct Settings {
    values: HashMap<&'static str, Value>,
    /// Each value not taken, one line naming it (also logged as a warning when read).
    pub refused: Vec<String>,
}

/// The settings of this process: the environment, read at the first call.
pub fn settings() -> &'static Settings {
    static SETTINGS: OnceLock<Settings> = OnceLock::new();
    SETTINGS.get_or_init(|| {
        let s = Settings::read(|name| std::env::var_os(name));
        for line in &s.refused {
            log::warn!("{line}");
        }
        s
    })
}

impl Settings {
    /// The settings `lookup` gives (the environment, or a test's).
    pub fn read(lookup: impl Fn(&str) -> Option<OsString>) -> Settings {
        let mut s = Settings::default();
        for var in ALL {
            let Some(raw) = lookup(var.name) else { continue };
            match parse(var, raw) {
                Ok(Some(v)) => {
                    s.values.insert(var.name, v);
                }
                Ok(None) => {}
                Err(why) => s.refused.push(why),
            }
        }
        s
    }

    /// Whether switch `var` is on.
    pub fn switch(&self, var: &Var) -> bool {
        matches!(self.values.get(var.name), Some(Value::Switch(true)))
    }

    /// The whole number `var` holds, if set.
    pub fn whole(&self, var: &Var) -> Option<u64> {
        match self.values.get(var.name) {
            Some(Value::Whole(n)) => Some(*n),
            _ => None,
        }
    }

    /// The seconds `var` holds, if set.
    pub fn seconds(&self, var: &Var) -> Option<f64> {
        match self.values.get(var.name) {
            Some(Value::Seconds(s)) => Some(*s),
            _ => None,
        }
    }

    /// The word `var` holds, if set.
    pub fn choice(&self, var: &Var) -> Option<&'static str> {
        match self.values.get(var.name) {
            Some(Value::Choice(c)) => Some(c),
            _ => None,
        }
    }

    /// The numbers `var` holds, if set.
    pub fn wholes(&self, var: &Var) -> Option<&[u64]> {
        match self.values.get(var.name) {
            Some(Value::Wholes(n)) => Some(n),
            _ => None,
        }
    }

    /// The text `var` holds, if set.
    pub fn text(&self, var: &Var) -> Option<&str> {
        match self.values.get(var.name) {
            Some(Value::Text(t)) => Some(t),
            _ => None,
        }
    }

    /// The folders `var` holds, if set.
    pub fn paths(&self, var: &Var) -> Option<&OsString> {
        match self.values.get(var.name) {
            Some(Value::Paths(p)) => Some(p),
            _ => None,
        }
    }

    /// `var`'s value as set, or None where it is not.
    pub fn shown(&self, var: &Var) -> Option<String> {
        self.values.get(var.name).map(|v| match v {
            Value::Switch(b) => u8::from(*b).to_string(),
            Value::Whole(n) => n.to_string(),
            Value::Seconds(s) => s.to_string(),
            Value::Choice(c) => (*c).to_owned(),
            Value::Wholes(n) => n.iter().map(u64::to_string).collect::<Vec<_>>().join(","),
            Value::Text(t) => t.clone(),
            Value::Paths(p) => p.to_string_lossy().into_owned(),
        })
    }

    /// The table of every variable, its values, default and use, and the value in force where
    /// one is set: `hrx help env`.
    pub fn table(&self) -> String {
        let mut s = String::from(
            "hrx's environment variables (each read once at start; a value a variable does not take is\n\
             warned about, naming it, and its default kept). Flags win over them.\n\n",
        );
        for var in ALL {
            let now = match self.shown(var) {
                Some(v) => format!("  [set: {v}]"),
                None => String::new(),
            };
            s.push_str(&format!("{}={}  (default {}){now}\n    {}\n", var.name, takes(var.kind), var.default, var.doc));
        }
        s.push_str("\nAlso read: RUST_LOG=info|debug for logs.");
        s
    }
}

/// What `kind` takes, for the table.
fn takes(kind: Kind) -> String {
    match kind {
        Kind::Switch => "1|0".to_owned(),
        Kind::Whole { allowed, .. } if !allowed.is_empty() => {
            allowed.iter().map(u64::to_string).collect::<Vec<_>>().join("|")
        }
        Kind::Whole { min, max, .. } => format!("{min}..{max}"),
        Kind::Seconds => "SECONDS".to_owned(),
        Kind::Choice(words) => words.join("|"),
        Kind::Wholes { .. } => "N,N,N,N[,N]".to_owned(),
        Kind::Text => "TEXT".to_owned(),
        Kind::Paths => "DIR[:DIR...]".to_owned(),
        Kind::Retired(_) => "(retired)".to_owned(),
    }
}

/// `raw` as `var` takes it: a value, None for one that means "unset", or why it is refused.
fn parse(var: &Var, raw: OsString) -> Result<Option<Value>, String> {
    if let Kind::Paths = var.kind {
        return Ok((!raw.is_empty()).then_some(Value::Paths(raw)));
    }
    let text = raw.to_string_lossy();
    let t = text.trim();
    let refused =
        |expected: &str| Err(format!("{}={text:?}: expected {expected}; default kept ({})", var.name, var.default));
    match var.kind {
        Kind::Switch => match t {
            "1" | "true" => Ok(Some(Value::Switch(true))),
            "0" | "false" => Ok(Some(Value::Switch(false))),
            _ => refused("1, 0, true or false"),
        },
        Kind::Whole { min, max, allowed } => match t.parse::<u64>() {
            Ok(n) if allowed.contains(&n) || (allowed.is_empty() && (min..=max).contains(&n)) => {
                Ok(Some(Value::Whole(n)))
            }
            _ => refused(&format!("a whole number, {}", takes(var.kind))),
        },
        Kind::Seconds => match t.parse::<f64>() {
            Ok(s) if s > 0.0 && std::time::Duration::try_from_secs_f64(s).is_ok() => Ok(Some(Value::Seconds(s))),
            _ => refused("a positive number of seconds"),
        },
        Kind::Choice(words) => match words.iter().find(|w| **w == t) {
            Some(w) => Ok(Some(Value::Choice(w))),
            None => refused(&words.join(", ")),
        },
        Kind::Wholes { counts } => {
            let n: Option<Vec<u64>> = t.split(',').map(|x| x.trim().parse::<u64>().ok().filter(|&n| n > 0)).collect();
            match n {
                Some(n) if counts.contains(&n.len()) => Ok(Some(Value::Wholes(n))),
                _ => refused(&format!("{} positive whole numbers, comma-separated", takes(var.kind))),
            }
        }
        Kind::Text => Ok(Some(Value::Text(t.to_owned()))),
        Kind::Paths => Ok(None),
        Kind::Retired(why) => Err(format!("{} is no longer read: {why}", var.name)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(pairs: &[(&str, &str)]) -> Settings {
        Settings::read(|name| pairs.iter().find(|(n, _)| *n == name).map(|(_, v)| OsString::from(v)))
    }

    #[test]
    fn each_kind_takes_its_values_and_names_what_it_refuses() {
        let s = read(&[
            ("HRX_VK_EXACT", "true"),
            ("HRX_VK_NO_FUSE", "0"),
            ("HRX_LOG_DISPATCH", "yes"),
            ("HRX_VK_TIMEOUT", "2.5"),
            ("HRX_VK_ATTN_CM_ROWS", "48"),
            ("HRX_VK_WIDE_ROWS", "8"),
            ("HRX_VK_MATVEC", "sg"),
            ("HRX_SIMD", "sse9"),
            ("HRX_VK_CM_TILES", "2,2,32,2"),
            ("HRX_VK_CM_LARGE", "2,2,0,2"),
            ("HRX_VK_KV_F16", "1"),
        ]);
        assert!(s.switch(&VK_EXACT));
        assert!(!s.switch(&VK_NO_FUSE));
        assert!(!s.switch(&LOG_DISPATCH));
        assert_eq!(s.seconds(&VK_TIMEOUT), Some(2.5));
        assert_eq!(s.whole(&VK_ATTN_CM_ROWS), None);
        assert_eq!(s.whole(&VK_WIDE_ROWS), Some(8));
        assert_eq!(s.choice(&VK_MATVEC), Some("sg"));
        assert_eq!(s.choice(&SIMD), None);
        assert_eq!(s.wholes(&VK_CM_TILES), Some(&[2, 2, 32, 2][..]));
        assert_eq!(s.wholes(&VK_CM_LARGE), None);
        let refused = s.refused.join("\n");
        for name in ["HRX_LOG_DISPATCH=\"yes\"", "HRX_VK_ATTN_CM_ROWS=\"48\"", "HRX_SIMD=\"sse9\"", "HRX_VK_CM_LARGE"] {
            assert!(refused.contains(name), "{name} not named in {refused}");
        }
        assert!(refused.contains("HRX_VK_KV_F16 is no longer read"), "{refused}");
        assert_eq!(s.refused.len(), 5, "{refused}");
    }

    #[test]
    fn the_table_lists_every_variable_and_the_values_set() {
        let table = read(&[("HRX_VK_EXACT", "1")]).table();
        for var in ALL {
            assert!(table.contains(&format!("{}=", var.name)), "{} missing", var.name);
        }
        assert!(table.contains("HRX_VK_EXACT=1|0  (default 0)  [set: 1]"), "{table}");
        let names: std::collections::HashSet<&str> = ALL.iter().map(|v| v.name).collect();
        assert_eq!(names.len(), ALL.len(), "a variable declared twice");
    }

    /// Every `HRX_` name in the sources is declared here, and none is read from the
    /// environment anywhere else: the table cannot miss a variable.
    #[test]
    fn the_table_names_every_variable_the_code_reads() {
        let mut found = std::collections::BTreeSet::new();
        let mut direct = Vec::new();
        let mut stack = vec![std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("src")];
        while let Some(dir) = stack.pop() {
            for entry in std::fs::read_dir(&dir).unwrap() {
                let path = entry.unwrap().path();
                if path.is_dir() {
                    stack.push(path);
                    continue;
                }
                if path.extension().is_none_or(|e| e != "rs") || path.ends_with("src/settings.rs") {
                    continue;
                }
                let text = std::fs::read_to_string(&path).unwrap();
                for read in ["var(\"HRX_", "var_os(\"HRX_"] {
                    if text.contains(read) {
                        direct.push(path.display().to_string());
                    }
                }
                let mut rest = text.as_str();
                while let Some(at) = rest.find("HRX_") {
                    let name: String = rest[at..]
                        .chars()
                        .take_while(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || *c == '_')
                        .collect();
                    // A family (`HRX_VK_*`) names no one variable; scripts/device_bench's own
                    // settings (cited where a measurement was made) are not hrx's.
                    if !name.ends_with('_') && !name.starts_with("HRX_DEVBENCH_") {
                        found.insert(name);
                    }
                    rest = &rest[at + 4..];
                }
            }
        }
        assert!(found.len() > 10, "the scan found only {found:?}");
        let declared: std::collections::BTreeSet<String> = ALL.iter().map(|v| v.name.to_owned()).collect();
        let undeclared: Vec<&String> = found.difference(&declared).collect();
        assert!(undeclared.is_empty(), "HRX_ names in src/ that settings.rs does not declare: {undeclared:?}");
        assert!(direct.is_empty(), "HRX_ variables read outside settings.rs: {direct:?}");
    }
}
