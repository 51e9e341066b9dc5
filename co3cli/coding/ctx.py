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

**Model version 3** (the default of co3cli 0.2; ``model_version`` of the coder config,
stored in the table's first byte) adds two memories of earlier rows, for the low-rank
structure of a gradient (``sum_b delta_b h_b^T``: rows are near-scaled copies, sign = row
sign x column sign): a *match model* (the one of the last 32 rows whose signs agree best,
with either polarity, with this row's so far; its sign and zero/below/above class at this
column) and a *column sign memory* (per column, its sign relative to each earlier row's
polarity).  The zero flag's context adds the matched entry's class (x 4, 3200 contexts);
the sign's context is (``a``'s sign, the up sign class, the matched row's predicted sign,
4 levels of its score, the column memory's predicted sign, this row's share of negatives:
1620), each first started from a parent (the first three) as the zero flags are.  Details:
``co3cli.coding.ctx_match_kernels``.  Version 1 files decode with version 1 (version 2
is ``ctx-steps``'s).

**Model version 4** (the default before version 5) is version 3 whose magnitude
contexts start, on first use, not from the prior's split ratios but from those of the prior
times a distance weight around the context's predicted magnitude (the centre of its bucket
of ``P``): ``w(m) * 2**(-|m - centre| / tau)``, ``tau`` per confidence level, with a larger
initial count (``MAG_INIT``; integers only).  It is the prior given that the magnitude is
near its prediction, so a context codes well before it has learnt: the learning cost that
dominates small layers.  The magnitude contexts split ``P`` into 64 buckets on fine grids
(fp8) and 16 on coarse ones (fp4), where the match model's class of the matched entry
enters them too.  On the whole default files of every dump of ``bench_rate.py --check``
(``benchmarks/bench_ctx4.py``, ``benchmarks/results/ctx4.md``): 0.15-2.6 % fewer bits
at fp8, 0.02-0.6 % at fp4, none larger; decode and encode CPU time unchanged (0.87-1.01x).

**Model version 5** (the default of ``ctx``) is version 4 over *segments*
(:meth:`CtxTable.encode_segments`: consecutive parts of (entries, row length, lag), coded as
one sequence with one final state; rows restart where the row length changes): the entry
``lag`` before one (a ``.co3`` group member's previous step: its steps are further rows)
enters its sign contexts (its sign), its zero-flag and magnitude contexts (its class against
the prediction, in place of the matched row's) and the prediction (moved towards its
magnitude by a weight fitted as the left neighbour's).  A ``.co3`` 1.5 group of small layers
is one such stream (``co3cli.container.gcompact``, layouts 2 and 3); a single segment without
lag codes exactly version 4's bits.  On the check's small dumps, against version 4's stacks:
0.2-1.5 % fewer payload bytes at fp8, 1-3 % at fp4 (``benchmarks/results/small_files.md``);
encode and decode CPU time unchanged on a 10^6-entry layer.

**Model version 6** (``REFERENCE_VERSION``; a table of version 4 or 5 made by
:meth:`CtxTable.with_reference`) codes a tensor given a *reference*: a symbol array of the
same shape the decoder holds already (in a ``.co3`` file: the same step of an earlier layer,
``co3cli.container.xref``; the streams of an FL ``transmitted.h5`` agree on 87-94 % of their
fp4 symbols).  With ``r`` the reference's co-located magnitude and version 4 otherwise:

* the zero flag's contexts and their parents take one more dimension: 0 where ``r`` is 0,
  else one of 8 classes of ``r`` (``1 + 8 r // (mmax + 1)``);
* where ``r > 0`` the prediction ``P`` is ``E[r]``: the mean of ``16 m`` over this
  tensor's entries so far that are nonzero in both with that ``r`` (the identity ``16 r``
  at first; a plain mean over the first 32 (fp8) / 8 (fp4) such entries, then an
  exponential average: it learns the ratio of the two scales and any mapping between the
  two grids' indices, e.g. a fine grid's symbols of values rounded to a coarser grid), and
  the magnitude context is ``P`` rounded to half an index (with the matched class on
  coarse grids; each starting from the prior's split ratios) instead of a bucket of ``P``
  and its confidence;
* the sign's contexts and their parents take the reference's sign (none, +, -).

A reference of zeros codes version 4's bits; a reference with the opposite signs codes
as well as one with the same.  On the FL streams at fp4 (``co3 simulate fl --dump-rounds``,
``benchmarks/results/xref.md``): ``corrected`` given ``raw`` 0.63x version 4's bits,
``decoded`` given ``corrected`` 0.35x; at fp8 0.86x and 0.27x; decompressing those files
takes 0.96-1.10x the CPU time of their version 4 files.

**Model version 7** (``MIXED_VERSION``; a version 5 table made by :meth:`CtxTable.mixed`:
the model of a ``.co3`` group of small layers, files written from co3cli 0.1.0 with it on; a
coder config never names it) is version 5 whose every decision's probability is *mixed* with
a second estimate: the logistic mix ``squash(w0 * stretch(p) + w1 * stretch(q) + w2)`` of the
context's ``p`` and, for a zero flag or a sign, ``q`` its parent context's (the one it started
from), for a magnitude decision ``q`` the same tree node in an *order-0 tree* of this
segment's magnitudes (no context; it restarts with each segment from the prior at count 0, so
the segment's first magnitudes move it two thirds of the way, then adapts up to count 255).  The weights (16.16 fixed point, three per set) learn online, by
``input * error / 2**15``; their sets: for a magnitude the decision's depth on its path (16)
times the confidence (3), for a zero flag and a sign the context's count in eighths (8 each).
``stretch`` and ``squash`` are tables (``co3cli.coding.textcm_kernels.STRETCH`` and
``ctx_match_kernels.SQ16``, pinned by a test); integers only.  Where contexts are many and
entries few the context's estimate is still noisy and the coarser one carries it: on the
groups of small layers of the check's dumps 0.35-3.2 % fewer payload bytes than version 5,
for 1.14-1.55x its CPU time per symbol (``benchmarks/results/ctx7.md``); on a large layer it
gains 0.1-1.3 % for 1.1-1.7x the time, so only groups use it, and only where smaller than
version 5 (``co3cli.codec.encode_group``).

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

**Kernels.**  ``co3cli.coding.ctx_kernels`` codes version 1 (one model function compiled
once per direction), ``co3cli.coding.ctx_match_kernels`` versions 3, 4 and 5;
``co3cli.coding.ctx_reference`` keeps the kernel of co3cli 0.1.0, which writes version 1's
bytes, for tests and ``benchmarks/bench_ctx.py``.  Version 1's bitstream has not changed
since 0.1.0.  Version 3 against version 1 (``benchmarks/bench_ctx2.py``, whole files on the
benchmark dumps): 4-7 % fewer bits at fp4, 0.4-1.2 % at fp8, within +0.2 % on a tiny
held-out ResNet; decoding takes ~1.3x version 1's CPU time (``benchmarks/results/ctx2.md``).
Version 1's speed (``bench_ctx.py``, layers >= 10^5 entries): 14-25x
``ans``'s CPU time to encode, 9-18x to decode; the cost is the serial chain of adaptive
binary decisions (~4.7 per fp8-e5m2 symbol, ~1.4 per fp4-co3 symbol) and the per-symbol
context and predictor updates.

**Table serialisation** (``to_bytes``)::

    byte 0      model version (1, 3, 4 or 5)
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

from co3cli.coding import ctx_kernels as kern
from co3cli.coding import ctx_match_kernels as kern2
from co3cli.coding.ans import check_freqs, check_precision, parse_freqs, quantize_freqs
from co3cli.checks import check_int
from co3cli.coding.huffman import MAX_NSYM, as_symbols, check_count
from co3cli.errors import CorruptDataError, InputError
from co3cli.registry import Configurable
from co3cli.varint import uvarints_to_bytes

__all__ = ["CtxCoder", "CtxTable", "check_limit", "check_model_version"]

MODEL_VERSIONS = (1, 3, 4, 5, 6, 7)
"""Model versions ``ctx`` reads (stored in the table bytes; a new one whenever the contexts
or the adaptation change).  One numbering for the family: 1 ``ctx`` of 0.1.0, 2
``ctx-steps``, 3 ``ctx`` with the match model, 4 version 3 with magnitude contexts started
from the prior near their prediction, 5 version 4 over segments with the previous step in
the contexts, 6 version 4 coded given a reference (``REFERENCE_VERSION``), 7 version 5 with
mixed probabilities (``MIXED_VERSION``)."""
SEGMENTS_VERSION = 5
"""The model that codes a sequence of segments (``CtxTable.encode_segments``)."""
MIXED_VERSION = 7
"""Version 5 with each decision's probability mixed with a second estimate (module
docstring): the model of a ``.co3`` group of small layers (``CtxTable.mixed``); a coder
config never names it."""
SEGMENTS_VERSIONS = (SEGMENTS_VERSION, MIXED_VERSION)
"""The models that code a sequence of segments."""
REFERENCE_VERSION = 6
"""The model of a tensor coded given another tensor's symbols (``CtxTable.with_reference``);
a coder config never names it: its tables are version 4's prior with this version byte."""
CODER_VERSIONS = tuple(v for v in MODEL_VERSIONS if v not in (REFERENCE_VERSION, MIXED_VERSION))
MODEL_VERSION = CODER_VERSIONS[-1]
"""The model new tables code with unless told otherwise."""
_KERNELS = {1: (kern.encode_kernel, kern.decode_kernel),
            3: (kern2.encode_kernel, kern2.decode_kernel),
            4: (kern2.encode_kernel4, kern2.decode_kernel4),
            5: (kern2.encode_kernel5, kern2.decode_kernel5),
            7: (kern2.encode_kernel7, kern2.decode_kernel7),
            6: (kern2.encode_kernel6, kern2.decode_kernel6)}
MAG_INIT = {"fine": (65359, 65182, 64830, 12, 64, 1), "coarse": (0, 64132, 64132, 4, 16, 4)}
"""Version 4's magnitude-context start (``ctx_match_kernels._posterior_init``): per
confidence level 0, 1, 2 the weight's decay per 1/16 magnitude index (``/ 2**16``; 0: that
level starts from the prior, as version 3): halving every 16, 8, 4 indices on grids of >= 16
magnitudes ('fine', as fp8), the prior at level 0 and halving every 2 indices on coarser ones
(as fp4); then the initial count (at most ``limit``) and the number of buckets of the
prediction ``P`` in the magnitude contexts (version 3: 32) and whether (4) or not (1) the
match model's class of the matched entry (4 classes) enters them too.  Integers only."""
MAG_FLOOR = 64
"""The distance weight never falls below ``MAG_FLOOR / 2**16``."""
XREF_INIT = {"fine": (32, 2, 8), "coarse": (8, 2, 8)}
"""Version 6's parameters (``ctx_match_kernels.XPAR``): the count cap of the means of a
magnitude given the reference's (an average over the last 32 / 8 such entries: the coarse
grids' few magnitudes gain from following the nearby entries), the magnitude contexts' steps
per index, the zero flag's classes of the reference's magnitude.  Measured on the FL
``transmitted.h5`` streams (``benchmarks/results/xref.md``).  Integers only."""

LIMIT_RANGE = range(4, 256)


def check_limit(limit) -> int:
    return check_int("limit", limit, LIMIT_RANGE.start, LIMIT_RANGE.stop - 1)


def check_model_version(version, allowed=MODEL_VERSIONS) -> int:
    """``version`` if it is one of ``allowed`` (None: the last of them)."""
    if version is None:
        return allowed[-1]
    version = check_int("model_version", version, min(allowed), max(allowed))
    if version not in allowed:
        raise InputError(f"model_version={version}: allowed {', '.join(map(str, allowed))}")
    return version


PROB_ONE, PMIN = kern.PROB_ONE, kern.PMIN


def _prob(num: int, den: int) -> int:
    """16-bit probability ``num / den``, rounded and clamped (1/2 when ``den`` is 0)."""
    if den <= 0:
        return PROB_ONE // 2
    return min(max((2 * num * PROB_ONE + den) // (2 * den), PMIN), PROB_ONE - PMIN)


# ---------------------------------------------------------------------------------------
# Table


class CtxTable:
    """Context-adaptive code for symbols ``0..nsym-1`` whose prior is the integer table
    ``freqs`` (summing to ``2**precision``); ``limit`` caps the adaptation counts.

    Every symbol is codable, whatever its prior frequency (0 included).  ``model_version``
    (``MODEL_VERSIONS``; None: the latest) selects the model; it is stored in the table
    bytes, so a file decodes with the model it was written with."""

    MODEL_VERSIONS = MODEL_VERSIONS  # a subclass with another model stores its own

    def __init__(self, freqs, precision: int = 16, limit: int = 60, model_version=None):
        precision = check_precision(precision)
        if model_version is None:  # the latest, never the reference's or the mixed one
            model_version = [v for v in self.MODEL_VERSIONS
                             if v not in (REFERENCE_VERSION, MIXED_VERSION)][-1]
        self.model_version = check_model_version(model_version, self.MODEL_VERSIONS)
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
        self._child, self._tp1, self._path_off, self._path_bit = kern.build_tree(w + 1)
        self._path_node = kern.path_nodes(self._child, self._path_off, self._path_bit)
        self._wm = (w + 1).astype(np.int64)
        grids = "fine" if mmax >= 16 else "coarse"
        r0, r1, r2, count, buckets, mclass = MAG_INIT[grids]
        self._mpar = np.array([r0, r1, r2, min(count, self._limit), MAG_FLOOR, buckets, mclass]
                              + (list(XREF_INIT[grids]) if self.takes_reference else []),
                              dtype=np.int64)
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

    @property
    def kernel_version(self) -> int:
        """The model the kernels code with (``model_version``; ``ctx-steps`` key steps: 1)."""
        return self.model_version

    @property
    def takes_reference(self) -> bool:
        """Whether this table codes a tensor given a reference's symbols (version 6)."""
        return self.model_version == REFERENCE_VERSION

    def with_reference(self) -> "CtxTable":
        """The same prior, coding given a reference (version 6; this table: version 4 or 5,
        which code a lone tensor alike)."""
        if type(self) is not CtxTable or self.model_version not in (4, SEGMENTS_VERSION):
            raise InputError(f"only a ctx model version 4 or 5 table codes given a reference "
                             f"(this one: version {self.model_version})")
        return CtxTable(self._freqs, self._precision, self._limit, REFERENCE_VERSION)

    @property
    def codes_segments(self) -> bool:
        """Whether this table codes a sequence of segments (versions 5 and 7)."""
        return self.model_version in SEGMENTS_VERSIONS

    @property
    def has_mixed(self) -> bool:
        """Whether :meth:`mixed` gives a table (this one: ``ctx`` version 5)."""
        return type(self) is CtxTable and self.model_version == SEGMENTS_VERSION

    def mixed(self) -> "CtxTable":
        """The same prior coding segments with mixed probabilities (version 7; this table:
        version 5): a ``.co3`` group of small layers, where the adaptive statistics are
        still learning, codes in 0.35-3.2 % fewer bytes (for 1.14-1.55x the time per
        symbol)."""
        if not self.has_mixed:
            raise InputError(f"only a ctx model version {SEGMENTS_VERSION} table has a mixed "
                             f"version (this one: version {self.model_version})")
        return CtxTable(self._freqs, self._precision, self._limit, MIXED_VERSION)

    def _reference(self, ref, n: int):
        """``ref`` checked against this table: required (``n`` symbols below ``nsym``, uint16
        or, as ``co3cli.container.xref.kept_dtype`` keeps them, uint8) by a version 6 table,
        refused by any other."""
        if not self.takes_reference:
            if ref is not None:
                raise InputError(f"ctx model version {self.model_version} codes no reference")
            return None
        if ref is None:
            raise InputError(f"ctx model version {REFERENCE_VERSION} codes given a reference: "
                             "pass ref")
        if isinstance(ref, np.ndarray) and ref.dtype == np.uint8:  # kept symbols (xref's
            ref = ref.astype(np.uint16)  # kept_dtype): widened row by row, as coded
        ref = as_symbols(ref)
        if ref.size != n:
            raise InputError(f"ref: {ref.size} symbols for {n}")
        if ref.size and int(ref.max()) >= self.nsym:
            raise InputError(f"ref: a symbol >= nsym={self.nsym}")
        return ref

    def _kernel(self, decode, sym, buf, cols, reference=False, ref=None):
        """Run the coder (``reference=True``: the 0.1.0 kernel of model version 1, same
        bits, for checks and benchmarks); version 5: ``cols`` a row length (one segment) or
        the segments' array."""
        if self.kernel_version in SEGMENTS_VERSIONS and not isinstance(cols, np.ndarray):
            cols = np.array([[sym.size, cols, 0]], dtype=np.int64)
        model = (cols, self._K, self._mmax, self._pz0, self._ps0, self._child, self._tp1,
                 self._path_off, self._path_bit)
        if reference:
            if self.kernel_version != 1:
                raise InputError("the reference kernel codes model version 1 only")
            from co3cli.coding.ctx_reference import run_reference

            return run_reference(decode, sym, buf, *model, self._limit, kern.RECIP)
        run = _KERNELS[self.kernel_version][1 if decode else 0]
        extra = (self._wm, self._mpar) if self.kernel_version >= 4 else ()
        if ref is not None:
            extra += (ref,)
        return run(sym, buf, *model, self._path_node, self._limit, kern.RECIP, *extra)

    def encode(self, sym, cols=None, ref=None) -> bytes:
        """Encode one tensor's uint16 symbols (C order); ``cols`` is the row length of its
        2-D view (None: 1-D); ``ref``: the reference's symbols (version 6 only, ``sym``'s
        size).  ``sym`` is never modified."""
        return self._encode(sym, cols, ref=ref)

    def _encode(self, sym, cols, reference=False, ref=None) -> bytes:
        sym = as_symbols(sym)
        if not isinstance(cols, np.ndarray):  # (version 5: the segments' array)
            cols = self._row_length(cols, sym.size)
        ref = self._reference(ref, sym.size)
        cap = sym.size + 64
        while True:
            buf = np.empty(cap, dtype=np.uint8)
            status, value = self._kernel(False, sym, buf, cols, reference, ref)
            if status != 2:
                break
            cap *= 4  # rare: more than 8 bits per symbol
        if status:
            raise InputError(f"sym: symbol {int(sym[value])} at index {value} "
                             f">= nsym={self.nsym}; cannot be coded")
        return buf[1:value].tobytes()  # byte 0 is always 0

    def decode(self, payload: bytes, n: int, cols=None, ref=None) -> np.ndarray:
        """Decode exactly ``n`` symbols with the same ``cols`` (and ``ref``) as the encoder,
        consuming exactly all of ``payload``; anything else raises :class:`CorruptDataError`."""
        return self._decode(payload, n, cols, ref=ref)

    def _decode(self, payload, n, cols, reference=False, ref=None) -> np.ndarray:
        n = check_count(n)
        if not isinstance(cols, np.ndarray):
            cols = self._row_length(cols, n)
        ref = self._reference(ref, n)
        data = np.frombuffer(bytes(payload), dtype=np.uint8).copy()
        out = np.zeros(n, dtype=np.uint16)
        status, _ = self._kernel(True, out, data, cols, reference, ref)
        if status:
            why = {1: "ran out of bytes",
                   2: "did not end in the encoder's final state with every byte read",
                   3: "is too short or starts out of range"}[status]
            raise CorruptDataError(f"ctx payload: decoding {n} symbols {why}")
        return out

    def segments_array(self, segments, n: int) -> np.ndarray:
        """``segments`` ((entries, row length, lag) each) as the kernel's array, checked: a
        version 5 or 7 table, entries >= 1 summing to ``n``, each a whole number of rows, the lag
        a whole number of rows less than the entries (0: no previous step)."""
        if not self.codes_segments:
            raise InputError(f"segments need ctx model version 5 or 7 (this table: "
                             f"{self.model_version})")
        seg = np.array(list(segments), dtype=np.int64).reshape(-1, 3)
        if seg.shape[0] == 0 or int(seg[:, 0].sum()) != n or np.any(seg[:, 0] < 1) \
                or np.any(seg[:, 1] < 1) or np.any(seg[:, 0] % seg[:, 1]) \
                or np.any(seg[:, 2] < 0) or np.any(seg[:, 2] >= seg[:, 0]) \
                or np.any(seg[:, 2] % seg[:, 1]):
            raise InputError(f"segments {seg[:4].tolist()}...: need entries >= 1 summing to "
                             f"{n}, whole rows, lags of whole rows below the entries")
        return seg

    def encode_segments(self, sym, segments) -> bytes:
        """Version 5: encode ``sym`` as consecutive ``segments`` ((entries, row length, lag)
        each): the adaptive statistics carry through; rows restart where the row length
        changes; an entry at least ``lag`` entries into its segment is coded given the entry
        ``lag`` before it (the previous step of the same tensor: its sign, its class against
        the prediction and its magnitude in the prediction, as the module docstring says)."""
        sym = as_symbols(sym)
        return self._encode(sym, self.segments_array(segments, sym.size))

    def decode_segments(self, payload: bytes, segments) -> np.ndarray:
        """Decode what :meth:`encode_segments` wrote with the same ``segments``."""
        seg = self.segments_array(segments, int(np.sum([s[0] for s in segments])))
        return self._decode(payload, int(seg[:, 0].sum()), seg)

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
        return bytes([self.model_version, self._precision, self._limit]) + uvarints_to_bytes(
            self._freqs)

    @classmethod
    def from_bytes(cls, data: bytes, nsym: int) -> "CtxTable":
        """Parse ``to_bytes`` output; any inconsistency raises :class:`CorruptDataError`."""
        nsym = check_int("nsym", nsym, 1, MAX_NSYM)
        data = bytes(data)
        if len(data) < 3:
            raise CorruptDataError(f"ctx table: {len(data)} bytes, need at least 3")
        version, precision, limit = data[0], data[1], data[2]
        if version not in cls.MODEL_VERSIONS:
            readable = ", ".join(map(str, cls.MODEL_VERSIONS))
            raise CorruptDataError(f"ctx table: model version {version}, this co3cli "
                                   f"reads version {readable} for this coder")
        if precision not in range(8, 25):
            raise CorruptDataError(f"ctx table: precision byte must be 8..24, got {precision}")
        if limit not in LIMIT_RANGE:
            raise CorruptDataError(f"ctx table: limit byte must be 4..255, got {limit}")
        freqs = parse_freqs(data[3:], nsym, precision, "ctx table")
        try:
            return cls(freqs, precision, limit, model_version=version)
        except InputError as err:
            raise CorruptDataError(f"ctx table: {err}") from None


class CtxCoder(Configurable):
    """Context-adaptive binary range coder (this module); tables are priors."""

    id, kind = "ctx", "coder"
    PARAMS = {"precision": 16, "limit": 60, "model_version": MODEL_VERSION}
    VERSIONS = CODER_VERSIONS  # a config's; tables of REFERENCE_VERSION come from a block
    CONFIG_DEFAULTS = {"model_version": 1}  # a config without it (``config()``, files and
    # codebooks from before version 3) means version 1: ``from_config`` round-trips
    TABLE = CtxTable

    def check(self) -> None:
        self.params["precision"] = self.precision = check_precision(self.params["precision"])
        self.params["limit"] = self.limit = check_limit(self.params["limit"])
        if "model_version" in self.PARAMS:
            self.params["model_version"] = self.model_version = check_model_version(
                self.params["model_version"], self.VERSIONS)
        else:
            self.model_version = None

    def config(self) -> dict:
        """The config; ``model_version`` 1 is left out, so that version 1 files carry the
        config they had before the parameter existed (their tables store the version)."""
        cfg = super().config()
        if cfg.get("model_version") == 1:
            del cfg["model_version"]
        return cfg

    def table_from_weights(self, weights) -> CtxTable:
        """Prior from a pmf or counts (``quantize_freqs`` at this precision)."""
        return self._table(quantize_freqs(weights, self.precision))

    def table_from_ints(self, freqs) -> CtxTable:
        """Table from integer prior frequencies (as saved in a codebook file)."""
        return self._table(freqs)

    def _table(self, freqs) -> CtxTable:
        return self.TABLE(freqs, self.precision, self.limit, model_version=self.model_version)

    def table_from_bytes(self, data: bytes, nsym: int) -> CtxTable:
        """A stored table; it decodes with the model version it stores (files written
        before ``model_version`` existed store 1), whatever this config's version."""
        table = self._from_bytes(data, nsym)
        if (table.precision, table.limit) != (self.precision, self.limit):
            raise CorruptDataError(
                f"ctx table: stored precision={table.precision}, limit={table.limit}; "
                f"coder config says {self.precision}, {self.limit}"
            )
        return table

    def _from_bytes(self, data: bytes, nsym: int) -> CtxTable:
        return self.TABLE.from_bytes(data, nsym)
