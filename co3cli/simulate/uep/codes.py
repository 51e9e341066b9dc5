"""The codes: which combination of block products each worker computes, and how the server decodes.

Every code takes ``class_sizes`` (blocks per class, most important class first; K = their sum)
and draws, per run, a generator ``G`` (n x K, the coefficients of each worker's coded product)
and each worker's window::

    code = CODES.build("ew-uep", class_sizes=[3, 3, 3], workers=15, windows=[0.4, 0.35, 0.25])
    G, window = code.generator(rng)            # worker w computes sum_b G[w, b] (A_b B_b)
    X, recovered = code.decode(G[arrived], window[arrived], Y[arrived])
    p_decoded, fraction = code.analysis(N)     # exact, given N results received

Codes (registry ``CODES``)::

    uncoded     n = K; worker b computes block b
    repetition  n = r K; each block r times; a block is lost only if all its copies are late
    mds         n workers, Gaussian n x K generator; any K results recover everything
                (all-or-nothing; an n x K Gaussian matrix is MDS with probability 1)
    eep         random linear code with one window over all blocks (equal protection;
                same decoding probability as ``mds``, kept as the UEP family's baseline)
    now-uep     random linear code: worker picks window l w.p. windows[l] and computes a
                Gaussian combination of the blocks of class l only (non-overlapping windows)
    ew-uep      same, window l = classes 0..l (expanding windows)

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
"""

from __future__ import annotations

import abc
import math
from fractions import Fraction
from typing import Any, ClassVar

import numpy as np

from co3cli.checks import check_int, check_int_list
from co3cli.errors import InputError
from co3cli.registry import Configurable, Registry

__all__ = ["CODES", "RANK_TOL", "MAX_COMPOSITIONS", "Code", "Repetition", "Uncoded", "MDS",
           "RandomLinearCode", "NowUEP", "EwUEP", "EEP", "register", "get_code",
           "even_class_sizes", "full_col_rank"]

RANK_TOL = 1e-9
MAX_COMPOSITIONS = 5_000_000  # EW analysis enumerates window-count vectors up to this many

CODES: Registry[type[Code]] = Registry("UEP code")
register = CODES.register


def get_code(id: str, **params: Any) -> Code:
    """A configured code (``CODES.build``); unknown ids and bad parameters raise InputError."""
    return CODES.build(id, **params)


def even_class_sizes(K: int, n_classes: int) -> tuple[int, ...]:
    """Class sizes splitting K blocks into ``n_classes`` near-equal classes (larger first)."""
    K = check_int("K", K, lo=1, lenient=True)
    L = check_int("n_classes", n_classes, lo=1, lenient=True)
    if L > K:
        raise InputError(f"n_classes: {L} classes for {K} blocks (at most one class per block)")
    return tuple(K // L + (1 if c < K % L else 0) for c in range(L))


def full_col_rank(G: np.ndarray) -> bool:
    """The rank test: rows >= cols and sigma_min / sigma_max > RANK_TOL."""
    r, c = G.shape
    if c == 0:
        return True
    if r < c:
        return False
    s = np.linalg.svd(G, compute_uv=False)
    return bool(s[0] > 0 and s[-1] > RANK_TOL * s[0])


class Code(Configurable, abc.ABC):
    """Base class. Blocks are indexed in class order: class 0's k_0 blocks first, and so on.

    Subclasses set ``id``, ``PARAMS`` (name -> default; ``class_sizes`` is always required and
    not listed), ``n_workers`` in ``check`` and implement ``generator``, ``decode`` and
    ``analysis``. ``config()`` adds the resolved number of workers.
    """

    kind: ClassVar[str] = CODES.kind
    n_workers: int

    def __init__(self, **params: Any):
        allowed = {"class_sizes", *self.PARAMS}
        unknown = sorted(set(params) - allowed)
        if unknown:
            raise InputError(f"{self._who()}unknown parameter(s) {unknown}; "
                             f"allowed: {', '.join(sorted(allowed))}")
        if params.get("class_sizes") is None:
            raise InputError(f"{self._who()}class_sizes is required (e.g. class_sizes=[3, 3, 3])")
        self.params = {**self.PARAMS, **{k: v for k, v in params.items() if v is not None}}
        self.class_sizes = check_int_list("class_sizes", self.params["class_sizes"],
                                          who=self._who(), lenient=True)
        self.params["class_sizes"] = list(self.class_sizes)
        self.check()

    def _who(self) -> str:
        """The prefix of this code's messages: ``UEP code 'mds': ``."""
        return f"{self.kind} {self.id!r}: "

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

    def _workers(self, required: bool = True) -> int | None:
        """The ``workers`` parameter as an int >= 1 (None when absent and not required)."""
        w = self.params.get("workers")
        if w is None:
            if required:
                raise InputError(f"{self._who()}workers (n) is required")
            return None
        return check_int("workers", w, lo=1, who=self._who(), lenient=True)

    def _fixed_workers(self, n: int) -> None:
        """For codes whose n follows from the blocks: ``workers``, if given, must equal n."""
        w = self._workers(required=False)
        if w is not None and w != n:
            raise InputError(f"{self._who()}workers must be {n} for these parameters, "
                             f"got {self.params['workers']!r}")
        self.params.pop("workers", None)
        self.n_workers = n


class Repetition(Code):
    """Each block computed by ``r`` workers (n = r K): worker w computes block w mod K."""

    id = "repetition"
    PARAMS = {"r": 2, "workers": None}

    def check(self) -> None:
        self.r = check_int("r", self.params["r"], lo=1, who=self._who(), lenient=True)
        self.params["r"] = self.r
        self._fixed_workers(self.r * self.K)

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


class Uncoded(Repetition):
    """One block per worker, n = K (repetition with r = 1)."""

    id = "uncoded"
    PARAMS = {"workers": None}

    def check(self) -> None:
        self.r = 1
        self._fixed_workers(self.K)


class MDS(Code):
    """Gaussian n x K generator: any K results recover every block (w.p. 1), fewer nothing."""

    id = "mds"
    PARAMS = {"workers": None}

    def check(self) -> None:
        n = self._workers()
        if n < self.K:
            raise InputError(f"{self._who()}workers (n={n}) must be >= the number of blocks "
                             f"K={self.K}")
        self.n_workers = self.params["workers"] = n

    def generator(self, rng):
        return rng.standard_normal((self.n_workers, self.K)), np.zeros(self.n_workers, int)

    def decode(self, G, window, Y):
        X = np.zeros((self.K, Y.shape[1]))
        if full_col_rank(G):
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
        self.n_workers = self.params["workers"] = self._workers()
        self.gamma = self._windows()
        self.params["windows"] = [float(g) for g in self.gamma]

    def _windows(self) -> np.ndarray:
        g = self.params.get("windows")
        if g is None:
            raise InputError(f"{self._who()}windows (Gamma, one probability per class) is required")
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
        from scipy import special

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
        if not full_col_rank(Gs):
            return False
        X[cols] = np.linalg.lstsq(Gs, Y[rows], rcond=None)[0]
        rec[cols] = True
        return True


class NowUEP(RandomLinearCode):
    """Non-overlapping windows: window l = the blocks of class l."""

    id = "now-uep"

    @property
    def window_mask(self):
        return self.block_class[None, :] == np.arange(self.n_classes)[:, None]

    def decodable(self, counts):
        return np.asarray(counts) >= np.asarray(self.class_sizes)

    def analysis(self, N):  # classes are independent: Binomial(N, Gamma_l) >= k_l
        from scipy import stats

        N = np.asarray(N, dtype=np.int64)
        p = stats.binom.sf(np.asarray(self.class_sizes)[None, :] - 1, N[:, None], self.gamma[None, :])
        return p, p.copy()

    def decode(self, G, window, Y):
        X, rec = np.zeros((self.K, Y.shape[1])), np.zeros(self.K, bool)
        bc = self.block_class
        for c in range(self.n_classes):
            self._solve(G, np.flatnonzero(window == c), np.flatnonzero(bc == c), Y, X, rec)
        return X, rec


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


# registration order = the order of the CLI's scheme lists (the baseline first)
CODES.register(Uncoded)
CODES.register(Repetition)
CODES.register(MDS)
CODES.register(EEP)
CODES.register(NowUEP)
CODES.register(EwUEP)
