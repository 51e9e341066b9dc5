"""Layers coded given another layer (``.co3`` ``LYX`` blocks, ``ctx`` model version 5): the
default ``co3 compress`` with and without them (``--no-references``), on every dump of
``bench_rate.py --check`` (the FL ``transmitted.h5`` streams among them), next to zstd-3/-19
and lzma-6 over the same symbol bytes (uint8, step by step, layer by layer, as the check), and
the compress / decompress CPU time of the two (process time, one thread, interleaved A/B
rounds, medians), also on two synthetic dumps of many same-shaped layers (unrelated: every
layer estimates its candidates and tries none; related: every layer is tried and coded given
the one before).  Also (``--steps``, on by default): version 5 with the *previous step of the
same tensor* as the reference (a key step every 16 coded by version 4), against version 4 step
by step and ``ctx-steps`` (``key_every`` 16), payload bytes of the 200-consecutive-steps MLP
dump's layers of >= 10^4 entries per step: whether the mechanism would give ``ctx-steps`` on
model 4.

    python benchmarks/bench_xref.py [--keep DIR] [--only NAME ...] [--reps N]

Writes ``benchmarks/results/xref.md`` and ``xref.json``.  Every byte of the files counted
(one ``SOURCE_DATE_EPOCH``, so files with and without differ only where the coding does).
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("SOURCE_DATE_EPOCH", "1767225600")  # one header timestamp: exact A/B bytes

import argparse  # noqa: E402
import json  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # this checkout's co3cli
sys.path.insert(0, str(ROOT / "benchmarks"))
FORMATS = ("fp8-e5m2", "fp4-co3")
STRESS = {"many-unrelated": False, "many-related": True}  # 32 layers of (128, 256), 8 steps


def stress_dump(path: str, related: bool, layers: int = 32, steps: int = 8) -> None:
    """``layers`` same-shaped layers: independent Laplace (unrelated), or each the one before
    plus 10 % noise (related)."""
    from co3cli.dump import write_dump

    rng = np.random.default_rng(7)
    out, x = {}, None
    for k in range(layers):
        new = rng.laplace(size=(steps, 128 * 256)).astype(np.float32) * 1e-3
        x = new if x is None or not related else x + np.float32(0.1) * new
        out[f"block{k}.weight"] = (x.copy(), (128, 256))
    write_dump(path, out, steps=np.arange(steps))


def timed(fn, reps: int):
    """Process CPU seconds of ``fn()`` for each of ``reps`` calls."""
    out = []
    for _ in range(reps):
        t0 = time.process_time()
        fn()
        out.append(time.process_time() - t0)
    return out


def row(name: str, path: str, fmt: str, tmp: str, reps: int, peers: bool = True) -> dict:
    from bench_ctx2 import peer_bpe

    from co3cli.codec import compress, decompress

    files = {on: os.path.join(tmp, f"x{int(on)}.co3") for on in (True, False)}
    r = {"dump": name, "format": fmt}
    cpu = {True: [], False: []}
    dcpu = {True: [], False: []}
    for rep in range(reps + 1):  # interleaved A/B; the first round warms up
        for on in ((True, False) if rep % 2 else (False, True)):
            t0 = time.process_time()
            res = compress(path, files[on], format=fmt, threads=1, references=on)
            t1 = time.process_time()
            decompress(files[on], os.path.join(tmp, "d.h5"), threads=1)
            if rep:
                cpu[on].append(t1 - t0)
                dcpu[on].append(time.process_time() - t1)
            key = "on" if on else "off"
            r[f"{key}_bytes"], r["entries"] = res.nbytes, res.entries
            r[f"{key}_bpe"] = res.bpe
            if on:
                r["given"] = sum(lay.get("given") is not None for lay in res.layers)
    for key, on in (("on", True), ("off", False)):
        r[f"{key}_cpu_s"] = statistics.median(cpu[on])
        r[f"{key}_dcpu_s"] = statistics.median(dcpu[on])
    r["on/off"] = r["on_bytes"] / r["off_bytes"]
    r["cpu on/off"] = r["on_cpu_s"] / r["off_cpu_s"]
    r["dcpu on/off"] = r["on_dcpu_s"] / r["off_dcpu_s"]
    if peers:
        r.update(peer_bpe(path, fmt))
        for key in ("on", "off"):
            for peer in ("zstd-3", "zstd-19", "lzma-6"):
                r[f"{key}/{peer}"] = r[f"{key}_bpe"] / r[peer]
    print(f"{name} {fmt}: off {r['off_bpe']:.4f} on {r['on_bpe']:.4f} ({r['on/off']:.4f}, "
          f"{r['given']} layers given); CPU {r['cpu on/off']:.2f}x, decode {r['dcpu on/off']:.2f}x"
          + (f"; on/lzma-6 {r['on/lzma-6']:.3f} on/zstd-19 {r['on/zstd-19']:.3f}" if peers else ""),
          flush=True)
    return r


def previous_step_rows(path: str, key_every: int = 16) -> list[dict]:
    """Payload bytes of each layer of >= 10^4 entries per step: version 4 step by step,
    version 5 given the previous step (key steps: version 4), ``ctx-steps``."""
    from co3cli.coding import get_coder, row_length
    from co3cli.dump import Dump
    from co3cli.formats import get_grid
    from co3cli.tables import scale_and_quantize

    out = []
    with Dump.open(path) as d:
        for fmt in FORMATS:
            grid = get_grid(fmt)
            for lay in d.layers:
                if d.numel(lay) < 10_000:
                    continue
                sym = scale_and_quantize(d.read_layer(lay), grid, None)[1]
                cols = row_length(d.shape(lay), sym.shape[1])
                counts = np.bincount(sym.ravel(), minlength=grid.nsym) + 0.0
                t4 = get_coder("ctx").table_from_weights(counts)
                t5 = t4.with_reference()
                v4 = sum(len(t4.encode(r, cols=cols)) for r in sym)
                v5 = sum(len(t4.encode(sym[t], cols=cols) if t % key_every == 0 else
                             t5.encode(sym[t], cols=cols, ref=sym[t - 1]))
                         for t in range(sym.shape[0]))
                steps = get_coder("ctx-steps", key_every=key_every).table_from_weights(counts)
                cs = sum(map(len, steps.encode_steps(sym, cols)))
                out.append({"layer": lay, "format": fmt, "entries": int(sym.size),
                            "v4_bpe": 8 * v4 / sym.size, "v5prev_bpe": 8 * v5 / sym.size,
                            "ctx_steps_bpe": 8 * cs / sym.size, "v5prev/v4": v5 / v4,
                            "ctx_steps/v4": cs / v4})
                print(f"previous step {lay} {fmt}: v5/v4 {v5 / v4:.4f}, ctx-steps/v4 "
                      f"{cs / v4:.4f}", flush=True)
    return out


def render(rows, stress, load, reps, prev=()) -> str:
    L = ["# Layers coded given another layer (`LYX`, ctx model version 5): the default "
         "`co3 compress` with and without", "",
         "Command: `python benchmarks/bench_xref.py --keep DIR`. Bits/entry of whole `.co3` files "
         "(`co3 compress --format F`, everything else left to it), every byte counted: *off* = "
         "`--no-references` (the default before), *on* = the default now; peers over the same "
         "uint8 symbols, step by step, layer by layer (as `bench_rate.py --check`), in the same "
         f"run. CPU: process time of the whole compress / decompress, one thread, {reps} "
         f"interleaved A/B rounds after a warm-up, medians; load average at start {load:.1f}. "
         "*given*: layers coded given another.", "",
         "| dump | format | entries | off | **on** | on/off | given | zstd-3 | zstd-19 | lzma-6 "
         "| off/zstd-19 | **on/zstd-19** | off/lzma-6 | **on/lzma-6** | compress s off | on | on/off "
         "| decompress s off | on | on/off |",
         "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        L.append(f"| {r['dump']} | {r['format']} | {r['entries']:,} | {r['off_bpe']:.4f} | "
                 f"**{r['on_bpe']:.4f}** | {r['on/off']:.4f} | {r['given']} | {r['zstd-3']:.3f} | "
                 f"{r['zstd-19']:.3f} | {r['lzma-6']:.3f} | {r['off/zstd-19']:.3f} | "
                 f"**{r['on/zstd-19']:.3f}** | {r['off/lzma-6']:.3f} | **{r['on/lzma-6']:.3f}** | "
                 f"{r['off_cpu_s']:.2f} | {r['on_cpu_s']:.2f} | {r['cpu on/off']:.2f} | "
                 f"{r['off_dcpu_s']:.2f} | {r['on_dcpu_s']:.2f} | {r['dcpu on/off']:.2f} |")
    if rows:
        worse = [r for r in rows if r["on_bytes"] > r["off_bytes"]]
        fl = [r for r in rows if r["dump"].startswith("fl-")]
        L += ["", f"Files larger with references: {len(worse)} of {len(rows)}. "
              f"Best mode (the default) against the targets (<= 0.85x lzma-6, <= 0.9x zstd-19): "
              f"off {sum(r['off/lzma-6'] <= 0.85 for r in rows)} / "
              f"{sum(r['off/zstd-19'] <= 0.9 for r in rows)}, on "
              f"{sum(r['on/lzma-6'] <= 0.85 for r in rows)} / "
              f"{sum(r['on/zstd-19'] <= 0.9 for r in rows)} of {len(rows)}"
              + (f"; FL rows on: worst /lzma-6 {max(r['on/lzma-6'] for r in fl):.3f}, "
                 f"/zstd-19 {max(r['on/zstd-19'] for r in fl):.3f}" if fl else "") + "."]
    if stress:
        L += ["", "Many same-shaped layers (synthetic, 32 layers of (128, 256), 8 steps; "
              "unrelated: independent Laplace, every layer estimates up to 3 candidates and "
              "tries none; related: each layer the one before plus 10 % noise, every layer "
              "tried):", "",
              "| dump | format | entries | off | on | on/off | given | compress s off | on | on/off "
              "| decompress s off | on | on/off |", "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for r in stress:
            L.append(f"| {r['dump']} | {r['format']} | {r['entries']:,} | {r['off_bpe']:.4f} | "
                     f"{r['on_bpe']:.4f} | {r['on/off']:.4f} | {r['given']} | {r['off_cpu_s']:.2f} | "
                     f"{r['on_cpu_s']:.2f} | {r['cpu on/off']:.2f} | {r['off_dcpu_s']:.2f} | "
                     f"{r['on_dcpu_s']:.2f} | {r['dcpu on/off']:.2f} |")
    if prev:
        L += ["", "The previous step of the same tensor as the reference (mnist5k-mlp, 200 "
              "consecutive steps; a key step every 16 coded by version 4; payload bits/entry of "
              "the layers of >= 10^4 entries per step): would version 5 give `ctx-steps` on "
              "model 4?", "",
              "| layer | format | entries | v4 step by step | v5 given the previous step | v5/v4 "
              "| ctx-steps (K=16) | ctx-steps/v4 |", "|---|---|---:|---:|---:|---:|---:|---:|"]
        for r in prev:
            L.append(f"| {r['layer']} | {r['format']} | {r['entries']:,} | {r['v4_bpe']:.4f} | "
                     f"{r['v5prev_bpe']:.4f} | {r['v5prev/v4']:.4f} | {r['ctx_steps_bpe']:.4f} | "
                     f"{r['ctx_steps/v4']:.4f} |")
    return "\n".join(L) + "\n"


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--keep", metavar="DIR", help="capture into / reuse dumps from DIR")
    ap.add_argument("--only", nargs="+", metavar="NAME", help="these dumps only")
    ap.add_argument("--reps", type=int, default=3, help="timed A/B rounds (default 3)")
    ap.add_argument("--no-stress", action="store_true", help="without the synthetic dumps")
    ap.add_argument("--no-steps", action="store_true",
                    help="without the previous-step study (mnist5k-mlp-long)")
    ap.add_argument("--md", default=str(ROOT / "benchmarks/results/xref.md"))
    ap.add_argument("--json", default=str(ROOT / "benchmarks/results/xref.json"))
    ap.add_argument("--render", action="store_true", help="only rewrite --md from --json")
    args = ap.parse_args(argv)
    if args.render:
        res = json.loads(Path(args.json).read_text())
        Path(args.md).write_text(render(res["rows"], res["stress"], res["load"], res["reps"],
                                        res.get("previous_step", ())))
        return
    import torch
    from bench_ctx4 import dumps

    torch.set_num_threads(1)
    load = os.getloadavg()[0]
    tmpctx = tempfile.TemporaryDirectory(prefix="bench-xref-")
    tmp = args.keep or tmpctx.name
    os.makedirs(tmp, exist_ok=True)
    rows, stress, prev = [], [], []
    for name, path in dumps(tmp, True):
        if name == "mnist5k-mlp-long" and not args.no_steps:
            prev = previous_step_rows(path)
        if args.only and name not in args.only:
            continue
        for fmt in FORMATS:
            rows.append(row(name, path, fmt, tmp, args.reps))
    if not args.no_stress:
        for name, related in STRESS.items():
            path = os.path.join(tmp, f"{name}.h5")
            if not os.path.exists(path):
                stress_dump(path, related)
            for fmt in FORMATS:
                stress.append(row(name, path, fmt, tmp, args.reps, peers=False))
    res = {"rows": rows, "stress": stress, "load": load, "reps": args.reps,
           "previous_step": prev}
    Path(args.json).write_text(json.dumps(res, indent=1) + "\n")
    Path(args.md).write_text(render(rows, stress, load, args.reps, prev))
    print(render(rows, stress, load, args.reps, prev))
    tmpctx.cleanup()


if __name__ == "__main__":
    main()
