"""Reading ``co3 simulate fl`` runs back: ``metrics.csv`` as columns, and one comparison PNG.

::

    run folder(s) --read_metrics--> {column: float array}  --runs_figure / plot_runs--> PNG:
        accuracy vs round | accuracy vs cumulative uplink MB | uplink bits/entry vs round
        | accuracy vs wall-clock seconds (runs with a clock; ``uplinks``: recomputed per uplink
          by co3cli.simulate.clock.recompute, one line style per uplink)
    config.json --default_labels--> one label per run from what sets its config apart
        (compressor and its parameters, gamma, seed, ...), unless ``--labels`` names them

Plotting needs matplotlib (``pip install 'co3cli[plot]'``), imported only by the figure.
"""

from __future__ import annotations

import csv
import json
import os
from pathlib import Path
from typing import Any

import numpy as np

from co3cli.errors import InputError
from co3cli.simulate.clock import CLOCK_COLUMNS
from co3cli.simulate.fl import METRICS


def read_metrics(run: str | os.PathLike) -> dict[str, np.ndarray]:
    """metrics.csv of a run folder as float columns (empty cells: NaN; the clock's columns are
    NaN in a run from before the wall clock)."""
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
    have = set(rows[0]) if rows else set()
    if not rows or not set(METRICS) - set(CLOCK_COLUMNS) <= have or not have <= set(METRICS):
        raise InputError(f"{path} is not a co3 simulate fl metrics file (or has no round)")
    try:
        return {k: np.array([float(r[k]) if r.get(k, "") != "" else np.nan for r in rows])
                for k in METRICS}
    except (TypeError, ValueError) as exc:
        raise InputError(f"{path}: bad value ({exc})") from None


SKIP = ("compressor", "compressor_params", "gamma", "dump_rounds", "dump_client", "eval_every")
VALUE_ONLY = ("format",)  # compressor parameters shown as their value alone


def run_config(run: str | os.PathLike) -> dict[str, Any] | None:
    """The ``config`` of a run folder's config.json, or None when it is missing or unreadable."""
    try:
        doc = json.loads((Path(run) / "config.json").read_text(encoding="utf-8"))
        cfg = doc["config"]
        return cfg if isinstance(cfg, dict) else None
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _differs(cfgs: list[dict], get) -> bool:
    vals = [json.dumps(get(c), sort_keys=True, default=str) for c in cfgs]
    return len(set(vals)) > 1


def default_labels(runs: list[str]) -> list[str]:
    """Each run named by its compressor and what sets its config.json apart from the others':
    the compressor's parameters (``co3 fp4-co3``, ``qsgd levels=2``), the error-feedback decay
    (``co3 fp4-co3 gamma=0.7``) and any other differing field (``seed=1``); the folder names
    where a config is missing, and beside labels that would still be alike."""
    names = [Path(r).resolve().name or str(r) for r in runs]
    cfgs = [run_config(r) for r in runs]
    if len(runs) < 2 or any(c is None for c in cfgs):
        return names
    params = lambda c: c.get("compressor_params") or {}  # noqa: E731
    keys = sorted({k for c in cfgs for k in params(c)})
    vary = [k for k in keys if _differs(cfgs, lambda c, k=k: params(c).get(k))]
    others = [k for k in cfgs[0] if k not in SKIP and _differs(cfgs, lambda c, k=k: c.get(k))]
    labels = []
    for c in cfgs:
        parts = ["none (float32)" if c.get("compressor") == "none" else str(c.get("compressor"))]
        parts += [str(params(c)[k]) if k in VALUE_ONLY else f"{k}={params(c)[k]}"
                  for k in vary if k in params(c)]
        if c.get("compressor") != "none" and _differs(cfgs, lambda c: c.get("gamma")):
            parts.append(f"gamma={c.get('gamma')}")
        parts += [f"{k}={c.get(k)}" for k in others]
        labels.append(" ".join(parts))
    if len(set(labels)) < len(labels):  # still alike: say which folder is which
        labels = [f"{lab} ({n})" for lab, n in zip(labels, names)]
    return labels


def parse_labels(text: str | None, runs: list) -> list[str] | None:
    """``--labels a,b,c``: one label per run (InputError naming both counts otherwise)."""
    if text is None:
        return None
    labels = [x.strip() for x in text.split(",")]
    if len(labels) != len(runs) or not all(labels):
        raise InputError(f"--labels {text!r} gives {len(labels)} label(s) for {len(runs)} "
                         "run(s): give one non-empty label per run, comma-separated")
    return labels


def _common(cfgs: list[dict | None]) -> str:
    """The setting every run shares, for the title."""
    if not cfgs or any(c is None for c in cfgs):
        return ""
    c0 = cfgs[0]
    same = lambda k: not _differs(cfgs, lambda c: c.get(k))  # noqa: E731
    parts = [f"{k} {c0[k]}" if k != "clients" else f"{c0[k]} clients"
             for k in ("task", "clients", "algorithm", "partition", "lr") if k in c0 and same(k)]
    if same("compressor") and same("compressor_params"):
        given = " ".join(f"{k}={v}" for k, v in (c0.get("compressor_params") or {}).items())
        parts.append(f"all {c0.get('compressor')}" + (f" {given}" if given else ""))
    return ", ".join(parts)


def _log_helps(arrays, ratio: float) -> bool:
    vals = np.concatenate([a[np.isfinite(a) & (a > 0)] for a in arrays] or [np.zeros(0)])
    return vals.size > 0 and vals.max() / vals.min() > ratio


def _clocks(runs, data, uplinks, links) -> list[list[tuple[str | None, np.ndarray]]] | None:
    """Per run, (uplink, wallclock_s per round) for each uplink (None: as recorded); None when
    no run has a clock and no uplink is asked for."""
    from co3cli.simulate.clock import recompute

    if not uplinks and not any(links.values()):
        if not any(np.nanmax(d["wallclock_s"], initial=0) > 0 for d in data):
            return None
        return [[(None, d["wallclock_s"])] for d in data]
    return [[(up, recompute(r, **{**links, "uplink": up})["wallclock_s"]) for up in uplinks or [None]]
            for r in runs]


def runs_figure(runs: list[str], labels: list[str] | None = None, *,
                uplinks: list[str] | None = None, links: dict[str, Any] | None = None):
    """The comparison Figure: accuracy vs round, accuracy vs cumulative uplink MB, uplink
    bits/entry vs round (log axes only where the runs span more than a decade or so) and, when
    the runs have a wall clock, accuracy vs wall-clock time; ``uplinks`` (and ``links``, other
    link fields) recompute it for those links."""
    from co3cli.plot import new_figure

    data = [read_metrics(r) for r in runs]
    labels = labels or default_labels(runs)
    clocks = _clocks(runs, data, uplinks, {k: v for k, v in (links or {}).items()
                                           if v is not None})
    fig = new_figure(20.0 if clocks else 15.0, 5.0)
    ax = fig.subplots(1, 4 if clocks else 3)
    for k, (d, lab) in enumerate(zip(data, labels)):
        ok = ~np.isnan(d["test_accuracy"])
        style = dict(color=f"C{k % 10}", lw=1.5, label=lab)
        ax[0].plot(d["round"][ok], 100 * d["test_accuracy"][ok], marker="o", ms=3, **style)
        ax[1].plot(d["cumulative_uplink_bytes"][ok] / 1e6, 100 * d["test_accuracy"][ok],
                   marker="o", ms=3, **style)
        ax[2].plot(d["round"], d["uplink_bits_per_entry"], **style)
        for i, (up, wall) in enumerate(clocks[k] if clocks else ()):
            ax[3].plot(wall[ok], 100 * d["test_accuracy"][ok], marker="o", ms=3,
                       ls=("-", "--", ":", "-.")[i % 4], color=style["color"], lw=1.5)
    if clocks:
        _clock_panel(ax[3], clocks)
    ax[0].set(xlabel="round", ylabel="test accuracy (%)", title="test accuracy vs round")
    up = [d["cumulative_uplink_bytes"] for d in data]
    ax[1].set(xlabel="cumulative uplink, all clients (MB" + (", log)" if _log_helps(up, 30)
                                                             else ")"),
              ylabel="test accuracy (%)", title="accuracy vs bytes sent",
              xscale="log" if _log_helps(up, 30) else "linear")
    bpe = [d["uplink_bits_per_entry"] for d in data]
    log_bpe = _log_helps(bpe, 10)
    ax[2].set(xlabel="round", ylabel="uplink bits per entry" + (" (log)" if log_bpe else ""),
              title="bits per gradient entry sent", yscale="log" if log_bpe else "linear")
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    for axis, scale, arrays in ((ax[1].xaxis, ax[1].get_xscale(), [u / 1e6 for u in up]),
                                (ax[2].yaxis, ax[2].get_yscale(), bpe)):
        if scale == "log":  # 0.5, 1, 2, 5, 10 rather than 10^0, 10^1; fewer on a long axis
            vals = np.concatenate([a[np.isfinite(a) & (a > 0)] for a in arrays])
            decades = np.log10(vals.max() / vals.min())
            subs = (1.0, 2.0, 5.0) if decades <= 3.5 else (1.0, 3.0) if decades <= 5 else (1.0,)
            axis.set_major_locator(LogLocator(subs=subs))
            axis.set_major_formatter(FuncFormatter(lambda v, _p: f"{v:g}"))
            axis.set_minor_formatter(NullFormatter())
    for a in ax:
        a.grid(alpha=0.3)
    fig.legend(*ax[0].get_legend_handles_labels(), loc="outside lower center",
               ncols=min(len(runs), 4), fontsize=9)
    common = _common([run_config(r) for r in runs])
    fig.suptitle("co3 simulate plot: federated runs" + (f" ({common})" if common else ""),
                 fontsize=11)
    return fig


def _clock_panel(ax, clocks) -> None:
    ups = [up for up, _ in clocks[0]]
    walls = [w for c in clocks for _, w in c]
    log = _log_helps(walls, 30)
    ax.set(xlabel="wall-clock time (s" + (", log)" if log else ")"), ylabel="test accuracy (%)",
           title="accuracy vs wall-clock time", xscale="log" if log else "linear")
    if len(ups) > 1 or ups[0] is not None:  # the line style says which uplink
        for i, up in enumerate(ups):
            ax.plot([], [], color="0.3", ls=("-", "--", ":", "-.")[i % 4],
                    label=f"uplink {up}" if up is not None else "as run")
        ax.legend(fontsize=8, loc="lower right")


def plot_runs(runs: list[str], out_png: str | os.PathLike, labels: list[str] | None = None, *,
              uplinks: list[str] | None = None, links: dict[str, Any] | None = None) -> None:
    """:func:`runs_figure` as a PNG in ``out_png`` (which appears only when complete)."""
    from co3cli.plot import save_png

    save_png(runs_figure(runs, labels, uplinks=uplinks, links=links), out_png)
