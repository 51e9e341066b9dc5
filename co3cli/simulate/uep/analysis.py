"""Exact analysis (no Monte Carlo): decoding probabilities, recovered fractions, error vs time.

::

    code.analysis(N)  -->  P(class c decoded | N received)         decode_probability
                           E[fraction of class c recovered | N]    recovered_fraction
    latency F(t)      -->  P(N arrived by t) = Binomial(n, F(t))   arrival_pmf
    combined          -->  P(class c decoded by t)                 decode_probability_vs_time
                           E[sum_{lost b} energy_b] / sum energy   error_vs_time

Because every worker's completion time is i.i.d. and independent of the window it holds, the
N results that arrived are a uniformly random subset of the workers, which is what
``code.analysis`` assumes. "Class c decoded" means every block of class c is recovered; for the
random linear codes and mds a class is recovered as a whole or not at all, for uncoded and
repetition single blocks are, so ``recovered_fraction`` is the figure that enters the error.
The error model is exact for rxc (disjoint blocks); for cxr it is exact when the summands
``A_p B_p`` are uncorrelated (e.g. zero-mean entries). ``block_energy`` and
``class_block_energies`` give the expected block energies of matrices with independent entries.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from co3cli.checks import check_int_list
from co3cli.errors import InputError
from co3cli.simulate.uep.codes import Code
from co3cli.simulate.uep.latency import Latency, as_latency

__all__ = ["decode_probability", "recovered_fraction", "arrival_pmf",
           "decode_probability_vs_time", "error_vs_time", "block_energy",
           "class_block_energies", "check_N"]


def check_N(code: Code, N: Any) -> tuple[np.ndarray, bool]:
    """Numbers of results received as int64 (1-D), and whether ``N`` was a scalar."""
    arr = np.asarray(N)
    scalar = arr.ndim == 0
    arr = np.atleast_1d(arr)
    if arr.size and (np.any(arr < 0) or np.any(arr > code.n_workers) or np.any(arr != np.round(arr))):
        raise InputError(f"N must be integers in 0..{code.n_workers} (the number of workers), got {N!r}")
    return arr.astype(np.int64), scalar


def decode_probability(code: Code, N: Any) -> np.ndarray:
    """P(class c decoded | N results received), exact: (n_classes,) for scalar N, else
    (len(N), n_classes). N = 0..n; the N results are a uniformly random subset of workers."""
    arr, scalar = check_N(code, N)
    p = code.analysis(arr)[0]
    return p[0] if scalar else p


def recovered_fraction(code: Code, N: Any) -> np.ndarray:
    """E[fraction of class c's blocks recovered | N received], exact; shapes as
    ``decode_probability`` (equal to it for the all-or-nothing codes)."""
    arr, scalar = check_N(code, N)
    f = code.analysis(arr)[1]
    return f[0] if scalar else f


def arrival_pmf(code: Code, times: Any, latency: Latency | float | None = None) -> np.ndarray:
    """P(N results arrived by t) = Binomial(n, F(t)) pmf, shape (len(times), n + 1)."""
    from scipy import stats

    lat = as_latency(latency)
    t = np.atleast_1d(np.asarray(times, dtype=np.float64))
    n = code.n_workers
    return stats.binom.pmf(np.arange(n + 1)[None, :], n, lat.cdf(t)[:, None])


def decode_probability_vs_time(code: Code, times: Any, latency: Latency | float | None = None) -> np.ndarray:
    """P(class c decoded by time t), shape (len(times), n_classes)."""
    N = np.arange(code.n_workers + 1)
    return arrival_pmf(code, times, latency) @ code.analysis(N)[0]


def _block_energies(code: Code, block_energies: Any) -> np.ndarray:
    e = np.asarray(block_energies, dtype=np.float64).ravel()
    if len(e) == code.n_classes and len(e) != code.K:
        e = np.repeat(e, code.class_sizes)
    if len(e) != code.K:
        raise InputError(f"block_energies: {len(e)} values, expected K={code.K} (one per block, "
                         f"class order) or {code.n_classes} (one per class)")
    if np.any(~np.isfinite(e)) or np.any(e < 0) or e.sum() <= 0:
        raise InputError("block_energies must be finite, >= 0 and not all zero")
    return e


def error_vs_time(code: Code, block_energies: Any, times: Any,
                  latency: Latency | float | None = None) -> np.ndarray:
    """Expected normalised error E[sum_{lost b} energy_b] / sum_b energy_b at each time t.

    ``block_energies``: one per block in class order (K,), or one per-block energy per class
    (n_classes,). Combines P(N arrived by t) with the per-N expected loss."""
    e = _block_energies(code, block_energies)
    E_c = np.add.reduceat(e, np.r_[0, np.cumsum(code.class_sizes)[:-1]])
    frac = code.analysis(np.arange(code.n_workers + 1))[1]  # (n+1, L)
    loss = (1.0 - frac) @ E_c / E_c.sum()  # exactly 1 when nothing is recovered
    return arrival_pmf(code, times, latency) @ loss


def block_energy(s: float, m: float, mu_a: float, var_a: float, mu_b: float, var_b: float) -> float:
    """E||A_i B_j||_F^2 for an s x s block, inner dimension m, independent entries:
    s^2 m (var_a + mu_a^2)(var_b + mu_b^2) + s^2 m (m - 1) mu_a^2 mu_b^2."""
    return float(s * s * m * (var_a + mu_a ** 2) * (var_b + mu_b ** 2)
                 + s * s * m * (m - 1) * mu_a ** 2 * mu_b ** 2)


def class_block_energies(class_sizes: Sequence[int], s: float, m: float, mu_a: Any, var_a: Any,
                         mu_b: Any, var_b: Any) -> np.ndarray:
    """Per-block energies (K,), class order, when the blocks of class c have entries with mean
    and variance mu_a[c], var_a[c] (A-part) and mu_b[c], var_b[c] (B-part); scalars broadcast."""
    ks = check_int_list("class_sizes", class_sizes, lenient=True)
    L = len(ks)
    cols = [np.broadcast_to(np.asarray(v, dtype=np.float64), (L,)) for v in (mu_a, var_a, mu_b, var_b)]
    per_class = [block_energy(s, m, *(c[i] for c in cols)) for i in range(L)]
    return np.repeat(per_class, ks)
