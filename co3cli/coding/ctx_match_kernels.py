"""Numba kernels of ``ctx`` model version 3 (model and coder described in
``co3cli/coding/ctx.py``).

Version 3 is version 1 (``co3cli.coding.ctx_kernels``: the same predictor, magnitude tree,
adaptation and range coder) plus a *match model* over earlier rows and a *column sign
memory*, both entering the contexts:

* **match model**: for each column, the sign (+1, -1, 0) and a class (1 zero, 2 more
  than ``MZT / 16`` magnitude indices below the prediction, 3 otherwise; 0 absent) of the
  entries of the last ``MR`` rows, in a ring of ``MR`` slots (a one-row tensor has
  none).  While a row is coded every
  signed entry scores each slot +1 (same sign) or -1 (opposite sign) where that row is
  nonzero; every 4th signed entry the slot of largest ``|score|`` becomes the *matched
  row*.  A linear layer's gradient ``sum_b delta_b h_b^T`` is low rank for a small batch:
  rows are near-scaled copies of each other, sign = row sign x column sign, so the
  matched row predicts this row's zeros and signs (its sign times the score's sign).
* **column sign memory**: per column a sum, saturating at ``+-CSCAP``, of its signs
  relative to each earlier row's polarity; a row's polarity is the majority of its signed
  entries' votes against the memory (a row with no votes, the first one included, counts
  as +1; a tied row is not learnt).

(Version 2 is ``ctx-steps``'s.)  Contexts: the zero flag's (version 1's, 800) times the
matched row's class at this column (4): 3200, each starting from its version-1 parent as
before.  The sign's: the left sign ``a`` (3), the up sign flipped by the row agreement
(3), the matched row's predicted sign (3: none, +, -), 4 levels of its ``|score|`` (1-2,
3-5, 6-11, 12+), the column memory's predicted sign (3) and the row's share of negatives
(5): 1620, each starting from a parent (the first three; always updated).  Everything is
integer; the decoder rebuilds the encoder's state bit for bit.  The kernels take the same
arguments and return the same statuses as version 1's.

Rate and speed against version 1: ``benchmarks/bench_ctx2.py``,
``benchmarks/results/ctx2.md``.

**Version 4** (``encode_kernel4`` / ``decode_kernel4``: the same model function with
``v4`` set) changes only where a magnitude context starts: ``_posterior_init`` sets its
tree's probabilities to the split ratios of the prior's magnitude weights ``wm`` times a
distance weight ``G[conf, |16 m - centre|]`` around the centre of the context's bucket of
the prediction (``_posterior_tables``: geometric decays per confidence level from
``mpar``, floored; a decay of 0 keeps version 3's start for that level), with the initial
count ``mpar[3]``; the magnitude contexts split the prediction into ``mpar[5]`` buckets
(version 3: ``NB``).  Integers only.  Against version 3: ``benchmarks/bench_ctx4.py``,
``benchmarks/results/ctx4.md``.

**Version 5** (``encode_kernel5`` / ``decode_kernel5``) is version 4 over *segments*: the
symbols are consecutive parts (entries, row length, lag), coded as one sequence (one final
state; the adaptive probabilities carry through); where the row length changes, the rows,
the column estimates, the match ring and the column sign memory restart.  An entry at least
``lag`` entries into its segment has a *previous step* (the entry ``lag`` before it: a
``.co3`` group member's steps are further rows, ``lag`` its ``numel``): its sign class (none,
+, -) is one more dimension of the sign contexts and their parents (x 3), and its class
(zero, below, above the prediction) replaces the matched row's in the zero-flag and
magnitude contexts, and a nonzero one moves the prediction ``P`` towards its magnitude by a
weight in [0, 1] refitted by least squares after every row (as the left neighbour's).  A
single segment without lag codes exactly version 4's bits.

**Version 6** (``encode_kernel6`` / ``decode_kernel6``: version 4's function with ``xr``
set) codes a tensor given a reference symbol array (model: ``co3cli/coding/ctx.py``).

**Version 7** (``encode_kernel7`` / ``decode_kernel7``: version 5's function with ``mx`` set)
mixes each decision's probability with a second estimate (``co3cli.coding.ctx_mix_kernels``:
the parent context's for zero flags and signs, an order-0 tree's restarting with each segment
for magnitudes; the decoder counts the depth of its walk down the tree, the encoder reads it
from its precomputed path; model: ``co3cli/coding/ctx.py``).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from co3cli.coding.ctx_kernels import (FP, N0, NB, NCONF, NZCTX, NZP, NZPARENT, PROB_ONE,
                                       ROW_CAP, COL_CAP, TOP, ZCAP, ZRUN, _adapt, _code)
from co3cli.coding.ctx_prior_kernels import _posterior_init, _posterior_tables
from co3cli.coding.ctx_mix_kernels import (MX_CNT, MX_DEPTH, MX_LIMIT, MX_NSET, MX_SHIFT,
                                           MX_W, _learn, _mix)

MR = 32
"""Earlier rows the match model keeps (ring slots)."""
CSCAP = 12
"""Saturation of the column sign memory."""
MZT = 24
"""A matched entry is 'below' the prediction when it is more than MZT/16 indices under it."""
NSCTX2 = 3 * 3 * 3 * 4 * 3 * 5
"""Sign contexts of version 3."""
NSPARENT = 3 * 3 * 3
"""Their parents (left sign, up sign class, matched sign), always updated."""
XPAR = 7
"""Version 6's parameters start at ``mpar[XPAR]``: the reference means' count cap, the
magnitude contexts' steps per index, the zero flag's classes of the reference's magnitude."""

@njit(cache=True, nogil=True, inline="always")
def _run_v2(decode, sym, buf, K, mmax, pz0, ps0, child, tp1, path_off, path_bit, path_node,
            limit, recip, wm, mpar, v4, seg, v5, ref, xr, mx):  # pragma: no cover - compiled
    """Version 3 (module docstring): ``ctx_kernels._run_fast`` plus the match model and
    the column sign memory in the zero-flag and sign contexts; ``v4`` (a constant of each
    kernel): version 4, whose magnitude contexts start from ``_posterior_init``
    (``wm``, ``mpar``: its arguments). ``seg``: (entries, row length, lag) per segment
    (versions 3 and 4: one, lag 0); ``v5``: version 5, the previous step's sign (``lag``
    entries back in the segment) in the sign contexts; ``xr`` (with ``v4``, one segment):
    version 6, coded given the reference symbols ``ref`` (``sym``'s size); ``mx`` (with
    ``v5``): version 7, each decision's probability mixed (``_mix``) with a second one."""
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
    if v4:
        nlo, nmid, nhi, G = _posterior_tables(child, nint, mmax, mpar)
    else:
        nlo = nmid = nhi = np.ones(1, dtype=np.int64)
        G = np.zeros((1, 1), dtype=np.int64)
    cum = np.zeros(mmax + 1 if v4 else 1, dtype=np.int64)
    nrc = 1 + mpar[XPAR + 2] if xr else 1   # version 6: the reference's classes in the zero
    nsx = 3 if xr else 1                     # flag's and its signs in the sign's contexts
    sbase = NZCTX * 4 * nrc
    npp = 3 if v5 else 1   # version 5: the previous step's sign (none, +, -)
    mbase = sbase + NSCTX2 * npp * nsx
    nbk = mpar[5] if v4 else NB   # buckets of the prediction in the magnitude contexts
    mzm = mpar[6] if v4 else 1    # 4: the matched entry's class enters them too
    nmctx = nbk * NCONF * mzm
    xres = mpar[XPAR + 1] if xr else 1
    nmx = (mmax + 1) * xres * mzm if xr else 0   # magnitude contexts of the reference's
    PR = np.zeros(mbase + (nmctx + nmx) * nint, dtype=np.int32)
    sparent = np.full(NSPARENT * npp * nsx, (ps0 << 8) | N0, dtype=np.int64)
    zparent = np.full(NZPARENT * nrc, (pz0 << 8) | N0, dtype=np.int64)
    minit = np.zeros(nmctx + nmx, dtype=np.bool_)
    # version 7: the mixers' weights (three per set) and the order-0 magnitude tree
    MW = np.zeros(3 * MX_NSET if mx else 3, dtype=np.int64)
    O = np.zeros(nint if mx else 1, dtype=np.int64)
    if mx:
        for k in range(MX_NSET):
            MW[3 * k] = MX_W[0] if k < MX_DEPTH * NCONF else MX_W[2]
            MW[3 * k + 1] = MX_W[1] if k < MX_DEPTH * NCONF else MX_W[3]
    zset = 3 * MX_DEPTH * NCONF
    sset = zset + 3 * MX_CNT
    # version 6: per reference magnitude, the mean of 16 m where both are nonzero
    xcap = mpar[XPAR] if xr else 1
    xest = np.arange(mmax + 1 if xr else 1, dtype=np.int64) << FP
    xcnt = np.zeros(mmax + 1 if xr else 1, dtype=np.int64)
    maxc = 1
    for k in range(seg.shape[0]):
        maxc = max(maxc, seg[k, 1])
    # per column: the narrowest types their bounded values take (a one-row tensor's row
    # is the whole tensor: 22 bytes per entry of state, not 64)
    col_est = np.zeros(maxc, dtype=np.int32)
    csum = np.zeros(maxc, dtype=np.int8)   # column sign memory, within +-CSCAP
    sagree = 0                               # this row's votes against it
    sdiff = 0
    # match model: per (column, slot) the sign (+1, -1, 0) and class (0 absent, 1 zero,
    # 2 below, 3 above the prediction) of an earlier row's entry; scores per slot
    # (a one-row tensor has no earlier rows: no ring; the loops over MR slots have a
    # compile-time trip count, slots of rows that do not exist stay 0 and never match)
    has_ring = False
    mr2 = 2 * MR
    # [j * 2 MR + slot]: sign, [j * 2 MR + MR + slot]: class
    ring = np.zeros(maxc * mr2 if n > seg[0, 1] or seg.shape[0] > 1 else 0, dtype=np.int8)
    msc = np.zeros(MR, dtype=np.int32)
    mbest = nsg = rowi = 0
    col_n = np.zeros(maxc, dtype=np.int16)  # <= COL_CAP
    col_z = np.full(maxc, -1, dtype=np.int8)  # -1 .. ZCAP
    # magnitudes and sign classes (0 zero, 1 +, 2 -) of the row above and of this row;
    # -1 (absent) past either end of the row and above the first row
    up_m = np.full(maxc + 2, -1, dtype=np.int32)
    up_s = np.zeros(maxc + 2, dtype=np.int8)
    cur_m = np.full(maxc + 2, -1, dtype=np.int32)
    cur_s = np.zeros(maxc + 2, dtype=np.int8)
    # neighbours of the next entry: left a, left-left e, up b, up-left c, up-right d (and
    # with the other per-row and per-column state: set where a segment starts)
    a = e = c = b = d = -1
    sa = sb = 0
    mean_step = np.zeros(max(ROW_CAP, COL_CAP, xcap) + 1, dtype=np.int64)
    for k in range(1, mean_step.size):
        mean_step[k] = PROB_ONE // k
    pmax = mmax << FP
    pscale = (mmax + 1) << FP
    bmul = (nbk << 32) // pscale
    zmul = (NZP << 32) // pscale
    j = ro = ron = last_off = rpos = rneg = agree = differ = lastnz = prev_pb = 0
    row_z = -1
    wl = sxy = sxx = 0
    wp = pxy = pxx = P0 = 0   # version 5: the previous step's weight in the prediction
    cols = seg_start = seg_end = lag = 0
    si = -1
    for i in range(n):
        while i == seg_end:   # a segment starts (its lag; a new row length: rows restart)
            si += 1
            seg_start = i
            seg_end = i + seg[si, 0]
            if mx:   # version 7: the order-0 magnitude tree restarts from the prior
                for k in range(nint):
                    O[k] = tp1[k] << 8
            lag = seg[si, 2]
            if seg[si, 1] != cols:
                cols = seg[si, 1]
                run = 0   # the entries of this run of segments of one row length
                for k in range(si, seg.shape[0]):
                    if seg[k, 1] != cols:
                        break
                    run += seg[k, 0]
                has_ring = run > cols
                col_est[:cols] = 0
                csum[:cols] = 0
                col_n[:cols] = 0
                col_z[:cols] = -1
                ring[:cols * mr2 if has_ring else 0] = 0
                up_m[:cols + 2] = -1
                cur_m[:cols + 2] = -1
                up_s[:cols + 2] = 0
                cur_s[:cols + 2] = 0
                msc[:] = 0
                mbest = nsg = rowi = sagree = sdiff = sa = sb = j = ro = ron = last_off = 0
                rpos = rneg = agree = differ = prev_pb = 0
                a = e = c = b = d = row_z = -1
        pp = 0
        if v5 and lag > 0 and i - lag >= seg_start:
            t = np.int64(sym[i - lag]) - K
            pp = 0 if t == 0 else (1 if t > 0 else 2)
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
        px = 0   # version 5: towards a nonzero previous step by the weight wp (fitted)
        if v5 and lag > 0 and i - lag >= seg_start:
            tq = abs(np.int64(sym[i - lag]) - K)
            if tq > 0:
                px = (tq << FP) - P
                P0 = P
                P = min(max(P + ((wp * px) >> 8), 0), pmax)
        prev_pb = pb
        zp = ZRUN[row_z + 1] * 5 + ZRUN[col_z[j] + 1]
        mz = ring[j * mr2 + MR + mbest] if msc[mbest] != 0 else 0
        if v5 and lag > 0 and i - lag >= seg_start:   # version 5: the previous step's class
            tq = abs(np.int64(sym[i - lag]) - K)
            mz = 1 if tq == 0 else (2 if (tq << FP) - P < -MZT else 3)
        rm = rsg = 0
        xm = -1
        if xr:   # version 6: the reference's class, sign and (nonzero) the prediction from it
            rv = np.int64(ref[i]) - K
            rm = abs(rv)
            rc = 0
            if rm > 0:
                rsg = 2 if rv < 0 else 1
                rc = 1 + min((rm * (nrc - 1)) // (mmax + 1), nrc - 2)
                P = min(max(xest[rm], 0), pmax)
                xm = (P * xres + (1 << (FP - 1))) >> FP
            zp = zp * nrc + rc
        zc = (((zp * 8 + (1 if c == 0 else 0) + (2 if d == 0 else 0) + (4 if e == 0 else 0))
               * NZP + ((P * zmul) >> 32)) * 4 + mz)
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
            pz = st >> 8
            if mx:   # version 7: mixed with the parent's
                ws = zset + 3 * min((st & 0xFF) >> 3, MX_CNT - 1)
                w0, w1, w2 = MW[ws], MW[ws + 1], MW[ws + 2]
                pz, x0, x1 = _mix(w0, w1, w2, pz, zparent[zp] >> 8)
            bit, rng, low, code = _code(decode, 1 if v == 0 else 0, pz, rng, low, code)
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
            if mx:
                MW[ws], MW[ws + 1], MW[ws + 2] = _learn(w0, w1, w2, x0, x1,
                                                      (bit << 16) - pz, MX_SHIFT[1])
            zpt = zparent[zp]
            zparent[zp] = _adapt(zpt, bit, limit, recip[zpt & 0xFF])
            if bit == 0:
                # ---------------- magnitude: the tree path under context mc
                mc = ((P * bmul) >> 32) * NCONF + conf
                if v4:
                    mc = mc * mzm + (mz if mzm > 1 else 0)
                if xm >= 0:   # version 6: predicted from the reference
                    mc = nmctx + xm * mzm + (mz if mzm > 1 else 0)
                mb = mbase + mc * nint
                if not minit[mc]:   # first use of a magnitude context: the prior
                    minit[mc] = True
                    if v4 and xm < 0 and mmax >= 2 and mpar[(mc // mzm) % NCONF] > 0:
                        _posterior_init(PR, mb, mc, nint, mmax, pscale, nbk, mzm, wm, G,
                                        cum, nlo, nmid, nhi, mpar[3])
                    else:
                        for k in range(nint):
                            PR[mb + k] = (tp1[k] << 8) | N0
                if mmax == 1:
                    v = 1
                elif decode:
                    # both children and their states are loaded before the bit is known,
                    # so the next decision waits only for a select, not for two loads
                    node = 0
                    dep = 0
                    st = np.int64(PR[mb])
                    while True:
                        c0 = child[2 * node]
                        c1 = child[2 * node + 1]
                        s0 = np.int64(PR[mb + max(c0, 0)])
                        s1 = np.int64(PR[mb + max(c1, 0)])
                        pq = st >> 8
                        if mx:   # version 7: mixed with the order-0 tree's node
                            so = O[node]
                            ws = 3 * (min(dep, MX_DEPTH - 1) * NCONF + conf)
                            w0, w1, w2 = MW[ws], MW[ws + 1], MW[ws + 2]
                            pq, x0, x1 = _mix(w0, w1, w2, pq, so >> 8)
                        bit, rng, low, code = _code(True, 0, pq, rng, low, code)
                        while rng < TOP:
                            if pos >= nbuf:
                                return fail_status, 0
                            code = ((code << 8) | np.int64(buf[pos])) & 0xFFFFFFFF
                            pos += 1
                            rng <<= 8
                        PR[mb + node] = _adapt(st, bit, limit, recip[st & 0xFF])
                        if mx:
                            O[node] = _adapt(so, bit, MX_LIMIT, recip[so & 0xFF])
                            MW[ws], MW[ws + 1], MW[ws + 2] = _learn(w0, w1, w2, x0, x1,
                                                                  (bit << 16) - pq, MX_SHIFT[0])
                        nxt = c1 if bit else c0
                        if nxt < 0:
                            v = -nxt
                            break
                        st = s1 if bit else s0
                        node = nxt
                        dep += 1
                else:
                    for q in range(path_off[v], path_off[v + 1]):
                        nd = path_node[q]
                        idx = mb + nd
                        st = np.int64(PR[idx])
                        bit = path_bit[q]
                        pq = st >> 8
                        if mx:
                            so = O[nd]
                            ws = 3 * (min(q - path_off[v], MX_DEPTH - 1) * NCONF + conf)
                            w0, w1, w2 = MW[ws], MW[ws + 1], MW[ws + 2]
                            pq, x0, x1 = _mix(w0, w1, w2, pq, so >> 8)
                        bit, rng, low, code = _code(False, bit, pq, rng, low, code)
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
                        if mx:
                            O[nd] = _adapt(so, bit, MX_LIMIT, recip[so & 0xFF])
                            MW[ws], MW[ws + 1], MW[ws + 2] = _learn(w0, w1, w2, x0, x1,
                                                                  (bit << 16) - pq, MX_SHIFT[0])
                # ---------------- sign (only where -v exists)
                if v <= K:
                    rt = rpos + rneg
                    rb = 0 if rt == 0 else (1 if 4 * rneg < rt else (
                        2 if 4 * rneg > 3 * rt else (3 if 2 * rneg < rt else 4)))
                    at = agree + differ
                    sp = 0 if sb == 0 or at == 0 else (sb if 2 * differ < at else 3 - sb)
                    cs = csum[j]
                    rd = sagree - sdiff
                    cmv = 0
                    if cs != 0 and rd != 0:
                        cmv = 1 + ((1 if cs < 0 else 0) ^ (1 if rd < 0 else 0))
                    mp = 0
                    mcf = 0
                    bs = np.int64(msc[mbest])
                    if bs != 0:
                        t = ring[j * mr2 + mbest]
                        if t != 0:
                            mp = 1 + ((1 if t < 0 else 0) ^ (1 if bs < 0 else 0))
                            bs = abs(bs)
                            mcf = 0 if bs < 3 else (1 if bs < 6 else (2 if bs < 12 else 3))
                    spa = (((sa * 3 + sp) * 3 + mp) * npp + pp) * nsx + rsg
                    idx = sbase + (((spa * 4 + mcf) * 3 + cmv) * 5 + rb)
                    st = np.int64(PR[idx])
                    if st == 0:  # first use: start from the parent context
                        st = (sparent[spa] & ~0xFF) | N0
                    ps = st >> 8
                    if mx:   # version 7: mixed with the parent's
                        ws = sset + 3 * min((st & 0xFF) >> 3, MX_CNT - 1)
                        w0, w1, w2 = MW[ws], MW[ws + 1], MW[ws + 2]
                        ps, x0, x1 = _mix(w0, w1, w2, ps, sparent[spa] >> 8)
                    neg, rng, low, code = _code(decode, neg, ps, rng, low, code)
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
                    if mx:
                        MW[ws], MW[ws + 1], MW[ws + 2] = _learn(w0, w1, w2, x0, x1,
                                                              (neg << 16) - ps, MX_SHIFT[1])
                    spt = sparent[spa]
                    sparent[spa] = _adapt(spt, neg, limit, recip[spt & 0xFF])
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
            if has_ring and v <= K:   # a signed entry scores the match slots
                sg = -1 if neg else 1
                rb_ = j * mr2
                for k in range(MR):
                    msc[k] += ring[rb_ + k] * sg
                nsg += 1
                if nsg & 3 == 1:   # the best slot is re-chosen every 4th signed entry
                    bsv = np.int32(-1)
                    for k in range(MR):
                        x = abs(msc[k])
                        if x > bsv:
                            bsv = x
                            mbest = k
            if csum[j] != 0:
                if (csum[j] < 0) == (neg == 1):
                    sagree += 1
                else:
                    sdiff += 1
            if sb != 0:
                same = 1 if (sb == 2) == (neg == 1) else 0
                agree += same
                differ += 1 - same
            if cn > 0:
                ron += 1 if ron < ROW_CAP else 0
                ro += (((v << FP) - ce - ro) * mean_step[ron]) >> 16
            sxy += lx * ((v << FP) - pb)
            sxx += lx * lx
            if px != 0:
                pxy += px * ((v << FP) - P0)
                pxx += px * px
            if xr and rm > 0:
                xn = xcnt[rm] + (1 if xcnt[rm] < xcap else 0)
                xcnt[rm] = xn
                xest[rm] += (((v << FP) - xest[rm]) * mean_step[xn]) >> 16
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
            if pxx > 0:
                wp = min(max((pxy << 8) // pxx, 0), 256)
                while pxx >= 1 << 44:
                    pxx >>= 1
                    pxy >>= 1
            if ron > 0:
                last_off = ro
            # this row into the match ring (its slot), before the column estimates move
            if has_ring:
                slot = rowi % MR
                for k in range(cols):
                    t = cur_m[k]
                    q = k * mr2 + slot
                    ring[q] = 0 if t == 0 else (1 if cur_s[k] == 1 else -1)
                    ring[q + MR] = 1 if t == 0 else (
                        2 if (t << FP) - col_est[k] - last_off < -MZT else 3)
            # the column sign memory learns this row's signs relative to its polarity
            if sagree + sdiff == 0 or sagree != sdiff:
                pol = -1 if sdiff > sagree else 1
                for k in range(cols):
                    t = cur_s[k]
                    if t != 0:
                        csum[k] = min(max(csum[k] + (pol if t == 1 else -pol), -CSCAP), CSCAP)
            sagree = 0
            sdiff = 0
            msc[:] = 0
            mbest = 0
            nsg = 0
            rowi += 1
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


_NOW = np.ones(1, dtype=np.int64)
_NOP = np.zeros(7, dtype=np.int64)
_NOREF = np.zeros(1, dtype=np.uint16)


@njit(cache=True, nogil=True, inline="always")
def _one(n, cols):  # pragma: no cover - compiled
    """The one segment of a version 3/4 tensor."""
    seg = np.zeros((1, 3), dtype=np.int64)
    seg[0, 0] = n
    seg[0, 1] = cols
    return seg


@njit(cache=True, nogil=True)
def encode_kernel(sym, buf, cols, K, mmax, pz0, ps0, child, tp1, path_off, path_bit,
                  path_node, limit, recip):  # pragma: no cover - compiled
    """Version 3 of ``ctx_kernels.encode_kernel`` (same arguments and statuses).
    Encode ``sym`` into ``buf``: (0, bytes written), (1, index of a symbol >= nsym) or
    (2, 0) ``buf`` too small (byte 0 of ``buf`` is always 0)."""
    return _run_v2(False, sym, buf, K, mmax, pz0, ps0, child, tp1, path_off, path_bit,
                   path_node, limit, recip, _NOW, _NOP, False, _one(sym.size, cols), False,
                   _NOREF, False, False)


@njit(cache=True, nogil=True)
def decode_kernel(sym, buf, cols, K, mmax, pz0, ps0, child, tp1, path_off, path_bit,
                  path_node, limit, recip):  # pragma: no cover - compiled
    """Version 3 of ``ctx_kernels.decode_kernel`` (same arguments and statuses).
    Decode all of ``buf`` into ``sym``: (0, 0); (1, 0) ran out of bytes; (2, 0) did not
    end in the encoder's final state with every byte read; (3, 0) too short or starts out
    of range."""
    return _run_v2(True, sym, buf, K, mmax, pz0, ps0, child, tp1, path_off, path_bit,
                   path_node, limit, recip, _NOW, _NOP, False, _one(sym.size, cols), False,
                   _NOREF, False, False)


@njit(cache=True, nogil=True)
def encode_kernel4(sym, buf, cols, K, mmax, pz0, ps0, child, tp1, path_off, path_bit,
                   path_node, limit, recip, wm, mpar):  # pragma: no cover - compiled
    """Version 4's encoder: ``encode_kernel``'s arguments and statuses plus the prior's
    magnitude weights ``wm`` and the parameters ``mpar`` of ``_posterior_init``."""
    return _run_v2(False, sym, buf, K, mmax, pz0, ps0, child, tp1, path_off, path_bit,
                   path_node, limit, recip, wm, mpar, True, _one(sym.size, cols), False,
                   _NOREF, False, False)


@njit(cache=True, nogil=True)
def decode_kernel4(sym, buf, cols, K, mmax, pz0, ps0, child, tp1, path_off, path_bit,
                   path_node, limit, recip, wm, mpar):  # pragma: no cover - compiled
    """Version 4's decoder (``decode_kernel``'s statuses; arguments as ``encode_kernel4``)."""
    return _run_v2(True, sym, buf, K, mmax, pz0, ps0, child, tp1, path_off, path_bit,
                   path_node, limit, recip, wm, mpar, True, _one(sym.size, cols), False,
                   _NOREF, False, False)


@njit(cache=True, nogil=True)
def encode_kernel5(sym, buf, seg, K, mmax, pz0, ps0, child, tp1, path_off, path_bit,
                   path_node, limit, recip, wm, mpar):  # pragma: no cover - compiled
    """Version 5's encoder: ``encode_kernel4``'s, the row length replaced by the segments
    ``seg`` ((entries, row length, lag) each, entries summing to ``sym.size``)."""
    return _run_v2(False, sym, buf, K, mmax, pz0, ps0, child, tp1, path_off, path_bit,
                   path_node, limit, recip, wm, mpar, True, seg, True, _NOREF, False,
                   False)


@njit(cache=True, nogil=True)
def decode_kernel5(sym, buf, seg, K, mmax, pz0, ps0, child, tp1, path_off, path_bit,
                   path_node, limit, recip, wm, mpar):  # pragma: no cover - compiled
    """Version 5's decoder (``decode_kernel``'s statuses; arguments as ``encode_kernel5``)."""
    return _run_v2(True, sym, buf, K, mmax, pz0, ps0, child, tp1, path_off, path_bit,
                   path_node, limit, recip, wm, mpar, True, seg, True, _NOREF, False,
                   False)


@njit(cache=True, nogil=True)
def encode_kernel6(sym, buf, cols, K, mmax, pz0, ps0, child, tp1, path_off, path_bit,
                   path_node, limit, recip, wm, mpar, ref):  # pragma: no cover - compiled
    """Version 6's encoder: ``encode_kernel4``'s arguments and statuses (``mpar`` with the
    reference's parameters from ``XPAR`` on) plus the reference symbols ``ref``."""
    return _run_v2(False, sym, buf, K, mmax, pz0, ps0, child, tp1, path_off, path_bit,
                   path_node, limit, recip, wm, mpar, True, _one(sym.size, cols), False, ref,
                   True, False)


@njit(cache=True, nogil=True)
def decode_kernel6(sym, buf, cols, K, mmax, pz0, ps0, child, tp1, path_off, path_bit,
                   path_node, limit, recip, wm, mpar, ref):  # pragma: no cover - compiled
    """Version 6's decoder (``decode_kernel``'s statuses; arguments as ``encode_kernel6``)."""
    return _run_v2(True, sym, buf, K, mmax, pz0, ps0, child, tp1, path_off, path_bit,
                   path_node, limit, recip, wm, mpar, True, _one(sym.size, cols), False, ref,
                   True, False)


@njit(cache=True, nogil=True)
def encode_kernel7(sym, buf, seg, K, mmax, pz0, ps0, child, tp1, path_off, path_bit,
                   path_node, limit, recip, wm, mpar):  # pragma: no cover - compiled
    """Version 7's encoder (arguments and statuses as ``encode_kernel5``)."""
    return _run_v2(False, sym, buf, K, mmax, pz0, ps0, child, tp1, path_off, path_bit,
                   path_node, limit, recip, wm, mpar, True, seg, True, _NOREF, False, True)


@njit(cache=True, nogil=True)
def decode_kernel7(sym, buf, seg, K, mmax, pz0, ps0, child, tp1, path_off, path_bit,
                   path_node, limit, recip, wm, mpar):  # pragma: no cover - compiled
    """Version 7's decoder (``decode_kernel``'s statuses; arguments as ``encode_kernel5``)."""
    return _run_v2(True, sym, buf, K, mmax, pz0, ps0, child, tp1, path_off, path_bit,
                   path_node, limit, recip, wm, mpar, True, seg, True, _NOREF, False, True)
