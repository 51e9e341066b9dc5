"""Context across steps: ``ctx-steps`` against today's ``ctx``, lzma-6 and zstd-19, on the
200-consecutive-steps dump and on held-out dumps the coder was not tuned on.

    PYTHONPATH=. python benchmarks/bench_ctx_steps.py              # ~5 min on 2 busy cores
    PYTHONPATH=. python benchmarks/bench_ctx_steps.py --quick      # short captures, to /tmp

Dumps, captured here with ``co3cli.capture.capture`` (sgd, seeds as listed):

* ``mnist5k-mlp-long``: 200 steps, every step recorded, seed 0 (``bench_rate.py``'s long run;
  the dump ``ctx-steps`` was designed on);
* held out: ``stdlib-charlm-tiny`` (40 consecutive steps, seed 1), ``digits-resnet-tiny``
  (40 consecutive steps, seed 1) and ``digits-resnet-tiny-far`` (200 steps, every 25th
  recorded, seed 2: steps far apart in training).

Per dump and format (absmax scale, gennorm-zi tables): whole ``.co3`` files written by
``co3cli.codec.compress`` (every byte counted: header, tables, framing, trailer) with ``ctx``,
``ctx-steps`` at the default ``key_every`` (16) and with ``key_every`` 0 (one key step, no
random access), next to lzma-6 and zstd-19 over the same symbols (uint8, each layer's steps
in order, layer after layer: they may match across steps).  Worst case: the largest ratio
``ctx-steps`` / ``ctx`` over the layers of >= 10^4 entries (payloads).

Speed: the largest layer's first 20 steps, encode and decode of ``ctx`` and ``ctx-steps``
and compress / decompress of lzma-6 and zstd-19 over its symbol bytes, ``--repeat``
interleaved rounds (process CPU time, medians); M entries/s = MB/s of the uint8 symbols.

Writes ``benchmarks/results/ctx_steps.md`` and ``.json`` (``--quick``: ``/tmp``).
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse  # noqa: E402
import datetime as _dt  # noqa: E402
import json  # noqa: E402
import lzma  # noqa: E402
import platform  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
from bench_pipeline import interleaved  # noqa: E402  (the one round-robin timer)

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
FORMATS = ["fp8-e5m2", "fp4-co3"]
# name, task, steps, every, seed, held out
DUMPS = [("mnist5k-mlp-long", "mnist5k-mlp", 200, 1, 0, False),
         ("stdlib-charlm-tiny", "stdlib-charlm-tiny", 40, 1, 1, True),
         ("digits-resnet-tiny", "digits-resnet-tiny", 40, 1, 1, True),
         ("digits-resnet-tiny-far", "digits-resnet-tiny", 200, 25, 2, True)]
CODERS = [("ctx", {}), ("ctx-steps", {}), ("ctx-steps/K=0", {"key_every": 0})]
WORST_MIN = 10_000


def symbols(path, fmt):
    """Each layer's (steps, numel) symbols, shape and data, as ``compress`` quantizes them."""
    from co3cli.dump import Dump
    from co3cli.formats import get_grid
    from co3cli.tables import scale_and_quantize

    grid = get_grid(fmt)
    with Dump.open(path) as d:
        for name in d.layers:
            data = d.read_layer(name)
            yield name, d.shape(name), data, scale_and_quantize(data, grid, None)


def rate_case(path, fmt, tmp) -> dict:
    import zstandard

    from co3cli.codec import compress
    from co3cli.container import open_co3

    res = {"format": fmt, "files": {}, "layers": {}}
    for label, params in CODERS:
        dst = os.path.join(tmp, "x.co3")
        r = compress(path, dst, format=fmt, coder=label.split("/")[0], coder_params=params,
                     threads=1)
        res["entries"] = r.entries
        res["files"][label] = r.nbytes
        with open(dst, "rb") as f:
            for b in open_co3(f).layers():
                res["layers"].setdefault(b.name, {"entries": 0})[label] = b.payload_bytes
    raw = []
    for name, _, data, (_, sym, _) in symbols(path, fmt):
        raw.append(sym.astype(np.uint8).tobytes())
        res["layers"][name]["entries"] = int(sym.size)
    raw = b"".join(raw)
    res["files"]["lzma-6"] = len(lzma.compress(raw, preset=6))
    res["files"]["zstd-19"] = len(zstandard.ZstdCompressor(level=19).compress(raw))
    res["bpe"] = {k: 8 * v / res["entries"] for k, v in res["files"].items()}
    ratios = {n: v["ctx-steps"] / v["ctx"] for n, v in res["layers"].items()
              if v["entries"] >= WORST_MIN and v.get("ctx")}
    worst = max(ratios, key=ratios.get) if ratios else None
    res["worst_layer"] = None if worst is None else {"layer": worst, "ratio": ratios[worst]}
    return res


def speed_case(path, fmt, repeat: int) -> dict:
    import zstandard

    from co3cli.coding import get_coder, row_length
    from co3cli.formats import get_grid
    from co3cli.tables import model_weights

    grid = get_grid(fmt)
    name, shape, data, (scales, sym, counts) = max(symbols(path, fmt), key=lambda x: x[2].size)
    data, sym, scales = data[:20], sym[:20], scales[:20]
    weights, _ = model_weights(data, scales, counts, grid, "gennorm-zi")
    cols = row_length(shape, sym.shape[1])
    ctx = get_coder("ctx").table_from_weights(weights)
    steps = get_coder("ctx-steps").table_from_weights(weights)
    c_bl = [ctx.encode(r, cols) for r in sym]
    s_bl = steps.encode_steps(sym, cols)
    if not np.array_equal(steps.decode_steps(s_bl, sym.shape[1], cols), sym):
        raise SystemExit("ctx-steps: round trip failed")
    raw = sym.astype(np.uint8).tobytes()
    zc, zd = zstandard.ZstdCompressor(level=19), zstandard.ZstdDecompressor()
    lz, zs = lzma.compress(raw, preset=6), zc.compress(raw)
    m = sym.shape[1]
    t = interleaved({
        "ctx enc": lambda: [ctx.encode(r, cols) for r in sym],
        "ctx dec": lambda: [ctx.decode(b, m, cols) for b in c_bl],
        "ctx-steps enc": lambda: steps.encode_steps(sym, cols),
        "ctx-steps dec": lambda: steps.decode_steps(s_bl, m, cols),
        "lzma-6 enc": lambda: lzma.compress(raw, preset=6),
        "lzma-6 dec": lambda: lzma.decompress(lz),
        "zstd-19 enc": lambda: zc.compress(raw),
        "zstd-19 dec": lambda: zd.decompress(zs),
    }, repeat)
    return {"format": fmt, "layer": name, "entries": int(sym.size), "cpu_s": t,
            "mentries_s": {k: sym.size / v / 1e6 for k, v in t.items()}}


def render(doc) -> str:
    lines = ["# ctx-steps: context across steps", "",
             f"- command: `{doc['command']}`", f"- date: {doc['date']}",
             f"- machine: {doc['machine']}; load average {doc['load']}",
             f"- versions: {doc['versions']}", f"- runtime: {doc['seconds']:.0f} s",
             "- coder design: the docstring of `co3cli/coding/ctx_steps.py`", "",
             "Whole `.co3` files (every byte), bits/entry; lzma-6 / zstd-19 over the same "
             "uint8 symbols. K: `key_every` (16 = default, random access every 16 steps; 0: one "
             "key step). Worst layer: the largest ctx-steps/ctx payload ratio among layers of "
             f">= {WORST_MIN:,} entries.", "",
             "| dump | held out | format | entries | ctx | ctx-steps (K=16) | ctx-steps K=0 "
             "| lzma-6 | zstd-19 | K=16 / ctx | K=0 / ctx | K=16 / lzma-6 | K=16 / zstd-19 "
             "| worst layer (K=16 / ctx) |",
             "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for r in doc["rates"]:
        b = r["bpe"]
        w = r["worst_layer"]
        lines.append(
            f"| {r['dump']} | {'yes' if r['held_out'] else 'no'} | {r['format']} "
            f"| {r['entries']:,} | {b['ctx']:.4f} | **{b['ctx-steps']:.4f}** "
            f"| {b['ctx-steps/K=0']:.4f} | {b['lzma-6']:.4f} | {b['zstd-19']:.4f} "
            f"| {b['ctx-steps'] / b['ctx']:.4f} | {b['ctx-steps/K=0'] / b['ctx']:.4f} "
            f"| {b['ctx-steps'] / b['lzma-6']:.3f} | {b['ctx-steps'] / b['zstd-19']:.3f} "
            f"| {'-' if w is None else w['layer'] + ' ' + format(w['ratio'], '.4f')} |")
    lines += ["", f"Worst case over every dump and format (K=16 / ctx, whole files): "
              f"**{doc['worst_file']:.4f}**; best: {doc['best_file']:.4f}.", "",
              f"Speed (largest layer, first 20 steps; process CPU, median of {doc['repeat']} "
              "interleaved rounds), M entries/s (= MB/s of uint8 symbols):", "",
              "| dump | format | layer | entries | ctx enc / dec | ctx-steps enc / dec "
              "| lzma-6 enc / dec | zstd-19 enc / dec |", "|---|---|---|---:|---:|---:|---:|---:|"]
    for s in doc["speed"]:
        ms = s["mentries_s"]
        lines.append(f"| {s['dump']} | {s['format']} | {s['layer']} | {s['entries']:,} "
                     + "".join(f"| {ms[k + ' enc']:.1f} / {ms[k + ' dec']:.1f} "
                               for k in ("ctx", "ctx-steps", "lzma-6", "zstd-19")) + "|")
    return "\n".join(lines) + "\n"


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="short captures, results to /tmp")
    ap.add_argument("--repeat", type=int, default=5, help="interleaved timing rounds (>= 5)")
    ap.add_argument("--keep", metavar="DIR", help="keep (and reuse) the captured dumps in DIR")
    ap.add_argument("--json", metavar="PATH", help="JSON output (default beside the markdown)")
    args = ap.parse_args(argv)
    import numba
    import torch
    import zstandard

    from co3cli import __version__
    from co3cli.capture import capture

    torch.set_num_threads(1)
    t0 = time.perf_counter()
    out = Path("/tmp/bench_ctx_steps_quick.md") if args.quick else RESULTS / "ctx_steps.md"
    tmpctx = tempfile.TemporaryDirectory(prefix="bench-ctx-steps-")
    tmp = args.keep or tmpctx.name
    os.makedirs(tmp, exist_ok=True)
    rates, speed = [], []
    load0 = os.getloadavg()[0]
    for name, task, steps, every, seed, held in DUMPS:
        if args.quick:
            steps = min(steps, 8 * every)
        path = os.path.join(tmp, f"{name}-{steps}.h5")
        if not os.path.exists(path):
            capture(task, path, steps=steps, every=every, progress=False, threads=1, seed=seed)
        for fmt in FORMATS:
            r = rate_case(path, fmt, tmp)
            r.update(dump=name, held_out=held)
            rates.append(r)
            print(f"{name} {fmt}: " + " ".join(f"{k} {v:.4f}" for k, v in r["bpe"].items()),
                  file=sys.stderr, flush=True)
            s = speed_case(path, fmt, args.repeat)
            s["dump"] = name
            speed.append(s)
    ratios = [r["bpe"]["ctx-steps"] / r["bpe"]["ctx"] for r in rates]
    doc = {"command": "python benchmarks/bench_ctx_steps.py " + " ".join(argv or sys.argv[1:]),
           "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
           "machine": f"{platform.machine()}, {os.cpu_count()} cores, "
                      f"OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS')}",
           "load": f"{load0:.1f} at the start, {os.getloadavg()[0]:.1f} at the end",
           "versions": f"co3cli {__version__}, numpy {np.__version__}, numba {numba.__version__}, "
                       f"zstandard {zstandard.__version__}",
           "repeat": args.repeat, "rates": rates, "speed": speed,
           "worst_file": max(ratios), "best_file": min(ratios),
           "seconds": time.perf_counter() - t0}
    out.parent.mkdir(parents=True, exist_ok=True)
    Path(args.json or out.with_suffix(".json")).write_text(json.dumps(doc, indent=1))
    md = render(doc)
    out.write_text(md)
    print(md)


if __name__ == "__main__":
    main()
