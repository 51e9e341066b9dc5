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
(``table_from_weights``/``table_from_ints``/``table_from_bytes``) plus one ``CODERS.register_lazy``
line here (lazy: ``co3 --help`` lists the coders without compiling their kernels).

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

from co3cli.registry import Registry

__all__ = ["CODERS", "get_coder", "coder_from_config", "row_length"]

CODERS: Registry = Registry("coder")
"""Registry: stable id -> coder class (its ``PARAMS`` dict lists the allowed parameters). The
classes live beside their numba kernels and are imported on first use."""
CODERS.register_lazy("ans", "co3cli.coding.ans:AnsCoder",
                     doc="order-0 rANS, within 0.01 % of the table's cross-entropy")
CODERS.register_lazy("huffman", "co3cli.coding.huffman:HuffmanCoder",
                     doc="canonical length-limited Huffman, at least 1 bit per entry")
CODERS.register_lazy("ctx", "co3cli.coding.ctx:CtxCoder",
                     doc="context-adaptive range coder: smallest files, 10-25x slower than ans")
CODERS.register_lazy("ctx-steps", "co3cli.coding.ctx_steps:CtxStepsCoder",
                     doc="ctx conditioned on the previous step of the same tensor (a key step "
                         "every key_every)")


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

