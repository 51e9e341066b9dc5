"""Rate and speed of the context-adaptive coder ``ctx`` on real gradients, next to the
static order-0 ``ans`` coder and general-purpose compressors.

    python benchmarks/bench_ctx.py                    # writes benchmarks/results/ctx.md
    python benchmarks/bench_ctx.py --quick --json /tmp/ctx.json   # 2 steps, md to /tmp

Data: the layers of ``--dump`` (default the bundled ``co3cli/sample_data/mnist5k-mlp.h5``)
with at least ``--min-entries`` entries over all steps (fc1.weight and fc2.weight by default),
for each ``--formats`` config with the absmax scale.  Per layer and format, all steps:

* ``H``: empirical order-0 entropy of the layer's symbols;
* ``ans``: static rANS (precision 16) with the ``gennorm-zi`` table, every step encoded,
  payloads summed, plus the table bytes;
* ``ctx``: the same with ``ctx`` (prior = the same ``gennorm-zi`` weights, each step coded
  with ``cols`` = the row length of the layer's 2-D view); ``ctx/counts``: prior from the
  layer's symbol counts instead;
* ``lzma-6``, ``zstd-19``, ``zstd-3``: the symbols as uint8, all steps concatenated into
  one stream (so they may use repeats across steps, which the per-step coders cannot);
  ``lzma/step``: lzma-6 of each step separately, summed (the like-for-like comparison).

Bits per entry (bpe) = 8 * bytes / entries.  Speeds: M symbols/s on one core (numba warm),
median of ``--repeat`` runs of encoding (or decoding) every step of the layer.
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse  # noqa: E402
import datetime as _dt  # noqa: E402
import json  # noqa: E402
import lzma  # noqa: E402
import platform  # noqa: E402
import shlex  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

from co3cli.data import SAMPLE_DATA_DIR  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_DUMP = SAMPLE_DATA_DIR / "mnist5k-mlp.h5"
RESULTS = ROOT / "benchmarks" / "results"
FORMATS = ["fp8-e5m2", "fp8-e4m3", "fp4-co3"]


def entropy_bits(counts: np.ndarray) -> float:
    p = counts[counts > 0] / counts.sum()
    return float(-(p * np.log2(p)).sum())


def timed(fn, repeat: int):
    """Median wall time of ``repeat`` calls and the last result."""
    times, result = [], None
    for _ in range(repeat):
        start = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times), result


def measure_coder(table, sym: np.ndarray, cols: int | None, repeat: int) -> dict:
    """Encode/decode every step; check the round trip; sizes and speeds."""
    def encode():
        return [table.encode(row, cols=cols) for row in sym]

    def decode():
        return [table.decode(b, sym.shape[1], cols=cols) for b in blobs]

    blobs = encode()  # warm (numba compile) and the payloads
    for row, out in zip(sym, decode()):
        if not np.array_equal(row, out):
            raise SystemExit("round trip failed")
    t_enc, _ = timed(encode, repeat)
    t_dec, _ = timed(decode, repeat)
    payload = sum(map(len, blobs))
    return {"payload_bytes": payload, "table_bytes": len(table.to_bytes()),
            "encode_msym_s": sym.size / t_enc / 1e6, "decode_msym_s": sym.size / t_dec / 1e6}


def run_layer(data, shape, fmt: str, repeat: int) -> dict:
    import zstandard

    from co3cli.coding import get_coder, row_length
    from co3cli.tables import model_weights, scale_and_quantize
    from co3cli.formats import get_grid

    grid = get_grid(fmt)
    scales, sym, counts = scale_and_quantize(data, grid, None)
    weights, _ = model_weights(data, scales, counts, grid, "gennorm-zi")
    cols = row_length(shape, data.shape[1])
    n = sym.size
    raw = sym.astype(np.uint8).tobytes()
    res = {"format": fmt, "entries": int(n), "steps": int(sym.shape[0]), "cols": int(cols),
           "H_bpe": entropy_bits(counts)}
    coders = {
        "ans": (get_coder("ans").table_from_weights(weights), None),
        "ctx": (get_coder("ctx").table_from_weights(weights), cols),
        "ctx/counts": (get_coder("ctx").table_from_weights(counts + 0.5), cols),
    }
    for name, (table, c) in coders.items():
        m = measure_coder(table, sym, c, repeat if name != "ctx/counts" else 1)
        m["bpe"] = 8 * (m["payload_bytes"] + m["table_bytes"]) / n
        res[name] = m
    res["lzma-6_bpe"] = 8 * len(lzma.compress(raw, preset=6)) / n
    res["lzma-6/step_bpe"] = 8 * sum(len(lzma.compress(r.astype(np.uint8).tobytes(), preset=6))
                                     for r in sym) / n
    for level in (19, 3):
        res[f"zstd-{level}_bpe"] = 8 * len(zstandard.ZstdCompressor(level=level).compress(raw)) / n
    return res


def render(doc: dict) -> str:
    lines = [
        "# ctx coder benchmark",
        "",
        f"- command: `{doc['command']}`",
        f"- date: {doc['date']}",
        f"- machine: {doc['machine']}",
        f"- versions: {doc['versions']}",
        f"- dump: `{doc['dump']}`; layers with >= {doc['min_entries']:,} entries; absmax scale; "
        f"tables from the gennorm-zi fit (ctx/counts: from the symbol counts)",
        f"- runtime: {doc['seconds']:.0f} s",
        "- coder design (contexts, predictor, adaptation, payload): the docstring of "
        "`co3cli/coding/ctx.py`",
        "",
        "Bits per entry, all steps of the layer (coders: payloads + table bytes; byte "
        "compressors: all steps as one uint8 stream, except lzma/step).",
        "",
        "| layer | format | entries | H | ans | ctx | ctx/counts | lzma-6 | lzma/step | zstd-19 "
        "| zstd-3 | ctx vs lzma-6 | ctx vs zstd-19 |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in doc["rows"]:
        ctx = r["ctx"]["bpe"]
        lines.append(
            f"| {r['layer']} | {r['format']} | {r['entries']:,} | {r['H_bpe']:.3f} "
            f"| {r['ans']['bpe']:.3f} | **{ctx:.3f}** | {r['ctx/counts']['bpe']:.3f} "
            f"| {r['lzma-6_bpe']:.3f} | {r['lzma-6/step_bpe']:.3f} | {r['zstd-19_bpe']:.3f} "
            f"| {r['zstd-3_bpe']:.3f} | {100 * (ctx / r['lzma-6_bpe'] - 1):+.1f} % "
            f"| {100 * (ctx / r['zstd-19_bpe'] - 1):+.1f} % |")
    lines += [
        "",
        f"ctx beats lzma-6 and zstd-19 on every row: **{'yes' if doc['ctx_beats_all'] else 'no'}**",
        "",
        f"Speed, M symbols/s on one core (median of {doc['repeat']}; every step of the layer):",
        "",
        "| layer | format | ctx encode | ctx decode | ans encode | ans decode |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for r in doc["rows"]:
        lines.append(f"| {r['layer']} | {r['format']} | {r['ctx']['encode_msym_s']:.1f} "
                     f"| {r['ctx']['decode_msym_s']:.1f} | {r['ans']['encode_msym_s']:.1f} "
                     f"| {r['ans']['decode_msym_s']:.1f} |")
    lines.append("")
    return "\n".join(lines)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dump", default=str(DEFAULT_DUMP), help="gradient dump (.h5)")
    ap.add_argument("--formats", nargs="+", default=FORMATS, help="quantization formats")
    ap.add_argument("--min-entries", type=int, default=100_000,
                    help="only layers with at least this many entries over all steps")
    ap.add_argument("--repeat", type=int, default=3, help="timing runs (median)")
    ap.add_argument("--quick", action="store_true",
                    help="first 2 steps, fp8-e5m2 and fp4-co3, 1 timing run, results to /tmp")
    ap.add_argument("--json", metavar="PATH", help="also write the results as JSON here")
    ap.add_argument("--md", metavar="PATH",
                    help="markdown output (default benchmarks/results/ctx.md; --quick: /tmp)")
    args = ap.parse_args(argv)
    if args.quick:
        args.formats, args.repeat = ["fp8-e5m2", "fp4-co3"], 1
    default_md = Path("/tmp/bench_ctx_quick.md") if args.quick else RESULTS / "ctx.md"
    mpath = Path(args.md) if args.md else default_md

    import numba
    import zstandard

    from co3cli import __version__
    from co3cli.dump import Dump

    t0 = time.perf_counter()
    rows = []
    with Dump.open(args.dump) as dump:
        for name in dump.layers:
            if dump.numel(name) * len(dump.steps) < args.min_entries:
                continue
            data = dump.read_layer(name)
            if args.quick:
                data = data[:2]
            for fmt in args.formats:
                r = run_layer(data, dump.shape(name), fmt, args.repeat)
                r["layer"] = name
                rows.append(r)
                print(f"{name} {fmt}: H {r['H_bpe']:.3f} ans {r['ans']['bpe']:.3f} "
                      f"ctx {r['ctx']['bpe']:.3f} lzma-6 {r['lzma-6_bpe']:.3f} "
                      f"zstd-19 {r['zstd-19_bpe']:.3f}  ctx enc/dec "
                      f"{r['ctx']['encode_msym_s']:.1f}/{r['ctx']['decode_msym_s']:.1f} M/s",
                      file=sys.stderr)
    doc = {
        "command": "python " + " ".join(shlex.quote(a) for a in
                                        [str(Path(sys.argv[0]))] + list(argv or sys.argv[1:])),
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, "
                   f"OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS')}, {platform.platform()}",
        "versions": f"co3cli {__version__}, python {platform.python_version()}, "
                    f"numpy {np.__version__}, numba {numba.__version__}, "
                    f"zstandard {zstandard.__version__}",
        "dump": os.path.relpath(args.dump, ROOT), "min_entries": args.min_entries,
        "repeat": args.repeat, "rows": rows,
        "ctx_beats_all": all(r["ctx"]["bpe"] < min(r["lzma-6_bpe"], r["zstd-19_bpe"])
                             for r in rows),
        "seconds": time.perf_counter() - t0,
    }
    if args.json:
        Path(args.json).write_text(json.dumps(doc, indent=1))
    md = render(doc)
    mpath.parent.mkdir(parents=True, exist_ok=True)
    mpath.write_text(md)
    print(md)


if __name__ == "__main__":
    main()
