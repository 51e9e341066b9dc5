"""``co3 simulate clock``: a finished ``co3 simulate fl`` run's wall clock under other links.

The options shared with ``co3 simulate plot`` (``LINKS``) override the run's own link settings;
the work is in ``co3cli.simulate.clock`` (``recompute``, ``clock_table``).
"""

from __future__ import annotations

import csv
from types import SimpleNamespace
from typing import List, Optional

import typer

from co3cli.cli.common import JsonOpt, emit, emit_json
from co3cli.simulate.links import LINK_SPECS

O = typer.Option
_SPECS = LINK_SPECS.allowed()
LINKS = SimpleNamespace(  # link options of `co3 simulate clock` and `co3 simulate plot`
    uplink=O([], "--uplink", help=f"Client uplink ({_SPECS}), e.g. 10mbit, "
             "lognormal:10mbit:0.5, trace.csv; repeatable (one result per uplink; default: "
             "the run's)."),
    downlink=O(None, "--downlink", help="Client downlink: a rate spec or Nx (N times the "
               "uplink; default: the run's)."),
    latency=O(None, "--latency", help="One-way latency per message, e.g. 20ms."),
    compute_factor=O(None, "--compute-factor", help="Per-client compute slowdown, e.g. "
                     "lognormal:1:0.5."),
    compute_time=O(None, "--compute-time", help="measured, or seconds per local step."),
    link_seed=O(None, "--link-seed", help="Seed of the link and device draws."),
)


def link_overrides(downlink, latency, compute_factor, compute_time, link_seed) -> dict:
    return {"downlink": downlink, "latency": latency, "compute_factor": compute_factor,
            "compute_time": compute_time, "link_seed": link_seed}


def simulate_clock_cli(
    runs: List[str] = typer.Argument(..., help="Run folders of co3 simulate fl."),
    uplink: List[str] = LINKS.uplink, downlink: Optional[str] = LINKS.downlink,
    latency: Optional[str] = LINKS.latency, compute_factor: Optional[str] = LINKS.compute_factor,
    compute_time: Optional[str] = LINKS.compute_time, link_seed: Optional[int] = LINKS.link_seed,
    target: Optional[float] = O(None, "--target", help="Test accuracy to time (default: the "
                                "run's --target)."),
    output: Optional[str] = O(None, "--output", "-o", help="Also write the table as CSV."),
    json_out: bool = JsonOpt,
):
    """The wall clock of finished runs recomputed for other links (no retraining).

    Example: co3 simulate clock run/ --uplink 1mbit --uplink 10mbit --uplink 100mbit
    --downlink 10x --latency 20ms --target 0.9

    Example: co3 simulate clock run-none run-co3 --uplink lognormal:10mbit:0.5 -o clock.csv
    """
    from co3cli.simulate.clock import TABLE_COLUMNS, clock_table

    rows = clock_table(runs, list(uplink), target,
                       **link_overrides(downlink, latency, compute_factor, compute_time, link_seed))
    if output is not None:
        with open(output, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=TABLE_COLUMNS)
            w.writeheader()
            w.writerows(rows)
    if json_out:
        emit_json(rows)
        return
    for r in rows:
        tt = r["time_to_target_s"]
        parts = ", ".join(f"{p} {r[p + '_s']:.3g}" for p in ("download", "compute", "encode",
                                                               "upload", "server"))
        emit(f"{r['run']} @ {r['uplink']}: {r['wallclock_s']:.3g} s for {r['rounds']} rounds "
             f"({r['mean_round_s']:.3g} s/round; slowest client's parts in all: {parts} s); "
             "target: " + (f"{tt:.3g} s (round {r['target_round']})" if tt is not None
                           else r["target_reason"]))
