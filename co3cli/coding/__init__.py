"""Entropy coders behind one interface, registered by stable id.

Data flow::

    get_coder("huffman", max_len=16)  or  get_coder("ans", precision=16)
        coder.table_from_weights(pmf or counts) -> table      (integers only from here on)
        table.encode(sym) -> bytes;  table.decode(bytes, n) -> sym
        table.to_bytes() -> bytes;   coder.table_from_bytes(bytes, nsym) -> table

Every table offers the same methods: ``encode(sym, cols=None) -> bytes``,
``decode(payload, n, cols=None)`` (``cols``: the row length of the tensor's 2-D view, used by
context-modelling coders and ignored by the order-0 ones),
``expected_bits(counts)``, ``to_bytes()``, ``ints()`` (the integer table: code lengths or
frequencies, as a codebook stores it), ``pmf()`` (the probabilities it codes with), plus
``nsym``.  ``coder.config()`` is the dict to write into a file header;
``coder_from_config(config)`` rebuilds the coder.  Coders are registered in ``CODERS``
(:class:`co3cli.registry.Registry`): a new coder is one module with a ``Configurable`` class
(``table_from_weights``/``table_from_ints``/``table_from_bytes``) plus one ``CODERS.register`` line.

Framing.  An rANS payload is self-delimiting already.  A Huffman payload is not (its last
byte is padded), so the common ``encode`` prepends the exact bit count::

    uvarint(nbits) (LEB128, shortest form) + payload (ceil(nbits / 8) bytes)

and the common ``decode`` checks both parts.  The raw ``(payload, nbits)`` API stays on
``table.raw`` (a :class:`HuffmanTable`).

Example::

    >>> import numpy as np
    >>> coder = get_coder("huffman", max_len=12)
    >>> coder.config()
    {'id': 'huffman', 'max_len': 12}
    >>> table = coder.table_from_weights(np.array([3.0, 1.0, 1.0]))
    >>> sym = np.array([0, 0, 2, 1], dtype=np.uint16)
    >>> blob = table.encode(sym)
    >>> blob.hex(), table.decode(blob, 4).tolist()
    ('0638', [0, 0, 2, 1])
"""

from __future__ import annotations

import numpy as np

from co3cli.coding.ans import (
    AnsTable, check_precision, quantize_freqs, uvarints_from_bytes, uvarints_to_bytes,
)
from co3cli.coding.ctx import CtxCoder
from co3cli.coding.huffman import HuffmanTable, check_max_len, huffman_lengths
from co3cli.errors import CorruptDataError
from co3cli.registry import Configurable, Registry

__all__ = [
    "AnsTable", "HuffmanTable", "FramedHuffmanTable", "HuffmanCoder", "AnsCoder", "CtxCoder",
    "CODERS", "get_coder", "coder_from_config", "huffman_lengths", "quantize_freqs", "row_length",
]


class FramedHuffmanTable:
    """A :class:`HuffmanTable` with the common, self-delimiting ``encode``/``decode``."""

    def __init__(self, raw: HuffmanTable):
        self.raw = raw

    @property
    def nsym(self) -> int:
        return self.raw.nsym

    def encode(self, sym, cols=None) -> bytes:
        """``uvarint(nbits) + payload``."""
        payload, nbits = self.raw.encode(sym)
        return uvarints_to_bytes([nbits]) + payload

    def decode(self, payload: bytes, n: int, cols=None) -> np.ndarray:
        """Parse the bit count, then decode exactly ``n`` symbols from the rest."""
        payload = bytes(payload)
        (nbits,), used = uvarints_from_bytes(payload[:10], 1, "Huffman frame")
        return self.raw.decode(payload[used:], int(nbits), n)

    def expected_bits(self, counts) -> float:
        """Payload bits, not counting the few bytes of the bit-count prefix."""
        return self.raw.expected_bits(counts)

    def to_bytes(self) -> bytes:
        return self.raw.to_bytes()

    @property
    def lengths(self) -> np.ndarray:
        return self.raw.lengths

    def ints(self) -> np.ndarray:
        """The integer table (code lengths, int64; 0: the symbol cannot be coded)."""
        return self.raw.lengths.astype(np.int64)

    def pmf(self) -> np.ndarray:
        """The probabilities the code is optimal for: 2**-length (0 where the length is 0)."""
        ln = self.ints()
        return np.where(ln > 0, np.exp2(-ln.astype(np.float64)), 0.0)


CODERS: Registry = Registry("coder")
"""Registry: stable id -> coder class (its ``PARAMS`` dict lists the allowed parameters)."""


@CODERS.register(doc="canonical length-limited Huffman (>= 1 bit per entry)")
class HuffmanCoder(Configurable):
    """Length-limited canonical Huffman (see :mod:`co3cli.coding.huffman`)."""

    id, kind = "huffman", "coder"
    PARAMS = {"max_len": 16}

    def check(self) -> None:
        self.params["max_len"] = self.max_len = check_max_len(self.params["max_len"])

    def table_from_weights(self, weights) -> FramedHuffmanTable:
        lengths = huffman_lengths(weights, self.max_len)
        return FramedHuffmanTable(HuffmanTable(lengths, self.max_len))

    def table_from_ints(self, lengths) -> FramedHuffmanTable:
        """Table from integer code lengths (as saved in a codebook file)."""
        return FramedHuffmanTable(HuffmanTable(lengths, self.max_len))

    def table_from_bytes(self, data: bytes, nsym: int) -> FramedHuffmanTable:
        raw = HuffmanTable.from_bytes(data, nsym)
        if raw.max_len != self.max_len:
            raise CorruptDataError(
                f"Huffman table: stored max_len={raw.max_len}, coder config says {self.max_len}"
            )
        return FramedHuffmanTable(raw)


@CODERS.register(doc="order-0 rANS (within 0.01 % of the entropy)")
class AnsCoder(Configurable):
    """Range ANS with a 64-bit state (see :mod:`co3cli.coding.ans`)."""

    id, kind = "ans", "coder"
    PARAMS = {"precision": 16}

    def check(self) -> None:
        self.params["precision"] = self.precision = check_precision(self.params["precision"])

    def table_from_weights(self, weights) -> AnsTable:
        return AnsTable(quantize_freqs(weights, self.precision), self.precision)

    def table_from_ints(self, freqs) -> AnsTable:
        """Table from integer frequencies (as saved in a codebook file)."""
        return AnsTable(freqs, self.precision)

    def table_from_bytes(self, data: bytes, nsym: int) -> AnsTable:
        table = AnsTable.from_bytes(data, nsym)
        if table.precision != self.precision:
            raise CorruptDataError(
                f"rANS table: stored precision={table.precision}, "
                f"coder config says {self.precision}"
            )
        return table


CODERS.register(CtxCoder, doc="context-adaptive binary range coder (smallest files, slower)")


def get_coder(id: str, **params):
    """Build the coder registered as ``id`` with keyword ``params``."""
    return CODERS.build(id, **params)


def coder_from_config(config: dict):
    """Inverse of ``coder.config()``."""
    return CODERS.from_config(config)


def row_length(shape, numel: int) -> int:
    """Row length of a tensor's 2-D view (``numel // shape[0]``; ``numel`` for 1-D tensors): the
    ``cols`` that context-modelling coders take."""
    shape = tuple(shape or (numel,))
    return numel // shape[0] if len(shape) >= 2 and shape[0] > 0 else numel

