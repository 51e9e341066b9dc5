"""Compress a gradient dump to ``.co3`` and back, one layer at a time.

    dump.h5 ──read layer (steps, numel)──▶ scale per step ──▶ symbols per step
             ──▶ per-layer integer table (model fit of the scaled values, or a saved codebook;
                 one per group of steps where they drifted, or none: stored; co3cli.segments)
             ──▶ one chunk per step, decodable alone (``ctx-steps``: from its key step on)
             ──▶ grads.co3
    small layers (``co3cli.container.plan``) ──read together──▶ scale, symbols per layer and step
             ──▶ one table for the group (the model fitted to their scaled values pooled)
             ──▶ one group block: each layer's chunks, each step decodable alone (``.co3`` 1.1;
                 ``ctx-steps``: from its key step on)

Lossless means ``decompress(compress(x)) == dequantize(quantize(x))`` bit for bit.
Memory stays at a few times the largest layer, whatever the dump's total size.

Threads: :mod:`co3cli.workers` (the same bytes for any thread count).

Reference: Z.-J. Chen, E. E. Hernandez, Y.-C. Huang, S. Rini, "DNN gradient lossless compression: Can
GenNorm be the answer?", ICC 2022, arXiv:2111.07599 (the model-based code the tables implement).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from co3cli import __version__
from co3cli import codebook as cb
from co3cli import segments, tables
from co3cli.coding import get_coder, row_length
from co3cli.container import (Co3Writer, Joined, join_config, joinable, open_co3, plan_config,
                              plan_groups, plan_units, step_context, table_field_bytes)
from co3cli.container.gcompact import (STACKED, STREAMS, body_members, meta_field_bytes,
                                       payload_shares, prior_bytes, stacked_bodies,
                                       stream_body)
from co3cli.container.gcompact import stacks as stack_groups
from co3cli.container.decode import (ReferenceCache, block_table, decode_block,  # noqa: F401
                                     iter_decode_block, read_co3_setup, step_tables)
# (ReferenceCache, decode_block, iter_decode_block, block_table: re-exported)
from co3cli.errors import InputError
from co3cli.fileio import created_timestamp, input_path, output_file
from co3cli.formats import get_grid
from co3cli.progress import progress_iter
from co3cli.quantize import TIE_RULE, dequantize, dequantize_table
from co3cli.references import LayerReferences, ReferencePlan, eligible
from co3cli.varint import uvarint
from co3cli.workers import Workers, check_threads, map_rows, pipeline


@dataclass
class EncodedLayer:
    """One layer, ready for the container, plus what reports need."""

    meta: dict
    table: object
    scales: np.ndarray
    bodies: list[bytes]
    counts: np.ndarray  # symbol counts over all steps (int64, nsym)
    step_groups: list | None = None  # (steps, kind, table) per group: an LYS block
    joined: bool = False  # ``bodies`` is one chunk of every step (an LYJ block; in a group: GRC)
    payload_bytes: int | None = None  # a stacked group member's share of its stack's body
    sym: np.ndarray | None = None  # its symbols (steps, numel), while they are needed
    xref: int | None = None  # coded given this layer (an LYX block: co3cli.references)


@dataclass
class CodecResult:
    path: str
    nbytes: int
    entries: int
    layers: list[dict] = field(default_factory=list)
    seconds: float = 0.0
    nonfinite_replaced: int = 0  # NaN/Inf set to 0 under the ``zero`` policy

    @property
    def bpe(self) -> float:
        return 8.0 * self.nbytes / self.entries if self.entries else float("nan")

    def to_dict(self) -> dict:
        return {"path": self.path, "bytes": self.nbytes, "entries": self.entries, "bpe": self.bpe,
                "seconds": self.seconds, "nonfinite_replaced": self.nonfinite_replaced,
                "layers": self.layers}


def _quantize_layer(data: np.ndarray, grid, scale_rule, workers):
    """Symbols (uint16, data's shape), per-row scale results and the symbol counts (int64)."""
    from co3cli.quantize import quantize
    from co3cli.scales import scale_info

    sym = np.empty(data.shape, dtype=np.uint16)

    step_counts = np.empty((data.shape[0], grid.nsym), dtype=np.int64)

    def quantize_rows(lo, hi):
        infos = [scale_info(row, grid, scale_rule) for row in data[lo:hi]]
        for t, info in enumerate(infos, lo):
            _, step_counts[t] = quantize(data[t], grid, info.scale, with_counts=True, out=sym[t])
        return infos

    infos = [i for part in map_rows(workers, *data.shape, quantize_rows) for i in part]
    return sym, infos, step_counts.sum(axis=0), step_counts


def _fallback_meta(infos) -> dict:
    """Provenance of steps whose scale came from the fallback (none: empty, nothing written)."""
    fell = [t for t, i in enumerate(infos) if i.fallback]
    if not fell:
        return {}
    return {"scale_fallbacks": len(fell),
            "scale_fallback": {"steps": fell[:64], "used": infos[fell[0]].used,
                               "reason": infos[fell[0]].reason}}


def _scales(infos) -> np.ndarray:
    return np.array([i.scale for i in infos], dtype=np.float32)


def _framed(bodies) -> int:
    """Bytes of chunk bodies with their length varints."""
    return sum(len(b) + len(uvarint(len(b))) for b in bodies)


def _joined_body(table, sym: np.ndarray, cols: int, bodies: list) -> bytes | None:
    """The steps of ``sym`` (steps, numel) coded as one chunk (the steps as further rows of the
    2-D view, so an adaptive coder's statistics carry and one final state is paid), where that
    is smaller than ``bodies``; else None."""
    body = table.encode(sym.reshape(-1), cols=cols)
    return body if _framed([body]) < _framed(bodies) else None


def encode_layer(data: np.ndarray, grid, coder, *, scale_rule=None, model="gennorm-zi",
                 table=None, shape=None, workers: Workers | None = None,
                 join: bool = False, keep_symbols: bool = False) -> EncodedLayer:
    """Quantize and entropy-code a (steps, numel) float32 layer.

    ``table`` reuses a saved codebook table; otherwise one is built from ``model`` fitted to
    this layer's scaled values (or from its counts for ``empirical``), one per group of steps
    where the steps drifted (order-0 coders; ``auto``: also the model chosen by real bits and
    the symbols stored where smaller; :mod:`co3cli.segments`). ``shape`` is the
    parameter's shape (context-modelling coders use its 2-D view). With a scale rule that can
    fall back (``scales.GUARDED_RULES``: ``co3-poly``, ``gennorm-mse``) the metadata of a layer
    where it did records how many steps' scales came from the fallback (``scale_fallbacks``;
    ``scale_fallback``: the first 64 such steps, the rule used and why; absent: none did, so
    files without a fallback keep their bytes), which ``co3 inspect`` shows. ``workers`` share
    the rows (scale, quantize, encode) among threads; the result is the same without.
    ``join``: a small layer (``co3cli.container.joinable``) coded with one table has its steps
    coded as one chunk where that is smaller (per-step random access given up for it).
    ``keep_symbols``: the result keeps the symbols (``sym``: for ``co3cli.references``).
    """
    sym, infos, counts, step_counts = _quantize_layer(data, grid, scale_rule, workers)
    scales = _scales(infos)
    if table is None:  # the model's table, step groups, stored symbols: co3cli.segments
        chosen = segments.layer_tables(data, scales, counts, step_counts, grid, coder, model)
    else:
        chosen = segments.LayerTables(table, {"model": "codebook"})
        unusable = np.flatnonzero((counts > 0) & (table.ints() == 0))
        if unusable.size:
            raise InputError(f"the codebook cannot code symbol(s) {unusable[:5].tolist()} of format "
                             f"{grid.id}; rebuild it with a model (every symbol codable)")
    cols = row_length(shape, data.shape[1])

    def encode_rows(chosen):
        if chosen.step_groups is None:  # one table (context across steps: encode_bodies)
            return encode_bodies(chosen.table, sym, cols, workers)
        per_step = chosen.per_step(data.shape[0])
        parts = map_rows(workers, *data.shape, lambda lo, hi: [
            per_step[t].encode(sym[t], cols=cols) for t in range(lo, hi)])
        return [b for part in parts for b in part]

    bodies = encode_rows(chosen)
    joined = None
    if join and chosen.step_groups is None and joinable(*data.shape):
        joined = _joined_body(chosen.table, sym, cols, bodies)
    coded = sum(map(len, bodies)) if joined is None else len(joined)
    if model == tables.AUTO and segments.stored_smaller(
            coded + chosen.table_bytes(), *data.shape, grid.nsym):
        chosen = segments.stored_tables(grid, data.shape[0])
        bodies, joined = encode_rows(chosen), None
    return EncodedLayer({**chosen.meta, **_fallback_meta(infos)}, chosen.table, scales,
                        bodies if joined is None else [joined], counts, chosen.step_groups,
                        joined is not None, sym=sym if keep_symbols else None)


def encode_bodies(table, sym: np.ndarray, cols: int, workers: Workers | None = None) -> list:
    """One payload per step (row of ``sym``). A table with context across steps
    (``encode_steps``: ``ctx-steps``) codes each key group in order, the groups shared among
    the workers; any other codes every step alone, the rows shared among them."""
    if hasattr(table, "encode_steps"):
        return table.encode_steps(sym, cols, run=None if workers is None else workers.run)
    parts = map_rows(workers, *sym.shape,
                     lambda lo, hi: [table.encode(row, cols=cols) for row in sym[lo:hi]])
    return [b for part in parts for b in part]


@dataclass
class EncodedGroup:
    """Small layers coded with one table (a ``.co3`` group block)."""

    meta: dict  # the pooled fit (report metadata)
    table: object
    members: list[EncodedLayer]  # meta: each layer's own (scale-fallback provenance, or {})
    stacks: list | None = None  # ``.co3`` 1.4: a body per stack of members (``GRC`` layout 1)
    layout: int = STACKED  # of ``stacks``: ``STACKED``, or (1.5) one body of ``STREAMS``


def encode_group(datas: list[np.ndarray], grid, coder, *, scale_rule=None, model="gennorm-zi",
                 shapes=None, join: bool = False) -> EncodedGroup:
    """Quantize and code small (steps, numel_k) layers with one table: ``model`` fitted to
    their scaled values pooled (``empirical``: their counts summed). Each layer's steps stay
    separate chunks, each decodable alone (``ctx-steps``: from its key step on); scales per
    layer and step as in :func:`encode_layer`. ``join``: every member's steps coded as one
    chunk (a ``GRC`` block; members of one row length stacked, or with a table that codes
    segments, ``ctx`` model version 5, every member in one body coded by it or by its mixed
    version 7, with or without each one's previous step in the contexts) where that is
    smaller in all
    (``co3cli.container.joinable``)."""
    quantized = [_quantize_layer(d, grid, scale_rule, None)[:3] for d in datas]
    counts = np.sum([c for _, _, c in quantized], axis=0, dtype=np.int64)
    scaless = [_scales(infos) for _, infos, _ in quantized]
    sample = None if model in ("empirical", tables.AUTO) else tables.pooled_sample(datas, scaless)
    weights, meta = tables.model_weights(None, None, counts, grid, model, sample=sample)
    candidates = [(coder.table_from_weights(weights), meta)]
    if model == tables.AUTO and coder.id == POOL_ALL_CODER:  # an adaptive coder's prior: the
        # pooled counts or a flat one (a table that deflates to a few bytes), the smaller
        candidates.append((coder.table_from_ints(tables.flat_freqs(grid.nsym, coder.precision)),
                           {"model": "uniform"}))
        octaves = tables.octave_freqs(counts, coder.precision)  # the counts, cheaper to store
        if octaves is not None:
            candidates.append((coder.table_from_ints(octaves), {"model": "empirical-octaves"}))
    syms = [(sym, row_length(None if shapes is None else shapes[k], sym.shape[1]))
            for k, (sym, _, _) in enumerate(quantized)]
    can_join = join and all(joinable(*sym.shape) for sym, _ in syms)
    stacks = stack_groups([c for _, c in syms]) if can_join else []
    best = None
    for table, meta in candidates:
        fields = table_field_bytes(table.to_bytes()) + meta_field_bytes(meta)
        bodies = [encode_bodies(table, sym, cols) for sym, cols in syms]
        options = [(sum(map(_framed, bodies)) + fields, table, bodies, False, None, STACKED)]
        if can_join:  # (size, table, bodies, joined, shared bodies, their layout)
            whole = [[table.encode(sym.reshape(-1), cols=cols)] for sym, cols in syms]
            options.append((sum(map(_framed, whole)) + fields, table, whole, True, None, STACKED))
            if len(stacks) < len(syms):  # .co3 1.4 GRC: members of one row length in one body
                sb = stacked_bodies(table, syms, stacks)
                options.append((_framed(sb) + fields, table, whole, True, sb, STACKED))
            if getattr(table, "has_mixed", False):  # 1.5: one body, its prior in fewer
                for t in (table, table.mixed()):  # bytes; ctx version 5, and version 7
                    for lay in STREAMS:  # (mixed) where smaller (a tie keeps version 5)
                        sb = [stream_body(t, syms, lay)]
                        options.append((_framed(sb) + prior_bytes(meta, t.to_bytes(), lay),
                                        t, whole, True, sb, lay))
        size, table, bodies, joined, stacked, layout = min(options, key=lambda o: o[0])
        if best is None or size < best[0]:
            best = (size, table, meta, bodies, joined, stacked, layout)
    _, table, meta, bodies, joined, stacked, layout = best
    if joined:  # a GRC block stores each scale's mantissa bits: the shortest of the same symbols
        from co3cli.scales import short_scales

        scaless = [short_scales(d, grid, s, sym) for d, s, (sym, _, _) in
                   zip(datas, scaless, quantized)]
    pay = None if stacked is None else payload_shares(
        stacked, body_members(layout, [c for _, c in syms]), [sym.size for sym, _ in syms],
        framed=False)
    members = [EncodedLayer(_fallback_meta(infos), table, scales, b if pay is None else [b""],
                            c, joined=joined, payload_bytes=None if pay is None else pay[k])
               for k, ((_, infos, c), scales, b) in enumerate(zip(quantized, scaless, bodies))]
    return EncodedGroup(meta, table, members, stacked, layout)


def _header(dump, grid, coder, scale_rule, model, codebook_info) -> dict:
    return {
        "co3cli_version": __version__,
        "created": created_timestamp(),
        "format": grid.config(),
        "tie_rule": TIE_RULE,
        "scale_rule": scale_rule or ("clip" if grid.clip_sigma is not None else "absmax"),
        "coder": coder.config(),
        "model": model,
        "codebook": codebook_info,
        "layers": [{"name": n, "shape": list(dump.shape(n)), "numel": dump.numel(n)}
                   for n in dump.layers],
        "steps": [int(s) for s in dump.steps],
        "loss": None if dump.loss is None else [float(v) for v in dump.loss],
        "source": {k: v for k, v in dump.attrs.items() if isinstance(v, (str, int, float, bool))},
    }


DEFAULT_FORMAT, DEFAULT_CODER, DEFAULT_MODEL = "fp8-e5m2", "ctx", "auto"  # README: "Rate"
POOL_ALL_CODER = "ctx"  # its small layers share one group whatever their kind (its prior
# adapts: a pooled or flat prior costs ~1-3 % of a small layer's payload, a table per layer
# ~300 bytes at fp8), ``co3cli.container.plan``
BOOK_CODER, BOOK_MODEL = "ans", "gennorm-zi"  # codebooks: tables reused on later steps must
# code every symbol (a model's), and serve the in-training streams (ans)


def _from_book(what: str, given, stored):
    """A setting fixed by a codebook: taken from it, or checked against it."""
    if given is not None and given != stored:
        raise InputError(f"{what} {given!r} conflicts with the codebook's {stored!r} (omit it)")
    return stored


@dataclass
class SameLayer:
    """Layer ``idx[0]`` holds exactly the values of the earlier layer ``source``."""

    idx: list[int]
    source: int


class SameLayers:
    """Which layer repeats an earlier one, value for value (tied weights recorded twice, a
    dump's ``raw`` and ``corrected`` streams when the memory is off): such a layer is written
    as a reference (``co3cli.container``'s ``LYE`` block) instead of coding it again.

    Only layers coded alone (not in a group) whose shape another such layer has are hashed
    (BLAKE2b-256 of the float32 values, every step): a dump without repeated shapes costs
    nothing. Equal values give equal scales, symbols and bytes, so the reference decodes to
    what coding the layer again would."""

    def __init__(self, names: list[str], dump, groups: list[list[int]]):
        from collections import Counter

        grouped = {i for g in groups for i in g}
        alone = {i: tuple(dump.shape(name)) for i, name in enumerate(names) if i not in grouped}
        repeats = Counter(alone.values())
        self._shape = {i: shape for i, shape in alone.items() if repeats[shape] > 1}  # hashed
        self._seen: dict[tuple, int] = {}

    def source(self, i: int, data: np.ndarray) -> int | None:
        """The earlier layer layer ``i`` equals (``data``: its values), or None."""
        if i not in self._shape:
            return None
        import hashlib

        key = (self._shape[i], data.dtype.str,
               hashlib.blake2b(np.ascontiguousarray(data).data, digest_size=32).digest())
        src = self._seen.get(key)
        if src is None:
            self._seen[key] = i
        return src


def compress(src, dst, *, format=None, scale=None, coder=None, coder_params=None,
             model=None, codebook=None, nonfinite="error", progress=False,
             threads=None, small_layers=True, level=None, references=True) -> CodecResult:
    """Compress dump ``src`` (path or ``-``) into ``.co3`` file ``dst`` (path or ``-``).

    Defaults: format ``fp8-e5m2``, coder ``ctx``, model ``auto``, scale rule ``absmax``.
    A ``codebook`` fixes format, scale rule, coder and tables; passing a different one is an
    error. ``threads``: how many threads code (None: :func:`co3cli.workers.default_threads`; the file's bytes
    do not depend on it). ``small_layers``: pool the tables of small layers into group blocks
    (``co3cli.container.plan``; never with a codebook, whose tables are per layer).
    ``level``: the lossless formats' ``fast`` (default) or ``max`` (:mod:`co3cli.lossless`);
    an error with any other format. ``references``: with ``ctx``, a layer is coded given an
    earlier layer of its shape where that is smaller (``LYX`` blocks, :mod:`co3cli.references`;
    False: never, files that readers before them read).
    """
    from co3cli.dump import Dump
    from co3cli.formats import get_lossless

    if get_lossless(format) is not None:  # bit-exact float words: co3cli.lossless
        from co3cli.lossless import compress_lossless

        return compress_lossless(src, dst, format=format, progress=progress, threads=threads,
                                 level="fast" if level is None else level,
                                 scale=scale, coder=coder, coder_params=coder_params, model=model,
                                 codebook=codebook, nonfinite=nonfinite, small_layers=small_layers)
    if level is not None:
        raise InputError(f"--level {level} is for the lossless formats (f32-lossless, "
                         "bf16-lossless, f16-lossless)")
    t0 = time.perf_counter()
    threads = check_threads(threads)
    book = None
    if codebook is not None:
        book = codebook if isinstance(codebook, cb.Codebook) else cb.load(codebook)
        grid = get_grid(_from_book("format", format, book.format_id))
        book.check_compatible(grid)
        scale = _from_book("scale rule", scale, book.doc["scale_rule"])
        if coder_params:
            raise InputError("coder options come from the codebook; do not pass them with --codebook")
        coder_obj = book.coder
        _from_book("coder", coder, coder_obj.id)
        if model is not None:
            raise InputError("the codebook's tables are used as they are; do not pass a model")
        model = "codebook"
    else:
        grid = get_grid(format or DEFAULT_FORMAT)
        coder_obj = get_coder(coder or DEFAULT_CODER, **(coder_params or {}))
        model = tables.check_model(model or DEFAULT_MODEL)
    with Dump.open(src, nonfinite=nonfinite) as dump, output_file(dst) as f, \
            Workers(threads) as workers:
        info = None if book is None else {"source": book.source, "checksum": book.checksum}
        header = _header(dump, grid, coder_obj, scale, model, info)
        names = list(dump.layers)
        pool_all = coder_obj.id == POOL_ALL_CODER
        groups = [] if book is not None or not small_layers else \
            plan_groups(names, [dump.numel(n) for n in names], len(dump.steps), pool_all)
        if groups:
            header["small_layers"] = plan_config(pool_all)
        join = not step_context(header) and any(joinable(len(dump.steps), dump.numel(n))
                                                for n in names)
        if join:
            header["joined_steps"] = join_config()
        writer = Co3Writer(f, header, groups=bool(groups), step_context=step_context(header))
        result = CodecResult(str(dst), 0, 0)
        done_layers: dict[int, dict] = {}

        same = SameLayers(names, dump, groups) if book is None else None
        xrefs = None
        if references and book is None and eligible(coder_obj):  # LYX: co3cli.references
            xrefs = LayerReferences(ReferencePlan(
                names, [dump.shape(n) for n in names], [i for g in groups for i in g],
                len(dump.steps), dump.streams, nsym=grid.nsym))

        def read(unit):  # in the main thread: HDF5 and the codebook
            is_group, idx = unit
            datas = [dump.read_layer(names[i]) for i in idx]
            source = None if is_group or same is None else same.source(idx[0], datas[0])
            if source is not None:  # equal to an earlier layer: nothing to code
                if xrefs is not None:
                    xrefs.alias(idx[0], source)
                return SameLayer(idx, source)
            return (is_group, idx, datas, [dump.shape(names[i]) for i in idx],
                    None if book is None else book.table_for(names[idx[0]]))

        def encode(job):
            if isinstance(job, SameLayer):
                return job.idx, job
            is_group, idx, datas, shapes, table = job
            if is_group:
                return idx, encode_group(datas, grid, coder_obj, scale_rule=scale, model=model,
                                         shapes=shapes, join=join)
            if xrefs is None:
                return idx, encode_layer(datas[0], grid, coder_obj, scale_rule=scale, model=model,
                                         table=table, shape=shapes[0], workers=workers, join=join)
            with xrefs.coding(idx[0]):  # the layer given an earlier one, where smaller
                enc = encode_layer(datas[0], grid, coder_obj, scale_rule=scale, model=model,
                                   table=table, shape=shapes[0], workers=workers, join=join,
                                   keep_symbols=xrefs.wants(idx[0]))
                xrefs.condition(idx[0], enc, row_length(shapes[0], datas[0].shape[1]), workers)
            return idx, enc

        def write(done):
            idx, enc = done
            if isinstance(enc, SameLayer):
                size = len(dump.steps) * dump.numel(names[idx[0]])
                done_layers[idx[0]] = {"name": names[idx[0]], "entries": size,
                                       "bytes": writer.write_same(enc.source), "payload_bytes": 0,
                                       "same_as": names[enc.source]}
                result.entries += size
                return
            if isinstance(enc, EncodedGroup):
                per_layer = {str(i): m.meta for i, m in zip(idx, enc.members) if m.meta}
                nbytes = writer.write_group(
                    {**enc.meta, **({"layers": per_layer} if per_layer else {})},
                    enc.table.to_bytes(),
                    [(i, _chunks(m)) for i, m in zip(idx, enc.members)], enc.stacks,
                    enc.layout)
                members = enc.members
            else:
                groups = None if enc.step_groups is None else \
                    [(n, kind, t.to_bytes()) for n, kind, t in enc.step_groups]
                nbytes = [writer.write_layer(enc.meta, b"" if groups else enc.table.to_bytes(),
                                             _chunks(enc), groups) if enc.xref is None else
                          writer.write_xref(enc.meta, enc.table.to_bytes(), _chunks(enc), enc.xref)]
                members = [enc]
            for i, m, n in zip(idx, members, nbytes):
                size = int(m.scales.size) * dump.numel(names[i])
                done_layers[i] = {"name": names[i], "entries": size, "bytes": n,
                                  "payload_bytes": sum(map(len, m.bodies)) if m.payload_bytes
                                  is None else m.payload_bytes}
                if m.xref is not None:
                    done_layers[i]["given"] = names[m.xref]
                result.entries += size
            if xrefs is not None and not isinstance(enc, EncodedGroup):
                xrefs.done(idx[0])  # its sources no later layer coded alone uses: dropped

        pipeline(progress_iter(plan_units(len(names), groups), progress, "compress"), read,
                 encode, write,
                 lambda unit: 4 * len(dump.steps) * sum(dump.numel(names[i]) for i in unit[1]),
                 workers)
        result.nbytes = writer.close()
        result.layers = [done_layers[i] for i in sorted(done_layers)]
        result.nonfinite_replaced = int(sum(dump.nonfinite_counts.values()))
    result.seconds = time.perf_counter() - t0
    return result


def _chunks(enc: EncodedLayer):
    """A layer's chunks as the container takes them: (scale, body) per step, or joined."""
    if enc.joined:
        return Joined(enc.scales.tolist(), enc.bodies[0])
    return list(zip(enc.scales.tolist(), enc.bodies))


def decode_values(block, grid, coder, numel: int, shape=None,
                  workers: Workers | None = None, refs=None) -> np.ndarray:
    """Dequantized values (steps, numel) float32 of one verified layer block; ``workers``
    share its rows among threads (the same values without); ``refs``: a
    ``co3cli.container.decode.ReferenceCache`` (``LYX`` blocks' sources kept there)."""
    tables = step_tables(block, grid, coder)  # one per step (step groups: their group's)
    cols = row_length(shape, numel)
    values = np.empty((len(block.scales), numel), dtype=np.float32)
    if block.joined or block.xref is not None or (refs is not None and refs.wants(block.index)):
        # the symbols whole first: a joined chunk, a layer coded given another or one that is
        sym = decode_block(block, grid, coder, numel, shape, refs, workers)
        for t in range(sym.shape[0]):
            values[t] = dequantize(sym[t], grid, block.scales[t])
        return values
    if tables and hasattr(tables[0], "decode_steps"):  # context across steps: key groups
        sym = tables[0].decode_steps(block.bodies, numel, cols,
                                     None if workers is None else workers.run)
        for t in range(len(block.bodies)):
            values[t] = dequantize(sym[t], grid, block.scales[t])
        return values

    def rows(lo, hi):
        for t in range(lo, hi):
            if hasattr(tables[t], "decode_lookup"):  # decode and dequantize in one pass
                tables[t].decode_lookup(block.bodies[t], numel,
                                        dequantize_table(grid, block.scales[t]), out=values[t])
            else:
                values[t] = dequantize(tables[t].decode(block.bodies[t], numel, cols=cols), grid,
                                       block.scales[t])

    map_rows(workers, len(block.bodies), numel, rows)
    return values


def decompress(src, dst, *, progress=False, threads=None) -> CodecResult:
    """Decode ``.co3`` file ``src`` into a ``co3.gradients/1`` dump ``dst`` of dequantized values
    (``threads`` as for :func:`compress`: the dump's values do not depend on it)."""
    import json

    from co3cli.dump import DumpWriter

    t0 = time.perf_counter()
    threads = check_threads(threads)
    with input_path(src, ".co3 file") as path, open(path, "rb") as f:
        co3 = open_co3(f, str(src))
        h = co3.header
        if h["format"].get("kind") == "lossless":  # co3cli.lossless: the stored bits back
            from co3cli.lossless import decompress_lossless

            result = decompress_lossless(co3, dst, progress=progress)
            result.seconds = time.perf_counter() - t0
            return result
        grid, coder = read_co3_setup(h)
        # the source's provenance, minus what the new file must state for itself
        attrs = {k: v for k, v in (h.get("source") or {}).items()
                 if k not in ("schema", "created", "co3cli_version", "layers")}
        attrs.update(co3_source=json.dumps({k: h[k] for k in ("format", "coder", "scale_rule",
                                                                "model", "tie_rule", "co3cli_version")}),
                     quantized_format=grid.id)
        result = CodecResult(str(dst), co3.size, 0)
        refs = ReferenceCache(co3, nsym=grid.nsym)  # LYX blocks' sources, decoded once

        def decode(block):
            lay = h["layers"][block.index]
            return lay, block, decode_values(block, grid, coder, lay["numel"], lay["shape"],
                                             workers, refs)

        def write(done):
            lay, block, values = done
            w.add_layer(lay["name"], values, tuple(lay["shape"]))
            w.h5.create_dataset(f"co3/scales/{lay['name']}", data=block.scales)
            result.entries += int(values.size)
            result.layers.append({"name": lay["name"], "entries": int(values.size),
                                  "bytes": block.nbytes, "payload_bytes": block.payload_bytes})
            refs.done(block.index)

        with DumpWriter(dst, attrs) as w, Workers(threads) as workers:
            w.set_steps(np.asarray(h["steps"], dtype=np.int64),
                        None if h.get("loss") is None else np.asarray(h["loss"], dtype=np.float32))
            indices = progress_iter(range(len(co3.offsets)), progress, "decompress")
            pipeline(indices, co3.read_layer, decode, write,
                     lambda i: 4 * len(h["steps"]) * h["layers"][i]["numel"], workers)
    result.seconds = time.perf_counter() - t0
    return result
