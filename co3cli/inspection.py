"""Whole files, described: what ``co3 inspect``, ``co3 report`` and ``co3 codebook`` compute.

::

    grads.co3 --inspect_co3------> Co3Info (every checksum verified, every table parsed; per
                                   layer: shape, bytes, payload, table bytes, model, scales,
                                   scale_fallbacks, group: None or the first layer of the
                                   group block it shares, with its table, since 1.1; same_as:
                                   the equal layer an LYE block names; given: the layer an
                                   LYX block is coded given)
    book.json --codebook_summary--> CodebookInfo (per table: model, beta, p0, bits of the zero
                                   symbol, integer range, entropy of the table's distribution)
    dump.h5 / grads.co3 --report_file--> the bits-per-entry report (``co3cli.report``), and a PNG
    dump.h5 --build_codebook-----> book.json (``co3cli.codebook.build`` with the defaults of
                                   ``co3 compress``) and a BookResult

Each returns a result object (``to_dict()``: what ``--json`` prints); printing is the CLI's.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from co3cli.errors import InputError


@dataclass
class Co3Info:
    """A verified ``.co3`` file: version, sizes, header (without its layer list), layers."""

    file: str
    version: str
    bytes: int
    header_bytes: int
    trailer_bytes: int
    header: dict[str, Any]
    layers: list[dict[str, Any]]
    verified: bool = True

    def to_dict(self) -> dict[str, Any]:
        return {"file": self.file, "verified": self.verified, "version": self.version,
                "bytes": self.bytes, "header_bytes": self.header_bytes,
                "trailer_bytes": self.trailer_bytes, "header": self.header, "layers": self.layers}


def inspect_co3(src: str | Path, decode: bool = False) -> Co3Info:
    """Verify ``src`` (a path, or ``-`` for stdin): magic, version, every checksum, every
    declared size and limit, every table; ``decode``: also decode every chunk (each must
    consume its bytes exactly), writing nothing. CorruptDataError / InputError otherwise."""
    from co3cli.codec import ReferenceCache, decode_block, iter_decode_block, read_co3_setup
    from co3cli.container import open_co3
    from co3cli.fileio import input_path

    name = str(src)
    with input_path(src, ".co3 file") as p, open(p, "rb") as f:
        co3 = open_co3(f, name)
        grid, coder = read_co3_setup(co3.header)
        # LYX blocks' sources, decoded once
        refs = ReferenceCache(co3, nsym=grid.nsym) if decode else None
        layers = []
        for block in co3.layers():
            lay = co3.header["layers"][block.index]
            layers.append({"name": lay["name"], "shape": lay["shape"], "numel": lay["numel"],
                           "bytes": block.nbytes, "payload_bytes": block.payload_bytes,
                           "table_bytes": 0 if block.same_as is not None else block.table_nbytes,
                           "model": block.meta.get("model"),
                           "ctx_model_version": _ctx_version(coder, block),
                           "scale_fallbacks": _fallbacks(block.meta, co3.header),
                           "scales": block.scales.tolist(), "group": block.group,
                           "same_as": None if block.same_as is None
                           else co3.header["layers"][block.same_as]["name"],
                           "given": None if block.xref is None or block.same_as is not None
                           else co3.header["layers"][block.xref.index]["name"]})
            if decode and refs.wants(block.index):  # a later layer is coded given this one
                decode_block(block, grid, coder, lay["numel"], lay["shape"], refs)
            elif decode:
                for _ in iter_decode_block(block, grid, coder, lay["numel"], lay["shape"], refs):
                    pass
            if decode:
                refs.done(block.index)
            else:
                _parse_table(coder, block, grid)
        return Co3Info(file=name, version="%d.%d" % co3.version, bytes=co3.size,
                       header_bytes=co3.header_bytes, trailer_bytes=co3.trailer_bytes,
                       header={k: v for k, v in co3.header.items() if k != "layers"},
                       layers=layers)


def _ctx_version(coder, block) -> int | None:
    """The model version a ``ctx`` layer's table stores (its first byte; a group of small layers
    may hold version 7, a layer coded given another version 6, whatever the header's coder
    config says); None for another coder or a layer with no table of its own."""
    if getattr(coder, "id", None) != "ctx" or block.same_as is not None or not block.table:
        return None
    return int(block.table[0])


def _fallbacks(meta: dict, header: dict) -> int | None:
    """Steps whose scale rule fell back (``co3-poly`` out of range, a degenerate fit); written
    only where some did, so 0 for a rule that can fall back; None for one that cannot."""
    from co3cli.scales import GUARDED_RULES

    n = meta.get("scale_fallbacks")
    if isinstance(n, int) and not isinstance(n, bool) and n >= 0:
        return n
    return 0 if header.get("scale_rule") in GUARDED_RULES else None


def _parse_table(coder, block, grid):
    """The layer's integer table parses (CorruptDataError naming the layer otherwise; a
    group's table is parsed once)."""
    from co3cli.container.decode import block_table

    block_table(block, grid, coder)


@dataclass
class CodebookInfo:
    """A verified codebook: its fields (without the tables) and one summary row per table."""

    file: str
    fields: dict[str, Any]
    format_id: str
    nsym: int
    tables: list[dict[str, Any]]

    def to_dict(self) -> dict[str, Any]:
        return {"file": self.file, **self.fields, "tables": self.tables}


def codebook_summary(path: str | Path) -> CodebookInfo:
    """Load and verify the codebook ``path``; per layer its model, parameters and the table's
    code lengths (Huffman) or frequencies (ANS) as a distribution."""
    from co3cli import codebook as cb
    from co3cli.formats import get_grid

    b = cb.load(path)
    grid = get_grid(b.format_id)
    rows = []
    for name, entry in b.doc["layers"].items():
        table = b.table_for(name)
        ints, p = table.ints(), table.pmf()
        p = p / p.sum()
        meta = entry.get("meta", {})
        params = meta.get("params", {})
        rows.append({"name": name, "model": meta.get("model"), "beta": params.get("beta"),
                     "p0": meta.get("p0"), "zero_bits": float(-np.log2(p[grid.K])),
                     "min": int(ints[ints > 0].min()), "max": int(ints.max()),
                     "entropy": float(-(p[p > 0] * np.log2(p[p > 0])).sum())})
    return CodebookInfo(file=str(path), fields={k: v for k, v in b.doc.items() if k != "layers"},
                        format_id=grid.id, nsym=grid.nsym, tables=rows)


def is_co3(path: str | Path) -> bool:
    """Whether the file starts with the ``.co3`` magic."""
    from co3cli.container import MAGIC

    with open(path, "rb") as f:
        return f.read(len(MAGIC)) == MAGIC


def report_file(src: str | Path, *, format=None, scale=None, coder=None, coder_params=None,
                model=None, nonfinite: str = "error", progress: bool = False,
                plot: str | Path | None = None) -> dict[str, Any]:
    """The bits-per-entry report of a ``.co3`` file (as it was compressed) or of a dump
    (compressed to a temporary file with these options); ``plot``: also draw a PNG."""
    from co3cli import report
    from co3cli.fileio import input_path

    if plot is not None:  # before any work: a missing matplotlib fails in a second, not after
        from co3cli.plot import require_matplotlib

        require_matplotlib(plot)
    with input_path(src, "input") as p:
        if is_co3(p):
            options = {"--format": format, "--scale": scale, "--coder": coder, "--model": model,
                       **{f"--{k.replace('_', '-')}": v for k, v in (coder_params or {}).items()}}
            options = [k for k, v in options.items() if v is not None]
            if options or nonfinite != "error":
                raise InputError(f"{', '.join(options) or '--nonfinite'} only apply to a dump; "
                                 f"{src} is a .co3 file, reported as it was compressed")
            rep = report.report_co3(p, name=str(src), progress=progress,
                                    keep_hist=plot is not None)
        else:
            rep = report.report_dump(p, format=format, scale=scale, coder=coder,
                                     coder_params=coder_params, model=model,
                                     nonfinite=nonfinite, progress=progress,
                                     keep_hist=plot is not None)
            rep["source"] = str(src)
    if plot is not None:
        from co3cli.plot import plot_report

        plot_report(rep, plot)
        for lay in rep["layers"]:
            lay.pop("hist")
    return rep


@dataclass
class BookResult:
    """A codebook built from a dump and saved."""

    output: str
    layers: list[str]
    format: str
    coder: dict[str, Any]
    model: str
    checksum: int

    def to_dict(self) -> dict[str, Any]:
        return {"output": self.output, "layers": self.layers, "format": self.format,
                "coder": self.coder, "model": self.model, "checksum": self.checksum}


def build_codebook(src: str | Path, dst: str | Path, *, format=None, scale=None, coder=None,
                   coder_params=None, model=None, steps=None, pooled: bool = False,
                   nonfinite: str = "error", progress: bool = False) -> BookResult:
    """Fit a model per layer (or one for all: ``pooled``) of the dump ``src`` (``steps``: only
    those step indices) and save the integer tables as the codebook ``dst`` (``-``: stdout)."""
    from co3cli import codebook as cb
    from co3cli.codec import BOOK_CODER as DEFAULT_CODER, BOOK_MODEL as DEFAULT_MODEL, DEFAULT_FORMAT
    from co3cli.coding import get_coder
    from co3cli.dump import Dump
    from co3cli.fileio import output_file
    from co3cli.formats import get_grid

    grid = get_grid(format or DEFAULT_FORMAT)
    coder_obj = get_coder(coder or DEFAULT_CODER, **(coder_params or {}))
    model = model or DEFAULT_MODEL
    with Dump.open(src, nonfinite=nonfinite) as dump:
        book = cb.build(dump, grid, coder_obj, model=model, scale_rule=scale, pooled=pooled,
                        steps=steps, progress=progress)
    with output_file(dst) as f:
        book.save(f)
    return BookResult(output=str(dst), layers=list(book.doc["layers"]), format=grid.id,
                      coder=coder_obj.config(), model=model, checksum=book.checksum)
