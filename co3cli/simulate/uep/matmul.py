"""Partition a product into importance-sorted block products, and one coded run with stragglers.

::

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
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from co3cli.checks import check_int, check_int_list
from co3cli.errors import InputError
from co3cli.simulate.uep.codes import Code
from co3cli.simulate.uep.latency import Latency, as_latency, check_deadline

__all__ = ["MODES", "IMPORTANCE", "Partition", "partition", "coded_matmul", "run_once",
           "check_class_sizes", "rel_error", "as_rng"]

MODES = ("rxc", "cxr")
IMPORTANCE = ("frobenius", "mean-abs")


def _np(x: Any, name: str) -> np.ndarray:
    """numpy float64 view of an array or torch tensor."""
    if hasattr(x, "detach"):
        x = np.asarray(x.detach().cpu())
    a = np.asarray(x, dtype=np.float64)
    if a.ndim != 2:
        raise InputError(f"{name} must be a 2-D matrix, got shape {a.shape}")
    return a


def as_rng(rng: np.random.Generator | int | None) -> np.random.Generator:
    """``rng`` itself if a Generator, else ``np.random.default_rng(rng)``."""
    return rng if isinstance(rng, np.random.Generator) else np.random.default_rng(rng)


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


def _scores(importance: str, a_parts: np.ndarray, b_parts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per-part importance of the A-parts and the B-parts (a block scores their product)."""
    if importance == "frobenius":
        return (np.linalg.norm(a_parts.reshape(len(a_parts), -1), axis=1),
                np.linalg.norm(b_parts.reshape(len(b_parts), -1), axis=1))
    return (np.abs(a_parts).reshape(len(a_parts), -1).mean(1),
            np.abs(b_parts).reshape(len(b_parts), -1).mean(1))


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
    if mode == "rxc":
        if blocks is None or np.isscalar(blocks) or len(blocks) != 2:
            raise InputError(f"blocks must be (M, N) for mode 'rxc', got {blocks!r}")
        M = check_int("blocks M", blocks[0], lo=1, lenient=True)
        N = check_int("blocks N", blocks[1], lo=1, lenient=True)
        r, c = -(-m // M), -(-p // N)
        Ap, Bp = _pad(A, M * r, k), _pad(B, k, N * c)
        a_parts = Ap.reshape(M, r, k)
        b_parts = Bp.reshape(k, N, c).transpose(1, 0, 2)
        sa, sb = _scores(importance, a_parts, b_parts)
        s = np.outer(sa, sb).ravel()
        prods = (Ap @ Bp).reshape(M, r, N, c).transpose(0, 2, 1, 3).reshape(M * N, r, c)
        grid: tuple[int, ...] = (M, N)
    else:
        if blocks is not None and not np.isscalar(blocks):
            if len(blocks) != 1:
                raise InputError(f"blocks must be an integer P for mode 'cxr', got {blocks!r}")
            blocks = blocks[0]
        if blocks is None:
            raise InputError("blocks (P) is required for mode 'cxr'")
        P = check_int("blocks P", blocks, lo=1, lenient=True)
        w = -(-k // P)
        Ap, Bp = _pad(A, m, P * w), _pad(B, P * w, p)
        a_parts = Ap.reshape(m, P, w).transpose(1, 0, 2)
        b_parts = Bp.reshape(P, w, p)
        sa, sb = _scores(importance, a_parts, b_parts)
        s = sa * sb
        prods = np.einsum("qmw,qwp->qmp", a_parts, b_parts)
        grid = (P,)
    order = np.argsort(-s, kind="stable")
    return Partition(mode, (m, p), grid, prods[order], order, s[order])


def check_class_sizes(code: Code, K: int, class_sizes: Any = None) -> None:
    """The code fits a partition of K blocks (and, if given, has these ``class_sizes``)."""
    if class_sizes is not None:
        given = check_int_list("class_sizes", class_sizes, lenient=True)
        if given != code.class_sizes:
            raise InputError(f"class_sizes {list(given)} differ from the code's "
                             f"{list(code.class_sizes)}")
    if code.n_classes > K:
        raise InputError(f"class_sizes: {code.n_classes} classes for {K} blocks (more classes than blocks)")
    if code.K != K:
        raise InputError(f"class_sizes {list(code.class_sizes)} sum to {code.K}, "
                         f"but the partition has K={K} blocks")


def run_once(part: Partition, code: Code, latency: Latency, deadline: float,
             wait_for: int | None, rng: np.random.Generator) -> tuple[np.ndarray, dict[str, Any]]:
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
    w = check_int("wait_for", wait_for, lo=0, lenient=True)
    if w > n:
        raise InputError(f"wait_for must be <= the number of workers n={n}, got {wait_for!r}")
    return w


def rel_error(C: np.ndarray, C_hat: np.ndarray) -> float:
    """||C - C_hat||_F^2 / ||C||_F^2 (0 for C = C_hat = 0, inf for C = 0 only)."""
    den = float(np.vdot(C, C))
    num = float(np.vdot(C - C_hat, C - C_hat))
    return num / den if den > 0 else (0.0 if num == 0 else math.inf)


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
    lat = as_latency(latency)
    T = math.inf if deadline is None else check_deadline(deadline)
    w = _wait_for(wait_for, code.n_workers)
    part = partition(A, B, mode=mode, blocks=blocks, importance=importance)
    check_class_sizes(code, part.K, class_sizes)
    X, info = run_once(part, code, lat, T, w, as_rng(rng))
    C_hat = part.assemble(X)
    info["order"] = part.order
    if exact:
        C = part.assemble(part.products)
        info["rel_error"] = rel_error(C, C_hat)
    return C_hat, info
