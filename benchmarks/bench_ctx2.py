"""``ctx`` model version 3 (match model + column sign memory) against version 1, per dump and
format: whole ``.co3`` files (every byte counted) next to zstd-3/-19 and lzma-6 over the same
symbol bytes (uint8, step by step, layer by layer: as study 4 of ``bench_rate.py``), and the
decode CPU time of the two versions (interleaved A/B, medians).

    python benchmarks/bench_ctx2.py [--dumps NAME=PATH ...] [--md PATH] [--json PATH]

Default dumps: the bundled ``mnist5k-mlp`` and ``digits-mlp`` (tuned on, with a captured
``mnist5k-cnn``), the captured 200-step ``mnist5k-mlp-long`` and the held-out
``digits-resnet-tiny`` and ``stdlib-charlm-tiny`` captures (``--keep DIR`` keeps them).
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse  # noqa: E402
import json  # noqa: E402
import lzma  # noqa: E402
import statistics  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import sys  # noqa: E402

import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # this checkout's co3cli
FORMATS = ("fp8-e5m2", "fp4-co3")
CAPTURES = {  # name -> (task, steps, every, held out)
    "mnist5k-cnn": ("mnist5k-cnn", 100, 10, False),
    "mnist5k-mlp-long": ("mnist5k-mlp", 200, 1, False),
    "digits-resnet-tiny": ("digits-resnet-tiny", 30, 10, True),
    "stdlib-charlm-tiny": ("stdlib-charlm-tiny", 30, 10, True),
}


def symbol_bytes(path: str, fmt: str) -> bytes:
    from co3cli.dump import Dump
    from co3cli.formats import get_grid
    from co3cli.tables import scale_and_quantize

    grid = get_grid(fmt)
    with Dump.open(path) as d:
        syms = [scale_and_quantize(d.read_layer(n), grid, None)[1].astype(np.uint8) for n in d.layers]
        return b"".join(s[t].tobytes() for t in range(d.nsteps) for s in syms)


def peer_bpe(path: str, fmt: str) -> dict:
    """zstd-3, zstd-19 and lzma-6 over the dump's symbols (:func:`symbol_bytes`), bits/entry."""
    import zstandard

    raw = symbol_bytes(path, fmt)
    return {peer: 8 * len(fn(raw)) / len(raw)
            for peer, fn in (("zstd-3", zstandard.ZstdCompressor(level=3).compress),
                             ("zstd-19", zstandard.ZstdCompressor(level=19).compress),
                             ("lzma-6", lambda b: lzma.compress(b, preset=6)))}


def rate_rows(name: str, path: str, fmt: str, tmp: str, held_out: bool) -> dict:
    from co3cli.codec import compress

    row = {"dump": name, "format": fmt, "held_out": held_out}
    for version in (1, 3):
        r = compress(path, os.path.join(tmp, "x.co3"), format=fmt, coder="ctx",
                     model="gennorm-zi", coder_params={"model_version": version}, threads=1)
        row[f"ctx{version}_bpe"] = r.bpe
        row[f"ctx{version}_payload_bpe"] = 8 * sum(lay["payload_bytes"] for lay in r.layers) / r.entries
        row["entries"] = r.entries
    row.update(peer_bpe(path, fmt))
    row["new_vs_old"] = row["ctx3_bpe"] / row["ctx1_bpe"]
    row["payload_new_vs_old"] = row["ctx3_payload_bpe"] / row["ctx1_payload_bpe"]
    row["payload_new_vs_lzma-6"] = row["ctx3_payload_bpe"] / row["lzma-6"]
    for peer in ("zstd-19", "lzma-6"):
        row[f"old_vs_{peer}"] = row["ctx1_bpe"] / row[peer]
        row[f"new_vs_{peer}"] = row["ctx3_bpe"] / row[peer]
    print(f"{name} {fmt}: ctx1 {row['ctx1_bpe']:.4f} ctx3 {row['ctx3_bpe']:.4f} "
          f"({row['new_vs_old']:.4f}), lzma-6 {row['lzma-6']:.4f} zstd-19 {row['zstd-19']:.4f}",
          flush=True)
    return row


def decode_speed(path: str, layer: str, reps: int = 11) -> list[dict]:
    """Decode CPU time of one large layer's steps, version 3 / version 1, interleaved."""
    from co3cli.coding import get_coder, row_length
    from co3cli.dump import Dump
    from co3cli.formats import get_grid
    from co3cli.tables import scale_and_quantize

    out = []
    with Dump.open(path) as d:
        data, shape = d.read_layer(layer)[:4], d.shape(layer)
    for fmt in FORMATS:
        _, sym, counts = scale_and_quantize(data, get_grid(fmt), None)
        cols = row_length(shape, sym.shape[1])
        tabs = {v: get_coder("ctx", model_version=v).table_from_weights(counts + 0.5) for v in (1, 3)}
        pays = {v: [t.encode(r, cols=cols) for r in sym] for v, t in tabs.items()}
        times = {1: [], 3: []}
        for rep in range(reps + 1):
            for v in ((1, 3) if rep % 2 else (3, 1)):
                t0 = time.process_time()
                for p in pays[v]:
                    tabs[v].decode(p, sym.shape[1], cols=cols)
                if rep:  # the first round warms up
                    times[v].append(time.process_time() - t0)
        m = {v: statistics.median(x) for v, x in times.items()}
        out.append({"format": fmt, "layer": layer, "entries": int(sym.size),
                    "v1_ms": 1e3 * m[1], "v3_ms": 1e3 * m[3], "ratio": m[3] / m[1],
                    "ratio_range": [min(b / a for a, b in zip(times[1], times[3])),
                                    max(b / a for a, b in zip(times[1], times[3]))]})
        print(f"decode {fmt}: v1 {1e3 * m[1]:.1f} ms, v3 {1e3 * m[3]:.1f} ms, "
              f"ratio {m[3] / m[1]:.3f}", flush=True)
    return out


def render(rows, speed, load) -> str:
    L = ["# ctx model version 3 (match model, column sign memory) vs version 1", "",
         "Command: `python benchmarks/bench_ctx2.py`. Whole `.co3` files, bits/entry, every byte "
         "counted (`co3 compress --coder ctx --model gennorm-zi`, absmax scales, as study 4 of `bench_rate.py`); peers over the same "
         "uint8 symbols, step by step, layer by layer.", "",
         "| dump | format | ctx v1 | **ctx v3** | v3/v1 | zstd-3 | zstd-19 | lzma-6 | v1/lzma-6 "
         "| **v3/lzma-6** | v1/zstd-19 | **v3/zstd-19** |",
         "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for held in (False, True):
        if held:
            L.append("| *held out (not tuned on)* | | | | | | | | | | | |")
        for r in rows:
            if r["held_out"] != held:
                continue
            L.append(f"| {r['dump']} | {r['format']} | {r['ctx1_bpe']:.3f} | **{r['ctx3_bpe']:.3f}** "
                     f"| {r['new_vs_old']:.3f} | {r['zstd-3']:.3f} | {r['zstd-19']:.3f} | "
                     f"{r['lzma-6']:.3f} | {r['old_vs_lzma-6']:.3f} | **{r['new_vs_lzma-6']:.3f}** | "
                     f"{r['old_vs_zstd-19']:.3f} | **{r['new_vs_zstd-19']:.3f}** |")
    worst = max(rows, key=lambda r: r["new_vs_lzma-6"])
    worst_z = max(rows, key=lambda r: r["new_vs_zstd-19"])
    worst_o = max(rows, key=lambda r: r["new_vs_old"])
    L += ["", f"Worst v3/lzma-6: **{worst['new_vs_lzma-6']:.3f}** ({worst['dump']} {worst['format']}); "
          f"worst v3/zstd-19: **{worst_z['new_vs_zstd-19']:.3f}** ({worst_z['dump']} {worst_z['format']}); "
          f"worst v3/v1: **{worst_o['new_vs_old']:.4f}** ({worst_o['dump']} {worst_o['format']}).", "",
          "The coders' payloads alone (side information: headers, tables, per-step scales, "
          "not the model's; the peers' figures include their own small headers):", "",
          "| dump | format | v1 payload | v3 payload | v3/v1 | side (both) | v3 payload/lzma-6 |",
          "|---|---|---:|---:|---:|---:|---:|"]
    for r in rows:
        L.append(f"| {r['dump']} | {r['format']} | {r['ctx1_payload_bpe']:.3f} | "
                 f"{r['ctx3_payload_bpe']:.3f} | {r['payload_new_vs_old']:.4f} | "
                 f"{r['ctx3_bpe'] - r['ctx3_payload_bpe']:.3f} | {r['payload_new_vs_lzma-6']:.3f} |")
    L += ["", "Decode CPU time (`time.process_time`, one large layer's first 4 steps, 11 interleaved "
          f"A/B rounds, medians; load average at start {load}):", "",
          "| format | layer | entries | v1 ms | v3 ms | v3/v1 | per-round range |", "|---|---|---:|---:|---:|---:|---|"]
    for s in speed:
        L.append(f"| {s['format']} | {s['layer']} | {s['entries']} | {s['v1_ms']:.1f} | {s['v3_ms']:.1f} "
                 f"| {s['ratio']:.3f} | {s['ratio_range'][0]:.2f}-{s['ratio_range'][1]:.2f} |")
    return "\n".join(L) + "\n"


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dumps", nargs="+", metavar="NAME=PATH", help="these dumps only (not held out)")
    ap.add_argument("--keep", metavar="DIR", help="capture into / reuse dumps from DIR")
    ap.add_argument("--md", default=str(ROOT / "benchmarks/results/ctx2.md"))
    ap.add_argument("--json", default=str(ROOT / "benchmarks/results/ctx2.json"))
    args = ap.parse_args(argv)
    from co3cli.data import SAMPLE_DATA_DIR

    load = os.getloadavg()[0]
    tmpctx = tempfile.TemporaryDirectory(prefix="bench-ctx2-")
    tmp = args.keep or tmpctx.name
    os.makedirs(tmp, exist_ok=True)
    if args.dumps:
        dumps = [(*d.split("=", 1), False) for d in args.dumps]
    else:
        from co3cli.capture import capture

        dumps = [("mnist5k-mlp", str(SAMPLE_DATA_DIR / "mnist5k-mlp.h5"), False),
                 ("digits-mlp", str(SAMPLE_DATA_DIR / "digits-mlp.h5"), False)]
        for name, (task, steps, every, held) in CAPTURES.items():
            dst = os.path.join(tmp, f"{name}.h5")
            if not os.path.exists(dst):
                capture(task, dst, steps=steps, every=every, progress=False, threads=1, seed=0)
            dumps.append((name, dst, held))
    rows = [rate_rows(name, path, fmt, tmp, held) for name, path, held in dumps for fmt in FORMATS]
    speed = decode_speed(str(SAMPLE_DATA_DIR / "mnist5k-mlp.h5"), "fc1.weight")
    Path(args.json).write_text(json.dumps({"rows": rows, "decode": speed, "load": load}, indent=1) + "\n")
    Path(args.md).write_text(render(rows, speed, f"{load:.1f}"))
    print(f"wrote {args.md} and {args.json}")
    tmpctx.cleanup()


if __name__ == "__main__":
    main()
