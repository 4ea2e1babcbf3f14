// F32 weights: value k of a row at byte row + 4k.
#define W_BLOCK 1u

float load_w1(uint row, uint k) {
    return uintBitsToFloat(w[(row >> 2u) + k]);
}

vec4 load_w4(uint row, uint k) {
    uint i = (row >> 2u) + k;
    return uintBitsToFloat(uvec4(w[i], w[i + 1u], w[i + 2u], w[i + 3u]));
}

#if defined(W16)
// A chunk: 64 bytes, four 16-byte words.
#define W16_RAW 4u

void fetch16(uint row, uint k, out uvec4 raw[W16_RAW]) {
    uint i = (row + 4u * k) >> 4u;
    [[unroll]] for (uint j = 0u; j < 4u; j++) {
        raw[j] = w_vec4[i + j];
    }
}

void decode16(uvec4 raw[W16_RAW], uint row, uint k, out vec4 v[4]) {
    [[unroll]] for (uint j = 0u; j < 4u; j++) {
        v[j] = uintBitsToFloat(raw[j]);
    }
}
#endif
