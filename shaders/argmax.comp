#version 450
// ARGMAX: the index of the largest value of each row along ne0 (the first of equal ones; NaN
// is never the largest; 0 when every value is NaN), written as a float. A row is split over
// `splits` workgroups of CHUNK values each, so that one row of logits (151,936 values for
// Qwen's vocabulary) streams through many workgroups instead of one; each writes its chunk's
// best (value, index) to scratch, and the last of a row to finish (an atomic counter) combines
// them, writes the index and resets the counter for the next run.

#include "common.glsl"

#define WG 256u
// Values a thread loads before comparing: their loads are in flight together.
#define PER_THREAD 8u
#define CHUNK (WG * PER_THREAD)
// An index no value has: a chunk or thread that saw only NaN.
#define NONE 0xffffffffu

layout(local_size_x = 256) in;

layout(set = 0, binding = 1) readonly buffer X { float x[]; };
layout(set = 0, binding = 5) writeonly buffer D { float d[]; };
// A (value, index) record per (row, split), then a counter per row.
layout(set = 0, binding = 6) coherent buffer S { float scratch[]; };
layout(set = 0, binding = 6) coherent buffer SU { uint scratch_u[]; };

layout(push_constant) uniform Params {
    uvec4 ne;    // the output's shape (maximal): [1, rows...]
    uvec4 dyn;   // its dynamic axis (common.glsl)
    uvec4 x_nb;  // strides in floats
    uvec4 d_nb;
    uint x_off;  // offsets in floats
    uint d_off;
    uint n;      // values per row
    uint splits; // workgroups per row: ceil(n / CHUNK)
} p;

shared float sh_v[WG];
shared uint sh_i[WG];
shared bool sh_last;

// Whether (v, i) goes before the best so far (bv, bi): larger, or equal at a lower index.
bool better(float v, uint i, float bv, uint bi) {
    return i != NONE && (bi == NONE || v > bv || (v == bv && i < bi));
}

// The workgroup's best of each thread's (v, i), left in sh_v[0], sh_i[0].
void reduce(float v, uint i) {
    uint tid = gl_LocalInvocationID.x;
    sh_v[tid] = v;
    sh_i[tid] = i;
    barrier();
    for (uint s = WG / 2u; s > 0u; s >>= 1u) {
        if (tid < s && better(sh_v[tid + s], sh_i[tid + s], sh_v[tid], sh_i[tid])) {
            sh_v[tid] = sh_v[tid + s];
            sh_i[tid] = sh_i[tid + s];
        }
        barrier();
    }
}

void main() {
    uvec4 ne = runtime_ne(p.ne, p.dyn);
    uint rows = ne.y * ne.z * ne.w;
    uint tid = gl_LocalInvocationID.x;
    uint counters = 2u * p.ne.y * p.ne.z * p.ne.w * p.splits;
    for (uint g = gl_WorkGroupID.x; g < rows * p.splits; g += gl_NumWorkGroups.x) {
        uint r = g / p.splits;
        uint s = g % p.splits;
        uvec3 i = uvec3(r % ne.y, (r / ne.y) % ne.z, r / (ne.y * ne.z));
        uint xr = p.x_off + i.x * p.x_nb.y + i.y * p.x_nb.z + i.z * p.x_nb.w;
        // This thread's values, in increasing index order: the first of equal ones is kept.
        uint first = s * CHUNK + tid;
        float vals[PER_THREAD];
        for (uint j = 0u; j < PER_THREAD; j++) {
            uint k = first + j * WG;
            vals[j] = k < p.n ? x[xr + k * p.x_nb.x] : 0.0;
        }
        float bv = 0.0;
        uint bi = NONE;
        for (uint j = 0u; j < PER_THREAD; j++) {
            uint k = first + j * WG;
            // NaN compares false both ways: never taken.
            if (k < p.n && (bi == NONE ? vals[j] == vals[j] : vals[j] > bv)) {
                bv = vals[j];
                bi = k;
            }
        }
        reduce(bv, bi);
        uint rec = 2u * g;
        if (tid == 0u) {
            scratch[rec] = sh_v[0];
            scratch_u[rec + 1u] = sh_i[0];
        }
        // Publish the record, then count it; the last of the row combines them all.
        memoryBarrierBuffer();
        barrier();
        if (tid == 0u) {
            sh_last = atomicAdd(scratch_u[counters + r], 1u) == p.splits - 1u;
        }
        barrier();
        if (sh_last) {
            memoryBarrierBuffer();
            bv = 0.0;
            bi = NONE;
            for (uint k = tid; k < p.splits; k += WG) {
                uint at = 2u * (r * p.splits + k);
                float v = scratch[at];
                uint idx = scratch_u[at + 1u];
                if (better(v, idx, bv, bi)) {
                    bv = v;
                    bi = idx;
                }
            }
            reduce(bv, bi);
            if (tid == 0u) {
                uint dr = p.d_off + i.x * p.d_nb.y + i.y * p.d_nb.z + i.z * p.d_nb.w;
                d[dr] = sh_i[0] == NONE ? 0.0 : float(sh_i[0]);
                scratch_u[counters + r] = 0u;
            }
        }
        barrier();
    }
}
