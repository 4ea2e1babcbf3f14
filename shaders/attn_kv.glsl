// K and V of the attention kernels (flash_attn*.comp; included after flash_attn_params.glsl):
// f32 values, or with KV_F16 f16 ones (a KV cache kept in halves, `Registry::cache_dtype`),
// read as pairs and quads of halves. Offsets and strides count values either way. KV_F16 is a
// specialization constant, id KV_CONSTANT (the kernel's first after its own; kernels/mod.rs
// KvValues): a pipeline reads one kind of value with no branch around its loads (a branch on a
// push constant there made a decode step at depth 2,048 on lavapipe 20 % slower).
layout(constant_id = KV_CONSTANT) const bool KV_F16 = false;

layout(set = 0, binding = 2) readonly buffer K { float k[]; };
layout(set = 0, binding = 2) readonly buffer K4 { vec4 k4[]; };
layout(set = 0, binding = 2) readonly buffer KH2 { uint k_half2[]; };
layout(set = 0, binding = 2) readonly buffer KH4 { uvec2 k_half4[]; };
layout(set = 0, binding = 2) readonly buffer KH8 { uvec4 k_half8[]; };
layout(set = 0, binding = 3) readonly buffer V { float v[]; };
layout(set = 0, binding = 3) readonly buffer V4 { vec4 v4[]; };
layout(set = 0, binding = 3) readonly buffer VH2 { uint v_half2[]; };
layout(set = 0, binding = 3) readonly buffer VH4 { uvec2 v_half4[]; };
layout(set = 0, binding = 3) readonly buffer VH8 { uvec4 v_half8[]; };

// Value i of K (is_k) or V.
float kv_at(bool is_k, uint i) {
    if (KV_F16) {
        return unpackHalf2x16(is_k ? k_half2[i >> 1u] : v_half2[i >> 1u])[i & 1u];
    }
    return is_k ? k[i] : v[i];
}

// Values i .. i + 3 of K (is_k) or V; i a multiple of 4.
vec4 kv4_at(bool is_k, uint i) {
    if (KV_F16) {
        uvec2 h = is_k ? k_half4[i >> 2u] : v_half4[i >> 2u];
        return vec4(unpackHalf2x16(h.x), unpackHalf2x16(h.y));
    }
    return is_k ? k4[i >> 2u] : v4[i >> 2u];
}
