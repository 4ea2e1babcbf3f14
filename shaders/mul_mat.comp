#version 450
// Tiled matrix-matrix product: a workgroup of 256 threads computes a 128 (rows of w) x 128
// (columns of x) tile of d, staging 16-deep slices of both operands in shared memory (weights
// dequantized on the way in); each thread accumulates an 8 x 8 block in registers, reading
// its operands from shared memory as vec4s (four multiply-adds per value read). Grid-stride
// loops over row tiles (x) and column tiles (y).

#include "common.glsl"
#include "mul_mat_params.glsl"
#include "wtype.glsl"

#define BN 128u
#define BM 128u
#define BK 16u
#define WG 256u

layout(local_size_x = 256) in;

// [k][i / 4] holds values i..i+3 of slice row k; one vec4 of padding against bank conflicts.
shared vec4 ws[BK][BN / 4u + 1u];
shared vec4 xs[BK][BM / 4u + 1u];

void main() {
    uvec4 ne = runtime_ne(p.ne, p.dyn);
    uint cols = ne.y * ne.z * ne.w;
    uint tid = gl_LocalInvocationID.x;
    // This thread's 8 x 8 block: rows 4 * ty + {0..3} and 64 + 4 * ty + {0..3} (two vec4s
    // of ws), likewise for columns, so neighbouring threads read neighbouring vec4s.
    uint tx = tid % 16u;
    uint ty = tid / 16u;
    uint n_tiles = (ne.x + BN - 1u) / BN;
    uint c_tiles = (cols + BM - 1u) / BM;
    for (uint ct = gl_WorkGroupID.y; ct < c_tiles; ct += gl_NumWorkGroups.y) {
        for (uint nt = gl_WorkGroupID.x; nt < n_tiles; nt += gl_NumWorkGroups.x) {
            vec4 acc[8][2];
            for (uint i = 0u; i < 8u; i++) {
                acc[i][0] = vec4(0.0);
                acc[i][1] = vec4(0.0);
            }
            for (uint k0 = 0u; k0 < p.K; k0 += BK) {
                // Each thread brings 4 consecutive k of two rows of w and of two columns of x.
                for (uint e = tid; e < BN * BK / 4u; e += WG) {
                    uint r = e / (BK / 4u);
                    uint kq = (e % (BK / 4u)) * 4u;
                    uint k = k0 + kq;
                    uint n = nt * BN + r;
                    uint c = ct * BM + r;
                    uint w_row = p.w_off + n * p.w_nb1;
                    uint x_col = c < cols ? column_offsets(c, ne).x : 0u;
                    vec4 wv = vec4(0.0);
                    vec4 xv = vec4(0.0);
                    if (k + 4u <= p.K) {
                        if (n < ne.x) {
                            wv = load_w4(w_row, k);
                        }
                        if (c < cols) {
                            xv = vec4(x[x_col + k], x[x_col + k + 1u], x[x_col + k + 2u], x[x_col + k + 3u]);
                        }
                    } else {
                        for (uint i = 0u; i < 4u; i++) {
                            if (k + i < p.K) {
                                wv[i] = n < ne.x ? load_w1(w_row, k + i) : 0.0;
                                xv[i] = c < cols ? x[x_col + k + i] : 0.0;
                            }
                        }
                    }
                    for (uint i = 0u; i < 4u; i++) {
                        ws[kq + i][r / 4u][r % 4u] = wv[i];
                        xs[kq + i][r / 4u][r % 4u] = xv[i];
                    }
                }
                barrier();
                for (uint kk = 0u; kk < BK; kk++) {
                    vec4 a0 = ws[kk][ty];
                    vec4 a1 = ws[kk][ty + 16u];
                    vec4 b0 = xs[kk][tx];
                    vec4 b1 = xs[kk][tx + 16u];
                    for (uint i = 0u; i < 4u; i++) {
                        acc[i][0] += a0[i] * b0;
                        acc[i][1] += a0[i] * b1;
                        acc[i + 4u][0] += a1[i] * b0;
                        acc[i + 4u][1] += a1[i] * b1;
                    }
                }
                barrier();
            }
            // acc[i][h][j]: row (i < 4 ? 4 ty + i : 64 + 4 ty + i - 4), column 64 h + 4 tx + j.
            for (uint h = 0u; h < 2u; h++) {
                for (uint j = 0u; j < 4u; j++) {
                    uint c = ct * BM + 64u * h + 4u * tx + j;
                    if (c < cols) {
                        uint d_col = column_offsets(c, ne).y;
                        for (uint i = 0u; i < 8u; i++) {
                            uint n = nt * BN + (i < 4u ? 4u * ty + i : 64u + 4u * ty + i - 4u);
                            if (n < ne.x) {
                                d[d_col + n] = acc[i][h][j];
                            }
                        }
                    }
                }
            }
        }
    }
}
