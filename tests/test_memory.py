"""Memory stays bounded by the largest layer, not the dump: ``co3 compress`` / ``decompress`` of
a 200 MB dump, each in its own process, peak RSS < 3 x largest layer dataset + 450 MB; and the
peak for 4 layers stays within a quarter layer of the peak for 2 layers of the same size (plus,
for ``ctx`` compress, the reference symbols the plan keeps, at most ``KEEP_BYTES``).

Slow (writes ~0.5 GB of temporary files); run with ``pytest -m slow tests/test_memory.py``.
The full-size version is ``benchmarks/bench_memory.py``.
"""

import os
import subprocess
import sys
import time

import numpy as np
import pytest

LAYERS, STEPS, NUMEL = 4, 25, 500_000  # 50 MB of float32 per layer dataset, 200 MB in all
LAYER_BYTES = STEPS * NUMEL * 4
BUDGET_BYTES = 3 * LAYER_BYTES + 450e6


# A small middle process forks the command and reports that child's own peak RSS. Measuring
# the command as a direct child of pytest is wrong on Linux: a child spawned with vfork/fork
# starts from the parent's memory map, and ru_maxrss keeps that high-water mark across exec,
# so a big pytest process would be reported as the command's peak.
_WRAP = """import os, sys
pid = os.fork()
if pid == 0:
    os.execvp(sys.argv[1], sys.argv[1:])
_, status, ru = os.wait4(pid, 0)
sys.stderr.write("\\nco3-test-maxrss %d\\n" % ru.ru_maxrss)
sys.exit(os.waitstatus_to_exitcode(status))
"""


def peak_rss(argv, env):
    """Exit code, stderr and peak RSS in bytes of the command alone (see ``_WRAP``)."""
    r = subprocess.run([sys.executable, "-c", _WRAP, *argv], env=env, stdout=subprocess.DEVNULL,
                       stderr=subprocess.PIPE, timeout=600)
    err, _, tail = r.stderr.decode(errors="replace").rpartition("co3-test-maxrss ")
    scale = 1 if sys.platform == "darwin" else 1024  # ru_maxrss: bytes on macOS, KiB on Linux
    return r.returncode, err.strip(), int(tail) * scale


def write_big_dump(path, rng, layers=LAYERS):
    from co3cli.dump import DumpWriter

    with DumpWriter(path, {"task": "test_memory"}) as w:
        for i in range(layers):
            g = np.empty((STEPS, NUMEL), dtype=np.float32)
            for t in range(STEPS):
                a = rng.standard_gamma(1.25, NUMEL) ** 1.25 * 1e-3
                a *= np.where(rng.random(NUMEL) < 0.5, -1.0, 1.0)
                a[rng.random(NUMEL) < 0.15] = 0.0
                g[t] = a
            w.add_layer(f"layer{i}.weight", g, (NUMEL,))
            del g
        w.set_steps(np.arange(STEPS) * 10)


ENV = {**os.environ, "OMP_NUM_THREADS": "1", "NUMBA_NUM_THREADS": "1"}
CO3 = [sys.executable, "-m", "co3cli"]
needs_fork = pytest.mark.skipif(not (hasattr(os, "wait4") and hasattr(os, "fork")),
                                reason="needs os.fork and os.wait4 for a child's own rusage")


@pytest.fixture(scope="module")
def dumps(tmp_path_factory):
    d = tmp_path_factory.mktemp("memory")
    write_big_dump(d / "big.h5", np.random.default_rng(0))
    write_big_dump(d / "two.h5", np.random.default_rng(1), layers=2)
    return d


def measure(name, argv):
    t0 = time.perf_counter()
    code, err, rss = peak_rss(CO3 + [str(a) for a in argv] + ["-q"], ENV)
    assert code == 0, f"{name}: {err}"
    return rss / 1e6, time.perf_counter() - t0


@pytest.mark.slow
@needs_fork
def test_peak_rss_within_budget(dumps):
    from co3cli.dump import Dump
    from co3cli.formats import get_grid
    from co3cli.quantize import dequantize, quantize
    from co3cli.scales import compute_scale

    dump = dumps / "big.h5"
    peaks = {}
    for coder in ("ctx", "ans", "huffman"):  # ctx: the default (its references included)
        x, y = dumps / f"x-{coder}.co3", dumps / f"y-{coder}.h5"
        peaks[f"compress {coder}"] = measure(coder, ["compress", dump, "-o", x, "--coder", coder])
        peaks[f"decompress {coder}"] = measure(coder, ["decompress", x, "-o", y])
        with Dump.open(y) as d, Dump.open(dump) as s:  # it really decoded the data
            grid = get_grid("fp8-e5m2")
            g = s.read_layer("layer3.weight")[-1]
            q = d.read_layer("layer3.weight")[-1]
            sc = compute_scale(g, grid)
            np.testing.assert_array_equal(q, dequantize(quantize(g, grid, sc), grid, sc))
        y.unlink()
    summary = ", ".join(f"{k}: {mb:.0f} MB in {s:.1f} s" for k, (mb, s) in peaks.items())
    print(f"budget {BUDGET_BYTES / 1e6:.0f} MB; {summary}")
    over = {k: mb for k, (mb, _) in peaks.items() if mb * 1e6 >= BUDGET_BYTES}
    assert not over, f"peak RSS over {BUDGET_BYTES / 1e6:.0f} MB: {over} ({summary})"


def kept_reference_bytes(layers):
    """The symbols ``co3 compress`` keeps at once for ``LYX`` references (``ctx``) in a dump
    of ``layers`` same-shaped layers: the plan's, fixed from the shapes."""
    from co3cli.references import ReferencePlan

    names = [f"layer{i}.weight" for i in range(layers)]
    return ReferencePlan(names, [(NUMEL,)] * layers, [], STEPS, nsym=247).peak_bytes  # fp8-e5m2


@pytest.mark.slow
@needs_fork
@pytest.mark.parametrize("step", [
    "compress",
    "compress --no-references",
    "decompress",
])
def test_peak_rss_does_not_grow_with_layer_count(dumps, step):
    """Peak RSS with 4 layers against 2. Against 1 it would measure a one-off instead: the
    second layer's decode while the first is written costs ctx decompress ~14 MB once (peak
    300 MB with 1 layer, 314 MB with 2, 4 and 8 layers of 50 MB).

    ``compress`` (``ctx``) also keeps the symbols of earlier same-shaped layers until the
    later layers that may be coded given them are written (``co3cli.references``; at most
    ``KEEP_BYTES``, and for these unrelated layers not one is used): the growth allowed is
    what the plan keeps more; ``--no-references`` keeps none."""
    peaks = {}
    extra = ["--no-references"] if step.endswith("--no-references") else []
    for dump in ("two", "big"):
        src = dumps / f"{dump}.h5"
        co3 = dumps / f"g-{dump}.co3"
        if step.startswith("compress"):
            peaks[dump] = measure(dump, ["compress", src, "-o", co3, *extra])[0]
        else:
            if not co3.exists():
                measure(dump, ["compress", src, "-o", co3])
            peaks[dump] = measure(dump, ["decompress", co3, "-o", dumps / f"g-{dump}.h5"])[0]
            (dumps / f"g-{dump}.h5").unlink()
    kept = 0.0
    if step == "compress":
        kept = (kept_reference_bytes(LAYERS) - kept_reference_bytes(2)) / 1e6
        assert kept > 0  # 3 layers' symbols held for the 4th against 1 for the 2nd
    growth = peaks["big"] - peaks["two"]
    print(f"{step}: 2 layers {peaks['two']:.0f} MB, {LAYERS} layers {peaks['big']:.0f} MB, "
          f"references kept {kept:.0f} MB more")
    assert growth < kept + 0.25 * LAYER_BYTES / 1e6, \
        f"{step}: peak {growth:.0f} MB higher with {LAYERS} layers than with 2, " \
        f"{kept:.0f} MB of it references ({peaks})"
