"""Lossless float mode against ZipNN, zstd-19 and lzma-6 over the same raw bytes, in one run.

    python benchmarks/bench_lossless.py                 # bundled dumps + captures (a few min)
    python benchmarks/bench_lossless.py --quick         # bundled dumps only, results to /tmp
    python benchmarks/bench_lossless.py --dump a.h5 ... # your dumps instead of the captures
    python benchmarks/bench_lossless.py --captures DIR  # keep (and reuse) the captures in DIR
    python benchmarks/bench_lossless.py --baseline REV  # also time REV's coder (before/after)

Dumps: the bundled ``co3cli/sample_data/digits-mlp.h5`` and ``mnist5k-mlp.h5`` (float32), and
two captured here with ``co3cli.capture.capture`` from models the coder was not tuned on:
``mnist5k-resnet`` (a BatchNorm ResNet, 30 steps, every 10th recorded) and
``stdlib-charlm-tiny`` (a character LM, 20 steps, every 2nd). Each dump is benchmarked as
float32 and as bfloat16 and float16 (its float32 values rounded to nearest even, as
``GradientRecorder(dtype=...)`` and torch's ``.to()`` store them).

Per dump x type:

* ``co3``: ``co3cli.codec.compress(--format <type>-lossless)`` to a file; bits/entry from the
  file's size (header, tables, framing: every byte). MB/s (of raw words) of the coder alone
  in memory, as the peers are timed: fit + encode of every layer's steps; decode of every
  chunk. Each chunk decodes alone (random access by layer and step), the peers' outputs
  do not. ``co3-max``: the same at ``level="max"`` (version 1, neighbour contexts; one run).
* ``zipnn``: the ``zipnn`` package (``ZipNN(bytearray_dtype=..., threads=1)``) over all the
  dump's words as one buffer (its best case: one stream). ZipNN 0.5.4 overwrites the
  buffer it compresses (even a ``bytes`` object), so every call gets a fresh copy and the
  round trip is checked against a copy taken before. Without the package the column is the
  re-implementation below (labelled ``zipnn-reimpl``). Both round trips are checked after
  the timed runs (the check is no part of either decoder's time).
* ``zstd-19``, ``lzma-6`` over the same buffer.

Timing: process CPU seconds, one thread, co3 and ZipNN interleaved round-robin
(``--repeat``, default 5, medians); zstd-19 and lzma-6 once each (they take seconds).
``uptime`` is recorded before and after: the machine is shared. Whole commands:
``python -m co3cli compress`` / ``decompress`` and a ZipNN script doing the same I/O, process
CPU of the child (start-up included), medians of ``repeat // 2`` interleaved runs.

Writes ``benchmarks/results/lossless.md`` and ``lossless.json`` (``--quick``: ``/tmp``).
"""

from __future__ import annotations

import argparse
import json
import lzma
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_pipeline import interleaved  # noqa: E402  (the one round-robin timer)

TYPES = ("float32", "bfloat16", "float16")
IDS = {"float32": "f32-lossless", "bfloat16": "bf16-lossless", "float16": "f16-lossless"}
CAPTURES = {"mnist5k-resnet": dict(steps=30, every=10), "stdlib-charlm-tiny": dict(steps=20, every=2)}


def cast_words(x: np.ndarray, dtype: str) -> np.ndarray:
    """float32 values -> the words of ``dtype`` (round to nearest even)."""
    if dtype == "float32":
        return x.view(np.uint32).copy()
    if dtype == "float16":
        return x.astype(np.float16).view(np.uint16)
    u = x.view(np.uint32).astype(np.uint64)
    r = (u + 0x7FFF + ((u >> 16) & 1)) >> 16  # round to nearest even
    nan = np.isnan(x)
    return np.where(nan, (u >> 16) | 0x40, r).astype(np.uint16)


def load(path: str, dtype: str):
    """(name, words (steps, numel), shape) of every layer, cast to ``dtype``."""
    from co3cli.dump import Dump

    with Dump.open(path) as d:
        return [(n, cast_words(d.read_layer(n), dtype), d.shape(n)) for n in d.layers], d.steps


def write_typed(layers, steps, dtype: str, path: str) -> None:
    import h5py

    with h5py.File(path, "w") as f:
        f.attrs["schema"] = "co3.gradients/1"
        f.attrs["layers"] = json.dumps([n for n, _, _ in layers])
        for name, w, shape in layers:
            data = {"float32": w.view(np.float32) if w.dtype == np.uint32 else w,
                    "float16": w.view(np.float16)}.get(dtype, w)
            ds = f.create_dataset(f"grads/{name}", data=data)
            ds.attrs["shape"] = np.asarray(shape, dtype=np.int64)
            if dtype != "float32":
                ds.attrs["dtype"] = dtype
        f.create_dataset("steps", data=np.asarray(steps, dtype=np.int64))


# -- ZipNN's method, re-implemented (only when the package is missing) ----------------------
def zipnn_reimpl(buf: bytes, dtype: str) -> int:
    """Bytes of ZipNN's published method (Hershcovitch et al., arXiv:2411.05239) re-implemented
    here: the words' bytes grouped into planes (the exponent byte, with the sign rotated to
    the low bit, on its own), each plane Huffman-coded when that saves bytes (estimated as the
    plane's order-0 Huffman code length from co3cli's Huffman coder, plus a 256-entry table),
    else stored."""
    from co3cli.coding import get_coder

    width = 4 if dtype == "float32" else 2
    w = np.frombuffer(buf, dtype=np.uint32 if width == 4 else np.uint16).astype(np.uint64)
    bits = 8 * width
    top = 1 + (8 if dtype != "float16" else 5)
    rot = ((w << 1) | (w >> (bits - 1))) & ((1 << bits) - 1)  # sign to the low bit
    planes = [((rot >> (bits - 8 * (i + 1))) & 0xFF).astype(np.uint16) for i in range(width)]
    total = 0
    for p in planes:
        counts = np.bincount(p, minlength=256)
        table = get_coder("huffman", max_len=16).table_from_weights(counts + 1e-9 * (counts == 0))
        coded = int(np.ceil(table.expected_bits(counts) / 8)) + 256
        total += min(coded, p.size)
    del top
    return total


def peers(buf: bytes, dtype: str, zipnn_mod):
    """name -> (compress callable -> nbytes, decompress callable or None)."""
    import zstandard

    out = {}
    if zipnn_mod is not None:
        state = {}

        def zc():
            z = zipnn_mod.ZipNN(bytearray_dtype=dtype, threads=1)
            state["c"] = z.compress(bytearray(buf))  # a fresh copy: ZipNN writes into its input
            return len(state["c"])

        def zd():  # (checked after the timed runs: the check is no part of decoding)
            z = zipnn_mod.ZipNN(bytearray_dtype=dtype, threads=1)
            state["d"] = z.decompress(state["c"])

        def zcheck():
            if bytes(state["d"]) != buf:
                raise AssertionError("zipnn did not round-trip")

        zd.check = zcheck
        out["zipnn"] = (zc, zd)
    else:
        out["zipnn-reimpl"] = (lambda: zipnn_reimpl(buf, dtype), None)
    z19 = {}

    def zstd_c():
        z19["c"] = zstandard.ZstdCompressor(level=19).compress(buf)
        return len(z19["c"])

    out["zstd-19"] = (zstd_c, lambda: zstandard.ZstdDecompressor().decompress(z19["c"]))
    lz = {}

    def lzma_c():
        lz["c"] = lzma.compress(buf, preset=6)
        return len(lz["c"])

    out["lzma-6"] = (lzma_c, lambda: lzma.decompress(lz["c"]))
    return out


def co3_core(layers, dtype: str, level: str = "fast", fast_module=None):
    """(encode callable, decode callable) of the coder alone, in memory, over every layer, as
    ``co3cli.lossless`` calls it (fit, then all steps of a layer; decode: all steps);
    ``fast_module``: another version of ``co3cli.coding.lossless_pairs`` (``--baseline``)."""
    from co3cli.coding import row_length
    from co3cli.coding.lossless import LAYOUTS, LEVELS, LosslessCoder

    coder = LosslessCoder(dtype, LEVELS[level])
    if fast_module is None:
        fit_encode = coder.fit_encode
    else:
        def fit_encode(w, cols):
            return fast_module.fit_encode(w, LAYOUTS[dtype], cols)
    coded = []

    def enc():
        coded.clear()
        for name, w, shape in layers:
            cols = row_length(shape, w.shape[1])
            coded.append((*fit_encode(w, cols), cols, w))

    decoded = []

    def dec():  # (checked after the timed runs: the check is no part of decoding)
        decoded[:] = [table.decode_steps(bodies, w.shape[1], cols)
                      for table, bodies, cols, w in coded]

    def check():
        if not all(np.array_equal(d, w) for d, (_, _, _, w) in zip(decoded, coded)):
            raise AssertionError("co3 lossless did not round-trip")

    dec.check = check
    return enc, dec


BASELINE_MODULES = ("lossless_pairs", "lossless_pair_fit", "lossless_pair_kernels",
                    "lossless_layer_kernels")


def load_baseline(ref: str, folder: str):
    """``co3cli.coding.lossless_pairs`` (the default coder) and its kernels as git revision
    ``ref`` has them, as modules of their own (``baseline_*``, their numba cache in
    ``folder``), to time against this tree's."""
    import importlib
    import re
    import subprocess

    for name in BASELINE_MODULES:
        src = subprocess.run(["git", "-C", str(ROOT), "show", f"{ref}:co3cli/coding/{name}.py"],
                             check=True, capture_output=True, text=True).stdout
        for other in BASELINE_MODULES:
            src = re.sub(rf"from co3cli\.coding import {other} as (\w+)",
                         rf"import baseline_{other} as \1", src)
            src = src.replace(f"from co3cli.coding.{other} import", f"from baseline_{other} import")
        Path(folder, f"baseline_{name}.py").write_text(src)
    sys.path.insert(0, folder)
    return importlib.import_module("baseline_lossless_pairs")


ZIPNN_CMD = """import sys, h5py, json, numpy as np, zipnn
src, dst, dtype, mode = sys.argv[1:5]
if mode == "c":
    with h5py.File(src, "r") as f:
        buf = b"".join(np.ascontiguousarray(f["grads"][n][()]).tobytes()
                       for n in json.loads(f.attrs["layers"]))
    open(dst, "wb").write(zipnn.ZipNN(bytearray_dtype=dtype, threads=1).compress(bytearray(buf)))
else:
    raw = bytes(zipnn.ZipNN(bytearray_dtype=dtype, threads=1).decompress(open(src, "rb").read()))
    with h5py.File(dst, "w") as f:
        f.create_dataset("words", data=np.frombuffer(raw, dtype=np.uint8))
"""


def whole_commands(typed: str, dtype: str, tmp: str, repeat: int, with_zipnn: bool) -> dict:
    """Process CPU seconds (children's user + system, start-up included) of ``python -m co3cli
    compress`` / ``decompress`` of the typed dump, and of a ZipNN script doing the same (h5py
    read of every layer, compress, write; read, decompress, write one h5 dataset); medians of
    ``repeat`` interleaved runs."""
    import resource
    import subprocess

    py = sys.executable
    co3, back, zf, zback = (os.path.join(tmp, n) for n in ("w.co3", "w.h5", "w.zipnn", "z.h5"))
    cmds = {"co3 compress": [py, "-m", "co3cli", "compress", typed, "-o", co3, "--format",
                             IDS[dtype], "-q"],
            "co3 decompress": [py, "-m", "co3cli", "decompress", co3, "-o", back, "-q"]}
    if with_zipnn:
        cmds["zipnn compress"] = [py, "-c", ZIPNN_CMD, typed, zf, dtype, "c"]
        cmds["zipnn decompress"] = [py, "-c", ZIPNN_CMD, zf, zback, dtype, "d"]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    times = {k: [] for k in cmds}
    for _ in range(repeat):
        for name, cmd in cmds.items():
            r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
            subprocess.run(cmd, check=True, env=env, stdout=subprocess.DEVNULL)
            r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
            times[name].append(r1.ru_utime - r0.ru_utime + r1.ru_stime - r0.ru_stime)
    return {k: float(np.median(v)) for k, v in times.items()}


def bench_one(label, path, dtype, zipnn_mod, repeat, tmp, baseline=None):
    from co3cli.codec import compress, decompress
    from co3cli.lossless import compress_lossless

    layers, steps = load(path, dtype)
    typed = os.path.join(tmp, f"typed-{dtype}.h5")
    write_typed(layers, steps, dtype, typed)
    entries = sum(w.size for _, w, _ in layers)
    buf = b"".join(np.ascontiguousarray(w).tobytes() for _, w, _ in layers)
    mb = len(buf) / 1e6
    co3file = os.path.join(tmp, "g.co3")
    res = compress(typed, co3file, format=IDS[dtype])
    decompress(co3file, os.path.join(tmp, "back.h5"))
    back, _ = load_typed(os.path.join(tmp, "back.h5"))
    ok = all(np.array_equal(b, w) for b, (_, w, _) in zip(back, layers))
    enc, dec = co3_core(layers, dtype)
    enc_max, dec_max = co3_core(layers, dtype, "max")
    enc_max()
    dec_max()
    dec_max.check()
    t0 = time.process_time()
    enc_max()
    t1 = time.process_time()
    dec_max()
    t2 = time.process_time()
    res_max = compress_lossless(typed, os.path.join(tmp, "max.co3"), format=IDS[dtype],
                                level="max")
    ps = peers(buf, dtype, zipnn_mod)
    zname = "zipnn" if "zipnn" in ps else "zipnn-reimpl"
    zc, zd = ps[zname]
    enc()
    dec()  # compiled, checked
    dec.check()
    zbytes = zc()
    if zd is not None:
        zd()
        zd.check()
    tasks = {"co3 enc": enc, "co3 dec": dec, f"{zname} enc": zc}
    if zd is not None:
        tasks[f"{zname} dec"] = zd
    if baseline is not None:
        benc, bdec = co3_core(layers, dtype, fast_module=baseline)
        benc()
        bdec()
        bdec.check()
        tasks.update({"base enc": benc, "base dec": bdec})
    t = interleaved(tasks, repeat)
    for name in ("co3 dec", f"{zname} dec", "base dec"):
        if name in tasks and hasattr(tasks[name], "check"):
            tasks[name].check()
    rows = [{"coder": "co3", "bytes": res.nbytes, "bpe": 8 * res.nbytes / entries,
             "enc_mbs": mb / t["co3 enc"], "dec_mbs": mb / t["co3 dec"], "exact": ok},
            {"coder": "co3-max", "bytes": res_max.nbytes, "bpe": 8 * res_max.nbytes / entries,
             "enc_mbs": mb / (t1 - t0), "dec_mbs": mb / (t2 - t1), "exact": True}]
    rows.insert(1, {"coder": zname, "bytes": zbytes, "bpe": 8 * zbytes / entries,
                 "enc_mbs": mb / t[f"{zname} enc"],
                 "dec_mbs": mb / t[f"{zname} dec"] if zd is not None else None,
                 "exact": zd is not None})
    for name in ("zstd-19", "lzma-6"):
        c, d = ps[name]
        t0 = time.process_time()
        n = c()
        t1 = time.process_time()
        d()
        t2 = time.process_time()
        rows.append({"coder": name, "bytes": n, "bpe": 8 * n / entries, "enc_mbs": mb / (t1 - t0),
                     "dec_mbs": mb / (t2 - t1), "exact": True})
    kinds = {}
    for c in res.layers:
        key = c["mode"] if c["mode"] != "pairs" else \
            f"{'sign raw' if c['rot'] else 'sign in'}/{'compact' if c['compact'] else 'full'}" \
            f"/R{c['R']}/p{c['precision']}"
        kinds[key] = kinds.get(key, 0) + 1
    if baseline is not None:
        rows.append({"coder": "co3-baseline", "bytes": None, "bpe": None, "exact": True,
                     "enc_mbs": mb / t["base enc"], "dec_mbs": mb / t["base dec"]})
    cmd = whole_commands(typed, dtype, tmp, max(1, repeat // 2), zd is not None)
    return {"dump": label, "type": dtype, "entries": entries, "raw_bytes": len(buf),
            "raw_bpe": 8 * len(buf) / entries, "rows": rows, "co3_tables": kinds,
            "ratio_vs_zipnn": rows[0]["bytes"] / zbytes, "commands_s": cmd,
            "speed_vs_zipnn": [rows[0]["enc_mbs"] / rows[1]["enc_mbs"],
                               rows[0]["dec_mbs"] / rows[1]["dec_mbs"]
                               if rows[1]["dec_mbs"] else None]}


def load_typed(path):
    import h5py

    with h5py.File(path, "r") as f:
        names = json.loads(f.attrs["layers"])
        out = []
        for n in names:
            ds = f["grads"][n]
            out.append(ds[()].view(np.uint32 if ds.dtype == np.float32 else np.uint16))
        return out, None


def capture_dumps(folder: str) -> dict:
    from co3cli.capture import capture

    out = {}
    for task, kw in CAPTURES.items():
        path = os.path.join(folder, f"{task}.h5")
        if not os.path.exists(path):
            capture(task=task, out=path, seed=0, progress=False, **kw)
        out[task] = path
    return out


def markdown(results, meta) -> str:
    lines = ["# Lossless float mode: co3 vs ZipNN, zstd-19, lzma-6 (same raw bytes, same run)", "",
             f"`python benchmarks/bench_lossless.py` ({meta['when']}; co3cli {meta['co3cli']}, "
             f"zipnn {meta['zipnn']}; one thread; `uptime` before: {meta['uptime_before']}; "
             f"after: {meta['uptime_after']}: a shared 2-core machine, MB/s are noisy; co3 and "
             "ZipNN are timed interleaved in the same run, so their ratio is the figure to read).",
             "",
             "co3 = the default (`--format *-lossless`, table version 3, the pair coder); "
             "co3-max = `level=\"max\"` (version 1, neighbour contexts). Bits per entry (every "
             "byte of the co3 file counted; the peers over one buffer of all the dump's words) "
             "and MB/s of raw words (process CPU time; co3 and ZipNN: medians of "
             f"{meta['repeat']} interleaved runs; co3-max, zstd, lzma: one run). "
             "bytes = co3/ZipNN bytes; speed = co3/ZipNN MB/s (enc / dec; > 1: co3 faster).", "",
             "| dump | type | entries | co3 bpe | co3-max bpe | ZipNN bpe | zstd-19 bpe | lzma-6 bpe "
             "| bytes | co3 enc / dec MB/s | ZipNN enc / dec MB/s | speed | co3-max enc / dec "
             "| zstd-19 enc / dec | lzma-6 enc / dec |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]

    def sp(r):
        d = "-" if r["dec_mbs"] is None else f"{r['dec_mbs']:.0f}"
        return f"{r['enc_mbs']:.0f} / {d}"

    for res in results:
        r = {row["coder"].split("-reimpl")[0]: row for row in res["rows"]}
        se, sd = res["speed_vs_zipnn"]
        lines.append(f"| {res['dump']} | {res['type']} | {res['entries']} | {r['co3']['bpe']:.3f} | "
                     f"{r['co3-max']['bpe']:.3f} | {r['zipnn']['bpe']:.3f} | "
                     f"{r['zstd-19']['bpe']:.3f} | {r['lzma-6']['bpe']:.3f} | "
                     f"{res['ratio_vs_zipnn']:.3f} | {sp(r['co3'])} | {sp(r['zipnn'])} | "
                     f"{se:.2f} / {'-' if sd is None else f'{sd:.2f}'} | {sp(r['co3-max'])} | "
                     f"{sp(r['zstd-19'])} | {sp(r['lzma-6'])} |")
    worst = max(results, key=lambda x: x["ratio_vs_zipnn"])
    slow = min(results, key=lambda x: min(v for v in x["speed_vs_zipnn"] if v is not None))
    lines += ["", f"Worst case against ZipNN: bytes {worst['dump']} {worst['type']}, co3/ZipNN = "
              f"{worst['ratio_vs_zipnn']:.3f}; speed {slow['dump']} {slow['type']}, co3/ZipNN = "
              f"{slow['speed_vs_zipnn'][0]:.2f} / {slow['speed_vs_zipnn'][1] or 0:.2f}. "
              f"Every co3 file decoded bit-exactly: {all(r['rows'][0]['exact'] for r in results)}.",
              "", "Whole commands (process CPU seconds of the child, Python start-up and h5 I/O "
              "included; medians): `python -m co3cli compress` / `decompress` of the typed dump "
              "against a ZipNN script doing the same (h5py read of every layer, compress, write; "
              "read, decompress, write one h5 dataset).", "",
              "| dump | type | co3 compress / decompress s | ZipNN script compress / decompress s |",
              "|---|---|---:|---:|"]
    for res in results:
        c = res["commands_s"]
        z = (f"{c['zipnn compress']:.2f} / {c['zipnn decompress']:.2f}"
             if "zipnn compress" in c else "-")
        lines.append(f"| {res['dump']} | {res['type']} | {c['co3 compress']:.2f} / "
                     f"{c['co3 decompress']:.2f} | {z} |")
    if any(row["coder"] == "co3-baseline" for res in results for row in res["rows"]):
        lines += ["", f"Against the pair coder of `{meta['baseline']}` (`--baseline`: timed in "
                  "the same interleaved runs over the same layers): MB/s of both and this "
                  "tree's speed-up.", "",
                  "| dump | type | baseline enc / dec MB/s | this tree enc / dec MB/s | speed-up "
                  "enc / dec | baseline / ZipNN speed enc / dec |", "|---|---|---:|---:|---:|---:|"]
        for res in results:
            r = {row["coder"].split("-reimpl")[0]: row for row in res["rows"]}
            b, c, z = r["co3-baseline"], r["co3"], r["zipnn"]
            zd = z["dec_mbs"] or float("nan")
            lines.append(f"| {res['dump']} | {res['type']} | {sp(b)} | {sp(c)} | "
                         f"{c['enc_mbs'] / b['enc_mbs']:.2f} / {c['dec_mbs'] / b['dec_mbs']:.2f} | "
                         f"{b['enc_mbs'] / z['enc_mbs']:.2f} / {b['dec_mbs'] / zd:.2f} |")
    lines += ["", "co3 tables chosen (the sign in the symbol or raw / compact or full / raw bits R / "
              "precision: layers; raw: stored as they are):", ""]
    for res in results:
        lines.append(f"- {res['dump']} {res['type']}: {res['co3_tables']}")
    return "\n".join(lines) + "\n"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--dump", nargs="*", help="dumps to use instead of the captures")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--captures", help="folder to keep the captured dumps in (and reuse)")
    ap.add_argument("--baseline", help="a git revision whose pair coder is timed too "
                    "(interleaved, same run): the before/after of a speed change")
    args = ap.parse_args(argv)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    import co3cli

    try:
        import zipnn as zipnn_mod
        zver = getattr(zipnn_mod, "__version__", None) or _dist_version("zipnn")
    except ImportError:
        zipnn_mod, zver = None, "not installed (re-implementation)"
    load_before = _uptime()
    dumps = {p.stem: str(p) for p in sorted((ROOT / "co3cli" / "sample_data").glob("*.h5"))}
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        if args.dump:
            dumps.update({Path(p).stem: p for p in args.dump})
        elif not args.quick:
            folder = args.captures or tmp
            os.makedirs(folder, exist_ok=True)
            dumps.update({f"{k} (captured)": v for k, v in capture_dumps(folder).items()})
        baseline = load_baseline(args.baseline, tmp) if args.baseline else None
        for label, path in dumps.items():
            for dtype in TYPES:
                res = bench_one(label, path, dtype, zipnn_mod, args.repeat, tmp, baseline)
                results.append(res)
                r = res["rows"]
                print(f"{label:28s} {dtype:9s} " + "  ".join(
                    f"{row['coder']} {row['bpe'] or 0:.3f} bpe {row['enc_mbs']:.0f}/"
                    f"{row['dec_mbs'] or 0:.0f} MB/s" for row in r), flush=True)
    meta = {"when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "co3cli": co3cli.__version__,
            "zipnn": zver, "repeat": args.repeat, "uptime_before": load_before,
            "baseline": args.baseline,
            "uptime_after": _uptime()}
    out = Path("/tmp") if args.quick else ROOT / "benchmarks" / "results"
    (out / ("bench_lossless_quick.json" if args.quick else "lossless.json")).write_text(
        json.dumps({"meta": meta, "results": results}, indent=1))
    (out / ("bench_lossless_quick.md" if args.quick else "lossless.md")).write_text(
        markdown(results, meta))
    print(markdown(results, meta))


def _uptime() -> str:
    import subprocess

    try:
        return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    except OSError:
        return f"load average {[round(v, 2) for v in os.getloadavg()]}"


def _dist_version(name):
    from importlib.metadata import version

    return version(name)


if __name__ == "__main__":
    main()
