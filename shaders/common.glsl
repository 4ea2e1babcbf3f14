// Shared by every hrx compute shader: the run-time sizes buffer (binding 0) and the dynamic
// axis. A kernel's push constants hold its maximal (planned) shape and a `dyn` vector
// (axis, symbol, num, den): at run time axis `dyn.x` has length min(ne, syms[dyn.y] * num / den).
// With dyn.x >= 4 the shape is static. This is what lets a recorded command buffer be
// replayed with another token count: only the sizes buffer (and indirect dispatch sizes) change.

layout(set = 0, binding = 0) readonly buffer Syms { uint syms[]; };

uvec4 runtime_ne(uvec4 ne, uvec4 dyn) {
    if (dyn.x < 4u) {
        ne[dyn.x] = min(ne[dyn.x], syms[dyn.y] * dyn.z / dyn.w);
    }
    return ne;
}
