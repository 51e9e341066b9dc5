"""Lossless ``.co3`` files: a dump's float32 / bfloat16 / float16 gradients, bit for bit.

::

    dump.h5 --read_words (the stored bits: float32, bfloat16 as uint16, float16)--> words
        --to the format's type (exact or refused)--> LosslessCoder.fit (by measurement)
        --> one table per layer; one chunk per step --> grads.co3
        (layer blocks only: no groups, joined steps or references)
    grads.co3 --the table's decode--> words --back to each layer's stored type--> dump.h5

The container is the quantized files' (written as their current version, ``.co3`` 1.5), with
layer blocks only: the header's ``format`` is the lossless format's config (``kind:
"lossless"``), its ``coder`` ``{"id": "lossless-rans", "version": v}`` (3: the
default fast pair coder, :mod:`co3cli.coding.lossless_pairs`; 1: ``level="max"``, the
neighbour-context coder of :mod:`co3cli.coding.lossless`; 2: the fast coder of earlier
files, :mod:`co3cli.coding.lossless_fast`; all three decode), ``scale_rule``
``none`` and ``model`` ``exact``; a layer's table is its version's (``LosslessTable``,
``FastTable`` or ``PairTable``, versioned by its first byte), each chunk's scale is 1.0, and
the layer's metadata records the dump's storage type (``stored``) and the fitted parameters.
A co3cli before 0.2 refuses such a file (its format is no grid it knows) with one line.

Types: a layer is coded in the format's type. A float32 layer under ``bf16-lossless`` or
``f16-lossless`` is taken only if every word converts exactly (else InputError, naming the
layer: use ``f32-lossless``); a bfloat16 or float16 layer under ``f32-lossless`` is widened
exactly. ``decompress`` writes each layer back in the type the dump stored it in, so the
decompressed dump holds the original bits (NaN payloads, -0.0, Inf, subnormals included).
NaN and Inf are data here: the ``nonfinite`` policy does not apply.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from co3cli import __version__
from co3cli.coding.lossless import LEVELS, LosslessCoder
from co3cli.errors import CorruptDataError, InputError
from co3cli.fileio import created_timestamp, output_file
from co3cli.formats import get_lossless
from co3cli.progress import progress_iter

STORED = ("float32", "bfloat16", "float16")
_IDS = {"float32": "f32-lossless", "bfloat16": "bf16-lossless", "float16": "f16-lossless"}
_DEFAULTS = {"scale": None, "coder": None, "coder_params": None, "model": None, "codebook": None,
             "nonfinite": "error", "small_layers": True}


@dataclass
class LosslessResult:
    """What ``compress_lossless`` / ``decompress_lossless`` did (the fields of
    ``co3cli.codec.CodecResult``)."""

    path: str
    nbytes: int
    entries: int
    layers: list[dict] = field(default_factory=list)
    seconds: float = 0.0
    nonfinite_replaced: int = 0  # always 0: NaN/Inf are kept

    @property
    def bpe(self) -> float:
        return 8.0 * self.nbytes / self.entries if self.entries else float("nan")

    def to_dict(self) -> dict:
        return {"path": self.path, "bytes": self.nbytes, "entries": self.entries, "bpe": self.bpe,
                "seconds": self.seconds, "nonfinite_replaced": 0, "layers": self.layers}


def read_words(dump, name: str) -> tuple[np.ndarray, str]:
    """A layer's stored bits (steps, numel) as unsigned words, and its storage type."""
    ds = dump.h5["grads"][name]
    stored = ds.attrs.get("dtype", "float32")
    stored = stored.decode() if isinstance(stored, bytes) else str(stored)
    if stored not in STORED:
        raise InputError(f"{dump.label}: layer {name!r} is stored as {stored}; the lossless "
                         f"formats keep {', '.join(STORED)}")
    raw = np.asarray(ds[:dump.nsteps])
    word = np.uint32 if stored == "float32" else np.uint16
    return raw.view(word).reshape(dump.nsteps, -1), stored


def _widen(words: np.ndarray, stored: str) -> np.ndarray:
    """float32 bits of stored words (exact for every bit pattern but float16 signalling NaNs,
    which the caller's check catches)."""
    if stored == "float32":
        return words
    if stored == "bfloat16":
        return words.astype(np.uint32) << 16
    return words.view(np.float16).astype(np.float32).view(np.uint32)


def _narrow(bits32: np.ndarray, dtype: str) -> np.ndarray:
    if dtype == "float32":
        return bits32
    if dtype == "bfloat16":
        return (bits32 >> 16).astype(np.uint16)
    return bits32.view(np.float32).astype(np.float16).view(np.uint16)


def convert(words: np.ndarray, src: str, dst: str, what: str) -> np.ndarray:
    """``words`` of type ``src`` as type ``dst``, bit-exactly, or InputError."""
    if src == dst:
        return words
    out = _narrow(_widen(words, src), dst)
    back = _narrow(_widen(out, dst), src)
    if not np.array_equal(back, words):
        raise InputError(f"{what} is stored as {src} and not every value is exactly a {dst}; "
                         f"use --format {_IDS[src]}")
    return out


def _refuse_options(fmt, **given) -> None:
    bad = [k for k, v in given.items() if k not in _DEFAULTS or v not in (_DEFAULTS[k], {})]
    if bad:
        raise InputError(f"--format {fmt.id} stores every bit: {', '.join(bad)} do not apply "
                         "(NaN/Inf are kept as they are)")


def _header(dump, fmt, coder) -> dict:
    return {"co3cli_version": __version__, "created": created_timestamp(),
            "format": fmt.config(), "tie_rule": "none", "scale_rule": "none",
            "coder": coder.config(), "model": "exact", "codebook": None,
            "layers": [{"name": n, "shape": list(dump.shape(n)), "numel": dump.numel(n)}
                       for n in dump.layers],
            "steps": [int(s) for s in dump.steps],
            "loss": None if dump.loss is None else [float(v) for v in dump.loss],
            "source": {k: v for k, v in dump.attrs.items() if isinstance(v, (str, int, float, bool))}}


def compress_lossless(src, dst, *, format, progress=False, threads=None, level="fast",
                      _version=None, **options):
    """Compress dump ``src`` into lossless ``.co3`` file ``dst`` (``format``: a lossless id).
    ``level``: ``fast`` (the default: :mod:`co3cli.coding.lossless_pairs`, table version 3)
    or ``max`` (:mod:`co3cli.coding.lossless`'s neighbour-context coder, version 1: smaller
    on layers with dead units, several times slower). ``_version`` (tests and fixtures
    only) writes another table version than the level's: 2, the fast coder of co3cli 0.1
    (:mod:`co3cli.coding.lossless_fast`). ``options`` are :func:`co3cli.codec.compress`'s
    other settings, which must be unset. ``threads`` is checked, and the layers are coded in
    this thread (the bytes never depend on it)."""
    from co3cli.checks import check_int
    from co3cli.coding import row_length
    from co3cli.container import Co3Writer
    from co3cli.dump import Dump

    fmt = get_lossless(format)
    _refuse_options(fmt, **options)
    t0 = time.perf_counter()
    if level not in LEVELS:
        raise InputError(f"lossless level {level!r}; allowed: {', '.join(LEVELS)}")
    if threads is not None:
        check_int("threads", threads, lo=1)
    with Dump.open(src) as dump, output_file(dst) as f:
        coder = LosslessCoder(fmt.dtype, _version or LEVELS[level])
        writer = Co3Writer(f, _header(dump, fmt, coder))
        result = LosslessResult(str(dst), 0, 0)
        for name in progress_iter(dump.layers, progress, "compress"):
            raw, stored = read_words(dump, name)
            words = convert(raw, stored, fmt.dtype, f"{dump.label}: layer {name!r}")
            cols = row_length(dump.shape(name), words.shape[1])
            table, bodies = coder.fit_encode(words, cols)
            meta = {"model": "lossless", "stored": stored, **table.config()}
            nbytes = writer.write_layer(meta, table.to_bytes(), [(1.0, b) for b in bodies])
            result.entries += words.size
            result.layers.append({"name": name, "entries": int(words.size), "bytes": nbytes,
                                  "payload_bytes": sum(map(len, bodies)), **table.config()})
        result.nbytes = writer.close()
    result.seconds = time.perf_counter() - t0
    return result


def layer_words(block, fmt, coder, lay: dict) -> np.ndarray:
    """A verified lossless layer block's words (steps, numel) in the format's type."""
    from co3cli.coding import row_length
    from co3cli.container.decode import block_table

    table = block_table(block, fmt, coder)
    cols = row_length(lay["shape"], lay["numel"])
    try:
        return table.decode_steps(block.bodies, lay["numel"], cols)
    except CorruptDataError as e:
        raise CorruptDataError(f"layer {block.name} {e}") from None


def _stored(block) -> str:
    stored = block.meta.get("stored", "float32")
    if stored not in STORED:
        raise CorruptDataError(f"layer {block.name}: unknown stored type {stored!r}")
    return stored


def write_layer(w, name: str, words: np.ndarray, shape, stored: str) -> None:
    """One layer into DumpWriter ``w`` in its stored type (bfloat16: uint16 bit patterns)."""
    data = {"float32": np.float32, "float16": np.float16}.get(stored)
    w.add_layer(name, words if data is None else words.view(data), tuple(shape), stored=stored)


def decompress_lossless(co3, dst, *, progress=False):
    """Decode an open, verified lossless ``.co3`` file into dump ``dst``: every layer's
    original bits, in the type the source dump stored it in."""
    import json

    from co3cli.container.decode import read_co3_setup
    from co3cli.dump import DumpWriter

    h = co3.header
    fmt, coder = read_co3_setup(h)
    attrs = {k: v for k, v in (h.get("source") or {}).items()
             if k not in ("schema", "created", "co3cli_version", "layers")}
    attrs["co3_source"] = json.dumps({k: h[k] for k in ("format", "coder", "co3cli_version")})
    result = LosslessResult(str(dst), co3.size, 0)
    with DumpWriter(dst, attrs) as w:
        w.set_steps(np.asarray(h["steps"], dtype=np.int64),
                    None if h.get("loss") is None else np.asarray(h["loss"], dtype=np.float32))
        for i in progress_iter(range(len(co3.offsets)), progress, "decompress"):
            block = co3.read_layer(i)
            lay = h["layers"][i]
            stored = _stored(block)
            try:  # a word the stored type cannot hold: the file lies about that type
                words = convert(layer_words(block, fmt, coder, lay), fmt.dtype, stored,
                                lay["name"])
            except InputError as e:
                raise CorruptDataError(f"layer {lay['name']}: {e}") from None
            write_layer(w, lay["name"], words, lay["shape"], stored)
            result.entries += words.size
            result.layers.append({"name": lay["name"], "entries": int(words.size),
                                  "bytes": block.nbytes, "payload_bytes": block.payload_bytes})
    return result


def report_lossless(co3, name: str, progress: bool = False) -> dict:
    """``co3 report`` of a lossless file: per layer, bits per entry from the real bytes beside
    the order-0 entropy of its symbols plus its raw mantissa bits (the bound an order-0 coder
    of the same split reaches; context coding goes below it)."""
    from co3cli.coding.lossless import symbols

    from co3cli.container.decode import read_co3_setup

    h = co3.header
    fmt, coder = read_co3_setup(h)
    layers = []
    for block in progress_iter(co3.layers(), progress, "report", total=len(co3.offsets)):
        lay = h["layers"][block.index]
        words = layer_words(block, fmt, coder, lay)
        table = coder.table_from_bytes(block.table)
        k = table.k if table.mode else 0
        sym = symbols(words, table.layout, k)
        counts = np.bincount(sym)
        p = counts[counts > 0] / sym.size
        zbase = 1 << (1 + table.layout.exp_bits + k)
        nonzero = sym < zbase
        width = table.width if table.mode else table.layout.man_bits - k
        n = int(words.size)
        layers.append({"name": lay["name"], "shape": lay["shape"], "entries": n,
                       "zero_fraction": float(1 - nonzero.mean()), "beta": None,
                       "entropy_bpe": float(-(p * np.log2(p)).sum() + width * nonzero.mean()),
                       "cross_entropy_bpe": None, "huffman_bpe": None,
                       "payload_bpe": 8.0 * block.payload_bytes / n, "bytes": block.nbytes,
                       "payload_bytes": block.payload_bytes, "bpe": 8.0 * block.nbytes / n,
                       **table.config()})
    n = sum(lay["entries"] for lay in layers)
    total = {"entries": n, "layers": len(layers), "bytes": co3.size, "bpe": 8.0 * co3.size / n,
             "payload_bytes": sum(lay["payload_bytes"] for lay in layers),
             **{key: sum(lay[key] * lay["entries"] for lay in layers) / n
                for key in ("zero_fraction", "entropy_bpe", "payload_bpe")}}
    total["side_bytes"] = co3.size - total["payload_bytes"]
    return {"file": name, "format": fmt.id, "coder": h["coder"], "model": h["model"],
            "scale_rule": h["scale_rule"], "steps": len(h["steps"]), "bytes": co3.size,
            "header_bytes": co3.header_bytes, "trailer_bytes": co3.trailer_bytes,
            "layers": layers, "total": total}
