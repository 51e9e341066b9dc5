"""Scale rules: the per-tensor scale ``s`` that maps a gradient onto a grid (``y = x * s``).

Registered in ``SCALE_RULES`` (``compute_scale(x, grid, rule)``); the scale is stored as float32
side information and counted in the bits:

* ``absmax`` (default): ``max|x|`` maps to the grid's largest value;
* ``gennorm-mse``: ``c(beta)/alpha`` from a zero-inflated GenNorm fit, with ``c`` the
  numerically MSE-optimal unit pre-scale on this grid (:func:`gennorm_mse_unit_scale`);
* ``co3-poly``: the CO3 authors' fp4 polynomial ``max(p(beta), 0.0009) / alpha``
  (:func:`co3_poly_scale`);
* ``clip``: ``K / (X * rms(x))``, implied by ``uniformB-cX`` grids (not chosen by name).

Every rule is scale-equivariant (``rule(k x) = rule(x) / k``), which is what lets a compressor
track a refitted scale by the gradient's RMS between refits. A new rule is one function
``rule(x, grid) -> float`` (float64, > 0) plus one ``SCALE_RULES.register`` line.

Reference: Z.-J. Chen, E. E. Hernandez, Y.-C. Huang, S. Rini, "Convert, compress, correct: Three
steps toward communication-efficient DNN training", arXiv:2203.09044 (the fp4 polynomial).
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np

from co3cli.errors import InputError
from co3cli.formats import Grid
from co3cli.registry import Registry

FIT_SAMPLE = 1 << 18  # entries used to fit the model behind a model-based scale

SCALE_RULES: Registry = Registry("scale rule")


def fit_sample(x: np.ndarray, limit: int = FIT_SAMPLE) -> np.ndarray:
    """At most ``limit`` entries drawn uniformly (with replacement) by a fixed-seed generator.

    Random, not strided: a stride that divides the row length would only ever see the same
    columns (e.g. the always-zero border pixels of an MNIST layer). Fixed seed: deterministic.
    """
    if x.size <= limit:
        return x
    idx = np.random.default_rng(0x5EED).integers(0, x.size, size=limit)
    idx.sort()  # memory order: a faster gather
    return x[idx]


def _to_f32_scale(s: float) -> np.float32:
    """Clamp a positive float64 scale into float32's normal range."""
    return np.float32(min(max(s, 2.0**-126), 2.0**127))


@SCALE_RULES.register(id="absmax", doc="max|x| maps to the grid's largest value (default)")
def _absmax(x: np.ndarray, grid: Grid) -> float | None:
    amax = float(np.max(np.abs(x)))
    return grid.max_value / amax if amax > 0 else None


def _gennorm_fit(x: np.ndarray):
    from co3cli import models

    fit = models.fit(fit_sample(x), "gennorm-zi")
    return None if fit.n_nonzero == 0 else (fit.params["beta"], fit.params["scale"])


@SCALE_RULES.register(id="gennorm-mse", doc="MSE-optimal pre-scale for the fitted GenNorm")
def _gennorm_mse(x: np.ndarray, grid: Grid) -> float | None:
    fit = _gennorm_fit(x)
    return None if fit is None else gennorm_mse_unit_scale(grid, fit[0]) / fit[1]


@SCALE_RULES.register(id="co3-poly", doc="the CO3 authors' fp4 polynomial in the fitted beta")
def _co3_poly(x: np.ndarray, grid: Grid) -> float | None:
    fit = _gennorm_fit(x)
    return None if fit is None else co3_poly_scale(*fit)


def _clip(x: np.ndarray, grid: Grid) -> float | None:
    rms = float(np.sqrt(np.mean(np.square(x, dtype=np.float64))))
    return grid.max_value / (grid.clip_sigma * rms) if rms > 0 else None


def compute_scale(x, grid: Grid, rule: str | None = None) -> np.float32:
    """Per-tensor scale for ``rule`` (``None``: ``absmax``, or ``clip`` for ``uniformB-cX``);
    1.0 for an all-zero tensor."""
    from co3cli.quantize import as_f32_1d

    x = as_f32_1d(x)
    if grid.clip_sigma is not None:
        if rule not in (None, "clip"):
            raise InputError(f"format {grid.id!r} fixes its scale (clip at {grid.clip_sigma:g} "
                             f"sigma); do not combine it with scale rule {rule!r}")
        fn = _clip
    else:
        if rule is not None and rule not in SCALE_RULES:
            raise InputError(f"unknown scale rule {rule!r}; allowed: {SCALE_RULES.allowed()} "
                             "(clip is implied by uniformB-cX formats)")
        fn = SCALE_RULES.get(rule or "absmax")
    if x.size == 0:
        raise InputError("cannot compute a scale for an empty tensor")
    s = fn(x, grid)
    return np.float32(1.0) if s is None else _to_f32_scale(s)


# ----------------------------------------------------------------------------------------
# The GenNorm MSE-optimal pre-scale and the CO3 polynomial
# ----------------------------------------------------------------------------------------


def _gennorm_unit_mse(mags: np.ndarray, edges: np.ndarray, beta: float, c) -> np.ndarray:
    """E[(X - Q(cX)/c)^2] for X ~ GenNorm(beta, 1), vectorised over c.

    Z = |X| has E[Z^j; Z <= t] = Gamma((j+1)/beta) P((j+1)/beta, t^beta) / Gamma(1/beta);
    each cell contributes M2 - 2 v M1 + v^2 M0 with v = m_k / c, the top cell to infinity.
    """
    from scipy import special

    c = np.atleast_1d(np.asarray(c, dtype=np.float64))[:, None]
    w = (edges[None, :] / c) ** beta  # (nc, K)
    ones, zeros = np.ones((c.shape[0], 1)), np.zeros((c.shape[0], 1))
    mom = []
    for j in range(3):
        a = (j + 1) / beta
        P = np.concatenate([zeros, special.gammainc(a, w), ones], axis=1)
        Q = np.concatenate([ones, special.gammaincc(a, w), zeros], axis=1)
        diff = np.where(P[:, 1:] <= 0.5, P[:, 1:] - P[:, :-1], Q[:, :-1] - Q[:, 1:])
        mom.append(diff * math.exp(special.gammaln(a) - special.gammaln(1 / beta)))
    v = mags[None, :] / c
    return np.sum(mom[2] - 2 * v * mom[1] + v * v * mom[0], axis=1)


def gennorm_quant_mse(grid, beta: float, c) -> np.ndarray | float:
    """Exact MSE E[(X - Q(cX)/c)^2] of X ~ GenNorm(beta, alpha=1) on ``grid`` at pre-scale c.

    For X with scale alpha and pre-scale s = c/alpha the MSE is alpha^2 times this.
    """
    from co3cli.models.families import check_positive, grid_arrays

    mags, edges = grid_arrays(grid)
    beta = check_positive(beta, "beta")
    arr = np.asarray(c, dtype=np.float64)
    if np.any(~np.isfinite(arr)) or np.any(arr <= 0):
        raise InputError(f"c must be finite and > 0, got {c!r}")
    out = _gennorm_unit_mse(mags, edges, beta, arr.ravel())
    return float(out[0]) if arr.ndim == 0 else out.reshape(arr.shape)


@lru_cache(maxsize=512)
def _mse_unit_scale(grid_id, mags_b: bytes, edges_b: bytes, beta: float) -> float:
    from scipy import optimize, special

    mags, edges = np.frombuffer(mags_b), np.frombuffer(edges_b)
    a = 1.0 / beta
    # the top magnitude maps to z_top = m_K / c; search z_top between the 25 % quantile of |X|
    # and its (1 - 1e-30) quantile: below, most entries saturate; above, nothing changes
    z_lo = float(special.gammaincinv(a, 0.25)) ** a
    z_hi = float(special.gammainccinv(a, 1e-30)) ** a
    lc = np.linspace(math.log(mags[-1] / z_hi), math.log(mags[-1] / z_lo), 97)
    mse = _gennorm_unit_mse(mags, edges, beta, np.exp(lc))
    # refine the three best local minima of the coarse scan with a bounded Brent search
    interior = [i for i in range(len(lc))
                if (i == 0 or mse[i] <= mse[i - 1]) and (i == len(lc) - 1 or mse[i] <= mse[i + 1])]
    best_x, best_f = lc[int(np.argmin(mse))], float(np.min(mse))
    for i in sorted(interior, key=lambda i: mse[i])[:3]:
        lo, hi = lc[max(i - 1, 0)], lc[min(i + 1, len(lc) - 1)]
        res = optimize.minimize_scalar(
            lambda s: float(_gennorm_unit_mse(mags, edges, beta, [math.exp(s)])[0]),
            bounds=(lo, hi), method="bounded", options={"xatol": 1e-7})
        if res.fun < best_f:
            best_x, best_f = float(res.x), float(res.fun)
    return math.exp(best_x)


def gennorm_mse_unit_scale(grid, beta: float) -> float:
    """Unit pre-scale c minimising the quantization MSE of X ~ GenNorm(beta, alpha) on ``grid``.

    The optimal pre-scale is s = c / alpha. MSE(c) = E[(X - Q(cX)/c)^2], Q = round to the
    nearest grid value with saturation at the largest, is computed exactly from GenNorm partial
    moments over every cell with the regularised incomplete gamma function (saturation cell
    included, see :func:`gennorm_quant_mse`). It can have several local minima in c (binade
    alignment on fp grids), so log c is scanned on a 97-point grid (z_top = m_K / c between the
    25 % and 1 - 1e-30 quantiles of |X|) and the three best local minima are refined by a
    bounded Brent search. Results are cached per (grid, round(beta, 4)).
    """
    from co3cli.models.families import check_positive, grid_arrays

    mags, edges = grid_arrays(grid)
    beta = check_positive(beta, "beta")
    from co3cli.models import BETA_BOUNDS

    if not BETA_BOUNDS[0] / 2 <= beta <= 50.0:
        raise InputError(f"beta must lie in [{BETA_BOUNDS[0] / 2}, 50], got {beta!r}")
    return _mse_unit_scale(getattr(grid, "id", None), mags.tobytes(), edges.tobytes(),
                           round(beta, 4))


def co3_poly_scale(beta: float, alpha: float) -> float:
    """The CO3 authors' fp4 rule s = max(p(beta), 0.0009) / alpha,
    p(b) = 0.46 - 2.85 b + 5.37 b^2 - 2.85 b^3 + 0.52 b^4 (fitted for beta in about [0.6, 2])."""
    from co3cli.models.families import check_positive

    b = check_positive(beta, "beta")
    alpha = check_positive(alpha, "alpha")
    p = 0.46 - 2.85 * b + 5.37 * b ** 2 - 2.85 * b ** 3 + 0.52 * b ** 4
    return max(p, 0.0009) / alpha
