// Shared by the cooperative-matrix products (mul_mat_cm.comp, mul_mat_cm_exact.comp): their
// specialization constants, the tiling they imply, and the store of an accumulator to d.
//
// hrx sets every size from the device's variant (src/backend/vulkan/kernels/coop.rs), so one
// SPIR-V module serves every matrix-unit shape: 16 x 16 x 16 on NVIDIA and AMD, 8 x 8 x 8 on
// lavapipe. In the product d[n, c] = sum_k w[k, n] x[k, c], A is a CM_M x CM_K block of w (rows
// n, k contiguous), B a CM_K x CM_N block of x (columns c, k contiguous) and the accumulator
// the CM_M x CM_N block of d (n contiguous, as d is).

// Constant 0: the workgroup, four subgroups of the size hrx requires (with full subgroups).
layout(local_size_x_id = 0) in;
layout(constant_id = 0) const uint THREADS = 128u;
// The matrix-unit shape the device lists (f16 A and B, f32 accumulators, subgroup scope).
layout(constant_id = 1) const uint CM_M = 16u;
layout(constant_id = 2) const uint CM_N = 16u;
layout(constant_id = 3) const uint CM_K = 16u;
// One subgroup's tile of d: SG_M rows by SG_N columns, as TM x TN accumulators. The four
// subgroups tile the workgroup's WG_M x WG_N 2 x 2.
layout(constant_id = 4) const uint SG_M = 64u;
layout(constant_id = 5) const uint SG_N = 64u;
// Values of k staged per step (a multiple of CM_K and of 8).
layout(constant_id = 6) const uint BK = 32u;
// mul_mat_cm: slices whose loads are in flight at once (register sets).
layout(constant_id = 7) const uint DEPTH = 4u;
// mul_mat_cm, for measuring only (HRX_VK_CM_TILES): 1 leaves out the products, 2 the staging.
layout(constant_id = 8) const uint PROBE = 0u;

const uint TM = SG_M / CM_M;
const uint TN = SG_N / CM_N;
#ifdef NARROW
// mul_mat_cm_narrow (a few columns: batched decode): every subgroup takes the whole SG_M x SG_N
// tile over its own quarter of each slice's k (SPLIT of them), summed at the end; tiles of a
// block or two keep enough workgroups in flight where 64 x 64 tiles would leave most of the
// GPU idle.
const uint SPLIT = 4u;
const uint WG_M = SG_M;
const uint WG_N = SG_N;
#else
const uint WG_M = 2u * SG_M;
const uint WG_N = 2u * SG_N;
#endif
// Row stride of a staged slice in halves: 8 more than BK keeps rows 16-byte aligned (as
// coopMatLoad wants) and moves each row 4 banks along, so the 8 rows a matrix load reads at
// once fall on different banks.
const uint LDS = BK + 8u;
// mul_mat_cm_exact's staging: groups of 4 consecutive k, BK / 4 groups to a row.
const uint GROUPS = BK / 4u;
#ifndef NARROW
// Each subgroup stores one accumulator at a time through its own CM_M x CM_N patch of shared
// memory (columns padded by 4 floats), then writes it to d with bounds, strides and the
// residual: a few KiB instead of a whole f32 tile.
const uint LDO = CM_M + 4u;
shared float out_patch[4u * CM_N * LDO];

#define NO_ROW 0xFFFFFFFFu

// Writes accumulator `acc` of the subgroup to d at rows n0.., columns c0.. (within ne.x rows
// and `cols` columns), adding the residual where one is fused.
void store_block(coopmat<float, gl_ScopeSubgroup, CM_M, CM_N, gl_MatrixUseAccumulator> acc, uint n0, uint c0,
                 uvec4 ne, uint cols) {
    uint base = gl_SubgroupID * CM_N * LDO;
    coopMatStore(acc, out_patch, base, LDO, gl_CooperativeMatrixLayoutColumnMajor);
    subgroupMemoryBarrierShared();
    subgroupBarrier();
    for (uint e = gl_SubgroupInvocationID; e < CM_M * CM_N; e += gl_SubgroupSize) {
        uint n = n0 + e % CM_M;
        uint c = c0 + e / CM_M;
        if (n < ne.x && c < cols) {
            uint at = column_offsets(c, ne).y + n;
            d[at] = with_residual(out_patch[base + (e / CM_M) * LDO + e % CM_M], at, n);
        }
    }
    // The patch is reused by the next accumulator.
    subgroupBarrier();
}
#endif
