#!/usr/bin/env python3
"""Writes tests/data/gguf/<file>.tensors.json: the tensor table of each oracle GGUF as read by
llama.cpp's own gguf-py (an independent reader), for tests/gguf.rs to compare `hrx inspect` with.

usage: pip install gguf==0.19.0 numpy && python3 scripts/gen_gguf_tensor_lists.py [ORACLE_DIR]
(ORACLE_DIR defaults to $HRX_ORACLE or tests/oracle)
"""
import glob
import json
import os
import sys

from gguf import GGUFReader

oracle = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("HRX_ORACLE", "tests/oracle")
out_dir = os.path.join(os.path.dirname(__file__), "..", "tests", "data", "gguf")
os.makedirs(out_dir, exist_ok=True)
for path in sorted(glob.glob(os.path.join(oracle, "models", "*", "*.gguf"))):
    r = GGUFReader(path)
    tensors = [
        {
            "name": t.name,
            "dtype": t.tensor_type.name,
            "shape": [int(d) for d in t.shape],
            # gguf-py gives the absolute data offset; hrx reports the offset in the data section.
            "offset": int(t.data_offset) - int(r.data_offset),
            "bytes": int(t.n_bytes),
        }
        for t in r.tensors
    ]
    keys = [k for k in r.fields if not k.startswith("GGUF.")]
    name = os.path.basename(path)
    with open(os.path.join(out_dir, name + ".tensors.json"), "w") as f:
        json.dump({"file": name, "metadata_keys": keys, "tensors": tensors}, f, indent=0)
    print(name, len(tensors), "tensors", len(keys), "keys")
