"""Maximum-likelihood fits (profile likelihood over the shape) and the :class:`Fit` result."""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass, field

import numpy as np

from co3cli.checks import check_int, check_real
from co3cli.errors import InputError

from co3cli.models.families import (
    _LOG2, _NEWTON_TOL, _SPECS, _SUBSAMPLE, BETA_BOUNDS, DEFAULT_MODEL, _as_t,
    _check_model, check_positive, _floor_normalise, _GenNorm, grid_arrays, _Laplace, _Normal,
    _out, abs_cell_masses, pmf_from_counts,
)

@dataclass(frozen=True)
class Fit:
    """A fitted model: ``p0`` point mass at 0 plus ``1 - p0`` times a symmetric continuous law.

    ``params`` are floats: gennorm ``beta``, ``scale`` (= alpha); normal ``sigma``; laplace
    ``b``; dweibull ``c``, ``scale``; empirical none. ``n`` entries were fitted, ``n_nonzero``
    of them non-zero. A zero-inflated fit of all-zero data has ``p0 == 1`` and stand-in
    parameters (weight 0). The ``empirical`` fit keeps a reference to the data it was built
    from (not serialised); one restored by :meth:`from_dict` carries no data.
    """

    model: str
    params: dict
    p0: float = 0.0
    n: int = 0
    n_nonzero: int = 0
    data: np.ndarray | None = field(default=None, compare=False, repr=False)

    def __post_init__(self):
        model = _check_model(self.model)
        family, zi = _SPECS[model]
        params = self.params
        if not isinstance(params, dict):
            raise InputError(f"fit: params must be a dict, got {params!r}")
        want = family.names if family is not None else ()
        if set(params) != set(want):
            raise InputError(f"fit: model {model!r} needs params {list(want)}, "
                             f"got {sorted(params)}")
        clean = {}
        for k in want:
            clean[k] = check_real(k, params[k], 0.0, lo_open=True, who="fit: ")
        p0 = check_real("p0", self.p0, 0.0, 1.0, who="fit: ")
        if not zi and p0 != 0.0:
            raise InputError(f"fit: model {model!r} is not zero-inflated; p0 must be 0")
        for name in ("n", "n_nonzero"):
            check_int(name, getattr(self, name), lo=0, who="fit: ")
        if self.n_nonzero > self.n:
            raise InputError(f"fit: n_nonzero ({self.n_nonzero}) exceeds n ({self.n})")
        object.__setattr__(self, "params", clean)
        object.__setattr__(self, "p0", float(p0))
        object.__setattr__(self, "n", int(self.n))
        object.__setattr__(self, "n_nonzero", int(self.n_nonzero))

    # -- serialisation ------------------------------------------------------------------
    def to_dict(self) -> dict:
        """JSON-able description (the data of an empirical fit is not included)."""
        return {"model": self.model, "params": dict(self.params), "p0": self.p0, "n": self.n,
                "n_nonzero": self.n_nonzero}

    @classmethod
    def from_dict(cls, d: dict) -> "Fit":
        """Rebuild a fit written by :meth:`to_dict` (validated like the constructor)."""
        if not isinstance(d, dict):
            raise InputError(f"fit must be a dict, got {type(d).__name__}")
        allowed = {"model", "params", "p0", "n", "n_nonzero"}
        extra = set(d) - allowed
        if extra or "model" not in d or "params" not in d:
            raise InputError(f"fit dict: keys must be {sorted(allowed)} (model and params "
                             f"required), got {sorted(d)}")
        return cls(**d)

    # -- distribution -------------------------------------------------------------------
    @property
    def k(self) -> int:
        """Number of fitted continuous parameters (used by the AIC)."""
        family = _SPECS[self.model][0]
        return 0 if family is None else len(family.names)

    def _family(self):
        family = _SPECS[self.model][0]
        if family is None:
            raise InputError("the empirical model has no density (use a parametric model)")
        return family

    def _sorted(self, absolute: bool = False) -> np.ndarray:
        """Sorted data (or sorted |data|) of an empirical fit, computed once."""
        if self.data is None:
            raise InputError("this empirical fit carries no data (restored from a dict?); "
                             "refit it with fit(x, 'empirical')")
        cache = self.__dict__.setdefault("_sorted_cache", {})
        if absolute not in cache:
            x = np.asarray(self.data, dtype=np.float64)
            cache[absolute] = np.sort(np.abs(x) if absolute else x)
        return cache[absolute]

    def _pq(self, t: np.ndarray):
        """(P(|X| <= t), P(|X| > t)) of the whole mixture, for t >= 0."""
        if self.model == "empirical":
            a = self._sorted(absolute=True)
            le = np.searchsorted(a, t, side="right") / a.size
            return le, 1.0 - le
        w = 1.0 - self.p0
        pr, q = self._family().pq(t, self.params)
        return self.p0 + w * pr, w * q

    def cdf(self, t):
        """P(X <= t), including the jump p0 at 0."""
        t, scalar = _as_t(t)
        if self.model == "empirical":
            s = self._sorted()
            return _out(np.searchsorted(s, t, side="right") / s.size, scalar)
        w = 1.0 - self.p0
        pr, q = self._family().pq(np.abs(t), self.params)
        out = np.where(t < 0, 0.5 * w * q, self.p0 + w * (0.5 + 0.5 * pr))
        return _out(np.asarray(out, dtype=np.float64), scalar)

    def sf_abs(self, t):
        """P(|X| > t) (1 for t < 0)."""
        t, scalar = _as_t(t)
        _, q = self._pq(np.maximum(t, 0.0))
        return _out(np.where(t < 0, 1.0, q).astype(np.float64), scalar)

    def ppf(self, u):
        """Quantile function inf{t : cdf(t) >= u} (the jump at 0 maps a whole u-range to 0)."""
        u, scalar = _as_t(u)
        if np.any(~(u >= 0.0) | ~(u <= 1.0)):
            raise InputError("ppf: u must lie in [0, 1]")
        if self.model == "empirical":
            s = self._sorted()
            i = np.clip(np.ceil(u * s.size).astype(np.int64) - 1, 0, s.size - 1)
            return _out(s[i], scalar)
        w = 1.0 - self.p0
        out = np.zeros_like(u)
        if w > 0:
            lo, hi = 0.5 * w, 0.5 * w + self.p0  # cdf(0-) and cdf(0)
            neg, pos = u < lo, u > hi
            fam = self._family()
            if np.any(neg):
                q = np.minimum(u[neg] / lo, 1.0)
                out[neg] = -fam.quantile(1.0 - q, q, self.params)
            if np.any(pos):
                q = np.minimum((1.0 - u[pos]) / lo, 1.0)
                out[pos] = fam.quantile(1.0 - q, q, self.params)
        return _out(out, scalar)

    def logpdf_nonzero(self, x):
        """Log density of the continuous component at x (the point mass is not included)."""
        x, scalar = _as_t(x)
        return _out(np.asarray(self._family().logpdf(x, self.params), dtype=np.float64), scalar)

    def pmf(self, grid, scale) -> np.ndarray:
        """Probability of each of the grid's ``nsym`` symbols when X is scaled by ``scale``.

        CDF differences over each cell (see the module docstring); the outermost cells take
        the tails to +-inf; the zero cell also gets p0. Probabilities below :data:`PMF_FLOOR`
        are raised to it and the vector is renormalised, so every symbol is > 0.

        ``empirical``: frequencies of float32(x * scale) rounded to the nearest magnitude, a
        tie going to the lower magnitude (a measure-zero event for real data). To build a
        table from the quantizer's own symbols (ties to even), pass its counts to
        :func:`pmf_from_counts`.
        """
        mags, edges = grid_arrays(grid)
        scale = check_positive(scale, "scale")
        K = mags.size - 1
        if self.model == "empirical":
            x = self.data
            if x is None:
                self._sorted()  # raises the explanatory error
            y = np.abs(np.asarray(x, dtype=np.float32) * np.float32(scale)).astype(np.float64)
            k = np.searchsorted(edges, y, side="left")
            sym = K + np.where(np.asarray(x) < 0, -k, k)
            return pmf_from_counts(np.bincount(sym, minlength=2 * K + 1))
        cell = abs_cell_masses(self._family(), self.params, edges / scale)
        w = 1.0 - self.p0
        out = np.empty(2 * K + 1)
        out[K] = self.p0 + w * cell[0]
        out[K + 1:] = 0.5 * w * cell[1:]
        out[:K] = out[K + 1:][::-1]
        return _floor_normalise(out)


# ----------------------------------------------------------------------------------------
# Data preparation and profile-likelihood machinery
# ----------------------------------------------------------------------------------------


class _Data:
    """Validated input with cached |x| of the non-zeros and their log (shared by fit_all)."""

    def __init__(self, x):
        x = np.asarray(x)
        if x.ndim != 1:
            raise InputError(f"x must be a 1-D array, got shape {x.shape}")
        if not np.issubdtype(x.dtype, np.floating):
            raise InputError(f"x must have a float dtype (float16/32/64), got {x.dtype}")
        if x.size == 0:
            raise InputError("x is empty; cannot fit a model to 0 entries")
        if x.dtype == np.float16 or x.dtype.itemsize > 8:
            x = x.astype(np.float32 if x.dtype == np.float16 else np.float64)
        self.x = x
        self.n = int(x.size)
        a = np.abs(x)
        self.amax = float(a.max())  # NaN propagates through max
        if not math.isfinite(self.amax):
            raise InputError("x contains NaN or Inf; only finite values can be fitted")
        if self.amax == 0.0:
            self.n_nonzero = 0
            self.a_nz = a[:0]
        else:
            nz = a > 0
            self.n_nonzero = int(np.count_nonzero(nz))
            self.a_nz = a if self.n_nonzero == self.n else a[nz]
        self._L = None
        self._sums = None

    @property
    def p0(self) -> float:
        return 1.0 - self.n_nonzero / self.n

    @property
    def L(self) -> np.ndarray:
        """float32 log(|x| / max|x|) of the non-zero entries (all <= 0)."""
        if self._L is None:
            from co3cli import detmath  # the same bits on every machine (numba: not at import)

            a = self.a_nz
            if a.dtype == np.float32:
                L = np.empty(a.size, dtype=np.float32)
                detmath.log_ratio_f32(a, a.view(np.int32), np.float32(self.amax), L)
            else:
                L = (detmath.log(a) - detmath.log(self.amax)).astype(np.float32)
                np.minimum(L, 0.0, out=L)
            self._L = L
        return self._L

    def unit_sums(self) -> tuple[float, float]:
        """(sum u, sum u^2) over the non-zeros, u = |x| / max|x| in (0, 1]: scale-free, so
        nothing overflows or underflows for any float input (squares below 1e-38 relative to
        the largest may flush to 0). Chunked, float64 accumulation of per-chunk sums."""
        if self._sums is None:
            a = self.a_nz
            s1 = s2 = 0.0
            if a.size:  # amax: an element of a, exact in its dtype
                from co3cli import detmath

                s1, s2 = detmath.unit_sums(a, a.dtype.type(self.amax))
            self._sums = (s1, s2)
        return self._sums


def _power_sums(L: np.ndarray, b: float) -> tuple[float, float, float]:
    """(sum e, sum L e, sum L^2 e) with e = exp(b L), float64, the same bits on every machine
    (:func:`co3cli.detmath.power_sums`)."""
    from co3cli import detmath

    return detmath.power_sums(L, float(b))


class _Profile:
    """Per-entry profile log-likelihood in t = log(shape), up to a constant, and derivatives.

    ``log_frac`` = log(n_nonzero / n): the plain GenNorm counts zeros (|0|**b = 0) in n.
    """

    def __init__(self, kind: str, L: np.ndarray, log_frac: float = 0.0):
        self.kind, self.L, self.log_frac = kind, L, log_frac
        from co3cli import detmath

        self.Lbar = detmath.fsum(L) / L.size if kind == "weibull" else 0.0

    def __call__(self, t: float):
        from scipy import special

        b = math.exp(t)
        S, S1, S2 = _power_sums(self.L, b)
        h = math.log(S / self.L.size) + self.log_frac
        h1 = S1 / S
        h2 = max(S2 / S - h1 * h1, 0.0)
        if self.kind == "gennorm":
            ib = 1.0 / b
            psi, psi1 = float(special.digamma(ib)), float(special.polygamma(1, ib))
            lb = math.log(b) + h
            g = math.log(b) - _LOG2 - float(special.gammaln(ib)) - ib - lb * ib
            g1 = ib + (psi + lb) * ib * ib - h1 * ib
            g2 = (-ib * ib - psi1 * ib ** 4 + (1.0 - 2.0 * psi - 2.0 * lb) * ib ** 3
                  + 2.0 * h1 * ib * ib - h2 * ib)
        else:  # weibull on |x|: log c - log mean(u^c) + (c - 1) mean(log u) - 1
            g = math.log(b) - h + (b - 1.0) * self.Lbar - 1.0
            g1 = 1.0 / b - h1 + self.Lbar
            g2 = -1.0 / (b * b) - h2
        return g, b * g1, b * g1 + b * b * g2, h


def _newton(prof: _Profile, t: float, tmin: float, tmax: float, maxit: int = 60):
    """Safeguarded Newton ascent in t on [tmin, tmax]; returns (t, h(t)).

    Steps are capped at 0.5 in log-shape, a non-concave point takes a fixed gradient step,
    a step that lowers the objective (beyond float32 summation noise) is halved; if Newton
    has not converged after ``maxit`` steps, a bounded Brent search finishes the job.
    """
    g, gt, gtt, h = prof(t)
    for _ in range(maxit):
        step = -gt / gtt if gtt < 0 else math.copysign(0.25, gt)
        step = max(-0.5, min(0.5, step))
        if abs(step) < _NEWTON_TOL:
            return t, h
        tn = min(tmax, max(tmin, t + step))
        if tn == t:  # pinned at a bound
            return t, h
        while True:
            gn, gtn, gttn, hn = prof(tn)
            if gn >= g - 1e-6 or abs(tn - t) < _NEWTON_TOL:
                break
            tn = t + 0.5 * (tn - t)
        t, g, gt, gtt, h = tn, gn, gtn, gttn, hn
    from scipy import optimize

    res = optimize.minimize_scalar(lambda s: -prof(s)[0], bounds=(tmin, tmax), method="bounded",
                                   options={"xatol": 1e-7})
    t = float(res.x)
    return t, prof(t)[3]


def _bracket_root(f, lo: float, hi: float, xtol: float, maxiter: int = 200) -> float:
    """A root of the continuous ``f`` in [lo, hi], where f(lo) and f(hi) differ in sign, to
    within ``xtol``: regula falsi with the Illinois halving of a stale end's value, and a
    bisection step whenever the bracket shrank by less than half, so the bracket always
    closes (linear at worst, superlinear on smooth f). Avoids importing scipy.optimize (a
    tenth of a second of every ``co3 compress``) for the one root the GenNorm start needs."""
    f_lo, f_hi = f(lo), f(hi)
    if f_lo == 0:
        return lo
    if f_hi == 0:
        return hi
    if (f_lo > 0) == (f_hi > 0):
        raise ValueError("f(lo) and f(hi) must have different signs")
    stale = 0  # +1: lo kept its place last step, -1: hi did
    width = hi - lo
    for _ in range(maxiter):
        if hi - lo <= xtol:
            break
        x = hi - f_hi * (hi - lo) / (f_hi - f_lo)
        if not lo < x < hi or hi - lo > 0.5 * width:  # the secant stalls: bisect
            x = 0.5 * (lo + hi)
        width = hi - lo
        fx = f(x)
        if fx == 0:
            return x
        if (fx > 0) == (f_lo > 0):
            lo, f_lo = x, fx
            if stale == -1:
                f_hi *= 0.5
            stale = -1
        else:
            hi, f_hi = x, fx
            if stale == 1:
                f_lo *= 0.5
            stale = 1
    return lo if abs(f_lo) <= abs(f_hi) else hi


def _gennorm_mom(r: float) -> float:
    """Solve Gamma(1/b)Gamma(3/b)/Gamma(2/b)^2 = r for b (clipped to BETA_BOUNDS)."""
    from scipy import special

    def f(t):
        b = math.exp(t)
        return (float(special.gammaln(1 / b) + special.gammaln(3 / b) - 2 * special.gammaln(2 / b))
                - math.log(r))

    tmin, tmax = math.log(BETA_BOUNDS[0]), math.log(BETA_BOUNDS[1])
    if not math.isfinite(r) or f(tmin) <= 0:
        return BETA_BOUNDS[0]
    if f(tmax) >= 0:
        return BETA_BOUNDS[1]
    return math.exp(_bracket_root(f, tmin, tmax, xtol=1e-12))


def _fit_shape(data: _Data, kind: str, log_frac: float, t0: float | None) -> tuple[float, float]:
    """Profile MLE of the shape (GenNorm beta or Weibull c); returns (shape, scale)."""
    tmin, tmax = math.log(BETA_BOUNDS[0]), math.log(BETA_BOUNDS[1])
    L = data.L
    step = -(-L.size // _SUBSAMPLE)
    # coarse scan + Newton on a deterministic strided subsample, then Newton on everything
    sub = _Profile(kind, np.ascontiguousarray(L[::step]), log_frac) if step > 1 else None
    prof = _Profile(kind, L, log_frac)
    warm = sub or prof
    cands = list(np.linspace(tmin, tmax, 13))
    if t0 is not None:
        cands.append(min(tmax, max(tmin, t0)))
    t = max(cands, key=lambda s: warm(s)[0])
    t, h = _newton(warm, t, tmin, tmax)
    if sub is not None:
        t, h = _newton(prof, t, tmin, tmax)
    b = math.exp(t)
    if kind == "gennorm":  # alpha^b = b * mean|x|^b
        log_scale = math.log(data.amax) + (math.log(b) + h) / b
    else:  # lambda^c = mean|x|^c
        log_scale = math.log(data.amax) + h / b
    # a collapsed plain GenNorm (beta at its lower bound) on tiny data can underflow: clamp
    return b, max(math.exp(min(log_scale, 709.0)), sys.float_info.min)


def _fit_prepared(data: _Data, model: str) -> Fit:
    family, zi = _SPECS[model]
    n, nnz = data.n, data.n_nonzero
    if model == "empirical":
        return Fit(model, {}, p0=data.p0, n=n, n_nonzero=nnz, data=data.x)
    if nnz == 0:
        if not zi:
            raise InputError(f"model {model!r}: all {n} entries are 0, so it has no scale; use a "
                             "zero-inflated model (gennorm-zi, normal-zi, laplace-zi, dweibull)")
        return Fit(model, dict(family.stand_in), p0=1.0, n=n, n_nonzero=0)
    m = nnz if zi else n  # entries the continuous component is fitted to
    if family is _Normal:
        params = {"sigma": data.amax * math.sqrt(data.unit_sums()[1] / m)}
    elif family is _Laplace:
        params = {"b": data.amax * (data.unit_sums()[0] / m)}
    elif family is _GenNorm:
        s1, s2 = data.unit_sums()
        r = m * s2 / (s1 * s1)
        t0 = math.log(_gennorm_mom(r))
        beta, alpha = _fit_shape(data, "gennorm", math.log(nnz / m), t0)
        params = {"beta": beta, "scale": alpha}
    else:
        c, lam = _fit_shape(data, "weibull", 0.0, None)
        params = {"c": c, "scale": lam}
    return Fit(model, params, p0=data.p0 if zi else 0.0, n=n, n_nonzero=nnz)


def fit(x: np.ndarray, model: str = DEFAULT_MODEL) -> Fit:
    """Fit ``model`` (an id from :data:`MODELS`) to the 1-D float array ``x`` by MLE.

    Raises InputError for an unknown model, empty, non-1-D, non-float or non-finite input,
    and for a non-zero-inflated model on all-zero input.
    """
    model = _check_model(model)
    return _fit_prepared(_Data(x), model)

