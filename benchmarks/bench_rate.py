"""Rate benchmark on REAL gradient dumps: how close do co3cli's codes get to the references?

    python benchmarks/bench_rate.py            # full run (< 10 min on 2 cores)
    python benchmarks/bench_rate.py --quick    # small captures, results to /tmp

Dumps: the bundled ``co3cli/sample_data/mnist5k-mlp.h5`` and ``digits-mlp.h5``, plus
two captured here into a temporary folder with ``co3cli.capture.capture``: ``mnist5k-cnn``
(100 steps, every 10th recorded) and a long ``mnist5k-mlp`` run (200 steps, every step
recorded; used for the staleness study). Quantization configs: fp8-e5m2, fp8-e4m3, fp4-co3
with the absmax scale, and fp4-co3 with the gennorm-mse scale.

Studies (per dump x config; "large" layer = >= 1e5 entries pooled over steps):

1. Huffman (max_len 16) from the gennorm-zi model vs the optimal Huffman code of the exact
   counts (max_len 20, present symbols only): target <= 0.02 bits/entry on every large layer.
   The plain gennorm model (no zero mass) is shown for contrast.
2. ANS (precision 16): real payload bytes (every step encoded, sizes summed) with a table
   from the exact counts vs the empirical entropy: target within 0.1 % on every large layer
   (payload only; also shown with the layer's container side info). Also the gennorm-zi
   table vs its cross-entropy and the entropy.
3. Whole file: ``co3cli.codec.compress`` (ans and huffman, gennorm-zi) file bytes vs the sum
   of chunk payloads: target file bpe within 1 % of payload bpe for dumps >= 1e6 entries.
4. Peers over the same symbol bytes (uint8, step by step, layer by layer): zstd -3/-19,
   lzma -6, zlib -9, for the whole dump and per large layer, next to the co3 file.
5. Staleness (long run): a codebook from step index 0 only vs fresh per-layer tables vs the
   per-step (per layer) entropy, in step buckets.
6. Check (``--check`` runs it alone, into ``benchmarks/results/rate_check.{md,json}``; also
   held-out captures of ``CHECK_TASKS``, tiny ones of ``TINY_TASKS`` and the
   ``transmitted.h5`` of two ``co3 simulate fl`` runs, ``FL_RUNS``): the default ``co3 compress`` file vs zstd-3 over
   the same symbols per dump and format (worst ratio printed), and ``ans``/``huffman`` with
   ``--model auto`` (step groups): payload vs the per-step order-0 entropy, side bytes apart.

    python benchmarks/bench_rate.py --check                       # ~10 min on 2 cores
    python benchmarks/bench_rate.py --check --dumps a=x.h5 b=y.h5  # given dumps only

Writes ``benchmarks/results/rate.md`` and ``rate.json`` (``--quick``: ``/tmp/bench_rate_quick.*``).
Bits per entry (bpe) = bits / quantized entries.
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse  # noqa: E402
import datetime as _dt  # noqa: E402
import json  # noqa: E402
import lzma  # noqa: E402
import math  # noqa: E402
import platform  # noqa: E402
import shlex  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
import zlib  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

import co3cli  # noqa: E402
from co3cli import codebook as cb  # noqa: E402
from co3cli.codec import compress  # noqa: E402
from co3cli.tables import model_weights, scale_and_quantize  # noqa: E402
from co3cli.coding import get_coder  # noqa: E402
from co3cli.coding.huffman import huffman_lengths  # noqa: E402
from co3cli.container import open_co3  # noqa: E402
from co3cli.data import SAMPLE_DATA_DIR  # noqa: E402
from co3cli.dump import Dump  # noqa: E402
from co3cli.formats import get_grid  # noqa: E402
from co3cli.tables import entropy_bits  # noqa: E402
from co3cli.report import cross_entropy_bits  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
LARGE = 100_000  # a "large" layer has at least this many entries (pooled over steps)
BIG_DUMP = 1_000_000  # whole-file target applies to dumps with at least this many entries
CONFIGS = [("fp8-e5m2", "absmax"), ("fp8-e4m3", "absmax"), ("fp4-co3", "absmax"),
           ("fp4-co3", "gennorm-mse")]
CHUNK_FRAMING = 12  # container bytes per chunk besides the body: len u32 + scale f32 + crc u32
TARGET_HUFF = 0.02  # bits/entry
TARGET_ANS = 0.001  # relative
TARGET_FILE = 0.01  # relative
BUCKETS = [(0, 9), (10, 49), (50, 99), (100, 199)]


def peers():
    import zstandard

    return [
        ("zstd-3", zstandard.ZstdCompressor(level=3).compress),
        ("zstd-19", zstandard.ZstdCompressor(level=19).compress),
        ("lzma-6", lambda b: lzma.compress(b, preset=6)),
        ("zlib-9", lambda b: zlib.compress(b, 9)),
    ]


def layer_side_bytes(meta: dict, table_bytes: int, nsteps: int) -> int:
    """Container bytes of one layer block other than the chunk bodies (as Co3Writer writes)."""
    mj = json.dumps(meta, separators=(",", ":"), sort_keys=True).encode()
    return 12 + len(mj) + 4 + table_bytes + 4 + nsteps * CHUNK_FRAMING


def dead_zero_stats(sym: np.ndarray, grid) -> dict:
    """Positions that are zero in every step (dead inputs/units), and the order-0 entropy an
    ideal coder would reach if it knew them (mask cost: numel * h2(dead fraction) bits)."""
    dead = (sym == grid.K).all(axis=0)
    f = float(dead.mean())
    live = np.bincount(sym[:, ~dead].reshape(-1), minlength=grid.nsym) if (~dead).any() \
        else np.zeros(grid.nsym, dtype=np.int64)
    h2 = 0.0 if f in (0.0, 1.0) else -(f * np.log2(f) + (1 - f) * np.log2(1 - f))
    bits = entropy_bits(live) + sym.shape[1] * h2
    return {"dead_fraction": f, "entropy_dead_mask_bpe": bits / sym.size}


def exact_huffman_bits(counts: np.ndarray) -> float:
    present = counts > 0
    if present.sum() <= 1:
        return float(counts.sum())  # a lone symbol still costs 1 bit
    lengths = huffman_lengths(np.where(present, counts, 0).astype(np.float64), max_len=20)
    return float((counts * lengths.astype(np.int64)).sum())


# ------------------------------------------------------------------------------------------
# Studies 1, 2 and 4 (per layer), plus the per-step entropies for study 5


def analyze(dump_name: str, path: str, fmt: str, scale: str, want_steps: bool, out: dict) -> dict:
    grid = get_grid(fmt)
    cfg = f"{fmt}/{scale}"
    huff = get_coder("huffman", max_len=16)
    ans = get_coder("ans", precision=16)
    sym8 = []
    step_entropy = None
    totals = {"entries": 0, "entropy_bits": 0.0, "ans_emp_payload": 0, "ans_emp_side": 0,
              "ans_zi_payload": 0}
    with Dump.open(path) as dump:
        nsteps = dump.nsteps
        if want_steps:
            step_entropy = np.zeros(nsteps)
        for name in dump.layers:
            data = dump.read_layer(name)
            scales, sym, counts = scale_and_quantize(data, grid, None if scale == "absmax" else scale)
            n = int(data.size)
            H = entropy_bits(counts)
            large = n >= LARGE
            row = {"dump": dump_name, "config": cfg, "layer": name, "entries": n, "large": large,
                   "zero_fraction": float(counts[grid.K] / n), "entropy_bpe": H / n}
            # 1. Huffman: model tables vs the exact-count optimum
            w_zi, meta_zi = model_weights(data, scales, counts, grid, "gennorm-zi")
            w_g, meta_g = model_weights(data, scales, counts, grid, "gennorm")
            w_2, _ = model_weights(data, scales, counts, grid, "gennorm2-zi")
            p_zi, p_g = w_zi / w_zi.sum(), w_g / w_g.sum()
            row["beta_zi"] = meta_zi.get("params", {}).get("beta")
            row["xent_zi_bpe"] = cross_entropy_bits(counts, p_zi) / n
            row["xent_gennorm_bpe"] = cross_entropy_bits(counts, p_g) / n
            row["huff_zi_bpe"] = huff.table_from_weights(w_zi).expected_bits(counts) / n
            row["huff_gennorm_bpe"] = huff.table_from_weights(w_g).expected_bits(counts) / n
            row["huff_exact_bpe"] = exact_huffman_bits(counts) / n
            row["huff_zi_diff"] = row["huff_zi_bpe"] - row["huff_exact_bpe"]
            row["xent_g2_bpe"] = cross_entropy_bits(counts, w_2 / w_2.sum()) / n
            row["huff_g2_bpe"] = huff.table_from_weights(w_2).expected_bits(counts) / n
            row["huff_g2_diff"] = row["huff_g2_bpe"] - row["huff_exact_bpe"]
            row["xent_zi_minus_H"] = row["xent_zi_bpe"] - H / n
            row["huff_gennorm_diff"] = row["huff_gennorm_bpe"] - row["huff_exact_bpe"]
            # 2. ANS: real payload bytes, exact-count table and gennorm-zi table
            w_e, meta_e = model_weights(data, scales, counts, grid, "empirical")
            t_e = ans.table_from_weights(w_e)
            pay_e = sum(len(t_e.encode(r)) for r in sym)
            side_e = layer_side_bytes(meta_e, len(t_e.to_bytes()), nsteps)
            t_z = ans.table_from_weights(w_zi)
            pay_z = sum(len(t_z.encode(r)) for r in sym)
            row.update({
                "ans_emp_ideal_bpe": t_e.expected_bits(counts) / n,
                "ans_emp_payload_bpe": 8 * pay_e / n,
                "ans_emp_total_bpe": 8 * (pay_e + side_e) / n,
                "ans_emp_payload_vs_H": 8 * pay_e / H - 1 if H else float("nan"),
                "ans_emp_flush_bytes_per_chunk": (pay_e - t_e.expected_bits(counts) / 8) / nsteps,
                "entries_per_step": n // nsteps,
                "ans_emp_total_vs_H": 8 * (pay_e + side_e) / H - 1 if H else float("nan"),
                "ans_zi_ideal_bpe": t_z.expected_bits(counts) / n,
                "ans_zi_payload_bpe": 8 * pay_z / n,
                "ans_zi_payload_vs_xent": 8 * pay_z / (row["xent_zi_bpe"] * n) - 1,
                "ans_zi_payload_vs_H": 8 * pay_z / H - 1 if H else float("nan"),
            })
            out["layers"].append(row)
            totals["entries"] += n
            totals["entropy_bits"] += H
            totals["ans_emp_payload"] += pay_e
            totals["ans_emp_side"] += side_e
            totals["ans_zi_payload"] += pay_z
            # 4. peers, per large layer (the layer's symbols, step after step)
            if grid.nsym <= 256:
                s8 = sym.astype(np.uint8)
                sym8.append(s8)
                if large:
                    raw = s8.tobytes()
                    prow = {"dump": dump_name, "config": cfg, "layer": name, "entries": n,
                            "entropy_bpe": H / n, **dead_zero_stats(sym, grid)}
                    for pname, fn in peers():
                        prow[pname] = 8 * len(fn(raw)) / n
                    out["peer_layers"].append(prow)
            if want_steps:
                for t in range(nsteps):
                    step_entropy[t] += entropy_bits(np.bincount(sym[t], minlength=grid.nsym))
            del data, sym
        # 4. peers over the whole dump: step by step, layer by layer
        prow = None
        if sym8:
            raw = b"".join(s[t].tobytes() for t in range(nsteps) for s in sym8)
            prow = {"dump": dump_name, "config": cfg, "entries": len(raw),
                    "entropy_bpe": totals["entropy_bits"] / totals["entries"]}
            glob = np.bincount(np.frombuffer(raw, dtype=np.uint8), minlength=256)
            prow["entropy_pooled_bpe"] = entropy_bits(glob) / len(raw)
            for pname, fn in peers():
                prow[pname] = 8 * len(fn(raw)) / len(raw)
            del raw
    n = totals["entries"]
    H = totals["entropy_bits"]
    out["ans_totals"].append({
        "dump": dump_name, "config": cfg, "entries": n, "entropy_bpe": H / n,
        "ans_emp_payload_bpe": 8 * totals["ans_emp_payload"] / n,
        "ans_emp_total_bpe": 8 * (totals["ans_emp_payload"] + totals["ans_emp_side"]) / n,
        "ans_emp_payload_vs_H": 8 * totals["ans_emp_payload"] / H - 1,
        "ans_emp_total_vs_H": 8 * (totals["ans_emp_payload"] + totals["ans_emp_side"]) / H - 1,
        "ans_zi_payload_bpe": 8 * totals["ans_zi_payload"] / n,
        "ans_zi_payload_vs_H": 8 * totals["ans_zi_payload"] / H - 1,
    })
    return {"peer_total": prow, "step_entropy": step_entropy}


# ------------------------------------------------------------------------------------------
# Study 3 (whole file) and study 5 (staleness)


def per_step_payload(path: str) -> np.ndarray:
    with open(path, "rb") as f:
        co3 = open_co3(f, path)
        steps = np.zeros(len(co3.header["steps"]), dtype=np.float64)
        for i in range(len(co3.offsets)):
            b = co3.read_layer(i)  # a joined small layer (.co3 1.3): its chunk shared equally
            steps += ([len(b.bodies[0]) / len(b.scales)] * len(b.scales) if b.joined
                      else np.array([len(x) for x in b.bodies], dtype=np.float64))
    return steps


def whole_file(dump_name, path, fmt, scale, tmp, out) -> dict:
    files = {}
    for coder in ("ans", "huffman", "ctx"):
        dst = os.path.join(tmp, f"{dump_name}.{fmt}.{scale}.{coder}.co3")
        r = compress(path, dst, format=fmt, scale=None if scale == "absmax" else scale,
                     coder=coder, model="gennorm-zi")
        payload = sum(lay["payload_bytes"] for lay in r.layers)
        out["files"].append({
            "dump": dump_name, "config": f"{fmt}/{scale}", "coder": coder, "entries": r.entries,
            "bytes": r.nbytes, "payload_bytes": payload, "file_bpe": r.bpe,
            "payload_bpe": 8 * payload / r.entries, "side_bytes": r.nbytes - payload,
            "file_vs_payload": r.nbytes / payload - 1, "seconds": r.seconds,
            "layer_bpe": {lay["name"]: 8 * lay["bytes"] / lay["entries"] for lay in r.layers},
        })
        files[coder] = (dst, r)
    return files


def staleness(dump_name, path, fmt, scale, tmp, fresh_files, step_entropy, out) -> None:
    grid = get_grid(fmt)
    rule = None if scale == "absmax" else scale
    with Dump.open(path) as dump:
        steps = dump.steps
        per_step_entries = sum(dump.numel(n) for n in dump.layers)
        entries = dump.total_entries
    row = {"dump": dump_name, "config": f"{fmt}/{scale}", "steps": len(steps),
           "entropy_bpe": float(step_entropy.sum() / entries), "coders": {}}
    for coder_id in ("ans", "huffman"):
        coder = get_coder(coder_id)
        t0 = time.perf_counter()
        with Dump.open(path) as dump:
            book = cb.build(dump, grid, coder, model="gennorm-zi", scale_rule=rule, steps=[0])
        dst = os.path.join(tmp, f"{dump_name}.{fmt}.{scale}.{coder_id}.stale.co3")
        rs = compress(path, dst, format=fmt, scale=rule, codebook=book)
        fresh_path, rf = fresh_files[coder_id]
        stale_steps, fresh_steps = per_step_payload(dst), per_step_payload(fresh_path)
        buckets = []
        for lo, hi in BUCKETS:
            sel = (steps >= lo) & (steps <= hi)
            if not sel.any():
                continue
            ne = per_step_entries * int(sel.sum())
            buckets.append({
                "steps": f"{lo}-{min(hi, int(steps.max()))}",
                "entropy_bpe": float(step_entropy[sel].sum() / ne),
                "fresh_bpe": 8 * float(fresh_steps[sel].sum()) / ne,
                "stale_bpe": 8 * float(stale_steps[sel].sum()) / ne,
            })
        sp, fp = int(stale_steps.sum()), int(fresh_steps.sum())
        row["coders"][coder_id] = {
            "buckets": buckets,
            "fresh_payload_bpe": 8 * fp / entries, "stale_payload_bpe": 8 * sp / entries,
            "fresh_file_bpe": rf.bpe, "stale_file_bpe": rs.bpe,
            "cost_bpe": 8 * (sp - fp) / entries, "cost_pct": 100 * (sp / fp - 1),
            "per_step_stale_bpe": (8 * stale_steps / per_step_entries).tolist(),
            "per_step_fresh_bpe": (8 * fresh_steps / per_step_entries).tolist(),
            "seconds": time.perf_counter() - t0,
        }
    row["per_step_entropy_bpe"] = (step_entropy / per_step_entries).tolist()
    out["staleness"].append(row)


# ------------------------------------------------------------------------------------------
# Markdown


def fmt_cell(v, spec):
    if v is None:
        return "-"
    if isinstance(v, float) and v != v:
        return "nan"
    if isinstance(v, bool):
        return "yes" if v else "no"
    return format(v, spec) if spec else str(v)


def md_table(rows, cols) -> str:
    """cols = [(key or callable, title, spec)]."""
    head = "| " + " | ".join(t for _, t, _ in cols) + " |"
    sep = "|" + "|".join("---" if i == 0 else "---:" for i in range(len(cols))) + "|"
    body = []
    for r in rows:
        cells = [fmt_cell(k(r) if callable(k) else r.get(k), spec) for k, _, spec in cols]
        body.append("| " + " | ".join(cells) + " |")
    return "\n".join([head, sep, *body])


def render(res: dict) -> str:
    m = res["meta"]
    s = res["summary"]
    L = [f"# co3cli rate benchmark ({'quick' if m['quick'] else 'full'})", "",
         f"- command: `{m['command']}`", f"- date: {m['date']}",
         f"- machine: {m['machine']}", f"- co3cli {m['co3cli_version']}, python {m['python']}, "
         f"numpy {m['numpy']}, torch {m['torch']}, zstandard {m['zstandard']}",
         f"- runtime: {m['runtime_s']:.0f} s", "",
         "Dumps (real gradients):", "",
         md_table(res["dumps"], [("name", "dump", ""), ("source", "source", ""),
                                 ("steps", "steps", "d"), ("entries", "entries", ",d"),
                                 ("layers", "layers", "d")]), "",
         "## Targets", "",
         md_table(s["targets"], [("target", "target", ""), ("value", "worst", ".4g"),
                                 ("limit", "limit", ".4g"), ("where", "where", ""),
                                 ("pass", "pass", "")]), "",
         "Failing rows: " + "; ".join(f"{k}: {len(v)} ({', '.join(v[:6])}{', ...' if len(v) > 6 else ''})"
                                      for k, v in s["failures"].items()), "",
         "Staleness (long run, step-0 codebook vs fresh tables, payload): "
         + "; ".join(f"{r['config']} {r['coder']} {r['cost_bpe']:+.4f} bpe ({r['cost_pct']:+.2f} %)"
                     for r in s["staleness"]), "",
         "## 1. Huffman (max_len 16): model code vs optimal code of the exact counts", "",
         f"Large layers (>= {LARGE:,} entries). bpe; diff = model Huffman - exact-count Huffman "
         "(max_len 20); 'gn +%' = plain gennorm Huffman over gennorm-zi Huffman.", ""]
    large = [r for r in res["layers"] if r["large"]]
    L.append(md_table(large, [
        ("dump", "dump", ""), ("config", "config", ""), ("layer", "layer", ""),
        ("entries", "entries", ",d"), ("zero_fraction", "zeros", ".3f"), ("beta_zi", "beta", ".3f"),
        ("entropy_bpe", "H", ".4f"), ("xent_zi_bpe", "xent zi", ".4f"),
        ("huff_exact_bpe", "huff exact", ".4f"), ("huff_zi_bpe", "huff zi", ".4f"),
        ("huff_zi_diff", "diff zi", "+.4f"), ("xent_zi_minus_H", "xent zi - H", "+.4f"),
        ("xent_g2_bpe", "xent g2", ".4f"), ("huff_g2_bpe", "huff g2", ".4f"),
        ("huff_g2_diff", "diff g2", "+.4f"),
        ("xent_gennorm_bpe", "xent gn", ".4f"),
        ("huff_gennorm_bpe", "huff gn", ".4f"), ("huff_gennorm_diff", "diff gn", "+.4f"),
        (lambda r: 100 * (r["huff_gennorm_bpe"] / r["huff_zi_bpe"] - 1), "gn +%", "+.1f")]))
    L += ["", f"Max diff (gennorm-zi) over large layers: **{s['huff_max_diff']:+.4f}** bits/entry "
          f"({s['huff_max_where']}); plain gennorm: max {s['huff_gn_max_diff']:+.4f}, "
          f"cross-entropy +{s['gn_xent_excess_pct_min']:.1f}..+{s['gn_xent_excess_pct_max']:.1f} % "
          f"(median +{s['gn_xent_excess_pct_median']:.1f} %) over gennorm-zi, Huffman "
          f"+{s['gn_huff_excess_pct_min']:.1f}..+{s['gn_huff_excess_pct_max']:.1f} %.", "",
          "## 2. ANS (precision 16): real payload vs entropy", "",
          "Large layers. 'emp' = table from the exact counts (model empirical); side = the layer's "
          "container bytes (meta, table, 12 B framing per chunk); 'zi' = gennorm-zi table.", ""]
    L.append(md_table(large, [
        ("dump", "dump", ""), ("config", "config", ""), ("layer", "layer", ""),
        ("entropy_bpe", "H", ".4f"), ("ans_emp_payload_bpe", "emp payload", ".4f"),
        (lambda r: 100 * r["ans_emp_payload_vs_H"], "vs H %", "+.3f"),
        ("entries_per_step", "entries/chunk", ",d"),
        ("ans_emp_flush_bytes_per_chunk", "B/chunk over table ideal", ".1f"),
        ("ans_emp_total_bpe", "emp +side", ".4f"),
        (lambda r: 100 * r["ans_emp_total_vs_H"], "+side vs H %", "+.3f"),
        ("xent_zi_bpe", "xent zi", ".4f"), ("ans_zi_ideal_bpe", "zi table ideal", ".4f"),
        ("ans_zi_payload_bpe", "zi payload", ".4f"),
        (lambda r: 100 * r["ans_zi_payload_vs_xent"], "zi vs xent %", "+.3f"),
        (lambda r: 100 * r["ans_zi_payload_vs_H"], "zi vs H %", "+.2f")]))
    L += ["", "Whole dumps (all layers, per-layer tables; H = sum of per-layer entropies):", ""]
    L.append(md_table(res["ans_totals"], [
        ("dump", "dump", ""), ("config", "config", ""), ("entries", "entries", ",d"),
        ("entropy_bpe", "H", ".4f"), ("ans_emp_payload_bpe", "emp payload", ".4f"),
        (lambda r: 100 * r["ans_emp_payload_vs_H"], "vs H %", "+.3f"),
        ("ans_emp_total_bpe", "emp +side", ".4f"),
        (lambda r: 100 * r["ans_emp_total_vs_H"], "+side vs H %", "+.2f"),
        ("ans_zi_payload_bpe", "zi payload", ".4f"),
        (lambda r: 100 * r["ans_zi_payload_vs_H"], "zi vs H %", "+.2f")]))
    L += ["", f"Worst large layer, emp payload vs H: **{100 * s['ans_max_rel']:+.3f} %** "
          f"({s['ans_max_where']}).", "",
          "## 3. Whole file (`compress`, gennorm-zi) vs chunk payloads", ""]
    L.append(md_table(res["files"], [
        ("dump", "dump", ""), ("config", "config", ""), ("coder", "coder", ""),
        ("entries", "entries", ",d"), ("bytes", "file B", ",d"), ("side_bytes", "side B", ",d"),
        ("payload_bpe", "payload bpe", ".4f"), ("file_bpe", "file bpe", ".4f"),
        (lambda r: 100 * r["file_vs_payload"], "file vs payload %", "+.2f"),
        (lambda r: "yes" if r["entries"] >= BIG_DUMP else "no", "target applies", "")]))
    L += ["", "## 4. Peers over the same symbol bytes (uint8), bpe", "",
          "Whole dump (step by step, layer by layer). H = per-layer order-0 entropy (what "
          "per-layer tables can reach), H pooled = one order-0 entropy over all bytes; "
          "co3 = whole `.co3` file (ans / huffman, gennorm-zi).", ""]
    pcols = [("dump", "dump", ""), ("config", "config", ""), ("entropy_bpe", "H", ".3f")]
    L.append(md_table(res["peers"], pcols + [
        ("entropy_pooled_bpe", "H pooled", ".3f"), ("co3_ans", "co3 ans", ".3f"),
        ("co3_huffman", "co3 huff", ".3f"), ("co3_ctx", "**co3 ctx**", ".3f"), ("zstd-3", "zstd-3", ".3f"),
        ("zstd-19", "zstd-19", ".3f"), ("lzma-6", "lzma-6", ".3f"), ("zlib-9", "zlib-9", ".3f"),
        ("best", "best", ""), (lambda r: r["co3_ans"] - r["best_peer_bpe"], "co3 - best peer", "+.3f"),
        (lambda r: r["entropy_bpe"] - r["best_peer_bpe"], "H - best peer", "+.3f")]))
    L += ["", "Large layers (the layer's symbols, step after step; co3 = its block in the ans file; "
          "dead pos = fraction of positions that are zero in every step; H+mask = order-0 entropy "
          "of the other positions plus the cost of a dead-position mask, spread over all entries):", ""]
    L.append(md_table(res["peer_layers"], pcols[:2] + [("layer", "layer", ""),
                                                        ("entropy_bpe", "H", ".3f"),
                                                        ("dead_fraction", "dead pos", ".3f"),
                                                        ("entropy_dead_mask_bpe", "H+mask", ".3f")] + [
        ("co3_ans", "co3 ans", ".3f"), ("co3_ctx", "**co3 ctx**", ".3f"), ("zstd-3", "zstd-3", ".3f"),
        ("zstd-19", "zstd-19", ".3f"),
        ("lzma-6", "lzma-6", ".3f"), ("zlib-9", "zlib-9", ".3f"), ("best", "best", ""),
        (lambda r: r["entropy_bpe"] - r["best_peer_bpe"], "H - best peer", "+.3f")]))
    L += ["", s["peer_note"], "", "## 5. Staleness: codebook from step index 0 vs fresh tables", "",
          "Payload bpe per step bucket (fresh = per-layer tables fitted to all steps, the default "
          "compress; stale = `codebook.build(..., steps=[0])`; H/step = per-layer entropy of each "
          "step on its own).", ""]
    srows = []
    for st in res["staleness"]:
        for cid, c in st["coders"].items():
            for b in c["buckets"]:
                srows.append({"config": st["config"], "coder": cid, **b,
                              "cost": b["stale_bpe"] - b["fresh_bpe"],
                              "cost_pct": 100 * (b["stale_bpe"] / b["fresh_bpe"] - 1)})
            srows.append({"config": st["config"], "coder": cid, "steps": "**all**",
                          "entropy_bpe": st["entropy_bpe"], "fresh_bpe": c["fresh_payload_bpe"],
                          "stale_bpe": c["stale_payload_bpe"], "cost": c["cost_bpe"],
                          "cost_pct": c["cost_pct"]})
    L.append(md_table(srows, [
        ("config", "config", ""), ("coder", "coder", ""), ("steps", "steps", ""),
        ("entropy_bpe", "H/step", ".4f"), ("fresh_bpe", "fresh", ".4f"), ("stale_bpe", "stale", ".4f"),
        ("cost", "stale - fresh", "+.4f"), ("cost_pct", "cost %", "+.2f")]))
    L.append("")
    if res.get("check"):
        L.append(render_check(res["check"]))
    return "\n".join(L)


# ------------------------------------------------------------------------------------------


def summarize(res: dict) -> dict:
    large = [r for r in res["layers"] if r["large"]]
    worst_h = max(large, key=lambda r: r["huff_zi_diff"])
    worst_a = max(large, key=lambda r: abs(r["ans_emp_payload_vs_H"]))
    worst_2 = max(large, key=lambda r: r["huff_g2_diff"])
    big_chunks = [r for r in large if r["entries_per_step"] >= LARGE] or large
    worst_n = max(big_chunks, key=lambda r: abs(r["ans_emp_payload_vs_H"]))
    gn_x = [100 * (r["xent_gennorm_bpe"] / r["xent_zi_bpe"] - 1) for r in large]
    gn_h = [100 * (r["huff_gennorm_bpe"] / r["huff_zi_bpe"] - 1) for r in large]
    big = [r for r in res["files"] if r["entries"] >= BIG_DUMP]
    worst_f = max(big, key=lambda r: r["file_vs_payload"])

    def where(r, extra=""):
        return " ".join(str(v) for v in (r["dump"], r["config"], r.get("layer"), extra.strip()) if v)

    s = {
        "huff_max_diff": worst_h["huff_zi_diff"], "huff_max_where": where(worst_h),
        "huff_gn_max_diff": max(r["huff_gennorm_diff"] for r in large),
        "gn_xent_excess_pct_min": min(gn_x), "gn_xent_excess_pct_max": max(gn_x),
        "gn_xent_excess_pct_median": float(np.median(gn_x)),
        "gn_huff_excess_pct_min": min(gn_h), "gn_huff_excess_pct_max": max(gn_h),
        "ans_max_rel": worst_a["ans_emp_payload_vs_H"], "ans_max_where": where(worst_a),
        "file_max_rel": worst_f["file_vs_payload"], "file_max_where": where(worst_f, f" {worst_f['coder']}"),
    }
    s["targets"] = [
        {"target": "1. huffman gennorm-zi - exact (bits/entry), every large layer",
         "value": s["huff_max_diff"], "limit": TARGET_HUFF, "where": s["huff_max_where"],
         "pass": s["huff_max_diff"] <= TARGET_HUFF},
        {"target": "1b. huffman gennorm2-zi - exact (bits/entry), every large layer",
         "value": worst_2["huff_g2_diff"], "limit": TARGET_HUFF, "where": where(worst_2),
         "pass": worst_2["huff_g2_diff"] <= TARGET_HUFF},
        {"target": "2. ANS exact-count payload / H - 1, every large layer",
         "value": s["ans_max_rel"], "limit": TARGET_ANS, "where": s["ans_max_where"],
         "pass": abs(s["ans_max_rel"]) <= TARGET_ANS},
        {"target": f"2b. same, layers with >= {LARGE:,} entries per chunk (step)",
         "value": worst_n["ans_emp_payload_vs_H"], "limit": TARGET_ANS, "where": where(worst_n),
         "pass": abs(worst_n["ans_emp_payload_vs_H"]) <= TARGET_ANS},
        {"target": f"3. file bpe / payload bpe - 1, dumps >= {BIG_DUMP:,} entries",
         "value": s["file_max_rel"], "limit": TARGET_FILE, "where": s["file_max_where"],
         "pass": s["file_max_rel"] <= TARGET_FILE},
    ]
    fails_h = [where(r) for r in large if r["huff_zi_diff"] > TARGET_HUFF]
    fails_a = [where(r) for r in large if abs(r["ans_emp_payload_vs_H"]) > TARGET_ANS]
    fails_f = [where(r, f" {r['coder']}") for r in big if r["file_vs_payload"] > TARGET_FILE]
    s["failures"] = {"huffman": fails_h, "ans": fails_a, "file": fails_f}
    # peers: who wins where
    wins = {}
    lz_below_h = []
    for r in res["peers"] + res["peer_layers"]:
        key = "whole" if "layer" not in r else "layer"
        cands = {"co3 ans": r["co3_ans"], "co3 ctx": r["co3_ctx"], r["best"]: r["best_peer_bpe"]}
        winner = min(cands, key=cands.get)
        wins.setdefault(key, {}).setdefault(winner, 0)
        wins[key][winner] += 1
        if r["best_peer_bpe"] < r["entropy_bpe"]:
            lz_below_h.append((where(r), r["entropy_bpe"] - r["best_peer_bpe"]))
    s["peer_wins"] = wins
    s["staleness"] = [{"config": st["config"], "coder": cid, "cost_bpe": c["cost_bpe"],
                       "cost_pct": c["cost_pct"], "fresh_payload_bpe": c["fresh_payload_bpe"],
                       "stale_payload_bpe": c["stale_payload_bpe"], "entropy_bpe": st["entropy_bpe"]}
                      for st in res["staleness"] for cid, c in st["coders"].items()]
    s["lz_below_entropy"] = lz_below_h
    gaps = [g for _, g in lz_below_h]
    s["peer_note"] = (
        f"Winner counts (co3 ans / co3 ctx file or block vs best peer): whole dumps {wins.get('whole')}, "
        f"large layers {wins.get('layer')}. A peer beats the order-0 entropy H in "
        f"{len(lz_below_h)} of {len(res['peers']) + len(res['peer_layers'])} rows"
        + (f" (by {min(gaps):.3f}..{max(gaps):.3f} bits/entry)." if gaps else "."))
    return s


# ------------------------------------------------------------------------------------------
# Check table (issue 16): the default never larger than zstd-3; adaptive tables vs per-step H


CHECK_CONFIGS = [("fp8-e5m2", "absmax"), ("fp4-co3", "absmax")]
CHECK_TASKS = [("digits-resnet-tiny", 60, 6), ("stdlib-charlm-tiny", 60, 6),
               ("mnist5k-resnet", 60, 10)]  # held out: the code was not tuned on them
TARGET_ADAPT = 0.05  # bits/entry: order-0 payload over the per-step order-0 entropy


def check_defaults(dumps, tmp: str, configs=CHECK_CONFIGS) -> list[dict]:
    """Per dump and config: the default ``co3 compress`` file (coder and model left to it) vs
    zstd-3 over the same symbols (uint8, step by step, layer by layer); ``ans``/``huffman``
    with ``--model auto`` (exact-count or gennorm-zi tables, step groups where steps drifted):
    payload vs the per-step order-0 entropy, side bytes (file - payload) apart."""
    import zstandard

    z3 = zstandard.ZstdCompressor(level=3).compress
    z19c = zstandard.ZstdCompressor(level=19).compress
    rows = []
    for coder in (None, "ans", "huffman"):  # compile and load the kernels outside the timing
        compress(str(SAMPLE_DATA_DIR / "digits-mlp.h5"), os.path.join(tmp, "warm.co3"),
                 coder=coder, threads=1)
    for name, path, _ in dumps:
        for fmt, scale in configs:
            grid, rule = get_grid(fmt), None if scale == "absmax" else scale
            syms, h_step, h_large, bias = [], 0.0, {}, 0.0
            with Dump.open(path) as d:
                for lay in d.layers:
                    _, sym, _ = scale_and_quantize(d.read_layer(lay), grid, rule)
                    syms.append(sym.astype(np.uint8))
                    counts = [np.bincount(r, minlength=grid.nsym) for r in sym]
                    h = sum(map(entropy_bits, counts))
                    h_step += h
                    # Miller-Madow: the empirical entropy of a chunk of k used symbols lies
                    # (k - 1) / (2 ln 2) bits below its true entropy in expectation
                    bias += sum((np.count_nonzero(c) - 1) / (2 * math.log(2)) for c in counts)
                    if sym.size >= LARGE:
                        h_large[lay] = (sym.size, h)
            raw = b"".join(s[t].tobytes() for t in range(syms[0].shape[0]) for s in syms)
            n, zb = len(raw), len(z3(raw))
            z19, lz = len(z19c(raw)), len(lzma.compress(raw, preset=6))  # the "best mode" peers
            row = {"dump": name, "config": f"{fmt}/{scale}", "entries": n, "zstd3_bytes": zb,
                   "zstd3_bpe": 8 * zb / n, "h_step_bpe": h_step / n, "h_step_bias_bpe": bias / n}
            extra = None  # zstd-3 decodable: + float32 scales + the header JSON zlib'd
            for key, coder, model in (("default", None, None), ("ans", "ans", "auto"),
                                      ("huffman", "huffman", "auto"), ("ans_zi", "ans", "gennorm-zi")):
                dst = os.path.join(tmp, f"check.{key}.co3")
                t0 = time.process_time()
                r = compress(path, dst, format=fmt, scale=rule, coder=coder, model=model, threads=1)
                cpu = time.process_time() - t0
                payload = sum(lay["payload_bytes"] for lay in r.layers)
                split, stored, xent, xl = table_use(dst, grid, key != "default", h_large)
                nl = sum(v[0] for v in h_large.values())
                pl = sum(lay["payload_bytes"] for lay in r.layers if lay["name"] in h_large)
                hl = sum(v[1] for v in h_large.values())
                row[key] = {"bytes": r.nbytes, "bpe": r.bpe, "payload_bpe": 8 * payload / n,
                            "side_bpe": 8 * (r.nbytes - payload) / n, "cpu_s": cpu,
                            "split_layers": split, "stored_layers": stored,
                            "gap_bpe": 8 * payload / n - h_step / n,
                            "xent_gap_bpe": None if xent is None else (xent - h_step) / n,
                            "large_gap_bpe": (8 * pl - hl) / nl if nl else None,
                            "large_xent_gap_bpe": (xl - hl) / nl if nl and xent is not None
                            else None}
                if key == "default":
                    extra = decodable_extra(dst)
                os.unlink(dst)
            row["default_vs_zstd3"] = row["default"]["bytes"] / zb
            row.update(zstd19_bpe=8 * z19 / n, lzma6_bpe=8 * lz / n,  # best mode: the default
                       default_vs_zstd19=row["default"]["bytes"] / z19,
                       default_vs_lzma6=row["default"]["bytes"] / lz)
            row["zstd3_decodable_bytes"] = zb + extra
            row["zstd3_decodable_bpe"] = 8 * (zb + extra) / n
            row["default_vs_zstd3_decodable"] = row["default"]["bytes"] / (zb + extra)
            rows.append(row)
            print(f"  check {name} {fmt}/{scale}: default/zstd-3 {row['default_vs_zstd3']:.3f}, "
                  f"ans gap {row['ans']['gap_bpe']:+.4f}", file=sys.stderr)
    return rows


def decodable_extra(path: str) -> int:
    """What a decoder of zstd-3'd symbols needs that the ``.co3`` file carries: a float32
    scale per layer and step, and the same header JSON zlib'd (level 9, no dictionary)."""
    with open(path, "rb") as f:
        co3 = open_co3(f, path)
        h = co3.header
    js = json.dumps(h, separators=(",", ":"), sort_keys=True).encode()
    return 4 * len(h["steps"]) * len(h["layers"]) + len(zlib.compress(js, 9))


def table_use(path: str, grid, order0: bool, large=()):
    """Layers split into step groups, layers stored, and (order-0 coders) the exact bits of
    every step under the table that coded it (its cross-entropy: the payload without the
    coder's fixed bytes per chunk, e.g. rANS's 8-byte final state)."""
    from co3cli.codec import read_co3_setup
    from co3cli.container.decode import iter_decode_block, step_tables

    split = stored = 0
    xent = 0.0 if order0 else None
    xent_large = 0.0  # the same over the layers named in ``large``
    with open(path, "rb") as f:
        co3 = open_co3(f, path)
        _, coder = read_co3_setup(co3.header)
        for b in co3.layers():
            stored += b.meta.get("model") == "stored"
            split += b.step_groups is not None and b.meta.get("model") != "stored"
            if order0:
                lay = co3.header["layers"][b.index]
                tabs = step_tables(b, grid, coder)
                for t, sym in zip(tabs, iter_decode_block(b, grid, coder, lay["numel"])):
                    counts = np.bincount(sym, minlength=grid.nsym)
                    bits = (8.0 * len(t.encode(sym)) if not hasattr(t, "expected_bits")
                            else t.expected_bits(counts))
                    xent += bits
                    xent_large += bits if b.name in large else 0.0
    return split, stored, xent, xent_large


def render_check(rows: list[dict]) -> str:
    from co3cli.codec import DEFAULT_CODER, DEFAULT_MODEL

    worst = max(rows, key=lambda r: r["default_vs_zstd3"])
    worst_d = max(rows, key=lambda r: r.get("default_vs_zstd3_decodable", 0))
    worst_l = max(rows, key=lambda r: r["default_vs_lzma6"])
    worst_z = max(rows, key=lambda r: r["default_vs_zstd19"])
    gaps = max(rows, key=lambda r: r["ans"]["gap_bpe"])
    big = [r for r in rows if r["ans"]["large_gap_bpe"] is not None]
    gl = max(big, key=lambda r: r["ans"]["large_gap_bpe"]) if big else None
    L = ["## 6. Check: the default never larger than zstd-3; adaptive order-0 tables", "",
         f"default = `co3 compress` with coder and model left to it (`{DEFAULT_CODER}`, "
         f"`{DEFAULT_MODEL}`); zstd-3 over the same symbols (uint8, step by step, layer by "
         "layer; the issue's target); zstd-19 and lzma-6 the same (the issue's best-mode target, "
         "measured on the default); zstd-3 decodable = zstd-3 plus what a decoder of it needs "
         "that the `.co3` file carries (a float32 scale per layer and step, and the same header "
         "JSON zlib'd at level 9). ans/huffman = `--model auto` (per layer and step group the smaller of the "
         "exact-count and the gennorm-zi table; step groups where the steps drifted; stored "
         "symbols where smaller): payload - per-step order-0 entropy (gap; target "
         f"<= {TARGET_ADAPT}) with the side bytes apart; table gap: the same for the exact bits "
         "of each step under the table that coded it (the payload less the coder's fixed bytes "
         "per chunk: rANS's 8-byte state, Huffman's bit count and padding); large: over the "
         f"layers of >= {LARGE:,} entries alone (the per-step entropy of a chunk of a few "
         "hundred entries is below what any code reaches without a table per step); H/step bias: "
         "the Miller-Madow estimate of how far the per-step entropy lies below the true "
         "entropy of its steps, (k - 1) / (2 ln 2) bits per chunk of k symbols used (a code "
         "built from the true distribution, known in advance, has this gap in expectation); "
         "ans zi = `--model gennorm-zi` (the "
         "default before). CPU: process time of the whole compress, one thread.", ""]
    L.append(md_table(rows, [
        ("dump", "dump", ""), ("config", "config", ""), ("entries", "entries", ",d"),
        ("h_step_bpe", "H/step", ".3f"), ("zstd3_bpe", "zstd-3", ".3f"),
        (lambda r: r["default"]["bpe"], "**default**", ".3f"),
        ("default_vs_zstd3", "default / zstd-3", ".3f"),
        ("zstd3_decodable_bpe", "zstd-3 decodable", ".3f"),
        ("default_vs_zstd3_decodable", "default / zstd-3 decodable", ".3f"),
        ("zstd19_bpe", "zstd-19", ".3f"), ("default_vs_zstd19", "default / zstd-19", ".3f"),
        ("lzma6_bpe", "lzma-6", ".3f"), ("default_vs_lzma6", "default / lzma-6", ".3f"),
        (lambda r: r["ans_zi"]["bpe"], "ans zi", ".3f"),
        (lambda r: r["ans"]["bpe"], "ans auto", ".3f"),
        (lambda r: r["ans"]["side_bpe"], "ans side", ".4f"),
        (lambda r: r["ans"]["gap_bpe"], "ans gap", "+.4f"),
        (lambda r: r["h_step_bias_bpe"], "H/step bias", ".4f"),
        (lambda r: r["ans"]["gap_bpe"] - r["h_step_bias_bpe"], "ans gap less bias", "+.4f"),
        (lambda r: r["ans"]["xent_gap_bpe"], "ans table gap", "+.4f"),
        (lambda r: r["ans"]["large_gap_bpe"], "ans gap, large", "+.4f"),
        (lambda r: r["ans"]["large_xent_gap_bpe"], "ans table gap, large", "+.4f"),
        (lambda r: r["huffman"]["bpe"], "huff auto", ".3f"),
        (lambda r: r["huffman"]["gap_bpe"], "huff gap", "+.4f"),
        (lambda r: r["huffman"]["xent_gap_bpe"], "huff table gap", "+.4f"),
        (lambda r: r["huffman"]["large_gap_bpe"], "huff gap, large", "+.4f"),
        (lambda r: f"{r['ans']['split_layers']}/{r['ans']['stored_layers']}", "split/stored", ""),
        (lambda r: r["default"]["cpu_s"], "default CPU s", ".2f"),
        (lambda r: r["ans"]["cpu_s"], "ans CPU s", ".2f"),
        (lambda r: r["ans_zi"]["cpu_s"], "ans zi CPU s", ".2f")]))
    L += ["", f"Worst default / zstd-3: **{worst['default_vs_zstd3']:.3f}** ({worst['dump']} "
          f"{worst['config']}; the issue's target, <= 1); against zstd-3 decodable: "
          f"**{worst_d.get('default_vs_zstd3_decodable', float('nan')):.3f}** ({worst_d['dump']} "
          f"{worst_d['config']}); best mode (the default) against lzma-6 / zstd-19 (targets "
          f"0.85 / 0.9): worst **{worst_l['default_vs_lzma6']:.3f}** ({worst_l['dump']} "
          f"{worst_l['config']}) / **{worst_z['default_vs_zstd19']:.3f}** ({worst_z['dump']} "
          f"{worst_z['config']}), met on {sum(r['default_vs_lzma6'] <= 0.85 for r in rows)} / "
          f"{sum(r['default_vs_zstd19'] <= 0.9 for r in rows)} of {len(rows)}; worst ans gap to the per-step entropy: "
          f"**{gaps['ans']['gap_bpe']:+.4f}** bits/entry ({gaps['dump']} {gaps['config']})"
          + (f"; over layers of >= {LARGE:,} entries: **{gl['ans']['large_gap_bpe']:+.4f}** "
             f"({gl['dump']} {gl['config']})" if gl else "") + ".", ""]
    return "\n".join(L)


def capture_dumps(tmp: str, tasks) -> list:
    """Capture ``tasks`` ((name, task, steps, every) each, seed 0) into ``tmp``: the check's
    (name, path, source) rows."""
    from co3cli.capture import capture

    out = []
    for name, task, steps, every in tasks:
        dst = os.path.join(tmp, f"{name}.h5")
        capture(task, dst, steps=steps, every=every, progress=False, threads=1, seed=0)
        out.append((name, dst, f"captured: {task}, {steps} steps, every {every}, seed 0"))
    return out


def capture_check_dumps(tmp: str, quick: bool) -> list:
    """The held-out dumps of the check table (``CHECK_TASKS``; quick: 20 steps, every 5)."""
    return capture_dumps(tmp, [(task,) + ((task, 20, 5) if quick else (task, steps, every))
                               for task, steps, every in CHECK_TASKS])


TINY_TASKS = [("digits-cnn-3steps", "digits-cnn", 3, 1), ("digits-resnet-tiny-3steps",
              "digits-resnet-tiny", 3, 1), ("digits-cnn-far", "digits-cnn", 200, 40)]
FL_RUNS = [("fl-transmitted-g0", 0.0), ("fl-transmitted-g0.7", 0.7)]  # 40 rounds, fp4-co3


def tiny_check_dumps(tmp: str) -> list:
    """Held-out captures of a few thousand entries (``TINY_TASKS``): where a file's fixed
    bytes weigh most."""
    return capture_dumps(tmp, TINY_TASKS)


def fl_check_dumps(tmp: str, quick: bool) -> list:
    """``transmitted.h5`` of ``co3 simulate fl`` runs (MNIST MLP, 5 clients, co3 fp4, every
    round of client 0 dumped: streams raw, corrected, decoded), without and with a memory."""
    import subprocess

    rounds = 10 if quick else 40
    out = []
    for name, gamma in FL_RUNS:
        run = os.path.join(tmp, name)
        subprocess.run([sys.executable, "-m", "co3cli", "simulate", "fl", "--clients", "5",
                        "--rounds", str(rounds), "-c", "co3", "--format", "fp4-co3", "--gamma",
                        str(gamma), "--lr", "0.3", "--seed", "0", "--dump-rounds",
                        ",".join(map(str, range(rounds))), "-o", run, "-q"], check=True,
                       env={**os.environ, "OMP_NUM_THREADS": "1"}, stdout=subprocess.DEVNULL)
        out.append((name, os.path.join(run, "transmitted.h5"),
                    f"co3 simulate fl: {rounds} rounds, 5 clients, co3 fp4-co3, gamma {gamma}, "
                    "seed 0, every round of client 0"))
    return out


def main_check(args) -> None:
    """``--check``: study 6 alone, on the bundled dumps, the captured CNN and long MLP and
    the held-out ``CHECK_TASKS`` (or ``--dumps``)."""
    import torch

    torch.set_num_threads(1)
    t0 = time.perf_counter()
    tmpctx = tempfile.TemporaryDirectory(prefix="bench-rate-check-")
    tmp = args.keep or tmpctx.name
    os.makedirs(tmp, exist_ok=True)
    if args.dumps:
        dumps = [(d.split("=", 1)[0], d.split("=", 1)[1], "given") for d in args.dumps]
    else:
        dumps = [("mnist5k-mlp", str(SAMPLE_DATA_DIR / "mnist5k-mlp.h5"), "bundled"),
                 ("digits-mlp", str(SAMPLE_DATA_DIR / "digits-mlp.h5"), "bundled")]
        dumps += capture_dumps(tmp, [("mnist5k-cnn", "mnist5k-cnn", 40 if args.quick else 100, 10),
                                     ("mnist5k-mlp-long", "mnist5k-mlp", 40 if args.quick else 200, 1)])
        dumps += capture_check_dumps(tmp, args.quick)
        dumps += tiny_check_dumps(tmp) + fl_check_dumps(tmp, args.quick)
    rows = check_defaults(dumps, tmp)
    md = (f"# co3cli rate check (`python benchmarks/bench_rate.py --check`)\n\n- date: "
          f"{_dt.datetime.now(_dt.timezone.utc).isoformat(timespec='seconds')}; co3cli "
          f"{co3cli.__version__}; runtime {time.perf_counter() - t0:.0f} s; load "
          f"{os.getloadavg()[0]:.1f}\n- dumps: " + "; ".join(f"{n} ({src})" for n, _, src in dumps)
          + "\n\n" + render_check(rows))
    print(md)
    base = Path(args.json) if args.json else (Path("/tmp/bench_rate_check_quick.json") if args.quick
                                              else ROOT / "benchmarks/results/rate_check.json")
    base.parent.mkdir(parents=True, exist_ok=True)
    base.write_text(json.dumps({"rows": rows, "dumps": [d[::2] for d in dumps]}, indent=1) + "\n")
    base.with_suffix(".md").write_text(md)
    tmpctx.cleanup()


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true",
                    help="short captures (cnn 40 steps, long mlp 40 steps); outputs to /tmp")
    ap.add_argument("--json", metavar="PATH",
                    help="JSON output (default benchmarks/results/rate.json, quick: "
                         "/tmp/bench_rate_quick.json; '-': stdout)")
    ap.add_argument("--md", metavar="PATH", help="markdown output (default alongside the JSON)")
    ap.add_argument("--keep", metavar="DIR", help="keep captured dumps and .co3 files in DIR")
    ap.add_argument("--check", action="store_true",
                    help="only study 6 (default vs zstd-3, adaptive tables), written to "
                         "benchmarks/results/rate_check.{md,json}")
    ap.add_argument("--dumps", nargs="+", metavar="NAME=PATH",
                    help="--check: these dumps instead of the bundled and captured ones")
    args = ap.parse_args(argv)
    if args.check:
        return main_check(args)

    import torch

    torch.set_num_threads(1)
    import zstandard

    from co3cli.capture import capture

    t_start = time.perf_counter()
    if args.json in (None, "-"):
        jpath = Path("/tmp/bench_rate_quick.json") if args.quick else ROOT / "benchmarks/results/rate.json"
    else:
        jpath = Path(args.json)
    mpath = Path(args.md) if args.md else jpath.with_suffix(".md")
    tmpctx = tempfile.TemporaryDirectory(prefix="bench-rate-")
    tmp = args.keep or tmpctx.name
    os.makedirs(tmp, exist_ok=True)

    cnn_steps, long_steps = (40, 40) if args.quick else (100, 200)
    dumps = [("mnist5k-mlp", str(SAMPLE_DATA_DIR / "mnist5k-mlp.h5"), "bundled"),
             ("digits-mlp", str(SAMPLE_DATA_DIR / "digits-mlp.h5"), "bundled")]
    cap = {}
    for name, task, steps, every in (("mnist5k-cnn", "mnist5k-cnn", cnn_steps, 10),
                                     ("mnist5k-mlp-long", "mnist5k-mlp", long_steps, 1)):
        dst = os.path.join(tmp, f"{name}.h5")
        t0 = time.perf_counter()
        summ = capture(task, dst, steps=steps, every=every, progress=False, threads=1, seed=0)
        cap[name] = {"seconds": time.perf_counter() - t0, "final_loss": summ.final_loss,
                     "test_accuracy": summ.test_accuracy}
        dumps.append((name, dst, f"captured: {task}, {steps} steps, every {every}, seed 0, sgd lr 0.1"))
    long_name = "mnist5k-mlp-long"

    res = {"meta": {}, "dumps": [], "layers": [], "peer_layers": [], "peers": [], "ans_totals": [],
           "files": [], "staleness": [], "timings": {}}
    for name, path, source in dumps:
        with Dump.open(path) as d:
            res["dumps"].append({"name": name, "source": source, "steps": d.nsteps,
                                 "entries": d.total_entries, "layers": len(d.layers),
                                 "layer_numel": {n: d.numel(n) for n in d.layers},
                                 **cap.get(name, {})})
        for fmt, scale in CONFIGS:
            t0 = time.perf_counter()
            cfg = f"{fmt}/{scale}"
            a = analyze(name, path, fmt, scale, name == long_name, res)
            files = whole_file(name, path, fmt, scale, tmp, res)
            rf = {c: r for c, (_, r) in files.items()}
            if a["peer_total"] is not None:
                p = a["peer_total"]
                p["co3_ans"], p["co3_huffman"], p["co3_ctx"] = (rf["ans"].bpe, rf["huffman"].bpe,
                                                                 rf["ctx"].bpe)
                res["peers"].append(p)
            per_layer = {c: {lay["name"]: 8 * lay["bytes"] / lay["entries"] for lay in rf[c].layers}
                         for c in ("ans", "ctx")}
            for p in res["peer_layers"]:
                if p["dump"] == name and p["config"] == cfg:
                    p["co3_ans"], p["co3_ctx"] = per_layer["ans"][p["layer"]], per_layer["ctx"][p["layer"]]
            if name == long_name:
                staleness(name, path, fmt, scale, tmp, files, a["step_entropy"], res)
            for _, (dst, _) in files.items():
                if not args.keep and name != long_name:
                    os.unlink(dst)
            res["timings"][f"{name} {cfg}"] = time.perf_counter() - t0
            print(f"[{time.perf_counter() - t_start:6.1f}s] {name} {cfg} done", file=sys.stderr)
    for p in res["peers"] + res["peer_layers"]:
        names = ("zstd-3", "zstd-19", "lzma-6", "zlib-9")
        p["best"] = min(names, key=lambda k: p[k])
        p["best_peer_bpe"] = p[p["best"]]
    res["check"] = check_defaults(dumps, tmp)
    res["summary"] = summarize(res)
    res["meta"] = {
        "command": "python " + " ".join(shlex.quote(a) for a in [os.path.relpath(__file__, ROOT)]
                                        + list(sys.argv[1:] if argv is None else argv)),
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "machine": f"{platform.machine()} {platform.processor() or ''}".strip()
                   + f", {os.cpu_count()} cores, OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS')}, "
                     f"torch threads {torch.get_num_threads()}, {platform.platform()}",
        "co3cli_version": co3cli.__version__, "python": platform.python_version(),
        "numpy": np.__version__, "torch": str(torch.__version__), "zstandard": zstandard.__version__,
        "quick": bool(args.quick), "runtime_s": time.perf_counter() - t_start,
        "large_layer_entries": LARGE, "big_dump_entries": BIG_DUMP,
        "configs": [f"{f}/{s}" for f, s in CONFIGS],
    }
    md = render(res)
    print(md)
    jpath.parent.mkdir(parents=True, exist_ok=True)
    mpath.parent.mkdir(parents=True, exist_ok=True)
    if args.json == "-":
        json.dump(res, sys.stdout, indent=1)
    else:
        jpath.write_text(json.dumps(res, indent=1) + "\n")
    mpath.write_text(md)
    print(f"wrote {mpath} and {'stdout' if args.json == '-' else jpath}", file=sys.stderr)
    tmpctx.cleanup()


if __name__ == "__main__":
    main()
