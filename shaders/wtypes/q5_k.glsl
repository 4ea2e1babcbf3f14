// Q5_K (176 bytes per 256 values): d, dmin (f16), scales[12] (as Q4_K), qh[32], qs[128].
// Value v: chunk c = v / 64, half h = (v / 32) % 2, l = v % 32: the low (h = 0) or high
// nibble of qs[32c + l], plus 16 where bit 2c + h of qh[l] is set; sub-block s = v / 32;
// value = d * sc[s] * q - dmin * m[s] (ggml's dequantize_row_q5_K).
#define W_BLOCK 256u

#include "k_scales.glsl"

vec4 load_w4(uint row, uint k) {
    uint blk = row + (k / 256u) * 176u;
    uint v = k % 256u;
    uint c = v / 64u;
    uint h = (v / 32u) % 2u;
    uint l = v % 32u;
    vec2 dm = unpackHalf2x16(load_u32(blk));
    vec2 sm = q4_k_scale_min(blk, v / 32u);
    uint q = (load_u32(blk + 48u + 32u * c + l) >> (4u * h)) & 0x0F0F0F0Fu;
    uint hi = (load_u32(blk + 16u + l) >> (2u * c + h)) & 0x01010101u;
    q |= hi << 4u;
    vec4 qf = u8x4(q);
    return (dm.x * sm.x) * qf - dm.y * sm.y;
}

float load_w1(uint row, uint k) {
    return load_w4(row, k & ~3u)[k & 3u];
}

#if defined(W16)
// A chunk: the block's first 16 bytes (d, dmin, the scales), its 16 bytes of qs and the 16
// bytes of qh that hold its fifth bits.
#define W16_RAW 3u

void fetch16(uint row, uint k, out uvec4 raw[W16_RAW]) {
    uint blk = row + (k / 256u) * 176u;
    uint v = k % 256u;
    raw[0] = w_vec4[blk >> 4u];
    raw[1] = w_vec4[(blk + 48u + 32u * (v / 64u) + v % 32u) >> 4u];
    raw[2] = w_vec4[(blk + 16u + v % 32u) >> 4u];
}

void decode16(uvec4 raw[W16_RAW], uint row, uint k, out vec4 v[4]) {
    uint s = (k % 256u) / 32u;
    vec2 sb = q4_k_scale_bias(raw[0], s);
    uint sh = 4u * (s & 1u);
    [[unroll]] for (uint i = 0u; i < 4u; i++) {
        uint q = ((raw[1][i] >> sh) & 0x0F0F0F0Fu) | (((raw[2][i] >> s) & 0x01010101u) << 4u);
        v[i] = sb.x * u8x4(q) - sb.y;
    }
}
#endif
