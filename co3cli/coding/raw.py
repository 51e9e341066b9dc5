"""Stored symbols: each symbol in a fixed ``width = bit_length(nsym - 1)`` bits, no table.

The fallback a layer takes when every coded form costs more bytes (a few hundred entries: a
coder's table alone outweighs them). Bits are packed MSB first (``numpy.packbits``), the last
byte padded with zeros; a payload of ``n`` symbols is exactly ``ceil(n * width / 8)`` bytes.
The decoder checks the length, the padding and that every symbol is below ``nsym``.

    >>> import numpy as np
    >>> t = RawTable(15)                      # fp4-co3: 4 bits a symbol
    >>> blob = t.encode(np.array([7, 0, 14], dtype=np.uint16))
    >>> blob.hex(), t.decode(blob, 3).tolist()
    ('70e0', [7, 0, 14])
"""

from __future__ import annotations

import numpy as np

from co3cli.coding.huffman import MAX_NSYM, as_symbols, check_count
from co3cli.errors import CorruptDataError, InputError


def raw_width(nsym: int) -> int:
    """Bits a stored symbol takes (at least 1)."""
    return max(1, (int(nsym) - 1).bit_length())


def raw_bytes(n: int, nsym: int) -> int:
    """Payload bytes of ``n`` stored symbols."""
    return (int(n) * raw_width(nsym) + 7) // 8


class RawTable:
    """The stored form behind the table interface (``encode``/``decode``; no table bytes)."""

    def __init__(self, nsym: int):
        if not 1 <= int(nsym) <= MAX_NSYM:
            raise InputError(f"nsym: need 1..{MAX_NSYM}, got {nsym}")
        self.nsym = int(nsym)
        self.width = raw_width(nsym)
        self._shifts = np.arange(self.width - 1, -1, -1, dtype=np.uint16)

    def encode(self, sym, cols=None) -> bytes:
        sym = as_symbols(sym)
        if sym.size and int(sym.max()) >= self.nsym:
            i = int(np.argmax(sym >= self.nsym))
            raise InputError(f"sym: symbol {int(sym[i])} at index {i} >= nsym={self.nsym}")
        bits = ((sym[:, None] >> self._shifts) & 1).astype(np.uint8)
        return np.packbits(bits.reshape(-1)).tobytes()

    def decode(self, payload: bytes, n: int, cols=None) -> np.ndarray:
        n = check_count(n)
        payload = bytes(payload)
        need = raw_bytes(n, self.nsym)
        if len(payload) != need:
            raise CorruptDataError(f"stored payload: {len(payload)} bytes for {n} symbols "
                                   f"of {self.width} bits (need {need})")
        bits = np.unpackbits(np.frombuffer(payload, dtype=np.uint8))
        if bits[n * self.width:].any():
            raise CorruptDataError("stored payload: padding bits are not zero")
        weights = (1 << self._shifts).astype(np.uint16)
        sym = (bits[:n * self.width].reshape(n, self.width).astype(np.uint16) * weights).sum(
            axis=1, dtype=np.uint16) if n else np.empty(0, dtype=np.uint16)
        if sym.size and int(sym.max()) >= self.nsym:
            raise CorruptDataError(f"stored payload: a symbol >= nsym={self.nsym}")
        return sym

    def to_bytes(self) -> bytes:
        return b""
