"""Convert: scale a tensor, round it to a grid, and map it to integer symbols (and back).

    y = float32(x * scale)                      (one IEEE float32 multiply)
    k = nearest magnitude index of |y|          (ties to the even index, saturating at K)
    s = K + sign(y) * k                         (the zero symbol K has no sign)
    x_hat = float32(values[s]) / float32(scale) (dequantize)

Three paths compute ``s`` and agree bit for bit (the tests check every code, every
midpoint and the neighbours of every tie):

* ``numba`` (default): one fused pass that also counts symbols; exact arithmetic rounding
  (|y| is exact in float64, the quantum is a power of two, ``rint`` rounds half to even);
  for fp grids inside float32's range a branch-free variant (integer rounding on the bit
  pattern, selects instead of branches, counts spread over 4 histograms);
* ``reference``: numpy ``searchsorted`` over the cell edges with explicit tie handling;
* ``torch``: torch's float8 casts, for ``fp8-e5m2`` and ``fp8-e4m3`` only.

The scale itself (one float32 per tensor, side information) comes from a scale rule of
:mod:`co3cli.scales`; :func:`abs_max` is absmax's ``max|x|`` in one read, no temporary.

Reference (floating-point conversion, the "convert" of CO3): Z.-J. Chen, E. E. Hernandez, Y.-C. Huang, S. Rini, "Convert, compress, correct: Three steps
toward communication-efficient DNN training", arXiv:2203.09044.
"""

from __future__ import annotations

import math

import numpy as np

from co3cli.errors import InputError
from co3cli.formats import Grid
from co3cli.registry import spell

TIE_RULE = "nearest, ties to even magnitude index; saturate at +-max; -0 == +0"
_F32_MAX = float(np.finfo(np.float32).max)
_kernel = None


def _get_kernel():
    global _kernel
    if _kernel is None:
        from numba import njit

        @njit(cache=True, nogil=True)
        def quantize_kernel(x2, scales, is_fp, man_bits, emin, kmax, vmax, out2, counts):
            """Row ``r`` of ``x2`` at ``scales[r]`` into ``out2[r]``; returns the number of
            non-finite products (their symbols are undefined).

            Normal-range fp rounding works on the float32 bit pattern: adding
            ``2**(sh-1) - 1 + lsb`` then shifting right by ``sh = 23 - M`` rounds the mantissa
            half-to-even and carries into the exponent, giving ``(exp << M) | mant``.
            """
            ybuf = np.empty(4096, dtype=np.float32)
            ubuf = ybuf.view(np.uint32)
            sh = 23 - man_bits
            half = (1 << (sh - 1)) - 1
            offset = (127 + emin - 1) << man_bits
            sub_mul = math.ldexp(1.0, man_bits - emin)
            lim_sub = math.ldexp(1.0, emin)
            bad = 0
            for r in range(x2.shape[0]):
                x, out, scale = x2[r], out2[r], scales[r]
                for start in range(0, x.size, ybuf.size):
                    stop = min(start + ybuf.size, x.size)
                    for i in range(start, stop):
                        ybuf[i - start] = x[i] * scale  # float32 * float32 -> float32
                    for i in range(start, stop):
                        y = ybuf[i - start]
                        b = ubuf[i - start] & 0x7FFFFFFF
                        if b >= 0x7F800000:  # NaN or Inf
                            bad += 1
                            out[i] = kmax
                            continue
                        a = abs(np.float64(y))
                        if a >= vmax:
                            k = kmax
                        elif not is_fp:
                            k = np.int64(np.rint(a))
                        elif a < lim_sub:  # the grid's subnormal range: a fixed quantum
                            k = np.int64(np.rint(a * sub_mul))
                        elif b < 0x00800000:  # float32 subnormal inside the grid's normal range
                            e = math.frexp(a)[1] - 1
                            k = (e - emin) * (1 << man_bits) + np.int64(
                                np.rint(math.ldexp(a, man_bits - e)))
                        else:
                            k = np.int64((b + half + ((b >> sh) & 1)) >> sh) - offset
                        if k > kmax:
                            k = kmax
                        s = kmax - k if y < 0 else kmax + k
                        out[i] = s
                        counts[s] += 1
            return bad

        _kernel = quantize_kernel
    return _kernel


_fp_kernel = None


def _get_fp_kernel():
    """The fp-grid quantizer without data-dependent branches (grids whose normal range lies
    inside float32's: ``emin >= -126``); same symbols and counts as :func:`_get_kernel`'s."""
    global _fp_kernel
    if _fp_kernel is None:
        from numba import njit

        @njit(cache=True, nogil=True)
        def quantize_fp_kernel(x2, scales, man_bits, emin, kmax, out2, counts):
            """Row ``r`` of ``x2`` at ``scales[r]`` into ``out2[r]``, per block of 4096: ``y =
            x * scale`` (float32), then the symbol from y's bit pattern: the normal-range
            rounding of :func:`_get_kernel` (integer add and shift, half to even) or, below
            ``2**emin``, ``rint(|y| * 2**(M - emin))`` (exact in float32: a power-of-two
            product), chosen by a select; saturation by ``min``; then the counts, spread over
            4 histograms so that runs of one symbol do not serialise on a single counter.
            Returns the number of non-finite products."""
            ybuf = np.empty(4096, dtype=np.float32)
            ubuf = ybuf.view(np.uint32)
            hist = np.zeros((4, counts.size), dtype=np.int64)
            sh = np.uint32(23 - man_bits)
            half = np.uint32((1 << (sh - 1)) - 1)
            offset = np.int32((127 + emin - 1) << man_bits)
            sub_mul = np.float32(math.ldexp(1.0, man_bits - emin))
            lim_b = np.uint32((127 + emin) << 23)  # bit pattern of 2**emin
            km = np.int32(kmax)
            bad = 0
            for r in range(x2.shape[0]):
                x, out, scale = x2[r], out2[r], scales[r]
                for start in range(0, x.size, ybuf.size):
                    stop = min(start + ybuf.size, x.size)
                    m = stop - start
                    for j in range(m):
                        ybuf[j] = x[start + j] * scale  # float32 * float32 -> float32
                    for j in range(m):
                        u = ubuf[j]
                        b = u & np.uint32(0x7FFFFFFF)
                        bad += b >= np.uint32(0x7F800000)
                        kn = np.int32((np.minimum(b, np.uint32(0x7F800000)) + half
                                       + ((b >> sh) & np.uint32(1))) >> sh) - offset
                        ks = np.int32(np.rint(abs(ybuf[j]) * sub_mul))
                        k = min(ks if b < lim_b else kn, km)
                        neg = np.int32(u >> np.uint32(31))  # the sign bit: K - k, else K + k
                        out[start + j] = np.uint16(km + k - 2 * k * neg)
                    for j in range(0, m - 3, 4):
                        hist[0, out[start + j]] += 1
                        hist[1, out[start + j + 1]] += 1
                        hist[2, out[start + j + 2]] += 1
                        hist[3, out[start + j + 3]] += 1
                    for j in range(m - m % 4, m):
                        hist[0, out[start + j]] += 1
            for r in range(4):
                for c in range(counts.size):
                    counts[c] += hist[r, c]
            return bad

        _fp_kernel = quantize_fp_kernel
    return _fp_kernel


_absmax_kernel = None


def abs_max(x) -> float:
    """``float(np.max(np.abs(x)))`` for a non-empty array, in one read of a float32 array
    (no temporary): the largest ``bits & 0x7FFFFFFF`` is the bit pattern of max|x| (NaN
    if any entry is NaN, as numpy's). Other dtypes go through numpy."""
    x = np.asarray(x)
    if x.dtype != np.float32 or x.size == 0:
        return float(np.max(np.abs(x)))
    global _absmax_kernel
    if _absmax_kernel is None:
        from numba import njit

        @njit(cache=True, nogil=True)
        def absmax_kernel(u):
            """Largest ``u[i] & 0x7FFFFFFF`` (uint32), 8 independent lanes (vectorisable)."""
            acc = np.zeros(8, dtype=np.uint32)
            n8 = u.size - u.size % 8
            for i in range(0, n8, 8):
                for j in range(8):
                    acc[j] = max(acc[j], u[i + j] & np.uint32(0x7FFFFFFF))
            m = np.uint32(0)
            for j in range(8):
                m = max(m, acc[j])
            for i in range(n8, u.size):
                m = max(m, u[i] & np.uint32(0x7FFFFFFF))
            return m

        _absmax_kernel = absmax_kernel
    m = int(_absmax_kernel(np.ascontiguousarray(x).reshape(-1).view(np.uint32)))
    return float("nan") if m > 0x7F800000 else float(np.uint32(m).view(np.float32))


def as_f32_1d(x) -> np.ndarray:
    x = np.asarray(x)
    if x.dtype != np.float32:
        if not np.issubdtype(x.dtype, np.floating):
            raise InputError(f"expected floating-point values, got dtype {x.dtype}")
        x = x.astype(np.float32)
    return np.ascontiguousarray(x).reshape(-1)


def _check_scale(scale) -> np.float32:
    s = np.float32(scale)
    f = float(s)
    if not (f > 0 and f != math.inf):  # NaN fails f > 0
        raise InputError(f"scale must be a finite positive float32, got {scale!r}")
    return s


def _run_kernel(x2, grid: Grid, scales, out2, counts) -> None:
    """Row ``r`` of float32 ``x2`` at float32 ``scales[r]`` into uint16 ``out2[r]`` by the
    numba kernel for ``grid``, adding to ``counts``; InputError on a non-finite product."""
    is_fp = grid.kind == "fp"
    if is_fp and grid.emin >= -126:
        bad = _get_fp_kernel()(x2, scales, grid.man_bits, grid.emin, grid.K, out2, counts)
    else:
        bad = _get_kernel()(x2, scales, is_fp, grid.man_bits if is_fp else 0,
                            grid.emin if is_fp else 0, grid.K, grid.max_value, out2, counts)
    if bad:
        raise InputError(f"{bad} non-finite value(s) (NaN/Inf, or overflow of x*scale) "
                         "cannot be quantized")


def quantize_rows(x2: np.ndarray, grid: Grid, scales: np.ndarray) -> np.ndarray:
    """Symbols (uint16, ``x2``'s shape) of each row of a float32 (rows, n) array at its own
    float32 scale: :func:`quantize`'s symbols, row by row, in one kernel call."""
    x2 = np.ascontiguousarray(x2, dtype=np.float32)
    scales = np.ascontiguousarray(scales, dtype=np.float32)
    if x2.ndim != 2 or scales.shape != (x2.shape[0],):
        raise InputError(f"quantize_rows: {x2.shape} values with {scales.shape} scales")
    bad = ~((scales > 0) & (scales < np.inf))  # NaN fails both
    if bad.any():
        _check_scale(scales[np.argmax(bad)])
    out = np.empty(x2.shape, dtype=np.uint16)
    _run_kernel(x2, grid, scales, out, np.zeros(grid.nsym, dtype=np.int64))
    return out


def quantize(x, grid: Grid, scale, *, with_counts: bool = False, path: str = "numba",
             out: np.ndarray | None = None):
    """Symbols (uint16) of ``x`` on ``grid`` at ``scale``; optionally also their counts.

    ``out``: a C-contiguous uint16 array of ``x.size`` entries the numba path writes the
    symbols into (and returns), saving a copy when the caller keeps them in a larger array."""
    x = as_f32_1d(x)
    s = _check_scale(scale)
    if path == "numba":
        if out is None:
            out = np.empty(x.size, dtype=np.uint16)
        elif out.dtype != np.uint16 or out.shape != (x.size,) or not out.flags.c_contiguous:
            raise InputError(f"out: need a C-contiguous uint16 array of {x.size} entries")
        counts = np.zeros(grid.nsym, dtype=np.int64)
        _run_kernel(x[None, :], grid, np.array([s]), out[None, :], counts)
    elif path == "reference":
        out = quantize_reference(x, grid, s)
        counts = np.bincount(out, minlength=grid.nsym).astype(np.int64)
    elif path == "torch":
        out = quantize_torch(x, grid, s)
        counts = np.bincount(out, minlength=grid.nsym).astype(np.int64)
    else:
        raise InputError(f"unknown quantizer path {path!r}; allowed: numba, reference, torch")
    return (out, counts) if with_counts else out


def quantize_reference(x, grid: Grid, scale) -> np.ndarray:
    """Readable numpy oracle: ``searchsorted`` over cell edges, ties to the even index."""
    x = as_f32_1d(x)
    y = x * _check_scale(scale)
    if not np.all(np.isfinite(y)):
        raise InputError("non-finite value(s) (NaN/Inf, or overflow of x*scale) cannot be quantized")
    a = np.abs(y.astype(np.float64))
    edges = grid.edges
    k = np.searchsorted(edges, a, side="left")  # number of edges strictly below a
    tie = (k < grid.K) & (edges[np.minimum(k, grid.K - 1)] == a)
    k = np.where(tie & (k % 2 == 1), k + 1, k)  # at a midpoint between k and k+1 take the even one
    k = np.minimum(k, grid.K)
    return np.where(y < 0, grid.K - k, grid.K + k).astype(np.uint16)


_TORCH_DTYPES = {"fp8-e5m2": "float8_e5m2", "fp8-e4m3": "float8_e4m3fn"}


def quantize_torch(x, grid: Grid, scale) -> np.ndarray:
    """torch float8 cast path (fp8-e5m2, fp8-e4m3 only); saturates before casting."""
    import torch

    if grid.id not in _TORCH_DTYPES:
        raise InputError(f"the torch path supports {spell(sorted(_TORCH_DTYPES))}, not {grid.id!r}")
    t = torch.from_numpy(as_f32_1d(x)) * torch.tensor(_check_scale(scale), dtype=torch.float32)
    if not bool(torch.isfinite(t).all()):
        raise InputError("non-finite value(s) (NaN/Inf, or overflow of x*scale) cannot be quantized")
    t = t.clamp_(-grid.max_value, grid.max_value)
    codes = t.to(getattr(torch, _TORCH_DTYPES[grid.id])).view(torch.uint8).numpy()
    mag = (codes & 0x7F).astype(np.int64)
    return np.where(codes & 0x80, grid.K - mag, grid.K + mag).astype(np.uint16)


_lookup = None


def _get_lookup():
    global _lookup
    if _lookup is None:
        from numba import njit

        @njit(cache=True, nogil=True)
        def lookup_kernel(table, sym, out):
            """out[i] = table[sym[i]]; returns how many symbols were out of range (out = 0)."""
            n = table.size
            bad = 0
            for i in range(sym.size):
                s = sym[i]
                if s < n:
                    out[i] = table[s]
                else:
                    out[i] = 0.0
                    bad += 1
            return bad

        _lookup = lookup_kernel
    return _lookup


def dequantize_table(grid: Grid, scale) -> np.ndarray:
    """The value of each symbol at ``scale``: ``dequantize(sym) == dequantize_table()[sym]``
    (for coders that decode straight into values, e.g. ``AnsTable.decode_lookup``)."""
    return grid.values / _check_scale(scale)


def dequantize(sym, grid: Grid, scale) -> np.ndarray:
    """float32 values ``values[sym] / scale`` (the division done once per grid value: the same
    float32 results; a numba table lookup, no index array)."""
    sym = np.asarray(sym)
    table = dequantize_table(grid, scale)
    if sym.dtype != np.uint16:
        if sym.size and (int(sym.max()) >= grid.nsym or int(sym.min()) < 0):
            raise InputError(f"symbol {int(sym.max())} out of range for {grid.id} "
                             f"({grid.nsym} symbols)")
        return table[sym]
    flat = np.ascontiguousarray(sym).reshape(-1)
    out = np.empty(flat.size, dtype=np.float32)
    if _get_lookup()(table, flat, out):
        raise InputError(f"symbol {int(flat.max())} out of range for {grid.id} ({grid.nsym} symbols)")
    return out.reshape(sym.shape)
