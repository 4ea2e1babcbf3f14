#version 450
// Copies 16-byte words from binding 1 to binding 5: the device's copy bandwidth as a kernel
// sees it (`hrx bench --kernels`), reads and writes coalesced, grid-stride.

layout(local_size_x = 256) in;

layout(set = 0, binding = 1) readonly buffer S { uvec4 s[]; };
layout(set = 0, binding = 5) writeonly buffer D { uvec4 d[]; };

layout(push_constant) uniform Params {
    uint n; // 16-byte words to copy
} p;

void main() {
    uint stride = gl_NumWorkGroups.x * 256u;
    for (uint i = gl_GlobalInvocationID.x; i < p.n; i += stride) {
        d[i] = s[i];
    }
}
