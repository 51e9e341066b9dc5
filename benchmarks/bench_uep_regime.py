"""Where does UEP-coded back-propagation win? Time to accuracy over deadlines, latency shifts
and numbers of workers, against the exact-gradient baselines and equal protection.

    OMP_NUM_THREADS=1 python benchmarks/bench_uep_regime.py [--seeds 0,1,2] [--steps 1500]
        [--regimes 0:15,0:30,0.5:15] [--deadlines 0.25,0.5,1] [--out benchmarks/results]

Data flow::

    for (shift, n) in regimes (latency shift, workers of the coded schemes):
        baselines (exact gradients): uncoded n=9 wait-all, mds n wait=9
        for t in deadlines (deadline T = shift + t, i.e. t after the earliest possible result):
            ew-uep n (UEP), eep n (equal protection), uncoded n=9 (no coding), all at T
            (now-uep is within a few per cent of ew-uep in bench_uep.py; left out for time)
        train_coded("mnist5k-mlp", StragglerConfig(..., shift=shift)) for each seed
        --> simulated time to the target accuracy (mean over the seeds that reach it)
    --> uep_regime.md (table + verdict per regime), uep_regime.json, uep_regime.png (time to
        target vs t, one panel per (shift, n), baselines as horizontal lines)

Setting as ``bench_uep.py`` (sorted rxc 3x3 partition, classes 1, 2, 6, Gamma = (0.45, 0.35,
0.20), SGD lr 0.1, batch 64, worker times shift + Exp(1), clock = the finish times of the 5
coded products per step + local compute), except that the shift, the number of workers of the
coded schemes and the deadlines vary. Uncoded always has 9 workers (one per block).
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import math
import os
import platform
import sys
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from co3cli.simulate.uep.train import StragglerConfig, train_coded  # noqa: E402

TASK = "mnist5k-mlp"
GAMMA = (0.45, 0.35, 0.20)
CLASSES = (1, 2, 6)
AT_T = ("ew-uep", "eep", "uncoded")  # schemes run at each deadline


def runs(shift: float, n: int, deadlines: list[float]) -> list[tuple[str, StragglerConfig]]:
    lat = dict(shift=shift)
    out = [("uncoded n=9 wait-all", StragglerConfig("uncoded", **lat)),
           (f"mds n={n} wait=9", StragglerConfig("mds", workers=n, wait_for=9, **lat))]
    for t in deadlines:
        for s in AT_T:
            w = None if s == "uncoded" else n
            out.append((f"{s} t={t:g}", StragglerConfig(s, workers=w, windows=GAMMA,
                                                        class_sizes=CLASSES, deadline=shift + t, **lat)))
    return out


def ttt(res: list[dict]) -> tuple[float | None, int]:
    got = [r["time_to_target"] for r in res if r["time_to_target"] is not None]
    return (float(np.mean(got)) if got else None), len(got)


def plot(rows: list[dict], out: Path, target: float, deadlines: list[float]) -> str:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from matplotlib.ticker import NullFormatter

    keys = list(dict.fromkeys((r["shift"], r["n"]) for r in rows))
    allv = [r["ttt"] for r in rows if r["ttt"] is not None]
    fig, axes = plt.subplots(1, len(keys), figsize=(4.6 * len(keys), 4.4), squeeze=False)
    styles = {"ew-uep": ("C0", "o", "-"), "eep": ("C2", "^", "--"), "uncoded": ("C3", "v", "--")}
    for ax, (shift, n) in zip(axes[0], keys):
        sub = {r["name"]: r for r in rows if (r["shift"], r["n"]) == (shift, n)}
        got: list[float] = []
        for s, (col, mk, ls) in styles.items():
            xs = [t for t in deadlines if sub[f"{s} t={t:g}"]["ttt"] is not None]
            ys = [sub[f"{s} t={t:g}"]["ttt"] for t in xs]
            lab = f"{s} ({'9 workers' if s == 'uncoded' else 'n coded workers'}) at the deadline"
            ax.plot(xs, ys, ls, color=col, marker=mk, label=lab)
            got += ys
        for name, col, lab in ((f"mds n={n} wait=9", "k", "mds, wait for 9 of n (exact gradients)"),
                               ("uncoded n=9 wait-all", "grey", "uncoded, wait for all 9 (exact gradients)")):
            v = sub[name]["ttt"]
            if v is not None:
                ax.axhline(v, color=col, ls=":", lw=1.5, label=lab)
                got.append(v)
        ax.set_xscale("log")
        ax.set_xlim(min(deadlines) / 1.25, max(deadlines) * 1.25)
        if got:  # one y range for every panel, so that the panels compare
            ax.set_ylim(0, max(allv) * 1.08)
        else:
            ax.text(0.5, 0.5, "no run reached the target", ha="center", transform=ax.transAxes)
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.set_xticks(deadlines)
        ax.set_xticklabels([f"{t:g}" for t in deadlines])
        ax.set(xlabel="deadline minus shift, t (units of 1/λ)",
               title=f"latency shift {shift:g} + Exp(1), n = {n} coded workers")
        ax.grid(True, which="both", alpha=0.3)
    axes[0][0].set_ylabel(f"simulated time to {target:.0%} (units of 1/λ)")
    h, lab = axes[0][0].get_legend_handles_labels()
    fig.legend(h, lab, loc="lower center", ncol=3, fontsize=9, frameon=False)
    fig.suptitle(f"{TASK}, coded back-propagation: simulated time to {target:.0%} test accuracy "
                 "(lower is better; mean over seeds; no point = not reached)", fontsize=11)
    fig.tight_layout(rect=(0, 0.14, 1, 1))
    f = out / "uep_regime.png"
    fig.savefig(f, dpi=110)
    plt.close(fig)
    return f.name


def write_md(out: Path, rows: list[dict], meta: dict, fig: str) -> None:
    tgt = meta["target"]
    L = ["# Where does UEP-coded back-propagation win? (mnist5k-mlp)\n",
         f"Generated by `benchmarks/bench_uep_regime.py --seeds {','.join(map(str, meta['seeds']))} "
         f"--steps {meta['steps']}` on {meta['date']} ({meta['machine']}, 1 torch thread); "
         f"{meta['bench_s']:.0f} s.\n",
         "Setting of `uep_train.md` (sorted rxc 3x3 partition, classes 1, 2, 6, Gamma = (0.45, "
         "0.35, 0.20), SGD lr 0.1, batch 64) with worker times shift + Exp(1), the deadline "
         "T = shift + t, and n workers for the coded schemes (uncoded: 9). Entries: simulated "
         f"time to {tgt:.0%} test accuracy, mean over the seeds that reach it within "
         f"{meta['steps']} steps ((k/{len(meta['seeds'])}): only k seeds did; never: none).\n"]
    keys = list(dict.fromkeys((r["shift"], r["n"]) for r in rows))
    names = list(dict.fromkeys(r["name"] for r in rows if (r["shift"], r["n"]) == keys[0]))
    L.append("| run | " + " | ".join(f"shift {s:g}, n={n}" for s, n in keys) + " |")
    L.append("|---|" + "---:|" * len(keys))

    def cell(r: dict) -> str:
        if r["ttt"] is None:
            return "never"
        k = "" if r["reached"] == len(meta["seeds"]) else f" ({r['reached']}/{len(meta['seeds'])})"
        return f"{r['ttt']:.0f}{k}"

    for nm in names:
        cells = []
        for s, n in keys:
            nm_k = nm if not nm.startswith("mds n=") else f"mds n={n} wait=9"
            r = next(x for x in rows if (x["shift"], x["n"]) == (s, n) and x["name"] == nm_k)
            cells.append(cell(r))
        L.append(f"| {nm if not nm.startswith('mds n=') else 'mds n (coded workers) wait=9'} | "
                 + " | ".join(cells) + " |")
    L.append("\n## Verdict per regime\n")

    def best(rs: list[dict]) -> dict | None:
        ok = [r for r in rs if r["ttt"] is not None and r["reached"] == len(meta["seeds"])]
        return min(ok, key=lambda r: r["ttt"]) if ok else None

    for s, n in keys:
        sub = [r for r in rows if (r["shift"], r["n"]) == (s, n)]
        u = best([r for r in sub if "uep" in r["name"]])
        eq = best([r for r in sub if r["name"].split()[0] in ("eep", "uncoded") and " t=" in r["name"]])
        ex = best([r for r in sub if "wait" in r["name"]])
        parts = [f"- shift {s:g}, n = {n}: best UEP {u['name']} ({u['ttt']:.0f})" if u else
                 f"- shift {s:g}, n = {n}: no UEP run reaches {tgt:.0%} on every seed"]
        if eq:
            parts.append(f"best equal-protection/uncoded at a deadline {eq['name']} ({eq['ttt']:.0f})")
        if ex:
            parts.append(f"best exact-gradient baseline {ex['name']} ({ex['ttt']:.0f})")
        win_eq = u is not None and (eq is None or u["ttt"] < eq["ttt"])
        win_ex = u is not None and (ex is None or u["ttt"] < ex["ttt"])
        parts.append("UEP beats the deadline schemes" + (" and" if win_ex else ", but not")
                     + " the exact-gradient baselines" if win_eq else
                     "UEP does not beat the deadline schemes"
                     + (" (but beats the exact-gradient baselines)" if win_ex else ""))
        L.append("; ".join(parts) + ".")
    L.append(f"\n![{fig}]({fig})\n")
    L.append(meta["discussion"])
    (out / "uep_regime.md").write_text("\n".join(L) + "\n")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=1500)
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--regimes", default="0:15,0:30,0.5:15", help="shift:workers, comma-separated")
    ap.add_argument("--deadlines", default="0.25,0.5,1")
    ap.add_argument("--target", type=float, default=0.85)
    ap.add_argument("--discussion", default="", help="Text appended to the md (the findings).")
    ap.add_argument("--render", action="store_true", help="No training: rewrite the md and the "
                    "plot from OUT/uep_regime.json (e.g. with a new --discussion).")
    ap.add_argument("--out", default=str(Path(__file__).resolve().parent / "results"))
    a = ap.parse_args(argv)
    import torch

    torch.set_num_threads(1)
    out = Path(a.out)
    if a.render:
        doc = json.loads((out / "uep_regime.json").read_text())
        meta = doc["meta"] | {"discussion": a.discussion or doc["meta"]["discussion"]}
        (out / "uep_regime.json").write_text(json.dumps({"meta": meta, "rows": doc["rows"]}, indent=1))
        write_md(out, doc["rows"], meta, plot(doc["rows"], out, meta["target"], meta["deadlines"]))
        print(f"rewrote {out / 'uep_regime.md'}")
        return 0
    t0 = time.perf_counter()
    seeds = [int(s) for s in a.seeds.split(",")]
    deadlines = [float(t) for t in a.deadlines.split(",")]
    rows = []
    regimes = [(float(r.split(":")[0]), int(r.split(":")[1])) for r in a.regimes.split(",")]
    done: dict[str, list[dict]] = {}  # uncoded has 9 workers whatever n: run each config once
    for shift, n in regimes:
        for name, cfg in runs(shift, n, deadlines):
            key = json.dumps(cfg.to_dict(), sort_keys=True)
            if key not in done:
                done[key] = []
                for seed in seeds:
                    d = {k: getattr(cfg, k) for k in cfg.__dataclass_fields__} | {"seed": seed}
                    done[key].append(train_coded(TASK, StragglerConfig(**d), steps=a.steps,
                                                 batch_size=64, lr=0.1, seed=seed, eval_every=25,
                                                 target_accuracy=a.target))
            res = done[key]
            v, k = ttt(res)
            rows.append(dict(shift=shift, n=n, name=name, ttt=v, reached=k,
                             per_seed=[r["time_to_target"] for r in res],
                             final=float(np.mean([r["final_accuracy"] for r in res])),
                             sim_per_step=float(np.mean([r["total_sim_time"] / r["steps"] for r in res]))))
            print(f"shift {shift:g} n {n} {name:22s} ttt {v} ({k}/{len(seeds)})", flush=True)
    out.mkdir(parents=True, exist_ok=True)
    meta = dict(date=_dt.date.today().isoformat(), machine=f"{platform.machine()}, {os.cpu_count()} cores",
                steps=a.steps, seeds=seeds, target=a.target, deadlines=deadlines,
                bench_s=time.perf_counter() - t0, discussion=a.discussion)
    fig = plot(rows, out, a.target, deadlines)
    (out / "uep_regime.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    write_md(out, rows, meta, fig)
    print(f"wrote {out / 'uep_regime.md'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
