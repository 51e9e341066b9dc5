"""``co3 fit``: fit every layer of a dump with several models and compare them."""

from __future__ import annotations

import fnmatch

import numpy as np

from co3cli.errors import InputError
from co3cli.registry import spell


def fit_dump(src, model_ids, *, per_step=False, layers="*", nonfinite="error", progress=False) -> dict:
    """Per layer (pooled over steps, or per step): parameters, zero fraction, GoF, best by AIC."""
    from co3cli import models
    from co3cli.progress import progress_iter
    from co3cli.dump import Dump

    if not model_ids:
        raise InputError("--models: give at least one model id")
    allowed = models.get_model_ids()
    bad = [m for m in model_ids if m not in allowed or m == "empirical"]
    if bad:
        raise InputError(f"cannot fit model(s) {spell(bad)}; allowed: "
                         f"{spell(m for m in allowed if m != 'empirical')}")
    fits = []
    with Dump.open(src, nonfinite=nonfinite) as dump:
        globs = [g.strip() for g in layers.split(",") if g.strip()]
        names = [n for n in dump.layers if any(fnmatch.fnmatchcase(n, g) for g in globs)]
        if not names:
            raise InputError(f"no layer matches --layers {layers!r}; layers: {', '.join(dump.layers)}")
        for name in progress_iter(names, progress, "fit"):
            data = dump.read_layer(name)
            groups = [(int(dump.steps[t]), row) for t, row in enumerate(data)] if per_step \
                else [(None, data.reshape(-1))]
            for step, x in groups:
                fits.append({"layer": name, "step": step, "entries": int(x.size),
                             "zero_fraction": float((x == 0).mean()),
                             **_flagged_fits(x, model_ids)})
        attrs = {k: v for k, v in dump.attrs.items() if isinstance(v, (str, int, float, bool))}
    return {"file": str(src), "models": list(model_ids), "per_step": per_step, "source": attrs,
            "fits": fits}


def _flagged_fits(x, model_ids) -> dict:
    """Every model's fit and GoF with its ``flags``, the best by AIC, the layer's ``flags`` and
    ``switched`` (the first model flagged and another one best; see co3cli.models.flags)."""
    from co3cli import models
    from co3cli.models.flags import layer_flags, model_flags, switch_note

    res = models.fit_all(x, model_ids)
    amax = float(np.max(np.abs(x))) if x.size else 0.0
    out = {m: {**f.to_dict(), "gof": g, "flags": model_flags(f.params, g, amax)}
           for m, (f, g) in res.items()}
    best = models.best_model(res) if np.any(x) else None
    flags = layer_flags(x) + (["best-flagged"] if best and out[best]["flags"] else [])
    switched = switch_note(model_ids[0], best, {m: r["flags"] for m, r in out.items()})
    return {"models": out, "best": best, "flags": flags, "switched": switched}


def shown_flags(r: dict, primary: str) -> str:
    """A fit's flags column: the layer's, the first model's, the best model's as ``best:flag``."""
    models = r["models"]
    flags = [f for f in r["flags"] if f != "best-flagged"] + models.get(primary, {}).get("flags", [])
    best = r["best"]
    if best and best != primary:
        flags += [f"{best}:{f}" for f in models[best]["flags"]]
    return ",".join(flags) or "-"


def flag_notes(res: dict) -> list[str]:
    """The lines under ``co3 fit``'s table: each switched best model, then the legend of the
    flags its flags column shows."""
    from co3cli.models.flags import FLAGS

    notes, seen = [], set()
    for r in res["fits"]:
        where = r["layer"] + ("" if r["step"] is None else f"@{r['step']}")
        seen.update(f.rsplit(":", 1)[-1] for f in shown_flags(r, res["models"][0]).split(","))
        s = r.get("switched")
        if s:
            notes.append(f"* {where}: best switched from {s['from']} to {s['to']}: {s['from']} "
                         f"is flagged ({', '.join(s['because'])})")
    legend = [f"  {f}: {FLAGS[f]}" for f in FLAGS if f in seen]
    return notes + (["flags:"] + legend if legend else [])
