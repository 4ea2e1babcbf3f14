// Picks the weight decoder named by the build: -DW_F32, -DW_F16, -DW_BF16, -DW_Q8_0, -DW_Q4_K, -DW_Q5_K, -DW_Q6_K.
// Each defines W_BLOCK (values per block), load_w4(row, k) (values k..k+3 of the row starting
// at byte `row`; k a multiple of 4) and load_w1(row, k).
//
// With W16 defined (the cooperative-matrix product), each also defines the 16-value chunk
// reader it stages slices with, split so that a kernel can issue the loads of one slice and
// use them a slice later: W16_RAW (16-byte words per chunk), fetch16(row, k, raw) (the loads
// of values k..k+15, k a multiple of 16, nothing computed from what they return) and
// decode16(raw, row, k, v) (the values). The alignment each needs is in kernels/matmul.rs
// (`chunk_alignment`): 16-byte aligned rows, or 2-byte for Q6_K and Q8_0, whose blocks are.
#include "bytes.glsl"
#if defined(W16)
layout(set = 0, binding = 1) readonly buffer W4 { uvec4 w_vec4[]; };

// The 32 bytes of values k..k+15 of a row of 16-bit values (F16, BF16) at byte `row`.
void fetch_halves16(uint row, uint k, out uvec4 raw[2]) {
    uint i = (row + 2u * k) >> 4u;
    raw[0] = w_vec4[i];
    raw[1] = w_vec4[i + 1u];
}

// Words i..i+3 of w, shifted down by `sh` bits (0 or 16) with word i+4 (`next`) filling in:
// the 16 bytes at byte 4i + sh / 8.
uvec4 shift_words(uvec4 a, uint next, uint sh) {
    return sh == 0u ? a : (a >> sh) | (uvec4(a.yzw, next) << (32u - sh));
}
#endif
#if defined(W_F32)
#include "wtypes/f32.glsl"
#elif defined(W_F16)
#include "wtypes/f16.glsl"
#elif defined(W_BF16)
#include "wtypes/bf16.glsl"
#elif defined(W_Q8_0)
#include "wtypes/q8_0.glsl"
#elif defined(W_Q4_K)
#include "wtypes/q4_k.glsl"
#elif defined(W_Q5_K)
#include "wtypes/q5_k.glsl"
#elif defined(W_Q6_K)
#include "wtypes/q6_k.glsl"
#else
#error "no weight type"
#endif
