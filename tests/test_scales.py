"""Scale rules: the guarded CO3 polynomial, its recorded fallback, the empirical-MSE rule."""

from __future__ import annotations

import numpy as np
import pytest

from co3cli.formats import get_grid
from co3cli.quantize import dequantize, quantize
from co3cli.scales import (CO3_POLY_BETA, SCALE_RULES, SortedMagnitudes, _gennorm_fit,
                           co3_poly_scale, compute_scale, empirical_mse_scale, scale_info)

FP4 = get_grid("fp4-co3")


def qmse(x, grid, s):
    xh = dequantize(quantize(x, grid, s), grid, s)
    return float(np.mean((x.astype(np.float64) - xh) ** 2))


def small_bias():
    """A 10-entry output bias: the GenNorm fit runs to beta = 20, outside the polynomial's range."""
    return np.linspace(-1e-2, 1e-2, 10).astype(np.float32)


def test_co3_poly_falls_back_outside_its_beta_range():
    x = small_bias()
    beta, alpha = _gennorm_fit(x)
    assert beta > CO3_POLY_BETA[1]
    raw = co3_poly_scale(beta, alpha)  # the unguarded rule: every entry saturates, v_hat ~ 0
    assert np.abs(dequantize(quantize(x, FP4, raw), FP4, raw)).max() < 1e-3 * np.abs(x).max()
    info = scale_info(x, FP4, "co3-poly")
    assert info.fallback and info.rule == "co3-poly" and info.used == "gennorm-mse"
    assert "beta" in info.reason and "[0.6, 2]" in info.reason
    assert info.scale == compute_scale(x, FP4, "gennorm-mse") == compute_scale(x, FP4, "co3-poly")
    assert qmse(x, FP4, info.scale) < 0.02 * qmse(x, FP4, raw)


def test_co3_poly_inside_its_range_is_the_polynomial():
    x = np.random.default_rng(0).laplace(size=4000).astype(np.float32)  # beta ~ 1
    info = scale_info(x, FP4, "co3-poly")
    assert not info.fallback and info.used == "co3-poly" and info.reason is None
    assert info.scale == np.float32(co3_poly_scale(*_gennorm_fit(x)))


def test_co3_poly_off_its_grid_falls_back():
    x = np.random.default_rng(0).laplace(size=4000).astype(np.float32)
    grid = get_grid("fp8-e5m2")
    info = scale_info(x, grid, "co3-poly")
    assert info.fallback and "fp4-co3" in info.reason
    assert info.scale == compute_scale(x, grid, "gennorm-mse")
    assert not scale_info(x, get_grid("fp2.1-b1"), "co3-poly").fallback  # the same grid


def test_scale_info_of_plain_rules_and_zeros():
    x = np.random.default_rng(1).normal(size=100).astype(np.float32)
    for rule in SCALE_RULES.ids():
        info = scale_info(x, FP4, rule)
        assert info.rule == rule and (rule == "co3-poly" or not info.fallback)
    assert scale_info(x, FP4).rule == "absmax"
    z = scale_info(np.zeros(5, np.float32), FP4, "co3-poly")
    assert z.scale == 1.0 and z.used == "none" and not z.fallback
    assert scale_info(x, get_grid("uniform4-c3")).rule == "clip"


def test_empirical_mse_is_registered():
    assert "empirical-mse" in SCALE_RULES.ids()
    assert "empirical-mse" in SCALE_RULES.allowed()


@pytest.mark.parametrize("fmt", ["fp4-co3", "fp8-e5m2", "uniform3"])
def test_sorted_magnitudes_mse_equals_real_quantization(fmt):
    grid = get_grid(fmt)
    rng = np.random.default_rng(2)
    x = (rng.standard_t(3, size=5000) * 1e-3).astype(np.float32)
    x[rng.random(x.size) < 0.3] = 0
    sm = SortedMagnitudes(x)
    for s in (compute_scale(x, grid), compute_scale(x, grid) * 4, 123.0):
        assert sm.mse(grid, float(np.float32(s)))[0] == pytest.approx(qmse(x, grid, s), rel=1e-6)


@pytest.mark.parametrize("fmt", ["fp4-co3", "fp8-e4m3", "uniform3"])
def test_empirical_mse_beats_every_other_rule_on_its_data(fmt):
    grid = get_grid(fmt)
    rng = np.random.default_rng(3)
    x = (rng.standard_t(2.5, size=20000) * 1e-3).astype(np.float32)
    x[rng.random(x.size) < 0.4] = 0
    best = qmse(x, grid, compute_scale(x, grid, "empirical-mse"))
    for rule in ("absmax", "gennorm-mse", "co3-poly"):
        assert best <= qmse(x, grid, compute_scale(x, grid, rule)) * (1 + 1e-6), rule
    # a dense scan finds nothing better
    s0 = float(compute_scale(x, grid, "empirical-mse"))
    dense = min(qmse(x, grid, s0 * k) for k in np.exp(np.linspace(-2, 2, 401)))
    assert best <= dense * (1 + 1e-4)


@pytest.mark.parametrize("k", [2.0 ** -10, 0.37, 3.0, 1e4])
def test_empirical_mse_is_scale_equivariant(k):
    x = np.random.default_rng(4).laplace(size=30000).astype(np.float32) * np.float32(1e-3)
    for fmt in ("fp4-co3", "fp8-e5m2"):
        grid = get_grid(fmt)
        a = empirical_mse_scale(x, grid)
        b = empirical_mse_scale(x * np.float32(k), grid)
        assert a / (b * k) == pytest.approx(1.0, rel=1e-5)


def test_empirical_mse_all_zero_and_constant():
    assert empirical_mse_scale(np.zeros(7, np.float32), FP4) is None
    assert compute_scale(np.zeros(7, np.float32), FP4, "empirical-mse") == 1.0
    x = np.full(9, -0.25, np.float32)  # one magnitude: quantized exactly
    assert qmse(x, FP4, compute_scale(x, FP4, "empirical-mse")) == 0.0


def test_co3_poly_never_sends_only_zeros():
    """A log-uniform scale mixture (like an error-fed upload): the GenNorm fit degenerates
    (beta ~ 0.06, alpha ~ 1e-24) and its optimum would round every entry to 0."""
    rng = np.random.default_rng(0)
    x = (rng.laplace(size=5000) * 10.0 ** rng.uniform(-6, 0, 5000)).astype(np.float32)
    from co3cli.scales import _gennorm_fit, gennorm_mse_unit_scale

    beta, alpha = _gennorm_fit(x)
    model_opt = np.float32(gennorm_mse_unit_scale(FP4, beta) / alpha)
    assert not np.any(dequantize(quantize(x, FP4, model_opt), FP4, model_opt))  # sends nothing
    for rule in ("co3-poly", "gennorm-mse"):  # neither sends the degenerate fit's optimum
        info = scale_info(x, FP4, rule)
        assert info.fallback and info.used == "empirical-mse" and "only zeros" in info.reason
        assert info.scale == compute_scale(x, FP4, "empirical-mse")
        assert qmse(x, FP4, info.scale) < 0.5 * float(np.mean(x.astype(np.float64) ** 2))


# every SIMD target numpy dispatches to above x86-64-v2 (unknown names are ignored elsewhere)
_NO_DISPATCH = ("AVX512F AVX512CD AVX512_SKX AVX512_CLX AVX512_CNL AVX512_ICL AVX512_SPR "
                "X86_V4 AVX2 FMA3 X86_V3 ASIMDHP ASIMDDP ASIMDFHM SVE")
_SCALES_SCRIPT = """
import numpy as np
from co3cli.formats import get_grid
from co3cli.scales import empirical_mse_scale, gennorm_mse_unit_scale
rng = np.random.default_rng(3)
x = (rng.standard_normal(20000) * rng.exponential(1.0, 20000)).astype(np.float32)
out = [f(g) for g in map(get_grid, ("fp8-e5m2", "fp8-e4m3", "fp4-co3"))
       for f in [lambda g: empirical_mse_scale(x, g)]
       + [lambda g, b=b: gennorm_mse_unit_scale(g, b) for b in (0.4, 0.7973, 1.0, 1.9)]]
print(np.array(out, dtype=np.float64).view(np.uint64).tolist())
"""


def test_mse_optimal_scales_do_not_depend_on_numpys_cpu_dispatch():
    """The MSE optimisers' results (the gennorm-mse unit scale of a fitted beta, the
    empirical-mse scale of a tensor) are the same float64 whichever SIMD kernels numpy picks for
    this CPU: with AVX-512 ``exp`` and ``**`` a gennorm-mse scale moved by 150 float32 ulps (and
    the golden files' bytes) against a machine without; their transcendental functions are
    libm's. (The GenNorm fit itself is not covered: numpy's float32 exp/log and BLAS dot.)"""
    import os
    import subprocess
    import sys

    runs = [subprocess.run([sys.executable, "-c", _SCALES_SCRIPT], capture_output=True, text=True,
                           env={**os.environ, **extra}, check=True).stdout
            for extra in ({}, {"NPY_DISABLE_CPU_FEATURES": _NO_DISPATCH})]
    assert runs[0] == runs[1] and len(runs[0]) > 50
