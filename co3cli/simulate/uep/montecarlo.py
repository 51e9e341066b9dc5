"""Monte Carlo with the real encoder and decoder: what the exact analysis predicts, measured.

::

    partition(A, B) once --> for each point (an N: wait for the first N results; or a time t:
    deadline t) and each of ``trials`` runs: run_once (fresh generator, latencies, decoding)
      --> frequency each class was decoded, mean fraction of its blocks recovered,
          relative error ||C - C_hat||^2 / ||C||^2 (mean and standard error)

Compare ``MonteCarlo.decoded`` with ``decode_probability`` (by N) or
``decode_probability_vs_time`` (by time), and ``error_mean`` with ``error_vs_time`` fed
``MonteCarlo.energies``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from co3cli.checks import check_int
from co3cli.errors import InputError
from co3cli.simulate.uep.analysis import check_N
from co3cli.simulate.uep.codes import Code
from co3cli.simulate.uep.latency import Latency, as_latency, check_deadline
from co3cli.simulate.uep.matmul import as_rng, check_class_sizes, rel_error, run_once
from co3cli.simulate.uep.matmul import partition as _partition

__all__ = ["MonteCarlo", "monte_carlo"]


@dataclass
class MonteCarlo:
    """Empirical results per point (an N or a time): decoded[i, c] = frequency class c was
    decoded, fraction[i, c] = mean fraction of its blocks recovered, error_mean / error_sem =
    mean relative error ||C - C_hat||^2/||C||^2 and its standard error; energies = the
    partition's block energies (class order) to feed ``error_vs_time``."""

    points: np.ndarray
    by: str  # "N" or "time"
    trials: int
    decoded: np.ndarray
    fraction: np.ndarray
    error_mean: np.ndarray
    error_sem: np.ndarray
    energies: np.ndarray


def monte_carlo(code: Code, N: Any = None, times: Any = None, *, trials: int,
                rng: np.random.Generator | int | None = None, A: Any = None, B: Any = None,
                mode: str = "rxc", blocks: Any = None, importance: str = "frobenius",
                partition: str = "sorted", sort_by: str = "mean-abs",
                latency: Latency | float | None = None) -> MonteCarlo:
    """Run the real encoder/decoder ``trials`` times at each N (wait for the first N) or each
    time (deadline t). Without A, B: small Gaussian matrices, rxc with blocks (K, 1).
    ``partition`` / ``sort_by``: how A @ B is split (``matmul.partition``)."""
    if (N is None) == (times is None):
        raise InputError("give exactly one of N or times")
    trials = check_int("trials", trials, lo=1, lenient=True)
    g = as_rng(rng)
    lat = as_latency(latency)
    if A is None and B is None:
        A, B = g.standard_normal((code.K, 3)), g.standard_normal((3, 2))
        mode, blocks = "rxc", (code.K, 1)
    elif A is None or B is None:
        raise InputError("give both A and B, or neither")
    if mode == "cxr" and blocks is None:
        blocks = code.K
    part = _partition(A, B, mode=mode, blocks=blocks, importance=importance,
                      partition=partition, sort_by=sort_by)
    check_class_sizes(code, part.K)
    C = part.assemble(part.products)
    if N is not None:
        pts, _ = check_N(code, N)
        pts = pts.astype(np.float64)
    else:
        pts = np.atleast_1d(np.asarray(times, dtype=np.float64))
        for t in pts:
            check_deadline(float(t), "times")
    L = code.n_classes
    dec, frac = np.zeros((len(pts), L)), np.zeros((len(pts), L))
    err_m, err_s = np.zeros(len(pts)), np.zeros(len(pts))
    starts = np.r_[0, np.cumsum(code.class_sizes)[:-1]]
    for i, x in enumerate(pts):
        errs = np.empty(trials)
        for t in range(trials):
            if N is not None:
                X, info = run_once(part, code, lat, math.inf, int(x), g)
            else:
                X, info = run_once(part, code, lat, float(x), None, g)
            dec[i] += info["recovered"]
            frac[i] += np.add.reduceat(info["block_recovered"].astype(np.float64), starts)
            errs[t] = rel_error(C, part.assemble(X))
        err_m[i] = errs.mean()
        err_s[i] = errs.std(ddof=1) / math.sqrt(trials) if trials > 1 else math.inf
    return MonteCarlo(pts, "N" if N is not None else "time", trials, dec / trials,
                      frac / (trials * np.asarray(code.class_sizes)), err_m, err_s, part.energies())
