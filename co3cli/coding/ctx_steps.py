"""Context across steps: the ``ctx`` coder conditioned on the previous step of the same tensor
(coder id ``ctx-steps``).

Where the decoder already holds the previous step of a tensor (a dump decoded in order, an FL
client/server pair that both keep the last decoded update) the ``ctx`` model (contexts,
predictor and adaptation: ``co3cli/coding/ctx.py``) is extended in two ways:

* **the previous step's co-located symbol** ``prev[i]`` is one more dimension (5 classes:
  absent, zero, or a nonzero magnitude more than 1.5 indices below the prediction ``P``,
  within 1.5 of it, or more than 1.5 above) of the zero-flag contexts, their parents and the
  magnitude contexts; a column never seen nonzero predicts the previous step's magnitude;
  a row with no residual yet uses its own offset from the previous step (the per-row scale
  predicted from the previous step) instead of the row above's;
* **the model state carries over**: adaptive probabilities, column estimates, the left-error
  weight and the per-row offsets continue from the previous step instead of restarting from
  the prior (a small tensor no longer pays the learning cost at every step).

Every ``key_every`` steps (``K``; ``0``: only the first step) the state is reset and the step
is coded with no previous step: a **key step**, byte for byte the ``ctx`` payload of that
step, decodable on its own.  Step ``s`` of a dump decodes from the chunks of its key step
``K * (s // K)`` through ``s``.  Data flow::

    prior (CtxTable) --stream(n, cols)--> CtxStepsStream (state, previous symbols)
    step t: sym_t --encode (key step: reset; else condition on sym_{t-1})--> payload_t
    payload_t --decode (same state, same sym_{t-1})--> sym_t

Measured on the 200-consecutive-steps mnist5k-mlp dump (``benchmarks/bench_ctx_steps.py``;
figures in ``README.md``).  Payloads are framed and checked exactly like ``ctx``'s (midpoint
flush, every byte consumed); a failed step leaves the stream unusable until :meth:`reset`
(decoding anything after it would only propagate the damage).

**Table serialisation**: ``ctx``'s layout with model version byte 2.  ``key_every`` is a coder
parameter, so it is recorded in a ``.co3`` header's coder config (and the container marks
files whose chunks depend on earlier ones: ``co3cli.container``, version 1.2).

Example::

    >>> import numpy as np
    >>> from co3cli.coding import get_coder
    >>> table = get_coder("ctx-steps", key_every=2).table_from_weights(np.ones(5))
    >>> sym = np.array([[2, 2, 3, 1], [2, 2, 3, 0], [4, 2, 2, 2]], dtype=np.uint16)
    >>> bodies = table.encode_steps(sym, cols=2)
    >>> table.decode_steps(bodies, 4, cols=2).tolist()
    [[2, 2, 3, 1], [2, 2, 3, 0], [4, 2, 2, 2]]
    >>> table.decode_step(bodies, 1, 4, cols=2).tolist()   # from its key step, 0
    [2, 2, 3, 0]
"""

from __future__ import annotations

import numpy as np

from co3cli.checks import check_int
from co3cli.coding import ctx_kernels as kern
from co3cli.coding import ctx_steps_kernels as skern
from co3cli.coding.ctx import CtxCoder, CtxTable
from co3cli.coding.huffman import as_symbols, check_count
from co3cli.errors import CorruptDataError, InputError
from co3cli.varint import uvarints_from_bytes, uvarints_to_bytes

__all__ = ["CtxStepsCoder", "CtxStepsTable", "CtxStepsStream", "DEFAULT_KEY_EVERY",
           "key_steps"]

DEFAULT_KEY_EVERY = 16
"""Default ``key_every``: random access every 16 steps costs 0.1-2 % against a single key step
(``key_every=0``) on the benchmark dumps (README, ``benchmarks/bench_ctx_steps.py``)."""


_WIRE = ("i4", "i8", "?", "i8", "i8", "i8", "?", "i8", "u2")
"""The checkpoint's types of the state arrays and the previous symbols (:meth:`CtxStepsStream.
to_bytes`: the column estimates and counts as int64, as co3cli wrote them before it kept them
narrower)."""


def check_key_every(key_every) -> int:
    return check_int("key_every", key_every, 0)


def key_steps(nsteps: int, key_every: int) -> list[int]:
    """The key steps among ``range(nsteps)`` (``key_every = 0``: step 0 only)."""
    return list(range(0, nsteps, key_every)) if key_every else ([0] if nsteps else [])


class CtxStepsStream:
    """The coding state of one tensor's successive steps (``n`` symbols each, rows of
    ``cols``): the adaptive model and the previous step's symbols.  Encoder and decoder each
    keep one and code the same steps in the same order; the next step is a key step when
    :attr:`since_key` is 0 or reaches ``key_every``.  :meth:`reset`: the next step is a key
    step (a client that skipped rounds, a restored state)."""

    def __init__(self, table: "CtxStepsTable", n: int, cols=None, key_every=None):
        self._t = table
        self.n = check_count(n)
        self.cols = table._row_length(cols, self.n)
        self.key_every = table.key_every if key_every is None else check_key_every(key_every)
        rows = -(-max(self.n, 1) // self.cols)
        npr, nzp, nmc = skern.state_sizes(table._child.size // 2)
        # PR, zparent, minit, col_est, col_n, row_off, row_ok, scal: the per-column state in
        # the narrowest types its bounded values take (6 bytes per column, not 16)
        self._arrays = [np.zeros(npr, dtype=np.int32), np.zeros(nzp, dtype=np.int64),
                        np.zeros(nmc, dtype=np.bool_), np.zeros(self.cols, dtype=np.int32),
                        np.zeros(self.cols, dtype=np.int16), np.zeros(rows, dtype=np.int64),
                        np.zeros(rows, dtype=np.bool_), np.zeros(5, dtype=np.int64)]
        self._prev = np.zeros(self.n, dtype=np.uint16)
        self.reset()

    def reset(self) -> None:
        """Forget the previous step: the next one is a key step."""
        self.since_key = 0
        self._broken = False

    def to_bytes(self) -> bytes:
        """The whole state (a checkpoint): ``uvarint`` n, cols, key_every, since_key, broken,
        then the state arrays and the previous symbols (little-endian, fixed sizes)."""
        head = uvarints_to_bytes([self.n, self.cols, self.key_every, self.since_key,
                                  int(self._broken)])
        return head + b"".join(a.astype(np.dtype(w).newbyteorder("<"), copy=False).tobytes()
                               for a, w in zip((*self._arrays, self._prev), _WIRE))

    @classmethod
    def from_bytes(cls, table: "CtxStepsTable", data: bytes) -> "CtxStepsStream":
        """Inverse of :meth:`to_bytes` for the same table (CorruptDataError otherwise)."""
        data = bytes(data)
        vals, used = uvarints_from_bytes(data[:45], 5, "ctx-steps stream")
        n, cols, key_every, since_key, broken = (int(v) for v in vals)
        if n > 1 << 31 or not 1 <= cols <= max(n, 1) or broken > 1:
            raise CorruptDataError("ctx-steps stream: bad header")
        s = cls(table, n, cols, key_every)
        pos = used
        wide = []
        for a, w in zip((*s._arrays, s._prev), _WIRE):
            w = np.dtype(w).newbyteorder("<")
            size = a.size * w.itemsize
            if pos + size > len(data):
                raise CorruptDataError("ctx-steps stream: truncated")
            wide.append(np.frombuffer(data, dtype=w, count=a.size, offset=pos))
            pos += size
        if pos != len(data):
            raise CorruptDataError(f"ctx-steps stream: {len(data) - pos} trailing bytes")
        PR, zparent, _, col_est, col_n = wide[:5]
        probs = np.concatenate([PR.astype(np.int64), zparent]) >> 8
        if np.any((probs != 0) & ((probs < kern.PMIN) | (probs > kern.PROB_ONE - kern.PMIN))) \
                or np.any((col_n < 0) | (col_n > kern.COL_CAP)) \
                or np.any((col_est < -(1 << 31)) | (col_est >= 1 << 31)) \
                or wide[-1].max(initial=0) >= table.nsym:
            raise CorruptDataError("ctx-steps stream: state out of range")
        for a, w in zip((*s._arrays, s._prev), wide):
            a[:] = w
        s.since_key, s._broken = since_key, bool(broken)
        return s

    @property
    def next_is_key(self) -> bool:
        return self.since_key == 0 or (self.key_every > 0 and self.since_key >= self.key_every)

    def _begin(self, decode: bool) -> bool:
        if self._broken:
            raise (CorruptDataError if decode else InputError)(
                "ctx-steps stream: a step failed; reset() before coding more")
        key = self.next_is_key
        if key:
            PR, zparent, minit, *rest = self._arrays
            PR[:] = 0
            PR[skern.NZCTX * skern.NPC:skern.NZCTX * skern.NPC + skern.NSCTX] = \
                (self._t._ps0 << 8) | kern.N0
            zparent[:] = (self._t._pz0 << 8) | kern.N0
            minit[:] = False
            for a in rest:
                a[:] = 0
            self.since_key = 0
        return key

    def _model(self):
        t = self._t
        return (self.cols, t._K, t._mmax, t._child, t._tp1, t._path_off, t._path_bit,
                t._path_node, t._limit, kern.RECIP, *self._arrays)

    def encode(self, sym) -> bytes:
        """Code the next step's ``n`` uint16 symbols (never modified); returns its payload."""
        sym = as_symbols(sym)
        if sym.size != self.n:
            raise InputError(f"sym: {sym.size} symbols; this stream codes {self.n} per step")
        key = self._begin(False)
        saved = [a.copy() for a in self._arrays]
        cap = sym.size + 64
        while True:
            buf = np.empty(cap, dtype=np.uint8)
            status, value = skern.encode_steps_kernel(sym, self._prev, not key, buf,
                                                      *self._model())
            if status != 2:
                break
            for a, s in zip(self._arrays, saved):  # rare: more than 8 bits per symbol
                a[:] = s
            cap *= 4
        if status:  # symbols are checked before anything is coded: the state is intact
            raise InputError(f"sym: symbol {int(sym[value])} at index {value} "
                             f">= nsym={self._t.nsym}; cannot be coded")
        self._prev[:] = sym
        self.since_key += 1
        return buf[1:value].tobytes()

    def decode(self, payload: bytes) -> np.ndarray:
        """Decode the next step from exactly all of ``payload`` (:class:`CorruptDataError`
        otherwise, and the stream then needs :meth:`reset`)."""
        key = self._begin(True)
        data = np.frombuffer(bytes(payload), dtype=np.uint8).copy()
        out = np.zeros(self.n, dtype=np.uint16)
        status, _ = skern.decode_steps_kernel(out, self._prev, not key, data, *self._model())
        if status:
            self._broken = True
            why = {1: "ran out of bytes",
                   2: "did not end in the encoder's final state with every byte read",
                   3: "is too short or starts out of range"}[status]
            kind = "key step" if key else f"step {self.since_key} after its key step"
            raise CorruptDataError(f"ctx-steps payload ({kind}): decoding {self.n} symbols {why}")
        self._prev[:] = out
        self.since_key += 1
        return out


class CtxStepsTable(CtxTable):
    """A ``ctx`` prior whose tensors are coded step after step (:class:`CtxStepsStream`);
    ``encode``/``decode`` code one step alone (a key step: ``ctx``'s bytes)."""

    MODEL_VERSIONS = (2,)   # the version byte of its tables
    kernel_version = 1      # a step alone: ``ctx`` model version 1's bytes

    def __init__(self, freqs, precision: int = 16, limit: int = 60,
                 key_every: int = DEFAULT_KEY_EVERY, model_version=None):
        super().__init__(freqs, precision, limit, model_version)
        self.key_every = check_key_every(key_every)

    def stream(self, n: int, cols=None, key_every=None) -> CtxStepsStream:
        """A fresh coding state for steps of ``n`` symbols."""
        return CtxStepsStream(self, n, cols, key_every)

    def _groups(self, nsteps: int) -> list[tuple[int, int]]:
        keys = key_steps(nsteps, self.key_every)
        return list(zip(keys, keys[1:] + [nsteps]))

    def encode_steps(self, sym, cols=None, run=None) -> list[bytes]:
        """Payloads of the rows of a (steps, n) symbol array, one per step, key step every
        ``key_every``; ``run`` (a list of zero-argument tasks -> their results, e.g.
        ``co3cli.workers.Workers.run``) codes the key groups in parallel (the same bytes)."""
        sym = np.asarray(sym)
        if sym.ndim != 2:
            raise InputError(f"sym: need a (steps, n) array, got shape {sym.shape}")

        def group(lo, hi):
            s = self.stream(sym.shape[1], cols)
            return [s.encode(row) for row in sym[lo:hi]]

        tasks = [lambda lo=lo, hi=hi: group(lo, hi) for lo, hi in self._groups(sym.shape[0])]
        return [b for part in (run or _serial)(tasks) for b in part]

    def decode_steps(self, bodies, n: int, cols=None, run=None) -> np.ndarray:
        """All steps of :meth:`encode_steps` payloads: a (steps, n) uint16 array."""
        out = np.empty((len(bodies), check_count(n)), dtype=np.uint16)

        def group(lo, hi):
            s = self.stream(n, cols)
            for t in range(lo, hi):
                out[t] = s.decode(bodies[t])

        (run or _serial)([lambda lo=lo, hi=hi: group(lo, hi)
                          for lo, hi in self._groups(len(bodies))])
        return out

    def decode_step(self, bodies, step: int, n: int, cols=None) -> np.ndarray:
        """Step ``step`` alone: decodes the chunks from its key step through it."""
        step = check_int("step", step, 0, len(bodies) - 1)
        s = self.stream(n, cols)
        first = step - step % self.key_every if self.key_every else 0
        for t in range(first, step + 1):
            sym = s.decode(bodies[t])
        return sym


def _serial(tasks):
    return [task() for task in tasks]


class CtxStepsCoder(CtxCoder):
    """``ctx`` with context across steps (this module); tables are priors."""

    id, kind = "ctx-steps", "coder"
    PARAMS = {"precision": 16, "limit": 60, "key_every": DEFAULT_KEY_EVERY}
    TABLE = CtxStepsTable

    def check(self) -> None:
        super().check()
        self.params["key_every"] = self.key_every = check_key_every(self.params["key_every"])

    def _table(self, freqs) -> CtxStepsTable:
        return CtxStepsTable(freqs, self.precision, self.limit, self.key_every)

    def _from_bytes(self, data: bytes, nsym: int) -> CtxStepsTable:
        table = CtxStepsTable.from_bytes(data, nsym)
        table.key_every = self.key_every
        return table
