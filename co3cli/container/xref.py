"""Layers coded given another layer (``LYX`` blocks): the block's layout and its checks.

A dump often holds layers that agree entry by entry: the ``raw``, ``corrected`` and
``decoded`` streams of ``co3 simulate fl --dump-rounds`` (87-94 % of their fp4 symbols
equal), tied or mirrored parameters.  The ``ctx`` coder's model version 6
(``co3cli.coding.ctx``) codes a tensor given such a *reference*: the co-located symbols of
the same step of an earlier layer of the file, which the decoder holds already.  The block
says which layer::

    xref := "LYX\\0" | index u32 | source u32 | meta_len u32 | meta JSON
            | table_len u32 | table | chunk * steps | crc32(the whole block before it) u32

``source`` is the reference: an earlier layer of the same shape coded in a block of its own
(``LYR``, ``LYS``, ``LYJ`` or another ``LYX``; never a group member or an equal-layer
reference ``LYE``, whose own source is named instead).  Chunk ``t`` is coded given the
symbols of step ``t`` of the source, so decoding a step of the layer first decodes that step
of the source (and of its source, up the chain).  Chains are at most ``MAX_CHAIN`` blocks
long, so a step costs at most ``MAX_CHAIN + 1`` decodes; the table is a ``ctx`` table of
model version 6 (the file's coder ``ctx`` of model version 4 or 5, whose prior it keeps) and a
version 6 table appears in no other block.
Chunks are per step (never joined).  Like ``LYS`` and ``LYE`` the tag is the feature flag:
any 1.x file may hold one, files without one keep their bytes, and a reader that predates it
refuses the block in one line (an unknown tag) before decoding anything.

A reader refuses, in one line: a source that is not earlier (forward, itself, out of
range), not coded alone, an ``LYE`` reference, of another shape, a chain longer than
``MAX_CHAIN``, and the block in a file whose coder is not ``ctx``.
"""

from __future__ import annotations

import struct

import numpy as np

from co3cli.errors import CorruptDataError

XREF_TAG = b"LYX\0"
XREF_HEAD = struct.Struct("<4sIII")  # tag, index, source, meta_len
MAX_CHAIN = 4
"""An ``LYX`` block's source may itself be one, this many blocks deep at most."""
XREF_CODER = "ctx"
"""The coder whose tables code given a reference (model version 6)."""
XREF_FROM = (4, 5)
"""The model versions of that coder whose files may hold ``LYX`` blocks (they code a lone
tensor alike: version 5 with one segment is version 4)."""
KEEP_BYTES = 256 << 20
"""Sources' symbols (in :func:`kept_dtype`) held at once: by ``co3 compress`` for the layers
it codes given them (``co3cli.references``, whose plan keeps within it) and by the readers'
cache (``co3cli.container.decode.ReferenceCache``), so that each source of a file written
within it is decoded once."""


def check_source(header: dict, refs: dict, offsets: list, i: int, source: int,
                 depth: int) -> None:
    """Layer ``i``'s reference ``source`` (``depth``: ``LYX`` blocks in the chain so far, this
    one included) as a reader may use it, or CorruptDataError naming the problem."""
    lays = header["layers"]
    if header["coder"].get("id") != XREF_CODER:
        raise CorruptDataError(f"layer {i}: coded given another layer in a file whose coder is "
                               f"{header['coder'].get('id')!r}, not {XREF_CODER!r}")
    if not 0 <= source < i:
        raise CorruptDataError(f"layer {i}: coded given layer {source}, which is not an "
                               "earlier layer")
    if len(refs[offsets[source]]) != 1:
        raise CorruptDataError(f"layer {i}: coded given layer {source}, which is not coded "
                               "alone")
    if lays[source]["shape"] != lays[i]["shape"]:
        raise CorruptDataError(f"layer {i} ({lays[i]['name'][:80]}): coded given layer "
                               f"{source} of another shape")
    if depth > MAX_CHAIN:
        raise CorruptDataError(f"layer {i}: a chain of more than {MAX_CHAIN} layers coded "
                               "given one another")


def kept_dtype(nsym: int | None) -> np.dtype:
    """The dtype sources' symbols of an ``nsym``-symbol grid are kept in (``KEEP_BYTES``):
    uint8 where they fit (every fp8 and fp4 grid: half the coders' uint16), else uint16
    (``None``, a lossless format's: no alphabet, and no ``LYX`` block)."""
    return np.dtype(np.uint8 if nsym is not None and nsym <= 256 else np.uint16)
