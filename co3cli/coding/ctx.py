"""Context-adaptive binary range coding of one tensor's symbols (coder id ``ctx``).

The order-0 coders reach the order-0 entropy of a layer; real gradient matrices are not
i.i.d. (dead rows, always-zero input columns, per-row and per-column magnitude scales,
correlated neighbouring inputs).  This coder models each symbol from the symbols already
coded around it and adapts while it codes.  Data flow::

    weights --quantize_freqs--> prior freqs (sum 2**precision) --CtxTable--> encode/decode
    sym (C order), cols --contexts from coded neighbours--> binary decisions
        --adaptive probabilities (each starts at the prior)--> binary range coder --> bytes

Only integers enter the model: the prior table, ``cols`` and the coded symbols; every
context, prediction and probability is integer arithmetic, so the decoder rebuilds the
encoder's state bit for bit.

**Symbols.**  With ``K = (nsym - 1) // 2`` the zero symbol, ``s = K + m`` or ``K - m``
has magnitude ``m`` (``1..nsym - 1 - K``) and a sign.  The tensor's 2-D view has rows of
``cols`` entries (``cols=None`` or ``>= n``: one row, no "up" neighbours).  Neighbours of
entry (i, j): left ``a``, left-left ``e``, up ``b``, up-left ``c``, up-right ``d``.

**Binary decisions per symbol** (each one a context-selected adaptive probability):

1. *zero flag* ``m == 0``; context (800): zero runs to the left and above (absent / 0 /
   1 / 2-3 / 4+), whether ``c``, ``d``, ``e`` are zero, and a coarse bucket of the
   predicted magnitude ``P``.  A context starts from its parent (the two run classes
   only, always updated), not from the prior, once it is first used.
2. *magnitude* ``1..mmax``: a walk down a weight-balanced, order-preserving binary tree
   built from the prior (about ``H + 1`` decisions); context (96): 32 buckets of ``P``
   times 3 confidence levels.  Each context's tree starts at the prior's split ratios.
3. *sign* (when ``-m`` exists); context (225): sign of ``a``; sign of ``b`` flipped or
   not by whether this row has mostly agreed in sign with the row above (5 classes of
   that agreement); 5 classes of this row's share of negatives.

**Magnitude predictor** ``P`` (fixed point, 16 units per magnitude index): a rank-1 model
in the log domain, as the fp grids' indices are roughly logarithmic.  Each column keeps
the mean of ``16 m - row offset`` over its non-zero entries in earlier rows (a plain mean
for 32 rows, then an exponential average with weight 1/32); each row keeps the same kind
of mean of ``16 m - column estimate`` over its non-zero entries so far (window 16);
``P = column estimate + row offset``, plus ``w`` times the left neighbour's prediction
error, with ``w`` in [0, 1] refitted by least squares after every row.  Confidence: 2
with both estimates, 1 with the column one only (the previous row's offset is used), 0
with neither (``P`` = left, else up, else the last non-zero magnitude).

**Adaptation.**  A probability (16 bits, of a 1, kept in ``[32, 2**16 - 32]``) moves
towards each coded bit by ``1 / (count + 1.5)``; ``count`` starts at 2 (the prior's
weight) and stops at ``limit`` (then an exponential average with rate ``1/(limit+1.5)``).

**Coder.**  Binary range coder, 32-bit range, renormalised a byte at a time while the
range is below ``2**24``, with carry propagation through pending ``0xFF`` bytes.  The
encoder's first byte is always 0 and is not stored; the flush writes the 4 bytes of the
midpoint ``low + range // 2`` of the final interval.

**Payload**: the coder's bytes, nothing else (4 bytes for ``n = 0``).  The decoder proves
it consumed exactly the payload: it must end with every byte read and its code register
(the value's offset from ``low``) equal to ``range // 2``.  Flushing the midpoint rather
than ``low`` also catches a wrong symbol count: one decision more or fewer moves ``low``
or shrinks the range, so the offset is no longer half the range.  A damaged byte derails
the decoder's path, so it ends in that state only by accident (heuristically one chance
in ~2**24 or less); a payload that is short, runs out or has bytes left over is always
rejected.  (With ``nsym = 1`` there is nothing to code: every payload is 4 bytes.)

**Table serialisation** (``to_bytes``)::

    byte 0      model version (1)
    byte 1      precision (8..24)
    byte 2      limit (4..255)
    bytes 3..   nsym prior frequencies as LEB128 unsigned varints (shortest form)

``from_bytes`` rejects anything else: another version, precision or limit out of range,
bad or truncated varints, trailing bytes, a sum other than ``2**precision``.

Example::

    >>> import numpy as np
    >>> table = CtxTable(quantize_freqs(np.array([1.0, 2.0, 6.0, 2.0, 1.0]), 12), 12)
    >>> sym = np.array([2, 2, 3, 1, 2, 2, 4, 0, 2], dtype=np.uint16)
    >>> payload = table.encode(sym, cols=3)
    >>> table.decode(payload, 9, cols=3).tolist()
    [2, 2, 3, 1, 2, 2, 4, 0, 2]
"""

from __future__ import annotations

import numpy as np
from numba import njit

from co3cli.coding.ans import check_freqs, check_precision, parse_freqs, quantize_freqs
from co3cli.checks import check_int
from co3cli.coding.huffman import MAX_NSYM, as_symbols, check_count
from co3cli.errors import CorruptDataError, InputError
from co3cli.registry import Configurable
from co3cli.varint import uvarints_to_bytes

__all__ = ["CtxCoder", "CtxTable", "check_limit"]

MODEL_VERSION = 1
"""Stored in the table bytes; bump it whenever the contexts or the adaptation change."""

LIMIT_RANGE = range(4, 256)

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


def check_limit(limit) -> int:
    return check_int("limit", limit, LIMIT_RANGE.start, LIMIT_RANGE.stop - 1)


# ---------------------------------------------------------------------------------------
# Prior -> initial model (integers only)


@njit(cache=True, nogil=True)
def _build_tree(w):  # pragma: no cover - compiled
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


def _prob(num: int, den: int) -> int:
    """16-bit probability ``num / den``, rounded and clamped (1/2 when ``den`` is 0)."""
    if den <= 0:
        return PROB_ONE // 2
    return min(max((2 * num * PROB_ONE + den) // (2 * den), PMIN), PROB_ONE - PMIN)


_RECIP = np.array([(2 * PROB_ONE) // (2 * k + 3) for k in range(256)], dtype=np.int64)
"""Adaptation step ``2**16 / (count + 1.5)`` per count."""


# ---------------------------------------------------------------------------------------
# Kernel (numba).  One function runs the model in both directions, so the encoder and the
# decoder cannot drift apart; ``decode`` only selects the coder half of each decision.


@njit(cache=True, nogil=True, inline="always")
def _shift_low(low, cache, csize, buf, pos, nbuf):  # pragma: no cover - compiled
    """Shift one byte out of the encoder's ``low``: when its top byte is settled, emit the
    cached byte and the pending ``0xFF`` bytes with the carry. Returns the new
    ``(low, cache, csize, pos)``; ``pos = -1`` when the output buffer is full."""
    if low < 0xFF000000 or low >= 0x100000000:  # top byte settled
        carry = low >> 32
        if pos + csize > nbuf:
            return low, cache, csize, -1
        buf[pos] = (cache + carry) & 0xFF
        pos += 1
        for _ in range(csize - 1):
            buf[pos] = (0xFF + carry) & 0xFF
            pos += 1
        csize = 0
        cache = (low >> 24) & 0xFF
    csize += 1
    low = (low & 0x00FFFFFF) << 8
    return low, cache, csize, pos


@njit(cache=True, nogil=True)
def _run(decode, sym, buf, cols, K, mmax, pz0, ps0, child, tp1, path_off, path_bit,
         limit, recip):  # pragma: no cover - compiled
    """Encode ``sym`` into ``buf`` or decode all of ``buf`` into ``sym``.

    Returns ``(status, value)``.  Encode: (0, bytes written), (1, index of a symbol
    >= nsym) or (2, 0) ``buf`` too small.  Decode: (0, 0), (1, 0) ran out of bytes, (2, 0)
    did not end in the encoder's final state with every byte read, (3, 0) too short or
    starts out of range.
    """
    n = sym.size
    nbuf = buf.size
    # ---- binary range coder
    low = 0
    rng = 0xFFFFFFFF
    cache = 0
    csize = 1
    pos = 0
    code = 0
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
    # ---- adaptive probabilities in one flat array, (p << 8) | count per slot;
    # 0 marks a zero-flag context not yet used
    nint = child.size // 2
    sbase = NZCTX
    mbase = NZCTX + NSCTX
    nmctx = NB * NCONF
    PR = np.zeros(mbase + nmctx * nint, dtype=np.int32)
    PR[sbase:mbase] = (ps0 << 8) | N0
    zparent = np.full(NZPARENT, (pz0 << 8) | N0, dtype=np.int64)
    minit = np.zeros(nmctx, dtype=np.bool_)
    # ---- column and row statistics
    col_est = np.zeros(cols, dtype=np.int64)   # column log-magnitude estimate (x16)
    col_n = np.zeros(cols, dtype=np.int64)     # rows in it (0: none yet), capped
    col_z = np.full(cols, -1, dtype=np.int64)  # zeros above (-1: first row), capped
    mean_step = np.zeros(max(ROW_CAP, COL_CAP) + 1, dtype=np.int64)
    for k in range(1, mean_step.size):
        mean_step[k] = PROB_ONE // k
    pscale = (mmax + 1) << FP
    bmul = (NB << 32) // pscale   # (P * bmul) >> 32 < NB for 0 <= P < pscale
    zmul = (NZP << 32) // pscale
    j = 0
    r = 0
    ro = 0          # this row's offset against the column estimates (x16)
    ron = 0
    last_off = 0
    row_z = -1      # zeros to the left (-1: start of row), capped
    rpos = 0
    rneg = 0
    agree = 0       # sign agreement with the row above, this row
    differ = 0
    lastnz = 0
    prev_pb = 0     # base prediction at the left neighbour
    wl = 0          # weight (x256) of the left neighbour's prediction error
    sxy = 0
    sxx = 0
    for i in range(n):
        # ---------------- already-coded neighbours: magnitude (-1 = absent), sign class
        a = -1
        e = -1
        b = -1
        c = -1
        d = -1
        sa = 0
        sb = 0
        if j > 0:
            t = np.int64(sym[i - 1]) - K
            a = abs(t)
            sa = (t > 0) + 2 * (t < 0)
            if j > 1:
                e = abs(np.int64(sym[i - 2]) - K)
        if r > 0:
            t = np.int64(sym[i - cols]) - K
            b = abs(t)
            sb = (t > 0) + 2 * (t < 0)
            if j > 0:
                c = abs(np.int64(sym[i - cols - 1]) - K)
            if j + 1 < cols:
                d = abs(np.int64(sym[i - cols + 1]) - K)
        # ---------------- predicted magnitude P (x16) and its confidence
        if col_n[j] > 0:
            if ron > 0:
                pb = col_est[j] + ro
                conf = 2
            else:
                pb = col_est[j] + last_off
                conf = 1
        else:
            pb = (a if a > 0 else (b if b > 0 else lastnz)) << FP
            conf = 0
        pb = min(max(pb, 0), mmax << FP)
        P = pb
        lx = 0
        if a > 0:
            lx = (a << FP) - prev_pb
            P = min(max(pb + ((wl * lx) >> 8), 0), mmax << FP)
        prev_pb = pb
        # ---------------- contexts
        zp = ZRUN[row_z + 1] * 5 + ZRUN[col_z[j] + 1]
        zc = ((zp * 8 + (c == 0) + 2 * (d == 0) + 4 * (e == 0)) * NZP + ((P * zmul) >> 32))
        mc = ((P * bmul) >> 32) * NCONF + conf
        rt = rpos + rneg
        rb = 0 if rt == 0 else (1 if 4 * rneg < rt else (2 if 4 * rneg > 3 * rt else
                                                        (3 if 2 * rneg < rt else 4)))
        at = agree + differ
        ab = 0 if at == 0 else (1 if 4 * differ < at else (2 if 4 * differ > 3 * at else
                                                         (3 if 2 * differ < at else 4)))
        sp = 0 if sb == 0 or at == 0 else (sb if 2 * differ < at else 3 - sb)
        scx = ((sa * 3 + sp) * 5 + ab) * 5 + rb
        # ---------------- binary decisions: zero flag, magnitude tree, sign
        v = 0
        neg = 0
        if not decode:
            t = np.int64(sym[i]) - K
            v = abs(t)
            neg = 1 if t < 0 else 0
        stage = 0 if mmax > 0 else 3   # 0 zero flag, 1 magnitude tree, 2 sign, 3 done
        node = 0
        q = path_off[v]
        while stage < 3:
            if stage == 0:
                idx = zc
                bit = 1 if v == 0 else 0
                st = np.int64(PR[idx])
                if st == 0:  # first use: start from the parent context
                    st = (zparent[zp] & ~0xFF) | N0
            else:
                if stage == 1:
                    idx = mbase + mc * nint + node
                    bit = path_bit[q]
                    q += 1
                else:
                    idx = sbase + scx
                    bit = neg
                st = np.int64(PR[idx])
            p = st >> 8
            bound = (rng >> 16) * p
            if decode:
                bit = 1 if code < bound else 0
                keep = bit - 1   # 0 for a 1, all ones for a 0
                code -= bound & keep
                rng = bound + ((rng - 2 * bound) & keep)
                while rng < TOP:
                    if pos >= nbuf:
                        return 1, 0
                    code = ((code << 8) | np.int64(buf[pos])) & 0xFFFFFFFF
                    pos += 1
                    rng <<= 8
            else:
                keep = bit - 1   # 0 for a 1, all ones for a 0
                low += bound & keep
                rng = bound + ((rng - 2 * bound) & keep)
                while rng < TOP:
                    rng <<= 8
                    low, cache, csize, pos = _shift_low(low, cache, csize, buf, pos, nbuf)
                    if pos < 0:
                        return 2, 0
            # adapt towards the coded bit by 1 / (count + 1.5)
            cnt = st & 0xFF
            p += (((bit << PROB_BITS) - p) * recip[cnt]) >> 16
            p = min(max(p, PMIN), PROB_ONE - PMIN)
            if cnt < limit:
                cnt += 1
            PR[idx] = (p << 8) | cnt
            # next decision
            if stage == 0:
                st = zparent[zp]   # the parent learns from every zero flag
                p = st >> 8
                cnt = st & 0xFF
                p += (((bit << PROB_BITS) - p) * recip[cnt]) >> 16
                p = min(max(p, PMIN), PROB_ONE - PMIN)
                if cnt < limit:
                    cnt += 1
                zparent[zp] = (p << 8) | cnt
                if bit:
                    stage = 3
                else:
                    if not minit[mc]:   # first use of a magnitude context: the prior
                        minit[mc] = True
                        for k in range(nint):
                            PR[mbase + mc * nint + k] = (tp1[k] << 8) | N0
                    if mmax == 1:
                        v = 1
                        stage = 2 if v <= K else 3
                    else:
                        stage = 1
            elif stage == 1:
                nxt = child[2 * node + bit]
                if nxt < 0:
                    v = -nxt
                    stage = 2 if v <= K else 3   # no negative twin: the sign is +
                else:
                    node = nxt
            else:
                neg = bit
                stage = 3
        if decode:
            sym[i] = K - v if neg else K + v
        # ---------------- statistics
        if v == 0:
            row_z = min(max(row_z, 0) + 1, ZCAP)
            col_z[j] = min(max(col_z[j], 0) + 1, ZCAP)
        else:
            row_z = 0
            col_z[j] = 0
            lastnz = v
            rneg += neg
            rpos += 1 - neg
            if sb != 0:
                if (sb == 2) == (neg == 1):
                    agree += 1
                else:
                    differ += 1
            if col_n[j] > 0:
                if ron < ROW_CAP:
                    ron += 1
                ro += (((v << FP) - col_est[j] - ro) * mean_step[ron]) >> 16
            if a > 0:
                sxy += lx * ((v << FP) - pb)
                sxx += lx * lx
        j += 1
        if j == cols:
            # end of row: refit the left-error weight, update the column estimates
            if sxx > 0:
                wl = min(max((sxy << 8) // sxx, 0), 256)
                while sxx >= 1 << 44:  # halve both sums (same ratio) long before overflow
                    sxx >>= 1
                    sxy >>= 1
            if ron > 0:
                last_off = ro
            base = i + 1 - cols
            for k in range(cols):
                t = abs(np.int64(sym[base + k]) - K)
                if t > 0:
                    if col_n[k] < COL_CAP:
                        col_n[k] += 1
                    col_est[k] += (((t << FP) - last_off - col_est[k]) * mean_step[col_n[k]]) >> 16
            j = 0
            r += 1
            ro = 0
            ron = 0
            row_z = -1
            rpos = 0
            rneg = 0
            agree = 0
            differ = 0
    if decode:
        return (0, 0) if code == rng >> 1 and pos == nbuf else (2, 0)
    # flush the midpoint of the final interval: five shifts emit the pending bytes and
    # the four bytes of low + rng / 2
    low += rng >> 1
    for _ in range(5):
        low, cache, csize, pos = _shift_low(low, cache, csize, buf, pos, nbuf)
        if pos < 0:
            return 2, 0
    return 0, pos


# ---------------------------------------------------------------------------------------
# Table


class CtxTable:
    """Context-adaptive code for symbols ``0..nsym-1`` whose prior is the integer table
    ``freqs`` (summing to ``2**precision``); ``limit`` caps the adaptation counts.

    Every symbol is codable, whatever its prior frequency (0 included)."""

    def __init__(self, freqs, precision: int = 16, limit: int = 60):
        precision = check_precision(precision)
        self._limit = check_limit(limit)
        self._freqs = check_freqs(freqs, precision)
        self._precision = precision
        f = self._freqs.astype(np.int64)
        K = (f.size - 1) // 2
        mmax = f.size - 1 - K
        self._K, self._mmax = K, mmax
        # magnitude weights (both signs), + 1 so that the tree splits every range sensibly
        w = f[K + 1:].copy()
        w[:K] += f[:K][::-1]
        self._child, self._tp1, self._path_off, self._path_bit = _build_tree(w + 1)
        self._pz0 = _prob(int(f[K]), 1 << precision)
        nneg = int(f[:K].sum())
        self._ps0 = _prob(nneg, nneg + int(f[K + 1:2 * K + 1].sum()))

    @property
    def freqs(self) -> np.ndarray:
        """Read-only uint32 prior frequencies, one per symbol."""
        return self._freqs

    def ints(self) -> np.ndarray:
        """The integer prior (frequencies, int64): the shared table vocabulary."""
        return self._freqs.astype(np.int64)

    def pmf(self) -> np.ndarray:
        """The prior's probabilities (frequency / 2**precision); the coder adapts from there."""
        return self._freqs / float(1 << self._precision)

    @property
    def precision(self) -> int:
        """log2 of the prior's frequency total."""
        return self._precision

    @property
    def limit(self) -> int:
        """Adaptation count limit."""
        return self._limit

    @property
    def nsym(self) -> int:
        """Alphabet size."""
        return self._freqs.size

    @staticmethod
    def _row_length(cols, n: int) -> int:
        if cols is None:
            return max(n, 1)
        return min(check_int("cols", cols, 1), max(n, 1))

    def _kernel(self, decode, sym, buf, cols):
        return _run(decode, sym, buf, cols, self._K, self._mmax, self._pz0, self._ps0,
                    self._child, self._tp1, self._path_off, self._path_bit, self._limit,
                    _RECIP)

    def encode(self, sym, cols=None) -> bytes:
        """Encode one tensor's uint16 symbols (C order); ``cols`` is the row length of its
        2-D view (None: 1-D).  ``sym`` is never modified."""
        sym = as_symbols(sym)
        cols = self._row_length(cols, sym.size)
        cap = sym.size + 64
        while True:
            buf = np.empty(cap, dtype=np.uint8)
            status, value = self._kernel(False, sym, buf, cols)
            if status != 2:
                break
            cap *= 4  # rare: more than 8 bits per symbol
        if status:
            raise InputError(f"sym: symbol {int(sym[value])} at index {value} "
                             f">= nsym={self.nsym}; cannot be coded")
        return buf[1:value].tobytes()  # byte 0 is always 0

    def decode(self, payload: bytes, n: int, cols=None) -> np.ndarray:
        """Decode exactly ``n`` symbols with the same ``cols`` as the encoder, consuming
        exactly all of ``payload``; anything else raises :class:`CorruptDataError`."""
        n = check_count(n)
        cols = self._row_length(cols, n)
        data = np.frombuffer(bytes(payload), dtype=np.uint8).copy()
        out = np.zeros(n, dtype=np.uint16)
        status, _ = self._kernel(True, out, data, cols)
        if status:
            why = {1: "ran out of bytes",
                   2: "did not end in the encoder's final state with every byte read",
                   3: "is too short or starts out of range"}[status]
            raise CorruptDataError(f"ctx payload: decoding {n} symbols {why}")
        return out

    def code_lengths(self) -> np.ndarray:
        """Bits per symbol under the initial (prior) model, before any adaptation."""
        lz = -np.log2(self._pz0 / PROB_ONE)
        lnz = -np.log2(1 - self._pz0 / PROB_ONE)
        bits = np.full(self.nsym, np.nan)
        bits[self._K] = lz
        off, pbit = self._path_off, self._path_bit
        for m in range(1, self._mmax + 1):
            # walk the path: nodes are found from the root by following the bits
            node, length = 0, lnz
            for bit in pbit[off[m]:off[m + 1]]:
                p1 = self._tp1[node] / PROB_ONE
                length -= np.log2(p1 if bit else 1 - p1)
                node = self._child[2 * node + bit]
            ps = self._ps0 / PROB_ONE
            if m <= self._K:
                bits[self._K + m] = length - np.log2(1 - ps)
                bits[self._K - m] = length - np.log2(ps)
            else:
                bits[self._K + m] = length
        return bits

    def expected_bits(self, counts) -> float:
        """Static estimate: total bits for symbol ``counts`` under the prior model alone
        (:meth:`code_lengths`).  The adaptive contexts usually do far better; measure
        ``len(encode(...))`` for the real size."""
        c = np.asarray(counts, dtype=np.float64)
        if c.shape != (self.nsym,) or np.any(c < 0) or not np.all(np.isfinite(c)):
            raise InputError(f"counts: need {self.nsym} finite values >= 0, got shape {c.shape}")
        return float(np.dot(c, self.code_lengths()))

    def to_bytes(self) -> bytes:
        """``[version, precision, limit] + prior freqs as LEB128 varints``."""
        return bytes([MODEL_VERSION, self._precision, self._limit]) + uvarints_to_bytes(
            self._freqs)

    @classmethod
    def from_bytes(cls, data: bytes, nsym: int) -> "CtxTable":
        """Parse ``to_bytes`` output; any inconsistency raises :class:`CorruptDataError`."""
        nsym = check_int("nsym", nsym, 1, MAX_NSYM)
        data = bytes(data)
        if len(data) < 3:
            raise CorruptDataError(f"ctx table: {len(data)} bytes, need at least 3")
        version, precision, limit = data[0], data[1], data[2]
        if version != MODEL_VERSION:
            raise CorruptDataError(f"ctx table: model version {version}, this co3cli "
                                   f"reads version {MODEL_VERSION}")
        if precision not in range(8, 25):
            raise CorruptDataError(f"ctx table: precision byte must be 8..24, got {precision}")
        if limit not in LIMIT_RANGE:
            raise CorruptDataError(f"ctx table: limit byte must be 4..255, got {limit}")
        freqs = parse_freqs(data[3:], nsym, precision, "ctx table")
        try:
            return cls(freqs, precision, limit)
        except InputError as err:
            raise CorruptDataError(f"ctx table: {err}") from None


class CtxCoder(Configurable):
    """Context-adaptive binary range coder (this module); tables are priors."""

    id, kind = "ctx", "coder"
    PARAMS = {"precision": 16, "limit": 60}

    def check(self) -> None:
        self.params["precision"] = self.precision = check_precision(self.params["precision"])
        self.params["limit"] = self.limit = check_limit(self.params["limit"])

    def table_from_weights(self, weights) -> CtxTable:
        """Prior from a pmf or counts (``quantize_freqs`` at this precision)."""
        return CtxTable(quantize_freqs(weights, self.precision), self.precision, self.limit)

    def table_from_ints(self, freqs) -> CtxTable:
        """Table from integer prior frequencies (as saved in a codebook file)."""
        return CtxTable(freqs, self.precision, self.limit)

    def table_from_bytes(self, data: bytes, nsym: int) -> CtxTable:
        table = CtxTable.from_bytes(data, nsym)
        if (table.precision, table.limit) != (self.precision, self.limit):
            raise CorruptDataError(
                f"ctx table: stored precision={table.precision}, limit={table.limit}; "
                f"coder config says {self.precision}, {self.limit}"
            )
        return table
