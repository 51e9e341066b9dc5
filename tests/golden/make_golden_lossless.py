"""Rebuild the lossless golden fixtures (run only when the lossless format changes on purpose).

    SOURCE_DATE_EPOCH=1767225600 python tests/golden/make_golden_lossless.py

Each case is a small seeded dump ``<case>-source.h5`` (layers in the stored types the format
takes, with NaN payloads, signalling NaNs, -0.0, Inf and subnormals in them) and its
``co3 compress --format <fmt>`` output ``<case>.co3``: ``lossless-*`` at ``level="max"``
(table version 1, the files of co3cli 0.1), ``lossless2-*`` the fast coder of version 2 (the
default until version 3), ``lossless3-*`` the default pair coder (version 3), all over the
same sources (which the version-3 coder stores raw: too small; ``lossless3-big-*`` add layers
it codes, in compact mode with +-0 words and in full mode without them). ``tests/test_lossless.py``
checks that this version decodes every ``.co3`` back to its source's bits and compresses each
source to the same blocks (and the same bytes, made by the same co3cli version). A change of
the lossless bitstream must bump the table's version byte and keep those files decoding.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import h5py
import numpy as np

HERE = Path(__file__).resolve().parent
SPECIAL = {"float32": [0x80000000, 0x7F800000, 0xFF800000, 0x7FC00001, 0x7F800001, 0x00000001,
                       0x807FFFFF],
           "bfloat16": [0x8000, 0x7F80, 0xFF80, 0x7FC1, 0x7F81, 0x0001, 0x807F],
           "float16": [0x8000, 0x7C00, 0xFC00, 0x7E01, 0x7C01, 0x0001, 0x83FF]}


def words(rng, dtype, steps, numel, zeros=0.25):
    x = rng.laplace(scale=1e-3, size=(steps, numel)).astype(np.float32)
    x[rng.random((steps, numel)) < zeros] = 0.0
    w = {"float32": lambda: x.view(np.uint32).copy(),
         "bfloat16": lambda: (x.view(np.uint32) >> 16).astype(np.uint16),
         "float16": lambda: x.astype(np.float16).view(np.uint16).copy()}[dtype]()
    sp = np.array(SPECIAL[dtype], dtype=w.dtype)
    w.reshape(-1)[rng.choice(w.size, sp.size, replace=False)] = sp
    return w


def write(path, layers, steps):
    with h5py.File(path, "w") as f:
        f.attrs["schema"] = "co3.gradients/1"
        f.attrs["task"] = "golden"
        f.attrs["layers"] = json.dumps(list(layers))
        for name, (w, stored, shape) in layers.items():
            data = {"float32": w.view(np.float32), "float16": w.view(np.float16)}.get(stored, w)
            ds = f.create_dataset(f"grads/{name}", data=data)
            ds.attrs["shape"] = np.asarray(shape, dtype=np.int64)
            if stored != "float32":
                ds.attrs["dtype"] = stored
        f.create_dataset("steps", data=np.arange(steps, dtype=np.int64))


def main():
    rng = np.random.default_rng(2026)
    bf = words(rng, "bfloat16", 3, 240)
    cases = {
        "lossless-f32": {"fc.weight": (words(rng, "float32", 3, 600), "float32", (20, 30)),
                         "emb.weight": (words(rng, "bfloat16", 3, 160), "bfloat16", (10, 16)),
                         "head.weight": (words(rng, "float16", 3, 90), "float16", (3, 30)),
                         "fc.bias": (words(rng, "float32", 3, 4), "float32", (4,))},
        "lossless-bf16": {"fc.weight": (words(rng, "bfloat16", 3, 600), "bfloat16", (20, 30)),
                          "wide.weight": (bf.astype(np.uint32) << 16, "float32", (8, 30))},
        "lossless-f16": {"fc.weight": (words(rng, "float16", 3, 600), "float16", (20, 30)),
                         "fc.bias": (words(rng, "float16", 3, 20), "float16", (20,))},
    }
    big = {f"lossless3-big-{k}": {"conv.weight": (words(rng, dtype, 2, 2500), dtype, (50, 50)),
                                  "dense.weight": (words(rng, dtype, 2, 2500, 0.0), dtype,
                                                   (25, 100)),
                                  "conv.bias": (words(rng, dtype, 2, 70), dtype, (70,))}
           for k, dtype in (("f32", "float32"), ("bf16", "bfloat16"), ("f16", "float16"))}
    from co3cli.lossless import compress_lossless

    for case, layers in cases.items():
        src = HERE / f"{case}-source.h5"
        write(src, layers, 3)
        fmt = case.split("-")[1] + "-lossless"
        compress_lossless(src, HERE / f"{case}.co3", format=fmt, level="max")
        compress_lossless(src, HERE / f"{case.replace('lossless', 'lossless2')}.co3", format=fmt,
                          _version=2)
        subprocess.run([sys.executable, "-m", "co3cli", "compress", str(src), "-o",
                        str(HERE / f"{case.replace('lossless', 'lossless3')}.co3"), "--format",
                        fmt, "-q"], check=True)
    for case, layers in big.items():
        src = HERE / f"{case}-source.h5"
        write(src, layers, 2)
        subprocess.run([sys.executable, "-m", "co3cli", "compress", str(src), "-o",
                        str(HERE / f"{case}.co3"), "--format", case.split("-")[2] + "-lossless",
                        "-q"], check=True)


if __name__ == "__main__":
    main()
