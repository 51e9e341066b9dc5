"""Figures: the shared plotting helpers, and ``co3 report --plot``.

Every command that takes ``--plot`` (``co3 report``, ``co3 simulate uep analyze``, ``co3 simulate
plot``) calls :func:`require_matplotlib` before it reads or computes anything, so a missing
matplotlib (``pip install 'co3cli[plot]'``) or a PNG path that cannot be written fails at once,
in one line. Figures are built on ``matplotlib.figure.Figure`` (no pyplot, no global backend)
by functions that return them, so tests can read titles, labels and limits; :func:`save_png`
writes one atomically (``co3cli.fileio.output_path``: the PNG appears only when complete).

The report figure (:func:`report_figure`)::

    report (keep_hist=True) --> one panel per layer, largest first up to max_layers, plus one
        "other N layers" panel pooling the rest: symbol frequencies (bars) against the model's
        pmf (line); the log axis stops a little below the rarest frequency the data can show
      --> a bits-per-entry panel across the bottom: per layer (largest first, up to max_bars,
        the rest pooled) and the whole file: entropy and model cross-entropy (bounds) next to
        the Huffman code length and the actual bits from the file's bytes; a bar far above the
        others (a tiny layer whose tables and scales dominate) is clipped and labelled.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

import numpy as np

from co3cli.errors import InputError

MPL_MISSING = "--plot needs matplotlib: pip install 'co3cli[plot]'"


def require_matplotlib(output: str | os.PathLike | None = None) -> None:
    """InputError (one line) unless matplotlib imports and ``output`` (if given) can be written:
    called by every ``--plot`` command before any work."""
    try:
        import matplotlib  # noqa: F401
        from matplotlib.figure import Figure  # noqa: F401
    except ImportError:
        raise InputError(MPL_MISSING) from None
    if output is not None and str(output) != "-":
        from co3cli.fileio import output_folder

        output_folder(output, "plot output")


def new_figure(width: float, height: float):
    """A ``matplotlib.figure.Figure`` (Agg canvas, no pyplot state), constrained layout."""
    require_matplotlib()
    from matplotlib.figure import Figure

    return Figure(figsize=(width, height), layout="constrained")


def save_png(fig, path: str | os.PathLike, dpi: int = 120) -> None:
    """Write ``fig`` as PNG to ``path`` (``-``: stdout); the file appears only when complete."""
    from co3cli.fileio import output_path

    with output_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=dpi)


def short_number(v: float) -> str:
    """A tick label: ``0``, ``0.5``, ``12``, ``1.5e-5``, ``5.7e4`` (at most ~6 characters)."""
    if v == 0:
        return "0"
    a = abs(v)
    if 1e-3 <= a < 1e4:
        return f"{v:.3g}"
    m, e = f"{v:.1e}".split("e")
    return f"{m.rstrip('0').rstrip('.')}e{int(e)}"


def count_label(n: int) -> str:
    """``1605632`` -> ``1.6M``; ``2048`` -> ``2.0k``; ``160`` -> ``160``."""
    for div, unit in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if n >= div:
            return f"{n / div:.1f}{unit}"
    return str(int(n))


# --- co3 report --plot ------------------------------------------------------------------------

BARS = [  # (key, legend, colour, hatch): the bounds light, the real bytes dark
    ("entropy_bpe", "entropy of the symbols\n(lower bound)", "#c6dbef", ""),
    ("cross_entropy_bpe", "model cross-entropy\n(ideal code for the table)", "#6baed6", ""),
    ("huffman_bpe", "Huffman code of the table\n(reference)", "#fdae6b", "//"),
    ("bpe", "actual: 8 x bytes / entries\n(payload, tables, scales)", "#08306b", ""),
]


def _pooled(layers: list[dict], name: str) -> dict:
    """Several layers as one: summed counts and bytes, entry-weighted rates and model pmf."""
    n = sum(lay["entries"] for lay in layers)
    out: dict[str, Any] = {"name": name, "entries": n, "beta": None, "pooled": len(layers)}
    w = [lay["entries"] / n if n else 0.0 for lay in layers]
    for key in ("zero_fraction", "entropy_bpe", "cross_entropy_bpe", "huffman_bpe"):
        out[key] = sum(wi * lay[key] for wi, lay in zip(w, layers))
    out["bytes"] = sum(lay["bytes"] for lay in layers)
    out["bpe"] = 8.0 * out["bytes"] / n if n else 0.0
    if all("hist" in lay for lay in layers):
        h0 = layers[0]["hist"]
        out["hist"] = {"values": h0["values"], "model": "entry-weighted mix",
                       "counts": np.sum([lay["hist"]["counts"] for lay in layers], axis=0),
                       "pmf": np.sum([wi * np.asarray(lay["hist"]["pmf"])
                                      for wi, lay in zip(w, layers)], axis=0)}
    return out


def _split(layers: list[dict], cap: int) -> tuple[list[dict], list[dict]]:
    """The ``cap`` largest layers (if more, ``cap - 1`` and the rest to pool), largest first."""
    order = sorted(layers, key=lambda lay: -lay["entries"])
    if len(order) <= cap:
        return order, []
    return order[: cap - 1], order[cap - 1:]


def _title(rep: dict) -> str:
    src = Path(str(rep.get("source") or rep["file"]).split(" (")[0]).name
    coder = rep["coder"]["id"] if isinstance(rep.get("coder"), dict) else rep.get("coder")
    total = rep["total"]
    return (f"co3 report: {src} - format {rep['format']}, scale {rep.get('scale_rule')}, "
            f"coder {coder}, model {rep.get('model')}\n{rep.get('steps', 1)} step(s), "
            f"{total['entries']:,} entries in {len(rep['layers'])} layers, "
            f"{rep.get('bytes', total.get('bytes', 0)):,} bytes, "
            f"{total.get('bpe', 0):.3f} bits/entry")


def _level_ticks(values: np.ndarray, kmax: int) -> list[int]:
    """Level positions to label: 0, the outermost level seen and two between, each side."""
    kmax = max(1, kmax)
    step = max(1, math.ceil(kmax / 3))
    pos = [k for k in range(kmax, 0, -step) if k >= 0.75 * step]  # none crowding 0
    return sorted([-k for k in pos] + [0] + pos)


def _hist_panel(ax, lay: dict, fmt: str) -> None:
    """Symbol frequencies against the model pmf on the grid's levels (evenly spaced)."""
    h = lay["hist"]
    values = np.asarray(h["values"], dtype=np.float64)
    counts = np.asarray(h["counts"], dtype=np.float64)
    pmf = np.asarray(h["pmf"], dtype=np.float64)
    n = counts.sum()
    idx = np.arange(len(values)) - (len(values) - 1) // 2  # level 0 = the zero symbol
    emp = counts / n
    floor = min(emp[emp > 0].min(), 1.0 / n, 0.03) / 3  # below what n entries can show
    seen = (emp > 0) | (pmf >= floor)
    half = int(np.abs(idx[seen]).max()) + 1 if seen.any() else 1
    few = len(values) <= 63  # fp4, uniform grids: one bar per level; fp8: one outline
    style = dict(color="#9ecae1", label="symbol frequency (data)")
    if few:
        ax.bar(idx, np.where(emp > 0, emp, np.nan), width=0.8, edgecolor="#3182bd", lw=0.5,
               **style)
    else:
        ax.stairs(np.maximum(emp, floor), np.r_[idx - 0.5, idx[-1] + 0.5], baseline=floor,
                  fill=True, **style)
    ax.plot(idx, np.where(pmf >= floor, pmf, np.nan), "-o" if few else "-", color="#e6550d",
            ms=2.5, lw=1.2, label="model pmf (coded with)")
    ax.set_yscale("log")
    ax.set_ylim(floor, 1.6)
    ax.set_xlim(-half - 0.5, half + 0.5)
    ticks = _level_ticks(values, half - 1)
    ax.set_xticks(ticks, [short_number(values[t + (len(values) - 1) // 2]) for t in ticks])
    ax.tick_params(labelsize=7.5)
    ax.set_xlabel(f"grid value ({fmt}, one step per level)", fontsize=8)
    ax.set_ylabel("probability (log)", fontsize=8)
    what = (f"{count_label(lay['entries'])} entries, {100 * lay['zero_fraction']:.0f}% zeros"
            + (f", beta {lay['beta']:.2f}" if lay.get("beta") is not None else ""))
    name = lay["name"] if not lay.get("pooled") else f"other {lay['pooled']} layers (pooled)"
    ax.set_title(f"{name}\n{what}", fontsize=8.5)
    ax.grid(axis="y", alpha=0.25)


def _bits_panel(ax, rows: list[dict], file_bytes: int) -> None:
    """Grouped bars per layer (largest first) and the whole file; outliers clipped, labelled."""
    x = np.arange(len(rows), dtype=np.float64)
    x[-1] += 0.5  # a gap before the whole file
    vals = np.array([[r.get(k, np.nan) for k, *_ in BARS] for r in rows], dtype=np.float64)
    tops = np.nanmax(vals, axis=1)
    top = float(np.nanmax(tops))
    # the axis fits every bar up to 4x the tallest of the layers holding >= 1% of the entries;
    # taller ones (tiny layers whose tables and scales dominate) are cut and labelled
    big = [t for t, r in zip(tops, rows) if r["entries"] >= 0.01 * rows[-1]["entries"]]
    ymax = 1.12 * max(t for t in tops if t <= 4 * max(big))
    w = 0.8 / len(BARS)
    for j, (key, label, color, hatch) in enumerate(BARS):
        xs = x + (j - (len(BARS) - 1) / 2) * w
        ax.bar(xs, np.minimum(vals[:, j], ymax), w, color=color, hatch=hatch,
               edgecolor="#444444" if hatch else color, lw=0.4, label=label)
        for xi, v in zip(xs, vals[:, j]):
            if v > ymax:
                ax.annotate(f"{v:.1f}", (xi, ymax), xytext=(0, 2), textcoords="offset points",
                            ha="center", va="bottom", fontsize=7, color="#b30000",
                            fontweight="bold")
    ax.set_ylim(0, ymax * 1.08)
    labels = []
    for r in rows:
        share = 100.0 * r["bytes"] / file_bytes if file_bytes else 0.0
        pct = f"{share:.0f}" if share >= 10 else f"{share:.2g}"
        labels.append(f"{r['name']}\n{count_label(r['entries'])} entries\n{pct}% of bytes")
    ax.set_xticks(x, labels, fontsize=7.5)
    ax.axvline(x[-1] - 0.75, color="#888888", lw=0.8, ls="--")
    ax.set_ylabel("bits per entry", fontsize=9)
    ax.set_xlabel("layer (entries, share of the file's bytes)", fontsize=8)
    cut = f"; bars cut at {ymax:.1f} show their value in red" if top > ymax else ""
    ax.set_title("bits per entry: the bounds next to the real bytes\n(layers largest first; "
                 f"the whole file includes its header{cut})", fontsize=9)
    ax.grid(axis="y", alpha=0.25)
    ax.legend(fontsize=7.5, loc="upper left", bbox_to_anchor=(1.005, 1.0), labelspacing=0.9)


def report_figure(rep: dict, max_layers: int = 8, max_bars: int = 12):
    """The figure of a report made with ``keep_hist=True`` (see the module docstring)."""
    shown, others = _split([lay for lay in rep["layers"] if lay["entries"] > 0], max_layers)
    panels = shown + ([_pooled(others, "others")] if others else [])
    bar_shown, bar_rest = _split(rep["layers"], max_bars)
    bar_rows = bar_shown + ([_pooled(bar_rest, f"other {len(bar_rest)} layers")]
                            if bar_rest else []) + [{**rep["total"], "name": "whole file"}]
    n = max(1, len(panels))
    rows = math.ceil(n / 4)
    cols = math.ceil(n / rows)
    fig = new_figure(max(3.3 * cols, 1.25 * len(bar_rows) + 1.5, 9.0) + 2.0, 2.9 * rows + 4.3)
    grid = fig.add_gridspec(rows + 2, cols, height_ratios=[0.1] + [1.0] * rows + [1.2])
    for i, lay in enumerate(panels):
        _hist_panel(fig.add_subplot(grid[1 + i // cols, i % cols]), lay, rep["format"])
    if panels:  # one legend for all the distribution panels, in a row of its own
        key = fig.add_subplot(grid[0, :])
        key.axis("off")
        key.legend(*fig.axes[0].get_legend_handles_labels(), fontsize=8, ncols=2, loc="center")
    _bits_panel(fig.add_subplot(grid[rows + 1, :]), bar_rows, rep["total"].get("bytes", 0))
    fig.suptitle(_title(rep), fontsize=10)
    return fig


def plot_report(rep: dict, path, max_layers: int = 8) -> None:
    """Write the PNG of :func:`report_figure` to ``path`` (atomically)."""
    save_png(report_figure(rep, max_layers=max_layers), path)
