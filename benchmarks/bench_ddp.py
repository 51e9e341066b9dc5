"""co3's DDP hook against torch's fp16 and PowerSGD hooks: step time, bytes, accuracy, break-even.

    python benchmarks/bench_ddp.py [--models mlp resnet] [--worlds 2] [--warmup 5] [--steps 25]
                                   [--dtype float32|bfloat16|float16] [--hooks NAME ...]
                                   [--out benchmarks/results]

``--dtype``: the models' parameter (and so gradient bucket) dtype; ``--hooks``: a subset of the
hook names below (allreduce and fp16, the references, are always run). To compare against
another checkout of co3cli in the same way, run this script with ``PYTHONPATH=<that checkout>``.

(From a working tree, prefix ``PYTHONPATH=.``: the spawned ranks otherwise import the
installed co3cli.)

One launcher for every hook: W ranks started with ``torch.multiprocessing`` (spawn) on one
machine, gloo over a ``FileStore``, one torch thread per rank. Two models (seed 0): an MLP
784-2048-576-10 (2,793,674 parameters) and co3cli.tasks' ``mnist5k-resnet`` (ResNet-style,
BatchNorm, 1,228,394 parameters), trained on the task's mnist5k train split, batch 32 per rank
(each rank its own minibatches, the same sequence for every hook), SGD lr 0.05. Every hook
(allreduce, ``fp16_compress_hook``, PowerSGD rank 1/2/4, co3 fp8/fp4 with ans and ctx, fp4
with huffman) trains its own copy of the model, and the hooks are interleaved step by step in
a rotating order, so a change in machine load hits them alike. ``--warmup`` steps (DDP's
bucket rebuild, PowerSGD's start at iteration 2, numba compilation, co3's first table fits),
then ``--steps`` timed steps; step time = forward + backward (with the hook) + optimizer
step, rank 0's wall clock, median. After the same number of steps, each replica's held-out
loss and accuracy (1000 test samples), and a table that puts each co3 row next to the
PowerSGD rank of nearest bytes/step.

One DDP bucket for every hook (``bucket_cap_mb=25`` given explicitly, which also drops DDP's
1 MB first bucket): with DDP's default bucketing, PowerSGD deadlocks on gloo here (its chained
collectives were issued in different orders on different ranks: a size-mismatch abort or a
hang until the timeout); with one bucket it runs.

Bytes each rank puts on the wire per step (the message each rank contributes; link traffic
under a ring is 2(W-1)/W x that for allreduce and (W-1) x the padded payload for all-gather):

* allreduce (no hook): 4 x numel;  fp16_compress_hook: 2 x numel;
* PowerSGD (rank r, min_compression_rate 2, torch's rule): per gradient viewed as an
  n x m matrix (n = shape[0]), r' = min(n, m, r); if (n + m) r' x 2 < n m it is compressed and
  sends P (n r') and Q (m r') in float32, else its n m entries in float32 (biases are never
  compressed): 4 x sum(n r' + m r' | compressed) + 4 x sum(numel | uncompressed);
* co3: measured, ``CO3State.stats()``: payload bytes (per-parameter lengths + co3 payloads)
  plus the 8-byte int64 length per bucket; also the padded size the all-gather moves.

Break-even link bandwidth. On a link of B bit/s a step costs about the measured step time
(loopback, where moving the bytes is nearly free) plus 8 x ring bytes / B, so a compressor
beats a reference (fp16, or the uncompressed allreduce) while
B < B* = 8 x (ring bytes_ref - ring bytes) / (step time - step time_ref): above B* its compute
costs more than the bytes it saves. Printed per hook, with co3's codec throughput
(entries / (compress + decode time)).

Writes ``ddp.md`` and ``ddp.json``.
"""

import argparse
import copy
import datetime as _dt
import json
import os
import platform
import sys
import tempfile
import time
import traceback
from datetime import timedelta
from pathlib import Path
from typing import Any

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402

MODELS = {  # name -> (description, builder); both seeded 0
    "mlp": "MLP 784-2048-576-10 (ReLU)",
    "resnet": "ResNet-style mnist5k-resnet (co3cli.tasks: 32-64-128-256, one BasicBlock each, BN)",
}
MLP_LAYERS = (784, 2048, 576, 10)
BATCH = 32
LR = 0.05
EVAL_SAMPLES = 1000  # held-out samples (co3cli.tasks' test split) for loss and accuracy
# given explicitly, so DDP also drops its 1 MB first bucket: the whole model is one bucket for
# every hook. With DDP's default bucketing (25 MB cap and the 1 MB first bucket, i.e. two or
# more buckets here), PowerSGD's chained gloo collectives were issued in different orders on
# different ranks (size-mismatch abort or a hang until the timeout); with one bucket it runs.
BUCKET_CAP_MB = 25
HOOKS: list[tuple[str, dict[str, Any]]] = [
    ("allreduce", {}),
    ("fp16", {}),
    ("powersgd r=1", {"rank": 1}),
    ("powersgd r=2", {"rank": 2}),
    ("powersgd r=4", {"rank": 4}),
    ("co3 fp8-e5m2 ans", {"format": "fp8-e5m2"}),
    ("co3 fp8-e5m2 ctx", {"format": "fp8-e5m2", "coder": "ctx"}),
    ("co3 fp4-co3 ans", {"format": "fp4-co3"}),
    ("co3 fp4-co3 ctx", {"format": "fp4-co3", "coder": "ctx"}),
    ("co3 fp4-co3 huffman", {"format": "fp4-co3", "coder": "huffman"}),
    # several buckets, where overlapping the coding with the rest of backward could pay
    ("fp16 [2 MB buckets]", {"bucket_cap_mb": 2}),
    ("co3 fp4-co3 ans [2 MB buckets]", {"format": "fp4-co3", "bucket_cap_mb": 2}),
    ("co3 fp4-co3 ans [2 MB buckets, overlap]", {"format": "fp4-co3", "bucket_cap_mb": 2,
                                                 "overlap": True}),
]


def build_model(name: str) -> torch.nn.Module:
    if name == "resnet":
        from co3cli.tasks import build_model as task_model

        return task_model("mnist5k-resnet", seed=0)
    torch.manual_seed(0)
    layers: list[torch.nn.Module] = [torch.nn.Flatten()]
    for a, b in zip(MLP_LAYERS[:-1], MLP_LAYERS[1:]):
        layers += [torch.nn.Linear(a, b), torch.nn.ReLU()]
    return torch.nn.Sequential(*layers[:-1])


def powersgd_bytes(model: torch.nn.Module, rank: int, min_rate: float = 2.0) -> int:
    """Bytes one rank allreduces per PowerSGD step (see the module docstring)."""
    total = 0
    for p in model.parameters():
        n = p.shape[0]
        m = p.numel() // n
        r = min(n, m, rank)
        total += 4 * ((n + m) * r if (n + m) * r * min_rate < n * m else n * m)
    return total


def _register(ddp, name: str, params: dict[str, Any]):
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook

    from co3cli.ddp import CO3State, co3_hook

    if name.startswith("fp16"):
        ddp.register_comm_hook(None, default_hooks.fp16_compress_hook)
    elif name.startswith("powersgd"):
        state = powerSGD_hook.PowerSGDState(process_group=None,
                                            matrix_approximation_rank=params["rank"],
                                            start_powerSGD_iter=2)
        ddp.register_comm_hook(state, powerSGD_hook.powerSGD_hook)
    elif name.startswith("co3"):
        state = CO3State(None, format=params["format"], coder=params.get("coder", "ans"),
                         gamma=0.9, refit_every=100,
                         exchange="tensor", overlap=params.get("overlap", False))
        ddp.register_comm_hook(state, co3_hook)
        return state
    return None


class _Run:
    """One hook on one model: its own DDP copy (seed 0), optimizer, minibatch stream."""

    def __init__(self, rank: int, model_name: str, name: str, params: dict[str, Any],
                 dtype: torch.dtype = torch.float32):
        self.name, self.params, self.dtype = name, params, dtype
        self.model = build_model(model_name).to(dtype)
        self.ddp = torch.nn.parallel.DistributedDataParallel(
            self.model, bucket_cap_mb=params.get("bucket_cap_mb", BUCKET_CAP_MB))
        self.state = _register(self.ddp, name, params)
        self.opt = torch.optim.SGD(self.model.parameters(), lr=LR)
        self.rng = np.random.default_rng(1000 + rank)  # the same minibatches for every hook
        self.times: list[float] = []
        self.losses: list[float] = []
        self.co3_steps: list[dict[str, Any]] = []

    def step(self, x: torch.Tensor, y: torch.Tensor, timed: bool) -> None:
        idx = torch.from_numpy(self.rng.integers(0, len(y), BATCH))
        dist.barrier()
        t0 = time.perf_counter()
        self.opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(self.ddp(x[idx].to(self.dtype)).float(), y[idx])
        loss.backward()
        self.opt.step()
        t1 = time.perf_counter()
        self.losses.append(loss.item())
        if timed:
            self.times.append(t1 - t0)
            if self.state is not None:
                self.co3_steps.append({k: v for k, v in self.state.stats().items()
                                       if not isinstance(v, dict)})

    def result(self, model_name: str, world: int, test: tuple[torch.Tensor, torch.Tensor]
               ) -> dict[str, Any]:
        # BatchNorm with the test batch's statistics: after a few dozen steps the running
        # statistics are not settled yet (eval mode put every hook at chance); on a copy, so
        # the model's running statistics stay as trained
        with torch.no_grad():
            logits = copy.deepcopy(self.model).train()(test[0].to(self.dtype)).float()
        numel = sum(p.numel() for p in self.model.parameters())
        out: dict[str, Any] = {
            "model": model_name, "hook": self.name, "world": world, "numel": numel,
            "dtype": str(self.dtype).replace("torch.", ""),
            "median_step_ms": 1e3 * float(np.median(self.times)),
            "p90_step_ms": 1e3 * float(np.percentile(self.times, 90)),
            "train_loss": float(np.mean(self.losses[-5:])), "first_loss": self.losses[0],
            "test_loss": float(torch.nn.functional.cross_entropy(logits, test[1])),
            "test_accuracy": float((logits.argmax(1) == test[1]).float().mean()),
            "steps_trained": len(self.losses)}
        if self.name == "allreduce":
            out["bytes_per_step"] = self.dtype.itemsize * numel
        elif self.name.startswith("fp16"):
            out["bytes_per_step"] = 2 * numel
        elif self.name.startswith("powersgd"):
            out["bytes_per_step"] = powersgd_bytes(self.model, self.params["rank"])
        else:
            col = {k: np.array([s[k] for s in self.co3_steps]) for k in self.co3_steps[0]}
            out["bytes_per_step"] = float(col["bytes_last_step"].mean())
            out["padded_bytes_per_step"] = float(col["padded_bytes_last_step"].mean())
            out["bits_per_entry"] = float(8 * col["bytes_last_step"].mean() / numel)
            out["entropy_bits_per_entry"] = float(col["entropy_bits_per_entry_last"].mean())
            out["co3_ms"] = {k: 1e3 * float(np.median(col[k + "_last"]))
                             for k in ("t_host", "t_compress", "t_exchange", "t_decode")}
            out["resets"] = int(col["resets"][-1])
        return out


def run_model(rank: int, world: int, model_name: str, train, test, warmup: int,
              steps: int, hooks: list[str], dtype: str) -> list[dict[str, Any]]:
    """Every hook on ``model_name``, interleaved: step ``i`` of every hook, then step ``i + 1``
    (the order rotates each step), so a change of machine load hits every hook alike."""
    runs = [_Run(rank, model_name, name, params, getattr(torch, dtype))
            for name, params in HOOKS if name in hooks]
    for i in range(warmup + steps):
        k = i % len(runs)
        for run in runs[k:] + runs[:k]:
            run.step(*train, timed=i >= warmup)
    return [run.result(model_name, world, test) for run in runs]


def worker(rank: int, world: int, store_path: str, out_path: str, models: list[str],
           warmup: int, steps: int, hooks: list[str], dtype: str) -> None:
    torch.set_num_threads(1)
    from co3cli.tasks import load_task_data

    try:
        dist.init_process_group("gloo", store=dist.FileStore(store_path, world), rank=rank,
                                world_size=world, timeout=timedelta(seconds=300))
        train_ds, test_ds = load_task_data("mnist5k-resnet")
        train = (torch.as_tensor(train_ds.x), torch.as_tensor(train_ds.y))
        test = (torch.as_tensor(test_ds.x[:EVAL_SAMPLES]),
                torch.as_tensor(test_ds.y[:EVAL_SAMPLES]))
        results = []
        for model_name in models:
            rows = run_model(rank, world, model_name, train, test, warmup, steps, hooks, dtype)
            results += rows
            if rank == 0:
                for r in rows:
                    print(f"  W={world} {model_name} {r['hook']}: "
                          f"{r['median_step_ms']:.1f} ms", flush=True)
        if rank == 0:
            Path(out_path).write_text(json.dumps(results))
    except BaseException:
        traceback.print_exc()
        raise
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


def launch(world: int, models: list[str], warmup: int, steps: int, hooks: list[str],
           dtype: str = "float32") -> list[dict[str, Any]]:
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "results.json")
        mp.start_processes(worker, args=(world, os.path.join(tmp, "store"), out, models, warmup,
                                         steps, hooks, dtype),
                           nprocs=world, join=True, start_method="spawn")
        return json.loads(Path(out).read_text())


def ring_bytes(r: dict[str, Any]) -> float:
    """Bytes one rank sends per step under a ring: 2(W-1)/W x the message for allreduce-type
    hooks, (W-1) x the padded payload for co3's all-gather."""
    w = r["world"]
    if r["hook"].startswith("co3"):
        return (w - 1) * r["padded_bytes_per_step"]
    return 2 * (w - 1) / w * r["bytes_per_step"]


def break_even(r: dict[str, Any], ref: dict[str, Any]) -> float | None:
    """Link bandwidth (bit/s) above which ``r`` is slower than ``ref``: with step time
    t + 8 b / B on a link of B bit/s, r pays while B < 8 (b_ref - b) / (t - t_ref).
    ``inf``: r is faster anyway (pays at any bandwidth); ``None``: r sends no fewer bytes."""
    db = ring_bytes(ref) - ring_bytes(r)
    dt = (r["median_step_ms"] - ref["median_step_ms"]) / 1e3
    if db <= 0:
        return None
    return float("inf") if dt <= 0 else 8 * db / dt


def _fmt_bw(b: float | None) -> str:
    if b is None:
        return "never"
    if b == float("inf"):
        return "any"
    return f"{b / 1e9:.2f} Gbit/s" if b >= 1e9 else f"{b / 1e6:.0f} Mbit/s"


def _quality(r: dict[str, Any]) -> str:
    return f"{r['train_loss']:.3f} / {r['test_loss']:.3f}, {100 * r['test_accuracy']:.1f} %"


def write_results(rows: list[dict[str, Any]], out: Path, header: dict[str, Any]) -> None:
    refs = {(r["model"], r["world"], r["hook"]): r for r in rows if r["hook"] in ("fp16",
                                                                             "allreduce")}
    for r in rows:
        fp16, ar = refs[r["model"], r["world"], "fp16"], refs[r["model"], r["world"], "allreduce"]
        r["bytes_ratio_to_fp16"] = r["bytes_per_step"] / fp16["bytes_per_step"]
        r["time_ratio_to_fp16"] = r["median_step_ms"] / fp16["median_step_ms"]
        r["ring_bytes_per_step"] = ring_bytes(r)
        r["break_even_vs_fp16_bit_s"] = break_even(r, fp16)
        r["break_even_vs_allreduce_bit_s"] = break_even(r, ar)
        if r["hook"].startswith("co3"):
            c = r["co3_ms"]
            r["codec_mentries_s"] = r["numel"] / (1e3 * (c["t_compress"] + c["t_decode"]))
            r["target_bytes_met"] = r["bytes_ratio_to_fp16"] <= (0.1 if "fp4" in r["hook"]
                                                                 else 0.25)
            r["target_time_met"] = r["time_ratio_to_fp16"] <= (1.1 if "fp4" in r["hook"]
                                                               else 1.3)
    (out / "ddp.json").write_text(json.dumps({"header": header, "rows": rows}, indent=1))
    lines = [
        "# co3 DDP hook vs torch's fp16 and PowerSGD hooks (co3cli.ddp)", "",
        f"`{header['command']}` on {header['date']}, {header['machine']}, Python "
        f"{header['python']}, torch {header['torch']}, co3cli {header['co3cli']}, gloo on CPU, "
        f"one torch thread per rank, {header['wall_s']:.0f} s in all; model parameters and "
        f"gradient buckets in {header.get('dtype', 'float32')}.", "",
        "Models (seed 0): " + "; ".join(f"`{m}` = {MODELS[m]}" for m in header["models"]) +
        f". Data: co3cli.tasks' mnist5k-resnet train split (batch {BATCH} per rank, each rank "
        f"its own minibatches, the same for every hook); held-out loss and accuracy on "
        f"{EVAL_SAMPLES} test samples after {header['warmup']} + {header['steps']} steps "
        f"(rank 0's replica; BatchNorm with the test batch's statistics), and the mean "
        f"training loss of the last 5 steps (rank 0, the same minibatches for every hook). SGD lr {LR}. Every hook trains its own copy of the model and the "
        "hooks are **interleaved** step by step (rotating order), so load changes hit all "
        "alike; step = forward + backward (with the hook) + optimizer step, rank 0 wall clock, "
        "median over the timed steps. One DDP bucket for every hook (`bucket_cap_mb=25` given "
        "explicitly): **PowerSGD deadlocks on gloo with DDP's default bucketing here** (two "
        "buckets: its chained collectives were issued in different orders on the ranks: a "
        "size-mismatch abort or a hang until the timeout); one bucket works. co3: gamma 0.9, "
        "refit every 100 steps, the synchronous hook unless `overlap` (`CO3State(overlap=True)`); "
        "the `[2 MB buckets]` rows use `bucket_cap_mb=2` (several buckets). PowerSGD: start_powerSGD_iter 2, error "
        "feedback and warm start on (torch defaults).", "",
        "Bytes/step: what each rank contributes (allreduce 4 x numel, fp16 2 x numel, PowerSGD "
        "4 x (P + Q elements of compressed gradients + numel of the rest, torch's "
        "min_compression_rate 2 rule), co3 measured payload + 8-byte length per bucket). "
        "Ring traffic/rank: 2(W-1)/W x that for allreduce-type hooks, (W-1) x co3's padded "
        "payload for its all-gather.", "",
        "Break-even link bandwidth B*: modelling a step on a link of B bit/s as the measured "
        "step time (here over loopback, where the transfer is nearly free) plus 8 x ring bytes "
        "/ B, a compressor beats the reference while B < B* = 8 x (ring bytes_ref - ring "
        "bytes) / (step time - step time_ref). `any`: faster than the reference even at "
        "loopback speed; `never`: sends no fewer bytes. Above B*, its compute costs more than "
        "the bytes it saves.", "",
        "Targets (issue 15, co3 rows): fp4 step time <= 1.1 x fp16's and bytes <= 0.1 x; fp8 "
        "step time <= 1.3 x.", "",
    ]
    for model in header["models"]:
        mrows = [r for r in rows if r["model"] == model]
        lines += [f"## {model}: {MODELS[model]}, {mrows[0]['numel']:,} parameters", "",
                  "| W | hook | median step ms | x fp16 time | bytes/step/rank | x fp16 bytes | "
                  "bits/entry (entropy) | ring traffic/rank | B* vs fp16 | B* vs allreduce | "
                  "train loss (last 5) | test loss | test acc | target time / bytes |",
                  "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
        for r in mrows:
            if r["hook"].startswith("co3"):
                bpe = f"{r['bits_per_entry']:.2f} ({r['entropy_bits_per_entry']:.2f})"
                tgt = (f"{'yes' if r['target_time_met'] else 'no'} / "
                       f"{'yes' if r['target_bytes_met'] else 'no'}")
            else:
                bpe, tgt = f"{8 * r['bytes_per_step'] / r['numel']:.2f}", "-"
            be16 = "-" if r["hook"].startswith("fp16") else _fmt_bw(r["break_even_vs_fp16_bit_s"])
            bear = "-" if r["hook"] == "allreduce" else _fmt_bw(r["break_even_vs_allreduce_bit_s"])
            lines.append(f"| {r['world']} | {r['hook']} | {r['median_step_ms']:.1f} | "
                         f"{r['time_ratio_to_fp16']:.2f} | {r['bytes_per_step']:,.0f} | "
                         f"{r['bytes_ratio_to_fp16']:.3f} | {bpe} | {r['ring_bytes_per_step']:,.0f}"
                         f" | {be16} | {bear} | {r['train_loss']:.3f} | {r['test_loss']:.3f} | "
                         f"{100 * r['test_accuracy']:.1f} % | {tgt} |")
        lines += ["", "At (roughly) equal bytes: each co3 row next to the PowerSGD rank whose "
                  "bytes/step are nearest (same steps, same minibatches):", "",
                  "| W | co3 | bytes | train / test loss, test acc | PowerSGD | bytes | "
                  "train / test loss, test acc |",
                  "|---:|---|---:|---:|---|---:|---:|"]
        psgd = [r for r in mrows if r["hook"].startswith("powersgd")]
        for r in mrows:
            if not r["hook"].startswith("co3") or not psgd:
                continue
            q = min(psgd, key=lambda p: abs(np.log(p["bytes_per_step"] / r["bytes_per_step"])))
            lines.append(f"| {r['world']} | {r['hook']} | {r['bytes_per_step']:,.0f} | "
                         f"{_quality(r)} | {q['hook']} | {q['bytes_per_step']:,.0f} | "
                         f"{_quality(q)} |")
        lines += ["", "Where co3's time goes (rank 0, median ms per step: host copies, compress = "
                  "error feedback + quantize + table + entropy-code, exchange = the two "
                  "all-gathers incl. waiting for the slowest rank, decode = W-1 decodes + sum; "
                  "codec throughput = entries / (compress + decode)):", "",
                  "| W | hook | host | compress | exchange | decode | codec M entries/s |",
                  "|---:|---|---:|---:|---:|---:|---:|"]
        for r in mrows:
            if "co3_ms" in r:
                c = r["co3_ms"]
                lines.append(f"| {r['world']} | {r['hook']} | {c['t_host']:.1f} | "
                             f"{c['t_compress']:.1f} | {c['t_exchange']:.1f} | "
                             f"{c['t_decode']:.1f} | {r['codec_mentries_s']:.0f} |")
        lines.append("")
    lines += header.get("notes", [])
    (out / "ddp.md").write_text("\n".join(lines) + "\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--worlds", type=int, nargs="+", default=[2])
    ap.add_argument("--models", nargs="+", choices=sorted(MODELS), default=["mlp", "resnet"])
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--steps", type=int, default=25)
    ap.add_argument("--dtype", choices=["float32", "bfloat16", "float16"], default="float32")
    ap.add_argument("--hooks", nargs="+", choices=[h for h, _ in HOOKS],
                    default=[h for h, _ in HOOKS])
    ap.add_argument("--out", type=Path, default=Path(__file__).parent / "results")
    ap.add_argument("--from-json", type=Path, help=argparse.SUPPRESS)  # re-render saved rows
    args = ap.parse_args()
    import co3cli

    t0 = time.time()
    load_at_start = os.getloadavg()[0]
    rows = json.loads(args.from_json.read_text()) if args.from_json else []
    for w in [] if args.from_json else args.worlds:
        print(f"world size {w}", flush=True)
        hooks = sorted(set(args.hooks) | {"allreduce", "fp16"})
        rows += launch(w, args.models, args.warmup, args.steps, hooks, args.dtype)
        (Path(tempfile.gettempdir()) / "bench_ddp_rows.json").write_text(json.dumps(rows))
    load_at_end = os.getloadavg()[0]
    header = {
        "command": "python benchmarks/bench_ddp.py " + " ".join(sys.argv[1:]),
        "date": _dt.date.today().isoformat(),
        "machine": f"{platform.machine()} ({os.cpu_count()} cores)",
        "python": platform.python_version(), "torch": torch.__version__,
        "co3cli": co3cli.__version__, "warmup": args.warmup, "steps": args.steps,
        "models": args.models, "wall_s": round(time.time() - t0, 1), "dtype": args.dtype,
        "load_average_at_start": load_at_start, "load_average_at_end": load_at_end,
    }
    header["notes"] = [f"Load average (1 min): {load_at_start:.2f} at the start, "
                       f"{load_at_end:.2f} at the end (on {os.cpu_count()} cores)."]
    if any(w > (os.cpu_count() or 1) for w in args.worlds):
        header["notes"] += [f"Oversubscribed: W={max(args.worlds)} ranks share "
                           f"{os.cpu_count()} cores, so those step times include waiting for a "
                           "core; compare hooks within a world size, not across."]
    args.out.mkdir(parents=True, exist_ok=True)
    write_results(rows, args.out, header)
    print((args.out / "ddp.md").read_text())


if __name__ == "__main__":
    main()
