"""How the split of a backward product into UEP classes protects its energy: real products of
mnist5k-mlp, every partition scheme, the exact expected lost energy of every code.

    OMP_NUM_THREADS=1 python benchmarks/bench_uep_split.py [--snapshots 0,200,1000] [--out benchmarks/results]

Data flow::

    exact SGD on mnist5k-mlp (batch 64, lr 0.1, seed 0); at each snapshot step, hooks on every
    nn.Linear capture delta = dL/dy, the input X and W --> the backward products
        grad_W = delta^T X (fc1, fc2, fc3),  grad_input = delta W (fc2, fc3)
    for each split (rxc 3x3 contiguous / sorted by mean|.| / sorted by L2;
                    cxr P = 9 contiguous / sorted by mean|.| / sorted by L2):
        partition(...) --> block energies in class order (classes of 1, 2, 6 blocks)
        --> energy share per class; error_vs_time(code, energies, T = 0.5, 1) for uncoded 9,
            repetition 18, mds / eep / now-uep / ew-uep 15 workers, Exp(1) latencies
        cxr: the summands are not orthogonal, so the diagonal formula is checked by a Monte
            Carlo of the real decoder (ew-uep, uncoded) on the same product
    diagnosis: how much of C's energy the top third of rows / columns holds when sorted by
        the statistic, next to the most any third can hold (sorted by the true energy)
    --> uep_split.md, uep_split.json (means over the snapshots; per-product values in the json)
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import platform
import sys
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from co3cli.simulate.uep import error_vs_time, monte_carlo, partition  # noqa: E402
from co3cli.simulate.uep.train import StragglerConfig  # noqa: E402

TASK = "mnist5k-mlp"
GAMMA = (0.45, 0.35, 0.20)
CLASSES = (1, 2, 6)
WORKERS = {"uncoded": 9, "repetition": 18, "mds": 15, "eep": 15, "now-uep": 15, "ew-uep": 15}
TIMES = (0.5, 1.0)
SPLITS = {  # name -> partition() arguments
    "rxc contiguous": dict(mode="rxc", blocks=(3, 3), partition="contiguous"),
    "rxc sorted mean|.|": dict(mode="rxc", blocks=(3, 3), partition="sorted", sort_by="mean-abs"),
    "rxc sorted L2": dict(mode="rxc", blocks=(3, 3), partition="sorted", sort_by="l2"),
    "cxr contiguous": dict(mode="cxr", blocks=9, partition="contiguous"),
    "cxr sorted mean|.|": dict(mode="cxr", blocks=9, partition="sorted", sort_by="mean-abs"),
    "cxr sorted L2": dict(mode="cxr", blocks=9, partition="sorted", sort_by="l2"),
}


def capture(snapshots: list[int]) -> list[dict]:
    """The backward products' factors at each snapshot step of exact SGD."""
    import torch
    import torch.nn.functional as F

    from co3cli.tasks import TorchThreads, build_model, epoch_batches, load_task_data

    out = []
    with TorchThreads(1):
        train, _ = load_task_data(TASK, 0.2, 0)
        model = build_model(TASK, 0)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        gen = torch.Generator().manual_seed(0)
        acts: dict = {}
        names = [n for n, m in model.named_modules() if isinstance(m, torch.nn.Linear)]
        for n in names:
            def hook(m, i, o, n=n):
                o.retain_grad()
                acts[n] = (i[0].detach(), o)
            getattr(model, n).register_forward_hook(hook)

        def batches():
            while True:
                yield from epoch_batches(train, 64, gen)

        it = batches()
        for step in range(max(snapshots) + 1):
            x, y = next(it)
            opt.zero_grad(set_to_none=True)
            F.cross_entropy(model(x), y).backward()
            if step in snapshots:
                for i, n in enumerate(names):
                    X, o = acts[n]
                    d = o.grad.double().numpy()
                    W = getattr(model, n).weight.detach().double().numpy()
                    out.append(dict(step=step, layer=n, product="grad_W", A=d.T, B=X.double().numpy()))
                    if i > 0:  # fc1's grad_input is not needed
                        out.append(dict(step=step, layer=n, product="grad_input", A=d, B=W))
            opt.step()
    return out


def third_share(C: np.ndarray, score: np.ndarray, axis: int) -> float:
    """Energy share of C in the third of its rows (axis 1) / columns (axis 0) with the largest
    ``score``."""
    e = (C * C).sum(axis)
    top = np.argsort(-score, kind="stable")[: -(-len(e) // 3)]
    return float(e[top].sum() / e.sum())


def diagnose(A: np.ndarray, B: np.ndarray) -> dict:
    C = A @ B
    er, ec = (C * C).sum(1), (C * C).sum(0)
    return {
        "rows_by_mean_abs": third_share(C, np.abs(A).mean(1), 1),
        "rows_by_l2": third_share(C, np.linalg.norm(A, axis=1), 1),
        "rows_best": third_share(C, er, 1),
        "cols_by_mean_abs": third_share(C, np.abs(B).mean(0), 0),
        "cols_by_l2": third_share(C, np.linalg.norm(B, axis=0), 0),
        "cols_best": third_share(C, ec, 0),
        "rows_cv": float(er.std() / er.mean()), "cols_cv": float(ec.std() / ec.mean()),
    }


def evaluate(prod: dict, codes: dict, mc_trials: int) -> dict:
    res = {}
    for name, kw in SPLITS.items():
        part = partition(prod["A"], prod["B"], **kw)
        e = part.energies()
        share = np.add.reduceat(e, [0, 1, 3]) / e.sum()
        lost = {s: error_vs_time(c, e, TIMES).tolist() for s, c in codes.items()}
        r = {"share": share.tolist(), "lost": lost}
        if kw["mode"] == "cxr" and mc_trials:
            r["mc"] = {s: monte_carlo(codes[s], times=TIMES, trials=mc_trials, rng=3, A=prod["A"],
                                      B=prod["B"], **kw).error_mean.tolist()
                       for s in ("ew-uep", "uncoded")}
        res[name] = r
    res["diagnosis"] = diagnose(prod["A"], prod["B"])
    return res


def write_md(out: Path, per: list[dict], meta: dict) -> None:
    L = ["# How the split protects a backward product's energy (mnist5k-mlp)\n",
         f"Generated by `benchmarks/bench_uep_split.py` on {meta['date']} ({meta['machine']}); "
         f"{meta['bench_s']:.0f} s.\n",
         f"Real backward products of `{TASK}` (MLP 784-128-64-10) during exact SGD (batch 64, lr "
         f"0.1, seed 0) at steps {meta['snapshots']}: grad_W = delta^T X of fc1, fc2, fc3 and "
         "grad_input = delta W of fc2, fc3 (fc1's is never computed). Classes of 1, 2, 6 blocks "
         "(rxc 3x3 or cxr P = 9), blocks ranked by Frobenius importance; the expected lost "
         "energy E||C - C_hat||^2/||C||^2 at deadline T is `error_vs_time` (exact) with Exp(1) "
         "workers: uncoded 9, repetition 18, mds/eep/now-uep/ew-uep 15, Gamma = (0.45, 0.35, "
         "0.20). Means over the snapshots and layers of each product type.\n"]
    for prod in ("grad_W", "grad_input"):
        rows = [p for p in per if p["product"] == prod]
        L.append(f"## {prod} ({', '.join(dict.fromkeys(r['layer'] for r in rows))}; "
                 f"{len(rows)} products)\n")
        L.append("| split | energy share class 1 / 2 / 3 | " + " | ".join(
            f"lost at T={T:g}: " + " / ".join(WORKERS) for T in TIMES) + " |")
        L.append("|---|---|---|---|")
        for name in SPLITS:
            sh = np.mean([r["eval"][name]["share"] for r in rows], 0)
            cells = []
            for i, _ in enumerate(TIMES):
                cells.append(" / ".join(f"{np.mean([r['eval'][name]['lost'][s][i] for r in rows]):.3f}"
                                        for s in WORKERS))
            L.append(f"| {name} | " + " / ".join(f"{v:.3f}" for v in sh) + " | " + " | ".join(cells) + " |")
        mc = [(name, s, i, np.mean([r["eval"][name]["mc"][s][i] for r in rows]),
               np.mean([r["eval"][name]["lost"][s][i] for r in rows]))
              for name in SPLITS if "mc" in rows[0]["eval"][name] for s in ("ew-uep", "uncoded")
              for i in range(len(TIMES))]
        if mc:
            L.append("\ncxr check (the diagonal formula ignores the cross terms of the summands): "
                     "Monte Carlo of the real decoder, mean lost energy vs the formula: "
                     + "; ".join(f"{n} {s} T={TIMES[i]:g} {m:.3f} vs {f:.3f}" for n, s, i, m, f in mc) + ".\n")
        dg = {k: np.mean([r["eval"]["diagnosis"][k] for r in rows]) for k in rows[0]["eval"]["diagnosis"]}
        L.append(f"\nDiagnosis ({prod}): the top third of C's rows, sorted by the left factor's "
                 f"mean|.| / L2 / C's own row energy, holds {dg['rows_by_mean_abs']:.3f} / "
                 f"{dg['rows_by_l2']:.3f} / {dg['rows_best']:.3f} of the energy; the top third "
                 f"of the columns by the right factor's mean|.| / L2 / C's own column energy "
                 f"{dg['cols_by_mean_abs']:.3f} / {dg['cols_by_l2']:.3f} / {dg['cols_best']:.3f}. "
                 f"Coefficient of variation of the row energies {dg['rows_cv']:.2f}, of the "
                 f"column energies {dg['cols_cv']:.2f}.\n")
    L.append("## Per snapshot: the least important class and where the energy sits\n")
    L.append("Share of the energy in the 6-block class (rxc contiguous / rxc sorted mean|.| / cxr "
             "sorted L2), and the share that the top third of C's rows (columns) holds when "
             "sorted by the left (right) factor's mean|.|; 0.33 = no concentration.\n")
    L.append("| step | product | class 3: rxc contiguous / rxc sorted / cxr sorted L2 | top third of rows | top third of columns |")
    L.append("|---|---|---|---:|---:|")
    for step in meta["snapshots"]:
        for prod in ("grad_W", "grad_input"):
            rows = [p for p in per if p["product"] == prod and p["step"] == step]
            c3 = [np.mean([r["eval"][n]["share"][2] for r in rows])
                  for n in ("rxc contiguous", "rxc sorted mean|.|", "cxr sorted L2")]
            dr = np.mean([r["eval"]["diagnosis"]["rows_by_mean_abs"] for r in rows])
            dc = np.mean([r["eval"]["diagnosis"]["cols_by_mean_abs"] for r in rows])
            L.append(f"| {step} | {prod} | " + " / ".join(f"{v:.3f}" for v in c3)
                     + f" | {dr:.2f} | {dc:.2f} |")
    L.append("")
    L.append(meta["discussion"])
    (out / "uep_split.md").write_text("\n".join(L) + "\n")


DISCUSSION = """## Findings

- **grad_W = delta^T X gains from sorting along both sides.** Its rows are the layer's output
  units (delta's columns: a few units carry most of the gradient) and its columns are the input
  features (X's columns: MNIST's border pixels are always zero, ReLU units are often silent), so
  sorting both puts most of the energy in the top-left blocks at every stage of training.
- **grad_input = delta W gains only once the per-sample gradients spread out.** Its rows are
  the samples of the batch and its columns the layer's input units, i.e. W's columns. At
  initialisation the untrained network is about equally wrong on every sample (delta's rows
  alike) and W's columns are i.i.d. initial weights: the top third of the rows or the columns
  holds little more than a third of the energy, there is nothing to sort on, and the 6-block
  class keeps more than half of the energy whatever the split. W's columns stay nearly flat
  during training (the top third holds a bit over half); what changes is the rows: after a few
  hundred steps a few misclassified samples dominate delta, and the sorted rxc split puts
  almost everything in its first row of blocks (class 3 < 5 %).
- **Sorting the inner index (cxr) loses less energy per product but trains slower.** With the
  inner index sorted, cxr puts less energy in the 6-block class of grad_W later in training
  (its inner index is the batch: a few samples carry the gradient) and of grad_input at
  initialisation, and its expected lost energy is lower on average (ew-uep, T = 1: grad_W 0.14
  by the formula / 0.11 by the Monte Carlo against 0.17 for rxc sorted; grad_input 0.23 / 0.21
  against 0.25). But in training it is slower: ew-uep at T = 0.5 on seed 0 reaches 85 % at
  simulated time 2079 (cxr, mean|.|) and 1946 (cxr, L2) against 1251 for rxc sorted
  (`co3 simulate uep train` settings of `uep_train.md`, 1,500 steps). A likely reason: dropping
  summands removes whole samples / output units from every entry of the gradient, where rxc
  drops the small entries; the energy share alone does not rank the splits for training. L2 instead of
  mean|.| changes the shares by about 0.01. So the authors' rxc split sorted by mean|.| stays
  the default; `mode="cxr"` and `sort_by="l2"` (CLI `--sort-by l2`) remain selectable in
  `StragglerConfig`. For cxr the block-energy formula ignores the summands' cross terms; the
  Monte Carlo of the real decoder above shows it is pessimistic by up to about 0.05."""


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--snapshots", default="0,200,1000")
    ap.add_argument("--mc-trials", type=int, default=300)
    ap.add_argument("--out", default=str(Path(__file__).resolve().parent / "results"))
    ap.add_argument("--render", action="store_true", help="No measuring: rewrite the md from "
                    "OUT/uep_split.json (with this version's findings text).")
    a = ap.parse_args(argv)
    if a.render:
        doc = json.loads((Path(a.out) / "uep_split.json").read_text())
        meta = doc["meta"] | {"discussion": DISCUSSION}
        (Path(a.out) / "uep_split.json").write_text(json.dumps({"meta": meta, "products": doc["products"]}, indent=1))
        write_md(Path(a.out), doc["products"], meta)
        return 0
    t0 = time.perf_counter()
    snaps = [int(s) for s in a.snapshots.split(",")]
    codes = {s: StragglerConfig(s, workers=n, windows=GAMMA, class_sizes=CLASSES).code()
             for s, n in WORKERS.items()}
    per = []
    for prod in capture(snaps):
        per.append({k: prod[k] for k in ("step", "layer", "product")} | {"eval": evaluate(prod, codes, a.mc_trials)})
        print(prod["step"], prod["layer"], prod["product"],
              {n: [round(v, 3) for v in per[-1]["eval"][n]["share"]] for n in SPLITS}, flush=True)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    meta = dict(date=_dt.date.today().isoformat(), machine=f"{platform.machine()}, {os.cpu_count()} cores",
                snapshots=snaps, bench_s=time.perf_counter() - t0, discussion=DISCUSSION)
    (out / "uep_split.json").write_text(json.dumps({"meta": meta, "products": per}, indent=1))
    write_md(out, per, meta)
    print(f"wrote {out / 'uep_split.md'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
