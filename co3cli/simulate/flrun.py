"""Running ``co3 simulate fl`` jobs: one config on an engine, or a sweep of configs.

::

    run_job(config, out, ...)
      sweep="gamma=0,1"      -> run_sweep: out/<name=value>/ per point (fl.run_fl) + out/sweep.csv
      engine="inprocess"     -> fl.run_fl: one run folder, one process
      engine="torchrun"      -> dist.launch: the same run folder from nproc processes
      print_torchrun=True    -> out/fl-config.json + the torchrun line for several machines

Every point of a sweep is checked before the first one runs; a point that diverges keeps its
folder (its summary.json says why) and the sweep goes on.
"""

from __future__ import annotations

import csv
import json
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from co3cli.errors import InputError
from co3cli.simulate.fl import Diverged, FLResult, run_fl
from co3cli.simulate.flconfig import FLConfig, check_config, sweep_configs

ENGINES = ("inprocess", "torchrun")
SWEEP_COLUMNS = ("run", "final_accuracy", "best_accuracy", "mean_bits_per_entry",
                 "mean_entropy_bits_per_entry", "total_uplink_bytes", "rounds_done", "stopped",
                 "t_codec_fraction", "scale_fallbacks", "wallclock_s", "time_to_target_s")


@dataclass
class FLJob:
    """What ``run_job`` did: one run's ``result``, a sweep's rows, or the ``torchrun`` line."""

    result: FLResult | None = None
    sweep: list[dict[str, Any]] | None = None
    torchrun: str | None = None


def run_sweep(base: FLConfig, spec: str, out: str | os.PathLike, *, progress: bool = False,
              overwrite: bool = False) -> list[dict[str, Any]]:
    """Run every config of ``spec`` into ``out/<name=value>/``; write ``out/sweep.csv``."""
    configs = sweep_configs(base, spec)
    for _, c in configs:
        check_config(c)  # every point valid before the first runs
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    for label, c in configs:
        try:
            res = run_fl(c, out / label, progress=progress, overwrite=overwrite).to_dict()
        except Diverged:
            res = json.loads((out / label / "summary.json").read_text())
        flat = {**res, **{k: (res.get("clock") or {}).get(k) for k in SWEEP_COLUMNS[-2:]}}
        rows.append({"run": label, **{k: flat.get(k) for k in SWEEP_COLUMNS[1:]}})
        with open(out / "sweep.csv", "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=SWEEP_COLUMNS)
            w.writeheader()
            w.writerows(rows)
    return rows


def run_job(cfg: FLConfig, out: str | os.PathLike, *, engine: str = "inprocess",
            sweep: str | None = None, nproc: int = 3, timeout: float = 300.0,
            print_torchrun: bool = False, overwrite: bool = False,
            progress: bool = False) -> FLJob:
    """Run ``cfg`` (or the sweep ``sweep`` around it) into ``out`` on ``engine``."""
    if engine not in ENGINES:
        raise InputError(f"--engine {engine!r} is not one of {', '.join(ENGINES)}")
    if engine == "torchrun" or print_torchrun:
        return _torchrun(cfg, out, sweep, nproc, timeout, print_torchrun, overwrite, progress)
    if sweep is not None:
        return FLJob(sweep=run_sweep(cfg, sweep, out, progress=progress, overwrite=overwrite))
    return FLJob(result=run_fl(cfg, out, progress=progress, overwrite=overwrite))


def _torchrun(cfg, out, sweep, nproc, timeout, print_only, overwrite, progress) -> FLJob:
    from co3cli.simulate import dist

    if sweep is not None:
        raise InputError("--sweep runs with the in-process engine only")
    if nproc < 2:
        raise InputError(f"--nproc {nproc} must be >= 2 (a server and at least one client)")
    if not (math.isfinite(timeout) and timeout > 0):
        raise InputError(f"--timeout {timeout} must be > 0 seconds")
    check_config(cfg)
    if print_only:
        out_dir = Path(out)
        out_dir.mkdir(parents=True, exist_ok=True)
        cfg_path = out_dir / "fl-config.json"
        cfg_path.write_text(json.dumps(cfg.to_dict(), indent=1) + "\n")
        return FLJob(torchrun=dist.torchrun_command(cfg_path, out_dir, nproc, nnodes=2))
    return FLJob(result=dist.launch(cfg, out, nproc, overwrite=overwrite, timeout=timeout,
                                    progress=progress))
