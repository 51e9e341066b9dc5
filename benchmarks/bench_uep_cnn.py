"""Coded back-propagation on a CNN: the dense layers of mnist5k-cnn go through the UEP code.

    python benchmarks/bench_uep_cnn.py [--steps 400] [--seed 0]

Same straggler setting as ``bench_uep.py`` (the authors' sorted partition: rows and columns
ordered by mean|.| before the uniform rxc 3x3 split; classes of 1, 2, 6 blocks, Gamma =
(0.45, 0.35, 0.20), Exp(1) latencies; the UEP schemes at T = 1 also with the old contiguous
partition, for comparison): every ``nn.Linear`` of the CNN (fc1: 64 x 256,
fc2: 10 x 64; the convolutions stay exact) has its backward products coded, and the conv
layers receive the coded grad_input. One seed, batch 64, SGD lr 0.1. Writes
``benchmarks/results/uep_train_cnn.md``.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import os
import platform
import sys
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's co3cli

RUNS = [  # label, scheme (None: exact autograd), extra StragglerConfig fields
    ("exact (autograd)", None, {}),
    ("uncoded n=9 wait-all", "uncoded", {}),
    ("mds n=15 wait=9", "mds", {"workers": 15, "wait_for": 9}),
    ("repetition T=1", "repetition", {"deadline": 1.0}),
    ("mds T=1", "mds", {"workers": 15, "deadline": 1.0}),
    ("now-uep T=1", "now-uep", {"workers": 15, "deadline": 1.0}),
    ("ew-uep T=1", "ew-uep", {"workers": 15, "deadline": 1.0}),
    ("ew-uep T=0.5", "ew-uep", {"workers": 15, "deadline": 0.5}),
    ("now-uep T=1 contiguous", "now-uep", {"workers": 15, "deadline": 1.0, "partition": "contiguous"}),
    ("ew-uep T=1 contiguous", "ew-uep", {"workers": 15, "deadline": 1.0, "partition": "contiguous"}),
]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=400)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--target", type=float, default=0.80)
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "uep_train_cnn.md"))
    args = ap.parse_args(argv)

    import torch

    from co3cli import __version__
    from co3cli.simulate.uep.train import StragglerConfig, train_coded

    torch.set_num_threads(1)
    t0 = time.time()
    rows = []
    for label, scheme, extra in RUNS:
        cfg = None if scheme is None else StragglerConfig(scheme=scheme, seed=args.seed, **extra)
        res = train_coded("mnist5k-cnn", cfg, steps=args.steps, batch_size=64, lr=0.1,
                          seed=args.seed, eval_every=25, target_accuracy=args.target)
        rows.append((label, res))
        print(label, res["final_accuracy"], res.get("time_to_target"), flush=True)
    lines = [
        "# Coded back-propagation on a CNN (mnist5k-cnn, dense layers coded)", "",
        f"`python benchmarks/bench_uep_cnn.py --steps {args.steps} --seed {args.seed}` on "
        f"{_dt.date.today().isoformat()}, {platform.machine()} ({os.cpu_count()} cores), "
        f"Python {platform.python_version()}, torch {torch.__version__}, co3cli {__version__}, "
        f"one torch thread; {time.time() - t0:.0f} s.", "",
        "Straggler setting as in `uep_train.md`: the sorted partition (rows and columns by "
        "mean|.|, then rxc 3x3 blocks; `contiguous` rows: the original order), classes of 1, 2, 6 blocks, "
        "Gamma = (0.45, 0.35, 0.20), Exp(1) worker times; uncoded 9, repetition 18, mds/UEP 15 "
        "workers. Both dense layers' backward products are coded (4 coded products per step: "
        "fc1 grad_W and grad_input, which the convolutions then receive, fc2 grad_W and "
        "grad_input); the convolutions are exact. Simulated time in 1/lambda units.", "",
        f"| run | final acc | best acc | sim time to {args.target:.0%} | step to "
        f"{args.target:.0%} | blocks recovered |", "|---|---:|---:|---:|---:|---:|",
    ]
    for label, r in rows:
        ttt = r.get("time_to_target")
        step = r.get("step_to_target")
        rec = r.get("recovered_fraction")
        lines.append(
            f"| {label} | {r['final_accuracy']:.4f} | {r['best_accuracy']:.4f} | "
            f"{'never' if ttt is None else ('(no clock)' if label.startswith('exact') else f'{ttt:.1f}')} | "
            f"{'never' if step is None else step} | "
            f"{'-' if rec is None or rec != rec else f'{rec:.2f}'} |")
    text = "\n".join(lines) + "\n"
    Path(args.out).write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
