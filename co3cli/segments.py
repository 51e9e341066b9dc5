"""Step groups: one order-0 table per run of consecutive steps, where the steps drifted.

One table for all of a layer's steps codes step ``t`` at its cross-entropy under the pooled
distribution; when the distribution drifts over training (steps far apart, a learning-rate
change) that is well above each step's own entropy. Splitting the steps into consecutive
groups, each with its own table, gains payload bits and costs a table (and a few bytes of
framing) per group more. The split is chosen from the per-step symbol histograms alone::

    counts (steps, nsym) --prefix sums over blocks of steps--> pooled counts of every run
        --order-0 entropy of each run + side bits per group--> dynamic programme
        --> group edges [0, e1, ..., steps]                    (:func:`segment_steps`)
    edges --build each group's real table--> exact bits: cross-entropy of each group's
        counts under its table (``table.expected_bits``) + 8 x its table bytes
        --> kept only where smaller than the one table's       (:func:`plan_step_groups`)

The programme is exact for its cost (the entropy of a run is what a table built from that
run's counts approaches): with ``B`` blocks (the steps themselves, or at most ``MAX_BLOCKS``
runs of consecutive steps) it evaluates all ``B (B + 1) / 2`` runs in ``B`` vectorized passes.
The decision is then re-made with the real tables, so a split is written only where it saves
bytes as coded; a layer without drift stays one group, and its block keeps today's layout.

Order-0 coders only (``ans``, ``huffman``: their ``expected_bits`` is the payload they write);
``ctx`` adapts while it codes and keeps one table per layer.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from co3cli.errors import InputError

MAX_BLOCKS = 64  # candidate group edges: every step, or at most this many runs of steps
GROUP_FRAMING = 3  # bytes a group adds besides its table (steps, kind, table length)
ORDER0_CODERS = ("ans", "huffman")
KIND_TABLE, KIND_RAW = 0, 1  # a step group's kind: the coder's table / stored symbols


def _xlogx(c: np.ndarray) -> np.ndarray:
    from co3cli import detmath  # the same bits on every CPU: the same groups, the same file

    c = np.asarray(c, dtype=np.float64)
    return np.where(c > 0, c * detmath.log2(np.maximum(c, 1.0)), 0.0)


def block_edges(nsteps: int, max_blocks: int = MAX_BLOCKS) -> np.ndarray:
    """Candidate edges: every step, or ``max_blocks`` runs of (nearly) equal length."""
    if nsteps <= max_blocks:
        return np.arange(nsteps + 1)
    return np.unique(np.round(np.linspace(0, nsteps, max_blocks + 1)).astype(np.int64))


def segment_steps(step_counts: np.ndarray, side_bits: float,
                  max_blocks: int = MAX_BLOCKS) -> list[int]:
    """Edges ``[0, e1, ..., steps]`` of the consecutive groups minimising the sum of each
    group's order-0 entropy (bits, its counts pooled) plus ``side_bits`` per group."""
    counts = np.asarray(step_counts, dtype=np.float64)
    nsteps = counts.shape[0]
    if nsteps <= 1:
        return [0, nsteps]
    edges = block_edges(nsteps, max_blocks)
    prefix = np.zeros((edges.size, counts.shape[1]))
    prefix[1:] = np.cumsum(counts, axis=0)[edges[1:] - 1]
    B = edges.size - 1
    best = np.full(B + 1, np.inf)
    best[0] = 0.0
    back = np.zeros(B + 1, dtype=np.int64)
    for j in range(1, B + 1):  # runs (i, j] for every i < j, in one pass
        pooled = prefix[j] - prefix[:j]
        n = pooled.sum(axis=1)
        cost = _xlogx(n) - _xlogx(pooled).sum(axis=1)  # order-0 entropy of each run, bits
        total = best[:j] + cost + side_bits
        back[j] = int(np.argmin(total))
        best[j] = total[back[j]]
    cuts, j = [B], B
    while j > 0:
        j = back[j]
        cuts.append(j)
    return [int(edges[k]) for k in reversed(cuts)]


@dataclass
class StepGroups:
    """A layer's steps in groups: ``edges`` (``[0, ..., steps]``), one table per group, and
    the exact bits of both choices (payload estimate + 8 x table bytes)."""

    edges: list[int]
    tables: list
    bits: float
    single_bits: float

    @property
    def sizes(self) -> list[int]:
        return [b - a for a, b in zip(self.edges, self.edges[1:])]


def table_bits(table, counts, framing: int = GROUP_FRAMING) -> float:
    """Bits of coding ``counts`` with ``table``, its own bytes (and ``framing`` bytes)
    included; inf where it cannot code them."""
    try:
        return table.expected_bits(counts) + 8.0 * (len(table.to_bytes()) + framing)
    except InputError:  # a symbol the table cannot code
        return float("inf")


def plan_step_groups(step_counts: np.ndarray, single, build, max_blocks: int = MAX_BLOCKS):
    """Step groups for a layer, or None when one table (``single``) codes it in fewer bits.

    ``build(lo, hi, counts)`` returns the table for steps ``lo..hi-1`` (``counts``: theirs,
    pooled). The split is proposed by :func:`segment_steps` with the side cost of a table
    like ``single``'s, then judged by the real tables' exact bits."""
    counts = np.asarray(step_counts, dtype=np.int64)
    total = counts.sum(axis=0)
    # no split gains more than the pooled entropy over the steps' own, nor pays with less
    # than a table of nsym / 8 bytes (Huffman at max_len 1; rANS and ctx: >= nsym bytes):
    # where that bound fails, the programme proposes none (a fast exit for small layers)
    xlx = _xlogx(counts).sum(axis=1)
    bound = float(_xlogx(total.sum()) - _xlogx(total).sum()) \
        - float((_xlogx(counts.sum(axis=1)) - xlx).sum())
    if counts.shape[0] < 2 or bound <= 8.0 * (counts.shape[1] // 8 + GROUP_FRAMING):
        return None
    single_bits = table_bits(single, total, framing=0)
    side = 8.0 * (len(single.to_bytes()) + GROUP_FRAMING)
    edges = segment_steps(counts, side, max_blocks)
    if len(edges) <= 2:
        return None
    tables, bits = [], 8.0  # the group count
    for lo, hi in zip(edges, edges[1:]):
        c = counts[lo:hi].sum(axis=0)
        table = build(lo, hi, c)
        tables.append(table)
        bits += table_bits(table, c)
    if not bits < single_bits:
        return None
    return StepGroups(edges, tables, bits, single_bits)


# ---------------------------------------------------------------------------------------
# A layer's tables: the model's or the counts' (by real bits), in step groups, or stored


@dataclass
class LayerTables:
    """What codes a layer: ``table`` (one for all steps, or the representative one of its
    groups), the block metadata, and ``step_groups`` ((steps, kind, table) per group; None:
    one table, the ``LYR`` block of earlier versions)."""

    table: object
    meta: dict
    step_groups: list | None = None

    def per_step(self, nsteps: int) -> list:
        if self.step_groups is None:
            return [self.table] * nsteps
        return [t for steps, _, t in self.step_groups for _ in range(steps)]

    def table_bytes(self) -> int:
        """Bytes of the tables (and of their framing, in step groups)."""
        if self.step_groups is None:
            return len(self.table.to_bytes())
        return 1 + sum(GROUP_FRAMING + len(t.to_bytes()) for _, _, t in self.step_groups)


def candidate_models(model: str, coder) -> tuple[str, ...]:
    """The models a table is built from: ``auto`` tries the exact counts and ``gennorm-zi``
    for an order-0 coder (the smaller by real bits wins, per layer and group) and the
    counts for ``ctx`` (its adaptive prior: the counts' file was the smaller on every
    benchmark dump); any other model is used as given."""
    from co3cli.tables import AUTO

    if model != AUTO:
        return (model,)
    return ("empirical", "gennorm-zi") if coder.id in ORDER0_CODERS else ("empirical",)


def best_table(data, scales, counts, grid, coder, models: tuple[str, ...]):
    """(table, metadata) of the candidate model whose table codes ``counts`` in the fewest
    bits, its own bytes included (the first on ties)."""
    from co3cli import tables

    best = None
    for m in models:
        weights, meta = tables.model_weights(data, scales, counts, grid, m)
        table = coder.table_from_weights(weights)
        if len(models) == 1:
            return table, meta
        bits = table_bits(table, counts, framing=0)
        if best is None or bits < best[0]:
            best = (bits, table, meta)
    return best[1], best[2]


def layer_tables(data, scales, counts, step_counts, grid, coder, model: str) -> LayerTables:
    """The tables of a (steps, numel) layer: the best candidate model's table, split into
    step groups (order-0 coders) where that is smaller by exact bits."""
    models = candidate_models(model, coder)
    table, meta = best_table(data, scales, counts, grid, coder, models)
    if coder.id not in ORDER0_CODERS or step_counts.shape[0] < 2:
        return LayerTables(table, meta)
    metas = []

    def build(lo, hi, c):
        t, m = best_table(data[lo:hi], scales[lo:hi], c, grid, coder, models)
        metas.append(m)
        return t

    plan = plan_step_groups(step_counts, table, build)
    if plan is None:
        return LayerTables(table, meta)
    rep = int(np.argmax(plan.sizes))  # the representative: the group of the most steps
    groups = [(steps, KIND_TABLE, t) for steps, t in zip(plan.sizes, plan.tables)]
    return LayerTables(plan.tables[rep], {**metas[rep], "step_groups": plan.sizes}, groups)


def stored_smaller(coded_bytes: int, nsteps: int, numel: int, nsym: int) -> bool:
    """Whether storing the symbols (``co3cli.coding.raw``) beats ``coded_bytes`` (payload and
    tables; the table set's framing counted against the stored form)."""
    from co3cli.coding.raw import raw_bytes

    return nsteps * raw_bytes(numel, nsym) + 1 + GROUP_FRAMING < coded_bytes


def stored_tables(grid, nsteps: int) -> LayerTables:
    from co3cli.coding.raw import RawTable

    table = RawTable(grid.nsym)
    return LayerTables(table, {"model": "stored"}, [(nsteps, KIND_RAW, table)])
