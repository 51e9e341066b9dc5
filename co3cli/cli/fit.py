"""``co3 fit``: every model on every layer, compared."""

from __future__ import annotations

import typer

from co3cli.cli.common import JsonOpt, NonfiniteOpt, QuietOpt, emit, emit_json


def fit_cli(
    input: str = typer.Argument(..., help="Gradient dump (.h5), or - for stdin."),
    models: str = typer.Option("gennorm-zi,gennorm,normal-zi,laplace-zi,dweibull", "--models",
                               help="Comma-separated model ids to fit and compare."),
    per_step: bool = typer.Option(False, "--per-step", help="Fit every step separately "
                                  "(default: pool each layer's steps)."),
    layers: str = typer.Option("*", "--layers", help="Comma-separated globs over layer names, "
                               "e.g. '*.weight'."),
    nonfinite: str = NonfiniteOpt, json_out: bool = JsonOpt, quiet: bool = QuietOpt,
):
    """Fit GenNorm (and rivals) to every layer: parameters, zero fraction, goodness of fit.

    Example: co3 fit sample_data/mnist5k-mlp.h5 --json
    """
    from co3cli.fitting import fit_dump, flag_notes
    from co3cli.report import format_table

    ids = [m.strip() for m in models.split(",") if m.strip()]
    res = fit_dump(input, ids, per_step=per_step, layers=layers, nonfinite=nonfinite,
                   progress=not quiet)
    if json_out:
        emit_json(res)
        return
    rows = _rows(res, ids)
    cols = [("name", "layer", ""), ("n", "entries", "d"), ("p0", "zeros", ".3f"),
            ("beta", "beta", ".3f"), ("scale", "alpha", ".3g"), ("ks", f"KS({ids[0]})", ".4f"),
            ("w2", "W2", ".4f"), ("best", "best (AIC)", ""), ("flags", "flags", "")]
    emit(f"{input}: model fits per layer (AIC on the non-zero entries; lower is better)")
    emit(format_table(rows, cols))
    emit("\n" + format_table(rows, [("name", "layer", "")] + [(f"aic:{m}", m, ".4g") for m in ids]))
    notes = flag_notes(res)
    if notes:
        emit("\n" + "\n".join(notes))


def _rows(res: dict, ids: list[str]) -> list[dict]:
    """One table row per fit: the first model's parameters and fit, every model's AIC."""
    from co3cli.fitting import shown_flags

    rows = []
    for r in res["fits"]:
        main = r["models"].get(ids[0], {"params": {}, "gof": {}})
        rows.append({"name": r["layer"] + ("" if r["step"] is None else f"@{r['step']}"),
                     "n": r["entries"], "p0": r["zero_fraction"], "beta": main["params"].get("beta"),
                     "scale": main["params"].get("scale"), "ks": main["gof"].get("ks"),
                     "w2": main["gof"].get("w2"),
                     "best": (r["best"] or "") + ("*" if r.get("switched") else ""),
                     "flags": shown_flags(r, ids[0]),
                     **{f"aic:{m}": r["models"].get(m, {}).get("gof", {}).get("aic") for m in ids}})
    return rows
