"""Peak memory of ``co3 capture`` on the synthetic ResNet does not grow with the steps recorded.

    python benchmarks/bench_capture_memory.py [--steps 5 20 60] [--batch-size 32] [--tmp DIR]

Claim under test (``co3cli.capture``): rows go to disk as they are made, so memory is bounded
by one step whatever the number of steps. ``co3 capture --task synthetic-cifar-resnet`` records
all 2.78 M parameters (11.1 MB of float32) at every step; keeping the steps in RAM would add
that much per step.

1. For each ``--steps`` N, run ``co3 capture --task synthetic-cifar-resnet --steps N --every 1
   -o DUMP -q`` as its own process and read its peak RSS (``/usr/bin/time -v`` when present,
   else a fork + ``os.wait4`` wrapper; see ``bench_memory.py``).
2. Growth per extra step = (RSS(N_max) - RSS(N_min)) / (N_max - N_min); it passes when that is
   under 25 % of one step's gradient bytes (keeping the steps would be 100 %). The peak RSS of
   one run jitters by some tens of MB (allocator caches, oneDNN scratch buffers: an in-process
   trace shows the current RSS flat at ~590 MB from step 0 to 45), hence the wide N range.
3. The same for ``--epoch-average`` (one running float64 sum per layer: a constant 22 MB).

Writes ``benchmarks/results/capture_memory.md`` and ``capture_memory.json``; removes the dumps.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_memory import MB, RESULTS, co3_argv, machine, run_measured  # noqa: E402

TASK = "synthetic-cifar-resnet"
PARAMS = 2_777_674  # parameters of the task's ResNet (checked against the dump below)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, nargs="+", default=[5, 20, 60])
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--tmp", type=Path, default=None, help="folder for the dumps")
    ap.add_argument("--json", action="store_true", help="print JSON instead of the table")
    args = ap.parse_args(argv)
    steps = sorted(set(args.steps))
    if len(steps) < 2:
        ap.error("give at least two --steps values")
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    step_mb = PARAMS * 4 / MB
    tmp = Path(tempfile.mkdtemp(prefix="co3-bench-capture-", dir=args.tmp))
    rows = []
    try:
        for mode, extra in (("per-step", []), ("epoch-mean", ["--epoch-average"])):
            for n in steps:
                out = tmp / f"{mode}-{n}.h5"
                r = run_measured([*co3_argv(), "capture", "--task", TASK, "--steps", str(n),
                                  "--batch-size", str(args.batch_size), "--every", "1", *extra,
                                  "-o", str(out), "--json"], env)
                if r["rc"] != 0:
                    raise SystemExit(f"co3 capture failed: {r['stderr'][-2000:]}")
                s = json.loads(r["stdout"])
                assert s["entries_per_step"] == PARAMS, s["entries_per_step"]
                rows.append({"mode": mode, "steps": n, "rows": s["steps_recorded"],
                             "dump_mb": out.stat().st_size / MB, "wall_s": r["wall_s"],
                             "rss_mb": r["rss_mb"],
                             "in_ram_if_kept_mb": s["steps_recorded"] * step_mb,
                             "tool": r["tool"]})
                out.unlink()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    verdicts = []
    for mode in ("per-step", "epoch-mean"):
        lo = next(r for r in rows if r["mode"] == mode and r["steps"] == steps[0])
        hi = next(r for r in rows if r["mode"] == mode and r["steps"] == steps[-1])
        per_step = (hi["rss_mb"] - lo["rss_mb"]) / (steps[-1] - steps[0])
        verdicts.append({"mode": mode, "growth_mb_per_step": per_step, "step_mb": step_mb,
                         "ok": per_step < 0.25 * step_mb})
    result = {"task": TASK, "batch_size": args.batch_size, "steps": steps, "rows": rows,
              "verdicts": verdicts, "machine": machine(),
              "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
              "command": " ".join(["python", "benchmarks/bench_capture_memory.py",
                                   *(argv if argv is not None else sys.argv[1:])])}
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "capture_memory.json").write_text(json.dumps(result, indent=1) + "\n")
    md = fmt_md(result)
    (RESULTS / "capture_memory.md").write_text(md)
    print(json.dumps(result, indent=1) if args.json else md)
    return 0 if all(v["ok"] for v in verdicts) else 1


def fmt_md(res: dict) -> str:
    m = res["machine"]
    lines = [
        "# co3 capture: peak RSS against steps recorded (synthetic ResNet)",
        "",
        f"`{res['command']}`, {res['date']}, Python {m['python']}, {m['platform']}, "
        f"{m['cpus']} CPUs, OMP_NUM_THREADS={m['OMP_NUM_THREADS']}, co3cli {m['co3cli']} "
        f"({m['git']}). Task `{res['task']}` (2.78 M parameters, 11.1 MB of float32 gradient "
        f"per step), batch {res['batch_size']}, every step recorded, peak RSS by "
        f"{res['rows'][0]['tool']}.",
        "",
        "| reduction | steps | rows | dump MB | kept in RAM would be MB | peak RSS MB | wall s |",
        "|---|--:|--:|--:|--:|--:|--:|",
    ]
    for r in res["rows"]:
        lines.append(f"| {r['mode']} | {r['steps']} | {r['rows']} | {r['dump_mb']:.1f} | "
                     f"{r['in_ram_if_kept_mb']:.1f} | {r['rss_mb']:.0f} | {r['wall_s']:.1f} |")
    lines += ["", "| reduction | RSS growth MB per extra step | one step MB | bounded (< 25 %) |",
              "|---|--:|--:|---|"]
    for v in res["verdicts"]:
        lines.append(f"| {v['mode']} | {v['growth_mb_per_step']:+.2f} | {v['step_mb']:.1f} | "
                     f"{'yes' if v['ok'] else 'NO'} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
