"""Hostile ``.co3`` files against every reader: are they refused cleanly, with bounded memory?

Generates N files (valid-CRC lies from ``tests/hostile.py``, bombs, nesting, truncations, spliced
layers, bit flips), runs ``co3 inspect --decode``, ``co3 decompress`` and ``co3 report`` on each
in a subprocess, and writes ``benchmarks/results/hostile.md``: files tried, refused cleanly,
tracebacks, silently wrong (exit 0 on a lying file), files left in the output folder, and the
peak memory (VmHWM) on the worst file.

    python benchmarks/bench_hostile.py [N]
"""

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
from hostile import base, build, corpus  # noqa: E402

RUN = ("import sys\nfrom co3cli.cli.app import main\nrc = 0\ntry:\n    main(sys.argv[1:])\n"
       "except SystemExit as e:\n    rc = e.code if isinstance(e.code, int) else 1\n"
       "hwm = [l for l in open('/proc/self/status') if l.startswith('VmHWM')]\n"
       "sys.stderr.write('\\nHWM %s\\n' % hwm[0].split()[1])\nsys.exit(rc)\n")


def files(n: int, rng) -> dict:
    out = dict(corpus())
    h, parts = base()
    good = build(h, parts)
    while len(out) < n:
        k = len(out)
        kind = ("trunc", "flip", "splice")[k % 3]
        if kind == "trunc":
            out[f"trunc_{k}.co3"] = good[: int(rng.integers(1, len(good)))]
        elif kind == "flip":
            b = bytearray(good)
            b[int(rng.integers(0, len(b)))] ^= int(rng.integers(1, 256))
            out[f"flip_{k}.co3"] = bytes(b)
        else:
            out[f"splice_{k}.co3"] = build(h, [parts[1], parts[0]])
    return out


def main(n: int = 40) -> None:
    rng = np.random.default_rng(0)
    stats = {"tried": 0, "refused": 0, "traceback": 0, "silent": 0, "left": 0}
    worst = (0, "")
    env = dict(os.environ, OMP_NUM_THREADS="1")
    with tempfile.TemporaryDirectory() as d:
        d = Path(d)
        for name, data in files(n, rng).items():
            p = d / name
            p.write_bytes(data)
            stats["tried"] += 1
            clean = True
            for cmd in (["inspect", "--decode"], ["decompress", "-o", str(d / "out" / "x.h5")],
                        ["report"]):
                (d / "out").mkdir(exist_ok=True)
                r = subprocess.run([sys.executable, "-c", RUN, cmd[0], str(p), *cmd[1:]], cwd=ROOT,
                                   capture_output=True, text=True, env=env, timeout=300)
                err = r.stderr.rsplit("\nHWM ", 1)
                hwm = int(err[1]) if len(err) == 2 else 0
                worst = max(worst, (hwm, f"{name} ({cmd[0]})"))
                if "Traceback" in err[0]:
                    stats["traceback"] += 1
                    clean = False
                # the model fit in a layer's metadata is read by the report only
                exempt = name == "bad_meta_fit.co3" and cmd[0] != "report"
                if r.returncode == 0 and not exempt:
                    stats["silent"] += 1
                    clean = False
                left = os.listdir(d / "out")
                stats["left"] += 0 if exempt else len(left)
                for f in left:
                    (d / "out" / f).unlink()
            stats["refused"] += clean
            p.unlink()
    md = ["# Hostile .co3 files (benchmarks/bench_hostile.py)", "",
          "Readers: `co3 inspect --decode`, `co3 decompress`, `co3 report`, each in a subprocess.", "",
          "| measure | value |", "|---|---|",
          f"| files tried | {stats['tried']} |", f"| refused cleanly by every reader | {stats['refused']} |",
          f"| tracebacks | {stats['traceback']} |",
          f"| silently wrong (exit 0 on a lying file) | {stats['silent']} |",
          f"| files left behind in the output folder | {stats['left']} |",
          f"| peak memory (VmHWM) on the worst file | {worst[0] / 1024:.0f} MiB: {worst[1]} |", ""]
    text = "\n".join(md)
    print(text)
    (ROOT / "benchmarks" / "results" / "hostile.md").write_text(text)


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 40)
