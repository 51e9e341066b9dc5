"""UEP-coded matrix multiplication against stragglers: encode, compute, decode, and the exact analysis.

A server farms ``C = A @ B`` out to ``n`` workers; some straggle. The block products are
encoded with unequal error protection (blocks with larger norms get more protection), the
server stops at a deadline (or after the first ``n_wait`` results) and decodes an approximate
product from what arrived. Everything here is really computed (coded products, decoding,
``C_hat``); the exact analysis (``decode_probability``, ``error_vs_time``) predicts what the
Monte Carlo (``monte_carlo``) measures.

Data flow (``coded_matmul``)::

    A (m x k), B (k x p)          torch tensors are converted to numpy (float64)
      |-- partition(mode, blocks) --> K block pairs (A_b, B_b), zero-padded to equal size
      |     rxc: A in M row blocks, B in N column blocks, C's blocks A_i B_j, K = M N
      |     cxr: A in P column blocks, B in P row blocks, C = sum_p A_p B_p,  K = P
      |-- importance (frobenius | mean-abs) --> blocks sorted by score, descending:
      |     class 0 = the first k_0 blocks (most important), class 1 the next k_1, ...
      |-- code.generator(rng) --> G (n x K) coefficients, window of each worker
      |-- worker w computes Y_w = sum_b G[w, b] (A_b B_b)        (one block-product task)
      |-- latency: T_w i.i.d. shift + Exp(rate); arrived = {w : T_w <= deadline}
      |     or the first wait_for workers
      |-- code.decode(G[arrived], window[arrived], Y[arrived]) --> recovered blocks,
      |     the others zero-filled
      `-- assemble C_hat (rxc: place the blocks; cxr: sum them), crop to m x p

COST MODEL. Every worker computes one block-product-sized task and has an i.i.d. completion
time (exponential with rate ``rate``, optionally shifted by ``shift``). The coded product of
a window is computed in the simulation as ``sum_b alpha_b (A_b B_b)`` (numerically what an
input-encoded scheme, ``(sum alpha A) (sum beta B)`` per worker, would return for a linear
code over the block products). So which workers arrive is independent of which windows they
hold, the arrived set is a uniformly random subset of its size, and the exact analysis
applies. The compute budget differs across schemes only through the number of workers ``n``
(e.g. 9 uncoded, 18 repetition, 15 UEP workers for K = 9 blocks).

Work normalisation. A block product is 1/K of the full product's multiply-adds in both
partitions (rxc: (m/M) k (p/N); cxr: m (k/P) p), so schemes on the same K need no scaling.
Comparing different block counts, a worker's time is scaled by its work: a task of ``w``
reference tasks takes ``w`` times as long, ``w * (shift + Exp(rate)) = w shift + Exp(rate / w)``
(``Latency.scaled(w)``; e.g. 2x2 blocks against a 3x3 reference: ``w = 9 / 4``).

Codes (registry ``CODES``, ``get_code(id, **params)``; all take ``class_sizes``)::

    uncoded     n = K; worker b computes block b
    repetition  n = r K; each block r times; a block is lost only if all its copies are late
    mds         n workers, Gaussian n x K generator; any K results recover everything
                (all-or-nothing; an n x K Gaussian matrix is MDS with probability 1)
    now-uep     random linear code: worker picks window l w.p. windows[l] and computes a
                Gaussian combination of the blocks of class l only (non-overlapping windows)
    ew-uep      same, window l = classes 0..l (expanding windows)
    eep         same random linear code with one window over all blocks (equal protection;
                same decoding probability as ``mds``, kept as the UEP family's baseline)

"Class c decoded" means every block of class c is recovered. For the random linear codes and
mds a class is recovered as a whole or not at all; for uncoded/repetition single blocks are
recovered, so ``recovered_fraction`` (expected fraction of a class's blocks recovered) is the
figure that enters the error.

Decoding (rank test): a coefficient matrix ``G_s`` (received rows x unknown blocks) is taken as
full column rank when it has at least as many rows as columns and
``sigma_min / sigma_max > RANK_TOL`` (1e-9); it is then solved by least squares. For Gaussian
coefficients this coincides with the generic (structural) rank with probability 1.
NOW: class l is solved from the rows of window l. EW: the largest l whose rows of windows
<= l have full column rank over the blocks of classes <= l; classes 0..l are solved.
EEP/mds: all blocks from all rows. Generic-rank condition for EW (Hall's theorem on the
nested supports): with n_i received rows of window i, classes <= l are decodable iff
``sum_{i=j..l} n_i >= sum_{i=j..l} k_i`` for every j <= l; class c is decodable iff some
l >= c satisfies it (``RandomLinearCode.decodable``).

Exact analysis (no Monte Carlo): ``decode_probability(code, N)``, ``recovered_fraction(code,
N)`` given N received results; ``arrival_pmf``, ``decode_probability_vs_time`` and
``error_vs_time`` combine them with P(N arrived by t) = Binomial(n, F(t)). The error model is
``E[sum_{lost blocks} energy_b] / sum_b energy_b``; exact for rxc (disjoint blocks), for cxr
exact when the summands ``A_p B_p`` are uncorrelated (e.g. zero-mean entries).
"""

from __future__ import annotations

import abc
import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, ClassVar, Sequence

import numpy as np
from scipy import special, stats

from co3cli.errors import InputError

__all__ = [
    "CODES", "RANK_TOL", "MODES", "IMPORTANCE", "Code", "RandomLinearCode", "Latency",
    "Partition", "MonteCarlo", "register", "get_code", "partition", "coded_matmul",
    "decode_probability", "recovered_fraction", "arrival_pmf", "decode_probability_vs_time",
    "error_vs_time", "block_energy", "class_block_energies", "even_class_sizes", "monte_carlo",
]

RANK_TOL = 1e-9
MODES = ("rxc", "cxr")
IMPORTANCE = ("frobenius", "mean-abs")
MAX_COMPOSITIONS = 5_000_000  # EW analysis enumerates window-count vectors up to this many

CODES: dict[str, type[Code]] = {}


# ----------------------------------------------------------------------------- helpers


def _np(x: Any, name: str) -> np.ndarray:
    """numpy float64 view of an array or torch tensor."""
    if hasattr(x, "detach"):
        x = np.asarray(x.detach().cpu())
    a = np.asarray(x, dtype=np.float64)
    if a.ndim != 2:
        raise InputError(f"{name} must be a 2-D matrix, got shape {a.shape}")
    return a


def _rng(rng: np.random.Generator | int | None) -> np.random.Generator:
    return rng if isinstance(rng, np.random.Generator) else np.random.default_rng(rng)


def _int_list(v: Any, name: str) -> tuple[int, ...]:
    if isinstance(v, str):
        v = [s for s in v.replace(" ", "").split(",") if s]
    if np.isscalar(v):
        v = [v]
    try:
        vals = [float(x) for x in v]
    except (TypeError, ValueError):
        raise InputError(f"{name} must be a list of positive integers, got {v!r}") from None
    if not vals or any(not x.is_integer() or x < 1 for x in vals):
        raise InputError(f"{name} must be a non-empty list of positive integers, got {v!r}")
    return tuple(int(x) for x in vals)


def _pos_int(v: Any, name: str, low: int = 1) -> int:
    try:
        f = float(v)
    except (TypeError, ValueError):
        raise InputError(f"{name} must be an integer >= {low}, got {v!r}") from None
    if not f.is_integer() or f < low:
        raise InputError(f"{name} must be an integer >= {low}, got {v!r}")
    return int(f)


def even_class_sizes(K: int, n_classes: int) -> tuple[int, ...]:
    """Class sizes splitting K blocks into ``n_classes`` near-equal classes (larger first)."""
    K, L = _pos_int(K, "K"), _pos_int(n_classes, "n_classes")
    if L > K:
        raise InputError(f"n_classes: {L} classes for {K} blocks (at most one class per block)")
    return tuple(K // L + (1 if c < K % L else 0) for c in range(L))


def _full_col_rank(G: np.ndarray) -> bool:
    """The rank test: rows >= cols and sigma_min / sigma_max > RANK_TOL."""
    r, c = G.shape
    if c == 0:
        return True
    if r < c:
        return False
    s = np.linalg.svd(G, compute_uv=False)
    return bool(s[0] > 0 and s[-1] > RANK_TOL * s[0])


# ----------------------------------------------------------------------------- latency


@dataclass(frozen=True)
class Latency:
    """i.i.d. worker completion times ``shift + Exp(rate)`` (``shift = 0``: exponential)."""

    rate: float = 1.0
    shift: float = 0.0

    def __post_init__(self) -> None:
        if not (isinstance(self.rate, (int, float, np.floating, np.integer))
                and math.isfinite(self.rate) and self.rate > 0):
            raise InputError(f"latency rate (lambda) must be a finite number > 0, got {self.rate!r}")
        if not (isinstance(self.shift, (int, float, np.floating, np.integer))
                and math.isfinite(self.shift) and self.shift >= 0):
            raise InputError(f"latency shift must be a finite number >= 0, got {self.shift!r}")

    def cdf(self, t: Any) -> np.ndarray:
        """P(a worker has finished by time t), elementwise."""
        t = np.asarray(t, dtype=np.float64)
        return np.where(t > self.shift, -np.expm1(-self.rate * np.maximum(t - self.shift, 0.0)), 0.0)

    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        return self.shift + rng.exponential(1.0 / self.rate, size=n)

    def scaled(self, work: float) -> Latency:
        """The latency of a task ``work`` times as large: ``work * (shift + Exp(rate))``."""
        if not (isinstance(work, (int, float, np.floating, np.integer)) and math.isfinite(work)
                and work > 0):
            raise InputError(f"work must be a finite number > 0, got {work!r}")
        return Latency(rate=self.rate / work, shift=self.shift * work)

    @staticmethod
    def for_blocks(K: int, reference_K: int, rate: float = 1.0, shift: float = 0.0) -> Latency:
        """Per-worker latency with K blocks when ``Latency(rate, shift)`` holds for tasks of
        1/reference_K of the product (a worker's work is reference_K / K such tasks)."""
        return Latency(rate=rate, shift=shift).scaled(_pos_int(reference_K, "reference_K")
                                                      / _pos_int(K, "K"))


def _latency(latency: Latency | float | None) -> Latency:
    if latency is None:
        return Latency()
    if isinstance(latency, Latency):
        return latency
    return Latency(rate=latency)


def _deadline(deadline: Any) -> float:
    try:
        T = float(deadline)
    except (TypeError, ValueError):
        raise InputError(f"deadline must be a number > 0 (or inf), got {deadline!r}") from None
    if not T > 0:  # also rejects NaN
        raise InputError(f"deadline must be > 0 (or inf), got {deadline!r}")
    return T


# ----------------------------------------------------------------------------- codes


def register(cls: type[Code]) -> type[Code]:
    if cls.id in CODES:
        raise InputError(f"code {cls.id!r} is already registered")
    CODES[cls.id] = cls
    return cls


def get_code(id: str, **params: Any) -> Code:
    """A configured code; unknown ids and bad parameters raise InputError."""
    if id not in CODES:
        raise InputError(f"unknown code {id!r}; allowed: {', '.join(sorted(CODES))}")
    return CODES[id](**params)


class Code(abc.ABC):
    """Base class. Blocks are indexed in class order: class 0's k_0 blocks first, and so on.

    Subclasses set ``id``, ``PARAMS`` (name -> default; ``class_sizes`` is always required),
    ``n_workers`` in ``check`` and implement ``generator``, ``decode`` and ``analysis``.
    """

    id: ClassVar[str] = ""
    PARAMS: ClassVar[dict[str, Any]] = {}
    n_workers: int

    def __init__(self, **params: Any):
        allowed = {"class_sizes", *self.PARAMS}
        unknown = sorted(set(params) - allowed)
        if unknown:
            raise InputError(f"code {self.id!r}: unknown parameter(s) {unknown}; "
                             f"allowed: {', '.join(sorted(allowed))}")
        if params.get("class_sizes") is None:
            raise InputError(f"code {self.id!r}: class_sizes is required (e.g. class_sizes=[3, 3, 3])")
        self.params = {**self.PARAMS, **{k: v for k, v in params.items() if v is not None}}
        self.class_sizes = _int_list(self.params["class_sizes"], "class_sizes")
        self.params["class_sizes"] = list(self.class_sizes)
        self.check()

    @property
    def K(self) -> int:
        """Number of blocks."""
        return int(sum(self.class_sizes))

    @property
    def n_classes(self) -> int:
        return len(self.class_sizes)

    @property
    def block_class(self) -> np.ndarray:
        """Class of each block (class order), shape (K,)."""
        return np.repeat(np.arange(self.n_classes), self.class_sizes)

    def config(self) -> dict[str, Any]:
        return {"id": self.id, **self.params, "workers": self.n_workers}

    @abc.abstractmethod
    def check(self) -> None:
        """Validate ``self.params`` (InputError naming the parameter) and set ``n_workers``."""

    @abc.abstractmethod
    def generator(self, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        """(G, window): G (n, K) coefficients of each worker's product, window (n,) int."""

    @abc.abstractmethod
    def decode(self, G: np.ndarray, window: np.ndarray, Y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Received rows G (N, K), their windows (N,), products Y (N, d) -> (X (K, d)
        zero-filled where not recovered, recovered (K,) bool)."""

    @abc.abstractmethod
    def analysis(self, N: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Exact (P(class decoded | N), E[fraction of class blocks recovered | N]), each
        (len(N), n_classes), for N results received (a uniformly random subset)."""

    def class_recovered(self, recovered_blocks: np.ndarray) -> np.ndarray:
        """Per class: are all its blocks recovered? (n_classes,) bool."""
        rb = np.asarray(recovered_blocks, bool)
        return np.logical_and.reduceat(rb, np.r_[0, np.cumsum(self.class_sizes)[:-1]])


def _check_workers_fixed(code: Code, n: int) -> None:
    w = code.params.get("workers")
    if w is not None and _pos_int(w, "workers") != n:
        raise InputError(f"code {code.id!r}: workers must be {n} for these parameters, got {w!r}")
    code.params.pop("workers", None)
    code.n_workers = n


@register
class Repetition(Code):
    """Each block computed by ``r`` workers (n = r K): worker w computes block w mod K."""

    id = "repetition"
    PARAMS = {"r": 2, "workers": None}

    def check(self) -> None:
        self.r = _pos_int(self.params["r"], "r (repetitions)")
        self.params["r"] = self.r
        _check_workers_fixed(self, self.r * self.K)

    def generator(self, rng):
        block = np.tile(np.arange(self.K), self.r)
        return np.eye(self.K)[block], block

    def decode(self, G, window, Y):
        X = np.zeros((self.K, Y.shape[1]))
        rec = np.zeros(self.K, bool)
        X[window] = Y / G[np.arange(len(window)), window][:, None]  # G entries are 1
        rec[window] = True
        return X, rec

    def analysis(self, N):
        n, r = self.n_workers, self.r
        p = np.zeros((len(N), self.n_classes))
        frac = np.zeros_like(p)
        for a, Nv in enumerate(N):
            Nv = int(Nv)
            den = math.comb(n, Nv)
            # P(a given set of j blocks all lost) = C(n - j r, N) / C(n, N): all their copies late
            lost_j = [math.comb(n - j * r, Nv) if n - j * r >= 0 else 0
                      for j in range(max(self.class_sizes) + 1)]
            for c, k in enumerate(self.class_sizes):
                num = sum((-1) ** j * math.comb(k, j) * lost_j[j] for j in range(k + 1))
                p[a, c] = float(Fraction(num, den))
                frac[a, c] = float(Fraction(den - lost_j[1], den))
        return p, frac


@register
class Uncoded(Repetition):
    """One block per worker, n = K (repetition with r = 1)."""

    id = "uncoded"
    PARAMS = {"workers": None}

    def check(self) -> None:
        self.r = 1
        _check_workers_fixed(self, self.K)


@register
class MDS(Code):
    """Gaussian n x K generator: any K results recover every block (w.p. 1), fewer nothing."""

    id = "mds"
    PARAMS = {"workers": None}

    def check(self) -> None:
        if self.params.get("workers") is None:
            raise InputError(f"code {self.id!r}: workers (n) is required")
        n = _pos_int(self.params["workers"], "workers")
        if n < self.K:
            raise InputError(f"code {self.id!r}: workers (n={n}) must be >= the number of blocks K={self.K}")
        self.n_workers = self.params["workers"] = n

    def generator(self, rng):
        return rng.standard_normal((self.n_workers, self.K)), np.zeros(self.n_workers, int)

    def decode(self, G, window, Y):
        X = np.zeros((self.K, Y.shape[1]))
        if _full_col_rank(G):
            return np.linalg.lstsq(G, Y, rcond=None)[0], np.ones(self.K, bool)
        return X, np.zeros(self.K, bool)

    def analysis(self, N):
        p = np.repeat((np.asarray(N) >= self.K)[:, None], self.n_classes, 1).astype(np.float64)
        return p, p.copy()


def _compositions_upto(n: int, L: int) -> np.ndarray:
    """All vectors of L non-negative integers with sum <= n, shape (C(n+L, L), L)."""
    total = math.comb(n + L, L)
    if total > MAX_COMPOSITIONS:
        raise InputError(f"exact EW analysis would enumerate {total} window splits "
                         f"(n={n}, {L} windows; limit {MAX_COMPOSITIONS}); use fewer workers or classes")
    arr = np.zeros((1, 0), np.int64)
    s = np.zeros(1, np.int64)
    for _ in range(L):
        reps = n - s + 1
        idx = np.repeat(np.arange(len(arr)), reps)
        offs = np.arange(reps.sum()) - np.repeat(np.cumsum(reps) - reps, reps)
        arr = np.column_stack([arr[idx], offs])
        s = s[idx] + offs
    return arr


class RandomLinearCode(Code):
    """Random linear code over the reals with windows (NOW / EW / EEP).

    Each of the n workers picks window l with probability ``windows[l]`` and computes a
    Gaussian combination of the block products in that window. Subclasses define the windows
    (``window_mask``) and the decoder's structure.
    """

    PARAMS = {"workers": None, "windows": None}

    def check(self) -> None:
        if self.params.get("workers") is None:
            raise InputError(f"code {self.id!r}: workers (n) is required")
        self.n_workers = self.params["workers"] = _pos_int(self.params["workers"], "workers")
        self.gamma = self._windows()
        self.params["windows"] = [float(g) for g in self.gamma]

    def _windows(self) -> np.ndarray:
        g = self.params.get("windows")
        if g is None:
            raise InputError(f"code {self.id!r}: windows (Gamma, one probability per class) is required")
        if isinstance(g, str):
            g = [s for s in g.replace(" ", "").split(",") if s]
        try:
            gam = np.asarray([float(x) for x in np.atleast_1d(g)], dtype=np.float64)
        except (TypeError, ValueError):
            raise InputError(f"windows must be a list of probabilities, got {g!r}") from None
        if len(gam) != self.n_classes:
            raise InputError(f"windows: {len(gam)} probabilities for {self.n_classes} classes "
                             f"(class_sizes={list(self.class_sizes)})")
        if not np.all(np.isfinite(gam)) or np.any(gam <= 0):
            raise InputError(f"windows: every probability must be > 0, got {gam.tolist()}")
        if abs(gam.sum() - 1.0) > 1e-9:
            raise InputError(f"windows must sum to 1 (within 1e-9), got sum {gam.sum():.12g}")
        return gam

    @property
    @abc.abstractmethod
    def window_mask(self) -> np.ndarray:
        """(n_windows, K) bool: blocks in each window."""

    def generator(self, rng):
        mask = self.window_mask
        window = rng.choice(len(self.gamma), size=self.n_workers, p=self.gamma)
        G = rng.standard_normal((self.n_workers, self.K)) * mask[window]
        return G, window

    @abc.abstractmethod
    def decodable(self, counts: Any) -> np.ndarray:
        """Generic-rank decodability of each class given received rows per window.

        counts (..., n_windows) ints -> (..., n_classes) bool."""

    def analysis(self, N):
        N = np.asarray(N, dtype=np.int64)
        nmax = int(N.max()) if len(N) else 0
        comps = _compositions_upto(nmax, len(self.gamma))
        tot = comps.sum(1)
        logp = (special.gammaln(tot + 1) - special.gammaln(comps + 1).sum(1)
                + (comps * np.log(self.gamma)).sum(1))
        dec = self.decodable(comps).astype(np.float64)
        acc = np.zeros((nmax + 1, self.n_classes))
        np.add.at(acc, tot, np.exp(logp)[:, None] * dec)
        p = np.clip(acc[N], 0.0, 1.0)
        return p, p.copy()

    def _solve(self, G, rows, cols, Y, X, rec) -> bool:
        Gs = G[np.ix_(rows, cols)]
        if not _full_col_rank(Gs):
            return False
        X[cols] = np.linalg.lstsq(Gs, Y[rows], rcond=None)[0]
        rec[cols] = True
        return True


@register
class NowUEP(RandomLinearCode):
    """Non-overlapping windows: window l = the blocks of class l."""

    id = "now-uep"

    @property
    def window_mask(self):
        return self.block_class[None, :] == np.arange(self.n_classes)[:, None]

    def decodable(self, counts):
        return np.asarray(counts) >= np.asarray(self.class_sizes)

    def analysis(self, N):  # classes are independent: Binomial(N, Gamma_l) >= k_l
        N = np.asarray(N, dtype=np.int64)
        p = stats.binom.sf(np.asarray(self.class_sizes)[None, :] - 1, N[:, None], self.gamma[None, :])
        return p, p.copy()

    def decode(self, G, window, Y):
        X, rec = np.zeros((self.K, Y.shape[1])), np.zeros(self.K, bool)
        bc = self.block_class
        for c in range(self.n_classes):
            self._solve(G, np.flatnonzero(window == c), np.flatnonzero(bc == c), Y, X, rec)
        return X, rec


@register
class EwUEP(RandomLinearCode):
    """Expanding windows: window l = the blocks of classes 0..l."""

    id = "ew-uep"

    @property
    def window_mask(self):
        return self.block_class[None, :] <= np.arange(self.n_classes)[:, None]

    def decodable(self, counts):
        counts = np.asarray(counts)
        k = np.asarray(self.class_sizes)
        L = self.n_classes
        ok = np.zeros(counts.shape[:-1] + (L,), bool)  # ok[..., l]: classes <= l decodable
        for l in range(L):
            cond = np.ones(counts.shape[:-1], bool)
            for j in range(l + 1):
                cond &= counts[..., j:l + 1].sum(-1) >= k[j:l + 1].sum()
            ok[..., l] = cond
        # class c decodable iff ok[l] for some l >= c: reverse cumulative OR
        return np.flip(np.logical_or.accumulate(np.flip(ok, -1), axis=-1), -1)

    def decode(self, G, window, Y):
        X, rec = np.zeros((self.K, Y.shape[1])), np.zeros(self.K, bool)
        bc = self.block_class
        for l in range(self.n_classes - 1, -1, -1):
            if self._solve(G, np.flatnonzero(window <= l), np.flatnonzero(bc <= l), Y, X, rec):
                break
        return X, rec


@register
class EEP(RandomLinearCode):
    """Equal protection: the random linear code with one window over all blocks."""

    id = "eep"
    PARAMS = {"workers": None}

    def _windows(self):
        return np.ones(1)

    @property
    def window_mask(self):
        return np.ones((1, self.K), bool)

    def config(self):
        cfg = super().config()
        cfg.pop("windows", None)
        return cfg

    def decodable(self, counts):
        tot = np.asarray(counts).sum(-1)
        return np.repeat((tot >= self.K)[..., None], self.n_classes, -1)

    def decode(self, G, window, Y):
        X, rec = np.zeros((self.K, Y.shape[1])), np.zeros(self.K, bool)
        self._solve(G, np.arange(len(window)), np.arange(self.K), Y, X, rec)
        return X, rec


# ----------------------------------------------------------------------------- partition


@dataclass
class Partition:
    """The blocks of one product, in class order (most important first).

    ``products`` (K, r, c): the block products A_b B_b (rxc: r x c sub-blocks of the padded C;
    cxr: full m x p summands). ``order[q]``: original index of the q-th block (rxc: i N + j;
    cxr: p). ``scores``: the importance score of each block (descending).
    """

    mode: str
    shape: tuple[int, int]
    grid: tuple[int, ...]
    products: np.ndarray
    order: np.ndarray
    scores: np.ndarray

    @property
    def K(self) -> int:
        return len(self.order)

    def energies(self) -> np.ndarray:
        """||A_b B_b||_F^2 per block, class order, shape (K,)."""
        return np.einsum("kij,kij->k", self.products, self.products)

    def assemble(self, X: np.ndarray) -> np.ndarray:
        """C_hat (m, p) from block products X (K, r, c) in class order (zeros = lost)."""
        X = np.asarray(X).reshape(self.products.shape)
        m, p = self.shape
        if self.mode == "cxr":
            return X.sum(0)[:m, :p]
        M, N = self.grid
        Xo = np.empty_like(X)
        Xo[self.order] = X
        _, r, c = X.shape
        return Xo.reshape(M, N, r, c).transpose(0, 2, 1, 3).reshape(M * r, N * c)[:m, :p]


def _pad(a: np.ndarray, rows: int, cols: int) -> np.ndarray:
    if a.shape == (rows, cols):
        return a
    out = np.zeros((rows, cols))
    out[: a.shape[0], : a.shape[1]] = a
    return out


def partition(A: Any, B: Any, *, mode: str = "rxc", blocks: Any = None,
              importance: str = "frobenius") -> Partition:
    """Split A @ B into K block products, zero-padding shapes that don't divide, and sort
    them by importance (descending, stable). ``blocks``: (M, N) for rxc, P for cxr.

    Importance: ``frobenius`` ||A-part||_F ||B-part||_F; ``mean-abs`` mean|A-part| mean|B-part|
    (means over the equal-size zero-padded parts)."""
    A, B = _np(A, "A"), _np(B, "B")
    if A.shape[1] != B.shape[0]:
        raise InputError(f"A and B shapes don't multiply: A is {A.shape[0]}x{A.shape[1]}, "
                         f"B is {B.shape[0]}x{B.shape[1]}")
    if mode not in MODES:
        raise InputError(f"mode must be one of {', '.join(MODES)}, got {mode!r}")
    if importance not in IMPORTANCE:
        raise InputError(f"importance must be one of {', '.join(IMPORTANCE)}, got {importance!r}")
    m, k = A.shape
    p = B.shape[1]

    def score(a_parts: np.ndarray, b_parts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        if importance == "frobenius":
            return (np.linalg.norm(a_parts.reshape(len(a_parts), -1), axis=1),
                    np.linalg.norm(b_parts.reshape(len(b_parts), -1), axis=1))
        return (np.abs(a_parts).reshape(len(a_parts), -1).mean(1),
                np.abs(b_parts).reshape(len(b_parts), -1).mean(1))

    if mode == "rxc":
        if blocks is None or np.isscalar(blocks) or len(blocks) != 2:
            raise InputError(f"blocks must be (M, N) for mode 'rxc', got {blocks!r}")
        M, N = _pos_int(blocks[0], "blocks M"), _pos_int(blocks[1], "blocks N")
        r, c = -(-m // M), -(-p // N)
        Ap, Bp = _pad(A, M * r, k), _pad(B, k, N * c)
        a_parts = Ap.reshape(M, r, k)
        b_parts = Bp.reshape(k, N, c).transpose(1, 0, 2)
        sa, sb = score(a_parts, b_parts)
        s = np.outer(sa, sb).ravel()
        prods = (Ap @ Bp).reshape(M, r, N, c).transpose(0, 2, 1, 3).reshape(M * N, r, c)
        grid: tuple[int, ...] = (M, N)
    else:
        if blocks is not None and not np.isscalar(blocks):
            if len(blocks) != 1:
                raise InputError(f"blocks must be an integer P for mode 'cxr', got {blocks!r}")
            blocks = blocks[0]
        P = _pos_int(blocks, "blocks P") if blocks is not None else None
        if P is None:
            raise InputError("blocks (P) is required for mode 'cxr'")
        w = -(-k // P)
        Ap, Bp = _pad(A, m, P * w), _pad(B, P * w, p)
        a_parts = Ap.reshape(m, P, w).transpose(1, 0, 2)
        b_parts = Bp.reshape(P, w, p)
        sa, sb = score(a_parts, b_parts)
        s = sa * sb
        prods = np.einsum("qmw,qwp->qmp", a_parts, b_parts)
        grid = (P,)
    order = np.argsort(-s, kind="stable")
    return Partition(mode, (m, p), grid, prods[order], order, s[order])


# ----------------------------------------------------------------------------- simulation


def _class_sizes_for(code: Code, K: int, class_sizes: Any) -> None:
    if class_sizes is not None and _int_list(class_sizes, "class_sizes") != code.class_sizes:
        raise InputError(f"class_sizes {list(_int_list(class_sizes, 'class_sizes'))} differ from "
                         f"the code's {list(code.class_sizes)}")
    if code.n_classes > K:
        raise InputError(f"class_sizes: {code.n_classes} classes for {K} blocks (more classes than blocks)")
    if code.K != K:
        raise InputError(f"class_sizes {list(code.class_sizes)} sum to {code.K}, "
                         f"but the partition has K={K} blocks")


def _run(part: Partition, code: Code, latency: Latency, deadline: float, wait_for: int | None,
         rng: np.random.Generator) -> tuple[np.ndarray, dict[str, Any]]:
    """One coded run on a prepared partition: (X (K, r, c) decoded blocks, info)."""
    n = code.n_workers
    G, window = code.generator(rng)
    t = latency.sample(n, rng)
    t_sorted = np.sort(t)
    finish = deadline
    if wait_for is not None:
        finish = min(finish, t_sorted[wait_for - 1] if wait_for > 0 else 0.0)
    finish = min(finish, t_sorted[-1])
    arrived = np.flatnonzero(t <= finish) if (wait_for is None or wait_for > 0) else np.zeros(0, int)
    if wait_for is not None and len(arrived) > wait_for:  # ties: keep the first wait_for
        arrived = np.sort(np.argsort(t, kind="stable")[:wait_for])
    P = part.products.reshape(part.K, -1)
    Y = G[arrived] @ P  # each arrived worker's coded product sum_b G[w, b] (A_b B_b)
    X, rec = code.decode(G[arrived], window[arrived], Y)
    X[~rec] = 0.0
    info = {"arrived": int(len(arrived)), "workers": n, "finish_time": float(finish),
            "recovered": code.class_recovered(rec), "block_recovered": rec,
            "block_class": code.block_class}
    return X.reshape(part.products.shape), info


def _wait_for(wait_for: Any, n: int) -> int | None:
    if wait_for is None:
        return None
    w = _pos_int(wait_for, "wait_for", low=0)
    if w > n:
        raise InputError(f"wait_for must be <= the number of workers n={n}, got {wait_for!r}")
    return w


def coded_matmul(A: Any, B: Any, code: Code, *, mode: str = "rxc", blocks: Any = None,
                 class_sizes: Any = None, importance: str = "frobenius",
                 latency: Latency | float | None = None, deadline: float | None = None,
                 wait_for: int | None = None, rng: np.random.Generator | int | None = None,
                 exact: bool = False) -> tuple[np.ndarray, dict[str, Any]]:
    """Approximate C = A @ B through ``code`` with stragglers; returns (C_hat float64, info).

    ``blocks``: (M, N) for rxc, P for cxr (default K). ``class_sizes``: optional check against
    the code's. The server stops at ``deadline`` or after ``wait_for`` results, whichever is
    first (neither: waits for all). info: ``arrived`` (results used), ``workers`` (n),
    ``finish_time``, ``recovered`` (bool per class), ``block_recovered`` (bool per block, class
    order), ``block_class``, ``order`` (original block index per class-ordered block),
    and with ``exact=True`` ``rel_error`` = ||C - C_hat||_F^2 / ||C||_F^2.
    """
    if not isinstance(code, Code):
        raise InputError(f"code must be a Code from get_code(), got {type(code).__name__}")
    if mode == "cxr" and blocks is None:
        blocks = code.K
    lat = _latency(latency)
    T = math.inf if deadline is None else _deadline(deadline)
    w = _wait_for(wait_for, code.n_workers)
    part = partition(A, B, mode=mode, blocks=blocks, importance=importance)
    _class_sizes_for(code, part.K, class_sizes)
    X, info = _run(part, code, lat, T, w, _rng(rng))
    C_hat = part.assemble(X)
    info["order"] = part.order
    if exact:
        C = part.assemble(part.products)
        info["rel_error"] = _rel_error(C, C_hat)
    return C_hat, info


def _rel_error(C: np.ndarray, C_hat: np.ndarray) -> float:
    den = float(np.vdot(C, C))
    num = float(np.vdot(C - C_hat, C - C_hat))
    return num / den if den > 0 else (0.0 if num == 0 else math.inf)


# ----------------------------------------------------------------------------- exact analysis


def _as_N(code: Code, N: Any) -> tuple[np.ndarray, bool]:
    arr = np.asarray(N)
    scalar = arr.ndim == 0
    arr = np.atleast_1d(arr)
    if arr.size and (np.any(arr < 0) or np.any(arr > code.n_workers) or np.any(arr != np.round(arr))):
        raise InputError(f"N must be integers in 0..{code.n_workers} (the number of workers), got {N!r}")
    return arr.astype(np.int64), scalar


def decode_probability(code: Code, N: Any) -> np.ndarray:
    """P(class c decoded | N results received), exact: (n_classes,) for scalar N, else
    (len(N), n_classes). N = 0..n; the N results are a uniformly random subset of workers."""
    arr, scalar = _as_N(code, N)
    p = code.analysis(arr)[0]
    return p[0] if scalar else p


def recovered_fraction(code: Code, N: Any) -> np.ndarray:
    """E[fraction of class c's blocks recovered | N received], exact; shapes as
    ``decode_probability`` (equal to it for the all-or-nothing codes)."""
    arr, scalar = _as_N(code, N)
    f = code.analysis(arr)[1]
    return f[0] if scalar else f


def arrival_pmf(code: Code, times: Any, latency: Latency | float | None = None) -> np.ndarray:
    """P(N results arrived by t) = Binomial(n, F(t)) pmf, shape (len(times), n + 1)."""
    lat = _latency(latency)
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
    loss = (1.0 - frac) @ E_c / e.sum()
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
    ks = _int_list(class_sizes, "class_sizes")
    L = len(ks)
    cols = [np.broadcast_to(np.asarray(v, dtype=np.float64), (L,)) for v in (mu_a, var_a, mu_b, var_b)]
    per_class = [block_energy(s, m, *(c[i] for c in cols)) for i in range(L)]
    return np.repeat(per_class, ks)


# ----------------------------------------------------------------------------- Monte Carlo


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
                latency: Latency | float | None = None) -> MonteCarlo:
    """Run the real encoder/decoder ``trials`` times at each N (wait for the first N) or each
    time (deadline t). Without A, B: small Gaussian matrices, rxc with blocks (K, 1)."""
    if (N is None) == (times is None):
        raise InputError("give exactly one of N or times")
    trials = _pos_int(trials, "trials")
    g = _rng(rng)
    lat = _latency(latency)
    if A is None and B is None:
        A, B = g.standard_normal((code.K, 3)), g.standard_normal((3, 2))
        mode, blocks = "rxc", (code.K, 1)
    elif A is None or B is None:
        raise InputError("give both A and B, or neither")
    if mode == "cxr" and blocks is None:
        blocks = code.K
    part = partition(A, B, mode=mode, blocks=blocks, importance=importance)
    _class_sizes_for(code, part.K, None)
    C = part.assemble(part.products)
    if N is not None:
        pts, _ = _as_N(code, N)
        pts = pts.astype(np.float64)
    else:
        pts = np.atleast_1d(np.asarray(times, dtype=np.float64))
        for t in pts:
            _deadline(t)
    L = code.n_classes
    dec, frac = np.zeros((len(pts), L)), np.zeros((len(pts), L))
    err_m, err_s = np.zeros(len(pts)), np.zeros(len(pts))
    starts = np.r_[0, np.cumsum(code.class_sizes)[:-1]]
    for i, x in enumerate(pts):
        errs = np.empty(trials)
        for t in range(trials):
            if N is not None:
                X, info = _run(part, code, lat, math.inf, int(x), g)
            else:
                X, info = _run(part, code, lat, float(x), None, g)
            dec[i] += info["recovered"]
            frac[i] += np.add.reduceat(info["block_recovered"].astype(np.float64), starts)
            errs[t] = _rel_error(C, part.assemble(X))
        err_m[i] = errs.mean()
        err_s[i] = errs.std(ddof=1) / math.sqrt(trials) if trials > 1 else math.inf
    return MonteCarlo(pts, "N" if N is not None else "time", trials, dec / trials,
                      frac / (trials * np.asarray(code.class_sizes)), err_m, err_s, part.energies())
