"""Benchmark the entropy coders against constriction's rANS and general-purpose compressors.

Data: ``--n`` GenNorm(beta=0.6) samples (drawn as ``sign * Gamma(1/beta)**(1/beta)``),
rounded on a uniform grid of step 0.6 and clipped to 251 levels -> uint16 symbols with an
entropy near 4.7 bits.  Seed fixed.

Coders, all on one thread:

* ``huffman`` / ``ans``: co3cli tables built from the empirical counts (the table bytes are
  reported separately; sizes are of the common, self-delimiting payload); ``ans`` writes the
  layout the codec picks for ``--n`` symbols (4 interleaved states from 2**18),
  ``ans-1state`` the single-state layout (what every layer got before), ``ans+lookup``
  decodes straight to float32 values (``decode_lookup``, decode and dequantize in one pass);
  the three ``ans`` rows are timed round-robin in the same rounds;
* ``constriction-ans``: ``constriction.stream.stack.AnsCoder`` with a
  ``Categorical(p, perfect=False)`` model of the same empirical pmf;
* ``zstd-3``, ``zstd-19``, ``lzma``, ``zlib-6``: byte compressors over the symbols as uint8.

Speeds are the median of ``--repeat`` runs (process CPU time, encode and decode alternating) in M symbols/s; "vs H" is the size overhead
over ``n * H`` (H = empirical entropy).

    python benchmarks/bench_coders.py --n 10000000 --repeat 5 --json results.json
"""

from __future__ import annotations

import argparse
import json
import lzma
import statistics
import sys
import time
import zlib

import numpy as np

from co3cli.coding import get_coder

NLEVELS = 251


def gennorm_symbols(n: int, beta: float = 0.6, step: float = 0.6, seed: int = 0) -> np.ndarray:
    """Quantized GenNorm sample as uint16 symbols in [0, NLEVELS)."""
    rng = np.random.default_rng(seed)
    g = rng.gamma(1 / beta, size=n) ** (1 / beta) * rng.choice([-1.0, 1.0], size=n)
    half = NLEVELS // 2
    return (np.clip(np.rint(g / step), -half, half) + half).astype(np.uint16)


def timed_pair(encode, decode, repeat: int):
    """Median process CPU seconds of ``encode()`` and ``decode(blob)``, run alternately
    ``repeat`` times (interleaved: both see the same load), and the last results."""
    t_enc, t_dec = [], []
    for _ in range(repeat):
        start = time.process_time()
        blob = encode()
        t_enc.append(time.process_time() - start)
        start = time.process_time()
        out = decode(blob)
        t_dec.append(time.process_time() - start)
    return statistics.median(t_enc), statistics.median(t_dec), blob, out


def timed_pairs(pairs: dict, repeat: int) -> dict:
    """:func:`timed_pair` for several ``name: (encode, decode)`` at once, round-robin."""
    runs = {name: ([], [], None, None) for name in pairs}
    for _ in range(repeat):
        for name, (encode, decode) in pairs.items():
            t_enc, t_dec, blob, out = timed_pair(encode, decode, 1)
            runs[name] = (runs[name][0] + [t_enc], runs[name][1] + [t_dec], blob, out)
    return {k: (statistics.median(e), statistics.median(d), b, o) for k, (e, d, b, o) in runs.items()}


def byte_codecs():
    """(name, compress, decompress) for the general-purpose compressors."""
    import zstandard

    codecs = []
    for level in (3, 19):
        codecs.append((
            f"zstd-{level}",
            zstandard.ZstdCompressor(level=level).compress,
            zstandard.ZstdDecompressor().decompress,
        ))
    codecs.append(("lzma", lzma.compress, lzma.decompress))
    codecs.append(("zlib-6", lambda b: zlib.compress(b, 6), zlib.decompress))
    return codecs


def run(n: int, repeat: int) -> dict:
    sym = gennorm_symbols(n)
    counts = np.bincount(sym, minlength=NLEVELS)
    p = counts / n
    entropy = float(-np.sum(p[p > 0] * np.log2(p[p > 0])))
    rows = []

    def add(name, nbytes, t_enc, t_dec, table_bytes=0):
        rows.append({
            "coder": name, "bytes": nbytes, "table_bytes": table_bytes,
            "bits_per_symbol": 8 * nbytes / n,
            "overhead_vs_entropy_pct": 100 * (8 * nbytes / (n * entropy) - 1),
            "encode_msym_s": n / t_enc / 1e6, "decode_msym_s": n / t_dec / 1e6,
        })

    for coder in (get_coder("huffman", max_len=16),):
        table = coder.table_from_weights(counts.astype(np.float64))
        table.decode(table.encode(sym[:1000]), 1000)  # compile / load numba kernels
        t_enc, t_dec, blob, out = timed_pair(lambda: table.encode(sym),
                                             lambda b: table.decode(b, n), repeat)
        if not np.array_equal(out, sym):
            raise SystemExit(f"{coder.id}: round trip failed")
        add(coder.id, len(blob), t_enc, t_dec, len(table.to_bytes()))

    table = get_coder("ans", precision=16).table_from_weights(counts.astype(np.float64))
    lut = (np.arange(NLEVELS) - NLEVELS // 2).astype(np.float32)
    ans_rows = {  # interleaved with each other: the layouts' A/B in the same rounds
        "ans": (lambda: table.encode(sym), lambda b: table.decode(b, n)),
        "ans-1state": (lambda: table.encode(sym, lanes=1), lambda b: table.decode(b, n)),
        "ans+lookup": (lambda: table.encode(sym), lambda b: table.decode_lookup(b, n, lut)),
    }
    for enc, dec in ans_rows.values():  # compile / load numba kernels
        dec(enc())
    for name, (t_enc, t_dec, blob, out) in timed_pairs(ans_rows, repeat).items():
        want = lut[sym] if name == "ans+lookup" else sym
        if not np.array_equal(out, want):
            raise SystemExit(f"{name}: round trip failed")
        add(name, len(blob), t_enc, t_dec, len(table.to_bytes()))

    import constriction

    model = constriction.stream.model.Categorical(p, perfect=False)
    sym32 = sym.astype(np.int32)

    def c_encode():
        coder = constriction.stream.stack.AnsCoder()
        coder.encode_reverse(sym32, model)
        return coder.get_compressed()

    t_enc, t_dec, words, out = timed_pair(
        c_encode, lambda w: constriction.stream.stack.AnsCoder(w).decode(model, n), repeat)
    if not np.array_equal(out, sym32):
        raise SystemExit("constriction: round trip failed")
    add("constriction-ans", words.nbytes, t_enc, t_dec)

    raw = sym.astype(np.uint8).tobytes()
    for name, compress, decompress in byte_codecs():
        t_enc, t_dec, blob, out = timed_pair(lambda: compress(raw), decompress, repeat)
        if out != raw:
            raise SystemExit(f"{name}: round trip failed")
        add(name, len(blob), t_enc, t_dec)

    return {"n": n, "repeat": repeat, "nsym_used": int(np.count_nonzero(counts)),
            "entropy_bits": entropy, "ideal_bytes": n * entropy / 8, "results": rows}


def print_table(report: dict) -> None:
    print(f"n={report['n']:,} symbols, {report['nsym_used']} used of {NLEVELS}, "
          f"H={report['entropy_bits']:.4f} bits/symbol, n*H/8={report['ideal_bytes']:,.0f} B, "
          f"process CPU time, median of {report['repeat']} (encode/decode interleaved)")
    print(f"{'coder':<17}{'bytes':>12}{'table B':>9}{'bits/sym':>10}{'vs H':>9}"
          f"{'enc Msym/s':>12}{'dec Msym/s':>12}")
    for r in report["results"]:
        print(f"{r['coder']:<17}{r['bytes']:>12,}{r['table_bytes']:>9}{r['bits_per_symbol']:>10.4f}"
              f"{r['overhead_vs_entropy_pct']:>8.2f}%"
              f"{r['encode_msym_s']:>12.1f}{r['decode_msym_s']:>12.1f}")


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=10_000_000, help="number of symbols")
    parser.add_argument("--repeat", type=int, default=5, help="runs per measurement (median)")
    parser.add_argument("--json", metavar="PATH",
                        help="also write the results as JSON ('-': stdout)")
    args = parser.parse_args(argv)
    if args.n < 1000 or args.repeat < 1:
        parser.error("need --n >= 1000 and --repeat >= 1")
    report = run(args.n, args.repeat)
    print_table(report)
    if args.json == "-":
        json.dump(report, sys.stdout, indent=2)
    elif args.json:
        with open(args.json, "w") as fh:
            json.dump(report, fh, indent=2)


if __name__ == "__main__":
    main()
