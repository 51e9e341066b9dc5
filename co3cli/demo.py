"""``co3 demo``: the whole pipeline on bundled data, from training to the bits table.

capture (train a small ReLU net on bundled MNIST/digits) -> fit -> codebook -> compress
(three configurations) -> decompress -> verify bit for bit -> report.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

CONFIGS = (
    # name, format, coder, scale rule, model (None: the saved gennorm-zi Huffman codebook)
    ("fp8-e5m2 huffman, saved codebook", "fp8-e5m2", "huffman", None, None),
    ("fp8-e5m2 ans gennorm-zi", "fp8-e5m2", "ans", None, "gennorm-zi"),
    ("fp8-e5m2 ans gennorm2-zi", "fp8-e5m2", "ans", None, "gennorm2-zi"),
    ("fp8-e5m2 ctx (context-adaptive)", "fp8-e5m2", "ctx", None, "gennorm-zi"),
    ("fp4-co3 ans gennorm-mse", "fp4-co3", "ans", "gennorm-mse", "gennorm-zi"),
)


def verify_roundtrip(dump_path, decoded_path, format: str) -> int:
    """Check decoded == dequantize(quantize(x)) bit for bit with the stored scales; returns entries."""
    from co3cli.dump import Dump
    from co3cli.errors import Co3Error
    from co3cli.formats import get_grid
    from co3cli.quantize import dequantize, quantize

    grid = get_grid(format)
    n = 0
    with Dump.open(dump_path) as src, Dump.open(decoded_path) as dec:
        for name in src.layers:
            x, y = src.read_layer(name), dec.read_layer(name)
            scales = dec.h5[f"co3/scales/{name}"][...]
            for t in range(x.shape[0]):
                want = dequantize(quantize(x[t], grid, scales[t]), grid, scales[t])
                if not np.array_equal(want.view(np.uint32), y[t].view(np.uint32)):
                    raise Co3Error(f"round trip mismatch in layer {name} step {t}")
            n += x.size
    return n


def run_demo(out: Path, *, task="mnist5k-mlp", steps=60, progress=True, log=print) -> dict:
    from co3cli import codebook as cb
    from co3cli.capture import capture, summary_dict
    from co3cli.codec import compress, decompress
    from co3cli.coding import get_coder
    from co3cli.dump import Dump
    from co3cli.fitting import fit_dump
    from co3cli.formats import get_grid
    from co3cli.report import bits_table, format_table, report_co3

    from co3cli.checks import check_int
    from co3cli.errors import InputError
    from co3cli.fileio import output_file

    log = log or (lambda *a, **k: None)
    check_int("--steps", steps, lo=1)
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise InputError(f"--out {str(out)!r} exists and is not a folder")
    out.mkdir(parents=True, exist_ok=True)
    dump = out / "dump.h5"
    summary = capture(task, dump, steps=steps, every=5, seed=0, progress=progress)
    log(f"[1/6] capture {task} -> {dump}: {summary}")

    fits = fit_dump(dump, ["gennorm-zi", "gennorm", "normal-zi", "laplace-zi"], progress=progress)
    log("[2/6] fit: per-layer models (pooled over steps); best by AIC on the non-zero entries")
    for r in fits["fits"]:
        g = r["models"]["gennorm-zi"]
        log(f"      {r['layer']:<12} zeros {r['zero_fraction']:.3f}  beta {g['params']['beta']:.3f}  "
            f"(plain gennorm beta {r['models']['gennorm']['params']['beta']:.3f})  best {r['best']}")

    book_path = out / "book.json"
    with Dump.open(dump) as d:
        book = cb.build(d, get_grid("fp8-e5m2"), get_coder("huffman"), model="gennorm-zi")
    with output_file(book_path) as f:
        book.save(f)
    log(f"[3/6] codebook: gennorm-zi Huffman tables for fp8-e5m2 -> {book_path}")

    results = []
    for i, (name, fmt, coder, scale, model) in enumerate(CONFIGS):
        stem = f"{i + 1}-{fmt}-{coder}"
        co3_path, dec_path = out / f"{stem}.co3", out / f"{stem}_q.h5"
        if model is None:  # the saved codebook fixes format, scale rule, coder and tables
            compress(dump, co3_path, codebook=book_path, progress=progress)
        else:
            compress(dump, co3_path, format=fmt, coder=coder, scale=scale, model=model,
                     progress=progress)
        decompress(co3_path, dec_path, progress=progress)
        n = verify_roundtrip(dump, dec_path, fmt)
        rep = report_co3(co3_path)
        results.append({"config": name, "file": str(co3_path), "verified_entries": n, **rep["total"]})
        if name == CONFIGS[-1][0]:
            last = rep
    log(f"[4/6] compress, [5/6] decompress + bit-exact verification: "
        f"{sum(r['verified_entries'] for r in results)} entries checked")
    log("[6/6] report (per layer, last configuration):")
    log(bits_table(last))
    log("\nsummary (bits per entry; raw float32 = 32):")
    log(format_table(results, [("config", "configuration", ""), ("entries", "entries", "d"),
                         ("entropy_bpe", "entropy", ".3f"), ("cross_entropy_bpe", "x-entropy", ".3f"),
                         ("huffman_bpe", "huffman", ".3f"), ("bpe", "bpe (file)", ".3f"),
                         ("bytes", "bytes", "d")]))
    return {"out": str(out), "task": task, "steps": steps, "capture": summary_dict(summary),
            "fits": fits["fits"], "results": results}
