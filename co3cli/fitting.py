"""``co3 fit``: fit every layer of a dump with several models and compare them."""

from __future__ import annotations

import fnmatch

import numpy as np

from co3cli.errors import InputError


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
        raise InputError(f"cannot fit model(s) {bad}; allowed: "
                         f"{', '.join(m for m in allowed if m != 'empirical')}")
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
                res = models.fit_all(x, model_ids)
                fits.append({
                    "layer": name, "step": step, "entries": int(x.size),
                    "zero_fraction": float((x == 0).mean()),
                    "models": {m: {**f.to_dict(), "gof": g} for m, (f, g) in res.items()},
                    "best": models.best_model(res) if np.any(x) else None,
                })
        attrs = {k: v for k, v in dump.attrs.items() if isinstance(v, (str, int, float, bool))}
    return {"file": str(src), "models": list(model_ids), "per_step": per_step, "source": attrs,
            "fits": fits}
