"""Tests for co3cli.models: fits against known parameters and scipy, pmf vs Monte Carlo,
goodness of fit, MSE-optimal scales, serialisation and input validation."""

import json
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from co3cli import models as M
from co3cli import scales as S
from co3cli.models import mle as MLE
from co3cli.errors import InputError
from co3cli.formats import get_grid

BETAS = (0.5, 1.0, 1.5, 2.0)


def gennorm_sample(beta, n, scale=1e-3, seed=0, p0=0.0):
    rng = np.random.default_rng(seed)
    x = stats.gennorm.rvs(beta, scale=scale, size=n, random_state=rng)
    if p0:
        x[rng.random(n) < p0] = 0.0
    return x


def quantize_symbols(x, grid, scale):
    """Test-side rounding: nearest magnitude via searchsorted on the edges, saturating."""
    y = np.abs(np.asarray(x, dtype=np.float64) * scale)
    k = np.searchsorted(grid.edges, y, side="left")
    return grid.K + np.where(x < 0, -k, k)


# ---------------------------------------------------------------------------- fitting


@pytest.mark.parametrize("beta", BETAS)
def test_gennorm_recovers_parameters(beta):
    x = gennorm_sample(beta, 200_000, scale=2e-3, seed=int(beta * 10))
    f = M.fit(x, "gennorm")
    assert f.model == "gennorm" and f.p0 == 0.0 and f.n == x.size == f.n_nonzero
    assert abs(f.params["beta"] - beta) < 0.03 * beta
    assert abs(f.params["scale"] / 2e-3 - 1) < 0.02


@pytest.mark.parametrize("beta", BETAS)
def test_gennorm_matches_scipy_fit(beta):
    x = gennorm_sample(beta, 200_000, seed=100 + int(beta * 10))
    ref_beta, ref_loc, ref_scale = stats.gennorm.fit(x, floc=0)
    f = M.fit(x, "gennorm")
    assert ref_loc == 0
    assert abs(f.params["beta"] - ref_beta) < 0.005
    assert abs(f.params["scale"] / ref_scale - 1) < 0.005
    # our optimum is at least as good as scipy's (profile likelihood is maximised)
    ours = np.sum(stats.gennorm.logpdf(x, f.params["beta"], scale=f.params["scale"]))
    theirs = np.sum(stats.gennorm.logpdf(x, ref_beta, scale=ref_scale))
    assert ours >= theirs - 1e-6 * abs(theirs)


def test_gennorm_small_input_and_dtypes_agree():
    x = gennorm_sample(1.3, 3000, seed=5)  # below the subsample size: single-stage Newton
    ref = stats.gennorm.fit(x, floc=0)
    f64 = M.fit(x, "gennorm")
    assert abs(f64.params["beta"] - ref[0]) < 0.005
    f32 = M.fit(x.astype(np.float32), "gennorm")
    assert abs(f32.params["beta"] - f64.params["beta"]) < 1e-4
    f16 = M.fit((x * 1e3).astype(np.float16), "gennorm")
    assert abs(f16.params["beta"] - f64.params["beta"]) < 0.02
    # non-contiguous input
    fs = M.fit(np.repeat(x, 2)[::2], "gennorm")
    assert fs.params == f64.params
    before = x.copy()  # the input is never modified
    M.fit_all(x)
    np.testing.assert_array_equal(x, before)


def _power_sums64(L, b):
    e = np.exp(b * L)
    return e.sum(), (L * e).sum(), (L * L * e).sum()


def test_profile_derivatives_match_finite_differences(monkeypatch):
    x = gennorm_sample(0.8, 50_000, seed=7, p0=0.1)
    data = MLE._Data(x)
    L64 = np.log(data.a_nz) - math.log(data.amax)
    for kind, frac in (("gennorm", math.log(data.n_nonzero / data.n)), ("weibull", 0.0)):
        prof32 = MLE._Profile(kind, data.L, frac)
        prof64 = MLE._Profile(kind, L64, frac)
        for t in (-1.0, 0.2, 1.0):
            fast = prof32(t)
            with monkeypatch.context() as mp:  # float64 sums: finite differences are clean
                mp.setattr(MLE, "_power_sums", _power_sums64)
                g, gt, gtt, _ = prof64(t)
                eps = 1e-3
                v = [prof64(t + k * eps) for k in (-2, -1, 1, 2)]
            for i, want in ((0, gt), (1, gtt)):
                fd = (v[0][i] - 8 * v[1][i] + 8 * v[2][i] - v[3][i]) / (12 * eps)
                assert want == pytest.approx(fd, rel=1e-7, abs=1e-9)
            # float32 L / chunked float32 sums (for speed) move the stationary point of the
            # profile by ~1e-5 in log(beta): far inside the 0.005 accuracy target
            np.testing.assert_allclose(fast[:3], (g, gt, gtt), rtol=1e-5, atol=1e-6)


def test_zero_inflated_fit():
    beta, p0 = 1.2, 0.2
    x = gennorm_sample(beta, 300_000, seed=11, p0=p0)
    f = M.fit(x)  # default model
    assert f.model == "gennorm-zi"
    assert f.p0 == pytest.approx(np.mean(x == 0), abs=1e-15)
    assert abs(f.p0 - p0) < 0.005
    assert f.n_nonzero == np.count_nonzero(x)
    nz = x[x != 0]
    ref = stats.gennorm.fit(nz, floc=0)
    assert abs(f.params["beta"] - ref[0]) < 0.005
    assert abs(f.params["beta"] - beta) < 0.04


def test_plain_gennorm_collapses_on_zero_heavy_data_but_zi_does_not():
    x = gennorm_sample(1.5, 100_000, seed=12, p0=0.15)
    plain = M.fit(x, "gennorm")
    zi = M.fit(x, "gennorm-zi")
    assert plain.params["beta"] < 0.1
    assert abs(zi.params["beta"] - 1.5) < 0.06
    g_plain, g_zi = M.gof(x, plain), M.gof(x, zi)
    assert g_zi["aic"] < g_plain["aic"]
    assert g_zi["ks"] < 0.01 < g_plain["ks"]


def test_normal_laplace_fits_match_scipy():
    rng = np.random.default_rng(21)
    xn = rng.normal(0, 0.3, 100_000)
    assert M.fit(xn, "normal").params["sigma"] == pytest.approx(
        stats.norm.fit(xn, floc=0)[1], rel=1e-9)
    xl = rng.laplace(0, 0.2, 100_000)
    assert M.fit(xl, "laplace").params["b"] == pytest.approx(
        stats.laplace.fit(xl, floc=0)[1], rel=1e-9)
    # zero-inflated variants fit the non-zeros
    xz = xl.copy()
    xz[:20_000] = 0.0
    fz = M.fit(xz, "laplace-zi")
    assert fz.p0 == pytest.approx(0.2)
    assert fz.params["b"] == pytest.approx(np.mean(np.abs(xz[20_000:])), rel=1e-9)
    fz = M.fit(xz, "normal-zi")
    assert fz.params["sigma"] == pytest.approx(np.sqrt(np.mean(xz[20_000:] ** 2)), rel=1e-9)
    assert M.fit(xz, "normal").params["sigma"] == pytest.approx(np.sqrt(np.mean(xz ** 2)),
                                                                rel=1e-9)


@pytest.mark.parametrize("c", (0.7, 1.6))
def test_dweibull_fit_matches_scipy(c):
    rng = np.random.default_rng(int(c * 10))
    x = stats.dweibull.rvs(c, scale=0.05, size=50_000, random_state=rng)
    f = M.fit(x, "dweibull")
    ref_c, _, ref_scale = stats.dweibull.fit(x, floc=0)
    assert abs(f.params["c"] - ref_c) < 0.005
    assert f.params["scale"] == pytest.approx(ref_scale, rel=0.005)
    assert abs(f.params["c"] - c) < 0.05
    # zeros become point mass, the continuous part is unchanged
    xz = np.concatenate([x, np.zeros(10_000)])
    fz = M.fit(xz, "dweibull")
    assert fz.p0 == pytest.approx(10_000 / 60_000)
    assert fz.params["c"] == pytest.approx(f.params["c"], rel=1e-6)


# ---------------------------------------------------------------------------- distribution


def test_distribution_functions_match_scipy():
    f = M.Fit("gennorm", {"beta": 0.7, "scale": 2.0}, n=10, n_nonzero=10)
    t = np.array([-50.0, -3.0, -0.1, 0.0, 0.2, 4.0, 300.0])
    np.testing.assert_allclose(f.cdf(t), stats.gennorm.cdf(t, 0.7, scale=2.0), rtol=1e-12)
    np.testing.assert_allclose(f.sf_abs(np.abs(t)), 2 * stats.gennorm.sf(np.abs(t), 0.7, scale=2),
                               rtol=1e-10)
    u = np.array([1e-12, 0.01, 0.3, 0.5, 0.8, 1 - 1e-9])
    np.testing.assert_allclose(f.ppf(u), stats.gennorm.ppf(u, 0.7, scale=2.0), rtol=1e-8)
    np.testing.assert_allclose(f.logpdf_nonzero(t), stats.gennorm.logpdf(t, 0.7, scale=2.0),
                               rtol=1e-12)
    assert isinstance(f.cdf(0.5), float)
    cases = [("normal", {"sigma": 1.5}, stats.norm(scale=1.5)),
             ("laplace", {"b": 0.5}, stats.laplace(scale=0.5)),
             ("dweibull", {"c": 1.7, "scale": 2.0}, stats.dweibull(1.7, scale=2.0))]
    for model, params, ref in cases:
        f = M.Fit(model, params, n=1, n_nonzero=1)
        np.testing.assert_allclose(f.cdf(t), ref.cdf(t), rtol=1e-10, atol=1e-300)
        np.testing.assert_allclose(f.ppf(u), ref.ppf(u), rtol=1e-8)
        np.testing.assert_allclose(f.logpdf_nonzero(t[t != 0]), ref.logpdf(t[t != 0]), rtol=1e-10)


def test_zero_inflated_cdf_and_ppf_have_the_jump():
    f = M.Fit("gennorm-zi", {"beta": 1.0, "scale": 1.0}, p0=0.3, n=10, n_nonzero=7)
    assert f.cdf(-1e-300) == pytest.approx(0.35)
    assert f.cdf(0.0) == pytest.approx(0.65)
    assert f.sf_abs(0.0) == pytest.approx(0.7)
    assert np.all(f.ppf(np.array([0.36, 0.5, 0.65])) == 0.0)
    assert f.ppf(0.34) < 0 < f.ppf(0.66)
    u = np.linspace(0.001, 0.999, 101)
    q = f.ppf(u)
    assert np.all(np.diff(q) >= 0)
    assert np.all(f.cdf(q) >= u - 1e-12)


# ---------------------------------------------------------------------------- pmf


@pytest.mark.parametrize("grid_id,model,params,p0,scale", [
    ("fp4-co3", "gennorm-zi", {"beta": 1.2, "scale": 1.0}, 0.1, 0.8),
    ("fp4-co3", "laplace", {"b": 1.0}, 0.0, 2.5),  # heavy saturation
    ("fp8-e4m3", "gennorm-zi", {"beta": 0.6, "scale": 1e-3}, 0.2, 2e4),
    ("uniform8", "normal-zi", {"sigma": 1.0}, 0.05, 20.0),
    ("fp8-e5m2", "dweibull", {"c": 0.8, "scale": 1.0}, 0.15, 1000.0),
])
def test_pmf_matches_monte_carlo(grid_id, model, params, p0, scale):
    grid = get_grid(grid_id)
    n = 1_000_000
    f = M.Fit(model, params, p0=p0, n=n, n_nonzero=n)
    rng = np.random.default_rng(31)
    x = f.ppf(rng.random(n))  # inverse-CDF sampling of the mixture
    pmf = f.pmf(grid, scale)
    assert pmf.shape == (grid.nsym,) and pmf.dtype == np.float64
    assert np.all(pmf > 0) and pmf.sum() == pytest.approx(1.0, abs=1e-12)
    freq = np.bincount(quantize_symbols(x, grid, scale), minlength=grid.nsym) / n
    tol = 5 * np.sqrt(pmf * (1 - pmf) / n) + 1e-6
    assert np.all(np.abs(freq - pmf) <= tol)
    assert pmf[grid.K] >= p0
    np.testing.assert_allclose(pmf, pmf[::-1], rtol=1e-12)  # symmetric


def test_pmf_matches_scipy_cdf_differences():
    grid = get_grid("fp4-e2m1")
    f = M.Fit("gennorm", {"beta": 1.4, "scale": 0.5}, n=1, n_nonzero=1)
    s = 3.0
    e = np.concatenate([[-np.inf], -grid.edges[::-1], grid.edges, [np.inf]]) / s
    ref = np.diff(stats.gennorm.cdf(e, 1.4, scale=0.5))
    np.testing.assert_allclose(f.pmf(grid, s), ref, rtol=1e-9, atol=1e-15)


@settings(max_examples=40, deadline=None)
@given(beta=st.floats(0.05, 20), p0=st.floats(0, 1), log_scale=st.floats(-40, 40),
       grid_id=st.sampled_from(["fp4-co3", "fp8-e5m2", "uniform4", "fp8-143-b10"]))
def test_pmf_always_valid(beta, p0, log_scale, grid_id):
    grid = get_grid(grid_id)
    f = M.Fit("gennorm-zi", {"beta": beta, "scale": 1.0}, p0=p0, n=1, n_nonzero=1)
    p = f.pmf(grid, math.exp(log_scale))
    assert np.all(np.isfinite(p)) and np.all(p >= M.PMF_FLOOR * 0.5)
    assert p.sum() == pytest.approx(1.0, abs=1e-12)


def test_empirical_model_counts_and_pmf_from_counts():
    grid = get_grid("fp4-co3")
    x = np.array([0.0, 0.0, 1.0, -1.0, 0.26, 100.0, -0.1], dtype=np.float32)
    f = M.fit(x, "empirical")
    assert f.p0 == pytest.approx(2 / 7) and f.k == 0
    p = f.pmf(grid, 1.0)
    K = grid.K
    assert p[K] == pytest.approx(3 / 7) and p[K + 2] == pytest.approx(1 / 7)
    assert p[2 * K] == pytest.approx(1 / 7) and p[K + 1] == pytest.approx(1 / 7)
    assert np.all(p > 0) and p.sum() == pytest.approx(1.0)
    assert f.cdf(0.0) == pytest.approx(4 / 7)
    assert f.ppf(0.5) == 0.0
    restored = M.Fit.from_dict(f.to_dict())
    with pytest.raises(InputError, match="no data"):
        restored.pmf(grid, 1.0)
    q = M.pmf_from_counts([0, 5, 5])
    assert q[0] > 0 and q.sum() == pytest.approx(1.0)
    with pytest.raises(InputError):
        M.pmf_from_counts([1, -1])


# ---------------------------------------------------------------------------- degenerate


def test_all_zero_input():
    x = np.zeros(1000, dtype=np.float32)
    f = M.fit(x)
    assert f.p0 == 1.0 and f.n_nonzero == 0
    for grid_id in ("fp8-e5m2", "fp4-co3"):
        grid = get_grid(grid_id)
        p = f.pmf(grid, 1.0)
        assert np.all(p > 0) and p.sum() == pytest.approx(1.0) and p[grid.K] >= 1 - 1e-12
    for model in ("gennorm", "normal", "laplace"):
        with pytest.raises(InputError, match="zero-inflated"):
            M.fit(x, model)
    assert M.fit(x, "dweibull").p0 == 1.0
    res = M.fit_all(x)
    assert set(res) == {"gennorm-zi", "normal-zi", "laplace-zi", "dweibull"}
    assert res["gennorm-zi"][1]["ks"] == 0.0
    json.dumps(M.gof(x, f))
    with pytest.raises(InputError, match="AIC"):
        M.best_model(res)


def test_extreme_magnitudes():
    x = gennorm_sample(1.2, 20_000, scale=1.0, seed=71)
    ref = M.fit(x)
    for factor, dtype in ((1e-42, np.float32), (1e36, np.float32), (1e-305, np.float64),
                          (1e300, np.float64)):
        xs = (x * factor).astype(dtype)
        for model in ("gennorm-zi", "normal", "laplace", "dweibull"):
            f = M.fit(xs, model)
            assert all(math.isfinite(v) and v > 0 for v in f.params.values()), (factor, model)
        f = M.fit(xs)
        tol = 0.05 if factor < 1e-40 else 1e-4  # float32 subnormals lose mantissa bits
        assert f.params["beta"] == pytest.approx(ref.params["beta"], rel=tol)
        assert f.params["scale"] / factor == pytest.approx(ref.params["scale"], rel=tol)
        sig = M.fit(xs, "normal").params["sigma"] / factor
        assert sig == pytest.approx(np.sqrt(np.mean(x ** 2)), rel=tol)


def test_degenerate_nonzero_data_stays_in_bounds():
    for x in (np.array([0.0, 2.0]), np.array([1.0, -1.0, 1.0, 0.0]), np.array([3.0])):
        for model in ("gennorm-zi", "gennorm", "dweibull"):
            f = M.fit(x, model)
            shape = f.params.get("beta", f.params.get("c"))
            assert M.BETA_BOUNDS[0] <= shape <= M.BETA_BOUNDS[1] * (1 + 1e-12)
            assert all(math.isfinite(v) and v > 0 for v in f.params.values())


@pytest.mark.parametrize("bad,match", [
    (np.array([]), "empty"),
    (np.array([1.0, np.nan]), "NaN"),
    (np.array([1.0, -np.inf], dtype=np.float32), "Inf"),
    (np.zeros((3, 3)), "1-D"),
    (np.arange(5), "float dtype"),
])
def test_bad_inputs(bad, match):
    with pytest.raises(InputError, match=match):
        M.fit(bad)


def test_bad_arguments():
    x = gennorm_sample(1.0, 1000)
    with pytest.raises(InputError, match="allowed: gennorm-zi, gennorm"):
        M.fit(x, "cauchy")
    f = M.fit(x)
    grid = get_grid("fp4-co3")
    for s in (0, -1.0, np.inf, "x"):
        with pytest.raises(InputError, match="scale"):
            f.pmf(grid, s)
    with pytest.raises(InputError, match="grid"):
        f.pmf(object(), 1.0)
    with pytest.raises(InputError, match="u must"):
        f.ppf([0.5, 1.5])
    with pytest.raises(InputError, match="sample"):
        M.gof(x, f, sample=0)
    with pytest.raises(InputError, match="entries"):
        M.gof(x[:10], f)
    with pytest.raises(InputError, match="beta"):
        S.gennorm_mse_unit_scale(grid, 0.0)
    with pytest.raises(InputError, match="alpha"):
        S.co3_poly_scale(1.0, 0.0)
    with pytest.raises(InputError, match="model"):
        M.fit_all(x, models=("gennorm", "bogus"))
    assert M.get_model_ids()[0] == "gennorm-zi" and set(M.get_model_ids()) == set(M.MODELS)


# ---------------------------------------------------------------------------- serialisation


def test_to_dict_round_trip_and_validation():
    x = gennorm_sample(0.9, 20_000, seed=41, p0=0.1)
    for model in M.FIT_ALL_MODELS:
        f = M.fit(x, model)
        d = json.loads(json.dumps(f.to_dict()))
        assert M.Fit.from_dict(d) == f
    good = M.fit(x).to_dict()
    bad_cases = [
        {**good, "extra": 1},
        {**good, "model": "nope"},
        {**good, "params": {"beta": 1.0}},
        {**good, "params": {"beta": -1.0, "scale": 1.0}},
        {**good, "p0": 1.5},
        {**good, "n_nonzero": good["n"] + 1},
        {**good, "model": "gennorm", "p0": 0.2},
        {**good, "n": 2.5},
    ]
    for d in bad_cases:
        with pytest.raises(InputError):
            M.Fit.from_dict(d)
    with pytest.raises(InputError, match="sigma"):  # the constructor validates too
        M.Fit("normal", {"sigma": 0.0})
    with pytest.raises(InputError, match="allowed"):
        M.Fit("gauss", {})


# ---------------------------------------------------------------------------- goodness of fit


def test_gof_true_model_beats_wrong_model():
    x = gennorm_sample(0.7, 200_000, seed=51, p0=0.1)
    res = M.fit_all(x, sample=50_000)
    g_true, g_norm = res["gennorm-zi"][1], res["normal-zi"][1]
    assert g_true["ks"] < 0.01 < g_norm["ks"]
    assert g_true["w2"] < 0.05 < g_norm["w2"]
    assert g_true["sample"] == 50_000 and g_true["seed"] == 0
    assert M.best_model(res) == "gennorm-zi"
    for row in g_true["tail"]:
        assert 0.6 < row["ratio"] < 1.6
        assert row["emp"] == pytest.approx(1 - row["q"], rel=0.05)
    assert g_norm["tail"][-1]["ratio"] < 0.1  # normal underestimates the tail
    # zi and plain models are compared on the same (non-zero) entries
    assert g_true["n_nonzero"] == res["laplace"][1]["n_nonzero"]
    assert g_true["nll_per_entry"] == pytest.approx(-g_true["loglik"] / g_true["n_nonzero"])
    assert g_true["aic"] == pytest.approx(2 * 2 - 2 * g_true["loglik"])
    json.dumps({m: g for m, (_, g) in res.items()})
    # deterministic
    assert M.gof(x, res["gennorm-zi"][0], sample=50_000) == g_true


def test_ks_exact_on_small_sample():
    x = np.array([-1.0, 0.0, 0.0, 2.0])
    f = M.Fit("laplace-zi", {"b": 1.0}, p0=0.5, n=4, n_nonzero=2)
    g = M.gof(x, f)
    grid_t = np.linspace(-5, 5, 200_001)
    ecdf = np.searchsorted(np.sort(x), grid_t, side="right") / 4
    brute = np.max(np.abs(ecdf - f.cdf(grid_t)))
    assert g["ks"] >= brute - 1e-12 and g["ks"] <= brute + 1e-4


# ---------------------------------------------------------------------------- scale rules


def _mc_mse(grid, beta, c, n=1_000_000, seed=61, with_se=False):
    x = stats.gennorm.rvs(beta, size=n, random_state=np.random.default_rng(seed))
    sym = quantize_symbols(x, grid, c)
    q = np.sign(sym - grid.K) * grid.magnitudes[np.abs(sym - grid.K)] / c
    err = (x - q) ** 2
    return (err.mean(), err.std() / math.sqrt(n)) if with_se else err.mean()


def assert_close_to_mc(exact, grid, beta, c):
    """Within 3 %, or 4 standard errors where saturated heavy tails make the MC noisy."""
    mc, se = _mc_mse(grid, beta, c, with_se=True)
    assert abs(exact - mc) <= max(0.03 * exact, 4 * se)


@pytest.mark.parametrize("grid_id,beta", [("fp4-co3", 0.8), ("fp4-co3", 1.5),
                                          ("fp8-e4m3", 1.0), ("uniform8", 0.6), ("uniform8", 1.2),
                                          ("fp8-e5m2", 2.0)])
def test_mse_unit_scale_is_optimal_and_matches_monte_carlo(grid_id, beta):
    grid = get_grid(grid_id)
    c = S.gennorm_mse_unit_scale(grid, beta)
    exact = S.gennorm_quant_mse(grid, beta, c)
    assert_close_to_mc(exact, grid, beta, c)
    around = S.gennorm_quant_mse(grid, beta, c * np.array([0.5, 0.9, 0.99, 1.01, 1.1, 2.0]))
    assert np.all(around >= exact * (1 - 1e-9))
    if grid_id.startswith("fp4") or grid_id == "uniform8":  # pronounced optimum: MC agrees
        assert _mc_mse(grid, beta, c) < _mc_mse(grid, beta, c * 1.25)
        assert _mc_mse(grid, beta, c) < _mc_mse(grid, beta, c * 0.8)
    assert S.gennorm_mse_unit_scale(grid, beta + 1e-6) == c  # cached per round(beta, 4)


def test_mse_at_other_scales_matches_monte_carlo():
    grid = get_grid("fp4-co3")
    for c in (0.2, 3.0):  # far from optimal: heavy saturation / most entries in the zero cell
        assert_close_to_mc(S.gennorm_quant_mse(grid, 1.2, c), grid, 1.2, c)


def test_co3_poly_scale():
    p = lambda b: 0.46 - 2.85 * b + 5.37 * b**2 - 2.85 * b**3 + 0.52 * b**4  # noqa: E731
    assert S.co3_poly_scale(1.0, 2.0) == pytest.approx(p(1.0) / 2.0)
    assert S.co3_poly_scale(0.3, 1.0) == pytest.approx(max(p(0.3), 0.0009))
    # on fp4 the authors' polynomial is close to our numerical optimum
    grid = get_grid("fp4-co3")
    for b in (0.8, 1.0, 1.5, 2.0):
        c = S.gennorm_mse_unit_scale(grid, b)
        assert S.co3_poly_scale(b, 1.0) == pytest.approx(c, rel=0.05)
