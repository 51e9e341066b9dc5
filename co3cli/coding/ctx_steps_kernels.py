"""Numba kernel of the coder ``ctx-steps`` (model: ``co3cli/coding/ctx_steps.py``).

``_run_steps`` is ``co3cli.coding.ctx_kernels._run_fast`` (the ``ctx`` kernel) with two
changes: the model state lives in arrays the caller owns and carries from one step of a
tensor to the next (reset at a key step), and each symbol's zero-flag and magnitude
contexts get one more dimension, the class of the previous step's co-located symbol
(absent / zero / below / near / above the prediction).  On fresh state without a
previous step it writes exactly the bits of ``ctx``.

Data flow::

    state (reset at a key step) + prev step's symbols --> encode_steps_kernel(sym) --> bytes
    state + prev step's symbols + bytes --> decode_steps_kernel --> sym   (state updated)
"""

from __future__ import annotations

import numpy as np
from numba import njit

from co3cli.coding.ctx_kernels import (COL_CAP, FP, N0, NB, NCONF, NSCTX, NZCTX, NZP,
                                       NZPARENT, ROW_CAP, TOP, ZCAP, ZRUN, PROB_ONE,
                                       _adapt, _code)

NPC = 5
"""Classes of the previous step's symbol: absent (a key step), zero, and a nonzero one more
than ``PNEAR`` below the prediction, within ``PNEAR`` of it, or more than ``PNEAR`` above."""
PNEAR = 24
"""1.5 magnitude indices, in the predictor's fixed point (16 units per index)."""


def state_sizes(nint: int) -> tuple[int, int, int]:
    """Sizes of the probability array, the zero-flag parents and the magnitude-context flags
    for a tree of ``nint`` internal nodes."""
    nmctx = NB * NCONF * NPC
    return NZCTX * NPC + NSCTX + nmctx * nint, NZPARENT * NPC, nmctx


@njit(cache=True, nogil=True, inline="always")
def _run_steps(decode, sym, prev, has_prev, buf, cols, K, mmax, child, tp1, path_off,
               path_bit, path_node, limit, recip, PR, zparent, minit, col_est, col_n, row_off,
               row_ok, scal):  # pragma: no cover - compiled
    """``ctx_kernels._run_fast`` with the previous step's co-located symbol ``prev[i]`` (when
    ``has_prev``) as one more context dimension and the model state (``PR`` .. ``scal``,
    reset by the caller at a key step) carried from step to step.  Without ``has_prev`` on
    fresh state it writes ``_run_fast``'s bits."""
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
    sbase = NZCTX * NPC
    mbase = sbase + NSCTX
    # per column: the narrowest types their bounded values take (a one-row tensor's row is the
    # whole tensor; the caller's col_est and col_n are int32 and int16 alike)
    col_z = np.full(cols, -1, dtype=np.int8)  # -1 .. ZCAP
    # magnitudes and sign classes (0 zero, 1 +, 2 -) of the row above and of this row;
    # -1 (absent) past either end of the row and above the first row
    up_m = np.full(cols + 2, -1, dtype=np.int32)
    up_s = np.zeros(cols + 2, dtype=np.int8)
    cur_m = np.full(cols + 2, -1, dtype=np.int32)
    cur_s = np.zeros(cols + 2, dtype=np.int8)
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
    wl = scal[0]
    sxy = scal[1]
    sxx = scal[2]
    last_off = scal[3]
    lastnz = scal[4]
    prev_pb = 0
    r = 0
    for i in range(n):
        pm = (abs(np.int64(prev[i]) - K) if has_prev else 0)
        # ---------------- prediction (selects, no data-dependent jumps)
        cn = col_n[j]
        ce = col_est[j]
        if cn > 0:
            pb = ce + (ro if ron > 0 else (row_off[r] if row_ok[r] else last_off))
            conf = 2 if ron > 0 else 1
        else:
            pb = (a if a > 0 else (b if b > 0 else (pm if pm > 0 else lastnz))) << FP
            conf = 0
        pb = min(max(pb, 0), pmax)
        lx = ((a << FP) - prev_pb) if a > 0 else 0
        P = min(max(pb + ((wl * lx) >> 8), 0), pmax)
        prev_pb = pb
        # the previous step's symbol against the prediction: absent / 0 / below / near / above
        dp = (pm << FP) - P
        pc = 0 if not has_prev else (1 if pm == 0 else (
            2 if dp < -PNEAR else (4 if dp > PNEAR else 3)))
        zp = (ZRUN[row_z + 1] * 5 + ZRUN[col_z[j] + 1]) * NPC + pc
        zc = (((ZRUN[row_z + 1] * 5 + ZRUN[col_z[j] + 1]) * 8 + (1 if c == 0 else 0)
               + (2 if d == 0 else 0) + (4 if e == 0 else 0)) * NZP + ((P * zmul) >> 32)) * NPC + pc
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
                mc = (((P * bmul) >> 32) * NCONF + conf) * NPC + pc
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
                row_off[r] = ro
                row_ok[r] = True
            r += 1
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
    scal[0] = wl
    scal[1] = sxy
    scal[2] = sxx
    scal[3] = last_off
    scal[4] = lastnz
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
def encode_steps_kernel(sym, prev, has_prev, buf, cols, K, mmax, child, tp1, path_off,
                        path_bit, path_node, limit, recip, PR, zparent, minit, col_est, col_n,
                        row_off, row_ok, scal):  # pragma: no cover - compiled
    """Encode one step into ``buf`` (statuses as ``ctx_kernels.encode_kernel``), updating
    the state."""
    return _run_steps(False, sym, prev, has_prev, buf, cols, K, mmax, child, tp1, path_off,
                      path_bit, path_node, limit, recip, PR, zparent, minit, col_est, col_n,
                      row_off, row_ok, scal)


@njit(cache=True, nogil=True)
def decode_steps_kernel(sym, prev, has_prev, buf, cols, K, mmax, child, tp1, path_off,
                        path_bit, path_node, limit, recip, PR, zparent, minit, col_est, col_n,
                        row_off, row_ok, scal):  # pragma: no cover - compiled
    """Decode all of ``buf`` into ``sym`` (statuses as ``ctx_kernels.decode_kernel``),
    updating the state."""
    return _run_steps(True, sym, prev, has_prev, buf, cols, K, mmax, child, tp1, path_off,
                      path_bit, path_node, limit, recip, PR, zparent, minit, col_est, col_n,
                      row_off, row_ok, scal)
