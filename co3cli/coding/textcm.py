"""A context-mixing coder for short text (the ``.co3`` 1.5 header): bytes in, bytes out.

Deflate with a preset dictionary (``.co3`` 1.3-1.4) spends on a header of a few hundred bytes
what it must to describe its Huffman trees and a match per copied string; a bitwise
context-mixing model pays only for what it cannot predict. The model is primed with text both
sides know (a dictionary, and text derived from what was decoded before: priming codes
nothing) and adapts as it codes::

    prime(text) ... encode(bytes) ... prime(text) ... encode(bytes) ... finish() -> payload
    prime(text) ... decode(n) -> bytes ... prime(text) ... decode(n) ... finish()

**Model.** Each byte is coded as 8 binary decisions, most significant bit first; a decision's
probability mixes the predictions of

* 7 context tables (2**16 slots each, hashed with the bits of the byte so far): the last 1, 2,
  3, 4 and 6 bytes, the current word (letters, digits, ``_``) and the *field above* (the byte
  at the same offset of the same space-separated field of the previous line: layer lines
  ``name d0,d1,...`` align there); a slot holds a 16-bit probability and a count, moved towards
  each bit by ``1 / (count + 2)`` up to count ``LIMIT``, then by ``1 / (LIMIT + 2)``;
* a match model: the byte after the last occurrence of the last ``MINLEN`` bytes predicts the
  next, with a confidence learnt per match length (up to 15) and a fixed input growing with it;

in the logistic domain (``stretch``, tables of 4096 entries) with weights selected by the
partial byte and the match state, learnt online; two secondary estimates (by the partial
byte, and by it and the previous byte) refine the mixed probability, interpolated between 24
points. Everything is integer arithmetic and every table a constant of this module, so the
decoder rebuilds the encoder's state bit for bit.

**Coder.** The ``ctx`` coder's binary range coder (32-bit range, a byte at a time, carries
propagated, 16-bit probabilities in ``[16, 65520]``) and its end: the 4 bytes of the final
interval's midpoint. :meth:`TextDecoder.finish` proves the payload was consumed exactly
(every byte read, the code register at half the range).

**Cost.** About 1 microsecond per byte (primed or coded) in the kernel: a header of 3 KB
primed with 10 KB takes ~10 ms. The caller bounds what it decodes (``decode(n)``: ``n`` is
checked against the capacity given at construction, so memory and time stay bounded).

Example::

    >>> enc = TextEncoder(256)
    >>> enc.prime(b"hello world ")
    >>> enc.encode(b"hello world")
    >>> payload = enc.finish()
    >>> dec = TextDecoder(payload, 256)
    >>> dec.prime(b"hello world ")
    >>> dec.decode(11)
    b'hello world'
    >>> dec.finish()
"""

from __future__ import annotations

import numpy as np

from co3cli.errors import CorruptDataError, InputError

__all__ = ["TextEncoder", "TextDecoder"]


class _Model:
    """The model and coder state, shared by the encoder and the decoder."""

    def __init__(self, capacity: int):
        from co3cli.coding import textcm_kernels as k

        if not isinstance(capacity, int) or capacity < 0:
            raise InputError(f"capacity={capacity!r}: need an integer >= 0")
        self._k = k
        self.S = np.zeros(k.NSTATE, dtype=np.int64)
        self.S[k.S_RNG] = 0xFFFFFFFF
        self.S[k.S_PF0] = self.S[k.S_PF1] = -1
        self.T = np.full(k.NCTX * k.TS, 32768 << 8, dtype=np.int32)
        self.W = np.full(k.NSET * k.NI, 1 << 14, dtype=np.int32)
        row = k.apm_start()
        self.A1 = np.tile(row, 256)
        self.A2 = np.tile(row, k.APM_ROWS)
        self.MM = np.full(64, 1 << 15, dtype=np.int32)
        self.H = np.zeros(capacity, dtype=np.uint8)
        self.MH = np.zeros(1 << k.MH_BITS, dtype=np.int32)
        self.capacity = capacity

    @property
    def used(self) -> int:
        """Bytes of history (primed and coded) so far."""
        return int(self.S[self._k.S_HP])

    def _room(self, n: int) -> None:
        if n > self.capacity - self.used:
            raise InputError(f"text model: {n} more bytes after {self.used} exceed its "
                             f"capacity of {self.capacity}")

    def _run(self, mode: int, data: np.ndarray, buf: np.ndarray) -> int:
        k = self._k
        return k.run(mode, data, data.size, self.S, self.T, self.W, self.A1, self.A2, self.MM,
                     self.H, self.MH, buf, k.SQUASH, k.STRETCH)

    def prime(self, text: bytes) -> None:
        """Learn ``text`` as if it had been coded, without coding it (both sides must).

        A fresh model's state after a text of ``_SNAP_MIN`` bytes or more (the ``.co3``
        header's dictionary, primed at every open) is kept per process and copied the next
        time: the same state, ~0.2 ms instead of ~1 microsecond per byte."""
        text = bytes(text)
        self._room(len(text))
        fresh, k = self.used == 0, self._k
        snap = _SNAPS.get(text) if fresh else None
        if snap is not None:
            for name, arr in zip(_SNAP_ARRAYS, snap[1:]):
                getattr(self, name)[:] = arr
            self.H[:len(text)] = snap[0][1]
            self.S[k.S_HP:] = snap[0][0]
            return
        self._run(0, np.frombuffer(text, dtype=np.uint8).copy(), np.zeros(0, dtype=np.uint8))
        if fresh and len(text) >= _SNAP_MIN:
            if len(_SNAPS) >= _SNAP_COUNT:
                _SNAPS.pop(next(iter(_SNAPS)))
            _SNAPS[text] = ((self.S[k.S_HP:].copy(), self.H[:len(text)].copy()),
                            *(getattr(self, name).copy() for name in _SNAP_ARRAYS))


_SNAP_ARRAYS = ("T", "W", "A1", "A2", "MM", "MH")
"""The model's arrays (with the scalar state after the coder's registers, and the history)."""
_SNAP_MIN, _SNAP_COUNT = 1024, 2
_SNAPS: dict = {}
"""Primed states of fresh models, by their text (at most ``_SNAP_COUNT``, ~2 MB each)."""


class TextEncoder(_Model):
    """Encode byte strings, primed in between; ``capacity``: the bytes of history (primed and
    coded) it may hold."""

    def __init__(self, capacity: int):
        super().__init__(capacity)
        self._buf = np.zeros(64, dtype=np.uint8)

    def encode(self, data: bytes) -> None:
        """Code ``data`` (its length is not recorded: the decoder must know it)."""
        self._room(len(data))
        need = int(self.S[self._k.S_POS]) + 12 * len(data) + 16  # at most 12 bits per bit
        if need > self._buf.size:
            self._buf = np.concatenate([self._buf, np.zeros(need - self._buf.size + 64,
                                                           dtype=np.uint8)])
        self._run(1, np.frombuffer(bytes(data), dtype=np.uint8).copy(), self._buf)

    def finish(self) -> bytes:
        """The payload: the bytes written and the 4 of the final interval's midpoint."""
        k, S, buf = self._k, self.S, self._buf
        low, pos = int(S[k.S_LOW] + (S[k.S_RNG] >> 1)), int(S[k.S_POS])
        if low >= 1 << 32:
            low -= 1 << 32
            j = pos - 1
            while buf[j] == 255:
                buf[j] = 0
                j -= 1
            buf[j] += 1
        return buf[:pos].tobytes() + low.to_bytes(4, "big")


class TextDecoder(_Model):
    """Decode what :class:`TextEncoder` wrote, with the same priming at the same places."""

    def __init__(self, payload: bytes, capacity: int):
        super().__init__(capacity)
        self._buf = np.frombuffer(bytes(payload), dtype=np.uint8).copy()
        if self._buf.size < 4:
            raise CorruptDataError(f"text payload of {self._buf.size} bytes (at least 4)")
        self.S[self._k.S_CODE] = int.from_bytes(self._buf[:4].tobytes(), "big")
        self.S[self._k.S_POS] = 4

    def decode(self, n: int) -> bytes:
        """The next ``n`` bytes (CorruptDataError where they would exceed the capacity)."""
        try:
            self._room(n)
        except InputError as e:
            raise CorruptDataError(str(e)) from None
        out = np.zeros(n, dtype=np.uint8)
        if self._run(2, out, self._buf):
            raise CorruptDataError("text payload: ran out of bytes")
        return out.tobytes()

    def finish(self) -> None:
        """CorruptDataError unless every byte was read and the coder ended where the encoder
        did (the code register at half the range)."""
        k, S = self._k, self.S
        if int(S[k.S_POS]) != self._buf.size or int(S[k.S_CODE]) != int(S[k.S_RNG]) >> 1:
            raise CorruptDataError("text payload: does not end where its encoder did "
                                   "(damaged, or bytes missing or left over)")
