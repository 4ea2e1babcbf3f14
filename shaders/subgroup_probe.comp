#version 450
// What a subgroup is here, as the subgroup kernels would see it: every invocation writes the
// size the driver reports (gl_SubgroupSize), the lanes that really run together (subgroupAdd of
// 1 over its subgroup), the subgroups of the workgroup (gl_NumSubgroups), and its lane. A driver
// whose reported size is not what runs (lavapipe's 32 and 64, which run 16 lanes) gives the
// subgroup kernels wrong sums; hrx's self-check (selfcheck::probe) reads this to refuse them.
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require

layout(local_size_x = 128) in;

layout(set = 0, binding = 5) writeonly buffer D { uint d[]; };

layout(push_constant) uniform Params {
    uint unused;
} p;

void main() {
    uint at = 4u * gl_LocalInvocationID.x;
    d[at] = gl_SubgroupSize;
    d[at + 1u] = subgroupAdd(1u);
    d[at + 2u] = gl_NumSubgroups;
    d[at + 3u] = gl_SubgroupInvocationID;
}
