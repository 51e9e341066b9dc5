"""``ctx`` model version 4 (magnitude contexts started from the prior near their prediction)
against version 3, on every dump of ``bench_rate.py --check``: whole ``.co3`` files of the
default ``co3 compress`` (coder ``ctx``, model ``auto``; every byte counted) with
``model_version`` 3 and 4, next to zstd-3/-19 and lzma-6 over the same symbol bytes (uint8,
step by step, layer by layer, as the check), and the decode/encode CPU time of the two
versions (process time, interleaved A/B, medians) on large layers.

    python benchmarks/bench_ctx4.py [--keep DIR] [--skip-fl] [--md PATH] [--json PATH]

Dumps: the check's (bundled ``mnist5k-mlp`` / ``digits-mlp``, captured CNN, long MLP,
ResNet, the held-out ``CHECK_TASKS`` / ``TINY_TASKS`` captures and the FL
``transmitted.h5`` streams), captured into ``--keep DIR`` when missing there.  Version 4's
parameters were chosen on ``TUNED`` (whole files and a payload-level harness, fp8 and fp4);
the others are held out.  ``--render`` rewrites the markdown from the JSON.
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse  # noqa: E402
import json  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402


ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # this checkout's co3cli
sys.path.insert(0, str(ROOT / "benchmarks"))
FORMATS = ("fp8-e5m2", "fp4-co3")
TUNED = ("mnist5k-mlp", "digits-mlp", "mnist5k-cnn", "digits-resnet-tiny", "stdlib-charlm-tiny",
         "digits-cnn-3steps", "digits-resnet-tiny-3steps", "digits-cnn-far")
CAPTURED = [("mnist5k-cnn", "mnist5k-cnn", 100, 10), ("mnist5k-mlp-long", "mnist5k-mlp", 200, 1),
            ("digits-resnet-tiny", "digits-resnet-tiny", 60, 6),
            ("stdlib-charlm-tiny", "stdlib-charlm-tiny", 60, 6),
            ("mnist5k-resnet", "mnist5k-resnet", 60, 10), ("digits-cnn-3steps", "digits-cnn", 3, 1),
            ("digits-resnet-tiny-3steps", "digits-resnet-tiny", 3, 1),
            ("digits-cnn-far", "digits-cnn", 200, 40)]


def dumps(tmp: str, fl: bool) -> list:
    """(name, path) of every check dump, capturing what ``tmp`` lacks."""
    import bench_rate as br
    from co3cli.data import SAMPLE_DATA_DIR

    out = [("mnist5k-mlp", str(SAMPLE_DATA_DIR / "mnist5k-mlp.h5")),
           ("digits-mlp", str(SAMPLE_DATA_DIR / "digits-mlp.h5"))]
    for task in CAPTURED:
        path = os.path.join(tmp, f"{task[0]}.h5")
        if not os.path.exists(path):
            br.capture_dumps(tmp, [task])
        out.append((task[0], path))
    if fl:
        paths = [(n, os.path.join(tmp, n, "transmitted.h5")) for n, _ in br.FL_RUNS]
        if not all(os.path.exists(p) for _, p in paths):
            br.fl_check_dumps(tmp, False)
        out += paths
    return out


def rate_row(name: str, path: str, fmt: str, tmp: str) -> dict:
    from bench_ctx2 import peer_bpe

    from co3cli.codec import compress

    row = {"dump": name, "format": fmt, "held_out": name not in TUNED}
    for v in (3, 4):
        r = compress(path, os.path.join(tmp, "x.co3"), format=fmt,
                     coder_params={"model_version": v}, threads=1)
        row[f"v{v}"] = r.bpe
        row[f"v{v}_payload"] = 8 * sum(lay["payload_bytes"] for lay in r.layers) / r.entries
        row["entries"] = r.entries
    row.update(peer_bpe(path, fmt))
    row["v4/v3"] = row["v4"] / row["v3"]
    for v in (3, 4):
        for peer in ("zstd-3", "zstd-19", "lzma-6"):
            row[f"v{v}/{peer}"] = row[f"v{v}"] / row[peer]
    print(f"{name} {fmt}: v3 {row['v3']:.4f} v4 {row['v4']:.4f} ({row['v4/v3']:.4f}); "
          f"v4/lzma-6 {row['v4/lzma-6']:.3f} v4/zstd-19 {row['v4/zstd-19']:.3f}", flush=True)
    return row


def speed_rows(cases, reps: int = 9) -> list[dict]:
    """Decode and encode CPU time of version 4 / version 3 on (name, path, layer) steps."""
    from co3cli.coding import get_coder, row_length
    from co3cli.dump import Dump
    from co3cli.formats import get_grid
    from co3cli.tables import scale_and_quantize

    out = []
    for name, path, layer in cases:
        with Dump.open(path) as d:
            data, shape = d.read_layer(layer)[:4], d.shape(layer)
        for fmt in FORMATS:
            _, sym, counts = scale_and_quantize(data, get_grid(fmt), None)
            cols = row_length(shape, sym.shape[1])
            tabs = {v: get_coder("ctx", model_version=v).table_from_weights(counts + 0.5)
                    for v in (3, 4)}
            pays = {v: [t.encode(r, cols=cols) for r in sym] for v, t in tabs.items()}
            dec = {3: [], 4: []}
            enc = {3: [], 4: []}
            for rep in range(reps + 1):
                for v in ((3, 4) if rep % 2 else (4, 3)):
                    t0 = time.process_time()
                    for p in pays[v]:
                        tabs[v].decode(p, sym.shape[1], cols=cols)
                    t1 = time.process_time()
                    for r in sym:
                        tabs[v].encode(r, cols=cols)
                    if rep:  # the first round warms up
                        dec[v].append(t1 - t0)
                        enc[v].append(time.process_time() - t1)
            row = {"dump": name, "layer": layer, "format": fmt, "entries": int(sym.size)}
            for what, t in (("decode", dec), ("encode", enc)):
                m = {v: statistics.median(x) for v, x in t.items()}
                ratios = [b / a for a, b in zip(t[3], t[4])]
                row.update({f"{what}_v3_ms": 1e3 * m[3], f"{what}_v4_ms": 1e3 * m[4],
                            f"{what}_ratio": m[4] / m[3],
                            f"{what}_range": [min(ratios), max(ratios)]})
            print(f"{name} {layer} {fmt}: decode {row['decode_ratio']:.3f} "
                  f"encode {row['encode_ratio']:.3f}", flush=True)
            out.append(row)
    return out


def render(rows, speed, load) -> str:
    L = ["# ctx model version 4 vs version 3 (the default `co3 compress`, whole files)", "",
         "Command: `python benchmarks/bench_ctx4.py --keep DIR`. Bits/entry of whole `.co3` files "
         "(`co3 compress --format F`, coder and model left to it: `ctx`, `auto`; "
         "`model_version` 3 or 4), every byte counted; peers over the same uint8 symbols, "
         "step by step, layer by layer (as `bench_rate.py --check`). *held out*: not used to "
         "choose version 4's parameters.", "",
         "| dump | format | entries | v3 | **v4** | v4/v3 | zstd-3 | zstd-19 | lzma-6 | v3/zstd-3 "
         "| **v4/zstd-3** | v3/zstd-19 | **v4/zstd-19** | v3/lzma-6 | **v4/lzma-6** |",
         "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        name = r["dump"] + (" *(held out)*" if r["held_out"] else "")
        L.append(f"| {name} | {r['format']} | {r['entries']:,} | {r['v3']:.3f} | **{r['v4']:.3f}** "
                 f"| {r['v4/v3']:.4f} | {r['zstd-3']:.3f} | {r['zstd-19']:.3f} | {r['lzma-6']:.3f} | "
                 + " | ".join(f"{r[f'v3/{p}']:.3f} | **{r[f'v4/{p}']:.3f}**"
                              for p in ("zstd-3", "zstd-19", "lzma-6")) + " |")
    if not rows:
        return "\n".join(L[:1] + ["", "(CPU times only)", ""] + speed_table(speed, load)) + "\n"
    worst = max(rows, key=lambda r: r["v4/v3"])
    held = [r for r in rows if r["held_out"]]
    L += ["", f"Worst v4/v3: **{worst['v4/v3']:.4f}** ({worst['dump']} {worst['format']}); "
          f"best: {min(r['v4/v3'] for r in rows):.4f}; median {statistics.median(r['v4/v3'] for r in rows):.4f}"
          + (f"; held out only: worst {max(r['v4/v3'] for r in held):.4f}, median "
             f"{statistics.median(r['v4/v3'] for r in held):.4f}" if held else "") + "."]
    for v in (3, 4):
        L.append(f"- v{v}: <= zstd-3 on {sum(r[f'v{v}/zstd-3'] <= 1 for r in rows)} / {len(rows)}; "
                 f"<= 0.85x lzma-6 on {sum(r[f'v{v}/lzma-6'] <= 0.85 for r in rows)}; "
                 f"<= 0.9x zstd-19 on {sum(r[f'v{v}/zstd-19'] <= 0.9 for r in rows)}; worst "
                 f"/zstd-3 {max(r[f'v{v}/zstd-3'] for r in rows):.3f}, /lzma-6 "
                 f"{max(r[f'v{v}/lzma-6'] for r in rows):.3f}, /zstd-19 "
                 f"{max(r[f'v{v}/zstd-19'] for r in rows):.3f}")
    return "\n".join(L + [""] + speed_table(speed, load)) + "\n"


def speed_table(speed, load) -> list[str]:
    L = [f"CPU time (`time.process_time`, first 4 steps of a layer, interleaved A/B rounds, "
          f"medians; load average at start {load}):", "",
          "| dump | layer | format | entries | decode v3 ms | decode v4 ms | v4/v3 (range) "
          "| encode v3 ms | encode v4 ms | v4/v3 (range) |", "|---|---|---|---:|---:|---:|---|---:|---:|---|"]
    for s in speed:
        L.append(f"| {s['dump']} | {s['layer']} | {s['format']} | {s['entries']:,} | "
                 + " | ".join(f"{s[f'{w}_v3_ms']:.1f} | {s[f'{w}_v4_ms']:.1f} | {s[f'{w}_ratio']:.3f} "
                              f"({s[f'{w}_range'][0]:.2f}-{s[f'{w}_range'][1]:.2f})"
                              for w in ("decode", "encode")) + " |")
    return L


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--keep", metavar="DIR", help="capture into / reuse dumps from DIR")
    ap.add_argument("--skip-fl", action="store_true", help="without the FL transmitted.h5 dumps")
    ap.add_argument("--only", nargs="+", metavar="NAME", help="these dumps only")
    ap.add_argument("--reps", type=int, default=9, help="timed A/B rounds (default 9)")
    ap.add_argument("--speed-only", action="store_true", help="the CPU times alone")
    ap.add_argument("--md", default=str(ROOT / "benchmarks/results/ctx4.md"))
    ap.add_argument("--json", default=str(ROOT / "benchmarks/results/ctx4.json"))
    ap.add_argument("--render", action="store_true", help="only rewrite --md from --json")
    args = ap.parse_args(argv)
    if args.render:
        res = json.loads(Path(args.json).read_text())
        for r in res["rows"]:
            r["held_out"] = r["dump"] not in TUNED
        Path(args.md).write_text(render(res["rows"], res["speed"], f"{res['load']:.1f}"))
        return
    import torch

    torch.set_num_threads(1)
    load = os.getloadavg()[0]
    tmpctx = tempfile.TemporaryDirectory(prefix="bench-ctx4-")
    tmp = args.keep or tmpctx.name
    os.makedirs(tmp, exist_ok=True)
    todo = [d for d in dumps(tmp, not args.skip_fl) if not args.only or d[0] in args.only]
    rows = [] if args.speed_only else [rate_row(name, path, fmt, tmp) for name, path in todo
                                       for fmt in FORMATS]
    from co3cli.data import SAMPLE_DATA_DIR

    cases = [("mnist5k-mlp", str(SAMPLE_DATA_DIR / "mnist5k-mlp.h5"), "fc1.weight")]
    if os.path.exists(os.path.join(tmp, "mnist5k-resnet.h5")):
        cases.append(("mnist5k-resnet", os.path.join(tmp, "mnist5k-resnet.h5"),
                      "layer4.0.conv2.weight"))
    speed = speed_rows(cases, args.reps)
    Path(args.json).write_text(json.dumps({"rows": rows, "speed": speed, "load": load},
                                          indent=1) + "\n")
    Path(args.md).write_text(render(rows, speed, f"{load:.1f}"))
    print(f"wrote {args.md} and {args.json}")
    tmpctx.cleanup()


if __name__ == "__main__":
    main()
