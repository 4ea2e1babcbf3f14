// Q4_K (144 bytes per 256 values): d, dmin (f16), scales[12] (8 six-bit scales and mins),
// qs[128]. Value v: chunk c = v / 64 uses bytes qs[32c .. 32c + 32], low nibbles for the first
// 32 values, high nibbles for the next 32; sub-block s = v / 32 has scale sc[s], min m[s];
// value = d * sc[s] * q - dmin * m[s] (ggml's dequantize_row_q4_K).
#define W_BLOCK 256u

#include "k_scales.glsl"

vec4 load_w4(uint row, uint k) {
    uint blk = row + (k / 256u) * 144u;
    uint v = k % 256u;
    vec2 dm;
    vec2 sm;
    uint q;
    uint qat = blk + 16u + 32u * (v / 64u) + (v % 32u);
    if ((blk & 3u) == 0u) {
        // Aligned blocks (any 4-byte aligned row): whole-word reads, no shifts across words.
        dm = unpackHalf2x16(w[blk >> 2u]);
        sm = q4_k_scale_min(blk, v / 32u);
        q = w[qat >> 2u];
    } else {
        dm = unpackHalf2x16(load_u32(blk));
        sm = q4_k_scale_min(blk, v / 32u);
        q = load_u32(qat);
    }
    if ((v & 32u) != 0u) {
        q >>= 4u;
    }
    q &= 0x0F0F0F0Fu;
    vec4 qf = u8x4(q);
    return (dm.x * sm.x) * qf - dm.y * sm.y;
}

float load_w1(uint row, uint k) {
    return load_w4(row, k & ~3u)[k & 3u];
}

#if defined(W16)
// A chunk: the block's first 16 bytes (d, dmin, the scales) and the 16 bytes of qs holding
// its values (low nibbles for the first 32 of each 64, high for the next).
#define W16_RAW 2u

void fetch16(uint row, uint k, out uvec4 raw[W16_RAW]) {
    uint blk = row + (k / 256u) * 144u;
    uint v = k % 256u;
    raw[0] = w_vec4[blk >> 4u];
    raw[1] = w_vec4[(blk + 16u + 32u * (v / 64u) + v % 32u) >> 4u];
}

void decode16(uvec4 raw[W16_RAW], uint row, uint k, out vec4 v[4]) {
    uint s = (k % 256u) / 32u;
    vec2 sb = q4_k_scale_bias(raw[0], s);
    uint sh = 4u * (s & 1u);
    [[unroll]] for (uint i = 0u; i < 4u; i++) {
        v[i] = sb.x * u8x4((raw[1][i] >> sh) & 0x0F0F0F0Fu) - sb.y;
    }
}
#endif
