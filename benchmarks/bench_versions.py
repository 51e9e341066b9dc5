"""Two co3cli checkouts on the same dumps: default file bytes, and whole-command CPU time.

    python benchmarks/bench_versions.py --today /work/main --dumps NAME=PATH ... [--repeat 15]
                                        [--time NAME] [--md PATH]

For every dump and format (fp8-e5m2, fp4-co3; absmax; the default coder and model) the bytes of
``co3 compress``'s file made by ``--today`` (a checkout of main) and by this checkout, in
subprocesses (each run in its checkout's folder, so that checkout's ``co3cli`` is imported),
``SOURCE_DATE_EPOCH`` fixed. With ``--time NAME``: the CPU time (user + system of the child,
``RUSAGE_CHILDREN``) of whole ``co3 inspect`` and ``co3 decompress`` processes on that dump's
fp8 file made by each, medians over ``--repeat`` interleaved rounds (today, new, today, ...).
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FORMATS = ("fp8-e5m2", "fp4-co3")


def _env(root: str) -> dict:
    return {**os.environ, "PYTHONPATH": root, "OMP_NUM_THREADS": "1",
            "SOURCE_DATE_EPOCH": "1767225600"}


def co3(root: str, *args: str) -> float:
    """Run ``python -m co3cli *args`` with ``root``'s co3cli; its CPU seconds."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    quiet = ["-q"] if args[0] in ("compress", "decompress") else []
    subprocess.run([sys.executable, "-m", "co3cli", *args, *quiet], env=_env(root), check=True,
                   capture_output=True, cwd=root)  # (the working directory's co3cli first)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--today", required=True, help="a checkout of main")
    ap.add_argument("--dumps", nargs="+", required=True, metavar="NAME=PATH")
    ap.add_argument("--time", metavar="NAME", help="time inspect/decompress on this dump")
    ap.add_argument("--repeat", type=int, default=15)
    ap.add_argument("--md", metavar="PATH")
    args = ap.parse_args(argv)
    roots = {"today": args.today, "new": str(ROOT)}
    lines = ["| dump | format | today bytes | new bytes | new / today |",
             "|---|---|---:|---:|---:|"]
    with tempfile.TemporaryDirectory(prefix="bench-versions-") as tmp:
        files = {}
        for name, path in (d.split("=", 1) for d in args.dumps):
            path = os.path.abspath(path)
            for fmt in FORMATS:
                size = {}
                for tag, root in roots.items():
                    dst = files[name, fmt, tag] = os.path.join(tmp, f"{name}-{fmt}-{tag}.co3")
                    co3(root, "compress", path, "-o", dst, "--format", fmt)
                    size[tag] = os.path.getsize(dst)
                lines.append(f"| {name} | {fmt} | {size['today']:,} | {size['new']:,} | "
                             f"{size['new'] / size['today']:.4f} |")
                print(lines[-1], file=sys.stderr, flush=True)
        if args.time:
            cpu: dict = {}
            for _ in range(args.repeat):
                for tag, root in roots.items():
                    f = files[args.time, "fp8-e5m2", tag]
                    cpu.setdefault(("inspect", tag), []).append(co3(root, "inspect", f))
                    cpu.setdefault(("decompress", tag), []).append(
                        co3(root, "decompress", f, "-o", os.path.join(tmp, f"{tag}.h5")))
            lines += ["", f"Whole commands on {args.time} (fp8), CPU s, median (min-max) of "
                      f"{args.repeat} interleaved rounds:", "",
                      "| command | today | new | new / today |", "|---|---|---|---:|"]
            for what in ("inspect", "decompress"):
                t, n = cpu[what, "today"], cpu[what, "new"]
                lines.append(f"| `co3 {what}` | {statistics.median(t):.3f} ({min(t):.3f}-"
                             f"{max(t):.3f}) | {statistics.median(n):.3f} ({min(n):.3f}-"
                             f"{max(n):.3f}) | {statistics.median(n) / statistics.median(t):.3f} |")
    md = "\n".join(lines) + "\n"
    print(md)
    if args.md:
        Path(args.md).write_text(md)


if __name__ == "__main__":
    main()
