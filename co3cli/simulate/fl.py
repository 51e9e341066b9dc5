"""``co3 simulate fl``: federated training where every upload really goes through a compressor.

::

    server model w --broadcast--> N clients (own data shard each; m of N take part per round)
      client c:  g = grad on a minibatch (FedSGD)  or  w - w_local after E SGD steps (FedAvg)
                 per layer: v = g + gamma * e;  packet = compress(v);  e = v - v_hat
      bytes ---> server: v_hat = decompress(bytes)  (its own per-client state), average
                 w <- w - lr * (momentum buffer of the average)

Bits are counted from the payload bytes (``len(payload)``), never estimated. Everything random
(the data split, the shards, the initial weights, the minibatches, client sampling, stochastic
compressors, straggler draws) comes from ``seed``: the same config gives the same run.
``Simulation`` holds that seeded world (``client_round`` / ``server_round``) and ``RunLog`` the
server's bookkeeping; ``run_fl`` drives them in one process, ``co3cli.simulate.dist`` over
``torch.distributed`` processes, with bit-identical results. ``stragglers`` (a
``uep.train.StragglerConfig`` as a dict) codes each client's backward products against
stragglers (``straggler_time``: the round waits for the slowest client). The config
(``FLConfig``, its checks, config files): ``flconfig``; sweeps and the engine choice:
``flrun``; reading ``metrics.csv`` back and plotting runs: ``flplot``.

Outputs in the run folder (``run_fl(config, out)``):

* ``config.json``: the effective config, the compressor's config, the shard sizes, versions and
  the start time; written first.
* ``metrics.csv``: one row per finished round, flushed as it is written (an interrupted or
  diverged run keeps a valid file up to its last finished round). Columns: ``METRICS``.
* ``summary.json``: final and best test accuracy, total uplink bytes, mean bits per entry,
  rounds done and why the run stopped, ``scale_fallbacks`` (uploaded layers whose scale rule
  handed over to another, e.g. ``co3-poly`` outside its beta range; per round in the
  ``scale_fallbacks`` column); written at the end (also after divergence).
* ``model.pt``: the server model's final ``state_dict``.
* ``clients.csv``: per round and client, what the wall clock needs (bytes up and down, compute,
  encode and straggler times, the clock's parts, late or not); ``co3cli.simulate.clock``
  (the clock's columns of ``metrics.csv``, the ``clock`` of ``summary.json``, the deadline).
* ``transmitted.h5`` (``dump_rounds``): a ``co3.gradients/1`` dump of client ``dump_client``'s
  uploads in those rounds, streams ``raw`` (g), ``corrected`` (v = g + gamma e) and ``decoded``
  (v_hat), step index = round; ``co3 fit`` / ``co3 report`` read it.
"""

from __future__ import annotations

import csv
import dataclasses
import json
import math
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np

from co3cli.errors import InputError
from co3cli.simulate.clock import CLOCK_COLUMNS, Clock, ClockLog, clock_fields
from co3cli.simulate.flconfig import FLConfig, check_config, lr_at, straggler_config
from co3cli.tasks.fltask import partition, task_shards  # noqa: F401 (partition: public here)

METRICS = (
    "round", "lr", "train_loss", "test_loss", "test_accuracy", "participants",
    "rejected_uploads", "uplink_bytes",
    "uplink_bits_per_entry", "cumulative_uplink_bytes", "entropy_bits_per_entry",
    "t_compute", "t_compress", "t_decompress", "t_server", "t_eval",
    "straggler_time", "straggler_recovered", "scale_fallbacks",
) + CLOCK_COLUMNS  # the wall clock (co3cli.simulate.clock)


# -- the run ---------------------------------------------------------------------------------------
class Diverged(InputError):
    """The training loss (or an upload) became NaN/Inf."""


@dataclass
class FLResult:
    out: str
    rounds_done: int
    final_accuracy: float | None
    best_accuracy: float | None
    total_uplink_bytes: int
    mean_bits_per_entry: float
    mean_entropy_bits_per_entry: float | None
    stopped: str
    seconds: float
    t_codec_fraction: float  # (compress + decompress) / compute time
    scale_fallbacks: int = 0  # uploads whose scale rule fell back (co3-poly outside its range)
    clock: dict[str, Any] | None = None  # wall clock, time to target (clock.ClockLog.summary)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def prepare_output(out: str | os.PathLike, overwrite: bool) -> Path:
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise InputError(f"output {out} exists and is not a folder")
    if (out / "metrics.csv").exists() and not overwrite:
        raise InputError(f"{out} already holds a run (metrics.csv); choose another folder or "
                         "pass --overwrite")
    return out


def run_fl(cfg: FLConfig, out: str | os.PathLike, *, progress: bool = False,
           overwrite: bool = False, on_round: Callable[[dict], None] | None = None,
           task: Any = None) -> FLResult:
    """Run ``cfg`` in this process; write ``config.json``, ``metrics.csv``, ``summary.json``
    and ``model.pt`` (the final server model's state_dict) into ``out``. ``task``: an
    ``FLTask`` or an entry function, instead of ``cfg.entry``/``cfg.task`` (config.json then
    describes it but cannot rerun it; ``cfg.entry`` can)."""
    import torch

    comp = check_config(cfg)
    out = prepare_output(out, overwrite)
    old_threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        sim = Simulation(cfg, comp, task)
        log = RunLog(sim, out, progress)
        try:
            for r in range(cfg.rounds):
                lr, who = lr_at(cfg, r), sim.participants()
                msgs = [sim.client_round(int(c), r, lr) for c in who]
                row = sim.server_round(r, lr, who, msgs)
                log.round(row, on_round)
        except Diverged as exc:
            log.stopped = str(exc)
        return log.finish()
    finally:
        torch.set_num_threads(old_threads)


@dataclass
class ClientMsg:
    """What one client sends in one round: the payloads (one per layer) and its figures."""

    client: int
    payloads: list[bytes]
    loss: float
    t_compute: float
    t_compress: float
    entropy_bits: float | None
    diverged: bool = False
    straggler_time: float = 0.0  # simulated time of its coded backward products (stragglers)
    recovered: float = math.nan  # fraction of their blocks recovered
    scale_fallbacks: int = 0  # layers whose scale rule fell back this round (Packet.scale_fallbacks)
    buffers: bytes = b""  # the model's buffers after the client's work (FLTask buffer rule)


class Simulation:
    """The seeded world of a run: data, shards, model, per-client and server state.

    Every process of the torchrun engine builds the same one from the config (same seed, same
    everything); the in-process engine uses one. ``client_round`` is a client's work,
    ``server_round`` the server's: decode every payload with the server's own per-client
    state, sum in client order (float64), average, step; both engines call them identically,
    which is what makes them agree bit for bit.
    """

    def __init__(self, cfg: FLConfig, comp, task: Any = None):
        import torch

        from co3cli.compressors import ErrorFeedback
        from co3cli.tasks.buffers import BufferState
        from co3cli.tasks.fltask import resolve_task

        self.cfg, self.comp = cfg, comp
        root = np.random.SeedSequence(cfg.seed)
        split_ss, part_ss, server_ss, client_ss = root.spawn(4)
        self.task = resolve_task(cfg.task, cfg.entry, cfg.seed, cfg.test_fraction,
                                 int(split_ss.generate_state(1)[0]), task)
        self.train, self.test = self.task.train, self.task.test
        self.shards = task_shards(self.task, cfg, np.random.default_rng(part_ss))
        self.model = self.task.build_model(cfg.seed)
        if not self.task.builtin:
            self.task.probe(self.model)
        self.buffers = BufferState(self.model, cfg.buffers, cfg.clients)
        named = [(n, p) for n, p in self.model.named_parameters() if p.requires_grad]
        self.named = named
        self.names = [n for n, _ in named]
        self.params = [p for _, p in named]
        self.numel = [p.numel() for p in self.params]
        self.entries = sum(self.numel)
        self.loss_fn = self.task.loss_fn
        self.batch_rng = [np.random.default_rng(s) for s in client_ss.spawn(cfg.clients)]
        self.comp_rng = [np.random.default_rng(s) for s in client_ss.spawn(cfg.clients)]
        self.server_rng = np.random.default_rng(server_ss)
        from co3cli.coding import row_length

        cols = [row_length(tuple(p.shape), p.numel()) for p in self.params]  # 2-D view rows
        self.send_state = [[{"cols": k} for k in cols] for _ in range(cfg.clients)]
        self.recv_state = [[{"cols": k} for k in cols] for _ in range(cfg.clients)]
        self.feedback = [ErrorFeedback(cfg.gamma) for _ in range(cfg.clients)]  # keys: layers
        self.momentum_buf = [torch.zeros_like(p) for p in self.params]
        self.dump_rows: dict[str, np.ndarray] | None = None  # client dump_client's last upload
        self.coded = None  # per client: the coded back-propagation (cfg.stragglers)
        if cfg.stragglers is not None:
            from co3cli.simulate.uep.train import CodedBackprop

            self.coded = [CodedBackprop(straggler_config(cfg, c)) for c in range(cfg.clients)]
        self.clock = Clock(clock_fields(cfg), cfg.clients, self.entries, cfg.local_steps, cfg.seed)
        self.warm_up()

    def warm_up(self) -> None:
        """Code and decode one throwaway gradient per layer before any timing starts, so that
        round 0 does not pay the one-time costs (numba cache loads, lazy imports, the first fit)
        inside ``t_compress``/``t_decompress``. Fresh states and a fresh generator: no seeded
        state of the run is touched, so every figure but those timings stays the same."""
        rng = np.random.default_rng(0)
        for p, state in zip(self.params, self.send_state[0]):
            v = rng.standard_normal(p.numel()).astype(np.float32)
            pkt = self.comp.compress(v, dict(state), np.random.default_rng(0))
            self.comp.decompress(pkt.payload, p.numel(), dict(state))

    def participants(self) -> np.ndarray:
        """This round's clients, sorted (the server's seeded draw; every process makes it)."""
        m = self.cfg.participation or self.cfg.clients
        if m < self.cfg.clients:
            return np.sort(self.server_rng.choice(self.cfg.clients, m, replace=False))
        return np.arange(self.cfg.clients)

    def client_round(self, c: int, r: int, lr: float) -> ClientMsg:
        cfg = self.cfg
        self.buffers.start(c)
        t0 = time.perf_counter()
        straggler_time, recovered = 0.0, math.nan
        if self.coded is not None:  # this client's backward products go through the code
            with self.coded[c].attach(self.model):
                grads, loss = _client_update(cfg, self.model, self.params, self.loss_fn,
                                             self.train, self.shards[c], self.batch_rng[c], lr)
            st = self.coded[c].step_stats()
            straggler_time, recovered = st["straggler_s"], st["recovered_fraction"]
            t0 += st["sim_overhead_s"]  # the simulated workers' time is straggler_time
        else:
            grads, loss = _client_update(cfg, self.model, self.params, self.loss_fn,
                                         self.train, self.shards[c], self.batch_rng[c], lr)
        t_compute = time.perf_counter() - t0
        blob = self.buffers.upload(c)
        if blob is None or not math.isfinite(loss) or not all(np.isfinite(g).all() for g in grads):
            return ClientMsg(c, [], loss, t_compute, 0.0, None, diverged=True)
        payloads, ent, ent_ok, rows, fallbacks = [], 0.0, True, {}, 0
        t_compress = 0.0
        feedback, dumping = self.feedback[c], c == cfg.dump_client and r in cfg.dump_rounds
        for j, g in enumerate(grads):
            v = feedback.correct(j, g)
            t0 = time.perf_counter()
            pkt = self.comp.compress(v, self.send_state[c][j], self.comp_rng[c])
            t_compress += time.perf_counter() - t0
            if dumping:  # before update: v may be the memory's buffer
                n = self.names[j]
                rows.update({f"raw/{n}": g, f"corrected/{n}": v.copy(), f"decoded/{n}": pkt.v_hat})
            feedback.update(j, v, pkt.v_hat)
            payloads.append(pkt.payload)
            fallbacks += pkt.scale_fallbacks
            if pkt.entropy_bits is None:
                ent_ok = False
            else:
                ent += pkt.entropy_bits
        if rows:
            self.dump_rows = rows
        return ClientMsg(c, payloads, loss, t_compute, t_compress, ent if ent_ok else None,
                         straggler_time=straggler_time, recovered=recovered,
                         scale_fallbacks=fallbacks, buffers=blob)

    def server_round(self, r: int, lr: float, who, msgs: list[ClientMsg]) -> dict[str, Any]:
        """Decode, average and apply one round's uploads; the metrics row (no eval yet)."""
        import torch

        bad = [m for m in msgs if m.diverged]
        if bad:
            m = bad[0]
            raise Diverged(f"round {r}: client {m.client} diverged (loss {m.loss:.4g}, lr "
                           f"{lr:.4g}); lower --lr; metrics.csv holds the rounds before it")
        cfg = self.cfg
        plan = self.clock.plan_msgs(r, msgs)  # the clients' times, the deadline's late ones
        sums = [np.zeros(k, np.float64) for k in self.numel]
        t0 = time.perf_counter()
        for m, late in zip(msgs, plan.late):  # client order; late: decoded (state), not summed
            for j, payload in enumerate(m.payloads):
                v_hat = self.comp.decompress(payload, self.numel[j], self.recv_state[m.client][j])
                if not late:
                    sums[j] += v_hat
        t_decompress = time.perf_counter() - t0
        n_on = len(msgs) - int(plan.late.sum())
        t0 = time.perf_counter()
        self.buffers.aggregate([m.buffers for m in msgs])
        step = lr if cfg.algorithm == "fedsgd" else cfg.server_lr
        with torch.no_grad():
            for j, p in enumerate(self.params):
                avg = torch.from_numpy((sums[j] / n_on).astype(np.float32)).view_as(p)
                buf = self.momentum_buf[j]
                buf.mul_(cfg.momentum).add_(avg)
                p.sub_(step * buf)
        t_server = time.perf_counter() - t0
        nbytes = sum(len(p) for m in msgs for p in m.payloads) + sum(len(m.buffers) for m in msgs)
        entries = self.entries * len(msgs)
        ent = [m.entropy_bits for m in msgs]
        return {
            **self.clock.finish(plan, t_decompress + t_server),
            "round": r, "lr": lr, "train_loss": float(np.mean([m.loss for m in msgs])),
            "test_loss": None, "test_accuracy": None, "participants": len(msgs),
            "rejected_uploads": 0,
            "uplink_bytes": nbytes, "uplink_bits_per_entry": 8.0 * nbytes / entries,
            "cumulative_uplink_bytes": None,
            "entropy_bits_per_entry": (sum(ent) / entries if None not in ent else None),
            "t_compute": sum(m.t_compute for m in msgs),
            "t_compress": sum(m.t_compress for m in msgs), "t_decompress": t_decompress,
            "t_server": t_server, "t_eval": 0.0,
            # clients work in parallel: the round waits for the slowest client's products
            "straggler_time": max(m.straggler_time for m in msgs),
            "scale_fallbacks": sum(m.scale_fallbacks for m in msgs),
            "straggler_recovered": (float(np.mean([m.recovered for m in msgs]))
                                    if self.coded is not None else None),
        }

    def evaluate(self) -> tuple[float, float]:
        return self.task.evaluate(self.model)

    def config_doc(self) -> dict[str, Any]:
        from co3cli.fileio import created_timestamp, versions

        return {
            "schema": "co3.simulate-fl/1", "config": self.cfg.to_dict(),
            "compressor": self.comp.config(), "model_parameters": self.entries,
            "layers": dict(zip(self.names, self.numel)),
            "shard_sizes": [int(s.size) for s in self.shards], "n_train": len(self.train),
            "task": self.task.describe(), "buffers": self.buffers.sizes(),
            "n_test": len(self.test.y), "versions": versions(), "created": created_timestamp(),
            "clock": self.clock.config(),
        }


def open_dump(sim: Simulation, out: Path, engine: str):
    """The ``transmitted.h5`` writer (streams raw, corrected, decoded), or None."""
    if not sim.cfg.dump_rounds:
        return None
    from co3cli.dump import StepWriter

    return StepWriter(
        out / "transmitted.h5",
        {f"{s}/{n}": tuple(p.shape) for s in ("raw", "corrected", "decoded") for n, p in sim.named},
        streams=["raw", "corrected", "decoded"],
        attrs={"source": f"co3 simulate fl ({engine})", "client": sim.cfg.dump_client,
               "config": json.dumps(sim.cfg.to_dict(), sort_keys=True),
               "compressor": json.dumps(sim.comp.config(), sort_keys=True)},
    )


def write_dump_row(writer, sim: Simulation, r: int, loss: float, lr: float) -> None:
    if writer is not None and sim.dump_rows:
        keys = [f"{s}/{n}" for s in ("raw", "corrected", "decoded") for n in sim.names]
        writer.write(r, {k: sim.dump_rows[k] for k in keys}, loss=loss, lr=lr)
        sim.dump_rows = None


STALE = ("metrics.csv", "summary.json", "model.pt", "transmitted.h5",
         "clients.csv")  # a run's output files


class RunLog:
    """The server's bookkeeping: config.json, metrics.csv (flushed per round), summary.json,
    model.pt, the dump of transmitted gradients (in-process engine), the progress bar."""

    def __init__(self, sim: Simulation, out: Path, progress: bool, engine: str = "in-process",
                 extra_config: dict[str, Any] | None = None):
        self.sim, self.out = sim, out
        self.t_start = time.perf_counter()
        out.mkdir(parents=True, exist_ok=True)
        for stale in STALE:  # torchrun: launch() cleared them; a client rank writes the dump
            if engine == "in-process" or stale != "transmitted.h5":
                (out / stale).unlink(missing_ok=True)
        doc = sim.config_doc()
        doc["engine"] = engine
        doc.update(extra_config or {})
        (out / "config.json").write_text(json.dumps(doc, indent=2) + "\n")
        self.writer = open_dump(sim, out, engine) if engine == "in-process" else None
        from co3cli.progress import progress_bar

        self.bar = progress_bar(progress, f"fl {sim.cfg.compressor}", total=sim.cfg.rounds,
                                unit="round", leave=False)
        self.cumulative = 0
        self.best = self.final = None
        self.bpe_sum = self.ent_sum = 0.0
        self.ent_ok = True
        self.t_compute = self.t_codec = 0.0
        self.fallbacks = 0
        self.clock = ClockLog(out, sim.cfg.target, sim.cfg.local_steps)
        self.rounds_done = 0
        self.stopped = "finished"
        self.csv_file = open(out / "metrics.csv", "w", newline="")
        self.csv = csv.writer(self.csv_file)
        self.csv.writerow(METRICS)
        self.csv_file.flush()

    def round(self, row: dict[str, Any], on_round=None) -> None:
        """Evaluate when due, write the row, update the totals."""
        sim, r = self.sim, row["round"]
        write_dump_row(self.writer, sim, r, row["train_loss"], row["lr"])
        if (r + 1) % sim.cfg.eval_every == 0 or r == sim.cfg.rounds - 1:
            t0 = time.perf_counter()
            row["test_loss"], row["test_accuracy"] = sim.evaluate()
            row["t_eval"] = time.perf_counter() - t0
            self.final = row["test_accuracy"]
            self.best = self.final if self.best is None else max(self.best, self.final)
        self.cumulative += row["uplink_bytes"]
        row["cumulative_uplink_bytes"] = self.cumulative
        self.bpe_sum += row["uplink_bits_per_entry"]
        if row["entropy_bits_per_entry"] is None:
            self.ent_ok = False
        else:
            self.ent_sum += row["entropy_bits_per_entry"]
        self.t_compute += row["t_compute"]
        self.t_codec += row["t_compress"] + row["t_decompress"]
        self.fallbacks += row["scale_fallbacks"]
        self.clock.round(row)
        self.csv.writerow(["" if row[k] is None else (f"{row[k]:.6g}" if isinstance(row[k], float)
                                                      else row[k]) for k in METRICS])
        self.csv_file.flush()
        self.rounds_done = r + 1
        if on_round is not None:
            on_round(row)
        if not self.bar.disable:  # the postfix first: a heartbeat line prints on update
            post = {"loss": f"{row['train_loss']:.3f}", "bpe": f"{row['uplink_bits_per_entry']:.3f}"}
            if self.final is not None:
                post["acc"] = f"{self.final:.4f}"
            self.bar.set_postfix(post, refresh=False)
        self.bar.update(1)

    def close(self) -> None:
        self.csv_file.close()
        self.clock.close()
        self.bar.close()
        if self.writer is not None:
            self.writer.close()

    def finish(self) -> FLResult:
        """Close, save the model and summary.json; raise Diverged if the run stopped early."""
        import torch

        self.close()
        torch.save(self.sim.model.state_dict(), self.out / "model.pt")
        n = self.rounds_done
        result = FLResult(
            out=str(self.out), rounds_done=n, final_accuracy=self.final,
            best_accuracy=self.best, total_uplink_bytes=self.cumulative,
            mean_bits_per_entry=self.bpe_sum / n if n else float("nan"),
            mean_entropy_bits_per_entry=(self.ent_sum / n if self.ent_ok and n else None),
            stopped=self.stopped, seconds=time.perf_counter() - self.t_start,
            t_codec_fraction=self.t_codec / self.t_compute if self.t_compute else float("nan"),
            scale_fallbacks=self.fallbacks, clock=self.clock.summary(),
        )
        doc = {k: (None if isinstance(v, float) and not math.isfinite(v) else v)
               for k, v in result.to_dict().items()}  # standard JSON: no NaN
        (self.out / "summary.json").write_text(json.dumps(doc, indent=2) + "\n")
        if self.stopped != "finished":
            raise Diverged(self.stopped)
        return result


def _client_update(cfg, model, params, loss_fn, train, shard, rng, lr):
    """FedSGD: the minibatch gradient; FedAvg: w - w_local after E steps. float32 arrays."""
    import torch

    def batch():
        idx = rng.choice(shard, size=cfg.batch_size, replace=shard.size < cfg.batch_size)
        t = torch.from_numpy(idx)
        return train.x[t], train.y[t]

    if cfg.algorithm == "fedsgd":
        x, y = batch()
        for p in params:
            p.grad = None
        loss = loss_fn(model(x), y)
        loss.backward()
        return [p.grad.detach().reshape(-1).numpy().copy() for p in params], float(loss.detach())
    start = [p.detach().clone() for p in params]
    losses = []
    for _ in range(cfg.local_steps):
        x, y = batch()
        for p in params:
            p.grad = None
        loss = loss_fn(model(x), y)
        loss.backward()
        losses.append(float(loss.detach()))
        with torch.no_grad():
            for p in params:
                p.sub_(lr * p.grad)
    with torch.no_grad():
        delta = [(w0 - p).reshape(-1).numpy().copy() for w0, p in zip(start, params)]
        for w0, p in zip(start, params):
            p.copy_(w0)
    return delta, float(np.mean(losses))
