//! Generates the Vulkan backend's kernel table from shaders/modules.txt, the one place where
//! kernel families and weight types are declared (scripts/build_shaders compiles from it too):
//! the weight types (`WType`) and every embedded SPIR-V module (name, bytes). The SPIR-V
//! itself is checked in (shaders/spv), so a build never needs a shader compiler.

use std::fmt::Write as _;
use std::path::Path;

fn main() {
    let root = std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR");
    let table_path = Path::new(&root).join("shaders/modules.txt");
    println!("cargo:rerun-if-changed={}", table_path.display());
    let table = std::fs::read_to_string(&table_path).unwrap_or_else(|e| panic!("{}: {e}", table_path.display()));
    let mut wtypes: Vec<(String, String)> = Vec::new(); // (suffix, DType variant)
    let mut families: Vec<(String, bool)> = Vec::new(); // (family, one module per weight type)
    for (n, line) in table.lines().enumerate() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        match fields.as_slice() {
            [] => {}
            [first, ..] if first.starts_with('#') => {}
            ["wtype", suffix, _define, dtype] => wtypes.push((suffix.to_string(), dtype.to_string())),
            ["module", family, _source, _target, types, defines @ ..]
                if (*types == "each" || *types == "-") && defines.iter().all(|d| d.starts_with("-D")) =>
            {
                families.push((family.to_string(), *types == "each"))
            }
            _ => panic!("shaders/modules.txt:{}: cannot read {line:?}", n + 1),
        }
    }
    let mut out = String::new();
    out.push_str("/// A weight type the matrix and row kernels decode (shaders/modules.txt).\n");
    out.push_str("#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]\npub enum WType {\n");
    for (_, dtype) in &wtypes {
        writeln!(out, "    {dtype},").unwrap();
    }
    out.push_str("}\n\nimpl WType {\n");
    writeln!(
        out,
        "    pub const ALL: [WType; {}] = [{}];",
        wtypes.len(),
        wtypes.iter().map(|(_, d)| format!("WType::{d}")).collect::<Vec<_>>().join(", ")
    )
    .unwrap();
    out.push_str("\n    /// The suffix of its modules' names: `q4_k` in `mul_mat_vec_q4_k`.\n    pub fn suffix(self) -> &'static str {\n        match self {\n");
    for (suffix, dtype) in &wtypes {
        writeln!(out, "            WType::{dtype} => \"{suffix}\",").unwrap();
    }
    out.push_str(
        "        }\n    }\n\n    pub fn from_dtype(d: crate::quant::DType) -> Option<WType> {\n        match d {\n",
    );
    for (_, dtype) in &wtypes {
        writeln!(out, "            crate::quant::DType::{dtype} => Some(WType::{dtype}),").unwrap();
    }
    out.push_str("            _ => None,\n        }\n    }\n}\n\n");
    let mut modules = Vec::new();
    for (family, each) in &families {
        if *each {
            modules.extend(wtypes.iter().map(|(suffix, _)| format!("{family}_{suffix}")));
        } else {
            modules.push(family.clone());
        }
    }
    out.push_str("/// Every embedded SPIR-V module: its name (the file stem under shaders/spv/) and bytes.\n");
    writeln!(out, "pub static MODULES: [(&str, &[u8]); {}] = [", modules.len()).unwrap();
    for m in &modules {
        let spv = Path::new(&root).join(format!("shaders/spv/{m}.spv"));
        writeln!(out, "    ({m:?}, include_bytes!({:?})),", spv.display().to_string()).unwrap();
    }
    out.push_str("];\n");
    let dest = Path::new(&std::env::var("OUT_DIR").expect("cargo sets OUT_DIR")).join("kernel_table.rs");
    std::fs::write(&dest, out).unwrap_or_else(|e| panic!("{}: {e}", dest.display()));
}
