// The rotary embedding's push-constant fields, shared by rope.comp and rms_norm_rope.comp
// (included inside their Params blocks).
    uvec4 ne;      // shape (maximal)
    uvec4 dyn;     // dynamic axis (common.glsl)
    uvec4 x_nb;    // strides in floats
    uvec4 d_nb;
    uint x_off;    // offsets in floats
    uint d_off;
    uint p_off;    // positions (ints)
    uint p_nb0;
    uint p_nb1;
    uint n_dims;
    uint kind;
    uint s_h;      // M-RoPE sections of the h and w components
    uint s_w;
    float log2_theta;
