// Byte-addressed reads from a buffer declared as `uint w[]` (weights of any dtype): portable
// GLSL 450 without 8/16-bit storage. Offsets are in bytes and need no alignment.

uint load_u32(uint off) {
    uint i = off >> 2u;
    uint sh = (off & 3u) * 8u;
    if (sh == 0u) {
        return w[i];
    }
    return (w[i] >> sh) | (w[i + 1u] << (32u - sh));
}

uint load_u16(uint off) {
    return (w[off >> 2u] >> ((off & 2u) * 8u)) & 0xFFFFu;
}

uint load_u8(uint off) {
    return (w[off >> 2u] >> ((off & 3u) * 8u)) & 0xFFu;
}

float load_f16(uint off) {
    return unpackHalf2x16(load_u16(off)).x;
}

// The four unsigned bytes of a word, low byte first. Converted without a conversion instruction
// (the bits of 2^23 + v less 2^23, here, in the wide mat-vec kernel's nibbles and for signed
// bytes) the matrix kernels ran no faster on the H200 (2B shape, tg128 393.1 +- 1.4 against
// 399.7 +- 1.0 tok/s; 2048 -> 6144 Q4_K at one column 9.9 against 9.4 us): NVIDIA's
// quarter-rate conversions do not bound them.
vec4 u8x4(uint v) {
    return vec4(uvec4(v, v >> 8u, v >> 16u, v >> 24u) & 0xFFu);
}

// The four signed bytes of a word, low byte first.
vec4 i8x4(uint v) {
    ivec4 s = ivec4(int(v) << 24, int(v) << 16, int(v) << 8, int(v)) >> 24;
    return vec4(s);
}
