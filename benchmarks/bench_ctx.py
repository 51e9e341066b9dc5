"""Rate and speed of the context-adaptive coder ``ctx`` on real gradients, next to the
static order-0 ``ans`` coder and general-purpose compressors.

    PYTHONPATH=. python benchmarks/bench_ctx.py --json benchmarks/results/ctx.json
    PYTHONPATH=. python benchmarks/bench_ctx.py --quick --json /tmp/ctx.json   # md to /tmp

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

Bits per entry (bpe) = 8 * bytes / entries.

Speed (issue 13: ``ctx`` vs ``ans`` on the same symbols): for fp8-e5m2 and fp4-co3, on a
synthetic 10^7-entry 2-D layer (``--n``, 1000 columns; per-row and per-column log scales,
15 % zeros) and on every layer of the bundled sample dumps (``co3cli.data.SAMPLE_DUMPS``,
all steps), the encode and decode of ``ans``, of ``ctx`` (the fast kernels) and of
``ctx/0.1.0`` (the reference kernel of co3cli 0.1.0 = main at 91e6900, same bytes) run
round-robin ``--speed-repeat`` times (>= 5); each figure is the median of process CPU
times.  The table gives ctx's time over ans's (encode, decode), the speed-up over 0.1.0
and the bits per entry of each (payloads only; ctx and ctx/0.1.0 must be byte-identical).
Run against main itself (``PYTHONPATH=<checkout of main>``, no reference kernel there) the
0.1.0 columns repeat the ctx ones.
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
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
from bench_pipeline import interleaved  # noqa: E402  (the one round-robin timer)

from co3cli.data import SAMPLE_DATA_DIR  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_DUMP = SAMPLE_DATA_DIR / "mnist5k-mlp.h5"
RESULTS = ROOT / "benchmarks" / "results"
FORMATS = ["fp8-e5m2", "fp8-e4m3", "fp4-co3"]


def entropy_bits(counts: np.ndarray) -> float:
    p = counts[counts > 0] / counts.sum()
    return float(-(p * np.log2(p)).sum())


def measure_coder(table, sym: np.ndarray, cols: int | None) -> dict:
    """Encode/decode every step; check the round trip; sizes."""
    blobs = [table.encode(row, cols=cols) for row in sym]
    for row, b in zip(sym, blobs):
        if not np.array_equal(row, table.decode(b, sym.shape[1], cols=cols)):
            raise SystemExit("round trip failed")
    return {"payload_bytes": sum(map(len, blobs)), "table_bytes": len(table.to_bytes())}




def synthetic_layer(n: int, seed: int = 0):
    """A gradient-like (rows, cols) float32 matrix with n entries: per-row and per-column
    log-normal scales (sigma 0.3 each) times Gaussian noise, 15 % exact zeros (order-0
    entropy ~5.4 bits in fp8-e5m2, ~1.3 in fp4-co3)."""
    rng = np.random.default_rng(seed)
    cols = 1000 if n >= 10_000 else max(n, 1)
    rows = max(n // cols, 1)
    scale = np.exp(rng.normal(0, 0.3, (rows, 1)) + rng.normal(0, 0.3, (1, cols)))
    x = (1e-3 * scale * rng.normal(0, 1, (rows, cols))).astype(np.float32)
    x[rng.random((rows, cols)) < 0.15] = 0
    return x.reshape(1, -1), (rows, cols)


def speed_case(data, shape, fmt: str, repeat: int) -> dict:
    """ctx (fast and 0.1.0 kernels) vs ans on the same symbols: CPU medians, bits."""
    from co3cli.coding import get_coder, row_length
    from co3cli.formats import get_grid
    from co3cli.tables import model_weights, scale_and_quantize

    grid = get_grid(fmt)
    scales, sym, counts = scale_and_quantize(data, grid, None)
    weights, _ = model_weights(data, scales, counts, grid, "gennorm-zi")
    cols = row_length(shape, data.shape[1])
    ans = get_coder("ans").table_from_weights(weights)
    # model version 1: the version the 0.1.0 reference kernel codes (bench_ctx2.py: version 3)
    v1 = {"model_version": 1} if "model_version" in get_coder("ctx").PARAMS else {}
    ctx = get_coder("ctx", **v1).table_from_weights(weights)
    n = sym.size
    a_bl = [ans.encode(row) for row in sym]
    c_bl = [ctx.encode(row, cols) for row in sym]
    # run against main at 91e6900 (PYTHONPATH=<checkout>): no reference kernel there, it is
    # the code in use; the 0.1.0 columns then repeat the ctx ones
    ref = hasattr(ctx, "_encode")
    enc_ref = ((lambda row: ctx._encode(row, cols, reference=True)) if ref else
               (lambda row: ctx.encode(row, cols)))
    dec_ref = ((lambda b: ctx._decode(b, sym.shape[1], cols, reference=True)) if ref else
               (lambda b: ctx.decode(b, sym.shape[1], cols)))
    r_bl = [enc_ref(row) for row in sym]
    for row, c, r in zip(sym, c_bl, r_bl):
        if c != r or not np.array_equal(ctx.decode(c, row.size, cols), row) or \
                not np.array_equal(dec_ref(c), row):
            raise SystemExit("ctx: fast and 0.1.0 kernels disagree")
    m = sym.shape[1]
    t = interleaved({
        "ans_enc": lambda: [ans.encode(row) for row in sym],
        "ans_dec": lambda: [ans.decode(b, m) for b in a_bl],
        "ctx_enc": lambda: [ctx.encode(row, cols) for row in sym],
        "ctx_dec": lambda: [ctx.decode(b, m, cols) for b in c_bl],
        "ref_enc": lambda: [enc_ref(row) for row in sym],
        "ref_dec": lambda: [dec_ref(b) for b in c_bl],
    }, repeat)
    bpe = {k: 8 * sum(map(len, bl)) / n for k, bl in (("ans", a_bl), ("ctx", c_bl),
                                                      ("ref", r_bl))}
    return {"format": fmt, "entries": int(n), "cols": int(cols), "cpu_s": t,
            "msym_s": {k: n / v / 1e6 for k, v in t.items()}, "bpe": bpe,
            "enc_vs_ans": t["ctx_enc"] / t["ans_enc"], "dec_vs_ans": t["ctx_dec"] / t["ans_dec"],
            "ref_enc_vs_ans": t["ref_enc"] / t["ans_enc"],
            "ref_dec_vs_ans": t["ref_dec"] / t["ans_dec"],
            "enc_speedup": t["ref_enc"] / t["ctx_enc"], "dec_speedup": t["ref_dec"] / t["ctx_dec"]}


def run_speed(n: int, repeat: int, quick: bool) -> list:
    from co3cli.data import SAMPLE_DUMPS
    from co3cli.dump import Dump

    inputs = [(f"synthetic {n:,}", *synthetic_layer(n))]
    for dump_name in SAMPLE_DUMPS:
        with Dump.open(SAMPLE_DATA_DIR / dump_name) as dump:
            for name in dump.layers:
                data = dump.read_layer(name)
                inputs.append((f"{dump_name}:{name}", data[:2] if quick else data,
                               dump.shape(name)))
    rows = []
    for label, data, shape in inputs:
        for fmt in ("fp8-e5m2", "fp4-co3"):
            r = speed_case(data, shape, fmt, repeat)
            r["input"] = label
            rows.append(r)
            print(f"{label} {fmt}: ctx/ans enc {r['enc_vs_ans']:.2f}x dec {r['dec_vs_ans']:.2f}x "
                  f"(0.1.0: {r['ref_enc_vs_ans']:.2f}x / {r['ref_dec_vs_ans']:.2f}x) bpe "
                  f"ctx {r['bpe']['ctx']:.4f} ans {r['bpe']['ans']:.4f}", file=sys.stderr)
    return rows


def run_layer(data, shape, fmt: str) -> dict:
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
        m = measure_coder(table, sym, c)
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
        f"Speed, ctx vs ans on the same symbols (process CPU time, medians of "
        f"{doc['speed_repeat']} interleaved rounds; load average {doc['load']}). ctx/ans: "
        "ctx's CPU time over ans's (target <= 2); 0.1.0: the reference kernel (main at "
        "91e6900), byte-identical; speed-up: 0.1.0 time over the new time.",
        "",
        "| input | format | entries | ctx/ans enc | ctx/ans dec | 0.1.0/ans enc | 0.1.0/ans dec "
        "| speed-up enc | speed-up dec | ctx M sym/s enc / dec | ans M sym/s enc / dec "
        "| bpe ctx (= 0.1.0) | bpe ans |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in doc["speed"]:
        ms = r["msym_s"]
        lines.append(
            f"| {r['input']} | {r['format']} | {r['entries']:,} | {r['enc_vs_ans']:.1f}x "
            f"| {r['dec_vs_ans']:.1f}x | {r['ref_enc_vs_ans']:.1f}x | {r['ref_dec_vs_ans']:.1f}x "
            f"| {r['enc_speedup']:.2f} | {r['dec_speedup']:.2f} "
            f"| {ms['ctx_enc']:.1f} / {ms['ctx_dec']:.1f} "
            f"| {ms['ans_enc']:.0f} / {ms['ans_dec']:.0f} "
            f"| {r['bpe']['ctx']:.4f} | {r['bpe']['ans']:.4f} |")
    lines.append("")
    return "\n".join(lines)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dump", default=str(DEFAULT_DUMP), help="gradient dump (.h5)")
    ap.add_argument("--formats", nargs="+", default=FORMATS, help="quantization formats")
    ap.add_argument("--min-entries", type=int, default=100_000,
                    help="only layers with at least this many entries over all steps")
    ap.add_argument("--speed-repeat", type=int, default=5,
                    help="interleaved timing rounds of the speed table (median; >= 5)")
    ap.add_argument("--n", type=int, default=10_000_000,
                    help="entries of the synthetic layer of the speed table")
    ap.add_argument("--quick", action="store_true",
                    help="first 2 steps, fp8-e5m2 and fp4-co3, a 10^5-entry synthetic layer, "
                         "results to /tmp")
    ap.add_argument("--json", metavar="PATH", help="also write the results as JSON here")
    ap.add_argument("--md", metavar="PATH",
                    help="markdown output (default benchmarks/results/ctx.md; --quick: /tmp)")
    args = ap.parse_args(argv)
    if args.quick:
        args.formats, args.n = ["fp8-e5m2", "fp4-co3"], 100_000
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
                r = run_layer(data, dump.shape(name), fmt)
                r["layer"] = name
                rows.append(r)
                print(f"{name} {fmt}: H {r['H_bpe']:.3f} ans {r['ans']['bpe']:.3f} "
                      f"ctx {r['ctx']['bpe']:.3f} lzma-6 {r['lzma-6_bpe']:.3f} "
                      f"zstd-19 {r['zstd-19_bpe']:.3f}", file=sys.stderr)
    load0 = os.getloadavg()[0]
    speed = run_speed(args.n, args.speed_repeat, args.quick)
    load = f"{load0:.1f} at the start, {os.getloadavg()[0]:.1f} at the end"
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
        "speed_repeat": args.speed_repeat, "load": load, "rows": rows, "speed": speed,
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
