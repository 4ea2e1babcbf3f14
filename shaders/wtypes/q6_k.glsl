// Q6_K (210 bytes per 256 values): ql[128] (low 4 bits), qh[64] (high 2 bits), scales[16]
// (i8), d (f16). Value v: half n = v / 128, quarter t = (v % 128) / 32, l = v % 32;
// low bits: nibble (t >= 2 ? high : low) of ql[64n + 32(t & 1) + l]; high bits: bits 2t..2t+1
// of qh[32n + l]; scale scales[8n + l / 16 + 2t]; value = d * scale * (q - 32)
// (ggml's dequantize_row_q6_K).
#define W_BLOCK 256u

vec4 load_w4(uint row, uint k) {
    uint blk = row + (k / 256u) * 210u;
    uint v = k % 256u;
    uint n = v / 128u;
    uint t = (v % 128u) / 32u;
    uint l = v % 32u;
    uint lo = load_u32(blk + 64u * n + 32u * (t & 1u) + l);
    if (t >= 2u) {
        lo >>= 4u;
    }
    lo &= 0x0F0F0F0Fu;
    uint hi = (load_u32(blk + 128u + 32u * n + l) >> (2u * t)) & 0x03030303u;
    uint q = lo | (hi << 4u);
    vec4 qf = vec4(uvec4(q, q >> 8u, q >> 16u, q >> 24u) & 0xFFu) - 32.0;
    float d = load_f16(blk + 208u);
    float sc = float(int(load_u8(blk + 192u + 8u * n + l / 16u + 2u * t) << 24) >> 24);
    return (d * sc) * qf;
}

float load_w1(uint row, uint k) {
    return load_w4(row, k & ~3u)[k & 3u];
}
