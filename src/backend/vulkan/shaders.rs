//! The kernel table of shaders/modules.txt, as build.rs generates it: the weight types the
//! kernels decode ([`WType`]) and the SPIR-V of every module, compiled from shaders/ by
//! scripts/build_shaders and embedded, so that building hrx needs no shader compiler.

include!(concat!(env!("OUT_DIR"), "/kernel_table.rs"));

/// The SPIR-V module named `name` (the file stem under shaders/spv/).
pub fn spirv(name: &str) -> Option<&'static [u8]> {
    MODULES.iter().find(|(n, _)| *n == name).map(|(_, code)| *code)
}

#[cfg(test)]
mod tests {
    #[test]
    fn every_module_is_spirv() {
        for (name, code) in super::MODULES {
            assert_eq!(code.len() % 4, 0, "{name}");
            assert_eq!(&code[..4], &0x0723_0203u32.to_le_bytes(), "{name}: SPIR-V magic");
        }
        assert!(super::spirv("nope").is_none());
    }
}
