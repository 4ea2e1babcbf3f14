// Bindings and push constants shared by the matrix kernels: d[n, c] = sum_k w[k, n] x[k, c]
// (ggml's mul_mat), plus r[n, c] when a residual is fused in (a matrix product whose only
// consumer adds it to r: one dispatch instead of two, the same rounding), or r[n] when that
// consumer adds one row to every column (a bias). Output columns
// c = (m, i2, i3) over ne.yzw; w has one matrix for all.

layout(set = 0, binding = 1) readonly buffer W { uint w[]; };
layout(set = 0, binding = 2) readonly buffer X { float x[]; };
layout(set = 0, binding = 3) readonly buffer R { float r[]; };
layout(set = 0, binding = 5) writeonly buffer D { float d[]; };

layout(push_constant) uniform Params {
    uvec4 ne;      // output shape: N (rows of w), M, n2, n3 (maximal)
    uvec4 dyn;     // dynamic axis of the output (common.glsl)
    uvec4 x_nb;    // x: offset, nb1, nb2, nb3 (floats); unit stride along K
    uvec4 d_nb;    // d: offset, nb1, nb2, nb3 (floats); unit stride along N
    uint K;        // inner dimension
    uint w_off;    // byte offset of w's first row
    uint w_nb1;    // bytes per row of w
    uint r_off;    // a residual r added to d (laid out as d, from float r_off); NO_RESIDUAL: none
    uint tpr;      // mul_mat_vec_wide: threads per row (64 or 128)
    uint pro_mode; // mul_mat_vec_wide: x computed from its producer's inputs (PRO_*)
    uint pro_off;  // float offset of the producer's second input (binding 4)
    float pro_eps; // PRO_RMS_NORM: epsilon
    uint r_row;    // 1: r is one row of N, added to every column (a bias)
} p;

// Values a row of w holds (wtype.glsl: Q6_K rows of whole quads are stored by quads).
#define W_ROW_VALUES p.K

#define PRO_NONE 0u
#define PRO_RMS_NORM 1u // x = rms_norm(x') * w, x' bound as x, w at binding 4
#define PRO_SWIGLU 2u   // x = silu(gate) * up, the gate bound as x, up at binding 4 laid out as it

#define NO_RESIDUAL 0xFFFFFFFFu

// What d holds at float index `at`, row n, for the product `v`: v, plus the residual's value
// there.
float with_residual(float v, uint at, uint n) {
    return p.r_off == NO_RESIDUAL ? v : v + r[p.r_off + (p.r_row != 0u ? n : at - p.d_nb.x)];
}

// Float offsets of column c of x and of d. Columns of the first matrix (all of them in a 2-D
// product, the usual case) need no division: the matrix kernels call this per output column.
uvec2 column_offsets(uint c, uvec4 ne) {
    uint m = c;
    uint i2 = 0u;
    uint i3 = 0u;
    if (c >= ne.y) {
        m = c % ne.y;
        i2 = (c / ne.y) % ne.z;
        i3 = c / (ne.y * ne.z);
    }
    return uvec2(p.x_nb.x + m * p.x_nb.y + i2 * p.x_nb.z + i3 * p.x_nb.w,
                 p.d_nb.x + m * p.d_nb.y + i2 * p.d_nb.z + i3 * p.d_nb.w);
}
