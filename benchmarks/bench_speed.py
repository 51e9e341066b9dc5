"""Issue 13's speed table in one run: every row as a ratio against its named peer, same run.

    python benchmarks/bench_speed.py [--repeat 5] [--n 10000000] [--today CHECKOUT]
                                     [--out benchmarks/results/speed]

Each row reuses the measurement of the benchmark that owns it (so the two cannot drift):

* library compress / decompress of one ``--n``-entry fp8-e5m2 layer against "torch fp8 cast +
  zstd-3", and the best path against one core's memcpy: ``bench_pipeline.py`` (co3's own
  ``encode_layer`` / ``decode_values`` paths, process CPU time, interleaved rounds);
* ``ctx`` against ``ans`` on the same symbols (coders only): ``bench_ctx.speed_case``;
* whole ``co3 compress`` / ``decompress`` processes against the h5py + ml_dtypes + zstd-3
  script, and the share of a whole 40 MB compress spent outside data work:
  ``bench_startup.py`` (``--today``: a checkout of the code before the work, run in the same
  rounds; without it only "now" is measured);
* small layers (200 x 10^3 entries: CPU and side bytes per layer, bits/entry against zstd-3)
  and single layers of 10^5 and 10^6 entries against the zstd-3 path: ``bench_small.py``;
* ``--threads 2`` against 1 on multi-layer dumps (wall clock, bytes identical):
  ``bench_threads.py``, with the machine's ceiling measured in the same moment;
* ``co3 simulate fl`` codec time: round 0 and refit rounds against a normal round, and the
  steady codec time against the client's gradient time (mnist5k-mlp): ``bench_startup.fl_rounds``.

Writes ``<out>.md`` (the table, the load, the settings) and ``<out>.json``.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import platform
import statistics
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import numpy as np  # noqa: E402

TARGETS = {  # row -> (target text, test on the measured value)
    "lib_compress": ("≥ 1.5× both", lambda v: min(v.values()) >= 1.5),
    "lib_decompress": ("≥ 1.5× both", lambda v: min(v.values()) >= 1.5),
    "memcpy": ("≥ 25 %", lambda v: v >= 0.25),
    "ctx": ("≤ 2× slower", lambda v: max(v.values()) <= 2.0),
    "outside": ("≤ 40 %", lambda v: v <= 0.40),
    "cmd_big": ("≥ 1.0× (co3/script ≤ 1)", lambda v: max(v.values()) <= 1.0),
    "cmd_small": ("≤ 1.5×", lambda v: v <= 1.5),
    "small_layers": ("≤ 0.3 ms, ≤ 40 B, bpe ≤ zstd-3",
                     lambda v: v["ms"] <= 0.3 and v["side"] <= 40 and v["bpe"] <= v["peer_bpe"]),
    "mid_layers": ("≥ 1×", lambda v: min(v.values()) >= 1.0),
    "threads": ("≥ 1.7×", lambda v: min(v.values()) >= 1.7),
    "fl": ("steady ≤ 0.5, round 0 ≤ 3×", lambda v: v["steady"] <= 0.5 and v["round0"] <= 3.0),
}


def library_rows(n: int, repeat: int) -> dict:
    import torch

    import bench_pipeline as bp

    torch.set_num_threads(1)
    x = bp.make_data(n)
    ops = {}
    for coder in ("ans", "huffman"):
        c, d, _ = bp.co3_ops(x, "fp8-e5m2", coder)
        ops[(coder, "c")], ops[(coder, "d")] = c, d
    c, d, _ = bp.peer_ops(x)
    ops[("peer", "c")], ops[("peer", "d")] = c, d
    dst = np.empty_like(x)
    ops[("memcpy", "c")] = lambda: np.copyto(dst, x)
    t = bp.interleaved(ops, repeat)
    best = min(t[(k, s)] for k in ("ans", "huffman") for s in "cd")
    return {"lib_compress": {k: t[("peer", "c")] / t[(k, "c")] for k in ("ans", "huffman")},
            "lib_decompress": {k: t[("peer", "d")] / t[(k, "d")] for k in ("ans", "huffman")},
            "memcpy": t[("memcpy", "c")] / best, "t": {f"{k}/{s}": v for (k, s), v in t.items()}}


def ctx_row(n: int, repeat: int) -> dict:
    import bench_ctx

    data, shape = bench_ctx.synthetic_layer(n)
    out = {}
    for fmt in ("fp8-e5m2", "fp4-co3"):
        r = bench_ctx.speed_case(data, shape, fmt, repeat)
        out[f"{fmt} encode"], out[f"{fmt} decode"] = r["enc_vs_ans"], r["dec_vs_ans"]
        out[f"{fmt} bpe ctx/ans"] = r["bpe"]["ctx"] / r["bpe"]["ans"]
    return out


def command_rows(n: int, repeat: int, today: Path | None, tmp: Path) -> dict:
    import bench_startup as bs

    (tmp / "peer.py").write_text(bs.PEER)
    big = tmp / "big.h5"
    bs.make_big_dump(big, n)
    small = bs.ROOT / "co3cli" / "sample_data" / "mnist5k-mlp.h5"
    who = today if today is not None else bs.ROOT  # without --today "today" repeats "new"
    rows = dict(bs.codec_rows("big", big, who, tmp, repeat) + bs.codec_rows("small", small, who,
                                                                            tmp, repeat))
    share = bs.outside_share(big, who, tmp, repeat, rows["`co3 compress` big"])

    def ratio(key, k):
        return rows[key][k]["median"] / rows[key]["peer"]["median"]

    out = {"cmd_big": {"compress": ratio("`co3 compress` big", "new"),
                       "decompress": ratio("`co3 decompress` big", "new")},
           "cmd_small": ratio("`co3 compress` small", "new"), "outside": share["new"][1]}
    if today is not None:
        out["today"] = {"cmd_big": {"compress": ratio("`co3 compress` big", "today"),
                                    "decompress": ratio("`co3 decompress` big", "today")},
                        "cmd_small": ratio("`co3 compress` small", "today"),
                        "outside": share["today"][1]}
    return out


def small_rows(repeat: int) -> dict:
    import bench_small as bsm

    rng = np.random.default_rng(0)
    cases = {"200x1e3": {f"layer{i}.weight": bsm.gn(rng, 1, 1000) for i in range(200)},
             "1e5": {"w": bsm.gn(rng, 1, 10**5)}, "1e6": {"w": bsm.gn(rng, 1, 10**6)}}
    out = {"mid_layers": {}}
    for case, layers in cases.items():
        entries = sum(x.size for x in layers.values())
        cc, cd, ci = bsm.co3_lib_ops(layers)
        pc, pd, pi = bsm.peer_lib_ops(layers)
        t = bsm.interleaved({"cc": cc, "pc": pc, "cd": cd, "pd": pd}, repeat)
        if case == "200x1e3":
            out["small_layers"] = {"ms": 1e3 * t["cc"] / len(layers),
                                   "side": (ci["bytes"] - ci["payload"]) / len(layers),
                                   "bpe": 8 * ci["bytes"] / entries,
                                   "peer_bpe": 8 * pi["bytes"] / entries}
        else:
            out["mid_layers"][f"{case} compress"] = t["pc"] / t["cc"]
            out["mid_layers"][f"{case} decompress"] = t["pd"] / t["cd"]
    return out


def thread_rows(repeat: int, tmp: Path) -> dict:
    import bench_threads as bt

    dumps = bt.make_dumps(tmp)
    ceiling = bt.Ceiling(2)
    out, ceil, same = {}, [], True
    for name in ("8x1e6", "8x4x250k"):
        for r in bt.bench(dumps[name], tmp, "ans", 2, repeat, ceiling):
            out[f"{name} {r['step']}"] = r["speedup"]
            ceil.append(r["ceiling"])
            same &= r["identical"]
    return {"threads": out, "ceiling": statistics.median(ceil), "identical": same}


def fl_row(tmp: Path) -> dict:
    import bench_startup as bs

    return bs.fl_rounds(bs.ROOT, tmp, 21)


def fmt_value(v) -> str:
    if isinstance(v, dict):
        return ", ".join(f"{k} {fmt_value(x)}" for k, x in v.items())
    return f"{v:.2f}"


ROWS = (  # key, label
    ("lib_compress", "library compress, fp8-e5m2 layer, peer CPU / co3 CPU"),
    ("lib_decompress", "library decompress, same"),
    ("memcpy", "best fp8 path / one core's memcpy"),
    ("ctx", "`ctx` CPU / `ans` CPU, same symbols (and bits ctx / ans)"),
    ("outside", "whole `co3 compress` of the `--n` dump: share outside data work"),
    ("cmd_big", "whole `co3 compress`/`decompress` of the `--n` dump, co3 CPU / script CPU"),
    ("cmd_small", "whole `co3 compress` bundled 4 MB, co3 CPU / script CPU"),
    ("small_layers", "small layers 200 × 10³: ms and side bytes per layer, bits/entry vs zstd-3"),
    ("mid_layers", "10⁵ and 10⁶ entries, peer CPU / co3 CPU"),
    ("threads", "`--threads 2` vs 1, multi-layer dumps (wall)"),
    ("fl", "`co3 simulate fl` codec: round 0 / normal, refit / normal, steady / gradient time"),
)


def render(doc: dict) -> str:
    m, res = doc["meta"], doc["results"]
    lines = [f"# Issue 13's speed table (`benchmarks/bench_speed.py --repeat {m['repeat']} --n "
             f"{m['n']}`)", "",
             f"{m['when']}, Python {m['python']}, {m['cpus']} cores, one thread except the "
             f"threads row; load average {m['load'][0]:.2f} at the start, {m['load'][1]:.2f} at "
             "the end. Process CPU time, medians of interleaved rounds, the peer in the same "
             f"rounds. Thread ceiling in the same moment: {res.get('ceiling', float('nan')):.2f}×.",
             "", "| measure | now | target | met |", "|---|---|---|---|"]
    for key, label in ROWS:
        if key not in res:
            lines.append(f"| {label} | not run | {TARGETS[key][0]} | — |")
            continue
        v = res[key]
        shown = dict(v) if isinstance(v, dict) else v
        if key == "ctx":
            shown = {k: x for k, x in v.items() if "bpe" not in k}
        met = TARGETS[key][1](shown)
        extra = ""
        if key == "ctx":
            extra = " (bits: " + ", ".join(f"{k.split()[0]} {x:.4f}" for k, x in v.items()
                                           if "bpe" in k) + ")"
        if key == "small_layers":
            text = (f"{v['ms']:.3f} ms, {v['side']:.1f} B per layer; {v['bpe']:.3f} bits/entry "
                    f"(zstd-3 {v['peer_bpe']:.3f})")
        elif key in ("memcpy", "outside"):
            text = f"{100 * v:.1f} %"
        else:
            text = fmt_value(shown) + extra
        if key in res.get("today", {}):
            text += f" (before: {fmt_value(res['today'][key])})"
        lines.append(f"| {label} | {text} | {TARGETS[key][0]} | {'yes' if met else 'no'} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--n", type=int, default=10_000_000)
    ap.add_argument("--today", type=Path, default=None,
                    help="a checkout of the code before the work, for the whole-command rows")
    ap.add_argument("--skip", default="", help="comma-separated parts to skip: "
                    "library,ctx,commands,small,threads,fl")
    ap.add_argument("--out", default=str(HERE / "results" / "speed"))
    a = ap.parse_args(argv)
    skip = set(filter(None, a.skip.split(",")))
    load0 = os.getloadavg()[0]
    res: dict = {}
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        parts = (("library", lambda: library_rows(a.n, a.repeat)),
                 ("ctx", lambda: {"ctx": ctx_row(a.n, a.repeat)}),
                 ("commands", lambda: command_rows(a.n, a.repeat, a.today, tmp)),
                 ("small", lambda: small_rows(a.repeat)),
                 ("threads", lambda: thread_rows(a.repeat, tmp)),
                 ("fl", lambda: {"fl": fl_row(tmp)}))
        for name, fn in parts:
            if name in skip:
                continue
            print(f"[bench_speed] {name} ...", file=sys.stderr, flush=True)
            res.update(fn())
    meta = {"repeat": a.repeat, "n": a.n, "python": platform.python_version(),
            "cpus": len(os.sched_getaffinity(0)), "load": [load0, os.getloadavg()[0]],
            "today": str(a.today) if a.today else None,
            "when": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")}
    doc = {"meta": meta, "results": res}
    text = render(doc)
    print(text)
    if a.out:
        Path(a.out + ".json").write_text(json.dumps(doc, indent=1, default=float))
        Path(a.out + ".md").write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
