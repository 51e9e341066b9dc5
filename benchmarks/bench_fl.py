"""Federated training through the codec: CO3 against uncompressed and the baselines.

    python benchmarks/bench_fl.py [--suite scale|separate|baselines ...] [--rounds 200]
                                  [--out benchmarks/results]

Setting (issue 4): mnist5k-mlp, 10 clients, FedSGD (one minibatch gradient of 64 per client per
round), server SGD lr 0.3 (``--lr``; 0.1 left ``none`` under-trained at 88 %), the same number of
rounds for every run. Every upload is really compressed, sent as bytes and decoded
(``co3cli.simulate.fl``); bits/entry = 8 x payload bytes / entries, mean over rounds.

Suites (each writes its part of ``fl.json``; ``fl.md`` is rebuilt from every suite in it, so a
suite can be rerun alone):

* ``scale`` (issue 12, iid, seeds 0 and 1): ``none``; ``co3`` fp4-co3 + ans with each scale
  rule (absmax, co3-poly guarded, gennorm-mse, empirical-mse) at gamma 0 and 0.7; tinyscript
  2 bits (zeros coded as zero) at gamma 0 and 0.7. ``scale_fallbacks``: refits whose
  co3-poly scale fell back to gennorm-mse (beta outside [0.6, 2]), or whose co3-poly /
  gennorm-mse scale fell back to empirical-mse (a degenerate fit that would send only zeros).
* ``separate`` (issue 12, iid and non-iid Dirichlet(0.3), seeds 0 and 1): a setting where
  error feedback matters, found by 100-round screens (fp4 on Dirichlet(0.1) did not separate:
  88.1 / 88.2 / 87.2 % at gamma 0 / 0.7 / 1): a 2-bit grid (``uniform2``: -1, 0, +1 times the
  scale), co3 with absmax and empirical-mse at gamma 0, 0.7 and 1, next to ``none``.
* ``baselines`` (seed 0, iid and non-iid Dirichlet(0.3)): ``none``; ``co3`` fp4-co3 + ans
  (absmax) with gamma in {0, 0.5, 0.7, 0.9, 1}; fp8-e5m2 + ans (gamma 0.7); huffman;
  ``qsgd`` (levels 4, 64), ``topk`` (1 %, 5 %), ``signsgd``, ``sketch`` (5 rows x 2 % width:
  3.2 bits/entry; median and FetchSGD top-k unsketch, without error feedback, plus median with
  EF to show that client-side EF diverges), ``tinyscript`` (2 bits), the biased ones with error
  feedback (gamma 1, their usual setting).

Figures: ``fl_iid.png`` / ``fl_dirichlet.png`` (baselines), ``fl_scale.png``,
``fl_separate_iid.png`` / ``fl_separate_dirichlet.png`` (seed 0): accuracy vs round, vs cumulative bits, bits/entry.
Overhead: per round, (compress + decompress time) / (time computing the clients' gradients),
median over rounds 1..R-1 (round 0 includes numba's compilation).
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import platform
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402

FP4 = {"format": "fp4-co3", "coder": "ans"}
SCALES = ("absmax", "co3-poly", "gennorm-mse", "empirical-mse")

RUNS = [  # label, compressor, params, gamma  (the baselines suite)
    ("none", "none", {}, 0.0),
    *[(f"co3 fp4 ans g={g}", "co3", FP4, g) for g in (0.0, 0.5, 0.7, 0.9, 1.0)],
    ("co3 fp8 ans g=0.7", "co3", {"format": "fp8-e5m2", "coder": "ans"}, 0.7),
    ("co3 fp4 huffman g=0.7", "co3", {"format": "fp4-co3", "coder": "huffman"}, 0.7),
    ("co3 fp8 huffman g=0.7", "co3", {"format": "fp8-e5m2", "coder": "huffman"}, 0.7),
    ("qsgd s=4", "qsgd", {"levels": 4}, 0.0),
    ("qsgd s=64", "qsgd", {"levels": 64}, 0.0),
    ("topk 1% ef", "topk", {"fraction": 0.01}, 1.0),
    ("topk 5% ef", "topk", {"fraction": 0.05}, 1.0),
    ("signsgd ef", "signsgd", {}, 1.0),
    ("sketch median", "sketch", {"unsketch": "median", "width": 0.02}, 0.0),
    ("sketch topk", "sketch", {"unsketch": "topk", "width": 0.02, "k_fraction": 0.05}, 0.0),
    ("sketch median ef", "sketch", {"unsketch": "median", "width": 0.02}, 1.0),
    ("tinyscript 2b g=0.7", "tinyscript", {"bits": 2}, 0.7),
]
NONIID_SKIP = {"co3 fp4 huffman g=0.7", "co3 fp8 huffman g=0.7"}

SCALE_RUNS = [
    ("none", "none", {}, 0.0),
    *[(f"co3 fp4 {s} g={g}", "co3", {**FP4, "scale": s}, g) for s in SCALES for g in (0.0, 0.7)],
    *[(f"tinyscript 2b g={g}", "tinyscript", {"bits": 2}, g) for g in (0.0, 0.7)],
]
U2 = {"format": "uniform2", "coder": "ans"}
SEPARATE_RUNS = [
    ("none", "none", {}, 0.0),
    *[(f"co3 uniform2 {s} g={g}", "co3", {**U2, "scale": s}, g)
      for s in ("absmax", "empirical-mse") for g in (0.0, 0.7, 1.0)],
]
SUITES = {  # name -> (runs, partitions as (partition, alpha), seeds)
    "scale": (SCALE_RUNS, [("iid", 0.3)], (0, 1)),
    "separate": (SEPARATE_RUNS, [("iid", 0.3), ("dirichlet", 0.3)], (0, 1)),
    "baselines": (RUNS, [("iid", 0.3), ("dirichlet", 0.3)], (0,)),
}


def run_suite(name: str, rounds: int, lr: float, tmp: Path, out: Path) -> dict:
    """Every run of suite ``name``; its results keyed ``partition/label/seed``; the plots."""
    from co3cli.simulate.fl import Diverged, run_fl
    from co3cli.simulate.flconfig import FLConfig
    from co3cli.simulate.flplot import plot_runs, read_metrics

    runs, parts, seeds = SUITES[name]
    results = {}
    for part, alpha in parts:
        dirs, labels = [], []
        for seed in seeds:
            for label, comp, params, gamma in runs:
                if name == "baselines" and part == "dirichlet" and label in NONIID_SKIP:
                    continue
                cfg = FLConfig(task="mnist5k-mlp", clients=10, rounds=rounds,
                               algorithm="fedsgd", batch_size=64, lr=lr, partition=part,
                               alpha=alpha, compressor=comp, compressor_params=params,
                               gamma=gamma, eval_every=10, seed=seed)
                run_dir = tmp / name / part / f"{label.replace(' ', '_')}_s{seed}"
                try:
                    res = run_fl(cfg, run_dir).to_dict()
                except Diverged:
                    res = json.loads((run_dir / "summary.json").read_text())
                m = read_metrics(run_dir)
                ratio = (m["t_compress"] + m["t_decompress"]) / m["t_compute"]
                res["codec_over_compute_median"] = float(np.median(ratio[1:]))
                res["compress_ms_median"] = float(np.median(m["t_compress"][1:]) * 1e3)
                res["decompress_ms_median"] = float(np.median(m["t_decompress"][1:]) * 1e3)
                res["compute_ms_median"] = float(np.median(m["t_compute"][1:]) * 1e3)
                res.update(label=label, partition=part, alpha=alpha, seed=seed, gamma=gamma)
                results[f"{part}/{label}/{seed}"] = res
                print(f"{name:9s} {part:9s} s{seed} {label:26s} acc {res['final_accuracy']} "
                      f"bpe {res['mean_bits_per_entry']:.3f} "
                      f"fallbacks {res.get('scale_fallbacks')}", flush=True)
                if seed == seeds[0]:
                    dirs.append(str(run_dir))
                    labels.append(label)
        png = {"baselines": f"fl_{part}.png", "scale": "fl_scale.png"}.get(
            name, f"fl_{name}_{part}.png")
        plot_runs(dirs, out / png, labels)
    return results


def _acc(v) -> str:
    return "diverged" if v is None else f"{100 * v:.2f}"


def _seeded_table(runs: list, res: dict, part: str, seeds) -> list[str]:
    """Mean accuracy and each seed's, bits/entry, fallbacks, vs none (same seed)."""
    lines = ["| run | gamma | accuracy % mean | " + " | ".join(f"seed {s}" for s in seeds)
             + " | vs none (points, mean) | bits/entry | scale fallbacks |",
             "|---|---:|---:|" + "---:|" * len(seeds) + "---:|---:|---:|"]
    for label, _, _, gamma in runs:
        rs = [res.get(f"{part}/{label}/{s}") for s in seeds]
        if None in rs:
            continue
        acc = [r["final_accuracy"] for r in rs]
        base = [res[f"{part}/none/{s}"]["final_accuracy"] for s in seeds]
        ok = None not in acc
        mean = sum(acc) / len(acc) if ok else None
        d = ("-" if not ok or None in base
             else f"{100 * (mean - sum(base) / len(base)):+.2f}")
        fb = ("-" if not any(r in label for r in ("co3-poly", "gennorm-mse"))
              else " / ".join(str(r.get("scale_fallbacks") or 0) for r in rs))
        lines.append(f"| {label.rsplit(' g=', 1)[0]} | {gamma:g} | {_acc(mean)} | "
                     + " | ".join(_acc(a) for a in acc) + f" | {d} | "
                     f"{np.mean([r['mean_bits_per_entry'] for r in rs]):.3f} | "
                     f"{fb} |")
    return lines


def _baseline_table(res: dict, part: str) -> list[str]:
    base = res[f"{part}/none/0"]["final_accuracy"]
    lines = ["| run | accuracy % (best) | vs none (points) | bits/entry | entropy b/e "
             "| uplink MB | codec / compute |", "|---|---:|---:|---:|---:|---:|---:|"]
    for label, *_ in RUNS:
        r = res.get(f"{part}/{label}/0")
        if r is None:
            continue
        d = ("-" if r["final_accuracy"] is None or base is None
             else f"{100 * (r['final_accuracy'] - base):+.2f}")
        ent = r.get("mean_entropy_bits_per_entry")
        best = "" if r["best_accuracy"] is None else f" ({100 * r['best_accuracy']:.2f})"
        lines.append(
            f"| {label} | {_acc(r['final_accuracy'])}{best} | {d} | "
            f"{r['mean_bits_per_entry']:.3f} | {'-' if ent is None else f'{ent:.3f}'} | "
            f"{r['total_uplink_bytes'] / 1e6:.2f} | {r['codec_over_compute_median']:.2f} |")
    return lines


def render(doc: dict) -> str:
    lines = ["# Federated training through the codec (co3 simulate fl)", ""]
    for name, suite in doc["suites"].items():
        lines += [f"`python benchmarks/bench_fl.py --suite {name} --rounds {suite['rounds']} "
                  f"--lr {suite['lr']:g}` on {suite['date']}, {suite['machine']}, co3cli "
                  f"{suite['version']}, one torch thread.", ""]
    rounds = next(iter(doc["suites"].values()))["rounds"]
    lines += [
        "mnist5k-mlp (784-128-64-10, 109,386 parameters), 10 clients, FedSGD, batch 64 per "
        f"client, server SGD lr 0.3, {rounds} rounds. Accuracy on the held-out 1,000 images after the "
        "last round. bits/entry: real payload bytes x 8 / entries, mean over rounds. scale "
        "fallbacks (seed 0 / seed 1): refits whose co3-poly scale came from gennorm-mse (fitted "
        "beta outside [0.6, 2]) or whose co3-poly / gennorm-mse scale came from empirical-mse "
        "(a degenerate fit whose optimum would send only zeros); a layer's scale is refitted on every 10th upload (in between it "
        f"follows the gradient's RMS), so a run has about 10 clients x 6 layers x {rounds} / 10 "
        f"= {6 * rounds:,} refits (more where a symbol the table cannot code forces one).", ""]
    s = doc["suites"]
    if "scale" in s:
        lines += ["## fp4 scale rules, with and without error feedback (iid, seeds 0 and 1)", ""]
        lines += _seeded_table(SCALE_RUNS, s["scale"]["runs"], "iid", (0, 1))
        lines += ["", "co3-poly is the guarded rule (gennorm-mse outside beta in [0.6, 2]; "
                  "empirical-mse where gennorm-mse's scale would send only zeros, which happens "
                  "on error-fed uploads, whose GenNorm fit degenerates to beta = 0.05; "
                  "gennorm-mse falls back to empirical-mse there too). "
                  "tinyscript sends exact zeros as zero.", "", "![scale](fl_scale.png)", ""]
    if "separate" in s:
        for part, title in (("iid", "iid"), ("dirichlet", "non-iid Dirichlet(0.3)")):
            lines += [f"## A setting that separates error feedback: 2-bit grid (uniform2: -1, 0, "
                      f"+1 x scale), {title}, seeds 0 and 1", ""]
            lines += _seeded_table(SEPARATE_RUNS, s["separate"]["runs"], part, (0, 1))
            lines += ["", f"![separate {part}](fl_separate_{part}.png)", ""]
    if "baselines" in s:
        res = s["baselines"]["runs"]
        for part, title in (("iid", "iid"), ("dirichlet", "non-iid, Dirichlet(0.3) over labels")):
            lines += [f"## Baselines, {title} (seed 0; co3 fp4 rows: scale absmax)", ""]
            lines += _baseline_table(res, part)
            lines += ["", f"![{part}](fl_{part}.png)", ""]
        lines += ["## Codec time (baselines, iid, medians over rounds 1..R-1, 10 clients per "
                  "round)", "", "| run | gradients ms / round | compress ms | decompress ms | "
                  "(compress + decompress) / gradients |", "|---|---:|---:|---:|---:|"]
        for label, comp, *_ in RUNS:
            r = res.get(f"iid/{label}/0")
            if comp != "co3" or r is None:
                continue
            lines.append(f"| {label} | {r['compute_ms_median']:.1f} | "
                         f"{r['compress_ms_median']:.1f} | {r['decompress_ms_median']:.1f} | "
                         f"{r['codec_over_compute_median']:.2f} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--suite", action="append", choices=sorted(SUITES),
                    help="suite(s) to run (default: all)")
    ap.add_argument("--rounds", type=int, default=200)
    ap.add_argument("--lr", type=float, default=0.3)
    ap.add_argument("--out", default=str(Path(__file__).parent / "results"))
    args = ap.parse_args(argv)

    from co3cli import __version__

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / "fl.json"
    doc = json.loads(path.read_text()) if path.exists() else {}
    if "suites" not in doc:  # a file from before the suites
        doc = {"suites": {}}
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.suite or list(SUITES):
            runs = run_suite(name, args.rounds, args.lr, Path(tmp), out)
            doc["suites"][name] = {
                "rounds": args.rounds, "lr": args.lr, "date": _dt.date.today().isoformat(),
                "machine": f"{platform.machine()} ({os.cpu_count()} cores, shared VM), "
                           f"Python {platform.python_version()}",
                "version": __version__, "runs": runs}
            path.write_text(json.dumps(doc, indent=1) + "\n")
            (out / "fl.md").write_text(render(doc))
    print(render(doc))
    return 0


if __name__ == "__main__":
    sys.exit(main())
