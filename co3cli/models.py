"""Model: distributions of gradient entries, their fits, goodness of fit and symbol pmfs.

Where this sits in the pipeline (design.md §2, §3)::

    gradient x (1-D float) --fit()--> Fit --pmf(grid, scale)--> symbol probabilities
                             |                                    (-> integer code tables)
                             +--gof()--> loglik / AIC / KS / W2 / tail ratios (reports)
    quantizer scale rules:  gennorm_mse_unit_scale(grid, beta) / alpha,  co3_poly_scale(beta, alpha)

The paper's hypothesis ("DNN gradient lossless compression: can GenNorm be the answer?") is
that per-layer gradients follow a generalised normal (GenNorm) law

    f(x) = beta / (2 alpha Gamma(1/beta)) * exp(-(|x| / alpha)**beta)

(beta = 2: normal, beta = 1: Laplace). ReLU networks put 10-25 % of entries at exactly 0,
on which a plain GenNorm MLE collapses (its likelihood grows without bound as beta -> 0), so
the default model ``gennorm-zi`` is *zero-inflated*: a point mass ``p0`` (the fraction of
exact zeros) plus a GenNorm fitted to the non-zero entries.

Models (stable ids, see :data:`MODELS`); the location is fixed at 0 for all of them, because
gradients are centred and every grid is sign-symmetric:

* ``gennorm-zi`` (default), ``normal-zi``, ``laplace-zi``: p0 = zero fraction, continuous
  component fitted by MLE to the non-zero entries;
* ``gennorm``, ``normal``, ``laplace``: fitted by MLE to all entries, p0 = 0;
* ``dweibull``: double Weibull (TinyScript's model). Its density is 0 or infinite at x = 0
  (unless c == 1), so it is always fitted to the non-zero entries with the zero fraction
  as point mass p0;
* ``empirical``: no parametric fit; its pmf is the (floored) histogram of the quantized data.

Fitting. For fixed beta the GenNorm MLE of the scale is closed form,
``alpha = (beta / n * sum |x|**beta)**(1/beta)``, so the MLE is a 1-D maximisation of the
profile log-likelihood over beta: start from the method-of-moments estimate (solve
``Gamma(1/b) Gamma(3/b) / Gamma(2/b)**2 = E[x^2] / E|x|^2``) or the best point of a 13-point
scan of [0.05, 20] if that is higher, polish with safeguarded Newton on a deterministic strided
65k subsample, then run Newton on all entries (typically three passes). Each pass needs
``S(b) = sum exp(b L)`` and its first two derivatives, with ``L = log(|x| / max|x|) <= 0``
precomputed once in float32 (so nothing overflows), computed in cache-sized chunks and
accumulated in float64. beta is searched in :data:`BETA_BOUNDS`. The double Weibull uses the
same trick (``lambda**c = mean |x|**c``; its profile is concave in c). Normal and Laplace
scales are closed form.

Symbol pmf (:meth:`Fit.pmf`): entry x becomes symbol ``K + sign(y) k`` with ``y = x * scale``
rounded to the nearest magnitude; cell k (``k >= 1``) is ``edges[k-1] < |y| <= edges[k]``,
the top cell extends to infinity (saturation), and the zero cell ``|y| <= edges[0]`` also gets
p0. Every symbol gets probability at least :data:`PMF_FLOOR` (then renormalised), so a
codebook built from the model can code any input.
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np

from co3cli.errors import InputError

BETA_BOUNDS = (0.05, 20.0)  # search interval for GenNorm beta and Weibull c
PMF_FLOOR = 1e-300  # smallest probability given to any symbol (pmf sums to 1, so also relative)
DEFAULT_MODEL = "gennorm-zi"

MODELS = {
    "gennorm-zi": "zero-inflated GenNorm: point mass p0 at 0 + GenNorm(beta, scale) fitted to the "
    "non-zero entries (default)",
    "gennorm": "GenNorm(beta, scale) fitted to all entries",
    "normal": "Normal(0, sigma) fitted to all entries",
    "laplace": "Laplace(0, b) fitted to all entries",
    "normal-zi": "zero-inflated Normal: p0 at 0 + Normal(0, sigma) fitted to the non-zero entries",
    "laplace-zi": "zero-inflated Laplace: p0 at 0 + Laplace(0, b) fitted to the non-zero entries",
    "dweibull": "double Weibull(c, scale) fitted to the non-zero entries, p0 at 0 (its density "
    "is degenerate at 0)",
    "empirical": "no parametric fit: pmf from the counts of the quantized data",
}
FIT_ALL_MODELS = ("gennorm-zi", "gennorm", "normal", "laplace", "normal-zi", "laplace-zi",
                  "dweibull")

_CHUNK = 1 << 16  # entries per chunk of the power sums (fits in L2 cache)
_SUBSAMPLE = 1 << 16  # entries of the deterministic subsample that warms up the Newton search
_NEWTON_TOL = 1e-6  # stop when the Newton step in log(beta) is below this
_LOG2 = math.log(2.0)


def get_model_ids() -> tuple[str, ...]:
    """The registered model ids, default first."""
    return tuple(MODELS)


def _check_model(model) -> str:
    if not isinstance(model, str) or model not in MODELS:
        raise InputError(f"unknown model {model!r}; allowed: {', '.join(MODELS)}")
    return model


# ----------------------------------------------------------------------------------------
# Continuous families (symmetric about 0, location 0). All work on t >= 0 through
#   pq(t)        -> (P(|Z| <= t), P(|Z| > t))   both computed directly, for tail accuracy
#   quantile(p, q) -> t with P(|Z| <= t) = p = 1 - q
#   logpdf(x)    -> log density of Z at x
# ----------------------------------------------------------------------------------------


def _branch(mask: np.ndarray, f_true, f_false) -> np.ndarray:
    """Evaluate f_true(mask) where mask holds and f_false(~mask) elsewhere (each only there)."""
    out = np.empty(mask.shape)
    out[mask] = f_true(mask)
    out[~mask] = f_false(~mask)
    return out


class _GenNorm:
    names = ("beta", "scale")
    stand_in = {"beta": 2.0, "scale": 1.0}

    @staticmethod
    def pq(t, p):
        from scipy import special

        a = 1.0 / p["beta"]
        with np.errstate(over="ignore"):
            w = (t / p["scale"]) ** p["beta"]
        return special.gammainc(a, w), special.gammaincc(a, w)

    @staticmethod
    def quantile(pr, q, p):
        from scipy import special

        a = 1.0 / p["beta"]
        w = _branch(q < 0.5, lambda m: special.gammainccinv(a, q[m]),
                    lambda m: special.gammaincinv(a, pr[m]))
        return p["scale"] * w ** a

    @staticmethod
    def logpdf(x, p):
        from scipy import special

        b, s = p["beta"], p["scale"]
        c = math.log(b) - _LOG2 - math.log(s) - float(special.gammaln(1.0 / b))
        return c - (np.abs(x) / s) ** b


class _Normal:
    names = ("sigma",)
    stand_in = {"sigma": 1.0}

    @staticmethod
    def pq(t, p):
        from scipy import special

        z = t / (p["sigma"] * math.sqrt(2.0))
        return special.erf(z), special.erfc(z)

    @staticmethod
    def quantile(pr, q, p):
        from scipy import special

        z = _branch(q < 0.5, lambda m: special.erfcinv(q[m]), lambda m: special.erfinv(pr[m]))
        return p["sigma"] * math.sqrt(2.0) * z

    @staticmethod
    def logpdf(x, p):
        s = p["sigma"]
        return -0.5 * math.log(2 * math.pi) - math.log(s) - 0.5 * (np.asarray(x) / s) ** 2


class _Laplace:
    names = ("b",)
    stand_in = {"b": 1.0}

    @staticmethod
    def pq(t, p):
        w = t / p["b"]
        return -np.expm1(-w), np.exp(-w)

    @staticmethod
    def quantile(pr, q, p):
        with np.errstate(divide="ignore"):
            return p["b"] * np.where(q < 0.5, -np.log(q), -np.log1p(-pr))

    @staticmethod
    def logpdf(x, p):
        b = p["b"]
        return -math.log(2 * b) - np.abs(x) / b


class _DWeibull:
    names = ("c", "scale")
    stand_in = {"c": 1.0, "scale": 1.0}

    @staticmethod
    def pq(t, p):
        with np.errstate(over="ignore"):
            w = (t / p["scale"]) ** p["c"]
        return -np.expm1(-w), np.exp(-w)

    @staticmethod
    def quantile(pr, q, p):
        with np.errstate(divide="ignore"):
            w = np.where(q < 0.5, -np.log(q), -np.log1p(-pr))
        return p["scale"] * w ** (1.0 / p["c"])

    @staticmethod
    def logpdf(x, p):
        c, s = p["c"], p["scale"]
        with np.errstate(divide="ignore"):
            r = np.abs(x) / s
            return math.log(c) - _LOG2 - math.log(s) + (c - 1.0) * np.log(r) - r ** c


# model id -> (family or None for empirical, zero-inflated?)
_SPECS = {
    "gennorm-zi": (_GenNorm, True),
    "gennorm": (_GenNorm, False),
    "normal": (_Normal, False),
    "laplace": (_Laplace, False),
    "normal-zi": (_Normal, True),
    "laplace-zi": (_Laplace, True),
    "dweibull": (_DWeibull, True),
    "empirical": (None, True),
}


# ----------------------------------------------------------------------------------------
# Fit
# ----------------------------------------------------------------------------------------


def _as_t(t) -> tuple[np.ndarray, bool]:
    arr = np.asarray(t, dtype=np.float64)
    return arr, arr.ndim == 0


def _out(arr: np.ndarray, scalar: bool):
    return float(arr) if scalar else arr


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
            v = params[k]
            if isinstance(v, bool) or not isinstance(v, (int, float, np.floating, np.integer)) \
                    or not math.isfinite(v) or v <= 0:
                raise InputError(f"fit: param {k!r} must be a finite number > 0, got {v!r}")
            clean[k] = float(v)
        p0 = self.p0
        if isinstance(p0, bool) or not isinstance(p0, (int, float, np.floating)) \
                or not 0.0 <= p0 <= 1.0:
            raise InputError(f"fit: p0 must be a number in [0, 1], got {p0!r}")
        if not zi and p0 != 0.0:
            raise InputError(f"fit: model {model!r} is not zero-inflated; p0 must be 0")
        for name in ("n", "n_nonzero"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 0:
                raise InputError(f"fit: {name} must be an integer >= 0, got {v!r}")
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
        mags, edges = _grid_arrays(grid)
        scale = _check_positive(scale, "scale")
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


def _floor_normalise(p: np.ndarray) -> np.ndarray:
    p = np.maximum(np.nan_to_num(p, nan=0.0), PMF_FLOOR)
    return p / p.sum()


def abs_cell_masses(family, params: dict, edges: np.ndarray) -> np.ndarray:
    """Mass of |Z| in each magnitude cell: [0, e0], (e0, e1], ..., (e_last, inf).

    Each cell is the difference of whichever tail (lower or upper) is smaller, for accuracy
    far out in the tails.
    """
    t = np.concatenate([edges, [np.inf]])
    pr, q = family.pq(t, params)
    pr = np.asarray(pr, dtype=np.float64)
    q = np.asarray(q, dtype=np.float64)
    cell = np.empty(t.size)
    cell[0] = pr[0]
    cell[1:] = np.where(q[:-1] < 0.5, q[:-1] - q[1:], pr[1:] - pr[:-1])
    return np.maximum(cell, 0.0)


def gennorm_cells(edges: np.ndarray, beta: float, scale: float) -> np.ndarray:
    """:func:`abs_cell_masses` of GenNorm(beta, scale), without building a :class:`Fit`."""
    return abs_cell_masses(_GenNorm, {"beta": beta, "scale": scale}, edges)


def pmf_from_counts(counts) -> np.ndarray:
    """Symbol counts -> pmf with every entry >= :data:`PMF_FLOOR` (then renormalised)."""
    c = np.asarray(counts)
    if c.ndim != 1 or c.size == 0 or np.any(~np.isfinite(c)) or np.any(c < 0):
        raise InputError("counts must be a non-empty 1-D array of finite non-negative numbers")
    c = c.astype(np.float64)
    total = c.sum()
    return _floor_normalise(c / total if total > 0 else np.full(c.size, 1.0 / c.size))


def _grid_arrays(grid) -> tuple[np.ndarray, np.ndarray]:
    try:
        mags = np.asarray(grid.magnitudes, dtype=np.float64)
        edges = np.asarray(grid.edges, dtype=np.float64)
    except AttributeError:
        raise InputError(f"grid must have .magnitudes and .edges, got {type(grid).__name__}") \
            from None
    if mags.ndim != 1 or mags.size < 2 or mags[0] != 0 or np.any(np.diff(mags) <= 0) \
            or edges.shape != (mags.size - 1,) or not np.all(np.isfinite(mags)):
        raise InputError("grid: magnitudes must be finite, ascending, start at 0, and "
                         "edges must hold the K midpoints")
    return mags, edges


def _check_positive(v, name: str) -> float:
    try:
        f = float(v)
    except (TypeError, ValueError):
        raise InputError(f"{name} must be a finite number > 0, got {v!r}") from None
    if not math.isfinite(f) or f <= 0:
        raise InputError(f"{name} must be a finite number > 0, got {v!r}")
    return f


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
            a = self.a_nz
            if a.dtype == np.float32:
                L = np.log(a)
                L -= np.float32(math.log(self.amax))
            else:
                L = (np.log(a) - math.log(self.amax)).astype(np.float32)
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
            if a.size:
                amax = a.dtype.type(self.amax)  # an element of a: exact in its dtype
                buf = np.empty(min(_CHUNK, a.size), a.dtype)
                for i in range(0, a.size, _CHUNK):
                    u = buf[:min(_CHUNK, a.size - i)]
                    np.divide(a[i:i + _CHUNK], amax, out=u)
                    s1 += float(u.sum())
                    s2 += float(np.dot(u, u))
            self._sums = (s1, s2)
        return self._sums


def _power_sums(L: np.ndarray, b: float) -> tuple[float, float, float]:
    """(sum e, sum L e, sum L^2 e) with e = exp(b L), chunked, float64 accumulation."""
    bb = np.float32(b)
    n = min(_CHUNK, L.size)
    e_buf, u_buf = np.empty(n, np.float32), np.empty(n, np.float32)
    s0 = s1 = s2 = 0.0
    for i in range(0, L.size, _CHUNK):
        Lc = L[i:i + _CHUNK]
        e, u = e_buf[:Lc.size], u_buf[:Lc.size]
        np.multiply(Lc, bb, out=e)
        np.exp(e, out=e)
        s0 += float(e.sum())
        np.multiply(Lc, e, out=u)
        s1 += float(u.sum())
        s2 += float(np.dot(u, Lc))
    return s0, s1, s2


class _Profile:
    """Per-entry profile log-likelihood in t = log(shape), up to a constant, and derivatives.

    ``log_frac`` = log(n_nonzero / n): the plain GenNorm counts zeros (|0|**b = 0) in n.
    """

    def __init__(self, kind: str, L: np.ndarray, log_frac: float = 0.0):
        self.kind, self.L, self.log_frac = kind, L, log_frac
        self.Lbar = float(np.sum(L, dtype=np.float64)) / L.size if kind == "weibull" else 0.0

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


def _gennorm_mom(r: float) -> float:
    """Solve Gamma(1/b)Gamma(3/b)/Gamma(2/b)^2 = r for b (clipped to BETA_BOUNDS)."""
    from scipy import optimize, special

    def f(t):
        b = math.exp(t)
        return (float(special.gammaln(1 / b) + special.gammaln(3 / b) - 2 * special.gammaln(2 / b))
                - math.log(r))

    tmin, tmax = math.log(BETA_BOUNDS[0]), math.log(BETA_BOUNDS[1])
    if not math.isfinite(r) or f(tmin) <= 0:
        return BETA_BOUNDS[0]
    if f(tmax) >= 0:
        return BETA_BOUNDS[1]
    return math.exp(optimize.brentq(f, tmin, tmax, xtol=1e-10))


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


# ----------------------------------------------------------------------------------------
# Goodness of fit
# ----------------------------------------------------------------------------------------

TAIL_QUANTILES = (0.99, 0.999, 0.9999)


def _gof_prepared(data: _Data, f: Fit, sample: int, seed: int) -> dict:
    if isinstance(sample, bool) or not isinstance(sample, (int, np.integer)) or sample < 1:
        raise InputError(f"sample must be an integer >= 1, got {sample!r}")
    if f.n != data.n:
        raise InputError(f"fit was made on {f.n} entries but x has {data.n}")
    x, n = data.x, data.n
    out: dict = {"model": f.model, "k": f.k, "n": n, "n_nonzero": data.n_nonzero}
    # log-likelihood of the continuous component on the non-zero entries
    if f.model == "empirical" or data.n_nonzero == 0:
        out.update(loglik=None, aic=None, nll_per_entry=None)
    else:
        ll = 0.0
        for i in range(0, data.n_nonzero, 1 << 20):
            ll += float(np.sum(f.logpdf_nonzero(data.a_nz[i:i + (1 << 20)])))
        out.update(loglik=ll, aic=2 * f.k - 2 * ll, nll_per_entry=-ll / data.n_nonzero)
    # KS and W2 on a deterministic subsample
    rng = np.random.default_rng(seed)
    if n > sample:
        s = np.sort(x[rng.choice(n, size=int(sample), replace=False)].astype(np.float64))
    else:
        s = np.sort(x.astype(np.float64))
    m = s.size
    F = np.asarray(f.cdf(s), dtype=np.float64)
    F_minus = F - np.where(s == 0, f.p0, 0.0)
    if f.model == "empirical":
        F_minus = np.asarray(f.cdf(np.nextafter(s, -np.inf)), dtype=np.float64)
    right = np.searchsorted(s, s, side="right") / m
    left = np.searchsorted(s, s, side="left") / m
    out["ks"] = float(max(np.max(np.abs(right - F)), np.max(np.abs(left - F_minus))))
    sd = float(np.std(x, dtype=np.float64))
    q = np.asarray(f.ppf((np.arange(1, m + 1) - 0.5) / m), dtype=np.float64)
    out["w2"] = float(np.sqrt(np.mean((s - q) ** 2)) / sd) if sd > 0 else None
    out["sample"] = m
    out["seed"] = seed
    # tails on the full data
    a = np.abs(x)
    ks = [min(n - 1, max(0, math.ceil(qq * n) - 1)) for qq in TAIL_QUANTILES]
    part = np.partition(a, ks)
    tail = []
    for qq, kk in zip(TAIL_QUANTILES, ks):
        t = float(part[kk])
        emp = float(np.count_nonzero(a > t)) / n
        mod = float(f.sf_abs(t))
        tail.append({"q": qq, "t": t, "emp": emp, "model": mod,
                     "ratio": mod / emp if emp > 0 else None})
    out["tail"] = tail
    return out


def gof(x: np.ndarray, fit: Fit, sample: int = 2**20, seed: int = 0) -> dict:
    """Goodness of fit of ``fit`` to ``x``.

    * ``loglik``, ``aic`` (= 2k - 2 loglik, k = number of continuous parameters),
      ``nll_per_entry`` (= -loglik / n_nonzero): on the NON-ZERO entries with the continuous
      component only, so zero-inflated and plain models are compared on the same data
      (None for ``empirical``, which has no density, and for all-zero data);
    * ``ks``: sup |ECDF - model CDF| (jump at 0 included) on a subsample of at most ``sample``
      entries drawn without replacement by ``numpy.random.default_rng(seed)`` (size and seed
      are recorded as ``sample`` and ``seed``);
    * ``w2``: 2-Wasserstein distance between the sorted subsample and the model quantiles at
      (i - 0.5)/m, both divided by std(x) (None if std(x) == 0);
    * ``tail``: for q in 0.99, 0.999, 0.9999 the empirical q-quantile t of |x| (full data) and
      P(|x| > t) empirical vs model, with ``ratio`` = model / empirical.
    """
    return _gof_prepared(_Data(x), fit, sample, seed)


def fit_all(x: np.ndarray, models=FIT_ALL_MODELS, sample: int = 2**20,
            seed: int = 0) -> dict:
    """Fit every model in ``models``: {id: (Fit, gof dict)}.

    Models that cannot describe the data (the non-zero-inflated ones on all-zero input) are
    left out of the result.
    """
    if isinstance(models, str):
        models = (models,)
    models = tuple(_check_model(m) for m in models)
    data = _Data(x)
    results = {}
    for m in models:
        if data.n_nonzero == 0 and not _SPECS[m][1]:
            continue
        f = _fit_prepared(data, m)
        results[m] = (f, _gof_prepared(data, f, sample, seed))
    return results


def best_model(results: dict) -> str:
    """The id with the smallest AIC in a :func:`fit_all` result (first one on ties)."""
    scored = [(g["aic"], i, m) for i, (m, (_, g)) in enumerate(results.items())
              if g.get("aic") is not None]
    if not scored:
        raise InputError("best_model: no result has an AIC (empty, all-zero data or only "
                         "'empirical')")
    return min(scored)[2]


# ----------------------------------------------------------------------------------------
# Scale rules for the quantizer
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
    mags, edges = _grid_arrays(grid)
    beta = _check_positive(beta, "beta")
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
    mags, edges = _grid_arrays(grid)
    beta = _check_positive(beta, "beta")
    if not BETA_BOUNDS[0] / 2 <= beta <= 50.0:
        raise InputError(f"beta must lie in [{BETA_BOUNDS[0] / 2}, 50], got {beta!r}")
    return _mse_unit_scale(getattr(grid, "id", None), mags.tobytes(), edges.tobytes(),
                           round(beta, 4))


def co3_poly_scale(beta: float, alpha: float) -> float:
    """The CO3 authors' fp4 rule s = max(p(beta), 0.0009) / alpha,
    p(b) = 0.46 - 2.85 b + 5.37 b^2 - 2.85 b^3 + 0.52 b^4 (fitted for beta in about [0.6, 2])."""
    b = _check_positive(beta, "beta")
    alpha = _check_positive(alpha, "alpha")
    p = 0.46 - 2.85 * b + 5.37 * b ** 2 - 2.85 * b ** 3 + 0.52 * b ** 4
    return max(p, 0.0009) / alpha
