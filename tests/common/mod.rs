//! Shared test helpers: finding the oracle, making images.
#![allow(dead_code)] // each test binary uses its own subset

pub mod cases;

use std::path::PathBuf;

/// The oracle directory (`HRX_ORACLE`, default `../shared/oracle` next to the crate).
/// Missing: under `CI=true` the test fails; elsewhere it says so loudly and the caller skips.
pub fn oracle() -> Option<PathBuf> {
    let dir = std::env::var_os("HRX_ORACLE")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../shared/oracle"));
    if dir.join("README.md").is_file() {
        return Some(dir);
    }
    let msg = format!("ORACLE MISSING: {} has no README.md (set HRX_ORACLE)", dir.display());
    if std::env::var("CI").is_ok_and(|v| v == "true") {
        panic!("{msg}; under CI=true this is a failure");
    }
    eprintln!("\n!!!!! {msg}: SKIPPING this test !!!!!\n");
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
