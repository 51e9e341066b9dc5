"""Rebuild the golden fixtures in this folder (run only when the format changes on purpose).

    SOURCE_DATE_EPOCH=1767225600 python tests/golden/make_golden.py [--groups]

``source.h5`` is a small seeded dump (five layers, three steps: a matrix, a bias, a conv kernel,
an all-zero layer and a single entry); each ``CASES`` entry is compressed with ``co3 compress``
and decoded with ``co3 decompress``; ``book.json`` is a codebook built from the source.
``tests/test_golden.py`` checks that this version still decodes every ``.co3`` here bit for bit
and compresses ``source.h5`` to the same bytes. A change of format must bump the minor version
and keep those tests passing (old files still decode). ``--groups`` writes only the
``.co3`` 1.1 fixtures (``GROUP_CASES``: small layers pooled into group blocks, from
``source-groups.h5``), made by co3cli 0.1.0 with container minor version 1 (now 1.4: the
fixtures of 1.0-1.2 are kept, with what they decode to, in ``v1.2/``, and
``tests/test_container_compact.py`` decodes every one of them bit for bit; those of 1.3 in
``v1.3/``, decoding to what the 1.4 ones here do: ``tests/test_container_v14.py``). Run it
from the repository root with ``PYTHONPATH=.`` (its in-process cases import ``co3cli``). ``--ctx3`` writes only
``CTX3_CASES`` (``ctx`` model version 3), ``--ctx4`` only ``CTX4_CASES`` (version 4,
the default). ``--steps`` writes only the step-group
fixtures (``STEPS_CASES``, from ``source-steps.h5``: ``LYS`` blocks, a drifting layer split into
step groups and a tiny one stored). ``--same`` writes only the equal-layer fixtures
(``SAME_CASES``, from ``source-same.h5``: ``LYE`` references to an equal earlier layer).
``--xref`` writes only the fixtures of layers coded given an earlier layer (``XREF_CASES``,
from ``source-xref.h5``: ``LYX`` blocks, ``ctx`` model version 5). ``--tables`` writes the
codebook this version builds (``REBUILT_BOOK``; ``book.json``, the one the codebook case
compresses with, stays) and rewrites every ``.co3`` from the sources as they are (when the model
fits change, as with ``co3cli.detmath``; what the files decode to stays).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
EPOCH = "1767225600"  # 2026-01-01T00:00:00Z, the files' "created"

# name -> co3 compress options (the codebook case is added last)
CASES = {
    "fp8-ans": ["--format", "fp8-e5m2", "--coder", "ans", "--model", "gennorm-zi"],
    "fp8-huffman": ["--format", "fp8-e5m2", "--coder", "huffman", "--model", "gennorm-zi"],
    "fp8-ctx": ["--format", "fp8-e5m2", "--coder", "ctx", "--model", "gennorm-zi"],
    "fp4-ans": ["--format", "fp4-co3", "--coder", "ans", "--model", "gennorm-zi"],
    "fp4-huffman": ["--format", "fp4-co3", "--coder", "huffman", "--max-len", "12",
                    "--model", "gennorm-zi"],
    "fp4-ctx": ["--format", "fp4-co3", "--coder", "ctx", "--model", "gennorm-zi"],
    "e4m3-empirical-mse": ["--format", "fp8-e4m3", "--coder", "ans", "--model", "empirical",
                           "--scale", "gennorm-mse"],
    "fp8-codebook": ["--codebook", str(HERE / "book.json")],
    # .co3 1.2: context across steps (step 1 coded given step 0; key steps 0 and 2 / 0 only)
    "fp8-ctx-steps": ["--format", "fp8-e5m2", "--coder", "ctx-steps", "--key-every", "2",
                      "--model", "gennorm-zi"],
    "fp4-ctx-steps": ["--format", "fp4-co3", "--coder", "ctx-steps", "--model", "gennorm-zi"],
}
# ``ctx`` model version 3 (the match model), from ``source.h5``
CTX3_CASES = {
    "fp8-ctx3": ["--format", "fp8-e5m2", "--coder", "ctx", "--model", "gennorm-zi"],
    "fp4-ctx3": ["--format", "fp4-co3", "--coder", "ctx", "--model", "gennorm-zi"],
}
# ``ctx`` model version 4 (magnitude contexts started near their prediction)
CTX4_CASES = {
    "fp8-ctx4": ["--format", "fp8-e5m2", "--coder", "ctx", "--model", "gennorm-zi"],
    "fp4-ctx4": ["--format", "fp4-co3", "--coder", "ctx", "--model", "gennorm-zi"],
    "fp8-default4": ["--format", "fp8-e5m2"],
}
# ``ctx`` model version 5 (a group's members one stream, the previous step in the contexts:
# ``.co3`` 1.5), the default
CTX5_CASES = {
    "fp8-ctx5": ["--format", "fp8-e5m2", "--coder", "ctx", "--model", "gennorm-zi"],
    "fp4-ctx5": ["--format", "fp4-co3", "--coder", "ctx", "--model", "gennorm-zi"],
    "fp8-default5": ["--format", "fp8-e5m2"],
    "fp4-default5": ["--format", "fp4-co3"],
}
# written with an earlier ``ctx`` model version, the default then: rebuilt by the tests (and
# here) with ``coder_params={"model_version": version}``
CTX_OLD_CASES = {"fp8-ctx": 1, "fp4-ctx": 1, "steps-default": 1, "fp8-ctx3": 3, "fp4-ctx3": 3,
                 "fp8-ctx4": 4, "fp4-ctx4": 4, "fp8-default4": 4}
CTX_V1_CASES = tuple(k for k, v in CTX_OLD_CASES.items() if v == 1)
BOOK = ["--format", "fp8-e5m2", "--coder", "huffman", "--model", "gennorm-zi"]
REBUILT_BOOK = "book2.json"  # the codebook of BOOK as the fits of co3cli.detmath build it
# the 1.1 layout (small layers pooled into group blocks), from ``source-groups.h5``
GROUP_SOURCE = HERE / "source-groups.h5"
GROUP_CASES = {
    "groups-fp8-ans": ["--format", "fp8-e5m2", "--coder", "ans", "--model", "gennorm-zi"],
    "groups-fp4-huffman": ["--format", "fp4-co3", "--coder", "huffman", "--scale", "co3-poly",
                           "--model", "gennorm-zi"],
}
# step groups and stored layers (``LYS`` blocks), from ``source-steps.h5``
STEPS_SOURCE = HERE / "source-steps.h5"
STEPS_CASES = {
    "steps-fp8-ans-auto": ["--format", "fp8-e5m2", "--coder", "ans", "--model", "auto"],
    "steps-fp4-huffman": ["--format", "fp4-co3", "--coder", "huffman", "--model", "gennorm-zi"],
    "steps-default": [],
}


def source_layers(rng: np.random.Generator, steps: int = 3) -> dict:
    """Gradient-like float32 layers: GenNorm-ish with exact zeros, plus edge cases."""
    from scipy import stats

    def gn(n, beta, scale, p0):
        x = stats.gennorm.rvs(beta, scale=scale, size=(steps, n), random_state=rng)
        x[rng.random((steps, n)) < p0] = 0.0
        return x.astype(np.float32)

    return {
        "fc1.weight": (gn(1200, 0.8, 1e-3, 0.2), (30, 40)),
        "fc1.bias": (gn(30, 1.5, 1e-2, 0.0), (30,)),
        "conv.weight": (gn(108, 1.2, 3e-2, 0.05), (4, 3, 3, 3)),
        "dead.weight": (np.zeros((steps, 20), np.float32), (4, 5)),
        "out.bias": (gn(1, 1.0, 1.0, 0.0), (1,)),
    }


def group_layers(rng: np.random.Generator, steps: int = 2) -> dict:
    """A BatchNorm-like net: one conv kernel coded alone (more than 2**14 entries); BN weights,
    biases and one linear-ramp bias (its ``co3-poly`` scale falls back) pooled into groups."""
    out = {}
    for b in range(8):
        if b == 3:
            out["b3.conv.weight"] = ((rng.standard_normal((steps, 8200)) * 1e-3).astype(np.float32),
                                     (8200,))
        out[f"b{b}.bn.weight"] = ((rng.laplace(size=(steps, 16)) * 1e-2).astype(np.float32), (16,))
        out[f"b{b}.bn.bias"] = ((rng.standard_normal((steps, 16)) * 1e-2).astype(np.float32), (16,))
    out["fc.bias"] = (np.tile(np.linspace(-1e-2, 1e-2, 10, dtype=np.float32), (steps, 1)), (10,))
    return out


def make_groups() -> None:
    from co3cli.dump import write_dump

    write_dump(GROUP_SOURCE, group_layers(np.random.default_rng(20261201)), steps=np.array([0, 3]),
               attrs={"task": "golden-groups", "seed": 20261201})
    for name, opts in GROUP_CASES.items():
        co3("compress", str(GROUP_SOURCE), "-o", str(HERE / f"{name}.co3"), *opts, "-q")
        co3("decompress", str(HERE / f"{name}.co3"), "-o", str(HERE / f"{name}.h5"), "-q")


def steps_layers(rng: np.random.Generator, steps: int = 6) -> dict:
    """A layer whose steps drift (Laplace, then sparse heavy-tailed from step 3 on), one that
    does not, and a 6-entry bias (stored under ``--model auto``)."""
    drift = (rng.laplace(size=(steps, 2400)) * 1e-3).astype(np.float32)
    late = drift[3:]
    late *= (rng.standard_t(1.5, size=late.shape) / rng.laplace(size=late.shape)).astype(np.float32)
    late[rng.random(late.shape) < 0.6] = 0.0
    return {"drift.weight": (drift, (60, 40)),
            "calm.weight": ((rng.standard_normal((steps, 400)) * 1e-2).astype(np.float32), (400,)),
            "tiny.bias": ((rng.standard_normal((steps, 6)) * 1e-2).astype(np.float32), (6,))}


def make_steps() -> None:
    from co3cli.dump import write_dump

    write_dump(STEPS_SOURCE, steps_layers(np.random.default_rng(20261216)),
               steps=np.arange(0, 60, 10), attrs={"task": "golden-steps", "seed": 20261216})
    for name, opts in STEPS_CASES.items():
        if name in CTX_V1_CASES:
            os.environ["SOURCE_DATE_EPOCH"] = EPOCH
            compress_v1(STEPS_SOURCE, HERE / f"{name}.co3", opts)
        else:
            co3("compress", str(STEPS_SOURCE), "-o", str(HERE / f"{name}.co3"), *opts, "-q")
        co3("decompress", str(HERE / f"{name}.co3"), "-o", str(HERE / f"{name}.h5"), "-q")


# references to an equal earlier layer (``LYE`` blocks), from ``source-same.h5``
SAME_SOURCE = HERE / "source-same.h5"
SAME_CASES = {
    "same-fp8-ans": ["--format", "fp8-e5m2", "--coder", "ans", "--model", "gennorm-zi"],
    "same-fp4-huffman": ["--format", "fp4-co3", "--coder", "huffman", "--model", "gennorm-zi"],
}


def same_layers(rng: np.random.Generator, steps: int = 3) -> dict:
    """``raw``/``corrected`` streams with the memory off (equal, value for value) and a
    ``decoded`` one that differs."""
    w = (rng.laplace(size=(steps, 600)) * 1e-3).astype(np.float32)
    return {"raw/fc.weight": (w, (20, 30)), "corrected/fc.weight": (w.copy(), (20, 30)),
            "decoded/fc.weight": (np.round(w * 1e3) / 1e3, (20, 30))}


def make_same() -> None:
    from co3cli.dump import write_dump

    write_dump(SAME_SOURCE, same_layers(np.random.default_rng(20261202)), steps=np.arange(3),
               attrs={"task": "golden-same", "seed": 20261202})
    for name, opts in SAME_CASES.items():
        co3("compress", str(SAME_SOURCE), "-o", str(HERE / f"{name}.co3"), *opts, "-q")
        co3("decompress", str(HERE / f"{name}.co3"), "-o", str(HERE / f"{name}.h5"), "-q")


# layers coded given an earlier layer (``LYX`` blocks, ``ctx`` model version 5), from
# ``source-xref.h5`` (gzip-compressed: its layers are big enough to be coded alone, more than
# ``JOIN_ENTRIES`` entries each); no decoded ``.h5`` is kept (the test decodes the fixtures
# to what the source compressed without such blocks decodes to)
XREF_SOURCE = HERE / "source-xref.h5"
XREF_CASES = {
    "xref-fp8-default": [],
    "xref-fp4-default": ["--format", "fp4-co3"],
}


def xref_layers(rng: np.random.Generator, steps: int = 2) -> dict:
    """FL-like streams (``raw`` g, ``corrected`` g + 0.5 e, ``decoded`` that rounded to a coarse
    grid), of (16, 2050) each, their values few multiples of 2**-16 (the files gzip well)."""
    g = np.round(rng.laplace(size=(steps, 32800)) * 6) / 65536
    v = g + 0.5 * np.round(rng.laplace(size=g.shape)) / 65536
    s = np.abs(v).max(axis=1, keepdims=True) / 8
    q = np.round(v / s) * s
    return {f"{k}/fc.weight": (x.astype(np.float32), (16, 2050))
            for k, x in (("raw", g), ("corrected", v), ("decoded", q))}


def make_xref() -> None:
    from co3cli.dump import write_dump
    from co3cli.dump.output import gzip_in_place

    write_dump(XREF_SOURCE, xref_layers(np.random.default_rng(20261203)), steps=np.arange(2),
               attrs={"task": "golden-xref", "seed": 20261203,
                      "streams": '["raw", "corrected", "decoded"]'})
    gzip_in_place(str(XREF_SOURCE))
    for name, opts in XREF_CASES.items():
        co3("compress", str(XREF_SOURCE), "-o", str(HERE / f"{name}.co3"), *opts, "-q")


def make_ctx3() -> None:
    os.environ["SOURCE_DATE_EPOCH"] = EPOCH
    for name, opts in CTX3_CASES.items():
        compress_v1(HERE / "source.h5", HERE / f"{name}.co3", opts, CTX_OLD_CASES[name])
        co3("decompress", str(HERE / f"{name}.co3"), "-o", str(HERE / f"{name}.h5"), "-q")


def make_ctx4() -> None:
    os.environ["SOURCE_DATE_EPOCH"] = EPOCH
    for name, opts in CTX4_CASES.items():
        compress_v1(HERE / "source.h5", HERE / f"{name}.co3", opts, CTX_OLD_CASES[name])
        co3("decompress", str(HERE / f"{name}.co3"), "-o", str(HERE / f"{name}.h5"), "-q")


def make_ctx5() -> None:
    for name, opts in CTX5_CASES.items():
        co3("compress", str(HERE / "source.h5"), "-o", str(HERE / f"{name}.co3"), *opts, "-q")
        co3("decompress", str(HERE / f"{name}.co3"), "-o", str(HERE / f"{name}.h5"), "-q")


def compress_v1(src, dst, opts, version: int = 1) -> None:
    """``co3 compress src -o dst *opts`` with ``ctx`` model ``version`` (``CTX_OLD_CASES``)."""
    from co3cli.codec import compress

    names = {"--format": "format", "--coder": "coder", "--model": "model", "--scale": "scale"}
    kw = {names[k]: v for k, v in zip(opts[::2], opts[1::2])}
    compress(str(src), str(dst), coder_params={"model_version": version}, **kw)


def co3(*args: str) -> None:
    env = {**os.environ, "SOURCE_DATE_EPOCH": EPOCH}
    subprocess.run([sys.executable, "-m", "co3cli", *args], check=True, env=env)


def main() -> None:
    from co3cli.dump import write_dump

    src = HERE / "source.h5"
    write_dump(src, source_layers(np.random.default_rng(20260101)),
               steps=np.array([0, 5, 10]), loss=np.float32([2.25, 1.5, 1.125]),
               attrs={"task": "golden", "seed": 20260101})
    co3("codebook", "build", str(src), "-o", str(HERE / "book.json"), *BOOK, "-q")
    for name, opts in CASES.items():
        if name in CTX_OLD_CASES:
            os.environ["SOURCE_DATE_EPOCH"] = EPOCH
            compress_v1(src, HERE / f"{name}.co3", opts, CTX_OLD_CASES[name])
        else:
            co3("compress", str(src), "-o", str(HERE / f"{name}.co3"), *opts, "-q")
        co3("decompress", str(HERE / f"{name}.co3"), "-o", str(HERE / f"{name}.h5"), "-q")
    make_ctx3()
    make_ctx4()
    make_ctx5()


def make_v15() -> None:
    """Every ``.co3`` fixture rewritten by this version from the sources as they are (the
    sources, the codebook and what the files decode to stay: ``.co3`` 1.5)."""
    src = HERE / "source.h5"
    os.environ["SOURCE_DATE_EPOCH"] = EPOCH
    for name, opts in CASES.items():
        if name in CTX_OLD_CASES:
            compress_v1(src, HERE / f"{name}.co3", opts, CTX_OLD_CASES[name])
        else:
            co3("compress", str(src), "-o", str(HERE / f"{name}.co3"), *opts, "-q")
    for name, opts in CTX3_CASES.items():
        compress_v1(src, HERE / f"{name}.co3", opts, CTX_OLD_CASES[name])
    for name, opts in CTX4_CASES.items():
        compress_v1(src, HERE / f"{name}.co3", opts, CTX_OLD_CASES[name])
    make_ctx5()
    for cases, source in ((GROUP_CASES, GROUP_SOURCE), (STEPS_CASES, STEPS_SOURCE),
                          (SAME_CASES, SAME_SOURCE)):
        for name, opts in cases.items():
            if name in CTX_OLD_CASES:
                compress_v1(source, HERE / f"{name}.co3", opts, CTX_OLD_CASES[name])
            else:
                co3("compress", str(source), "-o", str(HERE / f"{name}.co3"), *opts, "-q")


if __name__ == "__main__":
    if sys.argv[1:] == ["--groups"]:  # only the 1.1 fixtures (the others stay as they are)
        make_groups()
    elif sys.argv[1:] == ["--ctx3"]:  # only the ctx model version 3 fixtures
        make_ctx3()
    elif sys.argv[1:] == ["--ctx4"]:  # only the ctx model version 4 fixtures
        make_ctx4()
    elif sys.argv[1:] == ["--ctx5"]:  # only the ctx model version 5 fixtures (the default)
        make_ctx5()
    elif sys.argv[1:] == ["--v15"]:  # every .co3 rewritten, the sources kept
        make_v15()
    elif sys.argv[1:] == ["--tables"]:  # the codebook and every .co3 rebuilt (new fits)
        co3("codebook", "build", str(HERE / "source.h5"), "-o", str(HERE / REBUILT_BOOK), *BOOK,
            "-q")
        make_v15()
    elif sys.argv[1:] == ["--steps"]:  # only the step-group fixtures
        make_steps()
    elif sys.argv[1:] == ["--same"]:  # only the equal-layer fixtures
        make_same()
    elif sys.argv[1:] == ["--xref"]:  # only the fixtures of layers coded given another
        make_xref()
    else:
        main()
        make_groups()
        make_steps()
