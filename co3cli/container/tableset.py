"""Step groups of a layer block (``LYS\\0``): consecutive steps, each group with its own table.

A layer whose steps drifted is cheaper with one table per group of steps than with one for
all (the writer's choice: :mod:`co3cli.segments`); a layer of a few entries is cheaper stored
than coded (a coder's table outweighs it). Such a layer is written as an ``LYS`` block: the
layer block's layout with this *table set* in the table field::

    tableset := n_groups uvarint | group * n_groups
    group    := steps uvarint | kind u8 | table_len uvarint | table
    kind     := 0 (the file's coder, ``table`` its integer table)
              | 1 (stored symbols, ``co3cli.coding.raw``; table_len 0)

Groups cover the layer's steps in order: ``steps >= 1`` each, summing to the file's step
count; step ``t``'s chunk is coded with the table of the group holding it. Every other
layer block is written as before (``LYR``), so files where no layer splits or falls back are
byte-identical to those of earlier versions. The block tag is the feature flag: a reader of
any 1.x file accepts it; a co3cli before it refuses the block ("bad block tag").
"""

from __future__ import annotations

from co3cli.container.framing import read_uvarint
from co3cli.container.header import MAX_TABLE
from co3cli.errors import CorruptDataError, InputError
from co3cli.segments import KIND_RAW, KIND_TABLE
from co3cli.varint import uvarint

STEPS_TAG = b"LYS\0"
KINDS = (KIND_TABLE, KIND_RAW)


def pack_tableset(groups: list[tuple[int, int, bytes]], nsteps: int) -> bytes:
    """The table set of ``groups`` ((steps, kind, table bytes), in step order)."""
    if not groups or sum(s for s, _, _ in groups) != nsteps or any(s < 1 for s, _, _ in groups):
        raise InputError(f"step groups {[s for s, _, _ in groups][:8]} do not cover {nsteps} steps")
    out = [uvarint(len(groups))]
    for steps, kind, table in groups:
        if kind not in KINDS or (kind == KIND_RAW and table):
            raise InputError(f"step group kind {kind} with {len(table)} table bytes")
        out += [uvarint(steps), bytes([kind]), uvarint(len(table)), table]
    return b"".join(out)


def parse_tableset(buf: bytes, nsteps: int, what: str) -> list[tuple[int, int, bytes]]:
    """The groups of a table set, checked (CorruptDataError naming ``what`` otherwise)."""
    end = len(buf)
    n, pos = read_uvarint(buf, 0, end, f"{what} step groups")
    if not 1 <= n <= max(1, nsteps):
        raise CorruptDataError(f"{what}: {n} step groups for {nsteps} steps")
    groups, covered = [], 0
    for g in range(n):
        steps, pos = read_uvarint(buf, pos, end, f"{what} step group {g}")
        if pos >= end:
            raise CorruptDataError(f"{what}: step group {g} is cut short")
        kind = buf[pos]
        tlen, pos = read_uvarint(buf, pos + 1, end, f"{what} step group {g} table length")
        if kind not in KINDS:
            raise CorruptDataError(f"{what}: step group {g} has unknown kind {kind}")
        if steps < 1 or covered + steps > nsteps:
            raise CorruptDataError(f"{what}: step group {g} of {steps} steps overruns the "
                                   f"layer's {nsteps} steps")
        if tlen > MAX_TABLE or pos + tlen > end:
            raise CorruptDataError(f"{what}: step group {g}'s table overruns the table set")
        if kind == KIND_RAW and tlen:
            raise CorruptDataError(f"{what}: stored step group {g} carries a table")
        groups.append((steps, kind, bytes(buf[pos:pos + tlen])))
        covered += steps
        pos += tlen
    if covered != nsteps:
        raise CorruptDataError(f"{what}: step groups cover {covered} of {nsteps} steps")
    if pos != end:
        raise CorruptDataError(f"{what}: {end - pos} unexpected bytes after the step groups")
    return groups


def representative_table(groups: list[tuple[int, int, bytes]], header: dict) -> bytes:
    """The table a reader reports for the whole layer (``LayerBlock.table``; decoding uses the
    groups'): a single coded group's own; otherwise the file's coder's table of the groups'
    probabilities weighted by their steps (a stored group's: equal weights), which codes every
    symbol any step holds."""
    coded = [table for _, kind, table in groups if kind == KIND_TABLE]
    if len(coded) == 1 and len(groups) == 1:
        return coded[0]
    import numpy as np

    from co3cli.coding import coder_from_config
    from co3cli.formats import get_grid

    try:
        nsym = get_grid(header["format"]["id"]).nsym
        coder = coder_from_config(header["coder"])
        weights = np.zeros(nsym)
        for steps, kind, table in groups:
            pmf = coder.table_from_bytes(table, nsym).pmf() if kind == KIND_TABLE \
                else np.full(nsym, 1.0 / nsym)
            weights += steps * pmf / pmf.sum()
        return coder.table_from_weights(weights).to_bytes()
    except (KeyError, TypeError, InputError) as e:
        raise CorruptDataError(f"header or step-group table unusable ({str(e)[:200]})") from None
