"""``gennorm2-zi``: a codebook model fitted to the quantized cells, for when GenNorm is not enough.

Real ReLU-network gradients are a *scale mixture*: rows with small back-propagated errors put
many more entries at tiny magnitudes than one GenNorm predicts (measured on the bundled MNIST
dump: 10x more mass 2^-20 below the maximum), and their signs are slightly unbalanced. A
model Huffman code from a single zero-inflated GenNorm then costs 0.03-0.08 bits/entry more
than a code from the exact counts on fp8 grids. This model adds exactly what is missing:

    P(0-cell)       = p0 + (1 - p0) * m[0-cell]
    P(+k), P(-k)    = (1 - p0) * m[k] * (2 pi), (1 - p0) * m[k] * 2 (1 - pi)
    m               = w * GenNorm(beta1, scale1) + (1 - w) * GenNorm(beta2, scale2)  (cell masses)

``p0`` is the exact-zero fraction (as in ``gennorm-zi``), ``pi`` the fraction of positive
symbols among the non-zero ones (its maximum-likelihood value), and the four GenNorm numbers
and ``w`` minimise the cross-entropy of the observed symbols, i.e. the ideal code length:
a discrete maximum-likelihood fit on the grid's cells (Nelder-Mead from the continuous
``gennorm-zi`` fit). Seven numbers of metadata; the codebook itself is still integers.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from co3cli.errors import InputError

MODEL_ID = "gennorm2-zi"
PARAMS = ("pi", "w", "beta1", "scale1", "beta2", "scale2")
_BETA = (0.05, 20.0)


@dataclass(frozen=True)
class Gennorm2Fit:
    params: dict
    p0: float = 0.0
    model: str = MODEL_ID

    def __post_init__(self):
        if self.model != MODEL_ID or set(self.params) != set(PARAMS):
            raise InputError(f"{MODEL_ID} fit needs params {PARAMS}, got {sorted(self.params)}")
        v = self.params
        if not (0 <= self.p0 <= 1 and 0 <= v["pi"] <= 1 and 0 <= v["w"] <= 1
                and all(np.isfinite(v[k]) and v[k] > 0 for k in ("beta1", "scale1", "beta2", "scale2"))):
            raise InputError(f"{MODEL_ID}: parameters out of range: p0={self.p0}, {v}")

    def pmf(self, grid, scale=1.0) -> np.ndarray:
        """Probability of every symbol of ``grid`` (all > 0) for values scaled by ``scale``."""
        from co3cli.models import gennorm_cells, pmf_from_counts

        edges = np.asarray(grid.edges, dtype=np.float64) / float(scale)
        v = self.params
        m = v["w"] * gennorm_cells(edges, v["beta1"], v["scale1"]) + \
            (1 - v["w"]) * gennorm_cells(edges, v["beta2"], v["scale2"])
        K = edges.size
        out = np.empty(2 * K + 1)
        out[K] = self.p0 + (1 - self.p0) * m[0]
        out[K + 1:] = (1 - self.p0) * m[1:] * v["pi"]
        out[:K] = ((1 - self.p0) * m[1:] * (1 - v["pi"]))[::-1]
        return pmf_from_counts(out)  # floors every symbol above zero, renormalises

    def to_dict(self) -> dict:
        return {"model": self.model, "p0": self.p0, "params": dict(self.params)}

    @classmethod
    def from_dict(cls, d: dict) -> "Gennorm2Fit":
        try:
            return cls(params={k: float(d["params"][k]) for k in PARAMS}, p0=float(d["p0"]),
                       model=d["model"])
        except (KeyError, TypeError, ValueError) as e:
            raise InputError(f"{MODEL_ID} metadata is malformed ({e})") from None


def fit_cells(sample: np.ndarray, counts: np.ndarray, grid) -> Gennorm2Fit:
    """Fit to the symbol ``counts`` of the scaled values whose subsample is ``sample``."""
    from scipy.optimize import minimize

    from co3cli import detmath, models

    counts = np.asarray(counts, dtype=np.float64)
    K = grid.K
    n = counts.sum()
    pos, neg = counts[K + 1:].sum(), counts[:K].sum()
    pi = float(np.clip(pos / (pos + neg), 1e-6, 1 - 1e-6)) if pos + neg > 0 else 0.5
    base = models.fit(sample, "gennorm-zi")
    p0 = float(base.p0)
    if base.n_nonzero == 0 or pos + neg == 0:
        b, a = base.params["beta"], base.params["scale"]
        return Gennorm2Fit({"pi": pi, "w": 1.0, "beta1": b, "scale1": a, "beta2": b, "scale2": a}, p0)
    b0, a0 = base.params["beta"], base.params["scale"]
    edges = np.asarray(grid.edges, dtype=np.float64)
    sym_mass = counts[K:].copy()
    sym_mass[1:] += counts[:K][::-1]  # counts per magnitude cell (sign handled by pi)

    def unpack(th):  # co3cli.detmath's exp and log: the same fit on every CPU
        e = detmath.exp(np.asarray(th, dtype=np.float64) * np.array([-1.0, 1, 1, 1, 1]))
        return 1 / (1 + e[0]), e[1], e[2], e[3], e[4]

    def cost(th):
        w, b1, a1, b2, a2 = unpack(th)
        if not (_BETA[0] < b1 < _BETA[1] and _BETA[0] < b2 < _BETA[1]):
            return 1e300
        with np.errstate(all="ignore"):
            m = w * models.gennorm_cells(edges, b1, a1) + (1 - w) * models.gennorm_cells(edges, b2, a2)
            p = np.maximum(np.nan_to_num((1 - p0) * m, nan=0.0), 1e-300)
            p[0] += p0
            return float(-(sym_mass * detmath.log(p)).sum() / n)

    lb, la = detmath.log(b0), detmath.log(a0)
    starts = ([0.0, lb, la, lb, la - 3.0], [0.0, detmath.log(1.5 * b0), la + 0.5, lb, la - 2.0])
    best = None
    for th0 in starts:
        r = minimize(cost, np.asarray(th0), method="Nelder-Mead",
                     options={"xatol": 1e-5, "fatol": 1e-9, "maxiter": 3000, "maxfev": 3000})
        if best is None or r.fun < best.fun:
            best = r
    w, b1, a1, b2, a2 = unpack(best.x)
    if not best.fun < 1e300:
        w, b1, a1, b2, a2 = 1.0, b0, a0, b0, a0
    return Gennorm2Fit({"pi": pi, "w": float(w), "beta1": float(b1), "scale1": float(a1),
                        "beta2": float(b2), "scale2": float(a2)}, p0)
