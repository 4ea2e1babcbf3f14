// F32 weights: value k of a row at byte row + 4k.
#define W_BLOCK 1u

float load_w1(uint row, uint k) {
    return uintBitsToFloat(w[(row >> 2u) + k]);
}

vec4 load_w4(uint row, uint k) {
    uint i = (row >> 2u) + k;
    return uintBitsToFloat(uvec4(w[i], w[i + 1u], w[i + 2u], w[i + 3u]));
}
