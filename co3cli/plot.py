"""``co3 report --plot``: per-layer symbol histograms against the model, and bits vs entropy.

Needs matplotlib (``pip install 'co3cli[plot]'``); nothing else in co3cli imports it.
"""

from __future__ import annotations

import numpy as np

from co3cli.errors import InputError


def plot_report(rep: dict, path, max_layers: int = 4) -> None:
    """Write a PNG for a report made with ``keep_hist=True``."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise InputError("--plot needs matplotlib: pip install 'co3cli[plot]'") from None
    from co3cli.fileio import output_path

    layers = sorted(rep["layers"], key=lambda lay: -lay["entries"])[:max_layers]
    fig, axes = plt.subplots(1, len(layers) + 1, figsize=(4.2 * (len(layers) + 1), 3.6))
    for ax, lay in zip(axes, layers):
        h = lay["hist"]
        values = np.asarray(h["values"], dtype=np.float64)
        counts = np.asarray(h["counts"], dtype=np.float64)
        emp = counts / counts.sum()
        nz = emp > 0
        ax.semilogy(values[nz], emp[nz], "o", ms=3, label="empirical")
        ax.semilogy(values, np.asarray(h["pmf"]), "-", lw=1, label=f"model ({h['model']})")
        ax.set_xscale("symlog", linthresh=float(np.min(np.abs(values[values != 0]))))
        ax.set_title(f"{lay['name']} (beta={lay['beta']:.2f})" if lay["beta"] else lay["name"],
                     fontsize=9)
        ax.set_xlabel(f"grid value ({rep['format']})")
        ax.set_ylim(max(1e-9, emp[nz].min() / 10), 1.5)
        ax.legend(fontsize=7)
    ax = axes[-1]
    names = [lay["name"] for lay in rep["layers"]] + ["total"]
    rows = rep["layers"] + [rep["total"]]
    idx = np.arange(len(rows))
    for j, (key, label) in enumerate([("entropy_bpe", "entropy"), ("cross_entropy_bpe", "x-entropy"),
                                      ("huffman_bpe", "huffman"), ("bpe", "actual bpe")]):
        ax.bar(idx + (j - 1.5) * 0.2, [r[key] for r in rows], 0.2, label=label)
    ax.set_xticks(idx, names, rotation=60, ha="right", fontsize=7)
    ax.set_ylabel("bits per entry")
    ax.legend(fontsize=7)
    fig.tight_layout()
    with output_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=110)
    plt.close(fig)
