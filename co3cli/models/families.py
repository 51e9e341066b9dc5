"""Model families (continuous, symmetric about 0) and the registry of model ids.

Each family works on t >= 0 through ``pq(t)`` (P(|Z| <= t), P(|Z| > t), both computed directly for
tail accuracy), ``quantile(p, q)`` and ``logpdf(x)``; :func:`abs_cell_masses` turns one into the
probabilities of a grid's cells. See :mod:`co3cli.models` for the models and the fitting method.
"""

from __future__ import annotations

import math

import numpy as np

from co3cli.errors import InputError
from co3cli.registry import Registry

BETA_BOUNDS = (0.05, 20.0)  # search interval for GenNorm beta and Weibull c
PMF_FLOOR = 1e-300  # smallest probability given to any symbol (pmf sums to 1, so also relative)
DEFAULT_MODEL = "gennorm-zi"

_MODEL_DOCS = {
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
MODELS: Registry = Registry("model")
"""The continuous model families (and ``empirical``), default first; entries are their ids."""
for _id, _doc in _MODEL_DOCS.items():
    MODELS.register(_id, id=_id, doc=_doc)
FIT_ALL_MODELS = ("gennorm-zi", "gennorm", "normal", "laplace", "normal-zi", "laplace-zi",
                  "dweibull")

_SUBSAMPLE = 1 << 16  # entries of the deterministic subsample that warms up the Newton search
_NEWTON_TOL = 1e-6  # stop when the Newton step in log(beta) is below this
_LOG2 = math.log(2.0)


def get_model_ids() -> tuple[str, ...]:
    """The registered model ids, default first."""
    return MODELS.ids()


def _check_model(model) -> str:
    if not isinstance(model, str) or model not in MODELS:
        raise InputError(f"unknown model {model!r}; allowed: {MODELS.allowed()}")
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
    def pq(t, p):  # (co3cli.detmath: the same bits on every CPU; numba not at import)
        from co3cli import detmath

        a = 1.0 / p["beta"]
        w = detmath.pow(np.asarray(t, dtype=np.float64) / p["scale"], p["beta"])
        return detmath.gammainc_pq(a, w)

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
        from co3cli import detmath

        w = np.asarray(t, dtype=np.float64) / p["b"]
        return -detmath.expm1(-w), detmath.exp(-w)

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
        from co3cli import detmath

        w = detmath.pow(np.asarray(t, dtype=np.float64) / p["scale"], p["c"])
        return -detmath.expm1(-w), detmath.exp(-w)

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


def grid_arrays(grid) -> tuple[np.ndarray, np.ndarray]:
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


def check_positive(v, name: str) -> float:
    try:
        f = float(v)
    except (TypeError, ValueError):
        raise InputError(f"{name} must be a finite number > 0, got {v!r}") from None
    if not math.isfinite(f) or f <= 0:
        raise InputError(f"{name} must be a finite number > 0, got {v!r}")
    return f

