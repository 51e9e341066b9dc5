"""Compress a gradient dump to ``.co3`` and back, one layer at a time.

    dump.h5 ──read layer (steps, numel)──▶ scale per step ──▶ symbols per step
             ──▶ per-layer integer table (model fit of the scaled values, or a saved codebook)
             ──▶ one independently decodable chunk per step ──▶ grads.co3

Lossless means ``decompress(compress(x)) == dequantize(quantize(x))`` bit for bit.
Memory stays at a few times the largest layer, whatever the dump's total size.

Reference: Z.-J. Chen, E. E. Hernandez, Y.-C. Huang, S. Rini, "DNN gradient lossless compression: Can
GenNorm be the answer?", ICC 2022, arXiv:2111.07599 (the model-based code the tables implement).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from co3cli import __version__
from co3cli import codebook as cb
from co3cli import tables
from co3cli.coding import coder_from_config, get_coder, row_length
from co3cli.container import Co3Writer, open_co3
from co3cli.errors import CorruptDataError, InputError
from co3cli.fileio import created_timestamp, input_path, output_file, progress_iter
from co3cli.formats import get_grid
from co3cli.quantize import TIE_RULE, dequantize


@dataclass
class EncodedLayer:
    """One layer, ready for the container, plus what reports need."""

    meta: dict
    table: object
    scales: np.ndarray
    bodies: list[bytes]
    counts: np.ndarray  # symbol counts over all steps (int64, nsym)


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


def encode_layer(data: np.ndarray, grid, coder, *, scale_rule=None, model="gennorm-zi",
                 table=None, shape=None) -> EncodedLayer:
    """Quantize and entropy-code a (steps, numel) float32 layer.

    ``table`` reuses a saved codebook table; otherwise one is built from ``model`` fitted to
    this layer's scaled values (or from its counts for ``empirical``). ``shape`` is the
    parameter's shape (context-modelling coders use its 2-D view). With a scale rule that can
    fall back (``scales.GUARDED_RULES``: ``co3-poly``, ``gennorm-mse``) the metadata of a layer
    where it did records how many steps' scales came from the fallback (``scale_fallbacks``;
    ``scale_fallback``: the first 64 such steps, the rule used and why; absent: none did, so
    files without a fallback keep their bytes), which ``co3 inspect`` shows.
    """
    from co3cli.quantize import quantize
    from co3cli.scales import scale_info

    infos = [scale_info(row, grid, scale_rule) for row in data]
    scales = np.array([i.scale for i in infos], dtype=np.float32)
    sym = np.empty(data.shape, dtype=np.uint16)
    counts = np.zeros(grid.nsym, dtype=np.int64)
    for t, row in enumerate(data):
        _, c = quantize(row, grid, scales[t], with_counts=True, out=sym[t])
        counts += c
    if table is None:
        weights, meta = tables.model_weights(data, scales, counts, grid, model)
        table = coder.table_from_weights(weights)
    else:
        meta = {"model": "codebook"}
        unusable = np.flatnonzero((counts > 0) & (table.ints() == 0))
        if unusable.size:
            raise InputError(f"the codebook cannot code symbol(s) {unusable[:5].tolist()} of format "
                             f"{grid.id}; rebuild it with a model (every symbol codable)")
    fell = [t for t, i in enumerate(infos) if i.fallback]
    if fell:  # provenance: steps whose scale came from the fallback (none: nothing written)
        meta = {**meta, "scale_fallbacks": len(fell),
                "scale_fallback": {"steps": fell[:64], "used": infos[fell[0]].used,
                                   "reason": infos[fell[0]].reason}}
    cols = row_length(shape, data.shape[1])
    bodies = [table.encode(row, cols=cols) for row in sym]
    return EncodedLayer(meta, table, scales, bodies, counts)


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


DEFAULT_FORMAT, DEFAULT_CODER, DEFAULT_MODEL = "fp8-e5m2", "ans", "gennorm-zi"


def _from_book(what: str, given, stored):
    """A setting fixed by a codebook: taken from it, or checked against it."""
    if given is not None and given != stored:
        raise InputError(f"{what} {given!r} conflicts with the codebook's {stored!r} (omit it)")
    return stored


def compress(src, dst, *, format=None, scale=None, coder=None, coder_params=None,
             model=None, codebook=None, nonfinite="error", progress=False) -> CodecResult:
    """Compress dump ``src`` (path or ``-``) into ``.co3`` file ``dst`` (path or ``-``).

    Defaults: format ``fp8-e5m2``, coder ``ans``, model ``gennorm-zi``, scale rule ``absmax``.
    A ``codebook`` fixes format, scale rule, coder and tables; passing a different one is an
    error.
    """
    from co3cli.dump import Dump

    t0 = time.perf_counter()
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
    with Dump.open(src, nonfinite=nonfinite) as dump, output_file(dst) as f:
        info = None if book is None else {"source": book.source, "checksum": book.checksum}
        writer = Co3Writer(f, _header(dump, grid, coder_obj, scale, model, info))
        result = CodecResult(str(dst), 0, 0)
        for name in progress_iter(dump.layers, progress, "compress"):
            data = dump.read_layer(name)
            table = None if book is None else book.table_for(name)
            enc = encode_layer(data, grid, coder_obj, scale_rule=scale, model=model, table=table,
                               shape=dump.shape(name))
            nbytes = writer.write_layer(enc.meta, enc.table.to_bytes(),
                                        list(zip(enc.scales.tolist(), enc.bodies)))
            result.layers.append({"name": name, "entries": int(data.size), "bytes": nbytes,
                                  "payload_bytes": sum(map(len, enc.bodies))})
            result.entries += int(data.size)
            del data, enc
        result.nbytes = writer.close()
        result.nonfinite_replaced = int(sum(dump.nonfinite_counts.values()))
    result.seconds = time.perf_counter() - t0
    return result


def read_co3_setup(header: dict):
    """Grid and coder described by a verified ``.co3`` header."""
    try:
        grid = get_grid(header["format"]["id"])
        coder = coder_from_config(header["coder"])
    except (KeyError, TypeError, InputError) as e:
        raise CorruptDataError(f"header does not describe a usable format/coder ({e})") from None
    if grid.config() != header["format"]:
        raise CorruptDataError(f"header's format {header['format']} disagrees with this co3cli's "
                               f"definition of {grid.id!r}")
    return grid, coder


def iter_decode_block(block, grid, coder, numel: int, shape=None):
    """Symbols (numel,) of each step of one verified layer block, in order."""
    try:
        table = coder.table_from_bytes(block.table, grid.nsym)
    except InputError as e:
        raise CorruptDataError(f"layer {block.name}: bad table ({e})") from None
    cols = row_length(shape, numel)
    for body in block.bodies:
        yield table.decode(body, numel, cols=cols)


def decode_block(block, grid, coder, numel: int, shape=None) -> np.ndarray:
    """Symbols (steps, numel) of one verified layer block."""
    if len(block.bodies) == 1:  # one step: the decoded row itself, no copy
        return next(iter_decode_block(block, grid, coder, numel, shape))[None, :]
    sym = np.empty((len(block.bodies), numel), dtype=np.uint16)
    for t, row in enumerate(iter_decode_block(block, grid, coder, numel, shape)):
        sym[t] = row
    return sym


def decompress(src, dst, *, progress=False) -> CodecResult:
    """Decode ``.co3`` file ``src`` into a ``co3.gradients/1`` dump ``dst`` of dequantized values."""
    import json

    from co3cli.dump import DumpWriter

    t0 = time.perf_counter()
    with input_path(src, ".co3 file") as path, open(path, "rb") as f:
        co3 = open_co3(f, str(src))
        h = co3.header
        grid, coder = read_co3_setup(h)
        # the source's provenance, minus what the new file must state for itself
        attrs = {k: v for k, v in (h.get("source") or {}).items()
                 if k not in ("schema", "created", "co3cli_version", "layers")}
        attrs.update(co3_source=json.dumps({k: h[k] for k in ("format", "coder", "scale_rule",
                                                                "model", "tie_rule", "co3cli_version")}),
                     quantized_format=grid.id)
        result = CodecResult(str(dst), co3.size, 0)
        with DumpWriter(dst, attrs) as w:
            w.set_steps(np.asarray(h["steps"], dtype=np.int64),
                        None if h.get("loss") is None else np.asarray(h["loss"], dtype=np.float32))
            for block in progress_iter(co3.layers(), progress, "decompress", total=len(co3.offsets)):
                lay = h["layers"][block.index]
                values = np.empty((len(block.bodies), lay["numel"]), dtype=np.float32)
                for t, sym in enumerate(iter_decode_block(block, grid, coder, lay["numel"],
                                                          lay["shape"])):
                    values[t] = dequantize(sym, grid, block.scales[t])
                w.add_layer(lay["name"], values, tuple(lay["shape"]))
                w.h5.create_dataset(f"co3/scales/{lay['name']}", data=block.scales)
                result.entries += int(values.size)
                result.layers.append({"name": lay["name"], "entries": int(values.size),
                                      "bytes": block.nbytes, "payload_bytes": block.payload_bytes})
                del values, block
    result.seconds = time.perf_counter() - t0
    return result
