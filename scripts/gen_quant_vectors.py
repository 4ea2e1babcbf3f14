#!/usr/bin/env python3
"""Test vectors for hrx's quant module, made with the reference numpy code in gguf-py.

The committed files in tests/data/quant/ were produced by
    gguf 0.19.0, numpy 2.4.6, Python 3.11.7
Requirements (pin these to reproduce the files byte for byte):
    gguf==0.19.0
    numpy==2.4.6
Rerun from the repository root:
    python3 -m venv /tmp/gguf-venv
    /tmp/gguf-venv/bin/pip install gguf==0.19.0 numpy==2.4.6
    /tmp/gguf-venv/bin/python scripts/gen_quant_vectors.py
The output is deterministic (fixed seeds). tests/quant.rs reads the files.

gguf-py has no K-quant quantizers, so the Q4_K/Q5_K/Q6_K quantize vectors come from ggml's
C reference quantizers (quantize_row_q{4,5,6}_K_ref), compiled here with gcc
(-O2 -ffp-contract=off: no fused multiply-adds, as in the Rust port) when a ggml source tree
is given:
    /tmp/gguf-venv/bin/python scripts/gen_quant_vectors.py --ggml /path/to/ggml
(a ggml checkout, or llama.cpp's ggml/ folder). Without --ggml those files are left as they
are. The committed ones were made from ggml-org/ggml commit d99724f2b141 (2026-08-21).

Files, all little-endian, no headers:
    deq_<fmt>.bin   raw blocks of <fmt>; random bytes with the f16 scale fields set to
                    finite values, plus edge blocks (zeros, all-ones and all-zero quants,
                    negative, -0, subnormal and largest f16 scales)
    deq_<fmt>.f32   gguf.quants.dequantize of those blocks, f32
    q_<fmt>.in.f32  f32 input rows to quantize
    q_<fmt>.bin     gguf.quants.quantize of them (formats gguf-py can quantize: F16, BF16,
                    Q8_0)
    q_k.in.f32      f32 rows for the K-quant quantizers
    q_q{4,5,6}_k.bin  ggml's reference quantization of q_k.in.f32
F16 covers all 65536 bit patterns.
"""

import argparse
import os
import subprocess
import sys
import tempfile
from importlib.metadata import version

import numpy as np
from gguf import GGMLQuantizationType as T
from gguf.constants import GGML_QUANT_SIZES
from gguf.quants import dequantize, quantize

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "data", "quant")
rng = np.random.default_rng(20240601)

# Byte offsets of the f16 scale fields (d, dmin/m) in each block (ggml-common.h).
SCALE_FIELDS = {
    T.Q4_0: [0],
    T.Q4_1: [0, 2],
    T.Q5_0: [0],
    T.Q5_1: [0, 2],
    T.Q8_0: [0],
    T.Q2_K: [80, 82],
    T.Q3_K: [108],
    T.Q4_K: [0, 2],
    T.Q5_K: [0, 2],
    T.Q6_K: [208],
}
# Random blocks per format: K blocks are ~7x larger, so fewer keep the data small.
N_RANDOM = {t: (256 if GGML_QUANT_SIZES[t][0] == 32 else 128) for t in SCALE_FIELDS}


def f16_bytes(values):
    return np.asarray(values, dtype=np.float16).view(np.uint8).reshape(-1, 2)


def random_scales(n):
    """Finite f16 scales: random sign, magnitudes spread over 1e-4..10."""
    mag = 10.0 ** rng.uniform(-4, 1, n)
    return np.where(rng.random(n) < 0.5, -mag, mag)


def set_scales(blocks, fields, values):
    for k, off in enumerate(fields):
        blocks[:, off:off + 2] = f16_bytes(values[k])


def quant_blocks(qtype):
    """Random blocks plus edge blocks for a quantized format."""
    _, size = GGML_QUANT_SIZES[qtype]
    fields = SCALE_FIELDS[qtype]
    n = N_RANDOM[qtype]
    rand = rng.integers(0, 256, (n, size), dtype=np.uint8)
    set_scales(rand, fields, [random_scales(n) for _ in fields])

    edges = []

    def edge(fill, scales):
        b = np.full((1, size), fill, dtype=np.uint8) if fill is not None else \
            rng.integers(0, 256, (1, size), dtype=np.uint8)
        set_scales(b, fields, [[s] for s in scales])
        edges.append(b)

    edges.append(np.zeros((1, size), dtype=np.uint8))           # all zero
    edge(0xFF, [1.0, 1.0])                                      # max quants and scale bytes
    edge(0x00, [1.0, -1.0])                                     # min quants
    edge(None, [-0.5, -0.25])                                   # negative scales
    edge(None, [-0.0, 0.0])                                     # signed zero scale
    for _ in range(2):                                          # subnormal scales
        b = rng.integers(0, 256, (1, size), dtype=np.uint8)
        for off in fields:
            sub = rng.integers(1, 0x400, dtype=np.uint16) | (rng.integers(0, 2) << 15)
            b[0, off:off + 2] = np.array([sub], dtype=np.uint16).view(np.uint8)
        edges.append(b)
    edge(None, [65504.0, -65504.0])                             # largest f16 scales
    return np.concatenate([rand] + edges, axis=0)


def float_patterns(qtype):
    if qtype == T.F16:
        return np.arange(0x10000, dtype=np.uint32).astype(np.uint16).view(np.uint8)
    if qtype == T.BF16:
        bits = rng.integers(0, 0x10000, 4096, dtype=np.uint32).astype(np.uint16)
        special = np.array([0, 0x8000, 0x7F80, 0xFF80, 0x7FC0, 0x7F81, 0xFFFF, 0x0001, 0x807F],
                           dtype=np.uint16)
        return np.concatenate([bits, special]).view(np.uint8)
    bits = rng.integers(0, 1 << 32, 2048, dtype=np.uint64).astype(np.uint32)
    special = np.array([0, 0x80000000, 0x7F800000, 0xFF800000, 0x7FC00000, 0x7F800001, 1],
                       dtype=np.uint32)
    return np.concatenate([bits, special]).view(np.uint8)


def quantize_inputs(qtype):
    """f32 rows to quantize: varied magnitudes, zeros, exact ties."""
    if qtype == T.Q8_0:
        blocks = rng.standard_normal((60, 32)).astype(np.float32)
        blocks *= (10.0 ** rng.uniform(-6, 4, (60, 1))).astype(np.float32)
        ties = np.concatenate([[127.0], np.arange(31) - 15.5]).astype(np.float32)
        zero = np.zeros(32, dtype=np.float32)
        tiny = np.full(32, 1e-30, dtype=np.float32)
        return np.concatenate([blocks.ravel(), ties, zero, tiny, -ties])
    x = rng.standard_normal(4096).astype(np.float32) * (10.0 ** rng.uniform(-9, 6, 4096)).astype(np.float32)
    if qtype == T.F16:
        # f16 boundaries: overflow, ties at the subnormal step and at mantissa ends.
        special = np.array([65504, 65519, 65520, 1e6, -1e6, 2.0 ** -24, 2.0 ** -25, 3 * 2.0 ** -26,
                            2.0 ** -26, 1 + 2.0 ** -11, 1 + 3 * 2.0 ** -11, -0.0, np.inf, -np.inf],
                           dtype=np.float32)
        return np.concatenate([x, special])
    # BF16: random bit patterns (NaNs included: ggml and gguf-py quiet them the same way).
    bits = rng.integers(0, 1 << 32, 1024, dtype=np.uint64).astype(np.uint32).view(np.float32)
    return np.concatenate([x, bits])


def k_quantize_inputs():
    """Rows for the K-quant quantizers: 8 blocks each of Gaussian, Gaussian with per-block
    scales over 1e-4..1e3, uniform, all-positive, mostly-zero, heavy-tailed, small integers
    and constant values. Own seed, so adding it left the other files unchanged."""
    r = np.random.default_rng(20240602)
    n = 8 * 256
    sparse = r.standard_normal(n)
    sparse[r.random(n) < 0.7] = 0
    parts = [
        r.standard_normal(n),
        (r.standard_normal((8, 256)) * 10.0 ** r.uniform(-4, 3, (8, 1))).ravel(),
        r.uniform(-1, 1, n),
        r.uniform(0, 1, n),
        sparse,
        np.clip(r.standard_cauchy(n), -1e4, 1e4),
        r.integers(-32, 32, n).astype(np.float64),
        np.repeat(r.standard_normal(8), 256),
    ]
    return np.concatenate(parts).astype("<f4")


HARNESS = r"""
#include <stdio.h>
#include <stdlib.h>
#include "ggml-quants.h"
/* usage: harness K N < f32 input > blocks; K in {4,5,6} picks quantize_row_qK_K_ref. */
int main(int argc, char **argv) {
    int k = atoi(argv[1]);
    long n = atol(argv[2]);
    size_t bytes = k == 4 ? 144 : k == 5 ? 176 : 210;
    float *x = malloc(n * sizeof(float));
    void *y = malloc(n / 256 * bytes);
    if (fread(x, sizeof(float), n, stdin) != (size_t)n) return 1;
    if (k == 4) quantize_row_q4_K_ref(x, y, n);
    if (k == 5) quantize_row_q5_K_ref(x, y, n);
    if (k == 6) quantize_row_q6_K_ref(x, y, n);
    fwrite(y, bytes, n / 256, stdout);
    return 0;
}
"""


def ggml_k_quants(ggml, x):
    """{k: bytes} of ggml's reference Q{k}_K quantization of x."""
    with tempfile.TemporaryDirectory() as tmp:
        harness = os.path.join(tmp, "harness.c")
        with open(harness, "w") as f:
            f.write(HARNESS)
        exe = os.path.join(tmp, "harness")
        src = os.path.join(ggml, "src")
        flags = ["-O2", "-ffp-contract=off", "-ffunction-sections", "-fdata-sections",
                 "-I", os.path.join(ggml, "include"), "-I", src, "-I", os.path.join(src, "ggml-cpu")]
        subprocess.run(["gcc", *flags, harness, os.path.join(src, "ggml-quants.c"),
                        "-Wl,--gc-sections", "-lm", "-o", exe], check=True)
        return {k: subprocess.run([exe, str(k), str(x.size)], input=x.tobytes(),
                                  capture_output=True, check=True).stdout
                for k in (4, 5, 6)}


def write(name, arr):
    path = os.path.join(OUT, name)
    with open(path, "wb") as f:
        f.write(np.ascontiguousarray(arr).tobytes())
    return os.path.getsize(path)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ggml", help="ggml source tree for the K-quant quantize vectors")
    args = ap.parse_args()
    os.makedirs(OUT, exist_ok=True)
    total = 0
    fmts = [T.F32, T.F16, T.BF16, *SCALE_FIELDS]
    for qtype in fmts:
        name = qtype.name.lower()
        raw = float_patterns(qtype) if qtype in (T.F32, T.F16, T.BF16) else quant_blocks(qtype)
        raw = np.ascontiguousarray(raw).reshape(-1)
        values = dequantize(raw, qtype).astype("<f4", copy=False)
        total += write(f"deq_{name}.bin", raw) + write(f"deq_{name}.f32", values)
    for qtype in (T.F16, T.BF16, T.Q8_0):
        name = qtype.name.lower()
        x = quantize_inputs(qtype).astype("<f4")
        q = quantize(x, qtype)
        total += write(f"q_{name}.in.f32", x) + write(f"q_{name}.bin", q.view(np.uint8))
    if args.ggml:
        x = k_quantize_inputs()
        total += write("q_k.in.f32", x)
        for k, blocks in ggml_k_quants(args.ggml, x).items():
            total += write(f"q_q{k}_k.bin", np.frombuffer(blocks, dtype=np.uint8))
    else:
        print("no --ggml: K-quant quantize vectors left as they are", file=sys.stderr)
    print(f"gguf {version('gguf')} numpy {np.__version__}: "
          f"wrote {total} bytes to {os.path.normpath(OUT)}", file=sys.stderr)


if __name__ == "__main__":
    main()
