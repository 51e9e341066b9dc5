"""UEP-coded back-propagation against stragglers: time-to-accuracy on mnist5k-mlp, plus the
exact decoding / error analysis of the codes with a Monte Carlo check.

    OMP_NUM_THREADS=1 python benchmarks/bench_uep.py [--steps 1500] [--seeds 0,1,2] [--out benchmarks/results]

Data flow::

    for seed in seeds, for run in RUNS (scheme, workers, deadline / wait_for):
        train_coded("mnist5k-mlp", StragglerConfig(...)) -- every dense layer's backward
        products (delta W, delta^T X) through coded_matmul, the sorted partition (rows of the
        left factor and columns of the right one by mean|.|, descending) split rxc 3x3 = 9
        blocks, classes (1, 2, 6), Gamma = (0.45, 0.35, 0.20), latencies Exp(1) --> evals
        (step, sim time, acc); the UEP schemes at T = 0.5 also with the contiguous partition
    --> uep_train.csv (one row per run and seed), uep_train.json (all, with the curves),
        uep_train_runs/<run>.csv (per-step CSV of seed 0), uep_train_T*.png (per deadline:
        loss and accuracy vs step, accuracy vs simulated time; mean over seeds)
    analysis (co3cli.simulate.uep): decode_probability for now/ew-UEP (Gamma (0.40, 0.35,
        0.25), classes 3,3,3, 30 workers) + monte_carlo check --> uep_decode.png;
        error_vs_time of every scheme of the training setting with the block energies of a
        real backward product (sorted partition; the contiguous one's class shares next to
        it) + monte_carlo check --> uep_error.png
    --> uep_train.md (tables, analysis, verdict)

Setting (the authors' training setting): K = 9 blocks (rxc 3x3 of the sorted partition, as
in the authors' coded back-propagation), class sizes (1, 2, 6),
Gamma = (0.45, 0.35, 0.20); workers: uncoded 9, repetition 18 (r = 2), mds / eep / now-uep /
ew-uep 15; worker times i.i.d. Exp(lambda = 1); deadlines T = 0.5 and 1.0 (units of 1/lambda).
Baselines with exact gradients: ``uncoded n=9 wait-all`` (wait for all 9 workers: the
honest no-coding alternative, clock += max of 9 exponentials per product) and ``mds n=15
wait=9`` (classic MDS: wait for the first K = 9 of 15, always decodable); ``exact
(autograd)`` has no straggler clock (its time is compute only) and is listed for the step axis.
SGD lr 0.1, batch 64, no momentum, the same seeds (model init, data order, straggler draws)
and steps for every run. The clock: simulated straggler time (sum over each step's coded
products of the finish time) + measured local compute time.
"""

from __future__ import annotations

import argparse
import csv
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

from co3cli.simulate.uep import (  # noqa: E402
    decode_probability, decode_probability_vs_time, error_vs_time, get_code, monte_carlo, partition)
from co3cli.simulate.uep.train import StragglerConfig, train_coded  # noqa: E402

TASK = "mnist5k-mlp"
GAMMA = (0.45, 0.35, 0.20)
CLASSES = (1, 2, 6)
WORKERS = {"uncoded": 9, "repetition": 18, "mds": 15, "eep": 15, "now-uep": 15, "ew-uep": 15}
SCHEMES = tuple(WORKERS)
DEADLINES = (0.5, 1.0)


def runs() -> list[tuple[str, StragglerConfig | None]]:
    """(name, config) of every run; the config's seed is set per seed later."""
    out: list[tuple[str, StragglerConfig | None]] = [
        ("exact (autograd)", None),
        ("uncoded n=9 wait-all", StragglerConfig("uncoded")),
        ("mds n=15 wait=9", StragglerConfig("mds", workers=15, wait_for=9)),
    ]
    for T in DEADLINES:
        for s in SCHEMES:
            out.append((f"{s} T={T:g}", StragglerConfig(s, workers=WORKERS[s], windows=GAMMA,
                                                         class_sizes=CLASSES, deadline=T)))
    for s in ("now-uep", "ew-uep"):  # the old contiguous partition, for comparison
        out.append((f"{s} T=0.5 contiguous", StragglerConfig(
            s, workers=WORKERS[s], windows=GAMMA, class_sizes=CLASSES, deadline=0.5,
            partition="contiguous")))
    return out


def with_seed(cfg: StragglerConfig | None, seed: int) -> StragglerConfig | None:
    if cfg is None:
        return None
    d = {k: getattr(cfg, k) for k in cfg.__dataclass_fields__}
    d["seed"] = seed
    return StragglerConfig(**d)


def time_to(evals: list[dict], target: float, key: str = "sim_time") -> float | None:
    hit = [e[key] for e in evals if e["test_accuracy"] >= target]
    return hit[0] if hit else None


def fmt_mean(vals: list[float | None], fmt: str = "{:.1f}") -> str:
    got = [v for v in vals if v is not None]
    if not got:
        return f"never (0/{len(vals)})"
    s = fmt.format(float(np.mean(got)))
    return s if len(got) == len(vals) else f"{s} ({len(got)}/{len(vals)})"


# ----------------------------------------------------------------------------- training


def train_all(steps: int, seeds: list[int], target: float, eval_every: int, out: Path) -> list[dict]:
    results = []
    run_dir = out / "uep_train_runs"
    run_dir.mkdir(parents=True, exist_ok=True)
    for name, cfg in runs():
        for seed in seeds:
            t0 = time.perf_counter()
            slug = name.replace(" ", "_").replace("=", "").replace("(", "").replace(")", "")
            s = train_coded(TASK, with_seed(cfg, seed), steps=steps, batch_size=64, lr=0.1,
                            seed=seed, eval_every=eval_every, target_accuracy=target,
                            out_csv=run_dir / f"{slug}.csv" if seed == seeds[0] else None)
            s["name"], s["seed"], s["run_wall_s"] = name, seed, time.perf_counter() - t0
            s["deadline"] = None if cfg is None else cfg.deadline
            results.append(s)
            print(f"{name:24s} seed {seed}: final {s['final_accuracy']:.4f} best {s['best_accuracy']:.4f} "
                  f"t->target {s['time_to_target']} ({s['run_wall_s']:.1f}s)", flush=True)
    return results


def aggregate(results: list[dict], target2: float) -> list[dict]:
    rows = []
    for name in dict.fromkeys(r["name"] for r in results):
        rs = [r for r in results if r["name"] == name]
        cr = [r["class_recovered"] for r in rs if r["class_recovered"] is not None]
        cd = [r["class_decoded"] for r in rs if r["class_decoded"] is not None]
        rows.append(dict(
            name=name, deadline=rs[0]["deadline"], seeds=len(rs),
            final=float(np.mean([r["final_accuracy"] for r in rs])),
            final_sd=float(np.std([r["final_accuracy"] for r in rs])),
            best=float(np.mean([r["best_accuracy"] for r in rs])),
            ttt=[r["time_to_target"] for r in rs],
            ttt_straggler=[r["straggler_time_to_target"] for r in rs],
            ttt_compute=[r["compute_time_to_target"] for r in rs],
            stt=[r["step_to_target"] for r in rs],
            ttt2=[time_to(r["evals"], target2) for r in rs],
            sim_per_step=float(np.mean([r["total_sim_time"] / r["steps"] for r in rs])),
            class_recovered=np.mean(cr, 0).tolist() if cr else None,
            class_decoded=np.mean(cd, 0).tolist() if cd else None,
            recovered_fraction=float(np.mean([r["recovered_fraction"] for r in rs]))
            if cr else None,
        ))
    return rows


def plot_training(results: list[dict], out: Path, target: float) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    files = []
    base = ["uncoded n=9 wait-all", "mds n=15 wait=9", "exact (autograd)"]
    for T in DEADLINES:
        fig, ax = plt.subplots(1, 3, figsize=(17, 4.8))
        names = [f"{s} T={T:g}" for s in SCHEMES] + base
        for name in names:
            rs = [r for r in results if r["name"] == name]
            steps = np.array([e["step"] for e in rs[0]["evals"]])
            acc = np.mean([[e["test_accuracy"] for e in r["evals"]] for r in rs], 0)
            sim = np.mean([[e["sim_time"] for e in r["evals"]] for r in rs], 0)
            loss = np.mean([[e["train_loss"] for e in r["evals"]] for r in rs], 0)
            ls = "--" if name in base else "-"
            ax[0].plot(steps, loss, ls, label=name)
            ax[1].plot(steps, acc, ls, label=name)
            if name != "exact (autograd)":
                ax[2].plot(sim, acc, ls, label=name)
        for a in ax[1:]:
            a.axhline(target, color="grey", lw=0.6, ls=":")
            a.set_ylim(0.0, 1.0)
        ax[0].set(xlabel="step", ylabel="train loss (at eval steps)", title="loss vs step")
        ax[1].set(xlabel="step", ylabel="test accuracy", title="accuracy vs step")
        ax[2].set(xlabel="simulated time (units of 1/lambda)", ylabel="test accuracy",
                  title=f"accuracy vs simulated time, deadline T={T:g}")
        ax[2].set_xscale("log")
        ax[1].legend(fontsize=7, loc="lower right")
        fig.suptitle(f"{TASK}: coded backprop, Exp(1) stragglers, mean over seeds")
        fig.tight_layout()
        f = out / f"uep_train_T{T:g}.png"
        fig.savefig(f, dpi=110)
        plt.close(fig)
        files.append(f.name)
    return files


# ----------------------------------------------------------------------------- analysis


def analysis(out: Path, trials: int) -> dict:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import torch.nn.functional as F

    from co3cli.tasks import build_model, load_task_data

    res: dict = {}
    # (1) decode probability, Gamma (0.40, 0.35, 0.25), classes 3,3,3, 30 workers
    g2, cs2, n2 = (0.40, 0.35, 0.25), (3, 3, 3), 30
    Ns = np.arange(n2 + 1)
    codes2 = {s: get_code(s, class_sizes=cs2, workers=n2, windows=g2) for s in ("now-uep", "ew-uep")}
    P = {s: decode_probability(c, Ns) for s, c in codes2.items()}
    mc_N = [6, 9, 12, 18]
    mc = {s: monte_carlo(c, N=mc_N, trials=trials, rng=1) for s, c in codes2.items()}
    res["decode"] = {"gamma": g2, "class_sizes": cs2, "workers": n2,
                     "P": {s: p.tolist() for s, p in P.items()},
                     "mc_N": mc_N, "mc": {s: m.decoded.tolist() for s, m in mc.items()},
                     "trials": trials}
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for s, p in P.items():
        for c in range(3):
            ax.plot(Ns, p[:, c], "-" if s == "ew-uep" else "--", color=f"C{c}", label=f"{s} class {c + 1}")
        ax.plot(mc_N, mc[s].decoded, "o" if s == "ew-uep" else "x", color="k", ms=4)
    ax.set(xlabel="N results received", ylabel="P(class decoded)",
           title="decode probability, Gamma=(0.40,0.35,0.25), classes 3,3,3, n=30 (marks: MC)")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out / "uep_decode.png", dpi=110)
    plt.close(fig)

    # (2) error vs time for every scheme of the training setting, with the block energies
    # of a real backward product: grad_W of fc2 (delta^T X) at initialisation
    model = build_model(TASK, 0)
    train, _ = load_task_data(TASK, 0.2, 0)
    acts: dict = {}

    def hook(m, i, o):
        o.retain_grad()
        acts.update(x=i[0].detach(), y=o)

    model.fc2.register_forward_hook(hook)
    F.cross_entropy(model(train.x[:64]), train.y[:64]).backward()
    A, B = acts["y"].grad.T.double().numpy(), acts["x"].double().numpy()
    part = partition(A, B, mode="rxc", blocks=(3, 3))
    energies = part.energies()
    e_cont = partition(A, B, mode="rxc", blocks=(3, 3), partition="contiguous").energies()
    times = np.linspace(0.02, 4.0, 100)
    mc_t = [0.5, 1.0, 2.0]
    codes = {s: StragglerConfig(s, workers=WORKERS[s], windows=GAMMA, class_sizes=CLASSES).code()
             for s in SCHEMES}
    err = {s: error_vs_time(c, energies, times) for s, c in codes.items()}
    err_at = {s: error_vs_time(c, energies, mc_t).tolist() for s, c in codes.items()}
    mc2 = {s: monte_carlo(c, times=mc_t, trials=trials, rng=2, A=A, B=B, blocks=(3, 3))
           for s, c in codes.items()}
    pdec = {s: {f"{T:g}": decode_probability_vs_time(c, [T])[0].tolist() for T in DEADLINES}
            for s, c in codes.items()}
    res["error"] = {"product": "fc2 grad_W (delta^T X) at init, batch 64",
                    "class_energy_share": (np.add.reduceat(energies, [0, 1, 3]) / energies.sum()).tolist(),
                    "class_energy_share_contiguous": (np.add.reduceat(e_cont, [0, 1, 3]) / e_cont.sum()).tolist(),
                    "exact_contiguous": {s: error_vs_time(c, e_cont, mc_t).tolist() for s, c in codes.items()},
                    "times": mc_t, "exact": err_at,
                    "mc_mean": {s: m.error_mean.tolist() for s, m in mc2.items()},
                    "mc_sem": {s: m.error_sem.tolist() for s, m in mc2.items()},
                    "p_decoded_at_T": pdec}
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for i, (s, e) in enumerate(err.items()):
        ax.plot(times, e, color=f"C{i}", label=f"{s} (n={WORKERS[s]})")
        ax.errorbar(mc_t, mc2[s].error_mean, yerr=2 * mc2[s].error_sem, fmt="o", color=f"C{i}", ms=3)
    for T in DEADLINES:
        ax.axvline(T, color="grey", lw=0.6, ls=":")
    ax.set(xlabel="deadline t (units of 1/lambda)", ylabel="E ||C - C_hat||^2 / ||C||^2",
           title="error vs time, K=9 (1,2,6), energies of fc2 grad_W (dots: MC)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out / "uep_error.png", dpi=110)
    plt.close(fig)
    return res


# ----------------------------------------------------------------------------- report


def write_md(out: Path, rows: list[dict], an: dict, meta: dict, figs: list[str]) -> None:
    tgt, tgt2 = meta["target"], meta["target2"]
    L = []
    L.append("# UEP-coded back-propagation against stragglers (mnist5k-mlp)\n")
    L.append(f"Generated by `benchmarks/bench_uep.py` on {meta['date']} ({meta['machine']}, "
             f"{meta['threads']} torch thread); {meta['bench_s']:.0f} s in all.\n")
    L.append("## Setting\n")
    L.append(f"- Task `{TASK}` (MLP 784-128-64-10), SGD lr {meta['lr']}, batch {meta['batch']}, "
             f"{meta['steps']} steps, test accuracy every {meta['eval_every']} steps, seeds "
             f"{meta['seeds']} (the same for every run: model init, data order, straggler draws); "
             "table entries are means over the seeds.")
    L.append("- Every dense layer's two backward products (grad_input = delta W, grad_W = "
             "delta^T X; fc1's grad_input is not needed and not computed) go through "
             "`coded_matmul` with the authors' sorted partition: the rows of the left factor "
             "and the columns of the right one ordered by mean|.| (descending), split uniformly "
             "into rxc 3x3 = 9 blocks (the top-left block = largest rows x largest columns; "
             "the product is un-permuted afterwards), ranked by Frobenius importance into "
             "classes of 1, 2 and 6 blocks (`... contiguous` rows: blocks in the original "
             "order, as before this change), Gamma = (0.45, 0.35, 0.20); workers: uncoded 9, repetition 18 "
             "(r = 2), mds/eep/now-uep/ew-uep 15; worker times i.i.d. Exp(lambda = 1). Lost "
             "blocks are zero in the gradient. Forward and bias gradients are exact. 5 coded "
             "products per step.")
    L.append("- Simulated clock = sum over each step's coded products of the finish time (the "
             "deadline T, or the last needed arrival if earlier) + the measured local compute "
             "time (about 1 ms per step, negligible against 1/lambda = 1). Time is in units of "
             "1/lambda.")
    L.append(f"- Target accuracy {tgt:.0%} (the exact run reaches it at step "
             f"{meta['exact_step_to_target']}); also the time to {tgt2:.0%}.")
    L.append("- Exact-gradient baselines: `uncoded n=9 wait-all` (wait for every one of 9 "
             "workers: max of 9 Exp(1), mean 2.83 per product), `mds n=15 wait=9` (wait for "
             "the first 9 of 15 and decode: mean 0.87 per product); `exact (autograd)` has no "
             "straggler clock (its times are compute only) and is the step-axis reference.\n")
    L.append("## Results\n")
    L.append(f"| run | deadline | final acc | best acc | sim time to {tgt:.0%} | step to {tgt:.0%} "
             f"| compute wall to {tgt:.0%} (s) | sim time to {tgt2:.0%} | sim time / step "
             "| blocks recovered per class (1, 2, 6 blocks) | classes decoded |")
    L.append("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        cr = "-" if r["class_recovered"] is None else " / ".join(f"{v:.2f}" for v in r["class_recovered"])
        cd = "-" if r["class_decoded"] is None else " / ".join(f"{v:.2f}" for v in r["class_decoded"])
        noclock = r["name"] == "exact (autograd)"
        L.append(f"| {r['name']} | {'-' if r['deadline'] is None else r['deadline']} "
                 f"| {r['final']:.4f} ± {r['final_sd']:.4f} | {r['best']:.4f} "
                 f"| {'(no clock)' if noclock else fmt_mean(r['ttt'])} | {fmt_mean(r['stt'], '{:.0f}')} "
                 f"| {fmt_mean(r['ttt_compute'], '{:.2f}')} "
                 f"| {'(no clock)' if noclock else fmt_mean(r['ttt2'])} | {r['sim_per_step']:.3f} | {cr} | {cd} |")
    L.append("\n`(k/n)`: reached by only k of the n seeds (mean over those); `never`: no seed "
             "reached it within the steps. Blocks recovered: mean fraction of each class's "
             "blocks recovered per coded product; classes decoded: fraction of products with "
             "the whole class recovered.\n")
    for f in figs:
        L.append(f"![{f}]({f})\n")

    # verdict
    L.append("## Does UEP beat the others?\n")
    by = {r["name"]: r for r in rows}

    def key(r: dict) -> tuple:
        got = [v for v in r["ttt"] if v is not None]
        return (-len(got), float(np.mean(got)) if got else math.inf, -r["final"])

    for T in DEADLINES:
        cand = [by[f"{s} T={T:g}"] for s in SCHEMES]
        ranked = sorted(cand, key=key)
        best_acc = max(cand, key=lambda r: r["final"])
        L.append(f"- **T = {T:g}**: ranking by time to {tgt:.0%} (seeds reaching it first): "
                 + ", ".join(f"{r['name'].split()[0]} ({fmt_mean(r['ttt'])})" for r in ranked)
                 + f". Highest final accuracy: {best_acc['name'].split()[0]} ({best_acc['final']:.4f}).")
    ex = [by["uncoded n=9 wait-all"], by["mds n=15 wait=9"]]
    L.append("- Exact-gradient baselines: " + ", ".join(
        f"{r['name']} reaches {tgt:.0%} at sim time {fmt_mean(r['ttt'])}, final {r['final']:.4f}" for r in ex) + ".")
    uep_best = min((by[f"{s} T={T:g}"] for s in ("now-uep", "ew-uep") for T in DEADLINES), key=key)
    other_best = min([by[f"{s} T={T:g}"] for s in SCHEMES if "uep" not in s for T in DEADLINES] + ex, key=key)
    won = key(uep_best) < key(other_best)
    L.append(f"- Best UEP run: {uep_best['name']} ({fmt_mean(uep_best['ttt'])}, final "
             f"{uep_best['final']:.4f}); best non-UEP run: {other_best['name']} "
             f"({fmt_mean(other_best['ttt'])}, final {other_best['final']:.4f}). "
             + ("**UEP wins** on time to target in this setting."
                if won else "**UEP does not win** on time to target in this setting."))
    L.append("")
    L.append(meta["discussion"].format(**meta["numbers"]))
    L.append("")

    # analysis
    d = an["decode"]
    L.append("## Analysis: exact decoding probability (Gamma = (0.40, 0.35, 0.25), classes 3, 3, 3, n = 30)\n")
    L.append("P_{d,c}(N) = P(class c decoded | N of the 30 results received) from "
             "`decode_probability` (exact), with a Monte Carlo check (`monte_carlo`, real "
             f"encoder/decoder, {d['trials']} trials) at a few N.\n")
    L.append("| N | now-uep c1 | c2 | c3 | ew-uep c1 | c2 | c3 | MC now-uep | MC ew-uep |")
    L.append("|---|---|---|---|---|---|---|---|---|")
    for N in (3, 6, 9, 12, 15, 18, 21, 25, 30):
        pn, pe = d["P"]["now-uep"][N], d["P"]["ew-uep"][N]
        mcn = mce = ""
        if N in d["mc_N"]:
            i = d["mc_N"].index(N)
            mcn = " / ".join(f"{v:.3f}" for v in d["mc"]["now-uep"][i])
            mce = " / ".join(f"{v:.3f}" for v in d["mc"]["ew-uep"][i])
        L.append(f"| {N} | " + " | ".join(f"{v:.3f}" for v in pn) + " | "
                 + " | ".join(f"{v:.3f}" for v in pe) + f" | {mcn} | {mce} |")
    L.append("\n![uep_decode.png](uep_decode.png)\n")
    e = an["error"]
    L.append("## Analysis: error vs deadline, training setting (K = 9, classes 1, 2, 6)\n")
    L.append(f"Expected normalised error E||C - C_hat||^2/||C||^2 from `error_vs_time` with the "
             f"block energies of a real product ({e['product']}, sorted partition; energy "
             "share of the classes " + " / ".join(f"{v:.2f}" for v in e["class_energy_share"])
             + ", against " + " / ".join(f"{v:.2f}" for v in e["class_energy_share_contiguous"])
             + " with contiguous blocks; exact error of the contiguous split at t = "
             + ", ".join(f"{t:g}" for t in e["times"]) + ": now-uep "
             + " / ".join(f"{v:.3f}" for v in e["exact_contiguous"]["now-uep"]) + ", ew-uep "
             + " / ".join(f"{v:.3f}" for v in e["exact_contiguous"]["ew-uep"])
             + f"), Monte Carlo mean ± s.e.m. on the same product ({d['trials']} trials), and the exact "
             "P(class decoded by T) from `decode_probability_vs_time` (compare with the "
             "'classes decoded' column measured in training).\n")
    L.append("| scheme | n | " + " | ".join(f"err t={t:g} exact / MC" for t in e["times"])
             + " | " + " | ".join(f"P(decoded by {T:g}) c1/c2/c3" for T in DEADLINES) + " |")
    L.append("|---|---|" + "---|" * (len(e["times"]) + len(DEADLINES)))
    for s in SCHEMES:
        cells = [f"{x:.3f} / {m:.3f} ± {se:.3f}" for x, m, se in
                 zip(e["exact"][s], e["mc_mean"][s], e["mc_sem"][s])]
        pd = [" / ".join(f"{v:.2f}" for v in e["p_decoded_at_T"][s][f"{T:g}"]) for T in DEADLINES]
        L.append(f"| {s} | {WORKERS[s]} | " + " | ".join(cells) + " | " + " | ".join(pd) + " |")
    L.append("\n![uep_error.png](uep_error.png)\n")
    L.append("Files: `uep_train.csv` (one row per run and seed), `uep_train.json` (everything, "
             "with the evaluation curves and the analysis), `uep_train_runs/*.csv` (per-step "
             "CSV of the first seed: loss, accuracy, compute/straggler/simulated time, "
             "recovered fractions).\n")
    (out / "uep_train.md").write_text("\n".join(L))


DISCUSSION = """Mechanism. With classes of 1, 2 and 6 blocks and Gamma = (0.45, 0.35, 0.20), a
15-worker UEP code sends on average 15 x 0.20 = 3 equations into the only window that covers
the 6-block class (now-uep: window 3 alone holds class 3; ew-uep: class 3 needs >= 6 results
from window 3, the only one that contains it). So even when all 15 workers return, class 3 is
decoded with probability {p_all_now:.3f} (now-uep) / {p_all_ew:.3f} (ew-uep), and by T = 0.5 or
1.0 essentially never: every UEP gradient product keeps only its 3 most important of 9 blocks.
With the authors' sorted partition those are the largest rows x largest columns: on a real fc2
grad_W product at initialisation the 6-block class holds {share3:.2f} of the energy (contiguous
blocks: {share3c:.2f}) and the exact expected lost energy at T = 1 is {err1_ew:.3f} for ew-uep
(contiguous: {err1_ewc:.3f}; uncoded {err1_unc:.3f}, repetition {err1_rep:.3f}, mds/eep
{err1_mds:.3f}). grad_input = delta W gains less, early in training above all
(`uep_split.md`: its rows are the batch's samples, alike at initialisation, and its columns
W's, nearly flat), and the losses compound down the layers (each layer's coded grad_input is
the delta of the next coded product), so UEP at T = 0.5 still needs {steps_ratio:.1f}x the
exact run's steps to reach the target (the contiguous partition: {steps_ratio_c:.1f}x). It pays
T per product; waiting for the first 9 of 15 mds results costs 0.87 on average and gives the
exact gradient; MDS/EEP at a deadline decode all or nothing (>= 9 of 15 results by T:
probability 0.09 at T = 0.5, 0.71 at T = 1.0); uncoded and repetition lose blocks
independently, and repetition uses 18 workers against 15. `uep_regime.md` varies the deadline,
the shift of the latencies and the number of workers."""




def steps_ratio(rows: list[dict], name: str) -> float:
    """Mean step to target of run ``name`` over the exact run's (nan if either never gets there)."""
    by = {r["name"]: r for r in rows}
    a, b = ([v for v in by[k]["stt"] if v is not None] for k in (name, "exact (autograd)"))
    return float(np.mean(a) / np.mean(b)) if a and b else math.nan


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=1500)
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--target", type=float, default=0.85)
    ap.add_argument("--target2", type=float, default=0.80)
    ap.add_argument("--eval-every", type=int, default=25)
    ap.add_argument("--trials", type=int, default=2000, help="Monte Carlo trials per point")
    ap.add_argument("--out", default=str(Path(__file__).resolve().parent / "results"))
    a = ap.parse_args(argv)
    import torch

    torch.set_num_threads(1)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    seeds = [int(s) for s in a.seeds.split(",") if s.strip()]
    t0 = time.perf_counter()
    results = train_all(a.steps, seeds, a.target, a.eval_every, out)
    rows = aggregate(results, a.target2)
    figs = plot_training(results, out, a.target)
    an = analysis(out, a.trials)
    ex = next(r for r in rows if r["name"] == "exact (autograd)")
    meta = dict(date=_dt.date.today().isoformat(), machine=f"{platform.machine()}, {os.cpu_count()} cores",
                threads=1, steps=a.steps, seeds=seeds, target=a.target, target2=a.target2,
                eval_every=a.eval_every, lr=0.1, batch=64, exact_step_to_target=fmt_mean(ex["stt"], "{:.0f}"),
                bench_s=time.perf_counter() - t0, discussion=DISCUSSION,
                numbers=dict(share3=an["error"]["class_energy_share"][2],
                             share3c=an["error"]["class_energy_share_contiguous"][2],
                             err1_ew=an["error"]["exact"]["ew-uep"][1],
                             err1_ewc=an["error"]["exact_contiguous"]["ew-uep"][1],
                             err1_unc=an["error"]["exact"]["uncoded"][1],
                             err1_rep=an["error"]["exact"]["repetition"][1],
                             err1_mds=an["error"]["exact"]["mds"][1],
                             steps_ratio=steps_ratio(rows, "ew-uep T=0.5"),
                             steps_ratio_c=steps_ratio(rows, "ew-uep T=0.5 contiguous"),
                             **{f"p_all_{s.split('-')[0]}": float(decode_probability(StragglerConfig(
                                 s, workers=15, windows=GAMMA, class_sizes=CLASSES).code(), 15)[2])
                                for s in ("now-uep", "ew-uep")}))
    with open(out / "uep_train.csv", "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["run", "seed", "deadline", "final_accuracy", "best_accuracy", "time_to_target",
                    "straggler_time_to_target", "compute_time_to_target", "step_to_target",
                    "total_sim_time", "recovered_fraction", "class_recovered", "class_decoded"])
        for r in results:
            w.writerow([r["name"], r["seed"], r["deadline"], r["final_accuracy"], r["best_accuracy"],
                        r["time_to_target"], r["straggler_time_to_target"], r["compute_time_to_target"],
                        r["step_to_target"], r["total_sim_time"], r["recovered_fraction"],
                        "" if r["class_recovered"] is None else ";".join(f"{v:.4f}" for v in r["class_recovered"]),
                        "" if r["class_decoded"] is None else ";".join(f"{v:.4f}" for v in r["class_decoded"])])
    (out / "uep_train.json").write_text(json.dumps(
        {"meta": {k: v for k, v in meta.items() if k not in ("discussion",)},
         "summary": rows,
         "runs": results, "analysis": an}, indent=1, default=float))
    write_md(out, rows, an, meta, figs)
    print(f"wrote {out / 'uep_train.md'} ({time.perf_counter() - t0:.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
