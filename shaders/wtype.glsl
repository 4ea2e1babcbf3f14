// Picks the weight decoder named by the build: -DW_F32, -DW_F16, -DW_BF16, -DW_Q8_0, -DW_Q4_K, -DW_Q5_K, -DW_Q6_K.
// Each defines W_BLOCK (values per block), load_w4(row, k) (values k..k+3 of the row starting
// at byte `row`; k a multiple of 4) and load_w1(row, k).
#include "bytes.glsl"
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
