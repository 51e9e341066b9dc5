"""Start-up: what the short commands import, the scipy-free root finder, the FL warm-up."""

import csv
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from co3cli.models.families import BETA_BOUNDS
from co3cli.models.mle import _bracket_root

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "co3cli" / "sample_data" / "mnist5k-mlp.h5"
HEAVY = ("torch", "scipy", "scipy.optimize", "scipy.special", "numba", "h5py", "matplotlib")

WRAPPER = """
import sys
from co3cli.cli.app import main
try:
    main(sys.argv[1:])
except SystemExit:
    pass
print(" ".join(m for m in {heavy!r} if m in sys.modules), file=sys.stderr)
"""


def loaded(*args, cwd=ROOT) -> set[str]:
    """The heavy modules a ``co3`` command has imported by the time it exits."""
    p = subprocess.run([sys.executable, "-c", WRAPPER.format(heavy=HEAVY), *args], cwd=cwd,
                       capture_output=True, text=True, timeout=300)
    return set(p.stderr.strip().splitlines()[-1].split()) if p.stderr.strip() else set()


def test_help_imports_nothing_heavy():
    assert loaded("--help") == set()


def test_compress_and_decompress_import_no_torch_and_no_scipy_optimize(tmp_path):
    out = tmp_path / "g.co3"
    mods = loaded("compress", str(SAMPLE), "-o", str(out), "-q")
    assert out.exists() and "torch" not in mods and "scipy.optimize" not in mods
    mods = loaded("decompress", str(out), "-o", str(tmp_path / "g.h5"), "-q")
    assert (tmp_path / "g.h5").exists()
    assert not {"torch", "scipy.optimize", "scipy.special"} & mods


def test_bracket_root_finds_the_moment_start_that_scipy_finds():
    from scipy import optimize, special

    tmin, tmax = math.log(BETA_BOUNDS[0]), math.log(BETA_BOUNDS[1])
    rs = np.concatenate([np.linspace(1.0001, 40.0, 400),
                         np.exp(np.random.default_rng(1).uniform(0.0, 6.0, 400))])
    checked = 0
    for r in rs:
        def f(t, r=float(r)):
            b = math.exp(t)
            return (float(special.gammaln(1 / b) + special.gammaln(3 / b) - 2 * special.gammaln(2 / b))
                    - math.log(r))

        if f(tmin) <= 0 or f(tmax) >= 0:
            continue
        assert _bracket_root(f, tmin, tmax, 1e-12) == pytest.approx(
            optimize.brentq(f, tmin, tmax, xtol=1e-12), abs=2e-12)
        checked += 1
    assert checked > 500
    for fn, lo, hi, root in ((math.cos, 0.0, 3.0, math.pi / 2),
                             (lambda x: x ** 3 - 2 * x - 5, 2.0, 3.0, 2.0945514815423265),
                             (lambda x: (x - 1.5) ** 5, 0.0, 4.0, 1.5),  # flat: bisection
                             (lambda x: x - 1.0, 1.0, 2.0, 1.0),  # a root at an end
                             (lambda x: math.exp(x) - 1e6, -50.0, 50.0, math.log(1e6))):
        for xtol in (1e-12, 1e-6, 1e-3):
            assert abs(_bracket_root(fn, lo, hi, xtol) - root) <= xtol + 1e-12
    with pytest.raises(ValueError):
        _bracket_root(lambda x: x * x + 1.0, -1.0, 1.0, 1e-10)


def test_fl_warm_up_changes_nothing_but_timings(tmp_path, monkeypatch):
    pytest.importorskip("torch")
    from co3cli.simulate.fl import Simulation, run_fl
    from co3cli.simulate.flconfig import FLConfig

    cfg = FLConfig(task="digits-mlp", clients=3, rounds=4, batch_size=16, eval_every=2,
                   compressor="co3", compressor_params={"format": "fp4-co3", "refit_every": 2},
                   gamma=0.7)
    run_fl(cfg, tmp_path / "warm")
    monkeypatch.setattr(Simulation, "warm_up", lambda self: None)
    run_fl(cfg, tmp_path / "cold")

    def rows(run):
        with open(run / "metrics.csv", newline="") as f:
            return [{k: v for k, v in r.items() if not k.startswith("t_") and not k.endswith("_s")}
                    for r in csv.DictReader(f)]  # t_*, and the clock's *_s: timings

    assert rows(tmp_path / "warm") == rows(tmp_path / "cold")
