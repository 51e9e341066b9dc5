"""co3cli.detmath: the same bits on every machine, within a few ulps of the C library."""

from __future__ import annotations

import math

import numpy as np
import pytest

from co3cli import detmath


def _ulps(got, want):
    got, want = np.asarray(got, dtype=np.float64), np.asarray(want, dtype=np.float64)
    return np.abs(got - want) / np.spacing(np.abs(want))


@pytest.mark.parametrize("lo, hi", [(-745.0, 709.7), (-1.0, 1.0), (-30.0, 0.0), (-1e-9, 1e-9)])
def test_exp_within_an_ulp_of_libm(lo, hi):
    x = np.random.default_rng(0).uniform(lo, hi, 50_000)
    want = np.array([math.exp(v) for v in x])
    normal = want > 2.2250738585072014e-308
    assert _ulps(detmath.exp(x)[normal], want[normal]).max() <= 1.0
    # subnormal results: one rounding, within 1 unit of the smallest subnormal
    assert np.abs(detmath.exp(x)[~normal] - want[~normal]).max(initial=0) <= 5e-324


@pytest.mark.parametrize("lo, hi", [(1e-300, 1e300), (0.5, 2.0), (0.999, 1.001), (4e-324, 1e-308)])
def test_log_within_an_ulp_of_libm(lo, hi):
    x = np.exp(np.random.default_rng(1).uniform(math.log(lo), math.log(hi), 50_000))
    x = x[x > 0]
    want = np.array([math.log(v) for v in x])
    nz = want != 0
    assert _ulps(detmath.log(x)[nz], want[nz]).max() <= 1.0


def test_special_values():
    e = detmath.exp(np.array([np.inf, -np.inf, np.nan, 710.0, -746.0, 0.0]))
    assert e[0] == np.inf and e[1] == 0 and np.isnan(e[2]) and e[3] == np.inf and e[4] == 0
    assert e[5] == 1.0
    lg = detmath.log(np.array([0.0, -1.0, np.inf, np.nan, 1.0, 2.0]))
    assert lg[0] == -np.inf and np.isnan(lg[1]) and lg[2] == np.inf and np.isnan(lg[3])
    assert lg[4] == 0.0 and lg[5] == math.log(2.0)
    p = detmath.pow(np.array([0.0, np.inf, 4.0, -1.0, 1.0]), 0.5)
    assert p[0] == 0 and p[1] == np.inf and p[2] == 2.0 and np.isnan(p[3]) and p[4] == 1.0
    assert detmath.exp(1.0) == pytest.approx(math.e, rel=1e-16)
    assert isinstance(detmath.exp(1.0), float)
    m = detmath.expm1(np.array([1e-20, -1e-10, 0.3, -0.3, 2.0, -50.0]))
    want = np.array([math.expm1(v) for v in (1e-20, -1e-10, 0.3, -0.3, 2.0, -50.0)])
    assert _ulps(m, want).max() <= 2.0


def test_pow_and_log2_close_to_libm():
    rng = np.random.default_rng(2)
    x = rng.uniform(0, 1e4, 20_000)
    for p in (0.37, 1.0, 2.5):
        want = np.array([math.pow(v, p) for v in x])
        assert np.allclose(detmath.pow(x, p), want, rtol=1e-14, atol=0)
    assert np.allclose(detmath.log2(x), np.log2(x), rtol=1e-15, atol=1e-300)


def test_fixed_order_sums_are_exact_where_they_must_be():
    """The sums add each entry to partial ``i % LANES`` and the partials in order: the same
    bits for any SIMD width, and equal to a plain loop doing exactly that."""
    rng = np.random.default_rng(3)
    L = np.log(rng.random(10_003)).astype(np.float32)
    b = 0.8
    parts = np.zeros((3, detmath.LANES))
    for i, v in enumerate(L.astype(np.float64)):
        t = float(detmath.exp(max(b * v, -708.0)))
        parts[:, i % detmath.LANES] += (t, v * t, v * v * t)
    want = tuple(sum(float(x) for x in row) for row in parts)  # in lane order
    assert detmath.power_sums(L, b) == want
    a = rng.random(1001).astype(np.float32)
    acc = np.zeros(detmath.LANES)
    for i, v in enumerate(a):
        acc[i % detmath.LANES] += float(v)
    assert detmath.fsum(a) == sum(float(x) for x in acc)


def test_log_ratio_matches_the_scalar_log():
    a = np.concatenate([np.random.default_rng(4).random(5000).astype(np.float32),
                        np.float32([1e-40, 1.4e-45, 1.0, 1.4142135, 0.70710677])])
    out = np.empty(a.size, dtype=np.float32)
    amax = a.max()
    detmath.log_ratio_f32(a, a.view(np.int32), amax, out)
    la = float(detmath.log(float(amax)))
    want = np.array([np.float32(min(float(detmath.log(float(v))) - la, 0.0)) for v in a])
    assert np.array_equal(out, want)
