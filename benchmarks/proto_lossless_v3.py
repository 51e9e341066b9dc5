"""Prototype of a lossless table version 3 (not in the product): eight rANS lanes with a
16-bit renormalisation stream each, against the shipped version 2 (four lanes, one shared
stream, packed mantissa bits), on the same layers, timed interleaved in one run.

Variants (bytes counted as a chunk would hold them: 8 states, 8 lane lengths, streams, planes):

- ``v2``: the shipped fast coder (``FastTable.encode_steps`` / ``decode_steps``).
- ``v3-bits``: version 2's symbol and table (same k, t, frequencies), eight independent
  lanes, the low mantissa bits packed as version 2 packs them.
- ``v3-bytes``: ZipNN's byte split: symbol = the word's high byte (bf16: sign + 7 exponent
  bits; f16: sign, exponent, 2 mantissa bits; f32: sign + 7 exponent bits), coded in eight
  lanes; the remaining 1 / 3 low bytes stored raw (byte planes, one memcpy-like pass).

    PYTHONPATH=. python benchmarks/proto_lossless_v3.py [--repeat 7] [--dump a.h5 ...]

Kernel time only (process CPU time, medians of interleaved repetitions), per dump/type:
ns per word and total bytes of every variant.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np
from numba import njit

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
from bench_lossless import TYPES, load  # noqa: E402

from co3cli.coding import lossless_kernels as K  # noqa: E402
from co3cli.coding.lossless_fast import MODE_RANS, FastTable, fit_fast, normalize  # noqa: E402
from co3cli.coding.lossless import LAYOUTS  # noqa: E402

LANES = 8
LOW = np.uint64(1 << 15)


@njit(cache=True, nogil=True)
def enc8(words, sh, zmode, mag_bits, low_shift, zbase, xmax, rcp, rsh, bias, cmpl,
         streams, lens, states):
    """Symbols (``zmode``: version 2's, else ``w >> sh``) of ``words`` into 8 lanes, lane l
    writing backwards into ``streams[l]``; lens[l] = words written."""
    n = words.size
    mag_mask = (np.uint64(1) << np.uint64(mag_bits)) - np.uint64(1)
    cap = streams.shape[1]
    x = np.full(LANES, LOW, dtype=np.uint64)
    nw = np.full(LANES, cap, dtype=np.int64)
    ush = np.uint64(sh)
    for i in range(n - 1, -1, -1):
        w = np.uint64(words[i])
        if zmode:
            s = K._sym2(w, mag_mask, np.uint64(low_shift), zbase, mag_bits)
        else:
            s = w >> ush
        if xmax[s] == 0:
            return -1
        lane = i & 7
        xs = x[lane]
        emit = np.uint64(xs >= xmax[s])
        streams[lane, nw[lane] - 1] = np.uint16(xs & np.uint64(0xFFFF))
        nw[lane] -= np.int64(emit)
        xs >>= np.uint64(16) * emit
        q = ((xs * np.uint64(rcp[s])) >> np.uint64(32)) >> np.uint64(rsh[s])
        x[lane] = xs + np.uint64(bias[s]) + q * np.uint64(cmpl[s])
    for lane in range(LANES):
        lens[lane] = cap - nw[lane]
        states[lane] = x[lane]
    return 0


@njit(cache=True, nogil=True)
def enc8_unrolled(words, sh, xmax, rcp, rsh, bias, cmpl, streams, lens, states):
    """Byte-split symbols (``w >> sh``), 8 lanes, unrolled by 8 (n a multiple of 8 here,
    tail handled by the generic kernel in a product)."""
    n = words.size
    cap = streams.shape[1]
    x0 = x1 = x2 = x3 = x4 = x5 = x6 = x7 = LOW
    n0 = n1 = n2 = n3 = n4 = n5 = n6 = n7 = cap
    ush = np.uint64(sh)
    body = n - n % 8
    for i in range(body - 8, -1, -8):
        u = np.uint64(i)
        s7 = np.uint64(words[u + np.uint64(7)]) >> ush
        s6 = np.uint64(words[u + np.uint64(6)]) >> ush
        s5 = np.uint64(words[u + np.uint64(5)]) >> ush
        s4 = np.uint64(words[u + np.uint64(4)]) >> ush
        s3 = np.uint64(words[u + np.uint64(3)]) >> ush
        s2 = np.uint64(words[u + np.uint64(2)]) >> ush
        s1 = np.uint64(words[u + np.uint64(1)]) >> ush
        s0 = np.uint64(words[u]) >> ush
        x7, n7 = _e(x7, s7, xmax, rcp, rsh, bias, cmpl, streams, 7, n7)
        x6, n6 = _e(x6, s6, xmax, rcp, rsh, bias, cmpl, streams, 6, n6)
        x5, n5 = _e(x5, s5, xmax, rcp, rsh, bias, cmpl, streams, 5, n5)
        x4, n4 = _e(x4, s4, xmax, rcp, rsh, bias, cmpl, streams, 4, n4)
        x3, n3 = _e(x3, s3, xmax, rcp, rsh, bias, cmpl, streams, 3, n3)
        x2, n2 = _e(x2, s2, xmax, rcp, rsh, bias, cmpl, streams, 2, n2)
        x1, n1 = _e(x1, s1, xmax, rcp, rsh, bias, cmpl, streams, 1, n1)
        x0, n0 = _e(x0, s0, xmax, rcp, rsh, bias, cmpl, streams, 0, n0)
    states[0], states[1], states[2], states[3] = x0, x1, x2, x3
    states[4], states[5], states[6], states[7] = x4, x5, x6, x7
    lens[0], lens[1], lens[2], lens[3] = cap - n0, cap - n1, cap - n2, cap - n3
    lens[4], lens[5], lens[6], lens[7] = cap - n4, cap - n5, cap - n6, cap - n7
    return body


@njit(cache=True, nogil=True, inline="always")
def _e(x, s, xmax, rcp, rsh, bias, cmpl, streams, lane, nw):
    emit = np.uint64(x >= xmax[s])
    streams[lane, nw - 1] = np.uint16(x & np.uint64(0xFFFF))
    nw -= np.int64(emit)
    x >>= np.uint64(16) * emit
    q = ((x * np.uint64(rcp[s])) >> np.uint64(32)) >> np.uint64(rsh[s])
    return x + np.uint64(bias[s]) + q * np.uint64(cmpl[s]), nw


@njit(cache=True, nogil=True, inline="always")
def _d(x, tfb, th, mask, p, st, lane, pos):
    slot = x & mask
    e = np.uint64(tfb[slot])
    x = (e & np.uint64(0xFFFF)) * (x >> p) + (e >> np.uint64(16))
    need = x < LOW
    y = (x << np.uint64(16)) | np.uint64(st[lane, pos])
    return y if need else x, np.uint64(th[slot]), pos + np.int64(need)


@njit(cache=True, nogil=True)
def dec8_bytes(states, st, tfb, th, p, nb, planes, out):
    """8 lanes (``st[l]``: lane l's stream in reading order, zero-padded), word =
    th[slot] (the high part, shifted) | the ``nb`` raw low bytes ``planes[b, i]``."""
    mask = (np.uint64(1) << np.uint64(p)) - np.uint64(1)
    up = np.uint64(p)
    x0, x1, x2, x3 = states[0], states[1], states[2], states[3]
    x4, x5, x6, x7 = states[4], states[5], states[6], states[7]
    p0 = p1 = p2 = p3 = p4 = p5 = p6 = p7 = 0
    n = out.size
    body = n - n % 8
    for i in range(0, body, 8):
        u = np.uint64(i)
        x0, h0, p0 = _d(x0, tfb, th, mask, up, st, 0, p0)
        x1, h1, p1 = _d(x1, tfb, th, mask, up, st, 1, p1)
        x2, h2, p2 = _d(x2, tfb, th, mask, up, st, 2, p2)
        x3, h3, p3 = _d(x3, tfb, th, mask, up, st, 3, p3)
        x4, h4, p4 = _d(x4, tfb, th, mask, up, st, 4, p4)
        x5, h5, p5 = _d(x5, tfb, th, mask, up, st, 5, p5)
        x6, h6, p6 = _d(x6, tfb, th, mask, up, st, 6, p6)
        x7, h7, p7 = _d(x7, tfb, th, mask, up, st, 7, p7)
        if nb == 1:
            out[u] = h0 | np.uint64(planes[0, u])
            out[u + np.uint64(1)] = h1 | np.uint64(planes[0, u + np.uint64(1)])
            out[u + np.uint64(2)] = h2 | np.uint64(planes[0, u + np.uint64(2)])
            out[u + np.uint64(3)] = h3 | np.uint64(planes[0, u + np.uint64(3)])
            out[u + np.uint64(4)] = h4 | np.uint64(planes[0, u + np.uint64(4)])
            out[u + np.uint64(5)] = h5 | np.uint64(planes[0, u + np.uint64(5)])
            out[u + np.uint64(6)] = h6 | np.uint64(planes[0, u + np.uint64(6)])
            out[u + np.uint64(7)] = h7 | np.uint64(planes[0, u + np.uint64(7)])
        else:
            out[u] = h0
            out[u + np.uint64(1)] = h1
            out[u + np.uint64(2)] = h2
            out[u + np.uint64(3)] = h3
            out[u + np.uint64(4)] = h4
            out[u + np.uint64(5)] = h5
            out[u + np.uint64(6)] = h6
            out[u + np.uint64(7)] = h7
    if nb == 3:  # the three low bytes, one pass (the plane holds them as 24-bit groups)
        for i in range(body):
            out[i] |= np.uint64(planes[0, i]) | (np.uint64(planes[1, i]) << np.uint64(8)) | \
                (np.uint64(planes[2, i]) << np.uint64(16))
    ok = x0 == LOW and x1 == LOW and x2 == LOW and x3 == LOW and x4 == LOW and x5 == LOW \
        and x6 == LOW and x7 == LOW
    return ok, p0 + p1 + p2 + p3 + p4 + p5 + p6 + p7


@njit(cache=True, nogil=True, inline="always")
def _four(h0, h1, h2, h3, t, bp, packed, out, u):
    """Four words' bits (<= 32) from one 64-bit window (version 2's narrow path)."""
    j = np.uint64(bp) >> np.uint64(5)
    v = (np.uint64(packed[j]) | (np.uint64(packed[j + np.uint64(1)]) << np.uint64(32))) \
        >> np.uint64(bp & 31)
    one = np.uint64(1)
    d0 = h0 & np.uint64(31)
    d1 = h1 & np.uint64(31)
    d2 = h2 & np.uint64(31)
    d3 = h3 & np.uint64(31)
    out[u] = (h0 ^ d0) | ((v & ((one << d0) - one)) << t)
    v >>= d0
    out[u + one] = (h1 ^ d1) | ((v & ((one << d1) - one)) << t)
    v >>= d1
    out[u + np.uint64(2)] = (h2 ^ d2) | ((v & ((one << d2) - one)) << t)
    v >>= d2
    out[u + np.uint64(3)] = (h3 ^ d3) | ((v & ((one << d3) - one)) << t)
    return bp + np.int64(d0 + d1 + d2 + d3)


@njit(cache=True, nogil=True)
def dec8_bits(states, st, tfb, th, p, t, narrow, packed, out):
    """8 lanes, version 2's symbol words and packed low mantissa bits."""
    mask = (np.uint64(1) << np.uint64(p)) - np.uint64(1)
    up = np.uint64(p)
    ut = np.uint64(t)
    x0, x1, x2, x3 = states[0], states[1], states[2], states[3]
    x4, x5, x6, x7 = states[4], states[5], states[6], states[7]
    p0 = p1 = p2 = p3 = p4 = p5 = p6 = p7 = 0
    bp = 0
    n = out.size
    body = n - n % 8
    for i in range(0, body, 8):
        u = np.uint64(i)
        x0, h0, p0 = _d(x0, tfb, th, mask, up, st, 0, p0)
        x1, h1, p1 = _d(x1, tfb, th, mask, up, st, 1, p1)
        x2, h2, p2 = _d(x2, tfb, th, mask, up, st, 2, p2)
        x3, h3, p3 = _d(x3, tfb, th, mask, up, st, 3, p3)
        x4, h4, p4 = _d(x4, tfb, th, mask, up, st, 4, p4)
        x5, h5, p5 = _d(x5, tfb, th, mask, up, st, 5, p5)
        x6, h6, p6 = _d(x6, tfb, th, mask, up, st, 6, p6)
        x7, h7, p7 = _d(x7, tfb, th, mask, up, st, 7, p7)
        if narrow:
            bp = _four(h0, h1, h2, h3, ut, bp, packed, out, u)
            bp = _four(h4, h5, h6, h7, ut, bp, packed, out, u + np.uint64(4))
        else:
            w, bp = K._word2(h0, ut, bp, packed)
            out[u] = w
            w, bp = K._word2(h1, ut, bp, packed)
            out[u + np.uint64(1)] = w
            w, bp = K._word2(h2, ut, bp, packed)
            out[u + np.uint64(2)] = w
            w, bp = K._word2(h3, ut, bp, packed)
            out[u + np.uint64(3)] = w
            w, bp = K._word2(h4, ut, bp, packed)
            out[u + np.uint64(4)] = w
            w, bp = K._word2(h5, ut, bp, packed)
            out[u + np.uint64(5)] = w
            w, bp = K._word2(h6, ut, bp, packed)
            out[u + np.uint64(6)] = w
            w, bp = K._word2(h7, ut, bp, packed)
            out[u + np.uint64(7)] = w
    ok = x0 == LOW and x1 == LOW and x2 == LOW and x3 == LOW and x4 == LOW and x5 == LOW \
        and x6 == LOW and x7 == LOW
    return ok, bp


def enc_tables(freqs, prec):
    cum = np.zeros_like(freqs)
    np.cumsum(freqs[:-1], out=cum[1:])
    tabs = tuple(np.empty(freqs.size, dtype=np.uint64) for _ in range(5))
    K.enc_tables2(freqs, cum, prec, *tabs)
    return tabs, cum


def slot_tfb(freqs, cum, prec):
    present = np.flatnonzero(freqs)
    f = freqs[present].astype(np.int64)
    sym = np.repeat(present, f)
    off = np.arange(1 << prec) - np.repeat(cum[present].astype(np.int64), f)
    return (freqs[sym].astype(np.uint32) | (off.astype(np.uint32) << 16)), sym


def lane_streams(streams, lens, n):
    """Each lane's stream in reading order, zero-padded (the decoder's input)."""
    cap = streams.shape[1]
    st = np.zeros((LANES, n // LANES + 2), dtype=np.uint16)
    for lane in range(LANES):
        m = int(lens[lane])
        st[lane, :m] = streams[lane, cap - m:]
    return st


class ByteSplit:
    """Variant v3-bytes over one layer (all steps counted together)."""

    def __init__(self, words, bits):
        self.nb = 3 if bits == 32 else 1
        self.sh = 8 * self.nb
        counts = np.bincount((words.ravel() >> self.sh).astype(np.int64), minlength=256)
        self.prec = 12
        self.freqs = normalize(counts, self.prec)
        self.tabs, cum = enc_tables(self.freqs, self.prec)
        tfb, sym = slot_tfb(self.freqs, cum, self.prec)
        self.tfb = tfb
        self.th = (sym.astype(np.uint64) << np.uint64(self.sh)).astype(np.uint32)
        self.table_bytes = 8 + 3 * int(np.count_nonzero(self.freqs))

    def encode(self, w):
        n = w.size
        streams = np.empty((LANES, n // LANES + 2), dtype=np.uint16)
        lens = np.empty(LANES, dtype=np.int64)
        states = np.empty(LANES, dtype=np.uint64)
        enc8_unrolled(w, self.sh, *self.tabs, streams, lens, states)
        le = w.view(np.uint8).reshape(n, -1)
        planes = np.ascontiguousarray(le[:, :self.nb].T)  # byte planes (raw)
        return streams, lens, states, planes

    def size(self, enc):
        streams, lens, states, planes = enc
        return 4 * LANES + 2 * LANES + 2 * int(lens.sum()) + planes.size

    def decode(self, enc, n, dtype):
        streams, lens, states, planes = enc
        st = lane_streams(streams, lens, n)
        out = np.empty(n, dtype=dtype)
        ok, used = dec8_bytes(states, st, self.tfb, self.th, self.prec, self.nb, planes, out)
        assert ok and used == int(lens.sum())
        return out


class Bits8:
    """Variant v3-bits: version 2's table, eight lanes."""

    def __init__(self, table: FastTable):
        self.t = table
        self.tabs, _ = enc_tables(table.freqs, table.precision)
        self.tfb, self.th = table.slot_tables

    def encode(self, w):
        tb = self.t
        n = w.size
        streams = np.empty((LANES, n // LANES + 2), dtype=np.uint16)
        lens = np.empty(LANES, dtype=np.int64)
        states = np.empty(LANES, dtype=np.uint64)
        mag = tb.layout.bits - 1
        enc8(w, 0, True, mag, mag - tb.ek, tb.zbase, *self.tabs, streams, lens, states)
        # the packed bits: version 2's packer (its rANS part re-run costs the same as before:
        # not counted here; the packing is ~0.85 ns/word on the ResNet's largest layer)
        return streams, lens, states

    def size(self, enc, nbits):
        streams, lens, states = enc
        return 4 * LANES + 2 * LANES + 2 * int(lens.sum()) + (nbits + 7) // 8

    def decode(self, enc, n, dtype, packed):
        streams, lens, states = enc
        st = lane_streams(streams, lens, n)
        out = np.empty(n, dtype=dtype)
        ok, bp = dec8_bits(states, st, self.tfb, self.th, self.t.precision, self.t.t, self.t.width <= 8, packed,
                           out)
        assert ok
        return out


def timeit(fn, reps):
    ts = []
    for _ in range(reps):
        t0 = time.process_time()
        fn()
        ts.append(time.process_time() - t0)
    return float(np.median(ts))


def kernel_only(words, layout, reps):
    """Decoder kernels alone (no framing, no allocation) on one step of the largest layer:
    ns per word, min over ``reps`` interleaved runs: v2 decode2, v3-bits, v3-bytes."""
    tab = fit_fast(words, layout)
    if tab.mode != MODE_RANS:
        return None
    w = words[0]
    n = w.size - w.size % 8
    w = np.ascontiguousarray(w[:n])
    rw = np.zeros(n + 4, dtype=np.uint16)
    packed = np.zeros((n * tab.width + 31) // 32 + 2, dtype=np.uint32)
    st4 = np.empty(4, dtype=np.uint64)
    start, nbits = K.encode2(w, tab.params, *tab._enc_tables(), rw, packed, st4)
    rw2 = np.zeros(n + 1, dtype=np.uint16)
    rw2[:rw.size - start] = rw[start:]
    nw = rw.size - start
    tfb, th = tab.slot_tables
    out = np.empty(n, dtype=w.dtype)
    b8 = Bits8(tab)
    e8 = b8.encode(w)
    st8 = lane_streams(e8[0], e8[1], n)
    bs = ByteSplit(words, layout.bits)
    eb = bs.encode(w)
    stb = lane_streams(eb[0], eb[1], n)
    f = {"v2": lambda: K.decode2(st4, nw, rw2, packed, tfb, th, tab.params, out),
         "v3-bits": lambda: dec8_bits(e8[2], st8, b8.tfb, b8.th, tab.precision, tab.t,
                                      tab.width <= 8, packed, out),
         "v3-bytes": lambda: dec8_bytes(eb[2], stb, bs.tfb, bs.th, bs.prec, bs.nb, eb[3], out)}
    best = dict.fromkeys(f, 1e9)
    for fn in f.values():
        fn()
    for _ in range(reps):
        for k, fn in f.items():
            t0 = time.perf_counter()
            fn()
            best[k] = min(best[k], time.perf_counter() - t0)
    return {k: 1e9 * v / n for k, v in best.items()}, n, tab.width


def run(label, path, dtype, reps):
    layers, _ = load(path, dtype)
    layout = LAYOUTS[dtype]
    tot = dict.fromkeys(("v2", "v3-bits", "v3-bytes"), 0)
    tim = {k: [0.0, 0.0] for k in tot}
    nwords = 0
    hybrid = [0, 0]  # bytes, words given to the byte split
    for name, w, _ in layers:
        words = np.ascontiguousarray(w.reshape(w.shape[0], -1))
        steps, n = words.shape
        if n < 64 or n % 8:
            continue  # prototype: whole 8-word groups only
        nwords += words.size
        tab = fit_fast(words, layout)
        if tab.mode != MODE_RANS:
            continue
        bodies = tab.encode_steps(words)
        size2 = sum(map(len, bodies)) + len(tab.to_bytes())
        tot["v2"] += size2
        bs = ByteSplit(words, layout.bits)
        b8 = Bits8(tab)
        encs_b = [bs.encode(words[r]) for r in range(steps)]
        sizeb = sum(bs.size(e) for e in encs_b) + bs.table_bytes
        tot["v3-bytes"] += sizeb
        # a per-layer choice: the byte split where it costs <= 0.5 % over v2, else v2
        pick = sizeb <= 1.005 * size2
        hybrid[0] += sizeb if pick else size2
        hybrid[1] += words.size if pick else 0
        for r in range(steps):
            assert np.array_equal(bs.decode(encs_b[r], n, words.dtype), words[r])
        # v2's packed bits of each step (for v3-bits' decoder and its size)
        packs = []
        for r in range(steps):
            rw = np.empty(n + 4, dtype=np.uint16)
            packed = np.zeros((n * tab.width + 31) // 32 + 2, dtype=np.uint32)
            st4 = np.empty(4, dtype=np.uint64)
            _, nbits = K.encode2(words[r], tab.params, *tab._enc_tables(), rw, packed, st4)
            packs.append((packed, nbits))
        encs_8 = [b8.encode(words[r]) for r in range(steps)]
        tot["v3-bits"] += sum(b8.size(e, packs[r][1]) for r, e in enumerate(encs_8)) + \
            len(tab.to_bytes())
        for r in range(steps):
            assert np.array_equal(b8.decode(encs_8[r], n, words.dtype, packs[r][0]), words[r])
        fns = {
            "v2": (lambda: tab.encode_steps(words), lambda: tab.decode_steps(bodies, n)),
            "v3-bits": (lambda: [b8.encode(words[r]) for r in range(steps)],
                        lambda: [b8.decode(encs_8[r], n, words.dtype, packs[r][0])
                                 for r in range(steps)]),
            "v3-bytes": (lambda: [bs.encode(words[r]) for r in range(steps)],
                         lambda: [bs.decode(encs_b[r], n, words.dtype) for r in range(steps)]),
        }
        for e, d in fns.values():  # warm (compilation, caches)
            e()
            d()
        for _ in range(reps):  # interleaved
            for k, (e, d) in fns.items():
                tim[k][0] += timeit(e, 1) / reps
                tim[k][1] += timeit(d, 1) / reps
    row = {k: (tot[k], 1e9 * tim[k][0] / nwords, 1e9 * tim[k][1] / nwords) for k in tot}
    row["hybrid"] = (hybrid[0], hybrid[1] / max(nwords, 1))
    big = max(layers, key=lambda x: x[1][0].size)[1]
    row["kernel"] = kernel_only(np.ascontiguousarray(big.reshape(big.shape[0], -1)), layout,
                                4 * reps)
    return row


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--dump", nargs="*", default=None)
    a = ap.parse_args(argv)
    dumps = a.dump or [str(p) for p in sorted((ROOT / "co3cli" / "sample_data").glob("*.h5"))]
    print(os.popen("uptime").read().strip())
    print("| dump | type | v2 bytes | v3-bits bytes (/v2) | v3-bytes bytes (/v2) | "
          "v2 enc/dec ns/word | v3-bits enc(rANS only)/dec | v3-bytes enc/dec |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    kern, hyb = [], []
    for path in dumps:
        for dtype in TYPES:
            r = run(Path(path).stem, path, dtype, a.repeat)
            v2 = r["v2"][0]
            print(f"| {Path(path).stem} | {dtype} | {v2} | {r['v3-bits'][0]} "
                  f"({r['v3-bits'][0] / v2:.4f}) | {r['v3-bytes'][0]} ({r['v3-bytes'][0] / v2:.4f})"
                  f" | {r['v2'][1]:.2f} / {r['v2'][2]:.2f} | {r['v3-bits'][1]:.2f} / "
                  f"{r['v3-bits'][2]:.2f} | {r['v3-bytes'][1]:.2f} / {r['v3-bytes'][2]:.2f} |",
                  flush=True)
            kern.append((Path(path).stem, dtype, r["kernel"]))
            hyb.append((Path(path).stem, dtype, v2, r["hybrid"]))
    print("\nDecoder kernels alone, one step of the largest layer (ns/word, min of runs):")
    print("| dump | type | words | width | v2 decode2 | v3-bits | v3-bytes |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for stem, dtype, kr in kern:
        if kr:
            t, n, wd = kr
            print(f"| {stem} | {dtype} | {n} | {wd} | {t['v2']:.2f} | {t['v3-bits']:.2f} | "
                  f"{t['v3-bytes']:.2f} |")
    print("\nPer-layer choice (byte split where its bytes <= 1.005 x v2's, else v2):")
    print("| dump | type | bytes / v2 | share of words byte-split |")
    print("|---|---|---:|---:|")
    for stem, dtype, v2, (hb, share) in hyb:
        print(f"| {stem} | {dtype} | {hb / v2:.4f} | {share:.3f} |")
    print(os.popen("uptime").read().strip())


if __name__ == "__main__":
    main()
