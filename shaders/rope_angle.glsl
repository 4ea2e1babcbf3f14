// cos and sin of the angle pair j (of the NeoX pairs (j, j + n_dims/2)) turns by at token t:
// frequency j turns with position component comp(j) at inverse frequency
// theta^(-exponent(j)) (the CPU reference's rope_frequency): KIND 0 interleaved M-RoPE with
// sections (s_h, s_w), KIND 1 axial 2-D. Reads `p` (rope_fields.glsl) and the `pos` buffer:
// component c of token t at p_off + c * p_nb1 + t * p_nb0.
vec2 rope_cos_sin(uint j, uint t) {
    uint half_dims = p.n_dims / 2u;
    uint comp = 0u;
    float expo;
    if (p.kind == 0u) {
        if (j % 3u == 1u && j < 3u * p.s_h) {
            comp = 1u;
        } else if (j % 3u == 2u && j < 3u * p.s_w) {
            comp = 2u;
        }
        expo = 2.0 * float(j) / float(p.n_dims);
    } else {
        uint quarter = p.n_dims / 4u;
        uint jj = j;
        if (j >= quarter) {
            comp = 1u;
            jj = j - quarter;
        }
        expo = 2.0 * float(jj) / float(half_dims);
    }
    float inv_freq = exp2(-expo * p.log2_theta);
    float angle = float(pos[p.p_off + comp * p.p_nb1 + t * p.p_nb0]) * inv_freq;
    // Reduce to [-pi, pi] (Cody-Waite, 2 pi = C1 + C2 with C1 exact in 8 bits), where
    // every driver's sin and cos are accurate; large positions give large angles.
    float k = round(angle * 0.15915494309189535);
    float reduced = (angle - k * 6.28125) - k * 1.9353071795864769e-3;
    return vec2(cos(reduced), sin(reduced));
}
