"""The figure of ``co3 simulate uep analyze --plot``.

::

    analyze() result --analysis_figure--> left:  P(class decoded | N results received), colour =
                                                 scheme, line style = class (two small legends)
                                          right: expected normalised error vs time (with
                                                 --error-vs-time), log axis clipped at a floor
                                                 the curves that stay above it reach
                     --write_plot--------> PNG (atomic)

Schemes whose curves are identical (e.g. mds and eep, which decode every block at once) are
drawn once and named together in the legend ("mds, eep (30 workers; identical curves)"), so
none hides under another.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from co3cli.plot import new_figure, save_png, short_number

CLASS_STYLES = ["-", "--", ":", "-.", (0, (5, 1, 1, 1, 1, 1)), (0, (8, 2))]
MARKERS = ["o", "s", "^", "v", "D", "P", "X", "*"]


def scheme_groups(result: dict[str, Any]) -> dict[str, list[str]]:
    """First scheme -> the schemes whose decoding (and error) curves equal its own, in order:
    each group is drawn once and named together, so no curve hides under another."""
    schemes = result["schemes"]
    curves = result.get("error_vs_time") or {}
    groups: dict[str, list[str]] = {}
    for sid, a in schemes.items():
        for ref, members in groups.items():
            b = schemes[ref]
            if (a["N"] == b["N"] and len(a["p_decode"]) == len(b["p_decode"])
                    and np.allclose(a["p_decode"], b["p_decode"], rtol=0, atol=1e-12)
                    and (not curves or np.allclose(curves[sid], curves[ref], rtol=1e-9,
                                                   atol=0))):
                members.append(sid)
                break
        else:
            groups[sid] = [sid]
    return groups


def _group_label(result: dict[str, Any], members: list[str]) -> str:
    workers = result["schemes"][members[0]]["workers"]
    if len(members) == 1:
        return f"{members[0]} ({workers} workers)"
    return f"{', '.join(members)} ({workers} workers; identical curves)"


def _setting(result: dict[str, Any]) -> str:
    """One line describing the code setting (classes, windows, latency)."""
    cfgs = [s.get("config", {}) for s in result["schemes"].values()]
    sizes = next((c["class_sizes"] for c in cfgs if "class_sizes" in c), None)
    windows = next((c["windows"] for c in cfgs if "windows" in c), None)
    parts = []
    if sizes:
        parts.append(f"{len(sizes)} classes of {','.join(map(str, sizes))} blocks "
                     "(class 1 the most important)")
    if windows:
        parts.append("UEP windows " + ",".join(f"{w:g}" for w in windows))
    cur = result.get("error_vs_time")
    if cur:
        parts.append(f"latency {cur['shift']:g} + Exp(rate {cur['rate']:g})")
        parts.append("block energies " + ",".join(short_number(e) for e in cur["energies"]))
    return "; ".join(parts)


def error_floor(curves: dict[str, Any], sids) -> float:
    """The lower limit of the error axis: a decade below the lowest level a curve ends at (its
    plateau), counting only levels above 1e-6 of the largest error; at least three decades
    shown, at most six: a curve falling further (an MDS code decoding everything) is cut and
    the cut is named on the plot."""
    top = max(float(np.nanmax(curves[s])) for s in sids)
    ends = [float(curves[s][-1]) for s in sids]
    ends = [e for e in ends if e >= 1e-6 * top]
    low = min(ends) if ends else 1e-6 * top
    floor = 10.0 ** math.floor(math.log10(low))
    if low < 3 * floor:
        floor /= 10
    return min(max(floor, 1e-6 * top), 1e-3 * top)


def _decoding_panel(ax, result, groups) -> None:
    from matplotlib.lines import Line2D
    from matplotlib.ticker import MaxNLocator

    n_classes = max(len(s["p_decode"]) for s in result["schemes"].values())
    for k, sid in enumerate(groups):
        s = result["schemes"][sid]
        every = max(1, len(s["N"]) // 8)
        for c, p in enumerate(s["p_decode"]):
            ax.plot(s["N"], p, ls=CLASS_STYLES[c % len(CLASS_STYLES)], color=f"C{k}", lw=1.6,
                    marker=MARKERS[k % len(MARKERS)], ms=4, markevery=(k % every, every))
    ax.set(xlabel="results received N (of the scheme's workers)",
           ylabel="P(class decoded | N)", ylim=(-0.03, 1.03),
           title="probability that each class is decoded after N results")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.grid(alpha=0.3)
    ax.legend([Line2D([], [], color="k", ls=CLASS_STYLES[c % len(CLASS_STYLES)])
               for c in range(n_classes)],
              [f"class {c + 1}" + (" (most important)" if c == 0 else "")
               for c in range(n_classes)], title="line style", fontsize=8, title_fontsize=8,
              loc="lower right")


def _error_panel(ax, result, groups) -> None:
    cur = result["error_vs_time"]
    t = np.asarray(cur["t"], float)
    floor = error_floor(cur, list(groups))
    below = []
    for k, (sid, members) in enumerate(groups.items()):
        e = np.asarray(cur[sid], float)
        every = max(1, len(e) // 8)
        ax.plot(t, np.where(e > 0, e, np.nan), color=f"C{k}", lw=1.6,
                marker=MARKERS[k % len(MARKERS)], ms=4, markevery=(k % every, every))
        if (e < floor).any():
            first = t[np.argmax(e < floor)]
            below.append(f"{', '.join(members)}: from t = {first:.2g} "
                         f"({short_number(float(e[-1]))} at t = {t[-1]:g})")
    ax.set_yscale("log")
    ax.set_ylim(floor, 1.5 * max(float(np.nanmax(cur[s])) for s in groups))
    ax.set(xlabel="time since the start (units of 1/rate)",
           ylabel="expected lost energy / total energy (log)",
           title="expected normalised error of the decoded product vs time")
    ax.grid(alpha=0.3)
    if below:
        ax.text(0.98, 0.03, f"below {short_number(floor)}:\n" + "\n".join(below),
                transform=ax.transAxes, ha="right", va="bottom", fontsize=7.5,
                color="#333333", bbox=dict(boxstyle="round", fc="white", ec="#bbbbbb"))


def analysis_figure(result: dict[str, Any]):
    """The Figure of an :func:`co3cli.simulate.uep.report.analyze` result."""
    from matplotlib.lines import Line2D

    curves = result.get("error_vs_time")
    fig = new_figure(13.0 if curves else 7.5, 5.6)
    axes = fig.subplots(1, 2 if curves else 1, squeeze=False)[0]
    groups = scheme_groups(result)
    _decoding_panel(axes[0], result, groups)
    if curves:
        _error_panel(axes[1], result, groups)
    handles = [Line2D([], [], color=f"C{k}", lw=1.6, marker=MARKERS[k % len(MARKERS)], ms=4)
               for k in range(len(groups))]
    fig.legend(handles, [_group_label(result, m) for m in groups.values()],
               loc="outside lower center", ncols=min(len(handles), 3), fontsize=8.5,
               title="colour and marker: scheme", title_fontsize=8.5)
    fig.suptitle("co3 simulate uep analyze: exact decoding probabilities"
                 + (" and expected error" if curves else "") + "\n" + _setting(result),
                 fontsize=10)
    return fig


def write_plot(result: dict[str, Any], path: Any) -> None:
    """:func:`analysis_figure` into ``path``, which appears only when the plot is complete."""
    save_png(analysis_figure(result), path)
