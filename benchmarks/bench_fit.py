"""Benchmark: co3cli's profile-likelihood GenNorm fit vs ``scipy.stats.gennorm.fit(x, floc=0)``.

For each beta, draws n GenNorm(beta, scale=1e-3) entries (float32, seeded), times
``co3cli.models.fit`` (median of --repeat runs) and scipy's fit, and reports both betas and their
difference. scipy is first timed on a 10^6 subsample; if that predicts (linearly) more than
--scipy-limit seconds on all n entries, the subsample figure is reported (column ``scipy_n``).
Then the same for zero-inflated data (--zero-frac exact zeros), fitted with ``gennorm-zi``.

    python benchmarks/bench_fit.py                       # n = 10^7, betas 0.5 1 1.5 2
    python benchmarks/bench_fit.py --n 1000000 --json out.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time

import numpy as np


def _timed(fn, *args, **kw):
    t = time.perf_counter()
    out = fn(*args, **kw)
    return time.perf_counter() - t, out


def sample(beta: float, n: int, seed: int, zero_frac: float = 0.0) -> np.ndarray:
    from scipy import stats

    rng = np.random.default_rng(seed)
    x = stats.gennorm.rvs(beta, scale=1e-3, size=n, random_state=rng).astype(np.float32)
    if zero_frac:
        x[rng.random(n) < zero_frac] = 0.0
    return x


def bench_one(beta: float, n: int, repeat: int, scipy_limit: float, seed: int,
              zero_frac: float = 0.0, model: str = "gennorm") -> dict:
    from scipy import stats

    from co3cli import models

    x = sample(beta, n, seed, zero_frac)
    times, f = [], None
    for _ in range(repeat):
        t, f = _timed(models.fit, x, model)
        times.append(t)
    row = {"beta": beta, "n": n, "zero_frac": zero_frac, "model": model,
           "ours_s": statistics.median(times), "ours_beta": f.params["beta"],
           "ours_scale": f.params["scale"], "p0": f.p0}
    # scipy's reference on the same entries the continuous component is fitted to
    ref = x[x != 0] if model.endswith("-zi") else x
    sub = ref[: min(ref.size, 10**6)].astype(np.float64)
    t_sub, r_sub = _timed(stats.gennorm.fit, sub, floc=0)
    if ref.size > sub.size and t_sub * ref.size / sub.size <= scipy_limit:
        t_sc, r = _timed(stats.gennorm.fit, ref.astype(np.float64), floc=0)
        n_sc = ref.size
    else:
        t_sc, r, n_sc = t_sub, r_sub, sub.size
    row.update(ref_n=int(ref.size), scipy_subsampled=n_sc != ref.size, scipy_s=t_sc,
               scipy_n=n_sc, scipy_beta=float(r[0]), scipy_scale=float(r[2]))
    if n_sc != ref.size:  # compare like with like: our fit on scipy's subsample too
        row["ours_beta_on_scipy_n"] = models.fit(sub, model.replace("-zi", "")).params["beta"]
        row["diff"] = abs(row["ours_beta_on_scipy_n"] - row["scipy_beta"])
    else:
        row["diff"] = abs(row["ours_beta"] - row["scipy_beta"])
    return row


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=10**7, help="entries per data set (default 1e7)")
    ap.add_argument("--betas", type=float, nargs="+", default=[0.5, 1.0, 1.5, 2.0])
    ap.add_argument("--repeat", type=int, default=3, help="timed runs of our fit (median)")
    ap.add_argument("--scipy-limit", type=float, default=60.0,
                    help="max predicted seconds for scipy on all n (else 1e6 subsample)")
    ap.add_argument("--zero-frac", type=float, default=0.15,
                    help="fraction of exact zeros in the zero-inflated runs")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", metavar="PATH", help="also write the rows as JSON ('-': stdout)")
    args = ap.parse_args(argv)
    if args.n < 10 or args.repeat < 1 or not 0 <= args.zero_frac < 1:
        ap.error("need --n >= 10, --repeat >= 1 and 0 <= --zero-frac < 1")

    from co3cli import models

    models.fit(sample(1.0, 1000, 0))  # warm up imports
    rows = []
    for i, beta in enumerate(args.betas):
        rows.append(bench_one(beta, args.n, args.repeat, args.scipy_limit, args.seed + i))
    for i, beta in enumerate(args.betas):
        rows.append(bench_one(beta, args.n, args.repeat, args.scipy_limit, args.seed + 100 + i,
                              args.zero_frac, "gennorm-zi"))
        x = sample(beta, args.n, args.seed + 100 + i, args.zero_frac)
        rows[-1]["plain_gennorm_beta"] = models.fit(x, "gennorm").params["beta"]

    hdr = (f"{'model':<11}{'beta':>5}{'zeros':>7}{'n':>10}{'ours s':>9}{'ours beta':>11}"
           f"{'scipy s':>9}{'scipy n':>10}{'scipy beta':>11}{'|diff|':>9}{'speedup':>9}")
    print(f"# {platform.processor() or platform.machine()}, {os.cpu_count()} cpu, "
          f"python {sys.version.split()[0]}, numpy {np.__version__}")
    print(hdr)
    print("-" * len(hdr))
    for r in rows:
        speed = r["scipy_s"] * (r["ref_n"] / r["scipy_n"]) / r["ours_s"]
        print(f"{r['model']:<11}{r['beta']:>5.2f}{r['zero_frac']:>7.2f}{r['n']:>10d}"
              f"{r['ours_s']:>9.3f}{r['ours_beta']:>11.5f}{r['scipy_s']:>9.2f}{r['scipy_n']:>10d}"
              f"{r['scipy_beta']:>11.5f}{r['diff']:>9.1e}{speed:>8.0f}x"
              f"{' *' if r['scipy_subsampled'] else ''}")
    print("(scipy n = entries scipy fitted: the non-zeros for gennorm-zi. Rows marked * were "
          "timed on a 1e6 subsample\n because all of them were predicted to take more than "
          f"{args.scipy_limit:g} s; there |diff| compares both fits on that subsample and the "
          "speedup\n scales scipy's time linearly to the full size.)")
    for r in rows:
        if "plain_gennorm_beta" in r:
            print(f"plain gennorm on the {r['zero_frac']:.0%}-zero data (beta {r['beta']}): "
                  f"beta = {r['plain_gennorm_beta']:.4f} (collapsed; gennorm-zi: "
                  f"{r['ours_beta']:.4f})")
    if args.json:
        text = json.dumps(rows, indent=2)
        if args.json == "-":
            print(text)
        else:
            with open(args.json, "w") as fh:
                fh.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
