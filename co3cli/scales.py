"""Scale rules: the per-tensor scale ``s`` that maps a gradient onto a grid (``y = x * s``).

Registered in ``SCALE_RULES`` (``compute_scale(x, grid, rule)``; ``scale_info`` also says which
rule produced the scale and why); the scale is stored as float32 side information and counted in
the bits:

* ``absmax`` (default): ``max|x|`` maps to the grid's largest value;
* ``gennorm-mse``: ``c(beta)/alpha`` from a zero-inflated GenNorm fit, with ``c`` the
  numerically MSE-optimal unit pre-scale on this grid (:func:`gennorm_mse_unit_scale`).
  MSE-optimal *for the fitted GenNorm model, not for the data*: on the bundled real gradients
  it lands above the tensor's own optimum wherever the fit misses the tails
  (``benchmarks/results/scale.md``). Guarded: where a degenerate fit (error-fed uploads) puts
  the optimum so low that every entry would round to 0, it falls back to ``empirical-mse``;
* ``empirical-mse``: the scale that minimises the real quantization MSE of the tensor's own
  entries (:func:`empirical_mse_scale`, on :func:`fit_sample`'s deterministic sample: one sort,
  then each candidate scale costs one ``searchsorted`` of the grid's edges);
* ``co3-poly``: the CO3 authors' fp4 polynomial ``max(p(beta), 0.0009) / alpha``
  (:func:`co3_poly_scale`), *guarded*: the polynomial was fitted to the MSE-optimal pre-scale of
  the paper's fp4 grid for beta in about [0.6, 2] (``CO3_POLY_BETA``); for a fitted beta outside
  that range (a 10-entry bias fits beta = 20, where p(20) maps every entry past the grid's top
  and the upload is all saturated) or another grid it falls back to ``gennorm-mse`` for the same
  fit, the optimum the polynomial approximates; and where that optimum would round every entry
  to 0 (a degenerate fit: on error-fed uploads the zero-inflated GenNorm fit runs to beta = 0.05,
  its search bound, with alpha ~ 1e-29) to ``empirical-mse``. Clamping beta into the range instead keeps the
  polynomial's value at 0.6 or 2, the optimum of neither the fit nor the data. Measured on the
  bundled real gradients (``benchmarks/results/scale.md``, fp4, 144 tensors) clamping has the
  slightly lower *median* excess MSE (+32 % against +35 %: weights fitted at beta ~ 0.55, just
  under the range, where the fit's own optimum overshoots) but a far worse tail (mean +163 %,
  worst 22x, against +75 % and 8.5x: a 10-entry bias at beta 20 clamped to 2 lands ~+130 %),
  so the fallback is ``gennorm-mse``;
* ``clip``: ``K / (X * rms(x))``, implied by ``uniformB-cX`` grids (not chosen by name).

What a file stores for a small layer (a ``GRC`` group member) is not always the rule's float32
but :func:`short_scales` of it: a float32 of few mantissa bits with the same symbols and no
larger squared error (the symbols, and so every coder's payload, are the rule's; the decoded
values are those symbols at the stored scale). The in-training streams (FL, DDP, FSDP) send
the rule's scale as it is.

Every rule is scale-equivariant (``rule(k x) = rule(x) / k``), which is what lets a compressor
track a refitted scale by the gradient's RMS between refits. A new rule is one function
``rule(x, grid) -> float | None | Fallback`` (float64, > 0; ``None``: no scale, e.g. all zeros;
:class:`Fallback`: another rule's value, and why) plus one ``SCALE_RULES.register`` line; every
caller (the codec, the ``co3`` compressor and so the FL engines and the DDP hook) counts the
fallbacks from :class:`ScaleResult`.

Reference: Z.-J. Chen, E. E. Hernandez, Y.-C. Huang, S. Rini, "Convert, compress, correct: Three
steps toward communication-efficient DNN training", arXiv:2203.09044 (the fp4 polynomial).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import NamedTuple

import numpy as np

from co3cli.errors import InputError
from co3cli.formats import Grid
from co3cli.registry import Registry

FIT_SAMPLE = 1 << 18  # entries used to fit the model behind a model-based scale

SCALE_RULES: Registry = Registry("scale rule")
CO3_POLY_BETA = (0.6, 2.0)  # the beta range the CO3 fp4 polynomial was fitted on
CO3_POLY_GRID = "fp4-co3"  # ... and the grid (the paper's (1,2,1) fp4)
GUARDED_RULES = frozenset({"co3-poly", "gennorm-mse"})  # rules that may hand over to another (Fallback)


class Fallback(NamedTuple):
    """What a rule returns when it used another rule's value: the value, that rule, why."""

    value: float | None
    used: str
    reason: str


@dataclass(frozen=True)
class ScaleResult:
    """A scale and where it came from: ``rule`` asked for, ``used`` the rule whose value it is
    (``"none"`` for an all-zero tensor: scale 1), ``reason`` why they differ."""

    scale: np.float32
    rule: str
    used: str
    reason: str | None = None

    @property
    def fallback(self) -> bool:
        """The asked-for rule handed over to another (not counted: an all-zero tensor)."""
        return self.reason is not None


def fit_sample(x: np.ndarray, limit: int = FIT_SAMPLE) -> np.ndarray:
    """At most ``limit`` entries drawn uniformly (with replacement) by a fixed-seed generator.

    Random, not strided: a stride that divides the row length would only ever see the same
    columns (e.g. the always-zero border pixels of an MNIST layer). Fixed seed: deterministic.
    """
    if x.size <= limit:
        return x
    return x[_sample_indices(x.size, limit)]


@lru_cache(maxsize=16)  # at most 16 x 2 MB; a layer's refits and steps reuse one draw
def _sample_indices(size: int, limit: int) -> np.ndarray:
    """fit_sample's indices for a tensor of ``size`` entries: sorted (memory order, a faster
    gather), read-only; they depend on nothing but (size, limit), so they are drawn once."""
    idx = np.random.default_rng(0x5EED).integers(0, size, size=limit)
    idx.sort()
    idx.flags.writeable = False
    return idx


def _to_f32_scale(s: float) -> np.float32:
    """Clamp a positive float64 scale into float32's normal range."""
    return np.float32(min(max(s, 2.0**-126), 2.0**127))


@SCALE_RULES.register(id="absmax", doc="max|x| maps to the grid's largest value (default)")
def _absmax(x: np.ndarray, grid: Grid) -> float | None:
    from co3cli.quantize import abs_max

    amax = abs_max(x)  # max|x| in one read, no |x| temporary
    return grid.max_value / amax if amax > 0 else None


def _gennorm_fit(x: np.ndarray):
    from co3cli import models

    fit = models.fit(fit_sample(x), "gennorm-zi")
    return None if fit.n_nonzero == 0 else (fit.params["beta"], fit.params["scale"])


@SCALE_RULES.register(id="gennorm-mse", doc="MSE-optimal pre-scale for the fitted GenNorm "
                      "(empirical-mse where a degenerate fit would send only zeros)")
def _gennorm_mse(x: np.ndarray, grid: Grid) -> float | Fallback | None:
    fit = _gennorm_fit(x)
    return None if fit is None else _model_optimum(x, grid, *fit)


def _model_optimum(x: np.ndarray, grid: Grid, beta: float, alpha: float,
                   why: str | None = None) -> float | Fallback:
    """gennorm-mse's scale for the fit (beta, alpha); a ``Fallback`` when ``why`` says another
    rule handed over to it, or when the fit is degenerate and its optimum would round every
    entry to 0 (error-fed uploads: the zero-inflated fit runs to beta ~ 0.05, its search bound,
    with alpha ~ 1e-29): then the data's own optimum, ``empirical-mse``."""
    s = gennorm_mse_unit_scale(grid, beta) / alpha
    if float(np.max(np.abs(x))) * s <= float(np.asarray(grid.edges)[0]):
        return Fallback(empirical_mse_scale(fit_sample(x), grid), "empirical-mse",
                        (f"{why}; " if why else "") + f"gennorm-mse's scale (fitted beta "
                        f"{beta:.3g}, a degenerate fit) would send only zeros")
    return s if why is None else Fallback(s, "gennorm-mse", why)


@SCALE_RULES.register(id="empirical-mse", doc="minimises the real quantization MSE of the data")
def _empirical_mse(x: np.ndarray, grid: Grid) -> float | None:
    return empirical_mse_scale(fit_sample(x), grid)


@SCALE_RULES.register(id="co3-poly", doc="the CO3 authors' fp4 polynomial in the fitted beta "
                      "(gennorm-mse outside beta in [0.6, 2] or off fp4-co3)")
def _co3_poly(x: np.ndarray, grid: Grid) -> float | Fallback | None:
    fit = _gennorm_fit(x)
    if fit is None:
        return None
    beta, alpha = fit
    lo, hi = CO3_POLY_BETA
    if not _is_co3_fp4(grid):
        why = f"the polynomial is fitted for {CO3_POLY_GRID}, not {getattr(grid, 'id', grid)}"
    elif not lo <= beta <= hi:
        why = f"fitted beta {beta:.3g} outside the polynomial's range [{lo:g}, {hi:g}]"
    else:
        return co3_poly_scale(beta, alpha)
    return _model_optimum(x, grid, beta, alpha, why)


def _is_co3_fp4(grid) -> bool:
    """``grid`` has the paper's fp4 values (``fp4-co3``, whatever its spelling: ``fp2.1-b1``)."""
    from co3cli.formats import get_grid

    ref = get_grid(CO3_POLY_GRID).magnitudes
    mags = np.asarray(getattr(grid, "magnitudes", ()), dtype=np.float64)
    return mags.shape == ref.shape and bool(np.array_equal(mags, ref))


def _clip(x: np.ndarray, grid: Grid) -> float | None:
    rms = float(np.sqrt(np.mean(np.square(x, dtype=np.float64))))
    return grid.max_value / (grid.clip_sigma * rms) if rms > 0 else None


def compute_scale(x, grid: Grid, rule: str | None = None) -> np.float32:
    """Per-tensor scale for ``rule`` (``None``: ``absmax``, or ``clip`` for ``uniformB-cX``);
    1.0 for an all-zero tensor. :func:`scale_info` also says which rule produced it."""
    return scale_info(x, grid, rule).scale


def scale_info(x, grid: Grid, rule: str | None = None) -> ScaleResult:
    """:func:`compute_scale` with its provenance (:class:`ScaleResult`)."""
    from co3cli.quantize import as_f32_1d

    x = as_f32_1d(x)
    if grid.clip_sigma is not None:
        if rule not in (None, "clip"):
            raise InputError(f"format {grid.id!r} fixes its scale (clip at {grid.clip_sigma:g} "
                             f"sigma); do not combine it with scale rule {rule!r}")
        fn, rule = _clip, "clip"
    else:
        if rule is not None and rule not in SCALE_RULES:
            raise InputError(f"unknown scale rule {rule!r}; allowed: {SCALE_RULES.allowed()} "
                             "(clip is implied by uniformB-cX formats)")
        rule = rule or "absmax"
        fn = SCALE_RULES.get(rule)
    if x.size == 0:
        raise InputError("cannot compute a scale for an empty tensor")
    s = fn(x, grid)
    used, reason = rule, None
    if isinstance(s, Fallback):
        s, used, reason = s
    if s is None:
        return ScaleResult(np.float32(1.0), rule, "none", reason)
    return ScaleResult(_to_f32_scale(s), rule, used, reason)


# ----------------------------------------------------------------------------------------
# The GenNorm MSE-optimal pre-scale and the CO3 polynomial
# ----------------------------------------------------------------------------------------


def _gennorm_unit_mse(mags: np.ndarray, edges: np.ndarray, beta: float, c) -> np.ndarray:
    """E[(X - Q(cX)/c)^2] for X ~ GenNorm(beta, 1), vectorised over c.

    Z = |X| has E[Z^j; Z <= t] = Gamma((j+1)/beta) P((j+1)/beta, t^beta) / Gamma(1/beta);
    each cell contributes M2 - 2 v M1 + v^2 M0 with v = m_k / c, the top cell to infinity.
    """
    from co3cli import detmath

    c = np.atleast_1d(np.asarray(c, dtype=np.float64))[:, None]
    w = _pow(edges[None, :] / c, beta)  # (nc, K)
    ones, zeros = np.ones((c.shape[0], 1)), np.zeros((c.shape[0], 1))
    mom = []
    for j in range(3):
        a = (j + 1) / beta
        p, q = detmath.gammainc_pq(a, w)
        P = np.concatenate([zeros, p, ones], axis=1)
        Q = np.concatenate([ones, q, zeros], axis=1)
        diff = np.where(P[:, 1:] <= 0.5, P[:, 1:] - P[:, :-1], Q[:, :-1] - Q[:, 1:])
        mom.append(diff * detmath.exp(detmath.lgamma(a) - detmath.lgamma(1 / beta)))
    v = mags[None, :] / c
    return np.sum(mom[2] - 2 * v * mom[1] + v * v * mom[0], axis=1)


# The MSE optimisers below search flat minima, where a last-bit difference in the objective
# moves the optimum by up to ~1e-5 (measured: numpy's AVX-512 ``exp`` and ``**`` against its
# AVX2 ones changed a gennorm-mse scale by 150 float32 ulps, and the file's bytes). Their
# ``exp``, ``**``, log-gamma and incomplete gamma functions therefore come from
# ``co3cli.detmath`` (the same bits on every CPU; numpy's kernels, the C library's and so
# SciPy's special functions are chosen by CPU); numpy's sums and arithmetic are the same on
# every CPU (checked).


def _pow(a: np.ndarray, p: float) -> np.ndarray:
    """``a ** p`` elementwise (:func:`co3cli.detmath.pow`)."""
    from co3cli import detmath  # (numba: not at import, for the CLI's start-up)

    return detmath.pow(a, p)


def _exp(a) -> np.ndarray:
    """``exp(a)`` elementwise (:func:`co3cli.detmath.exp`), always an array."""
    from co3cli import detmath

    return np.atleast_1d(detmath.exp(a))


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
    from scipy import optimize

    from co3cli import detmath

    mags, edges = np.frombuffer(mags_b), np.frombuffer(edges_b)
    a = 1.0 / beta
    # the top magnitude maps to z_top = m_K / c; search z_top between the 25 % quantile of |X|
    # and its (1 - 1e-30) quantile: below, most entries saturate; above, nothing changes
    z_lo = detmath.pow(detmath.gamma_quantile(a, 0.25), a)
    z_hi = detmath.pow(detmath.gamma_quantile(a, 1e-30, upper=True), a)
    lc = np.linspace(detmath.log(mags[-1] / z_hi), detmath.log(mags[-1] / z_lo), 97)
    mse = _gennorm_unit_mse(mags, edges, beta, _exp(lc))
    # refine the three best local minima of the coarse scan with a bounded Brent search
    interior = [i for i in range(len(lc))
                if (i == 0 or mse[i] <= mse[i - 1]) and (i == len(lc) - 1 or mse[i] <= mse[i + 1])]
    best_x, best_f = lc[int(np.argmin(mse))], float(np.min(mse))
    for i in sorted(interior, key=lambda i: mse[i])[:3]:
        lo, hi = lc[max(i - 1, 0)], lc[min(i + 1, len(lc) - 1)]
        res = optimize.minimize_scalar(
            lambda s: float(_gennorm_unit_mse(mags, edges, beta, _exp(s))[0]),
            bounds=(lo, hi), method="bounded", options={"xatol": 1e-7})
        if res.fun < best_f:
            best_x, best_f = float(res.x), float(res.fun)
    return detmath.exp(best_x)


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


# ----------------------------------------------------------------------------------------
# The empirical MSE-optimal scale
# ----------------------------------------------------------------------------------------


class SortedMagnitudes:
    """|x| sorted (float64) with prefix sums of |x| and |x|^2: the quantization MSE of x at any
    scale in O(K log n) (:meth:`mse`), K the grid's magnitudes."""

    def __init__(self, x: np.ndarray):
        self.a = np.sort(np.abs(np.asarray(x, dtype=np.float64)).ravel())
        self.n = self.a.size
        self.s1 = np.concatenate([[0.0], np.cumsum(self.a)])
        self.s2 = np.concatenate([[0.0], np.cumsum(self.a * self.a)])

    def mse(self, grid, s) -> np.ndarray:
        """mean((|x| - m(|x| s) / s)^2) for each scale in ``s`` (nearest magnitude, the top one
        for everything past the last edge: saturation); ties at an edge go down."""
        from co3cli.models.families import grid_arrays

        mags, edges = grid_arrays(grid)
        s = np.atleast_1d(np.asarray(s, dtype=np.float64))[:, None]
        cuts = np.searchsorted(self.a, (edges[None, :] / s).ravel(), side="right")
        b = np.concatenate([np.zeros((s.shape[0], 1), np.int64), cuts.reshape(s.shape[0], -1),
                            np.full((s.shape[0], 1), self.n)], axis=1)
        cnt = np.diff(b, axis=1)
        m1, m2 = np.diff(self.s1[b], axis=1), np.diff(self.s2[b], axis=1)
        v = mags[None, :] / s
        sse = np.sum(m2 - 2 * v * m1 + v * v * cnt, axis=1)
        return np.maximum(sse, 0.0) / max(self.n, 1)


def empirical_mse_scale(x: np.ndarray, grid, points: int = 129) -> float | None:
    """The scale minimising the real quantization MSE of ``x`` on ``grid`` (None: all zeros).

    The clip point t = (grid max) / s is scanned on ``points`` log-spaced values between the
    median nonzero |x| (below it most entries saturate) and 2 max|x|, plus t = max|x| (absmax,
    so the result is never worse than absmax on ``x``); the three best local minima are refined
    by a bounded Brent search in log t. Scale-equivariant: the scan is relative to |x|.
    """
    from scipy import optimize

    from co3cli import detmath  # the same scale on every CPU (the search's exp and log)
    from co3cli.models.families import grid_arrays

    sm = SortedMagnitudes(x)
    nz = int(np.searchsorted(sm.a, 0.0, side="right"))
    if nz == sm.n:
        return None
    top = float(grid_arrays(grid)[0][-1])
    amax, lo = sm.a[-1], sm.a[nz + (sm.n - nz) // 2]
    lo = lo if lo < amax else amax / 2
    lt = np.linspace(detmath.log(float(lo)), detmath.log(2.0 * float(amax)), points)
    f = sm.mse(grid, top / _exp(lt))
    best_t, best_f = detmath.log(float(amax)), float(sm.mse(grid, top / amax)[0])  # absmax
    if f.min() < best_f:
        best_t, best_f = float(lt[np.argmin(f)]), float(f.min())
    local = [i for i in range(points)
             if (i == 0 or f[i] <= f[i - 1]) and (i == points - 1 or f[i] <= f[i + 1])]
    for i in sorted(local, key=lambda i: f[i])[:3]:
        res = optimize.minimize_scalar(lambda u: float(sm.mse(grid, top / detmath.exp(u))[0]),
                                       bounds=(lt[max(i - 1, 0)], lt[min(i + 1, points - 1)]),
                                       method="bounded", options={"xatol": 1e-6})
        if res.fun < best_f:
            best_t, best_f = float(res.x), float(res.fun)
    return top / detmath.exp(best_t)


def co3_poly_scale(beta: float, alpha: float) -> float:
    """The CO3 authors' fp4 rule s = max(p(beta), 0.0009) / alpha,
    p(b) = 0.46 - 2.85 b + 5.37 b^2 - 2.85 b^3 + 0.52 b^4 (fitted for beta in about [0.6, 2])."""
    from co3cli.models.families import check_positive

    b = check_positive(beta, "beta")
    alpha = check_positive(alpha, "alpha")
    b2 = b * b  # products, not the C library's pow: the same bits on every CPU
    p = 0.46 - 2.85 * b + 5.37 * b2 - 2.85 * (b2 * b) + 0.52 * (b2 * b2)
    return max(p, 0.0009) / alpha


# ----------------------------------------------------------------------------------------
# The shortest scale of the same quantization (what a file stores)
# ----------------------------------------------------------------------------------------


def _sq_errors(x64: np.ndarray, sym: np.ndarray, grid: Grid, scales: np.ndarray) -> np.ndarray:
    """Per row the squared error of the reconstruction ``values[sym] / scale`` (float32, as
    decoded: ``co3cli.quantize.dequantize``'s division), in float64, each row summed in a fixed
    order (:func:`co3cli.detmath.fsum_rows`: the same on every CPU)."""
    from co3cli import detmath

    with np.errstate(over="ignore"):  # (a symbol past the data's top: inf, not used)
        tables = grid.values[None, :] / scales.astype(np.float32)[:, None]  # dequantize_table's
    d = x64 - np.take_along_axis(tables, sym.astype(np.intp), axis=1)
    with np.errstate(over="ignore", invalid="ignore"):
        return detmath.fsum_rows(d * d)


def _rounded(bits: np.ndarray, k: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per float32 bit pattern the patterns of ``k`` mantissa bits next to it, below and
    above (above: -1 where ``bits`` has no more than ``k``, or past the largest float32)."""
    drop = 23 - k
    lo = bits >> drop << drop
    hi = lo + (1 << drop)
    return lo, np.where((lo != bits) & (hi < 0x7F800000), hi, -1)


def short_scales(x2: np.ndarray, grid: Grid, scales: np.ndarray, sym: np.ndarray) -> np.ndarray:
    """Per row of float32 ``x2`` (a layer's steps) a positive float32 with few mantissa bits
    (its low bits zero) that quantizes the row to exactly ``sym``'s row (its symbols at
    ``scales``' float32) and reconstructs it with no larger squared error than that scale; the
    scale itself where no shorter one is found.

    A file stores each scale's mantissa bits (``co3cli.container.gcompact``); absmax's
    ``top / max|x|`` has all 23, but a tensor of a few hundred entries keeps its symbols over
    a range of scales some 2**-8 wide, so most keep 3-14 bits. The symbols, and so the payload,
    are the same; the decoded values move by less than that range, never further from ``x``
    in all. The search: for ``k`` mantissa bits the two float32s of ``k`` bits around the
    scale, the one of smaller error that passes (the lower on a tie; one whose products would
    overflow float32 does not pass); a bisection on ``k``, all rows at once: 5 rounds of at
    most 2 quantizations of ``x2``. Each entry keeps its symbol over an interval of scales and
    the error is close to a quadratic in ``1 / scale``, so a shorter ``k`` passing mostly means
    every longer one does; the float32 rounding of the reconstruction breaks that now and then
    (a scale one ulp away can cost more error than one 2**-9 away), where the bisection settles
    on more bits than a scan of every ``k`` would (on ~1-4 % of the scales of random tensors).
    Every scale returned is checked: the same symbols, no larger error."""
    from co3cli.quantize import quantize_rows

    x2 = np.ascontiguousarray(x2, dtype=np.float32)
    s = np.ascontiguousarray(scales, dtype=np.float32)
    if x2.shape[1] == 0:
        return s.copy()
    bits = s.view(np.uint32).astype(np.int64)
    x64 = x2.astype(np.float64)
    amax = np.abs(x2).max(axis=1)  # float32: x * c overflows somewhere iff amax * c does
    limit = _sq_errors(x64, sym, grid, s)
    lo = np.where(np.isfinite(limit), 0, 23)  # a row decoded to inf: its scale kept
    hi, out = np.full(s.size, 23), bits.copy()
    while np.any(lo < hi):
        mid = (lo + hi) // 2
        below, above = _rounded(bits, mid)
        ok = lo < hi
        best = np.where(ok & (below == bits), bits, -1)  # already as short: itself
        err = np.full(s.size, np.inf)
        for cand in (below, above):
            test = ok & (best != bits) & (cand > 0) & (cand != bits)
            c = np.where(test, cand, bits).astype(np.uint32).view(np.float32)
            with np.errstate(over="ignore"):
                test &= np.isfinite(amax * c)
            if not test.any():
                continue
            c = np.where(test, c, s)
            same = np.all(quantize_rows(x2, grid, c) == sym, axis=1)
            e = _sq_errors(x64, sym, grid, c)
            take = test & same & (e <= limit) & (e < err)
            best, err = np.where(take, cand, best), np.where(take, e, err)
        found = best >= 0
        hi, lo = np.where(ok & found, mid, hi), np.where(ok & ~found, mid + 1, lo)
        out = np.where(ok & found, best, out)
    return out.astype(np.uint32).view(np.float32)


def short_scale(x, grid: Grid, scale, sym: np.ndarray) -> np.float32:
    """:func:`short_scales` of one tensor ``x`` (its symbols ``sym`` at ``scale``)."""
    from co3cli.quantize import as_f32_1d

    x = as_f32_1d(x)
    return np.float32(short_scales(x[None, :], grid, np.float32([scale]),
                                   np.asarray(sym).reshape(1, -1))[0])
