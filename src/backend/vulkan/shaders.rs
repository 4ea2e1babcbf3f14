//! The SPIR-V of every kernel, compiled from shaders/ by scripts/build_shaders and embedded,
//! so that building hrx needs no shader compiler.

macro_rules! spv {
    ($name:literal) => {
        include_bytes!(concat!(env!("CARGO_MANIFEST_DIR"), "/shaders/spv/", $name, ".spv"))
    };
}

/// The SPIR-V module named `name` (the file stem under shaders/spv/).
pub fn spirv(name: &str) -> Option<&'static [u8]> {
    Some(match name {
        "mul_mat_vec_f32" => spv!("mul_mat_vec_f32"),
        "mul_mat_vec_f16" => spv!("mul_mat_vec_f16"),
        "mul_mat_vec_bf16" => spv!("mul_mat_vec_bf16"),
        "mul_mat_vec_q8_0" => spv!("mul_mat_vec_q8_0"),
        "mul_mat_vec_q4_k" => spv!("mul_mat_vec_q4_k"),
        "mul_mat_vec_q5_k" => spv!("mul_mat_vec_q5_k"),
        "mul_mat_vec_q6_k" => spv!("mul_mat_vec_q6_k"),
        "mul_mat_vec_sg_f32" => spv!("mul_mat_vec_sg_f32"),
        "mul_mat_vec_sg_f16" => spv!("mul_mat_vec_sg_f16"),
        "mul_mat_vec_sg_bf16" => spv!("mul_mat_vec_sg_bf16"),
        "mul_mat_vec_sg_q8_0" => spv!("mul_mat_vec_sg_q8_0"),
        "mul_mat_vec_sg_q4_k" => spv!("mul_mat_vec_sg_q4_k"),
        "mul_mat_vec_sg_q5_k" => spv!("mul_mat_vec_sg_q5_k"),
        "mul_mat_vec_sg_q6_k" => spv!("mul_mat_vec_sg_q6_k"),
        "mul_mat_f32" => spv!("mul_mat_f32"),
        "mul_mat_f16" => spv!("mul_mat_f16"),
        "mul_mat_bf16" => spv!("mul_mat_bf16"),
        "mul_mat_q8_0" => spv!("mul_mat_q8_0"),
        "mul_mat_q4_k" => spv!("mul_mat_q4_k"),
        "mul_mat_q5_k" => spv!("mul_mat_q5_k"),
        "mul_mat_q6_k" => spv!("mul_mat_q6_k"),
        "mul_mat_cm_f32" => spv!("mul_mat_cm_f32"),
        "mul_mat_cm_f16" => spv!("mul_mat_cm_f16"),
        "mul_mat_cm_bf16" => spv!("mul_mat_cm_bf16"),
        "mul_mat_cm_q8_0" => spv!("mul_mat_cm_q8_0"),
        "mul_mat_cm_q4_k" => spv!("mul_mat_cm_q4_k"),
        "mul_mat_cm_q5_k" => spv!("mul_mat_cm_q5_k"),
        "mul_mat_cm_q6_k" => spv!("mul_mat_cm_q6_k"),
        "mul_mat_rows_f32" => spv!("mul_mat_rows_f32"),
        "mul_mat_rows_f16" => spv!("mul_mat_rows_f16"),
        "mul_mat_rows_bf16" => spv!("mul_mat_rows_bf16"),
        "mul_mat_rows_q8_0" => spv!("mul_mat_rows_q8_0"),
        "mul_mat_rows_q4_k" => spv!("mul_mat_rows_q4_k"),
        "mul_mat_rows_q5_k" => spv!("mul_mat_rows_q5_k"),
        "mul_mat_rows_q6_k" => spv!("mul_mat_rows_q6_k"),
        "binary" => spv!("binary"),
        "rms_norm" => spv!("rms_norm"),
        "get_rows_f32" => spv!("get_rows_f32"),
        "get_rows_f16" => spv!("get_rows_f16"),
        "get_rows_bf16" => spv!("get_rows_bf16"),
        "get_rows_q8_0" => spv!("get_rows_q8_0"),
        "get_rows_q4_k" => spv!("get_rows_q4_k"),
        "get_rows_q5_k" => spv!("get_rows_q5_k"),
        "get_rows_q6_k" => spv!("get_rows_q6_k"),
        "layer_norm" => spv!("layer_norm"),
        "unary" => spv!("unary"),
        "set_rows" => spv!("set_rows"),
        "rope" => spv!("rope"),
        "rms_norm_rope" => spv!("rms_norm_rope"),
        "flash_attn" => spv!("flash_attn"),
        _ => return None,
    })
}

/// Every embedded module's name.
pub const ALL: [&str; 50] = [
    "mul_mat_vec_f32",
    "mul_mat_vec_f16",
    "mul_mat_vec_bf16",
    "mul_mat_vec_q8_0",
    "mul_mat_vec_q4_k",
    "mul_mat_vec_q5_k",
    "mul_mat_vec_q6_k",
    "mul_mat_vec_sg_f32",
    "mul_mat_vec_sg_f16",
    "mul_mat_vec_sg_bf16",
    "mul_mat_vec_sg_q8_0",
    "mul_mat_vec_sg_q4_k",
    "mul_mat_vec_sg_q5_k",
    "mul_mat_vec_sg_q6_k",
    "mul_mat_f32",
    "mul_mat_f16",
    "mul_mat_bf16",
    "mul_mat_q8_0",
    "mul_mat_q4_k",
    "mul_mat_q5_k",
    "mul_mat_q6_k",
    "mul_mat_cm_f32",
    "mul_mat_cm_f16",
    "mul_mat_cm_bf16",
    "mul_mat_cm_q8_0",
    "mul_mat_cm_q4_k",
    "mul_mat_cm_q5_k",
    "mul_mat_cm_q6_k",
    "mul_mat_rows_f32",
    "mul_mat_rows_f16",
    "mul_mat_rows_bf16",
    "mul_mat_rows_q8_0",
    "mul_mat_rows_q4_k",
    "mul_mat_rows_q5_k",
    "mul_mat_rows_q6_k",
    "binary",
    "rms_norm",
    "get_rows_f32",
    "get_rows_f16",
    "get_rows_bf16",
    "get_rows_q8_0",
    "get_rows_q4_k",
    "get_rows_q5_k",
    "get_rows_q6_k",
    "layer_norm",
    "unary",
    "set_rows",
    "rope",
    "rms_norm_rope",
    "flash_attn",
];

#[cfg(test)]
mod tests {
    #[test]
    fn every_module_is_spirv() {
        for name in super::ALL {
            let code = super::spirv(name).unwrap();
            assert_eq!(code.len() % 4, 0, "{name}");
            assert_eq!(&code[..4], &0x0723_0203u32.to_le_bytes(), "{name}: SPIR-V magic");
        }
        assert!(super::spirv("nope").is_none());
    }
}
