"""Federated training through the codec: CO3 against uncompressed and the baselines.

    python benchmarks/bench_fl.py [--rounds 200] [--out benchmarks/results]

Setting (issue 4): mnist5k-mlp, 10 clients, FedSGD (one minibatch gradient of 64 per client per
round), server SGD lr 0.3 (``--lr``; 0.1 left ``none`` under-trained at 88 %), the same seed (0) and number of rounds for every run; iid and
non-iid (Dirichlet 0.3 over labels). Every upload is really compressed, sent as bytes and
decoded (``co3cli.simulate.fl``); bits/entry = 8 x payload bytes / entries, mean over rounds.

Runs: ``none``; ``co3`` fp4-co3 + ans with gamma in {0, 0.5, 0.7, 0.9, 1}; ``co3`` fp8-e5m2 +
ans (gamma 0.7); ``co3`` with huffman (overhead); ``qsgd`` (levels 4, 64), ``topk`` (1 %, 5 %),
``signsgd``, ``sketch`` (5 rows x 2 % width: 3.2 bits/entry; median and FetchSGD top-k unsketch,
without error feedback, plus median with EF to show that client-side EF diverges), ``tinyscript`` (2 bits), the
biased ones with error feedback (gamma 1, their usual setting). Writes ``fl.md``, ``fl.json``
and ``fl_iid.png`` / ``fl_dirichlet.png`` (accuracy vs round, vs cumulative bits, bits/entry).

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

RUNS = [  # label, compressor, params, gamma
    ("none", "none", {}, 0.0),
    *[(f"co3 fp4 ans g={g}", "co3", {"format": "fp4-co3", "coder": "ans"}, g)
      for g in (0.0, 0.5, 0.7, 0.9, 1.0)],
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


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=200)
    ap.add_argument("--lr", type=float, default=0.3)
    ap.add_argument("--out", default=str(Path(__file__).parent / "results"))
    args = ap.parse_args(argv)

    import numpy as np

    from co3cli import __version__
    from co3cli.simulate.fl import Diverged, run_fl
    from co3cli.simulate.flconfig import FLConfig
    from co3cli.simulate.flplot import plot_runs, read_metrics

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for part in ("iid", "dirichlet"):
            dirs, labels = [], []
            for label, comp, params, gamma in RUNS:
                if part == "dirichlet" and label in NONIID_SKIP:
                    continue
                cfg = FLConfig(task="mnist5k-mlp", clients=10, rounds=args.rounds,
                               algorithm="fedsgd", batch_size=64, lr=args.lr, partition=part,
                               alpha=0.3, compressor=comp, compressor_params=params,
                               gamma=gamma, eval_every=10, seed=0)
                run_dir = Path(tmp) / part / label.replace(" ", "_")
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
                results[f"{part}/{label}"] = res
                print(f"{part:9s} {label:24s} acc {res['final_accuracy']} "
                      f"bpe {res['mean_bits_per_entry']:.3f} "
                      f"codec/compute {res['codec_over_compute_median']:.2f}", flush=True)
                dirs.append(str(run_dir))
                labels.append(label)
            plot_runs(dirs, out / f"fl_{part}.png", labels)

    def acc(r):
        return "diverged" if r["final_accuracy"] is None else f"{100 * r['final_accuracy']:.2f}"

    lines = [
        "# Federated training through the codec (co3 simulate fl)",
        "",
        f"`python benchmarks/bench_fl.py --rounds {args.rounds} --lr {args.lr:g}` on "
        f"{_dt.date.today().isoformat()}, {platform.machine()} ({os.cpu_count()} cores, shared "
        f"VM), Python {platform.python_version()}, co3cli {__version__}, one torch thread.",
        "",
        f"mnist5k-mlp (784-128-64-10, 109,386 parameters), 10 clients, FedSGD, batch 64 per "
        f"client, server SGD lr {args.lr:g}, {args.rounds} rounds, seed 0 for every run. Accuracy on "
        "the held-out 1,000 images after the last round (best over evaluations every 10 rounds "
        "in brackets). bits/entry: real payload bytes x 8 / entries, mean over rounds; "
        "entropy: empirical entropy of the coded symbols (co3 only).",
        "",
    ]
    for part, title in (("iid", "iid"), ("dirichlet", "non-iid, Dirichlet(0.3) over labels")):
        base = results[f"{part}/none"]["final_accuracy"]
        lines += [f"## {title}", "",
                  "| run | accuracy % (best) | vs none (points) | bits/entry | entropy b/e "
                  "| uplink MB | codec / compute |",
                  "|---|---:|---:|---:|---:|---:|---:|"]
        for label, *_ in RUNS:
            r = results.get(f"{part}/{label}")
            if r is None:
                continue
            d = ("-" if r["final_accuracy"] is None or base is None
                 else f"{100 * (r['final_accuracy'] - base):+.2f}")
            ent = r.get("mean_entropy_bits_per_entry")
            best = "" if r["best_accuracy"] is None else f" ({100 * r['best_accuracy']:.2f})"
            lines.append(
                f"| {label} | {acc(r)}{best} | {d} | {r['mean_bits_per_entry']:.3f} | "
                f"{'-' if ent is None else f'{ent:.3f}'} | {r['total_uplink_bytes'] / 1e6:.2f} | "
                f"{r['codec_over_compute_median']:.2f} |")
        lines += ["", f"![{part}](fl_{part}.png)", ""]
    lines += [
        "## Codec time (iid runs, medians over rounds 1..R-1, 10 clients per round)", "",
        "| run | gradients ms / round | compress ms | decompress ms | (compress + decompress) "
        "/ gradients |", "|---|---:|---:|---:|---:|"]
    for label, comp, *_ in RUNS:
        if comp != "co3":
            continue
        r = results[f"iid/{label}"]
        lines.append(f"| {label} | {r['compute_ms_median']:.1f} | {r['compress_ms_median']:.1f} | "
                     f"{r['decompress_ms_median']:.1f} | {r['codec_over_compute_median']:.2f} |")
    text = "\n".join(lines) + "\n"
    (out / "fl.md").write_text(text)
    (out / "fl.json").write_text(json.dumps(results, indent=1) + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
