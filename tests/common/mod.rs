//! Shared test helpers: finding the oracle, making images.
#![allow(dead_code)] // each test binary uses its own subset

pub mod cases;
pub mod schemas;
pub mod server;
pub mod together;

use std::io::Write;
use std::path::{Path, PathBuf};

/// A fresh folder of one test's own in the system's temp folder, removed with what the test
/// left in it when dropped (also when the test fails).
pub struct TempDir(PathBuf);

impl TempDir {
    /// `hrx-test-TAG-PID`, emptied first.
    pub fn new(tag: &str) -> TempDir {
        let dir = std::env::temp_dir().join(format!("hrx-test-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }

    pub fn join(&self, name: impl AsRef<Path>) -> PathBuf {
        self.0.join(name)
    }

    /// Writes `bytes` to the file `name` in the folder and returns its path.
    pub fn file(&self, name: &str, bytes: &[u8]) -> PathBuf {
        let path = self.join(name);
        std::fs::write(&path, bytes).unwrap();
        path
    }
}

// Where a path or an environment value is wanted (current_dir, env("HOME", ..)).
impl AsRef<Path> for TempDir {
    fn as_ref(&self) -> &Path {
        &self.0
    }
}

impl AsRef<std::ffi::OsStr> for TempDir {
    fn as_ref(&self) -> &std::ffi::OsStr {
        self.0.as_os_str()
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The oracle directory: `HRX_ORACLE`, else the repository's own `tests/oracle`.
/// Missing, the test fails: a skipped check must not read as a pass. With
/// `HRX_ALLOW_NO_ORACLE=1` (never under `CI=true`) it returns None and the caller skips, after
/// a line on stderr that the test harness does not hide and one in `$HRX_ORACLE_SKIPS` (the
/// file `scripts/test` counts at the end).
pub fn oracle() -> Option<PathBuf> {
    let dir = std::env::var_os("HRX_ORACLE")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/oracle"));
    if dir.join("README.md").is_file() {
        return Some(dir);
    }
    let msg = format!("ORACLE MISSING: {} has no README.md (set HRX_ORACLE)", dir.display());
    let ci = std::env::var("CI").is_ok_and(|v| v == "true");
    if ci || !std::env::var("HRX_ALLOW_NO_ORACLE").is_ok_and(|v| v == "1") {
        panic!("{msg}; HRX_ALLOW_NO_ORACLE=1 skips the oracle checks instead (not under CI=true)");
    }
    let test = std::thread::current().name().unwrap_or("?").to_owned();
    // eprintln! is captured for passing tests; a write to the stream itself is not.
    let _ = writeln!(std::io::stderr(), "!!!!! {msg}: SKIPPING {test} !!!!!");
    if let Some(log) = std::env::var_os("HRX_ORACLE_SKIPS") {
        let line = format!("{}: {test}\n", env!("CARGO_CRATE_NAME"));
        let appended = std::fs::OpenOptions::new().create(true).append(true).open(&log);
        appended.and_then(|mut f| f.write_all(line.as_bytes())).expect("append to $HRX_ORACLE_SKIPS");
    }
    None
}

/// A PNG of `width` x `height` gray pixels, all black: a few KB that decode to w x h bytes.
pub fn black_png(width: u32, height: u32) -> Vec<u8> {
    let mut out = Vec::new();
    let mut encoder = png::Encoder::new(&mut out, width, height);
    encoder.set_color(png::ColorType::Grayscale);
    let mut writer = encoder.write_header().expect("PNG header");
    writer.write_image_data(&vec![0u8; (width * height) as usize]).expect("PNG data");
    writer.finish().expect("PNG end");
    out
}

/// The oracle's GGUF files, all of them (the directory must hold some).
pub fn oracle_ggufs(oracle: &std::path::Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for model in std::fs::read_dir(oracle.join("models")).expect("oracle/models") {
        let model = model.expect("dir entry").path();
        for f in std::fs::read_dir(&model).expect("model dir") {
            let f = f.expect("dir entry").path();
            if f.extension().is_some_and(|e| e == "gguf") {
                out.push(f);
            }
        }
    }
    out.sort();
    assert!(!out.is_empty(), "no GGUF files under {}", oracle.display());
    out
}
