//! What the self-check found on a device, kept beside its pipeline cache so that a later start
//! of the same hrx on the same device and driver checks only what is new. One JSON file per
//! device and driver build (named as the pipeline cache is); it holds the hrx build it was
//! made by, and a file of another build, or one that does not read, is started afresh.

use super::super::info::DeviceInfo;
use super::super::kernels::KernelId;
use crate::dispatcher::Kernel;
use crate::json::Json;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// What became of one check.
#[derive(Clone, Debug, PartialEq)]
pub enum Verdict {
    Passed,
    /// The kernel gave wrong results or none: it is not used here.
    Failed {
        kernel: KernelId,
        why: String,
    },
    /// The check could not be made; the kernel is used.
    Unchecked(String),
}

/// Every check made on a device: the subgroup probe at each size, and each case by its key.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Record {
    pub probes: BTreeMap<u32, Option<String>>,
    pub cases: BTreeMap<String, Verdict>,
}

/// The record's file for `info` in `dir`.
pub fn file_for(dir: &Path, info: &DeviceInfo) -> PathBuf {
    let uuid: String = info.pipeline_cache_uuid.iter().map(|b| format!("{b:02x}")).collect();
    dir.join(format!("selfcheck-{:04x}-{:04x}-{uuid}.json", info.vendor_id, info.device_id))
}

/// This hrx build: its version and its executable's size and time (a rebuild checks again).
pub fn build_id() -> String {
    let exe = std::env::current_exe().and_then(std::fs::metadata).ok();
    let size = exe.as_ref().map_or(0, |m| m.len());
    let time = exe
        .and_then(|m| m.modified().ok())
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map_or(0, |d| d.as_secs());
    format!("{} {size} {time}", env!("CARGO_PKG_VERSION"))
}

/// The record at `path` if it was made by `build`; empty otherwise (said in the log when the
/// file is there but unusable).
pub fn load(path: &Path, build: &str) -> Record {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Record::default(),
        Err(e) => {
            log::warn!("ignoring the self-check record {}: {e}", path.display());
            return Record::default();
        }
    };
    match parse(&text, build) {
        Ok(Some(r)) => r,
        Ok(None) => {
            log::info!("the self-check record {} is another hrx build's: checking afresh", path.display());
            Record::default()
        }
        Err(why) => {
            log::warn!("ignoring the self-check record {}: {why}", path.display());
            Record::default()
        }
    }
}

fn parse(text: &str, build: &str) -> Result<Option<Record>, String> {
    let json = crate::json::parse_ordered(text, 8)?;
    let field = |o: &Json, k: &str| match o {
        Json::Obj(pairs) => pairs.iter().find(|(key, _)| key == k).map(|(_, v)| v.clone()),
        _ => None,
    };
    let string = |o: &Json, k: &str| match field(o, k) {
        Some(Json::Str(s)) => Some(s),
        _ => None,
    };
    if string(&json, "hrx").as_deref() != Some(build) {
        return Ok(None);
    }
    let mut r = Record::default();
    let Some(Json::Arr(probes)) = field(&json, "probes") else { return Err("no probes".into()) };
    for p in &probes {
        let Some(Json::Int(size)) = field(p, "subgroup") else { return Err("a probe without its size".into()) };
        let size = u32::try_from(size).map_err(|_| "a probe's size")?;
        r.probes.insert(size, string(p, "error"));
    }
    let Some(Json::Arr(cases)) = field(&json, "cases") else { return Err("no cases".into()) };
    for c in &cases {
        let key = string(c, "key").ok_or("a case without its key")?;
        let why = string(c, "why").unwrap_or_default();
        let verdict = match string(c, "verdict").as_deref() {
            Some("passed") => Verdict::Passed,
            Some("unchecked") => Verdict::Unchecked(why),
            Some("failed") => {
                let name = string(c, "kernel").ok_or("a failed case without its kernel")?;
                let subgroup = match field(c, "subgroup") {
                    Some(Json::Int(s)) => Some(u32::try_from(s).map_err(|_| "a kernel's subgroup")?),
                    _ => None,
                };
                let shape = match field(c, "shape") {
                    Some(Json::Arr(v)) => {
                        let dims: Vec<u32> = v
                            .iter()
                            .filter_map(|d| if let Json::Int(d) = d { u32::try_from(*d).ok() } else { None })
                            .collect();
                        Some(<[u32; 3]>::try_from(dims).map_err(|_| "a kernel's shape")?)
                    }
                    _ => None,
                };
                let planned = Kernel { subgroup, shape, ..Kernel::named(name.clone()) };
                let kernel = KernelId::from_name(&planned).ok_or_else(|| format!("no kernel {name}"))?;
                Verdict::Failed { kernel, why }
            }
            other => return Err(format!("a case's verdict {other:?}")),
        };
        r.cases.insert(key, verdict);
    }
    Ok(Some(r))
}

/// Writes `record` (made by `build` on `info`'s device) at `path`, atomically; a failure is
/// logged only (the next start checks again).
pub fn save(path: &Path, record: &Record, build: &str, info: &DeviceInfo) {
    let probes = record.probes.iter().map(|(size, error)| {
        Json::obj([("subgroup", Json::Int((*size).into())), ("error", error.clone().map_or(Json::Null, Json::Str))])
    });
    let cases = record.cases.iter().map(|(key, verdict)| {
        let mut fields = vec![("key", Json::str(key.clone()))];
        match verdict {
            Verdict::Passed => fields.push(("verdict", Json::str("passed"))),
            Verdict::Unchecked(why) => {
                fields.extend([("verdict", Json::str("unchecked")), ("why", Json::str(why.clone()))])
            }
            Verdict::Failed { kernel, why } => fields.extend([
                ("verdict", Json::str("failed")),
                ("why", Json::str(why.clone())),
                ("kernel", Json::str(kernel.name())),
                ("subgroup", kernel.subgroup().map_or(Json::Null, |s| Json::Int(s.into()))),
                ("shape", kernel.shape().map_or(Json::Null, |s| Json::Arr(s.map(|d| Json::Int(d.into())).to_vec()))),
            ]),
        }
        Json::obj(fields)
    });
    let json = Json::obj([
        ("hrx", Json::str(build)),
        ("device", Json::str(info.name.clone())),
        ("driver", Json::str(info.driver())),
        ("probes", Json::Arr(probes.collect())),
        ("cases", Json::Arr(cases.collect())),
    ]);
    let result = (|| {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        let tmp = path.with_extension(format!("tmp{}", std::process::id()));
        std::fs::write(&tmp, json.to_string_compact() + "\n")?;
        std::fs::rename(&tmp, path)
    })();
    if let Err(e) = result {
        log::warn!("could not save the self-check record {}: {e}", path.display());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::vulkan::info::DeviceKind;
    use crate::backend::vulkan::kernels::{MatKind, Values, WType};

    #[test]
    fn a_record_round_trips_and_another_builds_is_ignored() {
        let info = DeviceInfo::fake(0, DeviceKind::Discrete);
        let dir = std::env::temp_dir().join(format!("hrx-selfcheck-record-{}", std::process::id()));
        let path = file_for(&dir, &info);
        let mut r = Record::default();
        r.probes.insert(32, None);
        r.probes.insert(64, Some("runs 16".into()));
        r.cases.insert("a".into(), Verdict::Passed);
        r.cases.insert("b".into(), Verdict::Unchecked("no inputs".into()));
        let kernel = KernelId::MatMul(MatKind::VecSg { subgroup: 32 }, WType::Q4K, Values::F32);
        r.cases.insert("c".into(), Verdict::Failed { kernel, why: "wrong".into() });
        save(&path, &r, "build 1", &info);
        assert_eq!(load(&path, "build 1"), r);
        assert_eq!(load(&path, "build 2"), Record::default());
        std::fs::write(&path, "{\"hrx\":\"build 1\",\"probes\":[{}]}").unwrap();
        assert_eq!(load(&path, "build 1"), Record::default());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
