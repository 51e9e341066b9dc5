"""``co3 simulate uep analyze | mc``: exact decoding probabilities, error vs time, Monte Carlo check.

::

    schemes (the ids of CODES: now-uep, ew-uep, eep, mds with n = --workers; uncoded n = K;
             repetition n = r K)
      analyze: decode_probability(code, N) for N = 0..n   -> {"schemes": {id: {"N", "p_decode"}}}
               error_vs_time(code, energies, t)            -> {"error_vs_time": {"t", id: [...]}}
      mc:      monte_carlo(code, N, trials) with the real encoder/decoder, next to the exact
               values: frequency, exact probability, z = (freq - p) / sqrt(p (1 - p) / trials)

``p_decode`` is indexed ``[class][N]`` (class 0 = the most important). Error curves use per-block
energies given per class (``energies``: the expected squared Frobenius norm of one block product
of that class, e.g. from ``analysis.block_energy``).
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np

from co3cli.checks import check_int, check_real
from co3cli.errors import InputError
from co3cli.simulate.uep.analysis import decode_probability, error_vs_time, recovered_fraction
from co3cli.simulate.uep.codes import CODES, get_code
from co3cli.simulate.uep.latency import Latency
from co3cli.simulate.uep.montecarlo import monte_carlo

def build_codes(schemes: Sequence[str], *, windows: Sequence[float], classes: Sequence[int],
                workers: int, r: int = 2) -> dict[str, Any]:
    """The codes of ``schemes`` for one setting (uncoded and repetition fix their workers)."""
    unknown = [s for s in schemes if s not in CODES]
    if unknown:
        raise InputError(f"unknown scheme(s) {unknown}; allowed: {CODES.allowed()}")
    if not schemes:
        raise InputError("--schemes lists no scheme")
    codes = {}
    for s in schemes:
        if s == "uncoded":
            codes[s] = get_code(s, class_sizes=classes)
        elif s == "repetition":
            codes[s] = get_code(s, class_sizes=classes, r=r)
        elif s in ("now-uep", "ew-uep"):
            codes[s] = get_code(s, class_sizes=classes, workers=workers, windows=windows)
        else:
            codes[s] = get_code(s, class_sizes=classes, workers=workers)
    return codes


def analyze(codes: dict[str, Any], *, energies: Sequence[float] | None = None,
            rate: float = 1.0, shift: float = 0.0, t_max: float | None = None,
            points: int = 41) -> dict[str, Any]:
    """Exact P_{d,c}(N) per scheme, and with ``energies`` the expected error vs time."""
    out: dict[str, Any] = {"schemes": {}}
    for sid, code in codes.items():
        N = np.arange(code.n_workers + 1)
        p = decode_probability(code, N)  # (len(N), L)
        frac = recovered_fraction(code, N)
        out["schemes"][sid] = {
            "workers": code.n_workers, "config": code.config(), "N": N.tolist(),
            "p_decode": p.T.tolist(), "recovered_fraction": frac.T.tolist(),
        }
    if energies is not None:
        lat = Latency(rate=rate, shift=shift)
        if t_max is None:
            t_max = shift + 4.0 / rate
        t_max = check_real("--t-max", t_max, 0.0, lo_open=True)
        points = check_int("--points", points, lo=2)
        t = np.linspace(0.0, t_max, points)
        curves: dict[str, Any] = {"t": t.tolist(), "energies": list(energies),
                                  "rate": rate, "shift": shift}
        e = np.asarray(energies, float)
        if not np.all(np.isfinite(e)) or e.max() <= 0:
            raise InputError(f"--energies {list(energies)} must be finite, >= 0, not all 0")
        e = e / e.max()  # the error is a ratio of energies: scale-free, and no overflow
        for sid, code in codes.items():
            curves[sid] = error_vs_time(code, e, t, lat).tolist()
        out["error_vs_time"] = curves
    return out


def monte_carlo_check(codes: dict[str, Any], N: Sequence[int], *, trials: int,
                      seed: int = 0) -> list[dict[str, Any]]:
    """Real encoder/decoder frequencies next to the exact probabilities, per scheme, N, class."""
    top = max(code.n_workers for code in codes.values())
    bad = [n for n in N if not 0 <= n <= top]
    if bad:
        raise InputError(f"--n {bad}: numbers of results received must be in 0..{top} "
                         "(the most workers of these schemes)")
    rows = []
    for sid, code in codes.items():
        pts = [n for n in N if 0 <= n <= code.n_workers]  # a scheme with fewer workers: skipped
        if not pts:
            continue
        mc = monte_carlo(code, N=pts, trials=trials, rng=np.random.default_rng(seed))
        exact = decode_probability(code, np.asarray(pts))
        for i, n in enumerate(pts):
            for c in range(code.n_classes):
                p, f = float(exact[i, c]), float(mc.decoded[i, c])
                sd = math.sqrt(p * (1 - p) / trials)
                z = (f - p) / sd if sd > 0 else (0.0 if f == p else math.inf)
                rows.append({"scheme": sid, "N": int(n), "class": c, "exact": p,
                             "monte_carlo": f, "z": z, "trials": trials})
    return rows


def parse_list(text: str, name: str, kind: type = float) -> list:
    """``"0.4,0.35,0.25"`` -> [0.4, 0.35, 0.25] (``kind`` int or float); InputError otherwise."""
    try:
        vals = [kind(x) for x in text.split(",") if x.strip()]
    except ValueError:
        what = "integers" if kind is int else "numbers"
        raise InputError(f"{name} {text!r} must be comma-separated {what}") from None
    if not vals:
        raise InputError(f"{name} {text!r} lists no value")
    return vals


def parse_floats(text: str, name: str) -> list[float]:
    return parse_list(text, name, float)


def parse_ints(text: str, name: str) -> list[int]:
    return parse_list(text, name, int)


def class_energies(energies: str | None, n_classes: int) -> list[float]:
    """Per-class block energies from ``--energies`` (default ``10, 1, 0.1, ...``), checked."""
    e = parse_floats(energies, "--energies") if energies else [10.0 ** (1 - c)
                                                               for c in range(n_classes)]
    if len(e) != n_classes or any(not (math.isfinite(v) and v >= 0) for v in e):
        raise InputError(f"--energies needs {n_classes} values >= 0 (one per class), got {e}")
    return e


def straggler_setting(scheme: str, *, workers, windows: str, classes: str, repetition: int,
                      rate: float, shift: float, deadline, wait_for, seed: int,
                      partition: str = "sorted", sort_by: str = "mean-abs"):
    """The ``StragglerConfig`` of ``co3 simulate uep train`` (None for ``exact``: no code;
    ``partition`` / ``sort_by`` are checked either way)."""
    from co3cli.simulate.uep.matmul import check_partition

    check_partition(partition, sort_by)
    if scheme == "exact":
        return None
    from co3cli.simulate.uep.train import StragglerConfig

    return StragglerConfig(scheme=scheme, workers=workers,
                           windows=tuple(parse_floats(windows, "--windows")),
                           class_sizes=tuple(parse_ints(classes, "--classes")), r=repetition,
                           rate=rate, shift=shift, deadline=deadline, wait_for=wait_for,
                           seed=seed, partition=partition, sort_by=sort_by).check()


def _plain(o):
    return o.tolist() if hasattr(o, "tolist") else str(o)


def to_json(obj) -> str:
    """JSON of a training summary (numpy values as lists, anything else as text)."""
    import json

    return json.dumps(obj, indent=1, default=_plain)


def train_to_files(task: str, cfg, output, *, steps: int, batch_size: int, lr: float, seed: int,
                   eval_every: int, target: float | None, progress: bool) -> dict[str, Any]:
    """Run ``train_coded`` into the CSV ``output`` (path or ``-``) and, beside a path, its
    provenance ``<output>.json`` (``co3.simulate-uep-train/1``: config, versions, summary); both
    appear only when the run finished. Returns the summary."""
    import contextlib
    from pathlib import Path

    from co3cli.fileio import output_path, versions
    from co3cli.simulate.uep.train import train_coded

    to_stdout = str(output) == "-"
    side = None if to_stdout else Path(output).with_name(Path(output).name + ".json")
    with output_path(output) as tmp, (contextlib.nullcontext() if to_stdout
                                      else output_path(side)) as tmp_side:
        res = train_coded(task, cfg, steps=steps, batch_size=batch_size, lr=lr, seed=seed,
                          eval_every=eval_every, out_csv=tmp, target_accuracy=target,
                          progress=progress)
        doc = {"schema": "co3.simulate-uep-train/1", "task": task, "steps": steps,
               "batch_size": batch_size, "lr": lr, "seed": seed, "eval_every": eval_every,
               "straggler": None if cfg is None else cfg.to_dict(), "versions": versions(),
               "summary": res}
        if tmp_side is not None:
            tmp_side.write_text(to_json(doc) + "\n")
    return res
