//! The pipeline cache on disk: what the driver compiled from our SPIR-V last time, so the
//! second start skips the compiler. A file that is missing, short, corrupt, or from another
//! device or driver is ignored (with a log line), never trusted and never fatal.
//!
//! File: `MAGIC`, then the driver's data length (u64 LE) and its FNV-1a 64 (u64 LE), then
//! the data. The driver's own header (length, version, vendor, device, cache UUID) is checked
//! against the device before the data is handed to it, since not every driver survives
//! foreign bytes.

use super::info::DeviceInfo;
use std::path::{Path, PathBuf};

const MAGIC: &[u8; 8] = b"HRXPCv1\0";
const HEADER: usize = 8 + 8 + 8;

fn fnv1a64(data: &[u8]) -> u64 {
    data.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3))
}

/// The cache folder: `$XDG_CACHE_HOME/hrx`, else `$HOME/.cache/hrx`; None if neither is set.
pub fn default_dir() -> Option<PathBuf> {
    let nonempty = |k: &str| std::env::var_os(k).filter(|v| !v.is_empty()).map(PathBuf::from);
    nonempty("XDG_CACHE_HOME").or_else(|| nonempty("HOME").map(|h| h.join(".cache"))).map(|d| d.join("hrx"))
}

/// One file per device and driver build (the cache UUID changes with the driver).
pub fn file_for(dir: &Path, info: &DeviceInfo) -> PathBuf {
    let uuid: String = info.pipeline_cache_uuid.iter().map(|b| format!("{b:02x}")).collect();
    dir.join(format!("pipelines-{:04x}-{:04x}-{uuid}.bin", info.vendor_id, info.device_id))
}

/// The file's contents framed for saving.
pub fn encode(data: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER + data.len());
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&(data.len() as u64).to_le_bytes());
    out.extend_from_slice(&fnv1a64(data).to_le_bytes());
    out.extend_from_slice(data);
    out
}

/// The driver data in `file`, if it is intact and made by this device and driver.
pub fn decode<'a>(file: &'a [u8], info: &DeviceInfo) -> Result<&'a [u8], String> {
    let u64_at = |o: usize| file.get(o..o + 8).map(|b| u64::from_le_bytes(b.try_into().unwrap_or([0; 8])));
    if file.len() < HEADER || &file[..8] != MAGIC {
        return Err("not an hrx pipeline cache".into());
    }
    let (len, sum) = (u64_at(8).unwrap_or(0), u64_at(16).unwrap_or(0));
    let data = &file[HEADER..];
    if data.len() as u64 != len || fnv1a64(data) != sum {
        return Err("truncated or corrupt".into());
    }
    // VkPipelineCacheHeaderVersionOne: header size, version 1, vendor, device, uuid.
    let u32_at = |o: usize| data.get(o..o + 4).map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]));
    let ok = data.len() >= 32
        && u32_at(0).is_some_and(|h| h >= 32 && h as usize <= data.len())
        && u32_at(4) == Some(1)
        && u32_at(8) == Some(info.vendor_id)
        && u32_at(12) == Some(info.device_id)
        && data[16..32] == info.pipeline_cache_uuid;
    if !ok {
        return Err("made by another device or driver".into());
    }
    Ok(data)
}

/// Reads the cache for `info` from `path`: empty when absent or unusable.
pub fn load(path: &Path, info: &DeviceInfo) -> Vec<u8> {
    match std::fs::read(path) {
        Ok(file) => match decode(&file, info) {
            Ok(data) => data.to_vec(),
            Err(why) => {
                log::warn!("ignoring pipeline cache {}: {why}", path.display());
                Vec::new()
            }
        },
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(e) => {
            log::warn!("ignoring pipeline cache {}: {e}", path.display());
            Vec::new()
        }
    }
}

/// Writes the cache atomically (temporary file, then rename); failures are logged only.
pub fn save(path: &Path, data: &[u8]) {
    let result = (|| {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        let tmp = path.with_extension(format!("tmp{}", std::process::id()));
        std::fs::write(&tmp, encode(data))?;
        std::fs::rename(&tmp, path)
    })();
    if let Err(e) = result {
        log::warn!("could not save the pipeline cache {}: {e}", path.display());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::vulkan::info::DeviceKind;

    fn info() -> DeviceInfo {
        DeviceInfo {
            name: "test".into(),
            vendor_id: 0x10005,
            device_id: 7,
            pipeline_cache_uuid: [9; 16],
            ..DeviceInfo::fake(0, DeviceKind::Cpu)
        }
    }

    fn driver_blob(info: &DeviceInfo) -> Vec<u8> {
        let mut d = Vec::new();
        for v in [32u32, 1, info.vendor_id, info.device_id] {
            d.extend_from_slice(&v.to_le_bytes());
        }
        d.extend_from_slice(&info.pipeline_cache_uuid);
        d.extend_from_slice(b"compiled pipelines");
        d
    }

    #[test]
    fn round_trips_and_rejects_damage() {
        let info = info();
        let blob = driver_blob(&info);
        let file = encode(&blob);
        assert_eq!(decode(&file, &info).unwrap(), &blob[..]);
        // Every truncation and every single flipped byte is refused.
        for n in 0..file.len() {
            assert!(decode(&file[..n], &info).is_err(), "truncated to {n}");
            let mut bad = file.clone();
            bad[n] ^= 0x40;
            assert!(decode(&bad, &info).is_err(), "byte {n} flipped");
        }
        let mut other = info.clone();
        other.pipeline_cache_uuid[0] = 1;
        assert!(decode(&file, &other).is_err());
        assert!(decode(b"garbage", &info).is_err());
    }

    #[test]
    fn load_ignores_missing_and_corrupt_files() {
        let info = info();
        let dir = std::env::temp_dir().join(format!("hrx-cache-test-{}", std::process::id()));
        let path = file_for(&dir, &info);
        assert!(load(&path, &info).is_empty());
        save(&path, &driver_blob(&info));
        assert_eq!(load(&path, &info), driver_blob(&info));
        std::fs::write(&path, b"HRXPCv1\0 not really").unwrap();
        assert!(load(&path, &info).is_empty());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
