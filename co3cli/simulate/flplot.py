"""Reading ``co3 simulate fl`` runs back: ``metrics.csv`` as columns, and one comparison PNG.

::

    run folder(s) --read_metrics--> {column: float array}  --plot_runs--> PNG (3 panels):
        accuracy vs round | accuracy vs cumulative uplink bits | uplink bits/entry vs round

Plotting needs matplotlib (``pip install 'co3cli[plot]'``), imported only by ``plot_runs``.
"""

from __future__ import annotations

import csv
import os
from pathlib import Path

import numpy as np

from co3cli.errors import InputError
from co3cli.simulate.fl import METRICS


def read_metrics(run: str | os.PathLike) -> dict[str, np.ndarray]:
    """metrics.csv of a run folder as float columns (empty cells: NaN)."""
    path = Path(run) / "metrics.csv"
    try:
        with open(path, newline="", encoding="utf-8") as f:
            rows = list(csv.DictReader(f))
    except OSError as exc:
        raise InputError(f"cannot read {path}: {exc.strerror or exc}") from None
    except (UnicodeDecodeError, csv.Error) as exc:
        raise InputError(f"{path} is not a co3 simulate fl metrics file ({exc})") from None
    if rows and any(v is None for v in rows[-1].values()):
        rows = rows[:-1]  # a row cut short by a killed run: the finished rounds stay readable
    if not rows or rows[0].keys() != set(METRICS):
        raise InputError(f"{path} is not a co3 simulate fl metrics file (or has no round)")
    try:
        return {k: np.array([float(r[k]) if r[k] != "" else np.nan for r in rows]) for k in METRICS}
    except (TypeError, ValueError) as exc:
        raise InputError(f"{path}: bad value ({exc})") from None


def plot_runs(runs: list[str], out_png: str | os.PathLike, labels: list[str] | None = None) -> None:
    """Accuracy vs round, accuracy vs cumulative uplink bits, bits/entry vs round (one PNG)."""
    data = [read_metrics(r) for r in runs]
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise InputError("co3 simulate plot needs matplotlib: pip install 'co3cli[plot]'") \
            from None
    labels = labels or [Path(r).name for r in runs]
    fig, ax = plt.subplots(1, 3, figsize=(15, 4.2))
    for d, lab in zip(data, labels):
        ok = ~np.isnan(d["test_accuracy"])
        ax[0].plot(d["round"][ok], 100 * d["test_accuracy"][ok], label=lab)
        ax[1].plot(8 * d["cumulative_uplink_bytes"][ok], 100 * d["test_accuracy"][ok], label=lab)
        ax[2].plot(d["round"], d["uplink_bits_per_entry"], label=lab)
    ax[0].set(xlabel="round", ylabel="test accuracy (%)")
    ax[1].set(xlabel="cumulative uplink bits", ylabel="test accuracy (%)", xscale="log")
    ax[2].set(xlabel="round", ylabel="uplink bits / entry", yscale="log")
    for a in ax:
        a.grid(alpha=0.3)
    ax[2].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out_png, dpi=110, format="png")
    plt.close(fig)
