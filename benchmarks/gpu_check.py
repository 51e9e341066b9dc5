"""The GPU check of co3's device path (co3cli.compressors.device), for a session that has a GPU.

    PYTHONPATH=. python benchmarks/gpu_check.py [--numel 4000000] [--steps 20] [--cpu]

Without CUDA it says so and exits 0 (``--cpu`` runs the same checks on CPU tensors: the torch
ops against the numba path, and their speeds, which is why CPU buckets keep the numba path).
With CUDA, in well under 5 minutes:

1. Equality against the CPU path: the torch quantizer on CUDA against the numba kernel on every
   hard value of every named format (grid values, midpoints and their float32 neighbours) at
   several scales: the symbols must be identical. Then 6 steps of co3 + error feedback
   (fp8-e5m2, fp4-co3; float32 and bf16 input) on CUDA against the CPU path: payload bytes,
   v_hat and memories compared, and the first step where the scale differs is reported (the
   rms is a cuBLAS reduction, see the module docstring of co3cli.compressors.device).
2. Step times: a single-process DDP job (NCCL, world 1) on the MLP 784-2048-576-10, fp32 and
   bf16, with torch's fp16_compress_hook and with co3_hook fp8-e5m2 / fp4-co3 (median of
   ``--steps`` steps after 3 warm-up steps, ``torch.cuda.synchronize`` around each), and the
   time of one co3 step on a ``--numel`` tensor on the GPU against the numba path on CPU.

Prints one table; exits 1 if a symbol differs.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402

from co3cli.compressors import ErrorFeedback, get_compressor  # noqa: E402
from co3cli.compressors.device import TorchCO3, quantize_t  # noqa: E402
from co3cli.formats import FORMATS, get_grid  # noqa: E402
from co3cli.quantize import quantize  # noqa: E402


def hard_values(grid, scale: np.float32) -> np.ndarray:
    m = grid.values[grid.K:].astype(np.float64)
    y = np.concatenate([m, (m[1:] + m[:-1]) / 2, m[-1] * np.array([1.5, 1e6])]).astype(np.float32)
    y = np.concatenate([y, np.nextafter(y, np.float32(np.inf)), np.nextafter(y, np.float32(0))])
    y = np.concatenate([y, -y, [0.0, -0.0, 1e-45, 1e-39]]).astype(np.float32) / scale
    return y[np.isfinite(y * scale)].astype(np.float32)


def check_symbols(device: str) -> int:
    bad = 0
    for fmt in FORMATS.ids():
        grid = get_grid(fmt)
        for scale in (1.0, 0.37, 1e-3, 4096.0):
            s = np.float32(scale)
            x = hard_values(grid, s)
            out = torch.empty(x.size, dtype=torch.int32, device=device)
            quantize_t(torch.from_numpy(x).to(device), grid, s, out)
            bad += int((out.cpu().numpy().astype(np.uint16) != quantize(x, grid, s)).sum())
    return bad


def check_steps(device: str, numel: int) -> list[str]:
    rows = []
    for fmt in ("fp8-e5m2", "fp4-co3"):
        for dtype in (torch.float32, torch.bfloat16):
            rng = np.random.default_rng(0)
            comp = get_compressor("co3", format=fmt, refit_every=3)
            dev = TorchCO3(get_compressor("co3", format=fmt, refit_every=3), 0.9, "torch")
            fb, sa, sb = ErrorFeedback(0.9), {}, {}
            same, first_diff = 0, None
            for step in range(6):
                g = torch.from_numpy(rng.standard_normal(numel).astype(np.float32)).to(dtype)
                want = fb.step(0, g.float().numpy(), comp, sa, np.random.default_rng(0))
                got = dev.step(0, g.to(device), sb)
                ok = got.payload == want.payload and \
                    np.array_equal(got.v_hat.cpu().numpy(), want.v_hat) and \
                    np.array_equal(dev.memory(0), fb.memory(0))
                same += ok
                if not ok and first_diff is None:
                    first_diff = step
            rows.append(f"| {fmt} | {str(dtype)[6:]} | {same}/6 | "
                        f"{'-' if first_diff is None else first_diff} |")
    return rows


def time_codec(device: str, numel: int, fmt: str) -> tuple[float, float]:
    """Seconds of one co3 step (after warm-up): on ``device`` and on the CPU numba path."""
    g = torch.randn(numel)
    out = []
    for where, path in ((device, "torch"), ("cpu", "auto")):
        dev = TorchCO3(get_compressor("co3", format=fmt), 0.9, path)
        x, st = g.to(where), {}
        for _ in range(2):
            dev.step(0, x, st)
        ts = []
        for _ in range(5):
            if where == "cuda":
                torch.cuda.synchronize()
            t0 = time.perf_counter()
            dev.step(0, x, st)
            ts.append(time.perf_counter() - t0)
        out.append(float(np.median(ts)))
    return out[0], out[1]


def time_ddp(steps: int) -> list[str]:
    import torch.distributed as dist
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

    from co3cli.ddp import CO3State, co3_hook

    store = tempfile.mktemp(prefix="gpu_check_store")
    dist.init_process_group("nccl", store=dist.FileStore(store, 1), rank=0, world_size=1)
    torch.cuda.set_device(0)
    rows = []
    try:
        for dtype in (torch.float32, torch.bfloat16):
            base = None
            for name in ("fp16", "co3 fp8-e5m2", "co3 fp4-co3"):
                torch.manual_seed(0)
                model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(784, 2048),
                                            torch.nn.ReLU(), torch.nn.Linear(2048, 576),
                                            torch.nn.ReLU(), torch.nn.Linear(576, 10))
                ddp = torch.nn.parallel.DistributedDataParallel(model.to("cuda", dtype))
                if name == "fp16":
                    ddp.register_comm_hook(None, default_hooks.fp16_compress_hook)
                else:
                    ddp.register_comm_hook(CO3State(None, format=name.split()[1]), co3_hook)
                opt = torch.optim.SGD(ddp.parameters(), lr=0.01)
                x = torch.randn(32, 784, device="cuda", dtype=dtype)
                y = torch.randint(0, 10, (32,), device="cuda")
                ts = []
                for i in range(3 + steps):
                    torch.cuda.synchronize()
                    t0 = time.perf_counter()
                    opt.zero_grad()
                    torch.nn.functional.cross_entropy(ddp(x).float(), y).backward()
                    opt.step()
                    torch.cuda.synchronize()
                    if i >= 3:
                        ts.append(time.perf_counter() - t0)
                ms = 1e3 * float(np.median(ts))
                base = base or ms
                rows.append(f"| {str(dtype)[6:]} | {name} | {ms:.2f} | {ms / base:.2f} |")
    finally:
        dist.destroy_process_group()
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--numel", type=int, default=4_000_000)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--cpu", action="store_true", help="run the checks on CPU tensors")
    args = ap.parse_args()
    torch.set_num_threads(1)
    if not args.cpu and not torch.cuda.is_available():
        print("gpu_check: no CUDA device here (torch.cuda.is_available() is False); nothing "
              "checked (--cpu runs the checks on CPU tensors)")
        return 0
    device = "cpu" if args.cpu else "cuda"
    print(f"gpu_check on {torch.cuda.get_device_name(0) if device == 'cuda' else 'CPU'}, "
          f"torch {torch.__version__}")
    bad = check_symbols(device)
    print(f"symbols of every hard value, every named format, 4 scales: {bad} differ")
    print("\n| format | input | steps bit-identical to the CPU path | first differing step |")
    print("|---|---|---:|---:|")
    print("\n".join(check_steps(device, min(args.numel, 1 << 20))))
    print(f"\n| format | one co3 step on {args.numel:,} entries: {device} torch path (ms) "
          "| CPU numba path (ms) |\n|---|---:|---:|")
    for fmt in ("fp8-e5m2", "fp4-co3"):
        t_dev, t_cpu = time_codec(device, args.numel, fmt)
        print(f"| {fmt} | {1e3 * t_dev:.1f} | {1e3 * t_cpu:.1f} |")
    if device == "cuda":
        print("\n| model dtype | hook (DDP, NCCL, world 1) | median step ms | x fp16 |")
        print("|---|---|---:|---:|")
        print("\n".join(time_ddp(args.steps)))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
