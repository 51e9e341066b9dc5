"""Numba kernels of the context-adaptive coder ``ctx`` (model and coder described in
``co3cli/coding/ctx.py``).

Two implementations of the same model, the same bits:

* ``encode_kernel`` / ``decode_kernel``: the coder in use.  One model function
  (``_run_fast``, inlined into both with ``decode`` a compile-time constant, so each
  direction compiles without the other's branches) codes each symbol as a zero flag, then
  (nonzero only) the magnitude path and the sign.  The encoder walks each magnitude's
  precomputed (node, bit) path; the decoder walks the tree.  Neighbours come from two
  row buffers (magnitude and sign class of the row above and of this row) instead of
  re-reading and re-centring the symbols; the inlined helpers take scalars only (an array
  argument costs two atomic reference-count updates per call); the encoder writes its
  bytes directly and propagates a carry backwards (the same bytes as the cached-byte
  scheme of the reference).
* ``co3cli.coding.ctx_reference.run_reference``: the first implementation (co3cli 0.1.0,
  one loop over the decisions with a stage switch), kept to check the fast kernels against
  it bit for bit and to time them against it (``benchmarks/bench_ctx.py``).

Data flow::

    CtxTable (prior -> tree, initial probabilities) --> encode_kernel(sym) --> bytes
    bytes --> decode_kernel --> sym        (status codes: see ``_run_fast``)
"""

from __future__ import annotations

import numpy as np
from numba import njit

PROB_BITS = 16
PROB_ONE = 1 << PROB_BITS
PMIN = 32
"""Probabilities of a 1 stay in ``[PMIN, 2**16 - PMIN]``: at most 11 bits per decision."""
N0 = 2
"""Initial count (weight of the prior) of every adaptive probability."""
TOP = 1 << 24
"""The range coder renormalises while its range is below this."""

FP = 4
"""Fixed-point bits of the magnitude predictor (16 units per magnitude index)."""
NB = 32
"""Buckets of the predicted magnitude in the magnitude contexts."""
NCONF = 3
"""Confidence levels of the prediction."""
NZP = 4
"""Buckets of the predicted magnitude in the zero-flag contexts."""
ZCAP = 4
ZRUN = np.array([0, 1, 2, 3, 3, 4], dtype=np.int64)
"""Zero-run class, indexed by run + 1 (run -1: no neighbour): absent, 0, 1, 2-3, 4+."""
NZPARENT = 25
NZCTX = 25 * 8 * NZP
NSCTX = 3 * 3 * 5 * 5
ROW_CAP = 16
"""The row offset is the mean of at most this many of the row's last residuals."""
COL_CAP = 32
"""A column estimate is the mean over at most this many rows."""


# ---------------------------------------------------------------------------------------
# Prior -> initial model (integers only)


@njit(cache=True, nogil=True)
def build_tree(w):  # pragma: no cover - compiled
    """Weight-balanced, order-preserving binary tree over magnitudes ``1..w.size``
    (``w[k - 1] >= 1`` weighs magnitude k): each range is split where the two halves'
    weights are closest (first such split).  Returns ``child`` (2 per node, flat; >= 0 a
    node, < 0 the leaf ``-k``), ``p1`` (16-bit prior probability of the right branch per
    node) and the leaf paths from the root: bits ``path_bit[path_off[k]:path_off[k+1]]``."""
    m = w.size
    nint = max(m - 1, 1)
    child = np.zeros(2 * nint, dtype=np.int64)
    p1 = np.full(nint, PROB_ONE // 2, dtype=np.int64)
    path_off = np.zeros(m + 2, dtype=np.int64)
    if m <= 1:
        return child, p1, path_off, np.zeros(0, dtype=np.int64)
    cum = np.zeros(m + 1, dtype=np.int64)
    for k in range(m):
        cum[k + 1] = cum[k] + w[k]
    leaf_link = np.full(m + 1, -1, dtype=np.int64)   # leaf k -> 2 * parent + branch
    node_link = np.full(nint, -1, dtype=np.int64)    # node -> 2 * parent + branch
    stack = np.empty((m, 3), dtype=np.int64)         # (lo, hi, node), 0-based leaves
    stack[0, 0] = 0
    stack[0, 1] = m - 1
    stack[0, 2] = 0
    sp = 1
    nxt = 1
    while sp > 0:
        sp -= 1
        lo = stack[sp, 0]
        hi = stack[sp, 1]
        node = stack[sp, 2]
        total = cum[hi + 1] - cum[lo]
        best = lo
        bestd = total + 1
        for s in range(lo, hi):
            dlt = abs(2 * (cum[s + 1] - cum[lo]) - total)
            if dlt < bestd:
                bestd = dlt
                best = s
            elif dlt > bestd:
                break  # |left - right| only grows from here
        wr = cum[hi + 1] - cum[best + 1]
        p1[node] = min(max((2 * wr * PROB_ONE + total) // (2 * total), PMIN), PROB_ONE - PMIN)
        for side in range(2):
            a = lo if side == 0 else best + 1
            b = best if side == 0 else hi
            if a == b:
                child[2 * node + side] = -(a + 1)
                leaf_link[a + 1] = 2 * node + side
            else:
                child[2 * node + side] = nxt
                node_link[nxt] = 2 * node + side
                stack[sp, 0] = a
                stack[sp, 1] = b
                stack[sp, 2] = nxt
                sp += 1
                nxt += 1
    for k in range(1, m + 1):
        depth = 0
        link = leaf_link[k]
        while link >= 0:
            depth += 1
            link = node_link[link >> 1]
        path_off[k + 1] = path_off[k] + depth
    path_bit = np.empty(path_off[m + 1], dtype=np.int64)
    for k in range(1, m + 1):
        q = path_off[k + 1]
        link = leaf_link[k]
        while link >= 0:
            q -= 1
            path_bit[q] = link & 1
            link = node_link[link >> 1]
    return child, p1, path_off, path_bit


RECIP = np.array([(2 * PROB_ONE) // (2 * k + 3) for k in range(256)], dtype=np.int64)
"""Adaptation step ``2**16 / (count + 1.5)`` per count."""


# ---------------------------------------------------------------------------------------
# Fast kernels: the same model and bits as ``ctx_reference.run_reference``


@njit(cache=True, nogil=True)
def path_nodes(child, path_off, path_bit):  # pragma: no cover - compiled
    """The tree node of every decision on every leaf path (aligned with ``path_bit``): the
    encoder codes magnitude k as ``(path_node[q], path_bit[q])`` for q in its path."""
    out = np.zeros(path_bit.size, dtype=np.int64)
    for k in range(1, path_off.size - 1):
        node = 0
        for q in range(path_off[k], path_off[k + 1]):
            out[q] = node
            node = child[2 * node + path_bit[q]]
    return out

# ---------------------------------------------------------------------------------------
# Reference kernel (co3cli 0.1.0).  One function runs the model in both directions, so the
# encoder and the decoder cannot drift apart; ``decode`` only selects the coder half of
# each decision.


@njit(cache=True, nogil=True, inline="always")
def _adapt(st, bit, limit, step):  # pragma: no cover - compiled
    """One adaptive probability ``(p << 8) | count`` after coding ``bit``: ``p`` moves
    towards it by ``step / 2**16`` (``RECIP[count]``, clamped), the count grows up to
    ``limit``.  Scalars only: an array argument of an inlined function costs a reference
    count update (an atomic) per call."""
    p = st >> 8
    cnt = st & 0xFF
    p += (((bit << PROB_BITS) - p) * step) >> 16
    p = min(max(p, PMIN), PROB_ONE - PMIN)
    cnt += 1 if cnt < limit else 0
    return (p << 8) | cnt


@njit(cache=True, nogil=True, inline="always")
def _code(decode, bit, p, rng, low, code):  # pragma: no cover - compiled
    """One binary decision with probability ``p`` (of a 1, 16 bits), before the
    renormalisation: returns ``(bit, rng, low, code)``; the decoder's bit is decoded."""
    bound = (rng >> 16) * p
    if decode:
        bit = 1 if code < bound else 0
    keep = bit - 1   # 0 for a 1, all ones for a 0
    if decode:
        code -= bound & keep
    else:
        low += bound & keep
    return bit, bound + ((rng - 2 * bound) & keep), low, code


@njit(cache=True, nogil=True, inline="always")
def _run_fast(decode, sym, buf, cols, K, mmax, pz0, ps0, child, tp1, path_off, path_bit,
              path_node, limit, recip):  # pragma: no cover - compiled
    """``run_reference`` restructured for speed, same statuses and the same bits.

    Per symbol: the zero flag; only for a nonzero symbol the magnitude decisions and the
    sign (with their contexts computed there); then the statistics."""
    n = sym.size
    nbuf = buf.size
    low = 0
    rng = 0xFFFFFFFF
    pos = 0
    code = 0
    fail_status = 1 if decode else 2   # ran out of bytes / of output buffer
    if decode:
        if nbuf < 4:
            return 3, 0
        for k in range(4):
            code = (code << 8) | np.int64(buf[k])
        pos = 4
        if code >= rng:
            return 3, 0
    else:
        for i in range(n):
            if sym[i] > K + mmax:
                return 1, i
        if nbuf < 5:
            return 2, 0
        buf[0] = 0   # the byte a carry out of ``low`` would go to: always 0
        pos = 1
    nint = child.size // 2
    sbase = NZCTX
    mbase = NZCTX + NSCTX
    nmctx = NB * NCONF
    PR = np.zeros(mbase + nmctx * nint, dtype=np.int32)
    PR[sbase:mbase] = (ps0 << 8) | N0
    zparent = np.full(NZPARENT, (pz0 << 8) | N0, dtype=np.int64)
    minit = np.zeros(nmctx, dtype=np.bool_)
    col_est = np.zeros(cols, dtype=np.int64)
    col_n = np.zeros(cols, dtype=np.int64)
    col_z = np.full(cols, -1, dtype=np.int64)
    # magnitudes and sign classes (0 zero, 1 +, 2 -) of the row above and of this row;
    # -1 (absent) past either end of the row and above the first row
    up_m = np.full(cols + 2, -1, dtype=np.int64)
    up_s = np.zeros(cols + 2, dtype=np.int64)
    cur_m = np.full(cols + 2, -1, dtype=np.int64)
    cur_s = np.zeros(cols + 2, dtype=np.int64)
    # neighbours of the next entry: left a, left-left e, up b, up-left c, up-right d
    a = -1
    e = -1
    sa = 0
    c = -1
    b = up_m[0]
    sb = up_s[0]
    d = up_m[1]
    mean_step = np.zeros(max(ROW_CAP, COL_CAP) + 1, dtype=np.int64)
    for k in range(1, mean_step.size):
        mean_step[k] = PROB_ONE // k
    pmax = mmax << FP
    pscale = (mmax + 1) << FP
    bmul = (NB << 32) // pscale
    zmul = (NZP << 32) // pscale
    j = 0
    ro = 0
    ron = 0
    last_off = 0
    row_z = -1
    rpos = 0
    rneg = 0
    agree = 0
    differ = 0
    lastnz = 0
    prev_pb = 0
    wl = 0
    sxy = 0
    sxx = 0
    for i in range(n):
        # ---------------- prediction (selects, no data-dependent jumps)
        cn = col_n[j]
        ce = col_est[j]
        if cn > 0:
            pb = ce + (ro if ron > 0 else last_off)
            conf = 2 if ron > 0 else 1
        else:
            pb = (a if a > 0 else (b if b > 0 else lastnz)) << FP
            conf = 0
        pb = min(max(pb, 0), pmax)
        lx = ((a << FP) - prev_pb) if a > 0 else 0
        P = min(max(pb + ((wl * lx) >> 8), 0), pmax)
        prev_pb = pb
        zp = ZRUN[row_z + 1] * 5 + ZRUN[col_z[j] + 1]
        zc = ((zp * 8 + (1 if c == 0 else 0) + (2 if d == 0 else 0) + (4 if e == 0 else 0))
              * NZP + ((P * zmul) >> 32))
        v = 0
        neg = 0
        if not decode:
            t = np.int64(sym[i]) - K
            v = abs(t)
            neg = 1 if t < 0 else 0
        if mmax > 0:
            # ---------------- zero flag
            st = np.int64(PR[zc])
            if st == 0:  # first use: start from the parent context
                st = (zparent[zp] & ~0xFF) | N0
            bit, rng, low, code = _code(decode, 1 if v == 0 else 0, st >> 8, rng, low, code)
            while rng < TOP:
                if pos >= nbuf:
                    return fail_status, 0
                if decode:
                    code = ((code << 8) | np.int64(buf[pos])) & 0xFFFFFFFF
                else:
                    if low >= 0x100000000:  # carry into the bytes written
                        low -= 0x100000000
                        k = pos - 1
                        while buf[k] == 0xFF:
                            buf[k] = 0
                            k -= 1
                        buf[k] += 1
                    buf[pos] = low >> 24
                    low = (low & 0xFFFFFF) << 8
                pos += 1
                rng <<= 8
            PR[zc] = _adapt(st, bit, limit, recip[st & 0xFF])
            zpt = zparent[zp]
            zparent[zp] = _adapt(zpt, bit, limit, recip[zpt & 0xFF])
            if bit == 0:
                # ---------------- magnitude: the tree path under context mc
                mc = ((P * bmul) >> 32) * NCONF + conf
                mb = mbase + mc * nint
                if not minit[mc]:   # first use of a magnitude context: the prior
                    minit[mc] = True
                    for k in range(nint):
                        PR[mb + k] = (tp1[k] << 8) | N0
                if mmax == 1:
                    v = 1
                elif decode:
                    # both children and their states are loaded before the bit is known,
                    # so the next decision waits only for a select, not for two loads
                    node = 0
                    st = np.int64(PR[mb])
                    while True:
                        c0 = child[2 * node]
                        c1 = child[2 * node + 1]
                        s0 = np.int64(PR[mb + max(c0, 0)])
                        s1 = np.int64(PR[mb + max(c1, 0)])
                        bit, rng, low, code = _code(True, 0, st >> 8, rng, low, code)
                        while rng < TOP:
                            if pos >= nbuf:
                                return fail_status, 0
                            code = ((code << 8) | np.int64(buf[pos])) & 0xFFFFFFFF
                            pos += 1
                            rng <<= 8
                        PR[mb + node] = _adapt(st, bit, limit, recip[st & 0xFF])
                        nxt = c1 if bit else c0
                        if nxt < 0:
                            v = -nxt
                            break
                        st = s1 if bit else s0
                        node = nxt
                else:
                    for q in range(path_off[v], path_off[v + 1]):
                        idx = mb + path_node[q]
                        st = np.int64(PR[idx])
                        bit = path_bit[q]
                        bit, rng, low, code = _code(False, bit, st >> 8, rng, low, code)
                        while rng < TOP:
                            if pos >= nbuf:
                                return fail_status, 0
                            if decode:
                                code = ((code << 8) | np.int64(buf[pos])) & 0xFFFFFFFF
                            else:
                                if low >= 0x100000000:  # carry into the bytes written
                                    low -= 0x100000000
                                    k = pos - 1
                                    while buf[k] == 0xFF:
                                        buf[k] = 0
                                        k -= 1
                                    buf[k] += 1
                                buf[pos] = low >> 24
                                low = (low & 0xFFFFFF) << 8
                            pos += 1
                            rng <<= 8
                        PR[idx] = _adapt(st, bit, limit, recip[st & 0xFF])
                # ---------------- sign (only where -v exists)
                if v <= K:
                    rt = rpos + rneg
                    rb = 0 if rt == 0 else (1 if 4 * rneg < rt else (
                        2 if 4 * rneg > 3 * rt else (3 if 2 * rneg < rt else 4)))
                    at = agree + differ
                    ab = 0 if at == 0 else (1 if 4 * differ < at else (
                        2 if 4 * differ > 3 * at else (3 if 2 * differ < at else 4)))
                    sp = 0 if sb == 0 or at == 0 else (sb if 2 * differ < at else 3 - sb)
                    idx = sbase + ((sa * 3 + sp) * 5 + ab) * 5 + rb
                    st = np.int64(PR[idx])
                    neg, rng, low, code = _code(decode, neg, st >> 8, rng, low, code)
                    while rng < TOP:
                        if pos >= nbuf:
                            return fail_status, 0
                        if decode:
                            code = ((code << 8) | np.int64(buf[pos])) & 0xFFFFFFFF
                        else:
                            if low >= 0x100000000:  # carry into the bytes written
                                low -= 0x100000000
                                k = pos - 1
                                while buf[k] == 0xFF:
                                    buf[k] = 0
                                    k -= 1
                                buf[k] += 1
                            buf[pos] = low >> 24
                            low = (low & 0xFFFFFF) << 8
                        pos += 1
                        rng <<= 8
                    PR[idx] = _adapt(st, neg, limit, recip[st & 0xFF])
                else:
                    neg = 0
            else:
                v = 0
                neg = 0
        if decode:
            sym[i] = K - v if neg else K + v
        # ---------------- statistics (the branch repeats the zero flag's: well predicted)
        if v == 0:
            nz = 0
            row_z = min(max(row_z, 0) + 1, ZCAP)
            col_z[j] = min(max(col_z[j], 0) + 1, ZCAP)
        else:
            nz = 1
            row_z = 0
            col_z[j] = 0
            lastnz = v
            rneg += neg
            rpos += 1 - neg
            if sb != 0:
                same = 1 if (sb == 2) == (neg == 1) else 0
                agree += same
                differ += 1 - same
            if cn > 0:
                ron += 1 if ron < ROW_CAP else 0
                ro += (((v << FP) - ce - ro) * mean_step[ron]) >> 16
            sxy += lx * ((v << FP) - pb)
            sxx += lx * lx
        sv = nz + neg
        cur_m[j] = v
        cur_s[j] = sv
        e = a
        a = v
        sa = sv
        c = b
        b = d
        sb = up_s[j + 1]
        d = up_m[j + 2]
        j += 1
        if j == cols:
            # end of row: refit the left-error weight, update the column estimates
            if sxx > 0:
                wl = min(max((sxy << 8) // sxx, 0), 256)
                while sxx >= 1 << 44:
                    sxx >>= 1
                    sxy >>= 1
            if ron > 0:
                last_off = ro
            for k in range(cols):
                t = cur_m[k]
                g = 1 if t > 0 else 0
                cnk = col_n[k]
                cnk += g if cnk < COL_CAP else 0
                col_n[k] = cnk
                col_est[k] += (((((t << FP) - last_off - col_est[k]) * mean_step[cnk]) >> 16)
                               * g)
            up_m, cur_m = cur_m, up_m
            up_s, cur_s = cur_s, up_s
            a = -1
            e = -1
            sa = 0
            c = -1
            b = up_m[0]
            sb = up_s[0]
            d = up_m[1]
            j = 0
            ro = 0
            ron = 0
            row_z = -1
            rpos = 0
            rneg = 0
            agree = 0
            differ = 0
    if decode:
        return (0, 0) if code == rng >> 1 and pos == nbuf else (2, 0)
    # flush the midpoint of the final interval: its carry, then the 4 bytes of low
    low += rng >> 1
    if pos + 4 > nbuf:
        return 2, 0
    if low >= 0x100000000:
        low -= 0x100000000
        k = pos - 1
        while buf[k] == 0xFF:
            buf[k] = 0
            k -= 1
        buf[k] += 1
    for _ in range(4):
        buf[pos] = low >> 24
        low = (low & 0xFFFFFF) << 8
        pos += 1
    return 0, pos


@njit(cache=True, nogil=True)
def encode_kernel(sym, buf, cols, K, mmax, pz0, ps0, child, tp1, path_off, path_bit,
                  path_node, limit, recip):  # pragma: no cover - compiled
    """Encode ``sym`` into ``buf``: (0, bytes written), (1, index of a symbol >= nsym) or
    (2, 0) ``buf`` too small (byte 0 of ``buf`` is always 0)."""
    return _run_fast(False, sym, buf, cols, K, mmax, pz0, ps0, child, tp1, path_off,
                     path_bit, path_node, limit, recip)


@njit(cache=True, nogil=True)
def decode_kernel(sym, buf, cols, K, mmax, pz0, ps0, child, tp1, path_off, path_bit,
                  path_node, limit, recip):  # pragma: no cover - compiled
    """Decode all of ``buf`` into ``sym``: (0, 0); (1, 0) ran out of bytes; (2, 0) did not
    end in the encoder's final state with every byte read; (3, 0) too short or starts out
    of range."""
    return _run_fast(True, sym, buf, cols, K, mmax, pz0, ps0, child, tp1, path_off,
                     path_bit, path_node, limit, recip)
