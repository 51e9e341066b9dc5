"""A verified ``.co3`` file's blocks back to symbols: grid and coder from the header, each
block's integer table parsed (once per group block), each chunk decoded on its own.

    header --read_co3_setup--> grid, coder;  block --block_table--> table
    block --step_tables--> the table of each step (an ``LYS`` block: its group's, a stored
        group's ``co3cli.coding.raw.RawTable``; otherwise the block's table for every step)
    block --iter_decode_block--> symbols of each step (numel,) --decode_block--> (steps, numel)
    (a joined block, ``LYJ``/``GRJ``/``GRC``: its one chunk decoded as steps x numel symbols,
    then split; a stacked ``GRC`` member: its stack decoded once per group, its part taken;
    a ``STREAMS`` group: its one body decoded as segments, once)
    block, step --decode_step--> that step's symbols alone (random access)

A layer coded given another (``LYX``, ``co3cli.container.xref``) decodes each step given that
step of its source, decoded first (and so on up its chain), or taken from a
:class:`ReferenceCache` that kept the source's symbols when the source itself was decoded.
"""

from __future__ import annotations

import threading

import numpy as np

from co3cli.coding import coder_from_config, row_length
from co3cli.coding.raw import RawTable
from co3cli.container.tableset import KIND_RAW
from co3cli.container.xref import KEEP_BYTES, kept_dtype
from co3cli.errors import CorruptDataError, InputError
from co3cli.formats import get_grid
from co3cli.workers import map_rows


def read_co3_setup(header: dict):
    """Grid and coder described by a verified ``.co3`` header (a lossless file's: its
    ``co3cli.formats.LosslessFormat`` and ``co3cli.coding.lossless.LosslessCoder``)."""
    if header["format"].get("kind") == "lossless":
        from co3cli.coding.lossless import lossless_setup

        return lossless_setup(header)
    try:
        grid = get_grid(header["format"]["id"])
        coder = coder_from_config(header["coder"])
    except (KeyError, TypeError, InputError) as e:
        raise CorruptDataError(f"header does not describe a usable format/coder ({e})") from None
    if grid.config() != header["format"]:
        raise CorruptDataError(f"header's format {header['format']} disagrees with this co3cli's "
                               f"definition of {grid.id!r}")
    return grid, coder


def block_table(block, grid, coder):
    """The block's parsed table (a group's members parse it once: ``block.cache``; an ``LYS``
    block: every group's table is parsed, the representative one returned)."""
    if block.step_groups is not None:
        step_tables(block, grid, coder)
    table = block.cache.get("table")
    if table is None:
        try:
            table = coder.table_from_bytes(block.table, grid.nsym)
        except InputError as e:
            raise CorruptDataError(f"layer {block.name}: bad table ({e})") from None
        block.cache["table"] = _check_reference(block, table)
    return table


def _check_reference(block, table):
    """``table``, if it codes given a reference exactly where ``block`` names one (``LYX``)."""
    if getattr(table, "takes_reference", False) != (block.xref is not None):
        raise CorruptDataError(f"layer {block.name}: a table that codes given a reference in "
                               "a block that names none" if block.xref is None else
                               f"layer {block.name}: coded given a layer, with a table that "
                               "takes no reference")
    return table


def step_tables(block, grid, coder) -> list:
    """The table of each step of a verified block, parsed once per group."""
    if block.step_groups is None:
        return [block_table(block, grid, coder)] * len(block.scales)
    tables = block.cache.get("steps")
    if tables is None:
        tables = []
        for g, (steps, kind, raw) in enumerate(block.step_groups):
            if kind == KIND_RAW:
                table = RawTable(grid.nsym)
            else:
                try:
                    table = _check_reference(block, coder.table_from_bytes(raw, grid.nsym))
                except InputError as e:
                    raise CorruptDataError(f"layer {block.name}: bad table of step group {g} "
                                           f"({e})") from None
            tables += [table] * steps
        block.cache["steps"] = tables
    return tables


def joined_symbols(block, table, numel: int, cols: int) -> np.ndarray:
    """Symbols (steps, numel) of a joined block: its chunk decoded, or (a stacked ``GRC``
    member) its part of its stack, the stack decoded once for the group (``block.cache``)."""
    steps = len(block.scales)
    if block.stack is None:
        return table.decode(block.bodies[0], numel * steps, cols=cols).reshape(steps, numel)
    g, first, total, scols = block.stack
    sym = block.cache.get(("stack", g))
    if sym is None:
        if isinstance(scols, tuple):  # a STREAMS body: its segments (ctx model version 5, 7)
            if not getattr(table, "codes_segments", False):
                raise CorruptDataError(f"layer {block.name}: a group coded as segments needs "
                                       "a ctx table of model version 5 or 7")
            try:
                sym = table.decode_segments(block.bodies[0], scols)
            except InputError as e:
                raise CorruptDataError(f"layer {block.name}: {e}") from None
        else:
            sym = table.decode(block.bodies[0], total, cols=scols)
        block.cache[("stack", g)] = sym
    return sym[first:first + numel * steps].reshape(steps, numel)


class ReferenceCache:
    """The decoded symbols of layers that later ``LYX`` blocks are coded given, kept (``put``
    by whoever decodes such a layer) until the last of those blocks is decoded (``done``),
    at most ``limit`` bytes of them (beyond it a source is decoded again where needed: the
    same symbols), kept as ``co3 compress`` keeps them (``nsym``: the grid's alphabet;
    ``co3cli.container.xref.kept_dtype``).  Thread-safe."""

    def __init__(self, co3, limit: int = KEEP_BYTES, nsym: int = 1 << 16):
        self._dtype = kept_dtype(nsym)
        self._last = co3.reference_users()  # source -> the last layer coded given it
        self._sym: dict[int, np.ndarray] = {}
        self._left = limit
        self._lock = threading.Lock()

    def wants(self, i: int) -> bool:
        return i in self._last

    def get(self, i: int):
        """Layer ``i``'s symbols (steps, numel) if kept (in the kept dtype, which the ``ctx``
        table takes as a reference), else None."""
        return self._sym.get(i)

    def put(self, i: int, sym: np.ndarray) -> None:
        with self._lock:
            size = sym.size * self._dtype.itemsize
            if i in self._last and i not in self._sym and size <= self._left:
                self._sym[i] = sym.astype(self._dtype, copy=False)
                self._left -= size

    def done(self, i: int) -> None:
        """Layer ``i`` decoded: forget the sources no later layer needs."""
        with self._lock:
            for s in [s for s, last in self._last.items() if last <= i]:
                del self._last[s]
                sym = self._sym.pop(s, None)
                self._left += 0 if sym is None else sym.nbytes


def _reference_rows(src, grid, coder, numel: int, shape, refs):
    """The symbols of each step of the source block ``src`` (cached, or decoded)."""
    sym = None if refs is None else refs.get(src.index)
    return iter(sym) if sym is not None else iter_decode_block(src, grid, coder, numel, shape,
                                                               refs)


def iter_decode_block(block, grid, coder, numel: int, shape=None, refs=None):
    """Symbols (numel,) of each step of one verified layer block, in order (``refs``: a
    :class:`ReferenceCache` an ``LYX`` block's source may be in)."""
    tables = step_tables(block, grid, coder)
    cols = row_length(shape, numel)
    if block.joined:  # LYJ/GRJ/GRC: every step in one chunk, the steps as further rows
        yield from joined_symbols(block, tables[0], numel, cols)
        return
    if block.xref is not None:  # LYX: each step given that step of its source
        rows = _reference_rows(block.xref, grid, coder, numel, shape, refs)
        for table, body in zip(tables, block.bodies):
            yield table.decode(body, numel, cols=cols, ref=next(rows))
        return
    if tables and hasattr(tables[0], "stream"):  # context across steps (ctx-steps): in order
        stream = tables[0].stream(numel, cols)
        for body in block.bodies:
            yield stream.decode(body)
        return
    for table, body in zip(tables, block.bodies):
        yield table.decode(body, numel, cols=cols)


def decode_block(block, grid, coder, numel: int, shape=None, refs=None,
                 workers=None) -> np.ndarray:
    """Symbols (steps, numel) of one verified layer block (``refs``: a
    :class:`ReferenceCache`, which is offered them; ``workers``: the rows of a block whose
    steps decode apart, ``LYX`` or not, are shared among them, the same symbols)."""
    tables, cols = step_tables(block, grid, coder), row_length(shape, numel)
    if block.joined:  # one chunk: its rows are the steps
        sym = joined_symbols(block, tables[0], numel, cols)
    elif block.xref is None and len(block.bodies) == 1:  # one step: the decoded row, no copy
        sym = next(iter_decode_block(block, grid, coder, numel, shape))[None, :]
    elif block.xref is None and tables and hasattr(tables[0], "stream"):  # across steps
        sym = np.empty((len(block.bodies), numel), dtype=np.uint16)
        for t, row in enumerate(iter_decode_block(block, grid, coder, numel, shape)):
            sym[t] = row
    else:  # each step apart (LYX: given that step of its source's symbols, decoded first)
        src = None if block.xref is None or refs is None else refs.get(block.xref.index)
        if block.xref is not None and src is None:
            src = decode_block(block.xref, grid, coder, numel, shape, refs, workers)
        sym = np.empty((len(block.bodies), numel), dtype=np.uint16)

        def rows(lo, hi):
            for t in range(lo, hi):
                sym[t] = tables[t].decode(block.bodies[t], numel, cols=cols) if src is None \
                    else tables[t].decode(block.bodies[t], numel, cols=cols, ref=src[t])

        map_rows(workers, len(block.bodies), numel, rows)
    if refs is not None:
        refs.put(block.index, sym)
    return sym


def decode_step(block, grid, coder, numel: int, shape, step: int) -> np.ndarray:
    """Symbols (numel,) of step ``step`` alone of one verified layer block: its chunk (a
    joined block: its one chunk; ``ctx-steps``: the chunks from its key step on; ``LYX``:
    given that step of its source, decoded first)."""
    tables = step_tables(block, grid, coder)
    if not 0 <= step < len(block.scales):
        raise InputError(f"step {step}: the layer has {len(block.scales)} steps")
    cols = row_length(shape, numel)
    if block.joined:
        return joined_symbols(block, tables[0], numel, cols)[step]
    if hasattr(tables[0], "decode_step"):  # context across steps: from its key step
        return tables[0].decode_step(block.bodies, step, numel, cols)
    if block.xref is not None:
        ref = decode_step(block.xref, grid, coder, numel, shape, step)
        return tables[step].decode(block.bodies[step], numel, cols=cols, ref=ref)
    return tables[step].decode(block.bodies[step], numel, cols=cols)
