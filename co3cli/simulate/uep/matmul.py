"""Partition a product into importance-sorted block products, and one coded run with stragglers.

::

    A (m x k), B (k x p)          torch tensors are converted to numpy (float64)
      |-- partition="sorted" (default, as the authors do): permute before splitting
      |     rxc: rows of A by their sort statistic (mean|.| by default), columns of B by
      |          theirs, both descending: the top-left block = largest rows x largest columns
      |     cxr: the inner index (column j of A with row j of B) by stat(A[:, j]) stat(B[j, :])
      |     (partition="contiguous": the original order)
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
      `-- assemble C_hat (rxc: place the blocks; cxr: sum them), crop to m x p and undo the
          row/column sort of rxc (an index permutation of C: exact and free; the inner sort
          of cxr leaves the sum unchanged)

The sorted partition follows the coded back-propagation of B. Tegin, E. E. Hernandez, S. Rini,
T. M. Duman, "Straggler Mitigation through Unequal Error Protection for Distributed Approximate
Matrix Multiplication", IEEE JSAC 40(2), 2022: sorting first concentrates the energy of C in
the first blocks, so the classes really differ in importance; contiguous blocks of a matrix
whose large rows/columns are scattered all look alike.
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

__all__ = ["MODES", "IMPORTANCE", "PARTITIONS", "SORT_BY", "Partition", "partition",
           "coded_matmul", "run_once", "check_class_sizes", "check_partition", "rel_error",
           "as_rng"]

MODES = ("rxc", "cxr")
IMPORTANCE = ("frobenius", "mean-abs")
PARTITIONS = ("sorted", "contiguous")
SORT_BY = ("mean-abs", "l2")
"""Statistic of a row/column that the sorted partition orders by: ``mean-abs`` (mean |.|, the
authors' choice) or ``l2`` (its Euclidean norm)."""


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
    cxr: p; in the sorted coordinates). ``scores``: the importance score of each block
    (descending). ``row_perm`` / ``col_perm`` (rxc, sorted partition): the rows of A and the
    columns of B in sorted order (C's row ``row_perm[i]`` is the sorted product's row i);
    ``inner_perm`` (cxr, sorted): the inner index in sorted order; None: original order.
    """

    mode: str
    shape: tuple[int, int]
    grid: tuple[int, ...]
    products: np.ndarray
    order: np.ndarray
    scores: np.ndarray
    kind: str = "contiguous"
    row_perm: np.ndarray | None = None
    col_perm: np.ndarray | None = None
    inner_perm: np.ndarray | None = None

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
        Cs = Xo.reshape(M, N, r, c).transpose(0, 2, 1, 3).reshape(M * r, N * c)[:m, :p]
        return self.unpermute(Cs)

    def unpermute(self, Cs: np.ndarray) -> np.ndarray:
        """C (m, p) in the original row/column order from the sorted-coordinates product."""
        if self.row_perm is None and self.col_perm is None:
            return Cs
        if self.row_perm is not None:  # C[row_perm[i]] = Cs[i]: take the inverse permutation
            Cs = Cs.take(np.argsort(self.row_perm), axis=0)
        if self.col_perm is not None:
            Cs = Cs.take(np.argsort(self.col_perm), axis=1)
        return Cs

    def block_rows_cols(self, q: int) -> tuple[np.ndarray, np.ndarray]:
        """Rows and columns of C (original order) that the q-th block (class order) covers
        (rxc only; cxr blocks are summands covering all of C)."""
        if self.mode != "rxc":
            raise InputError("block_rows_cols is for mode 'rxc' (cxr blocks are summands)")
        M, N = self.grid
        _, r, c = self.products.shape
        i, j = divmod(int(self.order[q]), N)
        m, p = self.shape
        rs, cs = np.arange(i * r, min((i + 1) * r, m)), np.arange(j * c, min((j + 1) * c, p))
        rp = np.arange(m) if self.row_perm is None else self.row_perm
        cp = np.arange(p) if self.col_perm is None else self.col_perm
        return rp[rs], cp[cs]


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


def _stat(sort_by: str, X: np.ndarray, axis: int) -> np.ndarray:
    """The sort statistic of each row (axis=1) or column (axis=0) of X."""
    if sort_by == "l2":
        return np.sqrt(np.einsum("ij,ij->i" if axis == 1 else "ij,ij->j", X, X))
    return np.abs(X).mean(axis)


def _desc(score: np.ndarray) -> np.ndarray:
    """Indices sorting ``score`` descending (stable: ties keep the original order)."""
    return np.argsort(-score, kind="stable")


def check_partition(kind: Any, sort_by: Any = "mean-abs") -> None:
    """``kind`` in PARTITIONS and ``sort_by`` in SORT_BY (InputError, one line)."""
    if kind not in PARTITIONS:
        raise InputError(f"partition must be one of {', '.join(PARTITIONS)}, got {kind!r}")
    if sort_by not in SORT_BY:
        raise InputError(f"sort_by must be one of {', '.join(SORT_BY)}, got {sort_by!r}")


def partition(A: Any, B: Any, *, mode: str = "rxc", blocks: Any = None,
              importance: str = "frobenius", partition: str = "sorted",
              sort_by: str = "mean-abs") -> Partition:
    """Split A @ B into K block products, zero-padding shapes that don't divide, and sort
    them by importance (descending, stable). ``blocks``: (M, N) for rxc, P for cxr.

    ``partition="sorted"`` (default, the authors' construction) first orders the rows of A and
    the columns of B (rxc) or the inner index (cxr) by ``sort_by`` (descending), then splits
    uniformly; ``"contiguous"`` splits in the original order. Importance of a block:
    ``frobenius`` ||A-part||_F ||B-part||_F; ``mean-abs`` mean|A-part| mean|B-part| (means over
    the equal-size zero-padded parts). ``Partition.assemble`` returns C in the original order."""
    A, B = _np(A, "A"), _np(B, "B")
    check_partition(partition, sort_by)
    if A.shape[1] != B.shape[0]:
        raise InputError(f"A and B shapes don't multiply: A is {A.shape[0]}x{A.shape[1]}, "
                         f"B is {B.shape[0]}x{B.shape[1]}")
    if mode not in MODES:
        raise InputError(f"mode must be one of {', '.join(MODES)}, got {mode!r}")
    if importance not in IMPORTANCE:
        raise InputError(f"importance must be one of {', '.join(IMPORTANCE)}, got {importance!r}")
    m, k = A.shape
    p = B.shape[1]
    perms: dict[str, Any] = {}
    if partition == "sorted" and mode == "rxc":
        perms = {"row_perm": _desc(_stat(sort_by, A, 1)), "col_perm": _desc(_stat(sort_by, B, 0))}
        A, B = A.take(perms["row_perm"], axis=0), B.take(perms["col_perm"], axis=1)
    elif partition == "sorted":
        perms = {"inner_perm": _desc(_stat(sort_by, A, 0) * _stat(sort_by, B, 1))}
        A, B = A.take(perms["inner_perm"], axis=1), B.take(perms["inner_perm"], axis=0)
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
    return Partition(mode, (m, p), grid, prods[order], order, s[order], partition, **perms)


_partition = partition  # coded_matmul's ``partition`` argument shadows the function


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
                 partition: str = "sorted", sort_by: str = "mean-abs",
                 latency: Latency | float | None = None, deadline: float | None = None,
                 wait_for: int | None = None, rng: np.random.Generator | int | None = None,
                 exact: bool = False) -> tuple[np.ndarray, dict[str, Any]]:
    """Approximate C = A @ B through ``code`` with stragglers; returns (C_hat float64, info).

    ``blocks``: (M, N) for rxc, P for cxr (default K). ``class_sizes``: optional check against
    the code's. ``partition`` / ``sort_by``: as in :func:`partition` (C_hat is always in the
    original row/column order). The server stops at ``deadline`` or after ``wait_for`` results, whichever is
    first (neither: waits for all). info: ``arrived`` (results used), ``workers`` (n),
    ``finish_time``, ``recovered`` (bool per class), ``block_recovered`` (bool per block, class
    order), ``block_class``, ``order`` (original block index per class-ordered block),
    ``partition`` (the Partition: permutations, scores), and with ``exact=True`` ``rel_error`` = ||C - C_hat||_F^2 / ||C||_F^2.
    """
    if not isinstance(code, Code):
        raise InputError(f"code must be a Code from get_code(), got {type(code).__name__}")
    if mode == "cxr" and blocks is None:
        blocks = code.K
    lat = as_latency(latency)
    T = math.inf if deadline is None else check_deadline(deadline)
    w = _wait_for(wait_for, code.n_workers)
    part = _partition(A, B, mode=mode, blocks=blocks, importance=importance,
                      partition=partition, sort_by=sort_by)
    check_class_sizes(code, part.K, class_sizes)
    X, info = run_once(part, code, lat, T, w, as_rng(rng))
    C_hat = part.assemble(X)
    info["order"] = part.order
    info["partition"] = part
    if exact:
        C = part.assemble(part.products)
        info["rel_error"] = rel_error(C, C_hat)
    return C_hat, info
