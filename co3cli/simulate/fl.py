"""``co3 simulate fl``: federated training where every upload really goes through a compressor.

::

    server model w --broadcast--> N clients (own data shard each; m of N take part per round)
      client c:  g = grad on a minibatch (FedSGD)  or  w - w_local after E SGD steps (FedAvg)
                 per layer: v = g + gamma * e;  packet = compress(v);  e = v - v_hat
      bytes ---> server: v_hat = decompress(bytes)  (its own per-client state), average
                 w <- w - lr * (momentum buffer of the average)

Bits are counted from the payload bytes (``len(payload)``), never estimated. Everything random
(the data split, the shards, the initial weights, the minibatches, client sampling, stochastic
compressors) comes from ``seed``: the same config gives the same run.

Outputs in the run folder (``run_fl(config, out)``):

* ``config.json``: the effective config, the compressor's config, the shard sizes, versions and
  the start time; written first.
* ``metrics.csv``: one row per finished round, flushed as it is written (an interrupted or
  diverged run keeps a valid file up to its last finished round). Columns: ``METRICS``.
* ``summary.json``: final and best test accuracy, total uplink bytes, mean bits per entry,
  rounds done and why the run stopped; written at the end (also after divergence).
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
import platform
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np

from co3cli import __version__
from co3cli.errors import InputError

ALGORITHMS = ("fedsgd", "fedavg")
PARTITIONS = ("iid", "dirichlet", "shards")
SCHEDULES = ("constant", "cosine", "step")
METRICS = (
    "round", "lr", "train_loss", "test_loss", "test_accuracy", "participants", "uplink_bytes",
    "uplink_bits_per_entry", "cumulative_uplink_bytes", "entropy_bits_per_entry",
    "t_compute", "t_compress", "t_decompress", "t_server", "t_eval",
)


@dataclass
class FLConfig:
    """One federated run. ``lr`` is the server step for FedSGD and the clients' for FedAvg."""

    task: str = "mnist5k-mlp"
    clients: int = 10
    rounds: int = 200
    algorithm: str = "fedsgd"
    local_steps: int = 1  # FedAvg: E local SGD steps per round
    batch_size: int = 64
    lr: float = 0.1
    server_lr: float = 1.0  # FedAvg: server step on the averaged model delta
    momentum: float = 0.0  # server momentum
    lr_schedule: str = "constant"  # constant | cosine (to 0 at the last round) | step (x0.1 at 1/2, 3/4)
    partition: str = "iid"
    alpha: float = 0.3  # Dirichlet concentration (partition="dirichlet")
    shards_per_client: int = 2  # partition="shards"
    participation: int | None = None  # m clients per round (None: all)
    compressor: str = "none"
    compressor_params: dict[str, Any] = field(default_factory=dict)
    gamma: float = 0.0  # error-feedback memory decay
    eval_every: int = 10
    test_fraction: float = 0.2
    seed: int = 0
    dump_rounds: tuple[int, ...] = ()
    dump_client: int = 0

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["dump_rounds"] = list(self.dump_rounds)
        return d


def _int(name: str, v: Any, lo: int) -> int:
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < lo:
        raise InputError(f"{name}={v!r} must be an integer >= {lo}")
    return int(v)


def _real(name: str, v: Any, lo: float, hi: float = math.inf, lo_open: bool = False) -> float:
    try:
        x = float(v)
    except (TypeError, ValueError):
        raise InputError(f"{name}={v!r} is not a number") from None
    if not math.isfinite(x) or x < lo or x > hi or (lo_open and x == lo):
        rng = f"({lo:g}, {hi:g}]" if lo_open else f"[{lo:g}, {hi:g}]"
        raise InputError(f"{name}={v!r} must be in {rng}")
    return x


def check_config(cfg: FLConfig):
    """Validate ``cfg`` (InputError naming the field); return the configured compressor."""
    from co3cli.capture import get_task
    from co3cli.simulate.compressors import get_compressor

    get_task(cfg.task)
    _int("clients", cfg.clients, 1)
    _int("rounds", cfg.rounds, 1)
    for name, allowed in (("algorithm", ALGORITHMS), ("partition", PARTITIONS),
                          ("lr_schedule", SCHEDULES)):
        if getattr(cfg, name) not in allowed:
            raise InputError(f"{name}={getattr(cfg, name)!r} is not one of {', '.join(allowed)}")
    _int("local_steps", cfg.local_steps, 1)
    _int("batch_size", cfg.batch_size, 1)
    _real("lr", cfg.lr, 0.0, lo_open=True)
    _real("server_lr", cfg.server_lr, 0.0, lo_open=True)
    _real("momentum", cfg.momentum, 0.0, 0.999)
    _real("alpha", cfg.alpha, 0.0, lo_open=True)
    _int("shards_per_client", cfg.shards_per_client, 1)
    if cfg.participation is not None:
        _int("participation", cfg.participation, 1)
        if cfg.participation > cfg.clients:
            raise InputError(f"participation={cfg.participation} exceeds clients={cfg.clients}")
    _real("gamma", cfg.gamma, 0.0, 1.0)
    _int("eval_every", cfg.eval_every, 1)
    _real("test_fraction", cfg.test_fraction, 0.0, 0.9, lo_open=True)
    _int("seed", cfg.seed, 0)
    for r in cfg.dump_rounds:
        _int("dump_rounds entry", r, 0)
    _int("dump_client", cfg.dump_client, 0)
    if cfg.dump_client >= cfg.clients:
        raise InputError(f"dump_client={cfg.dump_client} must be < clients={cfg.clients}")
    return get_compressor(cfg.compressor, **cfg.compressor_params)


# -- data split ------------------------------------------------------------------------------------
def partition(labels: np.ndarray, cfg: FLConfig, rng: np.random.Generator) -> list[np.ndarray]:
    """Sorted train indices of each client (every client gets at least one example)."""
    n, k = len(labels), cfg.clients
    if k > n:
        raise InputError(f"clients={k} exceeds the {n} training examples of {cfg.task}")
    if cfg.partition == "iid":
        parts = np.array_split(rng.permutation(n), k)
    elif cfg.partition == "shards":
        nshards = k * cfg.shards_per_client
        if nshards > n:
            raise InputError(f"clients x shards_per_client = {nshards} exceeds {n} examples")
        order = np.argsort(labels, kind="stable")
        shards = np.array_split(order, nshards)
        pick = rng.permutation(nshards).reshape(k, cfg.shards_per_client)
        parts = [np.concatenate([shards[s] for s in row]) for row in pick]
    else:  # dirichlet: per class, shares drawn from Dir(alpha) over the clients
        parts_l: list[list[np.ndarray]] = [[] for _ in range(k)]
        for c in np.unique(labels):
            idx = rng.permutation(np.flatnonzero(labels == c))
            share = rng.dirichlet(np.full(k, cfg.alpha))
            cuts = (np.cumsum(share)[:-1] * len(idx)).astype(np.int64)
            for j, piece in enumerate(np.split(idx, cuts)):
                parts_l[j].append(piece)
        parts = [np.concatenate(p) for p in parts_l]
        empty = [j for j, p in enumerate(parts) if p.size == 0]
        for j in empty:  # give an empty client one example of the largest client
            donor = int(np.argmax([p.size for p in parts]))
            parts[j], parts[donor] = parts[donor][-1:], parts[donor][:-1]
    return [np.sort(p) for p in parts]


def lr_at(cfg: FLConfig, r: int) -> float:
    if cfg.lr_schedule == "cosine":
        return cfg.lr * 0.5 * (1 + math.cos(math.pi * r / cfg.rounds))
    if cfg.lr_schedule == "step":
        return cfg.lr * (0.1 if r >= cfg.rounds // 2 else 1.0) * (0.1 if r >= 3 * cfg.rounds // 4 else 1.0)
    return cfg.lr


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

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _versions() -> dict[str, str]:
    import torch

    return {"co3cli": __version__, "torch": torch.__version__, "numpy": np.__version__,
            "python": platform.python_version()}


def _evaluate(model, x, y, batch: int = 1024) -> tuple[float, float]:
    import torch

    model.eval()
    loss = correct = 0.0
    with torch.no_grad():
        for i in range(0, len(y), batch):
            out = model(x[i:i + batch])
            loss += float(torch.nn.functional.cross_entropy(out, y[i:i + batch], reduction="sum"))
            correct += float((out.argmax(1) == y[i:i + batch]).sum())
    model.train()
    return loss / len(y), correct / len(y)


def run_fl(cfg: FLConfig, out: str | os.PathLike, *, progress: bool = False,
           overwrite: bool = False, on_round: Callable[[dict], None] | None = None) -> FLResult:
    """Run ``cfg``; write ``config.json``, ``metrics.csv``, ``summary.json`` into ``out``."""
    import torch

    from co3cli.capture import build_model, load_task_data

    comp = check_config(cfg)
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise InputError(f"output {out} exists and is not a folder")
    if (out / "metrics.csv").exists() and not overwrite:
        raise InputError(f"{out} already holds a run (metrics.csv); choose another folder or "
                         "pass --overwrite")
    old_threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return _run(cfg, comp, out, progress, on_round, build_model, load_task_data)
    finally:
        torch.set_num_threads(old_threads)


def _run(cfg, comp, out, progress, on_round, build_model, load_task_data) -> FLResult:
    import torch

    from co3cli.fileio import created_timestamp

    t_start = time.perf_counter()
    root = np.random.SeedSequence(cfg.seed)
    split_ss, part_ss, server_ss, client_ss = root.spawn(4)
    train, test = load_task_data(cfg.task, cfg.test_fraction, int(split_ss.generate_state(1)[0]))
    labels = train.y.numpy()
    shards = partition(labels, cfg, np.random.default_rng(part_ss))
    model = build_model(cfg.task, cfg.seed)
    named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    names = [n for n, _ in named]
    params = [p for _, p in named]
    numel = [p.numel() for p in params]
    entries_per_client = sum(numel)
    loss_fn = torch.nn.CrossEntropyLoss()
    batch_rng = [np.random.default_rng(s) for s in client_ss.spawn(cfg.clients)]
    comp_rng = [np.random.default_rng(s) for s in client_ss.spawn(cfg.clients)]
    server_rng = np.random.default_rng(server_ss)
    send_state = [[{} for _ in params] for _ in range(cfg.clients)]
    recv_state = [[{} for _ in params] for _ in range(cfg.clients)]
    memory: list[list[np.ndarray | None]] = [[None] * len(params) for _ in range(cfg.clients)]
    momentum_buf = [torch.zeros_like(p) for p in params]

    out.mkdir(parents=True, exist_ok=True)
    for stale in ("metrics.csv", "summary.json", "transmitted.h5"):
        (out / stale).unlink(missing_ok=True)
    config_doc = {
        "schema": "co3.simulate-fl/1", "config": cfg.to_dict(), "compressor": comp.config(),
        "model_parameters": entries_per_client, "layers": dict(zip(names, numel)),
        "shard_sizes": [int(s.size) for s in shards], "n_train": len(labels),
        "n_test": len(test.y), "versions": _versions(), "created": created_timestamp(),
    }
    (out / "config.json").write_text(json.dumps(config_doc, indent=2) + "\n")

    writer = None
    dump_rounds = set(int(r) for r in cfg.dump_rounds)
    if dump_rounds:
        from co3cli.dump import StepWriter

        dump_keys = [f"{s}/{n}" for s in ("raw", "corrected", "decoded") for n in names]
        writer = StepWriter(
            out / "transmitted.h5",
            {f"{s}/{n}": tuple(p.shape) for s in ("raw", "corrected", "decoded") for n, p in named},
            streams=["raw", "corrected", "decoded"],
            attrs={"source": "co3 simulate fl", "client": cfg.dump_client,
                   "config": json.dumps(config_doc["config"], sort_keys=True),
                   "compressor": json.dumps(comp.config(), sort_keys=True)},
        )

    bar = None
    if progress and sys.stderr.isatty():
        from tqdm import tqdm

        bar = tqdm(total=cfg.rounds, desc=f"fl {cfg.compressor}", unit="round", leave=False)
    m = cfg.participation or cfg.clients
    cumulative = 0
    best = final = None
    bpe_sum = ent_sum = 0.0
    ent_ok = True
    t_compute_all = t_codec_all = 0.0
    rounds_done = 0
    stopped = "finished"
    csv_file = open(out / "metrics.csv", "w", newline="")
    try:
        csv_w = csv.writer(csv_file)
        csv_w.writerow(METRICS)
        csv_file.flush()
        for r in range(cfg.rounds):
            lr = lr_at(cfg, r)
            who = (np.sort(server_rng.choice(cfg.clients, m, replace=False))
                   if m < cfg.clients else np.arange(cfg.clients))
            sums = [np.zeros(k, np.float64) for k in numel]
            t = dict(compute=0.0, compress=0.0, decompress=0.0, server=0.0, eval=0.0)
            nbytes = 0
            ent_bits = 0.0
            losses = []
            for c in who:
                c = int(c)
                t0 = time.perf_counter()
                grads, loss = _client_update(cfg, model, params, loss_fn, train, shards[c],
                                             batch_rng[c], lr)
                t["compute"] += time.perf_counter() - t0
                if not math.isfinite(loss) or not all(np.isfinite(g).all() for g in grads):
                    raise Diverged(f"round {r}: client {c} diverged (loss {loss:.4g}, lr {lr:.4g});"
                                   " lower --lr; metrics.csv holds the rounds before it")
                losses.append(loss)
                rows = {}
                for j, g in enumerate(grads):
                    e = memory[c][j]
                    v = g if (e is None or cfg.gamma == 0.0) else g + np.float32(cfg.gamma) * e
                    t0 = time.perf_counter()
                    pkt = comp.compress(v, send_state[c][j], comp_rng[c])
                    t1 = time.perf_counter()
                    g_hat = comp.decompress(pkt.payload, numel[j], recv_state[c][j])
                    t["decompress"] += time.perf_counter() - t1
                    t["compress"] += t1 - t0
                    memory[c][j] = v - pkt.v_hat
                    nbytes += len(pkt.payload)
                    if pkt.entropy_bits is None:
                        ent_ok = False
                    else:
                        ent_bits += pkt.entropy_bits
                    sums[j] += g_hat
                    if writer is not None and r in dump_rounds and c == cfg.dump_client:
                        rows.update({f"raw/{names[j]}": g, f"corrected/{names[j]}": v,
                                     f"decoded/{names[j]}": g_hat})
                if rows:
                    writer.write(r, {k: rows[k] for k in dump_keys}, loss=loss, lr=lr)
            t0 = time.perf_counter()
            step = lr if cfg.algorithm == "fedsgd" else cfg.server_lr
            with torch.no_grad():
                for j, p in enumerate(params):
                    avg = torch.from_numpy((sums[j] / len(who)).astype(np.float32)).view_as(p)
                    buf = momentum_buf[j]
                    buf.mul_(cfg.momentum).add_(avg)
                    p.sub_(step * buf)
            t["server"] = time.perf_counter() - t0
            test_loss = acc = None
            if (r + 1) % cfg.eval_every == 0 or r == cfg.rounds - 1:
                t0 = time.perf_counter()
                test_loss, acc = _evaluate(model, test.x, test.y)
                t["eval"] = time.perf_counter() - t0
                final = acc
                best = acc if best is None else max(best, acc)
            entries = entries_per_client * len(who)
            bpe = 8.0 * nbytes / entries
            cumulative += nbytes
            bpe_sum += bpe
            ent_sum += ent_bits / entries
            t_compute_all += t["compute"]
            t_codec_all += t["compress"] + t["decompress"]
            row = {"round": r, "lr": lr, "train_loss": float(np.mean(losses)),
                   "test_loss": test_loss, "test_accuracy": acc, "participants": len(who),
                   "uplink_bytes": nbytes, "uplink_bits_per_entry": bpe,
                   "cumulative_uplink_bytes": cumulative,
                   "entropy_bits_per_entry": ent_bits / entries if ent_ok else None,
                   **{f"t_{k}": v for k, v in t.items()}}
            csv_w.writerow(["" if row[k] is None else (f"{row[k]:.6g}" if isinstance(row[k], float)
                                                       else row[k]) for k in METRICS])
            csv_file.flush()
            rounds_done = r + 1
            if on_round is not None:
                on_round(row)
            if bar is not None:
                bar.update(1)
                post = {"loss": f"{row['train_loss']:.3f}", "bpe": f"{bpe:.3f}"}
                if final is not None:
                    post["acc"] = f"{final:.4f}"
                bar.set_postfix(post, refresh=False)
    except Diverged as exc:
        stopped = str(exc)
    finally:
        csv_file.close()
        if bar is not None:
            bar.close()
        if writer is not None:
            writer.close()
    result = FLResult(
        out=str(out), rounds_done=rounds_done, final_accuracy=final, best_accuracy=best,
        total_uplink_bytes=cumulative,
        mean_bits_per_entry=bpe_sum / rounds_done if rounds_done else float("nan"),
        mean_entropy_bits_per_entry=(ent_sum / rounds_done if ent_ok and rounds_done else None),
        stopped=stopped, seconds=time.perf_counter() - t_start,
        t_codec_fraction=t_codec_all / t_compute_all if t_compute_all else float("nan"),
    )
    (out / "summary.json").write_text(json.dumps(result.to_dict(), indent=2) + "\n")
    if stopped != "finished":
        raise Diverged(stopped)
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


# -- sweeps ----------------------------------------------------------------------------------------
SWEEP_COLUMNS = ("run", "final_accuracy", "best_accuracy", "mean_bits_per_entry",
                 "mean_entropy_bits_per_entry", "total_uplink_bytes", "rounds_done", "stopped",
                 "t_codec_fraction")


def sweep_configs(base: FLConfig, spec: str) -> list[tuple[str, FLConfig]]:
    """``"gamma=0,0.5,0.7"`` (a config field or a compressor parameter) -> [(label, config)]."""
    if "=" not in spec:
        raise InputError(f"--sweep {spec!r} must look like name=v1,v2,...")
    key, _, values = spec.partition("=")
    key = key.strip().replace("-", "_")
    vals = [v.strip() for v in values.split(",") if v.strip()]
    if not vals:
        raise InputError(f"--sweep {spec!r} lists no values")
    fields = {f.name: f for f in dataclasses.fields(FLConfig)}
    out = []
    for v in vals:
        label = f"{key}={v}"
        if key in fields and key not in ("compressor_params", "dump_rounds"):
            cur = getattr(base, key)
            try:
                conv = (float(v) if isinstance(cur, float) else int(v)
                        if isinstance(cur, int) and not isinstance(cur, bool) else v)
            except ValueError:
                raise InputError(f"--sweep {key}: {v!r} is not a number") from None
            out.append((label, dataclasses.replace(base, **{key: conv})))
        else:
            params = dict(base.compressor_params)
            params[key] = parse_value(v)
            out.append((label, dataclasses.replace(base, compressor_params=params)))
    return out


def parse_value(v: str) -> Any:
    """'4' -> 4, '0.5' -> 0.5, else the string."""
    for conv in (int, float):
        try:
            return conv(v)
        except ValueError:
            pass
    return v


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
        rows.append({"run": label, **{k: res[k] for k in SWEEP_COLUMNS[1:]}})
        with open(out / "sweep.csv", "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=SWEEP_COLUMNS)
            w.writeheader()
            w.writerows(rows)
    return rows


def read_metrics(run: str | os.PathLike) -> dict[str, np.ndarray]:
    """metrics.csv of a run folder as float columns (empty cells: NaN)."""
    path = Path(run) / "metrics.csv"
    try:
        with open(path, newline="") as f:
            rows = list(csv.DictReader(f))
    except OSError as exc:
        raise InputError(f"cannot read {path}: {exc.strerror or exc}") from None
    if not rows or rows[0].keys() != set(METRICS):
        raise InputError(f"{path} is not a co3 simulate fl metrics file (or has no round)")
    try:
        return {k: np.array([float(r[k]) if r[k] != "" else np.nan for r in rows]) for k in METRICS}
    except ValueError as exc:
        raise InputError(f"{path}: bad value ({exc})") from None


def plot_runs(runs: list[str], out_png: str | os.PathLike, labels: list[str] | None = None) -> None:
    """Accuracy vs round, accuracy vs cumulative uplink bits, bits/entry vs round (one PNG)."""
    data = [read_metrics(r) for r in runs]
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise InputError("co3 simulate plot needs matplotlib: pip install 'co3cli[plot]'") \
            from None
    labels = labels or [Path(r).name for r in runs]
    fig, ax = plt.subplots(1, 3, figsize=(15, 4.2))
    for d, lab in zip(data, labels):
        ok = ~np.isnan(d["test_accuracy"])
        ax[0].plot(d["round"][ok], 100 * d["test_accuracy"][ok], label=lab)
        ax[1].plot(8 * d["cumulative_uplink_bytes"][ok], 100 * d["test_accuracy"][ok], label=lab)
        ax[2].plot(d["round"], d["uplink_bits_per_entry"], label=lab)
    ax[0].set(xlabel="round", ylabel="test accuracy (%)")
    ax[1].set(xlabel="cumulative uplink bits", ylabel="test accuracy (%)", xscale="log")
    ax[2].set(xlabel="round", ylabel="uplink bits / entry", yscale="log")
    for a in ax:
        a.grid(alpha=0.3)
    ax[2].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out_png, dpi=110, format="png")
    plt.close(fig)
