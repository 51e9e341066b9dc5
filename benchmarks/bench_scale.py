"""Scale rules on REAL gradients: how far above each tensor's own MSE optimum does each land?

    python benchmarks/bench_scale.py [--out benchmarks/results]

Data: every layer and recorded step of the bundled dumps (``co3 samples``:
``co3cli/sample_data/mnist5k-mlp.h5``, 16 steps, and ``digits-mlp.h5``, 12 steps); each
(layer, step) row is one tensor, scaled on its own as ``co3 compress`` and the ``co3``
compressor do. Grids: ``fp4-co3`` (the CO3 paper's fp4, where its polynomial applies) and
``fp8-e4m3``.

Rules: ``absmax``; ``co3-poly`` as registered (guarded: ``gennorm-mse`` outside beta in
[0.6, 2]); ``co3-poly raw`` (the authors' polynomial applied at any fitted beta, what co3cli
did before); ``co3-poly clamp`` (beta clamped into [0.6, 2], the other way to guard it);
``gennorm-mse`` (optimal for the fitted GenNorm); ``empirical-mse`` (searched on the data's
fit sample).

Per tensor: the optimum is :func:`co3cli.scales.empirical_mse_scale` on the *whole* tensor (not
a sample); "excess" = MSE(rule) / MSE(optimum) - 1 (the MSE of the real round trip
``dequantize(quantize(x))``). bits/entry: the empirical entropy of the symbols at that scale
(what an ideal coder pays; + 32 bits of scale per tensor, the same for every rule). Time: the
median over tensors of one ``compute_scale`` call, the cache of ``gennorm_mse_unit_scale``
cleared first (every refit fits a new beta); the fits behind ``co3-poly raw``/``clamp`` cost what
``co3-poly`` costs.

Also TinyScript's exact zeros (issue 12): per step of each layer of >= 1,000 entries, the MSE
with zeros coded as 0 (now) and as the negative innermost level (before), and that bias.

Writes ``scale.md`` and ``scale.json``.
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse  # noqa: E402
import datetime as _dt  # noqa: E402
import json  # noqa: E402
import platform  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

import co3cli  # noqa: E402
from co3cli.compressors import get_compressor  # noqa: E402
from co3cli.data import SAMPLE_DATA_DIR  # noqa: E402
from co3cli.dump import Dump  # noqa: E402
from co3cli.formats import get_grid  # noqa: E402
from co3cli.quantize import dequantize, quantize  # noqa: E402
from co3cli.scales import (CO3_POLY_BETA, _gennorm_fit, _mse_unit_scale,  # noqa: E402
                           co3_poly_scale, compute_scale, empirical_mse_scale, scale_info)

DUMPS = ("mnist5k-mlp.h5", "digits-mlp.h5")
GRIDS = ("fp4-co3", "fp8-e4m3")
RULES = ("absmax", "co3-poly", "co3-poly raw", "co3-poly clamp", "gennorm-mse", "empirical-mse")


def entropy_bpe(counts: np.ndarray) -> float:
    p = counts[counts > 0] / counts.sum()
    return float(-(p * np.log2(p)).sum())


def measure(x: np.ndarray, grid, rule: str, fit) -> dict:
    """One rule on one tensor: scale, MSE, bits/entry, seconds, fallback."""
    _mse_unit_scale.cache_clear()  # a refit sees a new beta: time the uncached optimum
    t0 = time.perf_counter()
    fell, used = False, rule
    if rule == "co3-poly raw":
        beta, alpha = _gennorm_fit(x) if fit is not None else (1.0, 1.0)
        s = np.float32(co3_poly_scale(beta, alpha))
    elif rule == "co3-poly clamp":
        beta, alpha = _gennorm_fit(x) if fit is not None else (1.0, 1.0)
        s = np.float32(co3_poly_scale(min(max(beta, CO3_POLY_BETA[0]), CO3_POLY_BETA[1]), alpha))
    else:
        info = scale_info(x, grid, rule)
        s, fell, used = info.scale, info.fallback, info.used
    dt = time.perf_counter() - t0
    sym, counts = quantize(x, grid, s, with_counts=True)
    mse = float(np.mean((x.astype(np.float64) - dequantize(sym, grid, s)) ** 2))
    return {"scale": float(s), "mse": mse, "bpe": entropy_bpe(counts), "seconds": dt,
            "fallback": fell, "used": used}


def tinyscript_zeros(data: np.ndarray) -> dict:
    """Per step of a (steps, numel) layer: MSE and the mean error on exact zeros, zeros coded as
    0 (now) vs as -pos[0] (the old coding: the negative innermost level); medians and maxima."""
    comp = get_compressor("tinyscript", bits=2)
    ratio, zeros, bias = [], [], []
    for x in data:
        zero = x == 0
        if not zero.any() or zero.all():
            continue
        pk = comp.compress(x, {}, np.random.default_rng(0))
        err = pk.v_hat.astype(np.float64) - x
        pos0 = float(np.min(np.abs(pk.v_hat[~zero])))
        mse_new = float(np.mean(err ** 2))
        assert not err[zero].any()
        ratio.append((mse_new + zero.sum() * pos0 ** 2 / x.size) / mse_new)
        zeros.append(float(zero.mean()))
        bias.append(pos0 / float(np.sqrt(np.mean(np.square(x, dtype=np.float64)))))
    return {"steps": len(ratio), "zeros_median": float(np.median(zeros)),
            "zeros_max": float(np.max(zeros)), "mse_ratio_median": float(np.median(ratio)),
            "mse_ratio_max": float(np.max(ratio)), "bias_over_rms_median": float(np.median(bias))}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(Path(__file__).parent / "results"))
    args = ap.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    compute_scale(np.ones(8, np.float32), get_grid("fp4-co3"), "co3-poly")  # warm numba/scipy
    rows, tiny = [], []
    for name in DUMPS:
        with Dump.open(SAMPLE_DATA_DIR / name) as d:
            for layer in d.layers:
                data = d.read_layer(layer)
                if data.shape[1] >= 1000:
                    tiny.append({"dump": name, "layer": layer, **tinyscript_zeros(data)})
                for step, x in zip(d.steps.tolist(), data):
                    if not np.any(x):
                        continue
                    fit = _gennorm_fit(x)
                    for g in GRIDS:
                        grid = get_grid(g)
                        s_opt = empirical_mse_scale(x, grid, points=257)
                        sym = quantize(x, grid, s_opt)
                        opt_mse = float(np.mean((x.astype(np.float64)
                                                 - dequantize(sym, grid, s_opt)) ** 2))
                        for rule in RULES:
                            m = measure(x, grid, rule, fit)
                            rows.append({"dump": name, "layer": layer, "step": step, "grid": g,
                                         "numel": int(x.size), "beta": fit[0] if fit else None,
                                         "rule": rule, **m, "opt_mse": opt_mse,
                                         "excess": m["mse"] / opt_mse - 1 if opt_mse > 0 else 0.0})
            print(f"{name}: done", flush=True)

    def pct(v):
        return f"{100 * v:+.1f}" if v < 10 else f"{v:.3g}x"

    lines = [
        "# Scale rules on real gradients (bench_scale)", "",
        f"`python benchmarks/bench_scale.py` on {_dt.date.today().isoformat()}, "
        f"{platform.machine()} ({os.cpu_count()} cores, shared VM), Python "
        f"{platform.python_version()}, co3cli {co3cli.__version__}, one thread.", "",
        "Every (layer, step) of the bundled dumps (mnist5k-mlp: 16 steps x 6 layers, digits-mlp: "
        "12 steps x 4 layers), scaled on its own. **Excess MSE** = MSE(rule) / MSE(the tensor's "
        "own optimum) - 1, in %, the optimum found by `empirical_mse_scale` on the whole tensor "
        "(real round trips `dequantize(quantize(x))`). bits/entry: empirical entropy of the "
        "symbols. Time: median of one `compute_scale` call (uncached). `co3-poly` = the guarded rule "
        "(`gennorm-mse` outside beta in [0.6, 2]); `raw` = the polynomial at any beta (before "
        "this change); `clamp` = beta clamped into [0.6, 2]. fallbacks: tensors whose co3-poly "
        "scale came from gennorm-mse (or, where that would send only zeros, empirical-mse).", ""]
    summary = {}

    def fb(s):
        return f"{s['fallbacks']} ({s['to_empirical']} to empirical-mse)"
    for g in GRIDS:
        lines += [f"## {g}: all tensors", "",
                  "| rule | excess MSE % median | mean | max | bits/entry (mean) | ms / call "
                  "(median) | fallbacks |", "|---|---:|---:|---:|---:|---:|---:|"]
        for rule in RULES:
            rs = [r for r in rows if r["grid"] == g and r["rule"] == rule]
            ex = np.array([r["excess"] for r in rs])
            summary[f"{g}/{rule}"] = {
                "excess_median": float(np.median(ex)), "excess_mean": float(ex.mean()),
                "excess_max": float(ex.max()), "bpe_mean": float(np.mean([r["bpe"] for r in rs])),
                "ms_median": float(np.median([r["seconds"] for r in rs]) * 1e3),
                "fallbacks": int(sum(r["fallback"] for r in rs)),
                "to_empirical": int(sum(r["used"] == "empirical-mse" for r in rs if r["fallback"])),
                "tensors": len(rs)}
            s = summary[f"{g}/{rule}"]
            lines.append(f"| {rule} | {pct(s['excess_median'])} | {pct(s['excess_mean'])} | "
                         f"{pct(s['excess_max'])} | {s['bpe_mean']:.3f} | {s['ms_median']:.2f} | "
                         f"{fb(s) if rule == 'co3-poly' else '-'} / {s['tensors']} |")
        lines += ["", f"### {g}: per layer (median over steps of the excess MSE %; fitted beta "
                  "median; co3-poly fallbacks / steps)", "",
                  "| dump | layer | entries | beta | " + " | ".join(RULES) + " | fallbacks |",
                  "|---|---|---:|---:|" + "---:|" * len(RULES) + "---:|"]
        for name in DUMPS:
            for layer in dict.fromkeys(r["layer"] for r in rows if r["dump"] == name):
                rs = [r for r in rows if r["grid"] == g and r["dump"] == name
                      and r["layer"] == layer]
                cells = [pct(float(np.median([r["excess"] for r in rs if r["rule"] == rule])))
                         for rule in RULES]
                poly = [r for r in rs if r["rule"] == "co3-poly"]
                betas = [r["beta"] for r in poly if r["beta"] is not None]
                lines.append(f"| {name.removesuffix('.h5')} | {layer} | {poly[0]['numel']} | "
                             f"{np.median(betas):.2f} | " + " | ".join(cells) + " | "
                             f"{sum(r['fallback'] for r in poly)} / {len(poly)} |")
        lines.append("")
    lines += ["## TinyScript (2 bits): exact zeros coded as 0 (now) vs as the negative innermost "
              "level (before)", "",
              "Per step (one upload each), layers of >= 1,000 entries. MSE before / now: the old "
              "coding's MSE over the new one's (the nonzero entries are coded identically); "
              "bias before: the error on every exact zero, -(innermost level), over the "
              "tensor's RMS (now: 0).", "",
              "| dump | layer | steps | zeros % median (max) | MSE before / now median (max) "
              "| bias on zeros before / RMS |", "|---|---|---:|---:|---:|---:|"]
    for t in tiny:
        lines.append(f"| {t['dump'].removesuffix('.h5')} | {t['layer']} | {t['steps']} | "
                     f"{100 * t['zeros_median']:.1f} ({100 * t['zeros_max']:.1f}) | "
                     f"{t['mse_ratio_median']:.3f} ({t['mse_ratio_max']:.3f}) | "
                     f"-{t['bias_over_rms_median']:.2f} |")
    text = "\n".join(lines) + "\n"
    (out / "scale.md").write_text(text)
    (out / "scale.json").write_text(json.dumps({"summary": summary, "tinyscript": tiny,
                                                "rows": rows}, indent=1) + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
