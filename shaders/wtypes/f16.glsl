// F16 weights: value k of a row at byte row + 2k (rows may start 2-byte aligned).
#define W_BLOCK 1u

float load_w1(uint row, uint k) {
    return load_f16(row + 2u * k);
}

vec4 load_w4(uint row, uint k) {
    uint off = row + 2u * k;
    return vec4(unpackHalf2x16(load_u32(off)), unpackHalf2x16(load_u32(off + 4u)));
}

#if defined(W16)
// A chunk: 32 bytes, two 16-byte words (fetch_halves16).
#define W16_RAW 2u

void fetch16(uint row, uint k, out uvec4 raw[W16_RAW]) {
    fetch_halves16(row, k, raw);
}

void decode16(uvec4 raw[W16_RAW], uint row, uint k, out vec4 v[4]) {
    [[unroll]] for (uint i = 0u; i < 2u; i++) {
        v[2u * i] = vec4(unpackHalf2x16(raw[i].x), unpackHalf2x16(raw[i].y));
        v[2u * i + 1u] = vec4(unpackHalf2x16(raw[i].z), unpackHalf2x16(raw[i].w));
    }
}
#endif
