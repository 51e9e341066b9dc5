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


# -- the clock suite (issue 14): accuracy against wall-clock time under client links ----------
CLOCK_RUNS = [  # label, compressor, params, gamma (the baselines suite's settings)
    ("none", "none", {}, 0.0),
    ("co3 fp4 ans g=0.7", "co3", FP4, 0.7),
    ("co3 fp8 ans g=0.7", "co3", {"format": "fp8-e5m2", "coder": "ans"}, 0.7),
    ("qsgd s=4", "qsgd", {"levels": 4}, 0.0),
    ("topk 1% ef", "topk", {"fraction": 0.01}, 1.0),
    ("signsgd ef", "signsgd", {}, 1.0),
    ("sketch median", "sketch", {"unsketch": "median", "width": 0.02}, 0.0),
    ("tinyscript 2b g=0.7", "tinyscript", {"bits": 2}, 0.7),
    ("co3 fp4 ctx g=0.7", "co3", {"format": "fp4-co3", "coder": "ctx"}, 0.7),  # slow codec:
    ("co3 fp8 ctx g=0.7", "co3", {"format": "fp8-e5m2", "coder": "ctx"}, 0.7),  # run last
]
CLOCK_TASKS = {  # task -> FLConfig fields (chosen to fit a 2-core machine shared by 4 agents)
    "mnist5k-mlp": dict(clients=10, rounds=200, algorithm="fedsgd", batch_size=64, lr=0.3,
                        eval_every=10),
    "mnist5k-resnet": dict(clients=4, rounds=50, algorithm="fedsgd", batch_size=32, lr=0.1,
                           eval_every=5, test_fraction=0.1),  # 500 test images: 2 s an eval
    "stdlib-charlm": dict(clients=4, rounds=40, algorithm="fedsgd", batch_size=16, lr=0.1,
                          momentum=0.9, eval_every=5, test_fraction=0.02),  # 2 %: 5 s an eval
    # (server momentum: plain FedSGD at lr 0.5 made the transformer's accuracy jump 3-33 %)
}
CLOCK_LINKS = dict(uplink="10mbit", downlink="10x", latency="20ms",
                   compute_factor="lognormal:1:0.5", link_seed=0)
UPLINKS = ("1mbit", "10mbit", "100mbit")
TARGET_RULE = 0.95  # target accuracy: this fraction of the float32 (none) run's final accuracy


def _clock_dir(work: Path, task: str, label: str) -> Path:
    return work / task / label.replace(" ", "_").replace("%", "pct").replace("=", "")


def run_clock(tasks: list[str], labels: list[str] | None, work: Path, rounds: int | None) -> None:
    """One training run per task and compressor (skipped where its summary.json exists), with
    the links of CLOCK_LINKS; the model file is dropped (the clock needs only the CSVs)."""
    from co3cli.simulate.fl import Diverged, run_fl
    from co3cli.simulate.flconfig import FLConfig

    for task in tasks:
        for label, comp, params, gamma in CLOCK_RUNS:
            d = _clock_dir(work, task, label)
            if (labels and label not in labels) or (d / "summary.json").exists():
                continue
            fields = {**CLOCK_TASKS[task], **({"rounds": rounds} if rounds else {})}
            cfg = FLConfig(task=task, compressor=comp, compressor_params=params, gamma=gamma,
                           partition="iid", seed=0, **fields, **CLOCK_LINKS)
            t0 = os.times()
            try:
                run_fl(cfg, d, overwrite=True)
            except Diverged:
                pass
            cpu = os.times()
            (d / "model.pt").unlink(missing_ok=True)
            (d / "bench.json").write_text(json.dumps({
                "cpu_s": cpu.user + cpu.system - t0.user - t0.system,
                "wall_s": cpu.elapsed - t0.elapsed, "load_after": os.getloadavg(),
                "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")}))
            print(f"clock {task} {label}: done", flush=True)


def _step_time(work: Path, task: str) -> float | None:
    """The clock's compute time per client step for ``task``: the lowest of its runs' median
    measured step times (the least loaded measurement), the same for every compressor, so that
    the load of the shared machine while a run trained does not decide the comparison."""
    from co3cli.simulate.flplot import read_metrics

    meds = []
    for label, *_ in CLOCK_RUNS:
        d = _clock_dir(work, task, label)
        if (d / "summary.json").exists():
            cfg = json.loads((d / "config.json").read_text())["config"]
            m = read_metrics(d)
            meds.append(float(np.median(m["t_compute"][1:])) / cfg["clients"] / cfg["local_steps"])
    return min(meds) if meds else None


def _clock_row(d: Path, target: float | None, f32: float | None = None,
               step: float | None = None) -> dict:
    """A finished run's accuracy, bits/entry, codec times, break-even and clock per uplink;
    ``f32``: the bytes of one client's uncompressed upload (the none run's; default 4 bytes
    per entry); ``step``: the fixed compute time per client step of the clock (None: measured)."""
    from co3cli.simulate.clock import recompute
    from co3cli.simulate.flplot import read_metrics

    s = json.loads((d / "summary.json").read_text())
    cfg = json.loads((d / "config.json").read_text())
    m = read_metrics(d)
    n, entries = int(cfg["config"]["clients"]), int(cfg["model_parameters"])
    med = lambda a: float(np.median(a[1:]))  # noqa: E731  (round 0 holds numba's compilation)
    enc, dec, comp = med(m["t_compress"]) / n, med(m["t_decompress"]), med(m["t_compute"]) / n
    up = float(np.median(np.diff(np.r_[0, m["cumulative_uplink_bytes"]])[1:])) / n
    f32 = 4.0 * entries if f32 is None else f32
    codec = enc + dec
    row = {"final_accuracy": s["final_accuracy"], "best_accuracy": s["best_accuracy"],
           "bits_per_entry": s["mean_bits_per_entry"], "rounds": len(m["round"]),
           "uplink_bytes_per_client": up, "encode_s": enc, "decode_s_all_clients": dec,
           "compute_s_per_client": comp, "codec_over_compute": med(
               (m["t_compress"] + m["t_decompress"]) / m["t_compute"]),
           "break_even_bit_s": (8 * (f32 - up) / codec if codec > 0 and up < f32 else None),
           "stopped": s.get("stopped"), "clock": {}}
    bench = d / "bench.json"
    if bench.exists():
        row.update(json.loads(bench.read_text()))
    for u in UPLINKS:
        c = recompute(d, target, uplink=u, compute_time=step)
        row["clock"][u] = {k: c["summary"][k] for k in (
            "wallclock_s", "time_to_target_s", "target_round", "target_reason")}
        row["clock"][u]["parts_s"] = c["summary"]["parts_s"]
    return row


def clock_results(work: Path, out: Path) -> dict:
    """Every finished clock run under ``work``: fl_clock.json, fl_clock.md and one plot per task
    (accuracy vs wall-clock at the three uplinks); a run not there is listed as not run."""
    from co3cli import __version__
    from co3cli.simulate.flplot import plot_runs

    doc = {"version": __version__, "links": CLOCK_LINKS, "uplinks": UPLINKS,
           "target_rule": f"{TARGET_RULE:g} x the none run's final accuracy, floored to 0.1 %",
           "machine": f"{platform.machine()} ({os.cpu_count()} cores, shared VM), Python "
                      f"{platform.python_version()}", "tasks": {}}
    for task, fields in CLOCK_TASKS.items():
        base = _clock_dir(work, task, "none") / "summary.json"
        acc = json.loads(base.read_text())["final_accuracy"] if base.exists() else None
        target = None if acc is None else np.floor(1000 * TARGET_RULE * acc) / 1000
        runs, dirs, labels = {}, [], []
        step = _step_time(work, task)
        for label, *_ in CLOCK_RUNS:  # none first: its upload is the float32 reference
            d = _clock_dir(work, task, label)
            if (d / "summary.json").exists():
                f32 = runs["none"]["uplink_bytes_per_client"] if "none" in runs else None
                runs[label] = _clock_row(d, target, f32, step)
                dirs.append(str(d))
                labels.append(label)
        doc["tasks"][task] = {"config": fields, "target": target, "compute_time_s": step,
                              "runs": runs}
        if dirs:
            plot_runs(dirs, out / f"fl_clock_{task}.png", labels, uplinks=list(UPLINKS),
                      links={"compute_time": step})
    (out / "fl_clock.json").write_text(json.dumps(doc, indent=1) + "\n")
    (out / "fl_clock.md").write_text(render_clock(doc))
    return doc


def _secs(v) -> str:
    return "not reached" if v is None else f"{v:.0f}" if v >= 100 else f"{v:.1f}"


def _clock_table(t: dict) -> list[str]:
    ups = [u.replace("mbit", "") for u in UPLINKS]
    lines = ["| run | accuracy % | bits/entry | " + " | ".join(
        f"to target s, {u} Mbit/s" for u in ups) + " | total s, 10 Mbit/s | codec / compute | "
        "break-even Mbit/s |", "|---|---:|---:|" + "---:|" * (len(ups) + 3)]
    for label, *_ in CLOCK_RUNS:
        r = t["runs"].get(label)
        if r is None:
            lines.append(f"| {label} | not run (out of time on the shared machine) |"
                         + " |" * (len(ups) + 4))
            continue
        be = r["break_even_bit_s"]
        lines.append(
            f"| {label} | {_acc(r['final_accuracy'])} | {r['bits_per_entry']:.3f} | "
            + " | ".join(_secs(r["clock"][u]["time_to_target_s"]) for u in UPLINKS)
            + f" | {_secs(r['clock']['10mbit']['wallclock_s'])} | "
            f"{r['codec_over_compute']:.3f} | {'-' if be is None else f'{be / 1e6:,.0f}'} |")
    return lines


def _clock_checks(task: str, t: dict) -> list[str]:
    runs, out = t["runs"], []
    big = [r["codec_over_compute"] for r in runs.values() if r["encode_s"] > 0]
    if task != "mnist5k-mlp" and big:
        worst = max((r["codec_over_compute"], k) for k, r in runs.items())
        out.append(f"codec / compute <= 10 %: worst {100 * worst[0]:.1f} % ({worst[1]}); "
                   + ("met" if worst[0] <= 0.1 else "not met"))
    base = runs.get("none", {}).get("clock", {}).get("10mbit", {}).get("time_to_target_s")
    if base:
        fast = {k: r["clock"]["10mbit"]["time_to_target_s"] for k, r in runs.items()
                if k != "none"}
        ratios = ", ".join(f"{k} {v / base:.2f}" if v is not None else f"{k} never"
                           for k, v in fast.items())
        out.append(f"time to target at 10 Mbit/s over none's ({base:.1f} s): {ratios}")
    return out


def render_clock(doc: dict) -> str:
    ln = doc["links"]
    lines = ["# Federated training in wall-clock time under client links", "",
             "`python benchmarks/bench_fl.py --suite clock`, co3cli " + doc["version"] + ", "
             + doc["machine"] + ". One training run per task and compressor (links: uplink "
             f"{ln['uplink']} while training, downlink {ln['downlink']} the uplink, latency "
             f"{ln['latency']}, compute factor {ln['compute_factor']} per client, link seed "
             f"{ln['link_seed']}); the clock at 1, 10 and 100 Mbit/s is recomputed from its "
             "clients.csv (`co3cli.simulate.clock.recompute`). Target accuracy: "
             + doc["target_rule"] + ", the same for every compressor; time to target: the "
             "first evaluated round at or above it. Compute and codec times are measured "
             "wall times (perf_counter) on the loaded machine. codec / compute: (encode + "
             "decode) / client gradient time, median over rounds 1..R-1 of the same run. The clock "
             "uses one compute time per client step for all of a task's runs (the lowest of "
             "their median measured step times, stated per task), times each client's "
             "compute factor, so that the machine's load while a run trained does not decide "
             "the comparison; codec times stay as measured (inflated by the load, which counts "
             "against the compressors). Break-even: "
             "B* = 8 x (the none run's upload bytes - payload bytes) / (one client's encode + the server's "
             "decode of all clients), per round (medians); above B* the upload time saved is "
             "smaller than the codec time added.", ""]
    for task, t in doc["tasks"].items():
        c = t["config"]
        lines += [f"## {task}: {c['clients']} clients, {c['algorithm']}, batch {c['batch_size']}, "
                  f"lr {c['lr']:g}"
                  + (f", server momentum {c['momentum']:g}" if c.get("momentum") else "")
                  + f", {c['rounds']} rounds, eval every {c['eval_every']}; target "
                  + ("-" if t["target"] is None else f"{100 * t['target']:.1f} %")
                  + ("" if t["compute_time_s"] is None else
                     f"; clock compute time {1e3 * t['compute_time_s']:.0f} ms per client step"),
                  ""]
        lines += _clock_table(t) + [""] + [f"- {x}" for x in _clock_checks(task, t)]
        done = [r for r in t["runs"].values() if "load_after" in r]
        if done:
            load = [r["load_after"][0] for r in done]
            lines.append(f"- machine: 1-minute load {min(load):.1f}-{max(load):.1f} on "
                         f"{os.cpu_count()} cores after each run; a run took "
                         f"{min(r['cpu_s'] for r in done):.0f}-{max(r['cpu_s'] for r in done):.0f}"
                         f" s CPU in {min(r['wall_s'] for r in done):.0f}-"
                         f"{max(r['wall_s'] for r in done):.0f} s wall")
        lines += ["", f"![{task}](fl_clock_{task}.png)" if t["runs"] else "", ""]
    return "\n".join(lines) + "\n"


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
    ap.add_argument("--suite", action="append", choices=sorted(SUITES) + ["clock"],
                    help="suite(s) to run (default: all but clock)")
    ap.add_argument("--clock-task", action="append", choices=sorted(CLOCK_TASKS),
                    help="clock suite: the task(s) to train (default: all; none trained with "
                         "--clock-render)")
    ap.add_argument("--clock-run", action="append", help="clock suite: only these labels")
    ap.add_argument("--clock-rounds", type=int, help="clock suite: rounds (default: per task)")
    ap.add_argument("--clock-render", action="store_true",
                    help="clock suite: only rebuild fl_clock.* from the finished runs")
    ap.add_argument("--work", help="clock suite: the run folders (default: "
                                   "OUT/fl_clock_runs; finished runs are kept and skipped)")
    ap.add_argument("--rounds", type=int, default=200)
    ap.add_argument("--lr", type=float, default=0.3)
    ap.add_argument("--out", default=str(Path(__file__).parent / "results"))
    args = ap.parse_args(argv)

    from co3cli import __version__

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.suite and "clock" in args.suite:
        work = Path(args.work) if args.work else out / "fl_clock_runs"
        if not args.clock_render:
            run_clock(args.clock_task or list(CLOCK_TASKS), args.clock_run, work,
                      args.clock_rounds)
        print(render_clock(clock_results(work, out)))
        args.suite = [s for s in args.suite if s != "clock"]
        if not args.suite:
            return 0
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
