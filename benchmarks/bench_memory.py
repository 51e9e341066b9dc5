"""Peak memory of ``co3 compress`` / ``co3 decompress`` on a dump bigger than a layer budget.

    python benchmarks/bench_memory.py [--size-mb 520] [--tmp DIR] [--json]

Claim under test (``co3cli.codec``): memory stays at a few times the largest layer, whatever
the dump's total size. Budget: ``3 x largest layer dataset + 450 MB`` per process.

1. Write a synthetic ``co3.gradients/1`` dump of ``--size-mb`` MB (default 520: 5 layers x
   26 steps x 1e6 entries, 104 MB of float32 per layer dataset), GenNorm-like (beta 0.8) with
   15 % exact zeros, one layer at a time with ``DumpWriter.add_layer``.
2. Run, each as its own process, ``co3 compress DUMP -o X.co3`` for every ``--coders`` entry and
   ``co3 decompress X.co3 -o Y.h5`` for each result, and read the peak RSS of that process
   (``/usr/bin/time -v`` when present, else a small fork + ``os.wait4`` wrapper).
3. For reference, the peak RSS of ``python -c pass``, ``python -c "import torch"`` and
   ``python -c "import co3cli.codec, numba"``.

Throughput = MB of float32 gradients (entries x 4 bytes, 1 MB = 1e6 bytes) per wall second.
Writes ``benchmarks/results/memory.md`` and ``memory.json`` and removes its big temporary files.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402

MB = 1e6
BASE_MB = 450.0
TIME_BIN = "/usr/bin/time"
RESULTS = Path(__file__).resolve().parent / "results"


def gn_layer(rng, steps: int, numel: int, beta: float = 0.8, p0: float = 0.15) -> np.ndarray:
    """float32 (steps, numel): |x| ~ scale * Gamma(1/beta)^(1/beta), random sign, p0 zeros."""
    out = np.empty((steps, numel), dtype=np.float32)
    scale = 10.0 ** rng.uniform(-4, -2)
    for t in range(steps):  # row by row: temporaries stay at one row of float64
        a = rng.standard_gamma(1.0 / beta, numel) ** (1.0 / beta)
        a *= np.where(rng.random(numel) < 0.5, -scale, scale)
        a[rng.random(numel) < p0] = 0.0
        out[t] = a
    return out


def write_dump(path: Path, layers: int, steps: int, numel: int, seed: int = 0) -> float:
    """Write the synthetic dump one layer at a time; returns seconds taken."""
    from co3cli.dump import DumpWriter

    t0 = time.perf_counter()
    rng = np.random.default_rng(seed)
    with DumpWriter(path, {"task": "bench_memory", "seed": seed}) as w:
        for i in range(layers):
            g = gn_layer(rng, steps, numel)
            w.add_layer(f"layer{i}.weight", g, (numel,))
            del g
        w.set_steps(np.arange(steps, dtype=np.int64) * 10)
    return time.perf_counter() - t0


def co3_argv() -> list[str]:
    exe = Path(sys.executable).with_name("co3")
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "co3cli"]


# Fallback without /usr/bin/time: a small middle process forks the command and reports that
# child's own ru_maxrss. Not os.wait4 on a direct child of this (big) process: on Linux a
# vfork/fork child starts from the parent's memory map and ru_maxrss keeps that high-water
# mark across exec, so it would report this process's peak, not the command's.
_WRAP = """import os, sys
pid = os.fork()
if pid == 0:
    os.execvp(sys.argv[1], sys.argv[1:])
_, status, ru = os.wait4(pid, 0)
sys.stderr.write("\\nbench-memory-maxrss %d\\n" % ru.ru_maxrss)
sys.exit(os.waitstatus_to_exitcode(status))
"""


def run_measured(argv: list[str], env: dict, use_time: bool = True) -> dict:
    """Run ``argv`` as one process; its exit code, wall seconds, peak RSS (MB) and output."""
    use_time = use_time and os.access(TIME_BIN, os.X_OK)
    t0 = time.perf_counter()
    if use_time:
        r = subprocess.run([TIME_BIN, "-v", *argv], env=env, capture_output=True, text=True)
        wall = time.perf_counter() - t0
        m = re.search(r"Maximum resident set size \(kbytes\): (\d+)", r.stderr)
        if m is None:
            raise RuntimeError(f"no RSS in {TIME_BIN} output: {r.stderr[-500:]}")
        rss_kib = int(m.group(1))
        err = r.stderr[: r.stderr.rfind("\tCommand being timed")].strip()
        return {"rc": r.returncode, "wall_s": wall, "rss_mb": rss_kib * 1024 / MB,
                "stdout": r.stdout, "stderr": err, "tool": f"{TIME_BIN} -v"}
    r = subprocess.run([sys.executable, "-c", _WRAP, *argv], env=env, capture_output=True,
                       text=True)
    wall = time.perf_counter() - t0
    err, _, tail = r.stderr.rpartition("bench-memory-maxrss ")
    scale = 1 if sys.platform == "darwin" else 1024  # ru_maxrss: bytes on macOS, KiB on Linux
    return {"rc": r.returncode, "wall_s": wall, "rss_mb": int(tail) * scale / MB,
            "stdout": r.stdout, "stderr": err.strip(), "tool": "fork + os.wait4"}


def machine() -> dict:
    import numba

    import co3cli

    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                                text=True, cwd=Path(__file__).parent).stdout.strip() or None
    except OSError:
        commit = None
    return {"python": platform.python_version(), "platform": platform.platform(),
            "cpus": os.cpu_count(), "numpy": np.__version__, "numba": numba.__version__,
            "co3cli": co3cli.__version__, "git": commit,
            "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS")}


def fmt_table(rows: list[dict]) -> str:
    cols = [("step", "step", ""), ("wall_s", "wall s", ".2f"), ("lib_seconds", "in-lib s", ".2f"),
            ("mb_per_s", "MB/s", ".1f"), ("out_mb", "output MB", ".1f"),
            ("bpe", "bits/entry", ".3f"),
            ("rss_mb", "peak RSS MB", ".0f"), ("budget_mb", "budget MB", ".0f"),
            ("ok", "within", "")]
    cells = [[("-" if r.get(k) is None else format(r[k], f) if f else str(r[k]))
              for k, _, f in cols] for r in rows]
    widths = [max(len(t), *(len(c[i]) for c in cells)) for i, (_, t, _) in enumerate(cols)]
    line = lambda vals: "| " + " | ".join(  # noqa: E731
        v.ljust(w) if i == 0 else v.rjust(w) for i, (v, w) in enumerate(zip(vals, widths))) + " |"
    sep = "|" + "|".join("-" * (w + 1) + (":" if i else "-") for i, w in enumerate(widths)) + "|"
    return "\n".join([line([t for _, t, _ in cols]), sep] + [line(c) for c in cells])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size-mb", type=float, default=520.0,
                    help="dump size in MB of float32 gradients (default 520)")
    ap.add_argument("--layers", type=int, default=5)
    ap.add_argument("--steps", type=int, default=26)
    ap.add_argument("--format", default="fp8-e5m2")
    ap.add_argument("--coders", default="ctx,ans,huffman", help="comma-separated coder ids")
    ap.add_argument("--tmp", type=Path, default=None, help="folder for the big temporary files")
    ap.add_argument("--out", type=Path, default=RESULTS, help="folder for memory.md/.json")
    ap.add_argument("--keep", action="store_true", help="keep the temporary files")
    ap.add_argument("--json", action="store_true", help="print JSON instead of a table")
    ap.add_argument("--no-time", action="store_true",
                    help="measure with the fork + wait4 wrapper even if /usr/bin/time exists")
    args = ap.parse_args(argv)
    if args.layers < 1 or args.steps < 1 or args.size_mb <= 0:
        ap.error("--layers, --steps and --size-mb must be positive")
    coders = [c.strip() for c in args.coders.split(",") if c.strip()]
    if not coders:
        ap.error("--coders: give at least one coder id")
    numel = max(1, round(args.size_mb * MB / (args.layers * args.steps * 4)))
    layer_mb = args.steps * numel * 4 / MB
    dump_mb = layer_mb * args.layers
    budget = 3 * layer_mb + BASE_MB

    base = args.tmp if args.tmp is not None else Path(tempfile.gettempdir())
    base.mkdir(parents=True, exist_ok=True)
    free_mb = shutil.disk_usage(base).free / MB
    if free_mb < 2.5 * dump_mb + 100:
        ap.error(f"{base} has {free_mb:.0f} MB free; need about {2.5 * dump_mb + 100:.0f} MB")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "NUMBA_NUM_THREADS": "1"}
    work = Path(tempfile.mkdtemp(prefix="co3-bench-memory-", dir=base))
    log = (lambda *a: None) if args.json else (lambda *a: print(*a, file=sys.stderr, flush=True))
    rows: list[dict] = []
    refs_co3: list[dict] = []
    try:
        refs = {}
        for label, code in (("python -c pass", "pass"), ("import torch", "import torch"),
                            ("import co3cli.codec, numba", "import co3cli.codec, numba")):
            r = run_measured([sys.executable, "-c", code], env, not args.no_time)
            refs[label] = {"rss_mb": r["rss_mb"], "wall_s": r["wall_s"], "rc": r["rc"]}
            log(f"reference {label!r}: {r['rss_mb']:.0f} MB, {r['wall_s']:.2f} s")

        dump = work / "dump.h5"
        log(f"writing {dump_mb:.0f} MB dump ({args.layers} layers x {args.steps} steps x "
            f"{numel} entries) to {work}")
        gen_s = write_dump(dump, args.layers, args.steps, numel)
        log(f"  {gen_s:.1f} s, {dump.stat().st_size / MB:.0f} MB on disk")

        def step(name, coder, argv, out_path, size_mb=dump_mb, into=rows):
            r = run_measured(co3_argv() + argv, env, not args.no_time)
            if r["rc"] != 0:
                raise RuntimeError(f"{name} failed (exit {r['rc']}): {r['stderr'][-2000:]}")
            res = json.loads(r["stdout"])
            row = {"step": name, "coder": coder, "wall_s": r["wall_s"],
                   "mb_per_s": size_mb / r["wall_s"], "rss_mb": r["rss_mb"],
                   "budget_mb": budget, "ok": r["rss_mb"] <= budget,
                   "out_mb": out_path.stat().st_size / MB, "lib_seconds": res.get("seconds"),
                   "bpe": res.get("bpe") if name.startswith("compress") else None,
                   "tool": r["tool"]}
            into.append(row)
            log(f"{name}: {row['wall_s']:.2f} s, {row['rss_mb']:.0f} MB peak RSS "
                f"(budget {budget:.0f} MB), output {row['out_mb']:.1f} MB")
            return row

        for coder in coders:
            x = work / f"x-{coder}.co3"
            step(f"compress {coder}", coder, ["compress", str(dump), "-o", str(x), "--format",
                                              args.format, "--coder", coder, "-q", "--json"], x)
        for coder in coders:
            x, y = work / f"x-{coder}.co3", work / f"y-{coder}.h5"
            step(f"decompress {coder}", coder, ["decompress", str(x), "-o", str(y), "-q",
                                                "--json"], y)
            if not args.keep:
                y.unlink()

        # Where it goes: a tiny dump gives the fixed cost (imports, JIT caches); a one-layer
        # dump of the same layer size gives one layer's cost with no layer-to-layer overlap.
        first = coders[0]
        for label, layers, steps_, numel_ in (("tiny", 1, 1, 1000), ("1 layer", 1, args.steps,
                                                                     numel)):
            src = work / f"ref-{label.replace(' ', '')}.h5"
            write_dump(src, layers, steps_, numel_, seed=1)
            size = layers * steps_ * numel_ * 4 / MB
            x, y = src.with_suffix(".co3"), src.with_suffix(".out.h5")
            step(f"compress {first} ({label})", first, ["compress", str(src), "-o", str(x),
                 "--format", args.format, "--coder", first, "-q", "--json"], x, size, refs_co3)
            step(f"decompress {first} ({label})", first, ["decompress", str(x), "-o", str(y),
                 "-q", "--json"], y, size, refs_co3)
            for q in (src, x, y):
                q.unlink()
    finally:
        if args.keep:
            log(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)

    analysis = {}
    for kind in ("compress", "decompress"):
        full = next((r for r in rows if r["step"] == f"{kind} {coders[0]}"), None)
        tiny = next((r for r in refs_co3 if r["step"].endswith("(tiny)") and
                     r["step"].startswith(kind)), None)
        one = next((r for r in refs_co3 if r["step"].endswith("(1 layer)") and
                    r["step"].startswith(kind)), None)
        if full and tiny and one:
            analysis[kind] = {
                "fixed_mb": tiny["rss_mb"],
                "one_layer_x": (one["rss_mb"] - tiny["rss_mb"]) / layer_mb,
                "all_layers_x": (full["rss_mb"] - tiny["rss_mb"]) / layer_mb,
                "growth_mb": full["rss_mb"] - one["rss_mb"]}
    result = {
        "benchmark": "bench_memory",
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "machine": machine(),
        "config": {"size_mb": args.size_mb, "layers": args.layers, "steps": args.steps,
                   "numel": numel, "format": args.format, "coders": coders,
                   "layer_dataset_mb": layer_mb, "dump_mb": dump_mb,
                   "budget_mb": budget, "budget_rule": f"3 x largest layer + {BASE_MB:.0f} MB",
                   "generate_s": gen_s},
        "reference_rss_mb": refs,
        "steps": rows,
        "reference_co3": refs_co3,
        "per_layer": analysis,
        "all_within_budget": all(r["ok"] for r in rows),
    }
    table = fmt_table(rows)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "memory.json").write_text(json.dumps(result, indent=1) + "\n")
    ref_lines = "\n".join(f"| `{k}` | {v['rss_mb']:.0f} | {v['wall_s']:.2f} |"
                          for k, v in refs.items())
    m = result["machine"]
    (args.out / "memory.md").write_text(
        f"# Peak memory of co3 compress / decompress\n\n"
        f"`python benchmarks/bench_memory.py --size-mb {args.size_mb:g}` on {m['cpus']} CPU(s), "
        f"Python {m['python']}, numpy {m['numpy']}, numba {m['numba']}, co3cli {m['co3cli']} "
        f"(git {m['git']}), OMP_NUM_THREADS=1, {result['created']}.\n\n"
        f"Dump: {args.layers} layers x {args.steps} steps x {numel} entries (GenNorm-like, beta "
        f"0.8, 15 % zeros), {dump_mb:.0f} MB of float32; largest layer dataset {layer_mb:.0f} MB; "
        f"format {args.format}. Budget per process: 3 x {layer_mb:.0f} + {BASE_MB:.0f} = "
        f"{budget:.0f} MB. Peak RSS by `{rows[0]['tool'] if rows else '-'}`; MB = 1e6 bytes; "
        f"MB/s = MB of float32 gradients per wall second (process start included); in-lib s = "
        f"the `seconds` the command reports (imports and process start excluded).\n\n"
        f"{table}\n\n"
        f"Reference runs: a tiny dump (fixed cost) and a one-layer dump of the same layer "
        f"size:\n\n{fmt_table(refs_co3)}\n\n"
        + "".join(f"- {k}: fixed {a['fixed_mb']:.0f} MB; one layer adds "
                  f"{a['one_layer_x']:.2f} x layer; all {args.layers} layers add "
                  f"{a['all_layers_x']:.2f} x layer ({a['growth_mb']:+.0f} MB over one layer)\n"
                  for k, a in analysis.items()) + "\n"
        f"Reference processes (peak RSS MB, wall s):\n\n| command | RSS MB | wall s |\n"
        f"|---|---:|---:|\n{ref_lines}\n\n"
        f"All within budget: **{result['all_within_budget']}**.\n")
    if args.json:
        print(json.dumps(result, indent=1))
    else:
        print(table)
        print()
        print(fmt_table(refs_co3))
        for k, a in analysis.items():
            print(f"{k}: fixed {a['fixed_mb']:.0f} MB; 1 layer adds {a['one_layer_x']:.2f} x "
                  f"layer; {args.layers} layers add {a['all_layers_x']:.2f} x layer")
        print("\nreference RSS: " + ", ".join(f"{k} {v['rss_mb']:.0f} MB" for k, v in refs.items()))
        print(f"wrote {args.out / 'memory.md'} and memory.json")
    return 0 if result["all_within_budget"] else 1


if __name__ == "__main__":
    sys.exit(main())
