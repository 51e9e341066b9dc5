"""Worker completion times and the server's stopping time.

Every worker computes one block-product-sized task and finishes at an i.i.d. time
``shift + Exp(rate)`` (``Latency``); the server stops at a deadline (``check_deadline``: a time
> 0, ``inf`` = wait for all) or after the first ``wait_for`` results.

Work normalisation. A block product is 1/K of the full product's multiply-adds in both
partitions (rxc: (m/M) k (p/N); cxr: m (k/P) p), so schemes on the same K need no scaling.
Comparing different block counts, a worker's time is scaled by its work: a task of ``w``
reference tasks takes ``w`` times as long, ``w * (shift + Exp(rate)) = w shift + Exp(rate / w)``
(``Latency.scaled(w)``; e.g. 2x2 blocks against a 3x3 reference: ``w = 9 / 4``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from co3cli.checks import check_int, check_real
from co3cli.errors import InputError

__all__ = ["Latency", "as_latency", "check_deadline"]


@dataclass(frozen=True)
class Latency:
    """i.i.d. worker completion times ``shift + Exp(rate)`` (``shift = 0``: exponential)."""

    rate: float = 1.0
    shift: float = 0.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "rate", check_real("rate", self.rate, 0.0, lo_open=True,
                                                    who="latency: "))
        object.__setattr__(self, "shift", check_real("shift", self.shift, 0.0, who="latency: "))

    def cdf(self, t: Any) -> np.ndarray:
        """P(a worker has finished by time t), elementwise."""
        t = np.asarray(t, dtype=np.float64)
        return np.where(t > self.shift, -np.expm1(-self.rate * np.maximum(t - self.shift, 0.0)), 0.0)

    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        return self.shift + rng.exponential(1.0 / self.rate, size=n)

    def scaled(self, work: float) -> Latency:
        """The latency of a task ``work`` times as large: ``work * (shift + Exp(rate))``."""
        work = check_real("work", work, 0.0, lo_open=True)
        return Latency(rate=self.rate / work, shift=self.shift * work)

    @staticmethod
    def for_blocks(K: int, reference_K: int, rate: float = 1.0, shift: float = 0.0) -> Latency:
        """Per-worker latency with K blocks when ``Latency(rate, shift)`` holds for tasks of
        1/reference_K of the product (a worker's work is reference_K / K such tasks)."""
        return Latency(rate=rate, shift=shift).scaled(
            check_int("reference_K", reference_K, lo=1, lenient=True)
            / check_int("K", K, lo=1, lenient=True))


def as_latency(latency: Latency | float | None) -> Latency:
    """``latency`` as a Latency: None -> ``Latency()``, a number -> ``Latency(rate=number)``."""
    if latency is None:
        return Latency()
    if isinstance(latency, Latency):
        return latency
    return Latency(rate=latency)


def check_deadline(deadline: Any, name: str = "deadline") -> float:
    """A stopping time as a float > 0 (``inf``: wait for every worker); InputError otherwise."""
    T = math.nan
    if not isinstance(deadline, bool):
        try:
            T = float(deadline)
        except (TypeError, ValueError):
            pass
    if not T > 0:  # also rejects NaN
        raise InputError(f"{name}={deadline!r} must be a number > 0 (or inf)")
    return T
