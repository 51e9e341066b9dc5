"""Which layers of a dump share a group block (``.co3`` 1.1): the writer's rule, recorded.

A *small* layer (steps x numel <= ``SMALL_ENTRIES``) coded alone pays a table (~100-300 bytes),
its metadata JSON and its framing, more than its payload when it holds 10^3 entries. Small
layers are pooled instead: one fitted model, one integer table and one block for the group,
and per layer only its scales, chunk lengths and bodies (each chunk still decodes alone).

    layers (name, numel) ──small?──▶ by kind (the last part of the name: ``weight``,
        ``bias``, ``running_mean`` ...) ──kinds with >= MIN_LAYERS small layers──▶ a group
        each, cut at GROUP_ENTRIES entries; the other small layers pooled ──>= MIN_LAYERS──▶
        one group more; the rest coded alone

The size limit: pooling costs payload where the pooled layers' distributions differ (+2-4 %
on a synthetic mix of GenNorm beta 0.5/1/2 with 0 or 30 % zeros) and saves a table and a
metadata object per layer; on that mix it still saved bytes at 2**13 entries per layer and
lost ~1 % at 2**14, so the limit is 2**13 (on layers of one distribution pooling saved bytes at
both).

The rule depends only on the names, shapes and step count (never on the data or the thread
count), so a dump always maps to the same layout; it is written into the header
(``small_layers``: :func:`plan_config`) of every file that holds a group. Fewer than
``MIN_LAYERS`` small layers are coded alone (a handful of tables is a small cost next to
mixing their distributions; such files keep the 1.0 layout, byte for byte).
"""

from __future__ import annotations

import re

SMALL_ENTRIES = 1 << 13  # a layer of at most this many entries (steps x numel) is small
MIN_LAYERS = 8  # a group holds at least this many layers (a cut-off tail may hold fewer)
GROUP_ENTRIES = 1 << 20  # entries of one group at most (its float32 values are held at once)
JOIN_ENTRIES = 1 << 16  # a layer of at most this many entries (steps x numel) may be joined


def joinable(steps: int, numel: int) -> bool:
    """Whether a layer's steps may be coded as one chunk (``.co3`` 1.3 ``LYJ``/``GRJ``): at
    most ``JOIN_ENTRIES`` entries in all. An adaptive coder then keeps its statistics across
    the steps and any coder pays its final state once; a step of such a layer decodes only with
    the others (a few ms at this size: random access is given up only there). On
    digits-resnet-tiny (10 steps, layers of 8-2304 entries) joining saved 3.5 % of the ``ctx``
    payload at fp8 and 6.5 % at fp4. One step joins too (files written from short scales on,
    ``co3cli.container.gcompact``; a reader before refuses them in one line): a one-step dump's
    small layers then make a ``GRC`` group (one ``ctx`` stream, compact framing, short scales),
    4,228 -> 3,979 bytes on a 5,122-entry capture at fp8. The writer joins a layer only where
    that is smaller."""
    return steps >= 1 and steps * numel <= JOIN_ENTRIES


def join_config() -> dict:
    """The join rule's parameter, as the header records it (``joined_steps``)."""
    return {"max_entries": JOIN_ENTRIES}


def layer_kind(name: str) -> str:
    """The last part of a layer's name (``layer1.0.bn1.weight`` -> ``weight``)."""
    return re.split(r"[./]", name)[-1]


def plan_config(pool_all: bool = False) -> dict:
    """The rule's parameters, as the header records them (``pool_all``: see
    :func:`plan_groups`)."""
    if pool_all:
        return {"max_entries": JOIN_ENTRIES, "min_layers": 2, "group_entries": GROUP_ENTRIES,
                "pool": "all"}
    return {"max_entries": SMALL_ENTRIES, "min_layers": MIN_LAYERS,
            "group_entries": GROUP_ENTRIES}


def _cut(indices: list[int], entries: list[int]) -> list[list[int]]:
    groups, cur, total = [], [], 0
    for i in indices:
        if cur and total + entries[i] > GROUP_ENTRIES:
            groups.append(cur)
            cur, total = [], 0
        cur.append(i)
        total += entries[i]
    return groups + [cur] if cur else groups


def plan_groups(names: list[str], numels: list[int], steps: int,
                pool_all: bool = False) -> list[list[int]]:
    """Groups of layer indices (each increasing; groups ordered by their first layer).
    ``pool_all`` (an adaptive coder, ``ctx``: its prior matters little, a table per layer
    much): every layer of at most ``JOIN_ENTRIES`` entries in one group (cut at
    ``GROUP_ENTRIES``), whatever its kind, when there are two or more."""
    entries = [steps * n for n in numels]
    if pool_all:
        small = [i for i in range(len(names)) if entries[i] <= JOIN_ENTRIES]
        return _cut(small, entries) if len(small) >= 2 else []
    kinds: dict[str, list[int]] = {}
    for i, name in enumerate(names):
        if entries[i] <= SMALL_ENTRIES:
            kinds.setdefault(layer_kind(name), []).append(i)
    groups, rest = [], []
    for idx in kinds.values():
        if len(idx) >= MIN_LAYERS:
            groups += _cut(idx, entries)
        else:
            rest += idx
    if len(rest) >= MIN_LAYERS:
        groups += _cut(sorted(rest), entries)
    return sorted(groups)


def plan_units(nlayers: int, groups: list[list[int]]) -> list[tuple[bool, list[int]]]:
    """The blocks in file order, ``(is_group, layer indices)``: a layer coded alone at its
    place, a group at the place of its first layer."""
    first = {g[0]: g for g in groups}
    grouped = {i for g in groups for i in g}
    return [(True, first[i]) if i in first else (False, [i]) for i in range(nlayers)
            if i in first or i not in grouped]
