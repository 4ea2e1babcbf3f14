#!/usr/bin/env python3
"""Writes tests/data/image/resize/: torchvision's uint8 antialiased bicubic resize of synthetic
images at sizes the oracle does not cover (strong down- and upscaling, one axis only, 1-pixel
outputs), for tests/image.rs to compare hrx's resize with bit for bit.

The inputs are not stored: `synth` below is mirrored in tests/image.rs. torch picks its uint8
kernel by CPU capability (the AVX2 kernel, or the generic one on AVX-512 and other CPUs); the
script runs each case under every capability given in ATEN_CPU_CAPABILITY-style names on the
command line (one process each) and records whether they agree.

usage: pip install torch torchvision numpy
       python3 scripts/gen_resize_reference.py OUT_DIR [capability ...]   (e.g. avx2 default)
"""
import json
import os
import subprocess
import sys

CASES = [  # (in_h, in_w, out_h, out_w)
    (97, 131, 32, 32),
    (300, 40, 30, 4),
    (64, 6, 640, 60),
    (50, 70, 50, 33),
    (70, 50, 33, 50),
    (17, 23, 2, 3),  # (1, 1) trips an internal assert of torch 2.11's AVX kernel
    (1, 5, 3, 200),
    (128, 96, 37, 211),
    (201, 199, 64, 62),
    (33, 1000, 33, 7),
]


def synth(h, w, seed):
    """uint8 [h, w, 3]: a hard-edged checkerboard (ringing and clamping), a gradient, noise."""
    s = seed
    out = bytearray()
    for y in range(h):
        for x in range(w):
            s ^= (s << 13) & 0xFFFFFFFFFFFFFFFF
            s ^= s >> 7
            s ^= (s << 17) & 0xFFFFFFFFFFFFFFFF
            out += bytes([255 if (x // 5 + y // 7) % 2 else 0, (x * 7 + y * 13) & 255, s >> 56])
    return bytes(out)


def run_cases(out_dir, tag):
    import numpy as np
    import torch
    from torchvision.transforms.v2 import functional as F
    from torchvision.transforms import InterpolationMode

    for i, (h, w, oh, ow) in enumerate(CASES):
        img = np.frombuffer(synth(h, w, 1000 + i), np.uint8).reshape(h, w, 3)
        t = torch.from_numpy(img.copy()).permute(2, 0, 1).contiguous()
        r = F.resize(t, [oh, ow], interpolation=InterpolationMode.BICUBIC, antialias=True)
        r.permute(1, 2, 0).contiguous().numpy().tofile(os.path.join(out_dir, f"case{i}.{tag}.u8"))
    print(tag, torch.backends.cpu.get_cpu_capability())


def main():
    out_dir = sys.argv[1]
    caps = sys.argv[2:] or ["default"]
    if os.environ.get("HRX_RESIZE_TAG"):
        run_cases(out_dir, os.environ["HRX_RESIZE_TAG"])
        return
    os.makedirs(out_dir, exist_ok=True)
    for cap in caps:
        env = dict(os.environ, ATEN_CPU_CAPABILITY=cap, HRX_RESIZE_TAG=cap)
        subprocess.run([sys.executable, __file__, out_dir], env=env, check=True)
    import torch
    import torchvision

    agree = []
    for i in range(len(CASES)):
        blobs = [open(os.path.join(out_dir, f"case{i}.{c}.u8"), "rb").read() for c in caps]
        agree.append(all(b == blobs[0] for b in blobs))
        os.replace(os.path.join(out_dir, f"case{i}.{caps[0]}.u8"), os.path.join(out_dir, f"case{i}.u8"))
        for c in caps[1:]:
            os.remove(os.path.join(out_dir, f"case{i}.{c}.u8"))
    meta = {
        "made_by": "scripts/gen_resize_reference.py",
        "torch": torch.__version__,
        "torchvision": torchvision.__version__,
        "capabilities": caps,
        "capabilities_agree": agree,
        "seed_of_case_i": "1000 + i",
        "cases": [{"file": f"case{i}.u8", "in_hw": [h, w], "out_hw": [oh, ow]} for i, (h, w, oh, ow) in enumerate(CASES)],
    }
    with open(os.path.join(out_dir, "cases.json"), "w") as f:
        json.dump(meta, f, indent=1)
    print("capabilities agree per case:", agree)


if __name__ == "__main__":
    main()
