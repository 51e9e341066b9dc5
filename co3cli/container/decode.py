"""A verified ``.co3`` file's blocks back to symbols: grid and coder from the header, each
block's integer table parsed (once per group block), each chunk decoded on its own.

    header --read_co3_setup--> grid, coder;  block --block_table--> table
    block --step_tables--> the table of each step (an ``LYS`` block: its group's, a stored
        group's ``co3cli.coding.raw.RawTable``; otherwise the block's table for every step)
    block --iter_decode_block--> symbols of each step (numel,) --decode_block--> (steps, numel)
    (a joined block, ``LYJ``/``GRJ``/``GRC``: its one chunk decoded as steps x numel symbols,
    then split; a stacked ``GRC`` member: its stack decoded once per group, its part taken;
    a ``STREAMS`` group: its one body decoded as segments, once)
"""

from __future__ import annotations

import numpy as np

from co3cli.coding import coder_from_config, row_length
from co3cli.coding.raw import RawTable
from co3cli.container.tableset import KIND_RAW
from co3cli.errors import CorruptDataError, InputError
from co3cli.formats import get_grid


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
            table = block.cache["table"] = coder.table_from_bytes(block.table, grid.nsym)
        except InputError as e:
            raise CorruptDataError(f"layer {block.name}: bad table ({e})") from None
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
                    table = coder.table_from_bytes(raw, grid.nsym)
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
        if isinstance(scols, tuple):  # a STREAMS body: its segments (ctx model version 5)
            if not hasattr(table, "decode_segments") or table.model_version < 5:
                raise CorruptDataError(f"layer {block.name}: a group coded as segments needs "
                                       "a ctx table of model version 5 or later")
            try:
                sym = table.decode_segments(block.bodies[0], scols)
            except InputError as e:
                raise CorruptDataError(f"layer {block.name}: {e}") from None
        else:
            sym = table.decode(block.bodies[0], total, cols=scols)
        block.cache[("stack", g)] = sym
    return sym[first:first + numel * steps].reshape(steps, numel)


def iter_decode_block(block, grid, coder, numel: int, shape=None):
    """Symbols (numel,) of each step of one verified layer block, in order."""
    tables = step_tables(block, grid, coder)
    cols = row_length(shape, numel)
    if block.joined:  # LYJ/GRJ/GRC: every step in one chunk, the steps as further rows
        yield from joined_symbols(block, tables[0], numel, cols)
        return
    if tables and hasattr(tables[0], "stream"):  # context across steps (ctx-steps): in order
        stream = tables[0].stream(numel, cols)
        for body in block.bodies:
            yield stream.decode(body)
        return
    for table, body in zip(tables, block.bodies):
        yield table.decode(body, numel, cols=cols)


def decode_block(block, grid, coder, numel: int, shape=None) -> np.ndarray:
    """Symbols (steps, numel) of one verified layer block."""
    if block.joined:  # one chunk: its rows are the steps
        return joined_symbols(block, step_tables(block, grid, coder)[0], numel,
                              row_length(shape, numel))
    if len(block.bodies) == 1:  # one step: the decoded row itself, no copy
        return next(iter_decode_block(block, grid, coder, numel, shape))[None, :]
    sym = np.empty((len(block.bodies), numel), dtype=np.uint16)
    for t, row in enumerate(iter_decode_block(block, grid, coder, numel, shape)):
        sym[t] = row
    return sym
