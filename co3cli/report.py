"""Bits per entry, measured from real bytes, next to the information-theoretic references.

Per layer and in total (JSON keys under ``layers`` and ``total``):

==================  ==========================================================================
entries             quantized entries (steps x numel)
zero_fraction       fraction of entries on the zero symbol
beta                GenNorm shape of the layer's fitted model (None if not parametric)
entropy_bpe         empirical order-0 entropy of the symbols (per-layer statistics)
cross_entropy_bpe   ideal code length under the model the table was frozen from
huffman_bpe         expected length of the Huffman code built from that model
huffman_counts_bpe  expected length of the optimal Huffman code of the exact counts
bpe                 every byte of the layer's block (table, scales, metadata, framing,
                    payload) x 8 / entries; for ``total``: the whole file's bytes
payload_bpe         coded payload bytes only x 8 / entries
==================  ==========================================================================

The order-0 entropy is a reference, not a floor: real gradients are not i.i.d.
"""

from __future__ import annotations

import numpy as np

from co3cli.container import open_co3
from co3cli.errors import CorruptDataError, InputError
from co3cli.fileio import input_path
from co3cli.tables import entropy_bits

KEYS = ("entries", "zero_fraction", "beta", "entropy_bpe", "cross_entropy_bpe", "huffman_bpe",
        "huffman_counts_bpe", "bpe", "payload_bpe")


LAYER_META_KEYS = ("step_groups", "scale_fallbacks", "scale_fallback")


def cross_entropy_bits(counts: np.ndarray, pmf: np.ndarray) -> float:
    nz = counts > 0
    return float(-(counts[nz] * np.log2(pmf[nz])).sum())


def _model_pmf(meta: dict, table, grid) -> tuple[np.ndarray, float | None]:
    """The model's symbol pmf (from the fit metadata, or implied by the integer table)."""
    from co3cli.tables import fit_from_meta

    try:  # the fit's own keys (a layer's metadata also holds step groups, scale fallbacks)
        fit = fit_from_meta({k: v for k, v in meta.items() if k not in LAYER_META_KEYS})
        if fit is not None:
            pmf = np.asarray(fit.pmf(grid, 1.0), dtype=np.float64)
            beta = fit.params.get("beta")
            if pmf.shape != (grid.nsym,) or not np.all(np.isfinite(pmf) & (pmf >= 0)) \
                    or not (beta is None or isinstance(beta, (int, float))):
                raise ValueError("its model gives no usable pmf")
            return pmf, beta
    except (KeyError, TypeError, ValueError, AttributeError, InputError, ArithmeticError) as e:
        raise CorruptDataError(f"layer metadata: unusable model fit ({str(e)[:200]})") from None
    p = table.pmf()
    return p / p.sum(), None


def layer_metrics(counts, pmf, beta, nbytes, payload_bytes, max_len: int = 16) -> dict:
    """Metrics of one layer; ``huffman_bpe`` uses a code of lengths <= ``max_len`` from ``pmf``."""
    from co3cli.coding.huffman import huffman_lengths

    n = int(counts.sum())
    grid_k = (len(counts) - 1) // 2
    lengths = huffman_lengths(pmf, max_len=max_len)
    present = counts > 0
    exact = huffman_lengths(np.where(present, counts, 0).astype(np.float64), max_len=20) \
        if present.sum() > 1 else present.astype(np.int64)
    return {
        "entries": n,
        "zero_fraction": float(counts[grid_k] / n),
        "beta": None if beta is None else float(beta),
        "entropy_bpe": entropy_bits(counts) / n,
        "cross_entropy_bpe": cross_entropy_bits(counts, pmf) / n,
        "huffman_bpe": float((counts * lengths).sum()) / n,
        "huffman_counts_bpe": float((counts * exact).sum()) / n,
        "bpe": 8.0 * nbytes / n,
        "payload_bpe": 8.0 * payload_bytes / n,
        "bytes": int(nbytes),
        "payload_bytes": int(payload_bytes),
        "side_bytes": int(nbytes - payload_bytes),
    }


def report_co3(path, name: str | None = None, progress: bool = False, keep_hist: bool = False) -> dict:
    """Decode a ``.co3`` file's symbols and measure every layer (see the module docstring).

    ``keep_hist`` adds each layer's symbol counts and model pmf under ``hist`` (for plots).
    """
    from co3cli.codec import ReferenceCache, decode_block, read_co3_setup
    from co3cli.progress import progress_iter

    with input_path(path, ".co3 file") as p, open(p, "rb") as f:
        co3 = open_co3(f, name or str(path))
        if co3.header["format"].get("kind") == "lossless":
            from co3cli.lossless import report_lossless

            return report_lossless(co3, name or str(path), progress)
        grid, coder = read_co3_setup(co3.header)
        if not co3.header["steps"]:  # (a reader takes it; there is nothing to measure)
            raise InputError(f"{name or path}: the file holds no step, no bits per entry to "
                             "report")
        refs = ReferenceCache(co3, nsym=grid.nsym)  # LYX blocks' sources, decoded once
        layers = []
        for block in progress_iter(co3.layers(), progress, "report", total=len(co3.offsets)):
            lay = co3.header["layers"][block.index]
            sym = decode_block(block, grid, coder, lay["numel"], lay["shape"], refs)
            refs.done(block.index)
            counts = np.bincount(sym.reshape(-1), minlength=grid.nsym)
            try:
                table = coder.table_from_bytes(block.table, grid.nsym)
            except InputError as e:
                raise CorruptDataError(f"layer {block.name}: bad table ({e})") from None
            pmf, beta = _model_pmf(block.meta, table, grid)
            m = layer_metrics(counts, pmf, beta, block.nbytes, block.payload_bytes,
                              co3.header["coder"].get("max_len", 16))
            layers.append({"name": lay["name"], "shape": lay["shape"], **m})
            if keep_hist:
                layers[-1]["hist"] = {"counts": counts.tolist(), "pmf": pmf.tolist(),
                                      "values": grid.values.tolist(),
                                      "model": block.meta.get("model")}
        total = summarize(layers, co3.size)
        return {"file": name or str(path), "format": grid.id, "coder": co3.header["coder"],
                "model": co3.header["model"], "scale_rule": co3.header["scale_rule"],
                "steps": len(co3.header["steps"]), "bytes": co3.size,
                "header_bytes": co3.header_bytes, "trailer_bytes": co3.trailer_bytes,
                "layers": layers, "total": total}


def summarize(layers: list[dict], file_bytes: int) -> dict:
    n = sum(lay["entries"] for lay in layers)
    total = {"entries": n, "layers": len(layers)}
    if not n:
        return total
    for key in ("zero_fraction", "entropy_bpe", "cross_entropy_bpe", "huffman_bpe",
                "huffman_counts_bpe", "payload_bpe"):
        total[key] = sum(lay[key] * lay["entries"] for lay in layers) / n
    total["beta"] = None
    total["bpe"] = 8.0 * file_bytes / n
    total["bytes"] = int(file_bytes)
    total["payload_bytes"] = sum(lay["payload_bytes"] for lay in layers)
    total["side_bytes"] = int(file_bytes - total["payload_bytes"])
    return total


def report_dump(path, *, format=None, scale=None, coder=None, coder_params=None,
                model=None, codebook=None, nonfinite="error", progress=False,
                keep_hist=False) -> dict:
    """Compress a dump (to an anonymous temporary file) and report on the real bytes."""
    from co3cli.codec import compress
    from co3cli.fileio import Scratch

    with Scratch(None, prefix="co3-report-") as tmp:  # anonymous: gone even on kill -9
        compress(path, tmp.path, format=format, scale=scale, coder=coder,
                 coder_params=coder_params, model=model, codebook=codebook, nonfinite=nonfinite,
                 progress=progress)
        out = report_co3(tmp.path, name=f"{path} (compressed to a temporary file)",
                         progress=progress, keep_hist=keep_hist)
    out["source"] = str(path)
    return out


def format_table(rows: list[dict], cols: list[tuple[str, str, str]]) -> str:
    """Fixed-width table; cols = (key, title, format spec)."""
    def cell(v, spec):
        if v is None:
            return "-"
        if isinstance(v, float) and v != v:
            return "nan"
        return format(v, spec) if spec else str(v)

    cells = [[cell(r.get(k), spec) for k, _, spec in cols] for r in rows]
    widths = [max([len(t)] + [len(c[i]) for c in cells]) for i, (_, t, _) in enumerate(cols)]
    lines = ["  ".join(t.ljust(w) if i == 0 else t.rjust(w)
                       for i, ((_, t, _), w) in enumerate(zip(cols, widths)))]
    lines += ["  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths)))
              for row in cells]
    return "\n".join(lines)


BITS_COLS = [("name", "layer", ""), ("entries", "entries", "d"), ("zero_fraction", "zeros", ".3f"),
             ("beta", "beta", ".3f"), ("entropy_bpe", "entropy", ".3f"),
             ("cross_entropy_bpe", "x-entropy", ".3f"), ("huffman_bpe", "huffman", ".3f"),
             ("bpe", "bpe", ".3f")]


def bits_table(rep: dict) -> str:
    rows = rep["layers"] + [{"name": "TOTAL (whole file)", **rep["total"]}]
    head = (f"{rep['file']}: format {rep['format']}, coder {rep['coder']['id']}, model {rep['model']}, "
            f"{rep['steps']} step(s), {rep['bytes']} bytes; bits per entry:")
    return head + "\n" + format_table(rows, BITS_COLS)
