"""Which layer ``co3 compress`` codes given which (``.co3`` ``LYX`` blocks): the writer's rule.

Layers of a dump often agree entry by entry: the streams of an FL ``transmitted.h5``
(``raw`` g, ``corrected`` v = g + gamma e, ``decoded`` v-hat: 87-94 % of their fp4 symbols
equal), tied or mirrored parameters.  The ``ctx`` coder's model version 6 codes a layer
given the symbols of the same step of an earlier layer (``co3cli.coding.ctx``;
``co3cli.container.xref``)::

    layers (names, shapes, groups) --ReferencePlan--> per layer coded alone: its candidates
        (earlier layers coded alone of the same shape, at most MAX_CANDIDATES: the same name
        under another stream first, then the nearest), and which layers' symbols to keep
    layer i coded as always (version 4 or 5) --> the candidate of the lowest estimated
        conditional entropy H(i | j) (order 0, on a sample), if below TRY_RATIO x H(i)
        --> SAMPLE_STEPS steps coded given it: fewer bytes than alone? --> every step:
        fewer bytes in all (table and framing counted)? --> coded given it (an LYX block)

The choice depends only on the data (never on timing or the thread count): the same dump
gives the same bytes.  A layer waits for its candidates' symbols (kept by :class:`SymbolStore`
from their own encoding, a layer equal to an earlier one, ``LYE``, standing for that one);
the symbols kept at once are bounded by ``KEEP_BYTES`` (a plan fixed from the shapes before
anything is read: a layer beyond it is nobody's candidate), the candidates per layer by
``MAX_CANDIDATES``, so a dump of many same-shaped layers costs at most a few estimates and
one trial per layer.  Chains of layers coded given one another stay within
``co3cli.container.xref.MAX_CHAIN``.
"""

from __future__ import annotations

import math
import threading
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np

from co3cli.container.framing import table_field_bytes
from co3cli.container.chunks import LAYER_HEAD
from co3cli.container.xref import (KEEP_BYTES, MAX_CHAIN, XREF_CODER, XREF_FROM, XREF_HEAD,
                                   kept_dtype)
from co3cli.varint import uvarint
from co3cli.workers import map_rows

MAX_CANDIDATES = 3
"""Earlier same-shaped layers a layer may be coded given (each costs an estimate)."""
SAMPLE_ENTRIES = 1 << 16
"""Entries the conditional-entropy estimate sees (strided entries of up to ``SAMPLE_ROWS``
evenly spaced steps)."""
SAMPLE_ROWS = 16
TRY_RATIO = 0.9
"""A candidate is tried when the estimated H(layer | candidate) is below this x H(layer)
(unrelated layers estimate ~1; the FL streams 0.3-0.7)."""
SAMPLE_STEPS = 2
"""Steps coded given the candidate first: only if they cost fewer bytes are the rest coded."""
XREF_EXTRA = XREF_HEAD.size - LAYER_HEAD.size  # an LYX block's head is this much longer


def _stem(name: str, streams) -> str:
    """``name`` less its stream (``raw/fc1.weight`` -> ``fc1.weight``; without the dump's
    ``streams``: less its first path part, if it has several)."""
    head, sep, rest = name.partition("/")
    return rest if sep and (streams is None or head in streams) else name


class ReferencePlan:
    """Candidates per layer and the symbols to keep (fixed from the names and shapes).

    ``names``, ``shapes``: the dump's layers; ``grouped``: the indices of layers in group
    blocks (never candidates, never coded given one); ``steps``: the step count; ``streams``:
    the dump's ``streams`` attribute, or None; ``nsym``: the grid's alphabet (the symbols are
    kept in one byte each where it fits, else two: :func:`kept_dtype`)."""

    def __init__(self, names, shapes, grouped, steps: int, streams=None,
                 keep_bytes: int = KEEP_BYTES, nsym: int = 1 << 16):
        import heapq

        shapes = [tuple(s) for s in shapes]
        grouped = set(grouped)
        self.nsym, self.dtype = nsym, kept_dtype(nsym)
        by_shape: dict[tuple, list[int]] = {}  # earlier layers coded alone, per shape
        by_stem: dict[tuple, list[int]] = {}  # and per (shape, name less its stream)
        self.candidates: dict[int, list[int]] = {}
        for i, name in enumerate(names):
            if i in grouped:
                continue
            stem = (shapes[i], _stem(name, streams))
            near = by_stem.get(stem, [])[-MAX_CANDIDATES:][::-1] + \
                by_shape.get(shapes[i], [])[-2 * MAX_CANDIDATES:][::-1]
            cands = list(dict.fromkeys(near))[:MAX_CANDIDATES]  # the same name first, nearest
            if cands:
                self.candidates[i] = cands
            by_shape.setdefault(shapes[i], []).append(i)
            by_stem.setdefault(stem, []).append(i)
        last: dict[int, int] = {}
        for i, cands in self.candidates.items():
            for j in cands:
                last[j] = max(last.get(j, i), i)
        # keep a layer's symbols from its encoding until its last user is written (as a
        # reader's ReferenceCache does until it is decoded), within keep_bytes
        kept: dict[int, int] = {}
        live, held = [], 0  # (last user, bytes) of the kept layers still held
        self.peak_bytes = 0  # the most symbol bytes kept at once (<= keep_bytes)
        for j in sorted(last):
            while live and live[0][0] < j:  # a last user j: still held when j's come
                held -= heapq.heappop(live)[1]
            size = self.dtype.itemsize * steps * int(np.prod(shapes[j], dtype=np.int64))
            if held + size <= keep_bytes:
                kept[j] = last[j]
                heapq.heappush(live, (last[j], size))
                held += size
                self.peak_bytes = max(self.peak_bytes, held)
        self.last = kept  # kept layer -> its last user
        self.candidates = {i: [j for j in c if j in kept] for i, c in self.candidates.items()}
        self.candidates = {i: c for i, c in self.candidates.items() if c}


@dataclass
class _Entry:
    sym: np.ndarray | None  # None: the layer failed, or is coded in no way a user can use
    chain: int  # LYX blocks in its chain (0: coded alone)
    index: int  # the layer a user names (an LYE layer: its source)


class SymbolStore:
    """Symbols of encoded layers for later layers to be coded given them: :meth:`put` by the
    layer's encoder (always, None on failure, so that no user waits forever), :meth:`get`
    waits for it; :meth:`alias`: an equal layer stands for its source (where the plan keeps
    the source for that user: what is kept never depends on timing); :meth:`done`: layer
    ``i``, coded alone, written (and so every layer coded alone before it): the symbols no
    later layer uses are dropped."""

    def __init__(self, plan: ReferencePlan):
        self._dtype = plan.dtype
        self._kept = plan.last  # the plan's: layer -> its last user (never changes)
        self._last = dict(plan.last)  # those not dropped yet
        self._entries: dict[int, _Entry] = {}
        self._ready = {i: threading.Event() for i in plan.last}
        self._alias: dict[int, int] = {}
        self._lock = threading.Lock()

    def put(self, i: int, sym, chain: int = 0) -> None:
        """Layer ``i``'s symbols (None: none) and chain, once (a later call does nothing)."""
        if i in self._ready and not self._ready[i].is_set():
            if sym is not None:
                sym = sym.astype(self._dtype, copy=False)
            self._entries[i] = _Entry(sym, chain, i)
            self._ready[i].set()

    def alias(self, i: int, source: int) -> None:
        """Layer ``i`` holds the values of ``source`` (an ``LYE`` block): it is ``source``."""
        if i in self._ready:
            self._alias[i] = source
            self.put(i, None)

    def get(self, i: int, user: int) -> _Entry | None:
        """Layer ``i``'s entry for layer ``user`` (a later layer the plan gave it to), once
        put; an alias: its source's, if the plan keeps the source until ``user``."""
        if i not in self._ready:
            return None
        self._ready[i].wait()
        source = self._alias.get(i)
        if source is None:
            return self._entries.get(i)
        if self._kept.get(source, -1) < user:
            return None
        entry = self.get(source, user)
        return None if entry is None else _Entry(entry.sym, entry.chain, source)

    def done(self, i: int) -> None:
        with self._lock:
            for j in [j for j, end in self._last.items() if end <= i]:
                del self._last[j]
                if j in self._entries:
                    self._entries[j].sym = None


def _entropy(counts: np.ndarray) -> float:
    """Miller-Madow corrected plug-in entropy (bits, total) of ``counts`` (``co3cli.detmath``'s
    log and a fixed-order sum: the same choice of reference on every CPU)."""
    from co3cli import detmath

    c = counts[counts > 0].astype(np.float64)
    n = c.sum()
    if n == 0:
        return 0.0
    return -detmath.fsum(c * detmath.log2(c / n)) + (c.size - 1) / (2 * 0.6931471805599453)


def _sample(sym: np.ndarray) -> tuple:
    """Rows and the entry stride of the estimate's sample of a (steps, numel) array.  The
    stride is coprime with ``numel``, and so with the row length of any 2-D view: the sample
    passes through every column (a stride dividing the row length sees only some columns,
    e.g. 4 of a (64, 256) layer: those of an input that is always 0, estimated 1.0)."""
    steps, numel = sym.shape
    rows = np.unique(np.linspace(0, steps - 1, min(steps, SAMPLE_ROWS)).astype(np.int64))
    stride = max(1, rows.size * numel // SAMPLE_ENTRIES)
    while math.gcd(stride, numel) > 1:
        stride += 1
    return rows, stride


def conditional_ratio(sym: np.ndarray, ref: np.ndarray, nsym: int) -> float:
    """Estimated H(sym | ref) / H(sym): order-0 (co-located symbols), Miller-Madow
    corrected, on at most ``SAMPLE_ENTRIES`` entries (1.0 where ``sym`` is constant); the
    joint counts are those of the pairs seen (memory of the sample's size, whatever nsym)."""
    rows, stride = _sample(sym)
    x = sym[rows, ::stride].ravel().astype(np.int32)
    y = ref[rows, ::stride].ravel().astype(np.int32)
    h = _entropy(np.bincount(x, minlength=nsym))
    if h <= 0:
        return 1.0
    joint = np.unique(y * nsym + x, return_counts=True)[1]  # the pairs seen, in order
    return (_entropy(joint) - _entropy(np.bincount(y, minlength=nsym))) / h


def eligible(coder) -> bool:
    """Whether ``coder`` (a ``co3 compress`` coder) can code layers given others."""
    return coder.id == XREF_CODER and getattr(coder, "model_version", None) in XREF_FROM


def _framed(table, bodies) -> int:
    """Bytes of a table and its bodies in a layer block (their length fields included)."""
    return table_field_bytes(table.to_bytes()) + sum(len(b) + len(uvarint(len(b)))
                                                     for b in bodies)


class LayerReferences:
    """``co3 compress``'s side: the plan, the symbols kept, and the trial of each layer coded
    alone (module docstring)."""

    def __init__(self, plan: ReferencePlan):
        self.plan, self.nsym = plan, plan.nsym
        self.store = SymbolStore(plan)

    def wants(self, i: int) -> bool:
        """Whether layer ``i``'s encoder must keep its symbols (``EncodedLayer.sym``)."""
        return i in self.plan.candidates or i in self.plan.last

    @contextmanager
    def coding(self, i: int):
        """Around layer ``i``'s encoding: however it ends, its users stop waiting."""
        try:
            yield
        finally:
            self.store.put(i, None)  # a no-op after :meth:`condition` put its symbols

    def alias(self, i: int, source: int) -> None:
        self.store.alias(i, source)

    def done(self, i: int) -> None:
        self.store.done(i)

    def condition(self, i: int, enc, cols: int, workers=None) -> None:
        """Code layer ``i`` (``enc``: its ``EncodedLayer`` as coded alone, ``enc.sym`` its
        symbols) given its best candidate where that costs fewer bytes (``enc.xref``,
        ``enc.table``, ``enc.bodies`` replaced); then hand its symbols to its users."""
        chain = 0
        found = self._trial(i, enc, cols, workers) if enc.sym is not None else None
        if found is not None:
            enc.xref, chain, enc.table, enc.bodies = found
        self.store.put(i, enc.sym, chain)
        enc.sym = None

    def _trial(self, i: int, enc, cols: int, workers):
        if enc.step_groups is not None or enc.joined or \
                getattr(enc.table, "model_version", None) not in XREF_FROM or \
                not hasattr(enc.table, "with_reference"):
            return None
        best = None
        for j in self.plan.candidates.get(i, ()):
            entry = self.store.get(j, i)
            if entry is None or entry.sym is None or entry.chain >= MAX_CHAIN or \
                    (best is not None and entry.index == best[1].index):
                continue
            ratio = conditional_ratio(enc.sym, entry.sym, self.nsym)
            if ratio < TRY_RATIO and (best is None or ratio < best[0]):
                best = (ratio, entry)
        if best is None:
            return None
        entry, table = best[1], enc.table.with_reference()
        sym, steps = enc.sym, enc.sym.shape[0]

        def encode_rows(which):
            parts = map_rows(workers, len(which), sym.shape[1], lambda lo, hi: [
                table.encode(sym[t], cols=cols, ref=entry.sym[t]) for t in which[lo:hi]])
            return [b for part in parts for b in part]

        first = sorted(set(np.linspace(0, steps - 1, min(steps, SAMPLE_STEPS)).astype(int)
                           .tolist()))
        bodies = dict(zip(first, encode_rows(first)))
        if sum(map(len, bodies.values())) >= sum(len(enc.bodies[t]) for t in first):
            return None
        rest = [t for t in range(steps) if t not in bodies]
        bodies.update(zip(rest, encode_rows(rest)))
        bodies = [bodies[t] for t in range(steps)]
        if _framed(table, bodies) + XREF_EXTRA >= _framed(enc.table, enc.bodies):
            return None
        return entry.index, entry.chain + 1, table, bodies
