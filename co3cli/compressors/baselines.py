"""Baseline gradient compressors: ``qsgd``, ``topk``, ``signsgd``, ``sketch``, ``tinyscript``.

Each follows the :class:`~co3cli.compressors.base.Compressor` contract: ``compress`` returns
the payload and the ``v_hat`` that ``decompress(payload, numel, state)`` rebuilds bit for bit,
from the payload, the compressor's fixed parameters and ``numel`` alone (no other side channel).
None of them keeps state across rounds except ``sketch``, which caches its hashes. Multi-byte
numbers are little-endian; "uvarint" is an LEB128 varint (:mod:`co3cli.varint`). A payload that
does not parse exactly (truncated, trailing bytes, bad counts) raises ``CorruptDataError``.

Shared "counted ANS" block (``qsgd``, ``tinyscript`` mode 1), for ``n`` symbols in ``0..m-1``::

    m uvarints: the round's count of each symbol (they must sum to n)
    | rANS body (co3cli.coding "ans", precision 16; self-delimiting, a multiple of 4 bytes)

Both sides build the rANS table from those counts with ``table_from_weights`` (deterministic),
so no table is sent.

``qsgd`` (Alistarh et al. 2017; ``levels`` = s, stochastic)::

    norm f32                              (||v||_2; 0: all zeros, nothing follows)
    | counted ANS block, m = 2s + 1       (symbol = signed level + s)

    level_i = floor(|v_i| / ||v|| * s + u_i), u_i ~ U[0, 1) from the rng (unbiased rounding);
    v_hat_i = f32(sign_i * level_i / s * norm). The signed levels are ANS-coded with the
    round's own counts (cheaper than any fixed-width packing once s >= 1: the level-0 symbol
    dominates); ``entropy_bits`` is the empirical entropy of the 2s + 1 symbols.

``topk`` (``fraction`` = k)::

    uvarint(K)                            (K = ceil(k * n) kept entries, 1..n)
    | K uvarints: gaps                    (first index, then index[i] - index[i-1] - 1)
    | K x f32: the kept values            (in index order)

    The K entries of largest |v| (ties broken by ``np.argpartition``); zeros elsewhere.
    ``entropy_bits`` is None (no entropy-coded symbols).

``signsgd`` (scaled sign)::

    scale f32                             (mean |v|)
    | ceil(n / 8) bytes: np.packbits(v < 0) (big-endian bit order; padding bits 0)

    v_hat = +scale where v >= 0 (sign(0) is taken as +1), -scale where v < 0.
    ``entropy_bits`` is the empirical entropy of the sign bits.

``sketch`` (count sketch, FetchSGD; ``rows`` r, ``cols`` or ``width``, ``unsketch``,
``k_fraction``, ``seed``)::

    r x c f32: the sketch table, row-major   (nothing else: r and c follow from the config)

    c = ``cols`` when given, else max(1, ceil(width * n)). Each row hashes coordinate j to a
    bucket h_r(j) in [0, c) with a sign s_r(j) in {-1, +1}, drawn with
    ``np.random.default_rng([seed, n])`` (identical on both sides, cached in ``state`` by n);
    table[r, h_r(j)] += s_r(j) * v_j (summed in float64, stored as f32). Unsketch ``median``:
    v_hat_j = median_r(s_r(j) * table[r, h_r(j)]) for every j (the CO3 authors' simplified
    variant); ``topk``: those median estimates, keeping only the ceil(k_fraction * n) largest
    in magnitude (FetchSGD), zeros elsewhere. ``entropy_bits`` is None.

``tinyscript`` (``bits`` = R; deterministic)::

    mode u8                               (0, 1: v has no exact zero; 2, 3: it has)
    | 2**(R-1) x f32: the positive levels, increasing (the negative ones are their mirror)
    | mode 0: ceil(n * R / 8) bytes, each index as R bits, MSB first (padding bits 0)
      mode 1: counted ANS block, m = 2**R
      mode 2: counted ANS block, m = 2**R + 1 (symbol 2**R: exactly 0)
      mode 3: ceil(n / 8) bytes: np.packbits(v == 0) (padding bits 0)
              | the nonzero entries' indices, packed as in mode 0

    A double Weibull is fitted to v: the Weibull shape k and scale lam of |v| (nonzero
    entries) by the method of moments on log|v| (log of a Weibull is a Gumbel-min:
    std = pi / (k sqrt 6), mean = log lam - euler_gamma / k; k clipped to [0.1, 20]). The
    Lloyd-Max quantiser for that density with 2**R levels symmetric about 0 has 0 as a
    threshold, so it is the Lloyd-Max quantiser of |v| with 2**(R-1) levels, designed on
    2**16 equal-mass quantiles of the fitted Weibull (centroid / midpoint iteration). Each
    entry goes to its nearest level (``np.searchsorted`` on the midpoints); index i in
    0..2**R-1 stands for level i of [-pos[::-1], pos]. Exact zeros (ReLU layers, dead
    units: 45 % of a real MNIST layer) are sent as 0 (modes 2, 3): the 2**R levels have no
    zero, and the nearest one is +-pos[0], which would add pos[0]^2 per zero to the MSE (+61 %
    on that layer) and, always taking the same side, bias the upload. The payload takes whichever
    of the two modes for its case is smaller; a decoder from before modes 2 and 3 refuses them
    (unknown mode byte). With fewer than two distinct nonzero magnitudes every positive level is
    max|v|. ``entropy_bits`` is the empirical entropy of the indices (the zero symbol included).
"""

from __future__ import annotations

import math
import struct

import numpy as np

from co3cli.checks import check_int, check_real
from co3cli.compressors.base import COMPRESSORS, Compressor, Packet
from co3cli.errors import CorruptDataError, InputError
from co3cli.quantize import as_f32_1d
from co3cli.tables import entropy_bits
from co3cli.varint import uvarints_from_bytes, uvarints_to_bytes

_F32_MAX = float(np.finfo(np.float32).max)


def _f32_at(payload: bytes, pos: int, what: str) -> float:
    if len(payload) < pos + 4:
        raise CorruptDataError(f"{what}: payload of {len(payload)} bytes is truncated")
    return struct.unpack_from("<f", payload, pos)[0]


# ---------------------------------------------------------------------------------------
# Counted ANS block (see the module docstring)

def _ans_coder():
    from co3cli.coding import get_coder

    return get_coder("ans")


def _ans_pack(sym: np.ndarray, counts: np.ndarray) -> bytes:
    """Counts as uvarints, then the rANS body of ``sym`` under a table built from them."""
    table = _ans_coder().table_from_weights(counts.astype(np.float64))
    return uvarints_to_bytes(counts) + table.encode(sym.astype(np.uint16))


def _ans_unpack(data: bytes, nsym: int, n: int, what: str) -> np.ndarray:
    """Inverse of :func:`_ans_pack`: ``n`` uint16 symbols; CorruptDataError on any mismatch."""
    counts, used = uvarints_from_bytes(data, nsym, f"{what} counts")
    if counts.max() > n or int(counts.sum()) != n:
        raise CorruptDataError(f"{what}: symbol counts do not add up to {n}")
    try:
        table = _ans_coder().table_from_weights(counts.astype(np.float64))
    except InputError as e:  # pragma: no cover - counts were checked above
        raise CorruptDataError(f"{what}: bad symbol counts ({e})") from None
    return table.decode(data[used:], n)


def _pack_bits(idx: np.ndarray, bits: int) -> bytes:
    """Each value of ``idx`` as ``bits`` bits, MSB first, padded with zeros to a byte."""
    shifts = np.arange(bits - 1, -1, -1, dtype=np.uint8)
    b = (idx.astype(np.uint8)[:, None] >> shifts) & 1
    return np.packbits(b.reshape(-1)).tobytes()


def _unpack_bits(data: bytes, n: int, bits: int, what: str) -> np.ndarray:
    need = -(-n * bits // 8)
    if len(data) != need:
        raise CorruptDataError(f"{what}: {len(data)} bytes of packed indices, expected {need}")
    b = np.unpackbits(np.frombuffer(data, dtype=np.uint8))
    if b[n * bits:].any():
        raise CorruptDataError(f"{what}: padding bits are not zero")
    weights = (1 << np.arange(bits - 1, -1, -1)).astype(np.uint16)
    return b[:n * bits].reshape(n, bits).astype(np.uint16) @ weights


# ---------------------------------------------------------------------------------------
# QSGD

@COMPRESSORS.register
class QSGD(Compressor):
    """QSGD: stochastic rounding to ``levels`` levels of |v|/||v||, signed, ANS-coded."""

    id = "qsgd"
    PARAMS = {"levels": 4}
    stochastic = True
    MAX_LEVELS = 2047  # 2s + 1 symbols must fit the coder's alphabet (4095)

    def check(self) -> None:
        check_int("levels", self.params["levels"], 1, self.MAX_LEVELS, who=f"{self.id}: ")

    def _values(self, norm: np.float32) -> np.ndarray:
        s = int(self.params["levels"])
        return (np.arange(-s, s + 1, dtype=np.float64) / s * float(norm)).astype(np.float32)

    def compress(self, v, state, rng):
        v = as_f32_1d(v)
        s = int(self.params["levels"])
        v64 = v.astype(np.float64)
        norm64 = float(np.sqrt(np.dot(v64, v64)))
        norm = np.float32(min(norm64, _F32_MAX))
        if norm == 0:
            return Packet(struct.pack("<f", 0.0), np.zeros(v.size, np.float32), None)
        u = rng.random(v.size)
        level = np.minimum(np.floor(np.abs(v64) / norm64 * s + u), s).astype(np.int64)
        sym = (np.where(v64 < 0, -level, level) + s).astype(np.uint16)
        counts = np.bincount(sym, minlength=2 * s + 1)
        payload = struct.pack("<f", norm) + _ans_pack(sym, counts)
        return Packet(payload, self._values(norm)[sym], entropy_bits(counts))

    def decompress(self, payload, numel, state):
        payload = bytes(payload)
        norm = _f32_at(payload, 0, "qsgd")
        if not (math.isfinite(norm) and norm >= 0):
            raise CorruptDataError(f"qsgd: bad norm {norm}")
        if norm == 0:
            if len(payload) != 4:
                raise CorruptDataError("qsgd: zero-norm payload has trailing bytes")
            return np.zeros(numel, np.float32)
        s = int(self.params["levels"])
        sym = _ans_unpack(payload[4:], 2 * s + 1, numel, "qsgd")
        return self._values(np.float32(norm))[sym]


# ---------------------------------------------------------------------------------------
# Top-k

@COMPRESSORS.register
class TopK(Compressor):
    """Top-k sparsification: the ceil(fraction * n) largest |v|, as gaps + float32 values."""

    id = "topk"
    PARAMS = {"fraction": 0.01}

    def check(self) -> None:
        check_real("fraction", self.params["fraction"], 0.0, 1.0, lo_open=True, who=f"{self.id}: ")

    def compress(self, v, state, rng):
        v = as_f32_1d(v)
        n = v.size
        k = min(n, max(1, math.ceil(float(self.params["fraction"]) * n)))
        idx = np.sort(np.argpartition(-np.abs(v), k - 1)[:k]) if k < n else np.arange(n)
        gaps = np.diff(idx, prepend=-1) - 1
        vals = v[idx].astype("<f4")
        payload = uvarints_to_bytes([k]) + uvarints_to_bytes(gaps) + vals.tobytes()
        v_hat = np.zeros(n, np.float32)
        v_hat[idx] = vals
        return Packet(payload, v_hat, None)

    def decompress(self, payload, numel, state):
        payload = bytes(payload)
        (k,), pos = uvarints_from_bytes(payload[:10], 1, "topk count")
        k = int(k)
        if not 1 <= k <= numel:
            raise CorruptDataError(f"topk: count {k} is not in 1..{numel}")
        gaps, used = uvarints_from_bytes(payload[pos:], k, "topk gaps")
        pos += used
        if gaps.max() >= numel:
            raise CorruptDataError("topk: an index is out of range")
        idx = np.cumsum(gaps.astype(np.int64) + 1) - 1
        if idx[-1] >= numel:
            raise CorruptDataError("topk: an index is out of range")
        if len(payload) - pos != 4 * k:
            raise CorruptDataError(f"topk: {len(payload) - pos} bytes of values, expected {4 * k}")
        v_hat = np.zeros(numel, np.float32)
        v_hat[idx] = np.frombuffer(payload, dtype="<f4", offset=pos)
        return v_hat


# ---------------------------------------------------------------------------------------
# signSGD

@COMPRESSORS.register
class SignSGD(Compressor):
    """Scaled sign: mean |v| times the sign of each entry (sign(0) = +1), 1 bit per entry."""

    id = "signsgd"

    def compress(self, v, state, rng):
        v = as_f32_1d(v)
        scale = np.float32(min(float(np.mean(np.abs(v.astype(np.float64)))), _F32_MAX))
        neg = v < 0
        payload = struct.pack("<f", scale) + np.packbits(neg).tobytes()
        nneg = int(np.count_nonzero(neg))
        return Packet(payload, self._values(scale, neg),
                      entropy_bits(np.array([v.size - nneg, nneg])))

    @staticmethod
    def _values(scale: np.float32, neg: np.ndarray) -> np.ndarray:
        return np.where(neg, -scale, scale).astype(np.float32)

    def decompress(self, payload, numel, state):
        payload = bytes(payload)
        scale = _f32_at(payload, 0, "signsgd")
        if not (math.isfinite(scale) and scale >= 0):
            raise CorruptDataError(f"signsgd: bad scale {scale}")
        need = 4 + -(-numel // 8)
        if len(payload) != need:
            raise CorruptDataError(f"signsgd: payload has {len(payload)} bytes, expected {need}")
        bits = np.unpackbits(np.frombuffer(payload, dtype=np.uint8, offset=4))
        if bits[numel:].any():
            raise CorruptDataError("signsgd: padding bits are not zero")
        return self._values(np.float32(scale), bits[:numel].astype(bool))


# ---------------------------------------------------------------------------------------
# Count sketch

@COMPRESSORS.register
class Sketch(Compressor):
    """Count sketch (FetchSGD): an r x c float32 table; median (or median + top-k) unsketch."""

    id = "sketch"
    DERIVED_STATE = ("sketch_hashes",)  # drawn again from (seed, n)
    PARAMS = {"rows": 5, "cols": None, "width": 0.1, "unsketch": "median", "k_fraction": 0.01,
              "seed": 0}
    UNSKETCH = ("median", "topk")

    def check(self) -> None:
        p = self.params
        check_int("rows", p["rows"], 1, 64, who=f"{self.id}: ")
        if p["cols"] is not None:
            check_int("cols", p["cols"], 1, 1 << 28, who=f"{self.id}: ")
        check_real("width", p["width"], 0.0, 1000.0, lo_open=True, who="sketch: ")
        if p["unsketch"] not in self.UNSKETCH:
            raise InputError(f"sketch: unsketch={p['unsketch']!r} must be one of "
                             f"{', '.join(self.UNSKETCH)}")
        check_real("k_fraction", p["k_fraction"], 0.0, 1.0, lo_open=True, who=f"{self.id}: ")
        check_int("seed", p["seed"], 0, (1 << 63) - 1, who=f"{self.id}: ")

    def ncols(self, numel: int) -> int:
        """Sketch width c for a tensor of ``numel`` entries."""
        p = self.params
        if p["cols"] is not None:
            return int(p["cols"])
        return max(1, math.ceil(float(p["width"]) * numel))

    def _hashes(self, numel: int, state: dict) -> tuple[np.ndarray, np.ndarray]:
        """Flat bucket index r * c + h_r(j) and sign s_r(j), each (rows, numel); cached."""
        cached = state.get("sketch_hashes")
        if cached is not None and cached[0] == numel:
            return cached[1], cached[2]
        r, c = int(self.params["rows"]), self.ncols(numel)
        rng = np.random.default_rng([int(self.params["seed"]), numel])
        h = rng.integers(0, c, size=(r, numel), dtype=np.int64)
        h += (np.arange(r, dtype=np.int64) * c)[:, None]
        sign = (rng.integers(0, 2, size=(r, numel), dtype=np.int8) * 2 - 1).astype(np.float32)
        state["sketch_hashes"] = (numel, h, sign)
        return h, sign

    def _unsketch(self, table: np.ndarray, numel: int, state: dict) -> np.ndarray:
        h, sign = self._hashes(numel, state)
        est = np.median(sign * table[h], axis=0).astype(np.float32)
        if self.params["unsketch"] == "topk":
            k = min(numel, max(1, math.ceil(float(self.params["k_fraction"]) * numel)))
            if k < numel:
                keep = np.argpartition(-np.abs(est), k - 1)[:k]
                out = np.zeros(numel, np.float32)
                out[keep] = est[keep]
                est = out
        return est

    def compress(self, v, state, rng):
        v = as_f32_1d(v)
        h, sign = self._hashes(v.size, state)
        r, c = int(self.params["rows"]), self.ncols(v.size)
        w = (sign.astype(np.float64) * v.astype(np.float64)).reshape(-1)
        table64 = np.bincount(h.reshape(-1), weights=w, minlength=r * c)
        table = np.clip(table64, -_F32_MAX, _F32_MAX).astype("<f4")
        return Packet(table.tobytes(), self._unsketch(table.astype(np.float32), v.size, state),
                      None)

    def decompress(self, payload, numel, state):
        payload = bytes(payload)
        need = 4 * int(self.params["rows"]) * self.ncols(numel)
        if len(payload) != need:
            raise CorruptDataError(f"sketch: payload has {len(payload)} bytes, expected {need}")
        table = np.frombuffer(payload, dtype="<f4").astype(np.float32)
        if not np.all(np.isfinite(table)):
            raise CorruptDataError("sketch: the table holds a non-finite value")
        return self._unsketch(table, numel, state)


# ---------------------------------------------------------------------------------------
# TinyScript

_GRID = 1 << 16  # equal-mass quantiles of the fitted Weibull used to design the quantiser


def weibull_fit(a: np.ndarray) -> tuple[float, float] | None:
    """Weibull (shape k, scale lam) of the positive values ``a`` by the method of moments on
    log a; None when there are fewer than two distinct values. k is clipped to [0.1, 20]."""
    if a.size < 2:
        return None
    la = np.log(a.astype(np.float64))
    sd = float(np.std(la))
    if not sd > 0:
        return None
    k = min(max(math.pi / (math.sqrt(6.0) * sd), 0.1), 20.0)
    lam = math.exp(float(np.mean(la)) + np.euler_gamma / k)
    return k, lam


def lloyd_max_weibull(k: float, nlev: int, iters: int = 2000) -> np.ndarray:
    """Lloyd-Max levels (increasing, float64) for ``nlev`` levels of a unit-scale Weibull of
    shape ``k``, designed on ``2**16`` equal-mass quantiles (centroid / midpoint iteration)."""
    p = (np.arange(_GRID) + 0.5) / _GRID
    x = (-np.log1p(-p)) ** (1.0 / k)  # sorted
    cs = np.concatenate([[0.0], np.cumsum(x)])
    lev = x[((np.arange(nlev) + 0.5) / nlev * _GRID).astype(np.int64)]
    for _ in range(iters):
        edges = np.concatenate([[0], np.searchsorted(x, 0.5 * (lev[1:] + lev[:-1])), [_GRID]])
        cnt = np.diff(edges)
        new = np.where(cnt > 0, (cs[edges[1:]] - cs[edges[:-1]]) / np.maximum(cnt, 1), lev)
        if np.allclose(new, lev, rtol=1e-10, atol=0):
            lev = new
            break
        lev = new
    return lev


@COMPRESSORS.register
class TinyScript(Compressor):
    """TinyScript: a Lloyd-Max quantiser with 2**bits levels for a fitted double Weibull."""

    id = "tinyscript"
    PARAMS = {"bits": 2}

    def check(self) -> None:
        check_int("bits", self.params["bits"], 1, 8, who=f"{self.id}: ")

    def positive_levels(self, v: np.ndarray) -> np.ndarray:
        """The 2**(bits-1) positive levels (float32, increasing) designed for ``v``."""
        half = 1 << (int(self.params["bits"]) - 1)
        a = np.abs(v[v != 0]).astype(np.float64)
        fit = weibull_fit(a)
        if fit is None:
            top = float(a.max()) if a.size else 0.0
            return np.full(half, top, np.float32)
        k, lam = fit
        lev = lloyd_max_weibull(k, half) * lam
        return np.clip(lev, 0, _F32_MAX).astype(np.float32)

    @staticmethod
    def _levels(pos: np.ndarray) -> np.ndarray:
        return np.concatenate([-pos[::-1], pos]).astype(np.float32)

    def compress(self, v, state, rng):
        v = as_f32_1d(v)
        R = int(self.params["bits"])
        pos = self.positive_levels(v)
        lev = self._levels(pos)
        mids = 0.5 * (lev[1:].astype(np.float64) + lev[:-1].astype(np.float64))
        idx = np.searchsorted(mids, v.astype(np.float64)).astype(np.uint16)
        zero = v == 0
        if zero.any():  # exact zeros: the extra symbol 2**R (mode 2) or a bitmap (mode 3)
            idx[zero] = 1 << R
            lev = np.append(lev, np.float32(0))
            counts = np.bincount(idx, minlength=(1 << R) + 1)
            packed = np.packbits(zero).tobytes() + _pack_bits(idx[~zero], R)
            modes = (2, 3)
        else:
            counts = np.bincount(idx, minlength=1 << R)
            packed = _pack_bits(idx, R)
            modes = (1, 0)
        coded = _ans_pack(idx, counts)
        mode, body = (modes[0], coded) if len(coded) < len(packed) else (modes[1], packed)
        payload = bytes([mode]) + pos.astype("<f4").tobytes() + body
        return Packet(payload, lev[idx], entropy_bits(counts))

    def decompress(self, payload, numel, state):
        payload = bytes(payload)
        R = int(self.params["bits"])
        half = 1 << (R - 1)
        if len(payload) < 1 + 4 * half:
            raise CorruptDataError(f"tinyscript: payload of {len(payload)} bytes is truncated")
        mode = payload[0]
        pos = np.frombuffer(payload, dtype="<f4", count=half, offset=1).astype(np.float32)
        if not (np.all(np.isfinite(pos)) and np.all(pos >= 0)):
            raise CorruptDataError("tinyscript: bad levels")
        body = payload[1 + 4 * half:]
        lev = np.append(self._levels(pos), np.float32(0))  # index 2**R: exactly zero
        if mode == 0:
            idx = _unpack_bits(body, numel, R, "tinyscript")
        elif mode == 1:
            idx = _ans_unpack(body, 1 << R, numel, "tinyscript")
        elif mode == 2:
            idx = _ans_unpack(body, (1 << R) + 1, numel, "tinyscript")
        elif mode == 3:
            nb = -(-numel // 8)
            if len(body) < nb:
                raise CorruptDataError("tinyscript: zero bitmap truncated")
            zero = np.unpackbits(np.frombuffer(body[:nb], dtype=np.uint8)).astype(bool)
            if zero[numel:].any():
                raise CorruptDataError("tinyscript: zero bitmap padding bits are not zero")
            zero = zero[:numel]
            idx = np.full(numel, 1 << R, np.uint16)
            idx[~zero] = _unpack_bits(body[nb:], numel - int(zero.sum()), R, "tinyscript")
        else:
            raise CorruptDataError(f"tinyscript: unknown mode byte {mode}")
        return lev[idx]
