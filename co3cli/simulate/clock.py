"""The wall clock of ``co3 simulate fl``: each round's time under the clients' links and devices,
the round deadline, time to a target accuracy, and the clock of a finished run recomputed for
other links (``co3 simulate clock``, ``co3 simulate plot --uplink``).

Round r starts at clock time T_r with the server sending the model; for each participating
client c (links and factors from :mod:`co3cli.simulate.links`)::

    download_c = latency_c + 8 * down_bytes_c / downlink_c    down_bytes = 4 bytes x entries
                                                              (the float32 model)
    compute_c  = factor_c * C_c + straggler_c     C_c: measured t_compute (compute_time
                                                  "measured") or local_steps x compute_time;
                                                  straggler_c: the simulated time of its coded
                                                  backward products (--stragglers), seeded
    encode_c   = factor_c * measured t_compress
    upload_c   = latency_c + 8 * up_bytes_c / uplink_c        up_bytes: the real payload bytes
    arrival_c  = download_c + compute_c + encode_c + upload_c

    round_s    = client_s + server_s        client_s = max arrival_c over the on-time clients
                                                       (at least the deadline if one is late)
                                            server_s = measured decode + aggregation
    T_{r+1}    = T_r + round_s              (evaluation is not on the clock)

The participation rule: wait for every client (no ``round_deadline``), or drop the clients
that miss the deadline. Measured times are noisy, so the rule decides on the deterministic
part only, ``nocodec_c = download_c + compute_c + upload_c`` (bytes, seeded draws, a fixed
``compute_time``, seeded straggler times): a deadline needs ``compute_time`` in seconds per
local step, and traces indexed by round. Late clients are dropped from the average (the server
still decodes their payloads, so its decoder state stays in step with theirs); when all are
late, the earliest is kept and the round waits for it. Two runs of one config therefore train
identically; without a deadline the clock does not touch training at all, so one run serves
every link: ``clients.csv`` keeps what the clock needs per client and round, and
``recompute(run, uplink=...)`` replays it for other links.

``metrics.csv`` gains ``CLOCK_COLUMNS``: ``downlink_bytes``, ``late_clients``, the slowest
on-time client's parts (``clock_download_s``, ``clock_compute_s``, ``clock_encode_s``,
``clock_upload_s`` summing to ``clock_client_s``), ``clock_nocodec_s`` (the latest deterministic
arrival, what the deadline sees), ``clock_server_s``, ``round_s`` and the cumulative
``wallclock_s``. ``summary.json`` gains ``clock``: the total, the sums of the parts, the late
uploads, the measured compute time per local step (to choose a ``compute_time``) and the time to
``target`` accuracy (first evaluated round at or above it; null with the reason when never).
"""

from __future__ import annotations

import csv
import json
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from co3cli.checks import check_int, check_real
from co3cli.errors import InputError
from co3cli.simulate.links import QUANTITIES, Network, parse_value

CLOCK_FIELDS = ("uplink", "downlink", "latency", "compute_factor", "compute_time",
                "round_deadline", "target", "link_seed")  # FLConfig fields of the clock
LINK_FIELDS = ("uplink", "downlink", "latency", "compute_factor", "compute_time", "link_seed")
CLOCK_COLUMNS = ("downlink_bytes", "late_clients", "clock_download_s", "clock_compute_s",
                 "clock_encode_s", "clock_upload_s", "clock_client_s", "clock_nocodec_s",
                 "clock_server_s", "round_s", "wallclock_s")
CLIENT_COLUMNS = ("round", "client", "late", "uplink_bytes", "downlink_bytes", "t_compute",
                  "t_compress", "straggler_time", "download_s", "compute_s", "encode_s",
                  "upload_s", "arrival_s")
PARTS = ("download", "compute", "encode", "upload")


def clock_fields(cfg) -> dict[str, Any]:
    """The clock's fields of an FLConfig or a config dict (missing: None, i.e. the defaults)."""
    get = cfg.get if isinstance(cfg, dict) else lambda k, d=None: getattr(cfg, k, d)
    return {k: get(k, None) for k in CLOCK_FIELDS}


def parse_step_time(text: Any) -> float | None:
    """``compute_time``: None for "measured", else seconds per local step (> 0)."""
    if text is None or (isinstance(text, str) and text.strip().lower() == "measured"):
        return None
    v = parse_value(text, "latency", f"--compute-time {text!r}: ")
    if v <= 0:
        raise InputError(f"--compute-time {text!r} must be 'measured' or > 0 seconds per step")
    return v


@dataclass
class Plan:
    """One round's clients before aggregation: their times (arrays, client order) and who is late."""

    clients: np.ndarray
    up_bytes: np.ndarray
    t_compute: np.ndarray
    t_compress: np.ndarray
    straggler: np.ndarray
    parts: dict[str, np.ndarray]  # download, compute, encode, upload
    nocodec: np.ndarray
    arrival: np.ndarray
    late: np.ndarray  # bool


class Clock:
    """The clock of one run: its network, compute-time model, deadline and the time so far."""

    def __init__(self, fields: dict[str, Any], clients: int, entries: int, local_steps: int,
                 seed: int):
        f = {**dict.fromkeys(CLOCK_FIELDS), **fields}
        self.fields = f
        seed = seed if f["link_seed"] is None else check_int("link_seed", f["link_seed"], 0)
        self.net = Network.build({q: f[q] for q in QUANTITIES}, clients, seed)
        self.step_s = parse_step_time(f["compute_time"])
        self.local_steps = local_steps
        self.deadline = None
        if f["round_deadline"] is not None:
            self.deadline = parse_value(f["round_deadline"], "latency",
                                        f"--round-deadline {f['round_deadline']!r}: ")
            if self.deadline <= 0:
                raise InputError(f"--round-deadline {f['round_deadline']!r} must be > 0 seconds")
            if self.step_s is None:
                raise InputError("--round-deadline drops late clients, so it must not depend on "
                                 "measured (noisy) times: give --compute-time in seconds per "
                                 "local step (e.g. 20ms; summary.json of a run without a "
                                 "deadline reports the measured one)")
            if self.net.time_indexed:
                raise InputError("--round-deadline needs traces indexed by round, not time "
                                 "(the clock's time holds measured parts)")
        if f["target"] is not None:
            check_real("target", f["target"], 0.0, 1.0, lo_open=True)
        self.model_bytes = 4 * int(entries)  # the float32 model each client downloads
        self.wallclock = 0.0

    def config(self) -> dict[str, Any]:
        """What config.json records: the parsed specs and the participation rule."""
        return {"links": self.net.specs, "compute_time_s": self.step_s,
                "round_deadline_s": self.deadline, "target": self.fields["target"],
                "downlink_bytes_per_client": self.model_bytes}

    def plan(self, r: int, clients, up_bytes, t_compute, t_compress, straggler) -> Plan:
        """Every client's times in round ``r`` and the late ones (deterministic parts only)."""
        clients = np.asarray(clients, np.int64)
        up_bytes = np.asarray(up_bytes, np.float64)
        t_compute, t_compress = np.asarray(t_compute, float), np.asarray(t_compress, float)
        straggler = np.asarray(straggler, float)
        up, down, lat, factor = self.net.at(clients, r, self.wallclock)
        base = t_compute if self.step_s is None else np.full(len(clients),
                                                              self.local_steps * self.step_s)
        parts = {"download": lat + 8.0 * self.model_bytes / down,
                 "compute": factor * base + straggler,
                 "encode": factor * t_compress,
                 "upload": lat + 8.0 * up_bytes / up}
        nocodec = parts["download"] + parts["compute"] + parts["upload"]
        late = np.zeros(len(clients), bool)
        if self.deadline is not None and len(clients):
            late = nocodec > self.deadline
            if late.all():  # the server waits for the first one
                late[int(np.argmin(nocodec))] = False
        return Plan(clients, up_bytes, t_compute, t_compress, straggler, parts, nocodec,
                    nocodec + parts["encode"], late)

    def plan_msgs(self, r: int, msgs) -> Plan:
        """:meth:`plan` of the round's ``ClientMsg`` list (client order)."""
        up = [sum(map(len, m.payloads)) + len(m.buffers) for m in msgs]  # buffers ride raw
        return self.plan(r, [m.client for m in msgs], up,
                         [m.t_compute for m in msgs], [m.t_compress for m in msgs],
                         [m.straggler_time for m in msgs])

    def finish(self, plan: Plan, server_s: float) -> dict[str, Any]:
        """The round's CLOCK_COLUMNS (and its per-client rows under ``"clients"``); the clock
        moves on by ``round_s``."""
        on = np.flatnonzero(~plan.late)
        k = on[int(np.argmax(plan.arrival[on]))] if on.size else None
        client_s = float(plan.arrival[k]) if k is not None else 0.0
        if plan.late.any():
            client_s = max(client_s, self.deadline)
        round_s = client_s + server_s
        self.wallclock += round_s
        row = {"downlink_bytes": self.model_bytes * len(plan.clients),
               "late_clients": int(plan.late.sum()),
               **{f"clock_{p}_s": (float(plan.parts[p][k]) if k is not None else 0.0)
                  for p in PARTS},
               "clock_client_s": client_s,
               "clock_nocodec_s": float(plan.nocodec[on].max()) if on.size else 0.0,
               "clock_server_s": server_s, "round_s": round_s, "wallclock_s": self.wallclock}
        row["clients"] = [
            (int(c), int(plan.late[i]), int(plan.up_bytes[i]), self.model_bytes,
             float(plan.t_compute[i]), float(plan.t_compress[i]), float(plan.straggler[i]),
             *(float(plan.parts[p][i]) for p in PARTS), float(plan.arrival[i]))
            for i, c in enumerate(plan.clients)]
        return row


def check_clock(cfg) -> Clock:
    """The run's Clock, validated (InputError naming the option)."""
    return Clock(clock_fields(cfg), cfg.clients, 1, cfg.local_steps, cfg.seed)


# -- time to target --------------------------------------------------------------------------------
class ClockLog:
    """The server's clock bookkeeping: ``clients.csv`` (flushed per round), the totals and the
    time to the target accuracy for summary.json."""

    def __init__(self, out: Path | None, target: float | None, local_steps: int):
        self.target, self.local_steps = target, local_steps
        self.file = open(out / "clients.csv", "w", newline="") if out is not None else None
        if self.file is not None:
            self.csv = csv.writer(self.file)
            self.csv.writerow(CLIENT_COLUMNS)
            self.file.flush()
        self.sums = dict.fromkeys(PARTS + ("server",), 0.0)
        self.wallclock = 0.0
        self.late = 0
        self.steps: list[float] = []  # measured compute seconds per local step, per upload
        self.best: tuple[float, int] | None = None
        self.reached: dict[str, Any] | None = None

    def round(self, row: dict[str, Any]) -> None:
        r = row["round"]
        for c in row.pop("clients", ()):
            self.steps.append(c[4] / self.local_steps)
            if self.file is not None:
                self.csv.writerow([r, *(repr(v) if isinstance(v, float) else v for v in c)])
        if self.file is not None:
            self.file.flush()
        for p in PARTS:
            self.sums[p] += row[f"clock_{p}_s"]
        self.sums["server"] += row["clock_server_s"]
        self.wallclock, self.late = row["wallclock_s"], self.late + row["late_clients"]
        acc = row.get("test_accuracy")
        if acc is not None and not (isinstance(acc, float) and math.isnan(acc)):
            if self.best is None or acc > self.best[0]:
                self.best = (acc, r)
            if self.target is not None and self.reached is None and acc >= self.target:
                self.reached = {"time_to_target_s": row["wallclock_s"], "target_round": r,
                                "target_uplink_bytes": row.get("cumulative_uplink_bytes")}

    def close(self) -> None:
        if self.file is not None:
            self.file.close()

    def summary(self) -> dict[str, Any]:
        doc = {"wallclock_s": self.wallclock, "parts_s": dict(self.sums),
               "late_uploads": self.late, "target": self.target,
               "measured_step_s": float(np.median(self.steps)) if self.steps else None,
               "time_to_target_s": None, "target_round": None, "target_uplink_bytes": None,
               "target_reason": None}
        if self.reached is not None:
            doc.update(self.reached)
        elif self.target is None:
            doc["target_reason"] = "no target given (--target)"
        elif self.best is None:
            doc["target_reason"] = f"never reached {self.target:g}: no round was evaluated"
        else:
            doc["target_reason"] = (f"never reached {self.target:g}: best test accuracy "
                                    f"{self.best[0]:.4f} (round {self.best[1]})")
        return doc


# -- recomputing a finished run --------------------------------------------------------------------
def _read_csv(path: Path, what: str) -> dict[str, np.ndarray]:
    try:
        with open(path, newline="", encoding="utf-8") as f:
            rows = list(csv.reader(f))
    except OSError as exc:
        raise InputError(f"cannot read {path}: {exc.strerror or exc} ({what})") from None
    if not rows:
        raise InputError(f"{path} is empty")
    head, body = rows[0], [r for r in rows[1:] if len(r) == len(rows[0])]
    try:
        return {h: np.array([float(r[i]) if r[i] != "" else np.nan for r in body])
                for i, h in enumerate(head)}
    except ValueError as exc:
        raise InputError(f"{path}: bad value ({exc})") from None


def recompute(run: str | os.PathLike, target: float | None = None, **links: Any) -> dict[str, Any]:
    """The clock of finished run ``run`` under other links (``links``: LINK_FIELDS; None or
    missing: the run's own). Returns columns (``round``, ``test_accuracy``, ``round_s``,
    ``wallclock_s``, ``cumulative_uplink_bytes``, the ``clock_*_s`` parts) and ``summary``."""
    run = Path(run)
    unknown = sorted(set(links) - set(LINK_FIELDS))
    if unknown:
        raise InputError(f"unknown link field(s) {unknown}; allowed: {', '.join(LINK_FIELDS)}")
    try:
        doc = json.loads((run / "config.json").read_text(encoding="utf-8"))
        cfg = doc["config"]
        clients, entries = int(cfg["clients"]), int(doc["model_parameters"])
    except (OSError, ValueError, KeyError, TypeError):
        raise InputError(f"{run} is not a co3 simulate fl run folder (config.json)") from None
    fields = clock_fields(cfg)
    given = {k: v for k, v in links.items() if v is not None}
    if fields["round_deadline"] is not None and given:
        raise InputError(f"{run} ran with a round deadline: other links would drop other "
                         "clients, which changes training; rerun it with those links instead")
    fields.update(given)
    clock = Clock(fields, clients, entries, int(cfg.get("local_steps", 1)), int(cfg.get("seed", 0)))
    per = _read_csv(run / "clients.csv", "runs from before the wall clock have none: rerun it")
    m = _read_csv(run / "metrics.csv", "the run's metrics")
    target = fields["target"] if target is None else check_real("target", target, 0, 1,
                                                                  lo_open=True)
    log = ClockLog(None, target, int(cfg.get("local_steps", 1)))
    cols: dict[str, list] = {k: [] for k in ("round", "test_accuracy", "cumulative_uplink_bytes")
                             + CLOCK_COLUMNS[2:]}
    bounds = np.searchsorted(per["round"], m["round"], side="left")
    ends = np.searchsorted(per["round"], m["round"], side="right")
    for i, r in enumerate(m["round"].astype(int).tolist()):
        s = slice(bounds[i], ends[i])
        if ends[i] == bounds[i]:
            raise InputError(f"{run}/clients.csv has no rows for round {r}")
        plan = clock.plan(r, per["client"][s], per["uplink_bytes"][s], per["t_compute"][s],
                          per["t_compress"][s], per["straggler_time"][s])
        if clock.deadline is not None and not np.array_equal(plan.late, per["late"][s] > 0):
            raise InputError(f"{run}: round {r}'s late clients do not replay (clients.csv "
                             "differs from the run's config)")
        server = m["t_decompress"][i] + m["t_server"][i]
        row = clock.finish(plan, float(server))
        acc = m["test_accuracy"][i]
        row.update(round=r, test_accuracy=None if np.isnan(acc) else float(acc),
                   cumulative_uplink_bytes=float(m["cumulative_uplink_bytes"][i]))
        for k in cols:
            cols[k].append(np.nan if row[k] is None else row[k])
        log.round(row)
    out = {k: np.asarray(v, float) for k, v in cols.items()}
    out["summary"] = {**log.summary(), **clock.config()}
    return out


TABLE_COLUMNS = ("run", "uplink", "rounds", "wallclock_s", "mean_round_s", "time_to_target_s",
                 "target_round", "download_s", "compute_s", "encode_s", "upload_s", "server_s",
                 "late_uploads", "target_reason")


def clock_table(runs: list[str | os.PathLike], uplinks: list[str | None], target: float | None = None,
                **links: Any) -> list[dict[str, Any]]:
    """One row per run and uplink (None: the run's own): TABLE_COLUMNS; the ``*_s`` parts are
    the slowest client's, summed over the rounds."""
    rows = []
    for run in runs:
        for up in uplinks or [None]:
            res = recompute(run, target, **{**links, "uplink": up})
            s = res["summary"]
            n = len(res["round"])
            rows.append({"run": str(run), "uplink": up if up is not None else "(recorded)",
                         "rounds": n, "wallclock_s": s["wallclock_s"],
                         "mean_round_s": s["wallclock_s"] / n if n else None,
                         "time_to_target_s": s["time_to_target_s"],
                         "target_round": s["target_round"],
                         **{f"{p}_s": s["parts_s"][p] for p in PARTS + ("server",)},
                         "late_uploads": s["late_uploads"], "target_reason": s["target_reason"]})
    return rows
