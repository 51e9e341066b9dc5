"""Whole-pipeline speed, one core: co3cli vs "torch fp8 cast + zstd-3", side by side.

    python benchmarks/bench_pipeline.py [--n 10000000] [--repeat 5] [--json]

Input: one float32 layer of ``--n`` entries (GenNorm beta=0.9 with 15 % exact zeros, like a
ReLU net's gradient; i.i.d., so the context coder ``ctx`` has no structure to find here — see
``bench_ctx.py``/``bench_rate.py`` for its rates on real gradients). Throughput = MB of float32 input per second (1 MB = 1e6 bytes).

* co3 compress = scale (absmax) + quantize + model fit + integer table + entropy code + frame
  (a complete ``.co3`` file in memory, CRCs included);
* co3 decompress = verify the file (CRCs) + parse + decode + dequantize;
* peer compress = ``x * s`` + clamp + ``torch`` float8 cast + ``zstd -3`` of the bytes;
* peer decompress = ``zstd`` decompress + float8 -> float32 cast + ``/ s``.
Medians over ``--repeat`` runs.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import statistics
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402


def timed(fn, repeat):
    out, ts = None, []
    for _ in range(repeat):
        t = time.perf_counter()
        out = fn()
        ts.append(time.perf_counter() - t)
    return out, statistics.median(ts)


def make_data(n, seed=0):
    from scipy import stats

    rng = np.random.default_rng(seed)
    x = stats.gennorm.rvs(0.9, scale=1e-3, size=n, random_state=rng).astype(np.float32)
    x[rng.random(n) < 0.15] = 0
    return x


def co3_roundtrip(x, fmt, coder_id, repeat):
    from co3cli.codec import decode_block, encode_layer, read_co3_setup
    from co3cli.coding import get_coder
    from co3cli.container import Co3Writer, open_co3
    from co3cli.formats import get_grid
    from co3cli.quantize import dequantize

    grid, coder = get_grid(fmt), get_coder(coder_id)
    data = x.reshape(1, -1)
    header = {"format": grid.config(), "coder": coder.config(), "steps": [0], "scale_rule": "absmax",
              "model": "gennorm-zi", "layers": [{"name": "w", "shape": [x.size], "numel": x.size}]}

    def compress():
        buf = io.BytesIO()
        w = Co3Writer(buf, header)
        enc = encode_layer(data, grid, coder)
        w.write_layer(enc.meta, enc.table.to_bytes(), list(zip(enc.scales.tolist(), enc.bodies)))
        w.close()
        return buf.getvalue()

    def decompress(blob):
        co3 = open_co3(io.BytesIO(blob))
        g, c = read_co3_setup(co3.header)
        block = co3.read_layer(0)
        sym = decode_block(block, g, c, x.size)
        return dequantize(sym[0], g, block.scales[0])

    compress()  # compile the kernels once
    blob, tc = timed(compress, repeat)
    y, td = timed(lambda: decompress(blob), repeat)
    return {"bytes": len(blob), "bpe": 8 * len(blob) / x.size, "t_compress": tc, "t_decompress": td,
            "decoded_ok": bool(np.isfinite(y).all() and y.shape == x.shape)}


def peer_roundtrip(x, repeat, level=3):
    import torch
    import zstandard

    torch.set_num_threads(1)
    t = torch.from_numpy(x)
    cctx, dctx = zstandard.ZstdCompressor(level=level), zstandard.ZstdDecompressor()

    def compress():
        s = 57344.0 / float(t.abs().max())
        q = (t * s).clamp_(-57344, 57344).to(torch.float8_e5m2)
        return s, cctx.compress(q.view(torch.uint8).numpy().tobytes())

    def decompress(s, blob):
        b = np.frombuffer(dctx.decompress(blob), dtype=np.uint8)
        return (torch.from_numpy(b.copy()).view(torch.float8_e5m2).float() / s).numpy()

    (s, blob), tc = timed(compress, repeat)
    _, td = timed(lambda: decompress(s, blob), repeat)
    return {"bytes": len(blob) + 4, "bpe": 8 * (len(blob) + 4) / x.size, "t_compress": tc, "t_decompress": td}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=10_000_000)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    import torch

    torch.set_num_threads(1)
    x = make_data(args.n)
    mb = x.nbytes / 1e6
    peer = peer_roundtrip(x, args.repeat)
    rows = []
    for fmt, coder in (("fp8-e5m2", "huffman"), ("fp8-e5m2", "ans"), ("fp8-e5m2", "ctx"),
                       ("fp4-co3", "ans"), ("fp4-co3", "huffman"), ("fp4-co3", "ctx")):
        r = co3_roundtrip(x, fmt, coder, args.repeat)
        rows.append({"config": f"co3 {fmt} {coder}", **r})
    rows.append({"config": "peer: torch fp8-e5m2 cast + zstd-3", **peer})
    for r in rows:
        r["compress_MBps"] = mb / r["t_compress"]
        r["decompress_MBps"] = mb / r["t_decompress"]
        r["compress_vs_peer"] = r["compress_MBps"] / (mb / peer["t_compress"])
        r["decompress_vs_peer"] = r["decompress_MBps"] / (mb / peer["t_decompress"])
    if args.json:
        print(json.dumps({"n": args.n, "repeat": args.repeat, "rows": rows}, indent=1))
        return
    print(f"{args.n} float32 entries ({mb:.0f} MB), one thread, median of {args.repeat}")
    print(f"{'configuration':<38}{'bpe':>7}{'comp MB/s':>11}{'decomp MB/s':>13}{'comp/peer':>11}{'dec/peer':>10}")
    for r in rows:
        print(f"{r['config']:<38}{r['bpe']:>7.3f}{r['compress_MBps']:>11.0f}{r['decompress_MBps']:>13.0f}"
              f"{r['compress_vs_peer']:>11.2f}{r['decompress_vs_peer']:>10.2f}")


if __name__ == "__main__":
    main()
