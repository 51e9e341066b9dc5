"""Where a small default ``.co3`` file spends its bytes, against zstd-3 over the same symbols.

    PYTHONPATH=. python benchmarks/bench_small_files.py [--dumps NAME=PATH ...] [--md PATH]

Per dump and format (fp8-e5m2, fp4-co3; absmax): the default ``co3 compress`` file split into
header (preamble, compact header, CRC), trailer, scales (a ``GRC`` block's packed section, else
4 bytes each), tables (as stored), framing (block heads, metadata, lengths, CRCs: the rest) and
payload (the coder's bytes), beside zstd-3 over the symbols (uint8, step by step, layer by
layer, as ``bench_rate.py --check``). Without ``--dumps`` it captures the check's small held-out
dumps (``bench_rate.TINY_TASKS`` and digits-resnet-tiny, 60 steps every 6; seed 0).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

FORMATS = ("fp8-e5m2", "fp4-co3")


def symbols_bytes(path: str, fmt: str) -> bytes:
    from co3cli.dump import Dump
    from co3cli.formats import get_grid
    from co3cli.tables import scale_and_quantize

    grid, syms = get_grid(fmt), []
    with Dump.open(path) as d:
        for lay in d.layers:
            syms.append(scale_and_quantize(d.read_layer(lay), grid, None)[1].astype(np.uint8))
    return b"".join(s[t].tobytes() for t in range(syms[0].shape[0]) for s in syms)


def breakdown(path: str, fmt: str, tmp: str) -> dict:
    import zstandard

    from co3cli import container
    from co3cli.codec import compress
    from co3cli.container import open_co3

    compact = getattr(container, "HEADER_MINOR", 1 << 16)  # (run on an older co3cli: none)

    dst = os.path.join(tmp, "x.co3")
    r = compress(path, dst, format=fmt, threads=1)
    zb = len(zstandard.ZstdCompressor(level=3).compress(symbols_bytes(path, fmt)))
    with open(dst, "rb") as f:
        co3 = open_co3(f, dst)
        blocks = list(co3.layers())
        payload = sum(b.payload_bytes for b in blocks)
        seen, tables, scales = set(), 0, 0
        for b in blocks:
            key = ("group", b.group) if b.group is not None else ("layer", b.index)
            if key not in seen:
                seen.add(key)
                tables += b.table_nbytes
        grc = co3.version[1] >= compact and any(b.group is not None and b.joined for b in blocks)
        for b in blocks:
            if not (grc and b.group is not None):
                scales += 4 * len(b.scales)
        if grc:
            from co3cli.container.gcompact import pack_scales

            scales += len(pack_scales(np.concatenate([b.scales for b in blocks if b.group is not None])))
        row = {"entries": r.entries, "file": r.nbytes, "zstd3": zb, "header": co3.header_bytes,
               "trailer": co3.trailer_bytes, "scales": scales, "tables": tables,
               "payload": payload, "version": f"1.{co3.version[1]}"}
    row["framing"] = row["file"] - sum(row[k] for k in ("header", "trailer", "scales", "tables",
                                                          "payload"))
    return row


def main(argv=None) -> None:
    import bench_rate

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dumps", nargs="+", metavar="NAME=PATH")
    ap.add_argument("--md", metavar="PATH", help="also write the table here")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-small-") as tmp:
        if args.dumps:
            dumps = [tuple(d.split("=", 1)) for d in args.dumps]
        else:
            dumps = [(n, p) for n, p, _ in bench_rate.capture_dumps(
                tmp, bench_rate.TINY_TASKS + [("digits-resnet-tiny", "digits-resnet-tiny", 60, 6)])]
        cols = ("entries", "file", "zstd3", "header", "trailer", "scales", "tables", "framing",
                "payload")
        lines = ["| dump | format | .co3 | " + " | ".join(cols) + " | file / zstd-3 | "
                 "payload / zstd-3 |", "|---|---|---|" + "---:|" * (len(cols) + 2)]
        for name, path in dumps:
            for fmt in FORMATS:
                r = breakdown(path, fmt, tmp)
                lines.append(f"| {name} | {fmt} | {r['version']} | "
                             + " | ".join(f"{r[c]:,}" for c in cols)
                             + f" | {r['file'] / r['zstd3']:.3f} | {r['payload'] / r['zstd3']:.3f} |")
                print(lines[-1], file=sys.stderr)
    md = "\n".join(lines) + "\n"
    print(md)
    if args.md:
        Path(args.md).write_text(md)


if __name__ == "__main__":
    main()
