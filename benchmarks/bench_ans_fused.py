"""rANS decompress with and without the fused decode+dequantize pass, against the peer.

    PYTHONPATH=. python benchmarks/bench_ans_fused.py [--n 10000000] [--repeat 7]

The ``unfused`` rows are ``bench_pipeline.py``'s co3 decompress (verify + parse +
``decode_block`` + ``dequantize``: a uint16 symbol array, then a lookup pass); the ``fused``
rows parse the same file and call ``AnsTable.decode_lookup`` straight into the float32 row
(what ``codec.decode_values`` can do for the ``ans`` coder); the values are checked to be
bit-identical.  Process CPU time, medians of ``--repeat`` interleaved rounds, the peer
("torch fp8 cast + zstd-3" decompress) in the same rounds.
"""

from __future__ import annotations

import argparse
import io
import os
import sys

os.environ.setdefault("OMP_NUM_THREADS", "1")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import numpy as np  # noqa: E402

import bench_pipeline as bp  # noqa: E402


def fused_decompress(blob: bytes, n: int):
    from co3cli.codec import read_co3_setup
    from co3cli.container import open_co3
    from co3cli.quantize import _check_scale

    co3 = open_co3(io.BytesIO(blob))
    grid, coder = read_co3_setup(co3.header)
    block = co3.read_layer(0)
    table = coder.table_from_bytes(block.table, grid.nsym)
    values = np.empty((len(block.bodies), n), np.float32)
    for t, body in enumerate(block.bodies):
        table.decode_lookup(body, n, grid.values / _check_scale(block.scales[t]), out=values[t])
    return values


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=10_000_000)
    ap.add_argument("--repeat", type=int, default=7)
    args = ap.parse_args()
    import torch

    torch.set_num_threads(1)
    x = bp.make_data(args.n)
    ops = {}
    for fmt in ("fp8-e5m2", "fp4-co3"):
        compress, decompress, _ = bp.co3_ops(x, fmt, "ans")
        blob = compress()
        if not np.array_equal(fused_decompress(blob, x.size)[0].view(np.uint32),
                              decompress().view(np.uint32)):
            raise SystemExit(f"{fmt}: fused values differ")
        ops[f"{fmt} unfused"] = decompress
        ops[f"{fmt} fused"] = lambda blob=blob: fused_decompress(blob, x.size)
    ops[bp.PEER] = bp.peer_ops(x)[1]
    t = bp.interleaved(ops, args.repeat)
    print(f"{args.n} entries, decompress, process CPU time, median of {args.repeat} interleaved rounds")
    for name, secs in t.items():
        print(f"{name:<38}{secs * 1e3:8.1f} ms{t[bp.PEER] / secs:8.2f}x the peer")


if __name__ == "__main__":
    main()
