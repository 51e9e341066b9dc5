import os

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402
import pytest  # noqa: E402


def synthetic_layers(rng, steps=3):
    """Gradient-like layers: GenNorm-ish with exact zeros, a bias, one entry, all zeros."""
    from scipy import stats

    def gn(n, beta, scale, p0):
        x = stats.gennorm.rvs(beta, scale=scale, size=(steps, n), random_state=rng)
        x[rng.random((steps, n)) < p0] = 0.0
        return x.astype(np.float32)

    return {
        "fc1.weight": (gn(6000, 0.8, 1e-3, 0.2), (60, 100)),
        "fc1.bias": (gn(60, 1.5, 1e-2, 0.0), (60,)),
        "fc2.weight": (gn(1, 1.0, 1.0, 0.0), (1, 1)),
        "dead.weight": (np.zeros((steps, 40), np.float32), (4, 10)),
    }


def run_cli(*args, capsys):
    """Run the co3 CLI in-process; returns (exit code, stdout, stderr)."""
    from co3cli.cli.app import main

    try:
        main([str(a) for a in args])
        code = 0
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.fixture
def dump_path(tmp_path):
    from co3cli.dump import write_dump

    rng = np.random.default_rng(1)
    layers = synthetic_layers(rng)
    path = tmp_path / "dump.h5"
    write_dump(path, layers, steps=np.array([0, 10, 20]), loss=np.float32([2.0, 1.5, 1.0]),
               attrs={"task": "synthetic", "seed": 1})
    return path
