"""Goodness of fit (log-likelihood, AIC, KS, W2, tail ratios) and model comparison."""

from __future__ import annotations

import math

import numpy as np

from co3cli.errors import InputError

from co3cli.models.families import _SPECS, FIT_ALL_MODELS, _check_model
from co3cli.models.mle import Fit, _Data, _fit_prepared

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
