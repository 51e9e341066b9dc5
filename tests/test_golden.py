"""Golden files: what an earlier version wrote must decode bit for bit, and the same input must
still compress to the same bytes (``SOURCE_DATE_EPOCH`` fixes the one timestamp).

The fixtures in ``tests/golden/`` were made by co3cli 0.1.0 with ``tests/golden/make_golden.py``
(``GROUP_CASES``: small layers pooled into group blocks), rewritten in the ``.co3`` 1.5 layout;
the earlier ones are in ``tests/golden/v1.2/`` (1.0-1.2, ``tests/test_container_compact.py``),
``tests/golden/v1.3/`` (``tests/test_container_v14.py``) and ``tests/golden/v1.4/``
(``tests/test_container_v15.py``).
``CTX3_CASES`` by co3cli 0.2 (``ctx`` model version 3), ``CTX4_CASES`` with version 4,
``CTX5_CASES`` with version 5 (the default).
``CTX_OLD_CASES`` were written with an earlier ``ctx`` model version, the default then: they
are rebuilt with that ``model_version``.
"""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from golden.make_golden import (BOOK, CASES, CTX3_CASES, CTX4_CASES, CTX5_CASES, CTX_OLD_CASES,
                                EPOCH, GROUP_CASES, GROUP_SOURCE, HERE, REBUILT_BOOK,
                                compress_v1)

ALL_CASES = {**CASES, **CTX3_CASES, **CTX4_CASES, **CTX5_CASES}

VOLATILE = ("co3cli_version", "created")  # what a newer version may write differently


def _blocks(path):
    from co3cli.container import open_co3

    with open(path, "rb") as f:
        co3 = open_co3(f, str(path))
        header = {k: v for k, v in co3.header.items() if k not in VOLATILE}
        blocks = [(b.name, b.meta, bytes(b.table), np.asarray(b.scales).tobytes(),
                   [bytes(x) for x in b.bodies]) for b in co3.layers()]
    return header, blocks


def _same_dump(a, b):
    from co3cli.dump import Dump

    with Dump.open(a) as x, Dump.open(b) as y:
        assert x.layers == y.layers
        assert np.array_equal(x.steps, y.steps)
        assert np.array_equal(x.loss, y.loss)
        for name in x.layers:
            assert x.shape(name) == y.shape(name)
            # bit for bit (views as integers: -0.0 and NaN payloads count)
            assert np.array_equal(x.read_layer(name).view(np.uint32),
                                  y.read_layer(name).view(np.uint32)), name


def compress_case(src, out, case, opts, capsys):
    """``co3 compress src -o out *opts`` as the fixture ``case`` was made (earlier ctx model
    versions through the library with their ``model_version``)."""
    from conftest import run_cli

    if case in CTX_OLD_CASES:
        compress_v1(src, out, opts, CTX_OLD_CASES[case])
        return
    code, _, err = run_cli("compress", src, "-o", out, *opts, "-q", capsys=capsys)
    assert code == 0, err


@pytest.mark.parametrize("case", sorted(ALL_CASES))
def test_golden_decodes_bit_exactly(case, tmp_path):
    from co3cli.codec import decompress

    out = tmp_path / "out.h5"
    decompress(HERE / f"{case}.co3", out)
    _same_dump(out, HERE / f"{case}.h5")


@pytest.mark.parametrize("case", sorted(ALL_CASES))
def test_golden_compresses_to_the_same_bytes(case, tmp_path, monkeypatch, capsys):
    from co3cli import __version__

    monkeypatch.setenv("SOURCE_DATE_EPOCH", EPOCH)
    out = tmp_path / "out.co3"
    compress_case(HERE / "source.h5", out, case, ALL_CASES[case], capsys)
    golden = HERE / f"{case}.co3"
    assert _blocks(out) == _blocks(golden)  # every table, scale and coded body
    if __version__ == json.loads(_header_json(golden))["co3cli_version"]:
        assert out.read_bytes() == golden.read_bytes()


def test_golden_codebook_rebuilds_identically(tmp_path, monkeypatch, capsys):
    """``co3 codebook build`` writes ``REBUILT_BOOK`` again (its tables: the fits of
    ``co3cli.detmath``, the same on every machine; ``book.json`` was built before them)."""
    from co3cli import __version__
    from conftest import run_cli

    monkeypatch.setenv("SOURCE_DATE_EPOCH", EPOCH)
    out = tmp_path / "book.json"
    code, _, err = run_cli("codebook", "build", HERE / "source.h5", "-o", out, *BOOK, "-q",
                           capsys=capsys)
    assert code == 0, err
    new, old = json.loads(out.read_text()), json.loads((HERE / REBUILT_BOOK).read_text())
    strip = ("co3cli_version", "created", "checksum")
    assert {k: v for k, v in new.items() if k not in strip} == \
        {k: v for k, v in old.items() if k not in strip}
    if __version__ == old["co3cli_version"]:
        assert out.read_bytes() == (HERE / REBUILT_BOOK).read_bytes()


def _header_json(path) -> str:
    from co3cli.container import open_co3

    with open(path, "rb") as f:
        return json.dumps(open_co3(f, str(path)).header)


@pytest.mark.parametrize("case", sorted(GROUP_CASES))
def test_golden_groups_decode_bit_exactly(case, tmp_path):
    from co3cli.codec import decompress
    from co3cli.container import MINOR, open_co3

    with open(HERE / f"{case}.co3", "rb") as f:
        co3 = open_co3(f)
        assert co3.version == (1, MINOR) and "small_layers" in co3.header  # (1.1: golden/v1.2)
        assert sum(b.group is not None for b in co3.layers()) == 17  # all but the conv kernel
    out = tmp_path / "out.h5"
    decompress(HERE / f"{case}.co3", out)
    _same_dump(out, HERE / f"{case}.h5")


@pytest.mark.parametrize("case", sorted(GROUP_CASES))
def test_golden_groups_compress_to_the_same_bytes(case, tmp_path, monkeypatch, capsys):
    from co3cli import __version__
    from conftest import run_cli

    monkeypatch.setenv("SOURCE_DATE_EPOCH", EPOCH)
    out = tmp_path / "out.co3"
    code, _, err = run_cli("compress", GROUP_SOURCE, "-o", out, *GROUP_CASES[case], "-q",
                           capsys=capsys)
    assert code == 0, err
    golden = HERE / f"{case}.co3"
    assert _blocks(out) == _blocks(golden)
    if __version__ == json.loads(_header_json(golden))["co3cli_version"]:
        assert out.read_bytes() == golden.read_bytes()


def _baseline_cases():
    """(case, source, options) of the fixtures the CPU test compresses again: every kind of
    table and block (one table per layer, groups with their octave priors, step groups,
    equal layers, layers coded given another, the default ``ctx``, the lossless formats)."""
    from golden.make_golden import (GROUP_CASES, SAME_CASES, SAME_SOURCE, STEPS_CASES,
                                    STEPS_SOURCE, XREF_CASES, XREF_SOURCE)

    out = [(c, HERE / "source.h5", ALL_CASES[c]) for c in
           ("fp8-ans", "fp8-huffman", "fp4-ans", "fp4-huffman", "fp8-ctx-steps", "fp8-default5",
            "fp4-default5", "e4m3-empirical-mse")]
    for cases, src in ((GROUP_CASES, GROUP_SOURCE), (STEPS_CASES, STEPS_SOURCE),
                       (SAME_CASES, SAME_SOURCE), (XREF_CASES, XREF_SOURCE)):
        out += [(c, src, opts) for c, opts in cases.items() if c not in CTX_OLD_CASES]
    for t in ("f32", "bf16", "f16"):  # the lossless formats: their table choices
        fmt = ["--format", f"{t}-lossless"]
        out += [(f"lossless-{t}", HERE / f"lossless-{t}-source.h5", fmt + ["--level", "max"]),
                (f"lossless3-{t}", HERE / f"lossless-{t}-source.h5", fmt),
                (f"lossless3-big-{t}", HERE / f"lossless3-big-{t}-source.h5", fmt)]
    return out


# options without a fixture: compressed here, then in the emulated process
_NATIVE_CASES = {"gennorm2-zi": ["--coder", "ans", "--model", "gennorm2-zi"],
                 "empirical-mse": ["--coder", "ans", "--scale", "empirical-mse"],
                 "co3-poly": ["--format", "fp4-co3", "--coder", "ans", "--scale", "co3-poly"],
                 "laplace-zi": ["--coder", "huffman", "--model", "laplace-zi"],
                 "dweibull": ["--coder", "ans", "--model", "dweibull"]}


def test_golden_bytes_do_not_depend_on_the_cpu(tmp_path, monkeypatch, capsys):
    """The fixtures' bytes again in a process that sees an x86-64 CPU without AVX2 and FMA:
    numpy's CPU-dispatched kernels off (``NPY_DISABLE_CPU_FEATURES``), OpenBLAS's Nehalem
    kernels, the C library's plain (not FMA) ``exp``/``log``/``pow`` (and so SciPy's special
    functions). Before ``co3cli.detmath`` ten of the fixtures came out different; every scale
    rule and table model is covered (those without a fixture against this process's file)."""
    import platform
    import subprocess
    import sys

    from conftest import run_cli

    try:
        from numpy._core._multiarray_umath import __cpu_dispatch__, __cpu_features__
    except ImportError:  # numpy 1.x
        from numpy.core._multiarray_umath import __cpu_dispatch__, __cpu_features__

    if platform.machine().lower() not in ("x86_64", "amd64"):
        pytest.skip("the baseline CPU is emulated on x86-64 only")
    off = [f for f in __cpu_dispatch__ if __cpu_features__.get(f)]
    env = {**os.environ, "SOURCE_DATE_EPOCH": EPOCH, "OPENBLAS_CORETYPE": "Nehalem",
           "GLIBC_TUNABLES": "glibc.cpu.hwcaps=-AVX2,-FMA,-AVX512F,-AVX",
           "NPY_DISABLE_CPU_FEATURES": " ".join(off)}
    env.pop("NPY_ENABLE_CPU_FEATURES", None)
    script = ("import sys; from co3cli.cli.app import main\n"
              "for case, src, out, *opts in [a.split('|') for a in sys.argv[1:]]:\n"
              "    try:\n"
              "        main(['compress', src, '-o', out, *opts, '-q'])\n"
              "    except SystemExit as e:\n"
              "        assert not e.code, case\n")
    cases = _baseline_cases() + [(c, HERE / "source.h5", o) for c, o in _NATIVE_CASES.items()]
    monkeypatch.setenv("SOURCE_DATE_EPOCH", EPOCH)
    for case, opts in _NATIVE_CASES.items():
        code, _, err = run_cli("compress", HERE / "source.h5", "-o", tmp_path / f"{case}-here.co3",
                               *opts, "-q", capsys=capsys)
        assert code == 0, err
    args = ["|".join([case, str(src), str(tmp_path / f"{case}.co3"), *opts])
            for case, src, opts in cases]
    run = subprocess.run([sys.executable, "-c", script, *args], env=env, cwd=tmp_path,
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-2000:]
    for case, _, _ in cases:
        want = tmp_path / f"{case}-here.co3" if case in _NATIVE_CASES else HERE / f"{case}.co3"
        assert _blocks(tmp_path / f"{case}.co3") == _blocks(want), case
