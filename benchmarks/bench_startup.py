"""Whole-command cost: ``co3 compress`` / ``decompress`` as processes, today vs new, vs a peer script.

    python benchmarks/bench_startup.py [--today /work/main] [--repeat 5] [--n 10000000] [--fl]
                                       [--out benchmarks/results/startup.md]

Every figure is the CPU time (user + system, ``RUSAGE_CHILDREN``) of a whole child process, the
median over ``--repeat`` interleaved repetitions (today, new, peer, today, new, peer, ...):

* ``today``: ``python -m co3cli ...`` run from ``--today`` (a checkout of main), ``new``: from this
  checkout (the working directory decides which ``co3cli`` is imported);
* ``peer``: the script below, the same I/O without co3cli: read the dump with h5py, scale each step
  by its absmax, cast to fp8-e5m2 with ml_dtypes, zstd-3 (python-zstandard), write one file; and
  back (zstd decompress, fp8 -> float32, unscale, write a dump with h5py). No torch, no numba.

Rows: ``co3 --help``; compress and decompress of a 10^7-entry one-layer dump (40 MB) and of the
bundled ``mnist5k-mlp.h5`` (4 MB), each as co3's CPU / the peer's CPU; the share of a whole
40 MB compress spent outside data work (data work = the same compress run a second time in one
warm process); with ``--fl`` the ``co3 simulate fl`` codec timings of round 0 and refit rounds
against a normal round (one run each of today and new; medians over rounds).
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

os.environ.setdefault("OMP_NUM_THREADS", "1")

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
PY = sys.executable

PEER = r'''
import json, struct, sys
import h5py, ml_dtypes, numpy as np, zstandard
FP8, FP8_MAX = ml_dtypes.float8_e5m2, np.float32(57344.0)
mode, src, dst = sys.argv[1:4]
if mode == "compress":
    cctx, head, bodies = zstandard.ZstdCompressor(level=3), [], []
    with h5py.File(src, "r") as f:
        for name, ds in f["grads"].items():
            x = ds[...]
            amax = np.abs(x).max(axis=1, keepdims=True)
            s = np.where(amax > 0, FP8_MAX / np.maximum(amax, np.float32(1e-38)), 1).astype(np.float32)
            body = cctx.compress((x * s).astype(FP8).tobytes())
            head.append([name, list(x.shape), s.ravel().tolist(), len(body)])
            bodies.append(body)
    meta = json.dumps(head).encode()
    with open(dst, "wb") as out:
        out.write(struct.pack("<I", len(meta)) + meta + b"".join(bodies))
else:
    dctx = zstandard.ZstdDecompressor()
    with open(src, "rb") as fin:
        blob = fin.read()
    (k,) = struct.unpack_from("<I", blob)
    pos = 4 + k
    with h5py.File(dst, "w") as f:
        for name, shape, s, size in json.loads(blob[4:pos]):
            q = np.frombuffer(dctx.decompress(blob[pos:pos + size]), FP8).reshape(shape)
            pos += size
            f.create_dataset("grads/" + name, data=q.astype(np.float32) / np.array(s, np.float32)[:, None])
'''

WARM = r'''
import sys, time
from co3cli.codec import compress
compress(sys.argv[1], sys.argv[2] + ".1", progress=False, coder="ans", model="gennorm-zi")
t = time.process_time()
compress(sys.argv[1], sys.argv[2] + ".2", progress=False, coder="ans", model="gennorm-zi")
print(time.process_time() - t)
'''


def cpu_of(cmd: list[str], cwd: Path) -> float:
    """CPU seconds (user + system) of one child process; raises if it fails."""
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    p = subprocess.run(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    if p.returncode:
        raise RuntimeError(f"{' '.join(cmd)} (in {cwd}) failed: {p.stderr[-2000:]}")
    return (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)


def interleaved(jobs: dict[str, tuple[list[str], Path]], repeat: int) -> dict[str, dict]:
    """Run every job once per repetition, in turn; median, min and max CPU seconds per job."""
    ts: dict[str, list[float]] = {k: [] for k in jobs}
    for _ in range(repeat):
        for k, (cmd, cwd) in jobs.items():
            ts[k].append(cpu_of(cmd, cwd))
    return {k: {"median": statistics.median(v), "min": min(v), "max": max(v)} for k, v in ts.items()}


# the fast coder, pinned: the file default (ctx, model auto: smaller, slower; README "Rate") is
# not what the issue-13 rows measured against zstd-3
FAST = ["--coder", "ans", "--model", "gennorm-zi"]


def make_big_dump(path: Path, n: int) -> None:
    sys.path.insert(0, str(HERE))
    from bench_pipeline import make_data

    from co3cli.dump import write_dump

    write_dump(path, {"layer": (make_data(n)[None, :], (n,))}, steps=[0])


def codec_rows(name: str, dump: Path, today: Path, tmp: Path, repeat: int) -> list[tuple]:
    peer = tmp / "peer.py"
    co3 = [PY, "-m", "co3cli"]
    jobs_c = {"today": (co3 + ["compress", str(dump), "-o", str(tmp / "t.co3"), "-q", *FAST], today),
              "new": (co3 + ["compress", str(dump), "-o", str(tmp / "n.co3"), "-q", *FAST], ROOT),
              "peer": ([PY, str(peer), "compress", str(dump), str(tmp / "p.bin")], ROOT)}
    jobs_d = {"today": (co3 + ["decompress", str(tmp / "t.co3"), "-o", str(tmp / "t.h5"), "-q"], today),
              "new": (co3 + ["decompress", str(tmp / "n.co3"), "-o", str(tmp / "n.h5"), "-q"], ROOT),
              "peer": ([PY, str(peer), "decompress", str(tmp / "p.bin"), str(tmp / "p.h5")], ROOT)}
    rows = []
    for what, jobs in (("compress", jobs_c), ("decompress", jobs_d)):
        for out in ("t.h5", "n.h5", "p.h5"):
            (tmp / out).unlink(missing_ok=True)
        r = interleaved(jobs, repeat)
        rows.append((f"`co3 {what}` {name}", r))
    return rows


def help_row(today: Path, repeat: int) -> tuple:
    cmd = [PY, "-m", "co3cli", "--help"]
    return ("`co3 --help`", interleaved({"today": (cmd, today), "new": (cmd, ROOT)}, repeat))


def outside_share(dump: Path, today: Path, tmp: Path, repeat: int, whole: dict) -> dict:
    """1 - (warm in-process compress CPU) / (whole command CPU), today and new."""
    warm = {}
    for who, cwd in (("today", today), ("new", ROOT)):
        ts = []
        for _ in range(max(3, repeat // 2)):
            p = subprocess.run([PY, "-c", WARM, str(dump), str(tmp / f"w-{who}.co3")], cwd=cwd,
                               capture_output=True, text=True, check=True)
            ts.append(float(p.stdout.split()[-1]))
        warm[who] = statistics.median(ts)
    return {who: (warm[who], 1.0 - warm[who] / whole[who]["median"]) for who in warm}


def fl_rounds(cwd: Path, tmp: Path, rounds: int) -> dict:
    import csv

    out = tmp / f"fl-{cwd.name}"
    subprocess.run([PY, "-m", "co3cli", "simulate", "fl", "--task", "mnist5k-mlp", "--clients", "4",
                    "--rounds", str(rounds), "-c", "co3", "--format", "fp4-co3", "--coder", "ans",
                    "--gamma", "0.7", "--seed", "0", "-o", str(out), "--overwrite"],
                   cwd=cwd, check=True, capture_output=True)
    rows = list(csv.DictReader(open(out / "metrics.csv")))
    codec = [float(r["t_compress"]) + float(r["t_decompress"]) for r in rows]
    grad = [float(r["t_compute"]) for r in rows]
    normal = [i for i in range(1, len(rows)) if i % 10]  # refit_every = 10: rounds 0, 10, 20 refit
    med = statistics.median(codec[i] for i in normal)
    return {"round0": codec[0] / med,
            "refit": statistics.median(codec[i] for i in range(10, len(rows), 10)) / med,
            "steady": statistics.median(codec[i] / grad[i] for i in normal)}


def fmt(r: dict) -> str:
    return f"{r['median']:.3f} s ({r['min']:.3f}-{r['max']:.3f})"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--today", type=Path, default=Path("/work/main"))
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--n", type=int, default=10_000_000)
    ap.add_argument("--fl", action="store_true")
    ap.add_argument("--fl-rounds", type=int, default=21)
    ap.add_argument("--out", type=Path, default=None)
    a = ap.parse_args()
    lines = [f"# Whole-command cost (bench_startup.py, --repeat {a.repeat}, --n {a.n})", "",
             "CPU seconds of whole processes (user+system), median (min-max) over interleaved "
             "repetitions; ratio = co3 / peer (<= 1.0: co3 at least as fast).", "",
             "| command | today | new | peer script | today / peer | new / peer |",
             "|---|---|---|---|---|---|"]
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        (tmp / "peer.py").write_text(PEER)
        big = tmp / "big.h5"
        make_big_dump(big, a.n)
        rows = [help_row(a.today, a.repeat)]
        rows += codec_rows(f"{a.n:.0e}-entry dump ({4 * a.n / 1e6:.0f} MB)", big, a.today, tmp,
                           a.repeat)
        rows += codec_rows("bundled mnist5k-mlp.h5 (4 MB)",
                           ROOT / "co3cli" / "sample_data" / "mnist5k-mlp.h5", a.today, tmp, a.repeat)
        share = outside_share(big, a.today, tmp, a.repeat, rows[1][1])
        imports = interleaved({"ml_dtypes": ([PY, "-c", "import ml_dtypes"], ROOT),
                               "numpy, h5py, zstandard": ([PY, "-c", "import numpy, h5py, zstandard"],
                                                          ROOT)}, a.repeat)
        fl = {who: fl_rounds(cwd, tmp, a.fl_rounds) for who, cwd in
              (("today", a.today), ("new", ROOT))} if a.fl else None
    for name, r in rows:
        if "peer" in r:
            p = r["peer"]["median"]
            lines.append(f"| {name} | {fmt(r['today'])} | {fmt(r['new'])} | {fmt(r['peer'])} | "
                         f"{r['today']['median'] / p:.2f}x | {r['new']['median'] / p:.2f}x |")
        else:
            lines.append(f"| {name} | {fmt(r['today'])} | {fmt(r['new'])} | - | - | - |")
    lines += ["", f"| {4 * a.n / 1e6:.0f} MB `co3 compress`: data work (warm, in-process) | today | new |", "|---|---|---|",
              f"| data work CPU | {share['today'][0]:.3f} s | {share['new'][0]:.3f} s |",
              f"| share of the whole command outside data work | {share['today'][1]:.0%} | "
              f"{share['new'][1]:.0%} |"]
    lines += ["", "| the peer's imports alone (whole process) | CPU |", "|---|---|"]
    lines += [f"| `import {k}` | {fmt(r)} |" for k, r in imports.items()]
    if fl:
        lines += ["", f"| `co3 simulate fl` mnist5k-mlp, 4 clients, {a.fl_rounds} rounds, co3 fp4-co3 "
                  "ans (one run each) | today | new |", "|---|---|---|"]
        for k, label in (("round0", "round 0 codec time / a normal round's"),
                         ("refit", "refit round codec time / a normal round's"),
                         ("steady", "steady codec time / client gradient time")):
            lines.append(f"| {label} | {fl['today'][k]:.2f} | {fl['new'][k]:.2f} |")
    text = "\n".join(lines) + "\n"
    print(text)
    if a.out:
        a.out.write_text(text)


if __name__ == "__main__":
    main()
