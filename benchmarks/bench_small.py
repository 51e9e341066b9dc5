"""Small layers, one core: co3 vs "fp8 cast + zstd-3" per layer, the peer in the same run.

    python benchmarks/bench_small.py [--repeat 7] [--json] [--out benchmarks/results/small_layers]
    python benchmarks/bench_pipeline.py --small        # the same
    PYTHONPATH=/path/to/other/checkout python benchmarks/bench_small.py   # "today"

Rows (one float32 step per layer, GenNorm-like: beta 0.9, 15 % exact zeros, i.i.d.):

* ``200x1e3``: 200 layers x 10^3 entries (BatchNorm/bias-like), the fixed cost per layer:
  - ``lib``: the codec on arrays already in memory: a whole ``.co3`` file written to memory
    (scale, quantize, fit, tables, code, container with CRCs) and read back (verify, parse,
    decode, dequantize every layer), layers grouped as ``co3cli.codec.compress`` groups them
    (a checkout without groups: one block per layer, as it codes them);
  - ``file``: ``co3cli.codec.compress(dump.h5, out.co3, threads=1)`` / ``decompress`` (HDF5
    read and write included, imports and kernel compilation excluded);
* ``1e5``, ``1e6``: one layer of that size, the library on arrays (as ``bench_pipeline.py``).

Peer: per layer ``s = 57344 / max|x|``, torch float8-e5m2 cast of ``x * s``, zstd level 3 of
the bytes (python-zstandard), 4 bytes for ``s``; decompress: zstd, cast back, ``/ s``. The peer's
``file`` rows read/write the same HDF5 datasets with h5py (the compressed layers to one file).
Bytes: the whole ``.co3`` file (header, every block, trailer); the peer's sum of frames + 4 B
per layer. Per-layer side bytes: (file - payload) / layers. Timing: process CPU time, every
operation of a row interleaved round-robin ``--repeat`` times, medians; the 1-minute load
average is recorded before and after.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ["SOURCE_DATE_EPOCH"] = "1700000000"
if not os.environ.get("PYTHONPATH"):  # this checkout's co3cli (PYTHONPATH: another's)
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402
from bench_pipeline import interleaved  # noqa: E402  (the one round-robin timer)


def gn(rng, steps, numel):
    a = rng.standard_gamma(1 / 0.9, (steps, numel)) ** 0.9 * 1e-3
    a *= np.where(rng.random((steps, numel)) < 0.5, -1.0, 1.0)
    a[rng.random((steps, numel)) < 0.15] = 0.0
    return a.astype(np.float32)




def co3_lib_ops(layers: dict):
    """(compress, decompress) of in-memory layers {name: (1, numel) float32} and the file."""
    from co3cli import codec, container
    from co3cli.codec import decode_block, encode_layer, read_co3_setup
    from co3cli.coding import get_coder
    from co3cli.container import Co3Writer, open_co3
    from co3cli.formats import get_grid
    from co3cli.quantize import dequantize

    grid, coder = get_grid("fp8-e5m2"), get_coder("ans")
    names = list(layers)
    header = {"format": grid.config(), "coder": coder.config(), "steps": [0], "scale_rule": "absmax",
              "model": "gennorm-zi", "layers": [{"name": n, "shape": [layers[n].shape[1]],
                                                 "numel": layers[n].shape[1]} for n in names]}
    grouped = hasattr(container, "plan_groups")  # this checkout pools small layers
    groups = container.plan_groups(names, [layers[n].shape[1] for n in names], 1) if grouped else []
    units = container.plan_units(len(names), groups) if grouped else [(False, [i]) for i in
                                                                      range(len(names))]
    if groups:
        header["small_layers"] = container.plan_config()

    def compress():
        buf = io.BytesIO()
        w = Co3Writer(buf, header, groups=True) if groups else Co3Writer(buf, header)
        for is_group, idx in units:
            if is_group:
                g = codec.encode_group([layers[names[i]] for i in idx], grid, coder)
                w.write_group(g.meta, g.table.to_bytes(),
                              [(i, list(zip(m.scales.tolist(), m.bodies)))
                               for i, m in zip(idx, g.members)])
            else:
                enc = encode_layer(layers[names[idx[0]]], grid, coder)
                w.write_layer(enc.meta, enc.table.to_bytes(), list(zip(enc.scales.tolist(),
                                                                       enc.bodies)))
        w.close()
        return buf.getvalue()

    blob = compress()

    def decompress():
        co3 = open_co3(io.BytesIO(blob))
        g, c = read_co3_setup(co3.header)
        out = []
        for block in co3.layers():
            numel = co3.header["layers"][block.index]["numel"]
            out.append(dequantize(decode_block(block, g, c, numel)[0], g, block.scales[0]))
        return out

    payload = 0
    co3 = open_co3(io.BytesIO(blob))
    for block in co3.layers():
        payload += block.payload_bytes
    ok = all(np.isfinite(y).all() for y in decompress())
    return compress, decompress, {"bytes": len(blob), "payload": payload, "decoded_ok": ok}


def peer_lib_ops(layers: dict, level: int = 3):
    import torch
    import zstandard

    cctx, dctx = zstandard.ZstdCompressor(level=level), zstandard.ZstdDecompressor()
    ts = {n: torch.from_numpy(x.ravel()) for n, x in layers.items()}

    def compress():
        out = {}
        for n, t in ts.items():
            s = 57344.0 / max(float(t.abs().max()), 1e-30)
            q = (t * s).clamp_(-57344, 57344).to(torch.float8_e5m2)
            out[n] = (s, cctx.compress(q.view(torch.uint8).numpy().tobytes()))
        return out

    blobs = compress()

    def decompress():
        return [(torch.from_numpy(np.frombuffer(dctx.decompress(b), np.uint8).copy())
                 .view(torch.float8_e5m2).float() / s).numpy() for s, b in blobs.values()]

    decompress()
    nbytes = sum(len(b) + 4 for _, b in blobs.values())
    return compress, decompress, {"bytes": nbytes, "payload": nbytes - 4 * len(blobs)}


def file_ops(src: Path, tmp: Path):
    """co3 compress/decompress file to file, and the peer doing the same I/O with h5py."""
    import h5py
    import torch
    import zstandard

    from co3cli.codec import compress, decompress

    co3, dec = tmp / "f.co3", tmp / "f.h5"
    compress(src, co3, threads=1, coder="ans", model="gennorm-zi")
    decompress(co3, dec, threads=1)
    cctx, dctx = zstandard.ZstdCompressor(level=3), zstandard.ZstdDecompressor()
    pz, pdec = tmp / "p.zst", tmp / "p.h5"

    def peer_c():
        with h5py.File(src, "r") as f, open(pz, "wb") as out:
            for n in f["grads"]:
                t = torch.from_numpy(f["grads"][n][()].ravel())
                s = 57344.0 / max(float(t.abs().max()), 1e-30)
                q = (t * s).clamp_(-57344, 57344).to(torch.float8_e5m2)
                b = cctx.compress(q.view(torch.uint8).numpy().tobytes())
                out.write(np.float32(s).tobytes() + len(b).to_bytes(4, "little") + b)

    def peer_d():
        with h5py.File(src, "r") as f:
            names = list(f["grads"])
        raw = pz.read_bytes()
        pos = 0
        with h5py.File(pdec, "w") as out:
            g = out.create_group("grads")
            for n in names:
                s = np.frombuffer(raw, np.float32, 1, pos)[0]
                blen = int.from_bytes(raw[pos + 4:pos + 8], "little")
                b = np.frombuffer(dctx.decompress(raw[pos + 8:pos + 8 + blen]), np.uint8).copy()
                pos += 8 + blen
                g.create_dataset(n, data=(torch.from_numpy(b).view(torch.float8_e5m2).float()
                                          / float(s)).numpy()[None, :])

    peer_c()
    return ({"co3": lambda: compress(src, co3, threads=1, coder="ans", model="gennorm-zi"),
             "peer": peer_c},
            {"co3": lambda: decompress(co3, dec, threads=1), "peer": peer_d})


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--out", default=None, help="write <out>.json and <out>.md")
    args = ap.parse_args(argv)
    import torch

    import co3cli

    torch.set_num_threads(1)
    rng = np.random.default_rng(0)
    cases = {"200x1e3": {f"layer{i}.weight": gn(rng, 1, 1000) for i in range(200)},
             "1e5": {"w": gn(rng, 1, 10**5)}, "1e6": {"w": gn(rng, 1, 10**6)}}
    load = [os.getloadavg()[0]]
    rows = []
    for case, layers in cases.items():
        entries = sum(x.size for x in layers.values())
        cc, cd, ci = co3_lib_ops(layers)
        pc, pd, pi = peer_lib_ops(layers)
        t = interleaved({"cc": cc, "pc": pc, "cd": cd, "pd": pd}, args.repeat)
        rows.append({"case": case, "where": "lib", "layers": len(layers), "entries": entries,
                     "co3_bytes": ci["bytes"], "co3_payload": ci["payload"],
                     "peer_bytes": pi["bytes"], "t": t})
        if case == "200x1e3":
            with tempfile.TemporaryDirectory() as d:
                from co3cli.dump import write_dump

                src = Path(d) / "small.h5"
                write_dump(src, {n: (x, (x.shape[1],)) for n, x in layers.items()},
                           steps=np.arange(1))
                comp, dec = file_ops(src, Path(d))
                tf = interleaved({"cc": comp["co3"], "pc": comp["peer"], "cd": dec["co3"],
                                  "pd": dec["peer"]}, args.repeat)
                rows.append({"case": case, "where": "file", "layers": len(layers),
                             "entries": entries, "co3_bytes": (Path(d) / "f.co3").stat().st_size,
                             "co3_payload": ci["payload"],
                             "peer_bytes": (Path(d) / "p.zst").stat().st_size, "t": tf})
    load.append(os.getloadavg()[0])
    for r in rows:
        t, n, e = r["t"], r["layers"], r["entries"]
        r.update({"co3_bpe": 8 * r["co3_bytes"] / e, "peer_bpe": 8 * r["peer_bytes"] / e,
                  "side_bytes_per_layer": (r["co3_bytes"] - r["co3_payload"]) / n,
                  "co3_c_ms_per_layer": 1e3 * t["cc"] / n, "co3_d_ms_per_layer": 1e3 * t["cd"] / n,
                  "peer_c_ms_per_layer": 1e3 * t["pc"] / n, "peer_d_ms_per_layer": 1e3 * t["pd"] / n,
                  "c_vs_peer": t["pc"] / t["cc"], "d_vs_peer": t["pd"] / t["cd"]})
    meta = {"co3cli": os.path.dirname(co3cli.__file__), "repeat": args.repeat, "load": load,
            "python": sys.version.split()[0], "numpy": np.__version__}
    if args.json:
        print(json.dumps({"rows": rows, **meta}, indent=1))
    lines = [f"small layers, one thread, process CPU time, median of {args.repeat} interleaved "
             f"rounds ({meta['co3cli']}); load {load[0]:.2f} -> {load[1]:.2f}",
             f"{'case':<9}{'where':<6}{'co3 bpe':>8}{'peer bpe':>9}{'side B/layer':>13}"
             f"{'c ms/layer':>11}{'d ms/layer':>11}{'peer c':>8}{'peer d':>8}{'c/peer':>8}{'d/peer':>8}"]
    for r in rows:
        lines.append(f"{r['case']:<9}{r['where']:<6}{r['co3_bpe']:>8.3f}{r['peer_bpe']:>9.3f}"
                     f"{r['side_bytes_per_layer']:>13.1f}{r['co3_c_ms_per_layer']:>11.3f}"
                     f"{r['co3_d_ms_per_layer']:>11.3f}{r['peer_c_ms_per_layer']:>8.3f}"
                     f"{r['peer_d_ms_per_layer']:>8.3f}{r['c_vs_peer']:>7.2f}x{r['d_vs_peer']:>7.2f}x")
    text = "\n".join(lines)
    if not args.json:
        print(text)
    if args.out:
        Path(args.out + ".json").write_text(json.dumps({"rows": rows, **meta}, indent=1))
        Path(args.out + ".txt").write_text(text + "\n")


if __name__ == "__main__":
    main()
