"""Whole-pipeline speed, one core: co3cli vs "torch fp8 cast + zstd-3", side by side.

    python benchmarks/bench_pipeline.py [--n 10000000] [--repeat 5] [--json]
    python benchmarks/bench_pipeline.py --small [--repeat 7]   # small layers (bench_small.py)
    PYTHONPATH=/work/main python benchmarks/bench_pipeline.py   # another checkout's co3cli

Input: one float32 layer of ``--n`` entries (GenNorm beta=0.9 with 15 % exact zeros, like a
ReLU net's gradient; i.i.d., so the context coder ``ctx`` has no structure to find here — see
``bench_ctx.py``/``bench_rate.py`` for its rates on real gradients). Throughput = MB of float32 input per second (1 MB = 1e6 bytes).

* co3 compress = scale (absmax) + quantize + model fit + integer table + entropy code + frame
  (a complete ``.co3`` file in memory, CRCs included);
* co3 decompress = verify the file (CRCs) + parse + decode + dequantize;
* peer compress = ``x * s`` + clamp + ``torch`` float8 cast + ``zstd -3`` of the bytes;
* peer decompress = ``zstd`` decompress + float8 -> float32 cast + ``/ s``;
* memcpy = ``np.copyto`` of the same 4n bytes (one core's copy bandwidth).

Every operation is timed in process CPU time (``time.process_time``), the operations
interleaved (one round = every operation once, ``--repeat`` rounds), medians reported; the
peer and memcpy are measured in the same rounds, so the ratios share the machine's load.
"best path / memcpy" is the fastest co3 fp8 operation's throughput over memcpy's; "ctx / ans"
is how many times slower the ``ctx`` coder is than ``ans`` on the same input and format.
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


def interleaved(tasks: dict, repeat: int) -> dict:
    """Median process CPU seconds of each callable, the tasks run round-robin ``repeat`` times."""
    ts = {k: [] for k in tasks}
    for _ in range(repeat):
        for k, fn in tasks.items():
            t = time.process_time()
            fn()
            ts[k].append(time.process_time() - t)
    return {k: statistics.median(v) for k, v in ts.items()}


def make_data(n, seed=0):
    from scipy import stats

    rng = np.random.default_rng(seed)
    x = stats.gennorm.rvs(0.9, scale=1e-3, size=n, random_state=rng).astype(np.float32)
    x[rng.random(n) < 0.15] = 0
    return x


def co3_ops(x, fmt, coder_id):
    """(compress, decompress, info) callables for one configuration (kernels compiled)."""
    from co3cli.codec import decode_values, encode_layer, read_co3_setup
    from co3cli.coding import get_coder
    from co3cli.container import Co3Writer, open_co3
    from co3cli.formats import get_grid
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

    blob = compress()  # compiles the kernels once

    def decompress():
        co3 = open_co3(io.BytesIO(blob))
        g, c = read_co3_setup(co3.header)
        block = co3.read_layer(0)
        return decode_values(block, g, c, x.size)[0]  # co3 decompress's path (fused for ans)

    y = decompress()
    info = {"bytes": len(blob), "bpe": 8 * len(blob) / x.size,
            "decoded_ok": bool(np.isfinite(y).all() and y.shape == x.shape)}
    return compress, decompress, info


def peer_ops(x, level=3):
    import torch
    import zstandard

    torch.set_num_threads(1)
    t = torch.from_numpy(x)
    cctx, dctx = zstandard.ZstdCompressor(level=level), zstandard.ZstdDecompressor()

    def compress():
        s = 57344.0 / float(t.abs().max())
        q = (t * s).clamp_(-57344, 57344).to(torch.float8_e5m2)
        return s, cctx.compress(q.view(torch.uint8).numpy().tobytes())

    s, blob = compress()

    def decompress():
        b = np.frombuffer(dctx.decompress(blob), dtype=np.uint8)
        return (torch.from_numpy(b.copy()).view(torch.float8_e5m2).float() / s).numpy()

    decompress()
    return compress, decompress, {"bytes": len(blob) + 4, "bpe": 8 * (len(blob) + 4) / x.size}


CONFIGS = (("fp8-e5m2", "huffman"), ("fp8-e5m2", "ans"), ("fp8-e5m2", "ctx"),
           ("fp4-co3", "ans"), ("fp4-co3", "huffman"), ("fp4-co3", "ctx"))
PEER = "peer: torch fp8-e5m2 cast + zstd-3"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=10_000_000)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--small", action="store_true", help="the small-layer rows instead "
                    "(benchmarks/bench_small.py: 200 x 10^3, 10^5, 10^6 entries)")
    args, rest = ap.parse_known_args()
    if args.small:
        import bench_small

        return bench_small.main(rest + ["--repeat", str(args.repeat)]
                                + (["--json"] if args.json else []))
    if rest:
        ap.error(f"unrecognized arguments: {' '.join(rest)}")
    import torch

    import co3cli

    torch.set_num_threads(1)
    x = make_data(args.n)
    mb = x.nbytes / 1e6
    ops, infos = {}, {}
    for fmt, coder in CONFIGS:
        name = f"co3 {fmt} {coder}"
        c, d, infos[name] = co3_ops(x, fmt, coder)
        ops[(name, "c")], ops[(name, "d")] = c, d
    c, d, infos[PEER] = peer_ops(x)
    ops[(PEER, "c")], ops[(PEER, "d")] = c, d
    dst = np.empty_like(x)
    ops[("memcpy", "c")] = lambda: np.copyto(dst, x)
    t = interleaved(ops, args.repeat)
    t_mem = t[("memcpy", "c")]
    rows = []
    for name, info in infos.items():
        r = {"config": name, **info, "t_compress": t[(name, "c")], "t_decompress": t[(name, "d")]}
        r["compress_MBps"] = mb / r["t_compress"]
        r["decompress_MBps"] = mb / r["t_decompress"]
        r["compress_vs_peer"] = t[(PEER, "c")] / r["t_compress"]
        r["decompress_vs_peer"] = t[(PEER, "d")] / r["t_decompress"]
        r["compress_vs_memcpy"] = t_mem / r["t_compress"]
        r["decompress_vs_memcpy"] = t_mem / r["t_decompress"]
        rows.append(r)
    fp8 = [r for r in rows if r["config"].startswith("co3 fp8")]
    best = max(max(r["compress_vs_memcpy"], r["decompress_vs_memcpy"]) for r in fp8)
    ctx_vs_ans = {fmt: {op: t[(f"co3 {fmt} ctx", op)] / t[(f"co3 {fmt} ans", op)] for op in "cd"}
                  for fmt in ("fp8-e5m2", "fp4-co3")}
    summary = {"memcpy_MBps": mb / t_mem, "best_vs_memcpy": best, "ctx_vs_ans": ctx_vs_ans,
               "co3cli": os.path.dirname(co3cli.__file__)}
    if args.json:
        print(json.dumps({"n": args.n, "repeat": args.repeat, "rows": rows, **summary}, indent=1))
        return
    print(f"{args.n} float32 entries ({mb:.0f} MB), one thread, process CPU time, median of "
          f"{args.repeat} interleaved rounds ({summary['co3cli']})")
    print(f"{'configuration':<38}{'bpe':>7}{'comp MB/s':>11}{'decomp MB/s':>13}{'comp/peer':>11}"
          f"{'dec/peer':>10}{'comp/memcpy':>13}{'dec/memcpy':>12}")
    for r in rows:
        print(f"{r['config']:<38}{r['bpe']:>7.3f}{r['compress_MBps']:>11.0f}{r['decompress_MBps']:>13.0f}"
              f"{r['compress_vs_peer']:>11.2f}{r['decompress_vs_peer']:>10.2f}"
              f"{r['compress_vs_memcpy']:>12.1%}{r['decompress_vs_memcpy']:>12.1%}")
    print(f"{'memcpy (np.copyto, same bytes)':<38}{'':>7}{mb / t_mem:>11.0f}")
    print(f"best co3 fp8 path / memcpy: {best:.1%}")
    for fmt, v in ctx_vs_ans.items():
        print(f"ctx / ans time, {fmt}: compress {v['c']:.1f}x, decompress {v['d']:.1f}x")


if __name__ == "__main__":
    main()
