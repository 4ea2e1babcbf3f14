#version 450
// Tiled matrix-matrix product: a workgroup of 256 threads computes a 64 (rows of w) x 64
// (columns of x) tile of d, staging 16-deep slices of both operands in shared memory (weights
// dequantized on the way in); each thread accumulates a 4 x 4 block in registers. Grid-stride
// loops over row tiles (x) and column tiles (y).

#include "common.glsl"
#include "mul_mat_params.glsl"
#include "wtype.glsl"

#define BN 64u
#define BM 64u
#define BK 16u

layout(local_size_x = 256) in;

// x again, as vec4s (see mul_mat_vec_sg.comp): one load instead of four where aligned.
layout(set = 0, binding = 2) readonly buffer X4 { vec4 x_vec4[]; };

shared float ws[BK][BN + 4u];
shared float xs[BK][BM + 4u];

void main() {
    uvec4 ne = runtime_ne(p.ne, p.dyn);
    uint cols = ne.y * ne.z * ne.w;
    uint tid = gl_LocalInvocationID.x;
    uint tx = tid % 16u;   // column block
    uint ty = tid / 16u;   // row block
    // Tile loads: each thread brings 4 consecutive k of one row of w and one column of x.
    uint lr = tid / 4u;
    uint lk = (tid % 4u) * 4u;
    uint n_tiles = (ne.x + BN - 1u) / BN;
    uint c_tiles = (cols + BM - 1u) / BM;
    for (uint ct = gl_WorkGroupID.y; ct < c_tiles; ct += gl_NumWorkGroups.y) {
        uint c_load = ct * BM + lr;
        uint x_col = c_load < cols ? column_offsets(c_load, ne).x : 0u;
        for (uint nt = gl_WorkGroupID.x; nt < n_tiles; nt += gl_NumWorkGroups.x) {
            uint n_load = nt * BN + lr;
            uint w_row = p.w_off + n_load * p.w_nb1;
            float acc[4][4];
            for (uint i = 0u; i < 4u; i++) {
                for (uint j = 0u; j < 4u; j++) {
                    acc[i][j] = 0.0;
                }
            }
            for (uint k0 = 0u; k0 < p.K; k0 += BK) {
                uint k = k0 + lk;
                vec4 wv = vec4(0.0);
                vec4 xv = vec4(0.0);
                if (k + 4u <= p.K) {
                    if (n_load < ne.x) {
                        wv = load_w4(w_row, k);
                    }
                    if (c_load < cols) {
                        uint at = x_col + k;
                        xv = (at & 3u) == 0u ? x_vec4[at >> 2u] : vec4(x[at], x[at + 1u], x[at + 2u], x[at + 3u]);
                    }
                } else {
                    for (uint i = 0u; i < 4u; i++) {
                        if (k + i < p.K) {
                            wv[i] = n_load < ne.x ? load_w1(w_row, k + i) : 0.0;
                            xv[i] = c_load < cols ? x[x_col + k + i] : 0.0;
                        }
                    }
                }
                for (uint i = 0u; i < 4u; i++) {
                    ws[lk + i][lr] = wv[i];
                    xs[lk + i][lr] = xv[i];
                }
                barrier();
                for (uint kk = 0u; kk < BK; kk++) {
                    vec4 a = vec4(ws[kk][ty * 4u], ws[kk][ty * 4u + 1u], ws[kk][ty * 4u + 2u], ws[kk][ty * 4u + 3u]);
                    vec4 b = vec4(xs[kk][tx * 4u], xs[kk][tx * 4u + 1u], xs[kk][tx * 4u + 2u], xs[kk][tx * 4u + 3u]);
                    for (uint i = 0u; i < 4u; i++) {
                        for (uint j = 0u; j < 4u; j++) {
                            acc[i][j] += a[i] * b[j];
                        }
                    }
                }
                barrier();
            }
            for (uint j = 0u; j < 4u; j++) {
                uint c = ct * BM + tx * 4u + j;
                if (c < cols) {
                    uint d_col = column_offsets(c, ne).y;
                    for (uint i = 0u; i < 4u; i++) {
                        uint n = nt * BN + ty * 4u + i;
                        if (n < ne.x) {
                            d[d_col + n] = with_residual(acc[i][j], d_col + n, n);
                        }
                    }
                }
            }
        }
    }
}
