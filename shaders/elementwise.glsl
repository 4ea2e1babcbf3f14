// Indexing of the row-wise elementwise kernels (binary.comp, unary.comp, set_rows.comp):
// a workgroup takes ROW_CHUNK values of a row, 256 threads each taking every 256th (the
// including shader enables GL_EXT_control_flow_attributes for its unrolled loop).

#define ROW_CHUNK 1024u

// Row r of a shape ne as its (ne1, ne2, ne3) position.
uvec3 row_index(uint r, uvec4 ne) {
    return uvec3(r % ne.y, (r / ne.y) % ne.z, r / (ne.y * ne.z));
}

// The float offset of row position i under strides nb (nb1, nb2, nb3).
uint dot_index(uvec3 i, uvec3 nb) {
    return i.x * nb.x + i.y * nb.y + i.z * nb.z;
}
