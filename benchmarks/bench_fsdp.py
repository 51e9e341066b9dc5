"""co3's FSDP2 reduce-scatter against FSDP2's own: step time and bytes per step on gloo.

    python benchmarks/bench_fsdp.py [--world 2] [--warmup 3] [--steps 7] [--out benchmarks/results]

W ranks (``torch.multiprocessing`` spawn, gloo over a ``FileStore``, one torch thread per rank)
each build three copies of the same MLP 784-1536-1024-10 (2,789,898 parameters, seed 0), every
Linear and the root wrapped in ``fully_shard``: uncompressed FSDP (float32 reduce-scatter), co3
fp8-e5m2 + ans and co3 fp4-co3 + ans (:mod:`co3cli.fsdp`, gamma 0.9, refit every 100).
Synthetic batches (64 x 784, seeded per rank and step), SGD lr 0.01. ``--warmup`` steps per
variant, then ``--steps`` rounds in which every variant takes one step in turn (interleaved, so
machine noise hits all alike). Step time = forward + backward (with the reduce-scatters) +
optimizer step, rank 0's wall clock after a barrier, and rank 0's process CPU time; medians.

Bytes per step each rank sends in the reduce-scatters (the all-gathers are the same for all
variants and not counted): uncompressed (W-1)/W x 4 x numel (padded); co3: measured
(``CO3FSDPState.stats()``: payloads + an 8-byte length per peer and call).

Writes ``fsdp.md``.
"""

import argparse
import datetime as _dt
import os
import platform
import statistics
import sys
import tempfile
import time
import traceback
from datetime import timedelta
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from co3cli.fsdp import CO3FSDPState, attach  # noqa: E402

VARIANTS = [("fsdp (float32)", None), ("co3 fp8-e5m2 ans", "fp8-e5m2"),
            ("co3 fp4-co3 ans", "fp4-co3")]


def build(fmt):
    from torch.distributed.fsdp import fully_shard

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(784, 1536), torch.nn.ReLU(),
                                torch.nn.Linear(1536, 1024), torch.nn.ReLU(),
                                torch.nn.Linear(1024, 10))
    numel = sum(p.numel() for p in model.parameters())
    for layer in model:
        if isinstance(layer, torch.nn.Linear):
            fully_shard(layer)
    fully_shard(model)
    state = None
    if fmt is not None:
        state = CO3FSDPState(format=fmt, coder="ans", gamma=0.9, refit_every=100)
        attach(model, state)
    return model, torch.optim.SGD(model.parameters(), lr=0.01), state, numel


def step(model, opt, rank, i):
    gen = torch.Generator().manual_seed(1000 * i + rank)
    x = torch.randn(64, 784, generator=gen)
    y = torch.randint(0, 10, (64,), generator=gen)
    opt.zero_grad()
    loss = torch.nn.functional.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    return float(loss.detach())


def worker(rank, world, store_path, out_path, warmup, steps):
    torch.set_num_threads(1)
    try:
        dist.init_process_group("gloo", store=dist.FileStore(store_path, world), rank=rank,
                                world_size=world, timeout=timedelta(seconds=120))
        runs = [(name, *build(fmt)) for name, fmt in VARIANTS]
        for _, model, opt, _, _ in runs:
            for i in range(warmup):
                step(model, opt, rank, i)
        wall = {name: [] for name, *_ in runs}
        cpu = {name: [] for name, *_ in runs}
        sent = {name: [] for name, *_ in runs}
        loss = {}
        for i in range(warmup, warmup + steps):
            for name, model, opt, state, numel in runs:
                before = state.stats()["bytes_total"] if state else 0
                dist.barrier()
                t0, c0 = time.perf_counter(), time.process_time()
                loss[name] = step(model, opt, rank, i)
                wall[name].append(time.perf_counter() - t0)
                cpu[name].append(time.process_time() - c0)
                padded = -(-numel // world) * world  # FSDP pads every parameter; close enough
                sent[name].append(state.stats()["bytes_total"] - before if state
                                  else 4 * padded * (world - 1) // world)
        if rank == 0:
            rows = [(name, statistics.median(wall[name]) * 1e3, statistics.median(cpu[name]) * 1e3,
                     statistics.median(sent[name]), loss[name], runs[0][4]) for name in wall]
            torch.save(rows, out_path)
        dist.destroy_process_group()
    except BaseException:
        traceback.print_exc()
        raise


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--world", type=int, default=2)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--steps", type=int, default=7)
    ap.add_argument("--out", type=Path, default=Path(__file__).parent / "results")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "rows.pt")
        mp.start_processes(worker, args=(args.world, os.path.join(tmp, "store"), out, args.warmup,
                                         args.steps), nprocs=args.world, start_method="spawn")
        rows = torch.load(out, weights_only=False)
    base_ms, base_bytes = rows[0][1], rows[0][3]
    lines = [f"# FSDP2 reduce-scatter: co3 vs uncompressed ({args.world} gloo ranks)", "",
             f"{_dt.datetime.now(_dt.timezone.utc):%Y-%m-%d %H:%M} UTC, torch {torch.__version__}, "
             f"{platform.processor() or platform.machine()}, load {os.getloadavg()[0]:.1f} "
             f"(uptime, 1 min), MLP {rows[0][5]:,} parameters, batch 64/rank, "
             f"{args.warmup} warm-up steps, median of {args.steps} interleaved steps.", "",
             "| variant | step ms (wall) | x fsdp | step ms (CPU) | bytes/step/rank | x fsdp "
             "| last loss |", "|---|---|---|---|---|---|---|"]
    for name, ms, cpu_ms, nbytes, loss, _ in rows:
        lines.append(f"| {name} | {ms:.1f} | {ms / base_ms:.2f} | {cpu_ms:.1f} | {nbytes:,.0f} | "
                     f"{nbytes / base_bytes:.3f} | {loss:.4f} |")
    text = "\n".join(lines) + "\n"
    print(text)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "fsdp.md").write_text(text)


if __name__ == "__main__":
    main()
