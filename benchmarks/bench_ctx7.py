"""``ctx`` model version 7 (version 5 with mixed probabilities) against version 5.

    python benchmarks/bench_ctx7.py --dumps NAME=PATH ... [--repeat 5] [--md PATH]

For every dump and format (fp8-e5m2, fp4-co3; absmax): the stream a ``.co3`` group of its
small layers is coded as (``GRC`` layout 3: every layer of at most ``MAX_ENTRIES`` entries per
step, its steps as further rows, its previous step in the contexts; the flat prior the
default file uses there), coded by version 5 and by version 7 (``CtxTable.mixed``): payload
bytes, both decoded back and checked, and process CPU time per symbol to encode and to decode
(medians of ``--repeat`` interleaved rounds). Then the dump's largest layer (when it has one
beyond ``MAX_ENTRIES``), its first 4 steps coded alone, the same way: what the mixing would
give and cost where the default file does not use it.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from co3cli import codec  # noqa: E402
from co3cli.coding import get_coder, row_length  # noqa: E402
from co3cli.container import joinable  # noqa: E402
from co3cli.container.gcompact import (STREAM_STEPS, body_members,  # noqa: E402
                                       stream_segments)
from co3cli.dump import Dump  # noqa: E402
from co3cli.formats import get_grid  # noqa: E402
from co3cli.tables import flat_freqs  # noqa: E402

FORMATS = ("fp8-e5m2", "fp4-co3")
MAX_ENTRIES = 65536
"""A layer of at most this many entries per step joins the group (the planner's default)."""


def _quantized(dump, name, grid, steps=None):
    x = dump.read_layer(name)
    x = x.reshape(x.shape[0], -1)[:steps]
    sym = codec._quantize_layer(x, grid, None, None)[0]
    return sym, row_length(dump.shape(name), sym.shape[1])


def _compare(sym, segs, nsym, repeat):
    """Bytes and ns/symbol (encode, decode) of versions 5 and 7 on one stream."""
    v5 = get_coder("ctx").table_from_ints(flat_freqs(nsym, 16))
    row = {}
    for v, table in ((5, v5), (7, v5.mixed())):
        blob = table.encode_segments(sym, segs)
        if not np.array_equal(table.decode_segments(blob, segs), sym):
            raise SystemExit(f"version {v}: round trip failed")
        row[v] = len(blob)
    for _ in range(repeat):  # interleaved: 5, 7, 5, 7 ...
        for v, table in ((5, v5), (7, v5.mixed())):
            t0 = time.process_time()
            blob = table.encode_segments(sym, segs)
            t1 = time.process_time()
            table.decode_segments(blob, segs)
            row.setdefault(f"enc{v}", []).append(t1 - t0)
            row.setdefault(f"dec{v}", []).append(time.process_time() - t1)
    for k in ("enc5", "dec5", "enc7", "dec7"):
        row[k] = 1e9 * statistics.median(row[k]) / sym.size
    return row


def bench(name, path, repeat):
    rows = []
    with Dump.open(path) as dump:
        nsteps = len(dump.steps)
        for fmt in FORMATS:
            grid = get_grid(fmt)
            small = [n for n in dump.layers
                     if dump.numel(n) <= MAX_ENTRIES and joinable(nsteps, dump.numel(n))]
            if len(small) >= 2:
                syms = [_quantized(dump, n, grid) for n in small]
                cols = [c for _, c in syms]
                order = body_members(STREAM_STEPS, cols)[0]
                segs = stream_segments(STREAM_STEPS, order, cols, [s.shape[1] for s, _ in syms],
                                       nsteps)
                sym = np.concatenate([syms[k][0].reshape(-1) for k in order])
                rows.append({"dump": name, "format": fmt, "what": f"group ({len(small)} layers)",
                             "entries": int(sym.size), **_compare(sym, segs, grid.nsym, repeat)})
            big = max(dump.layers, key=dump.numel)
            if dump.numel(big) > MAX_ENTRIES:
                s, c = _quantized(dump, big, grid, steps=4)
                flat = s.reshape(-1)
                rows.append({"dump": name, "format": fmt, "what": f"largest layer {big}, 4 steps",
                             "entries": int(flat.size),
                             **_compare(flat, [(flat.size, c, 0)], grid.nsym, repeat)})
            print(f"  {name} {fmt}: " + "; ".join(
                f"{r['what']} v7/v5 {r[7] / r[5]:.4f}" for r in rows if r["dump"] == name
                and r["format"] == fmt), flush=True)
    return rows


def render(rows, argv) -> str:
    L = ["# `ctx` model version 7 against version 5", "",
         f"`python benchmarks/bench_ctx7.py {' '.join(argv)}` "
         f"({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; one thread; CPU: process "
         "time, medians of interleaved rounds, ns per symbol)", "",
         "| dump | format | coded | entries | v5 bytes | v7 bytes | v7 / v5 | v5 enc / dec ns | "
         "v7 enc / dec ns | v7 / v5 CPU enc / dec |",
         "|---|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        L.append(f"| {r['dump']} | {r['format']} | {r['what']} | {r['entries']:,} | {r[5]:,} | "
                 f"{r[7]:,} | {r[7] / r[5]:.4f} | {r['enc5']:.0f} / {r['dec5']:.0f} | "
                 f"{r['enc7']:.0f} / {r['dec7']:.0f} | {r['enc7'] / r['enc5']:.2f} / "
                 f"{r['dec7'] / r['dec5']:.2f} |")
    groups = [r for r in rows if r["what"].startswith("group")]
    larges = [r for r in rows if not r["what"].startswith("group")]
    if groups:
        q = [r[7] / r[5] for r in groups]
        L += ["", f"Groups: v7 / v5 {min(q):.4f}-{max(q):.4f} (never larger: "
              f"{all(x < 1 for x in q)})."]
    if larges:
        q = [r[7] / r[5] for r in larges]
        c = [r["dec7"] / r["dec5"] for r in larges]
        L += [f"Largest layers alone: v7 / v5 {min(q):.4f}-{max(q):.4f} bytes, decode CPU "
              f"{min(c):.2f}-{max(c):.2f}x: the default file codes them with version 5."]
    return "\n".join(L) + "\n"


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dumps", nargs="+", required=True, metavar="NAME=PATH")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--md", metavar="PATH", help="default benchmarks/results/ctx7.md")
    args = ap.parse_args(argv)
    rows = []
    for name, path in (d.split("=", 1) for d in args.dumps):
        rows += bench(name, path, args.repeat)
    md = render(rows, sys.argv[1:] if argv is None else argv)
    out = Path(args.md) if args.md else ROOT / "benchmarks/results/ctx7.md"
    out.write_text(md)
    print(md)


if __name__ == "__main__":
    main()
