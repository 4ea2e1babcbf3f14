//! The checked-in SPIR-V matches its sources: shaders/spv/SOURCES holds the hash of the GLSL
//! that scripts/build_shaders compiled, so editing a shader without rebuilding fails here (no
//! glslc needed), and every embedded module is listed.

use std::path::{Path, PathBuf};

fn sources(dir: &Path, base: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            if path.file_name().is_some_and(|n| n != "spv") {
                sources(&path, base, out);
            }
        } else if path.extension().is_some_and(|e| e == "comp" || e == "glsl")
            || path.file_name().is_some_and(|n| n == "modules.txt")
        {
            out.push(path.strip_prefix(base).unwrap().to_path_buf());
        }
    }
}

#[test]
fn spirv_was_built_from_these_sources() {
    let base = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("shaders");
    let mut paths = Vec::new();
    sources(&base, &base, &mut paths);
    let mut names: Vec<String> = paths.iter().map(|p| p.to_string_lossy().replace('\\', "/")).collect();
    names.sort();
    assert!(names.len() >= 6, "{names:?}");
    let mut h = 0xcbf2_9ce4_8422_2325u64;
    let mut feed = |bytes: &[u8]| {
        for &b in bytes {
            h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
        }
    };
    for name in &names {
        feed(name.as_bytes());
        feed(&[0]);
        feed(&std::fs::read(base.join(name)).unwrap());
        feed(&[0]);
    }
    let recorded = std::fs::read_to_string(base.join("spv/SOURCES")).unwrap();
    let recorded = recorded.lines().find(|l| !l.starts_with('#')).unwrap().trim().to_owned();
    assert_eq!(
        format!("{h:016x}"),
        recorded,
        "shaders/ changed since shaders/spv was built: run scripts/build_shaders"
    );
}

#[test]
fn every_spirv_file_is_embedded() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("shaders/spv");
    let mut files: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "spv"))
        .map(|p| p.file_stem().unwrap().to_string_lossy().into_owned())
        .collect();
    files.sort();
    let mut embedded: Vec<String> =
        hrx::backend::vulkan::shaders::MODULES.iter().map(|(name, _)| name.to_string()).collect();
    embedded.sort();
    assert_eq!(files, embedded);
}
