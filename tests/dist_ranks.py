"""Run a function on gloo ranks in child processes (FileStore rendezvous), for the DDP, FSDP and
framework tests: each rank's result comes back through a file; a rank that fails sends its
traceback; a rank that hangs past the join timeout is killed and reported (no process is left).

The environment a launcher (torchrun, ``accelerate launch``) would set is set in each child, so
Lightning and Accelerate see an externally launched job; the process group is initialised here
(they use it as it is).
"""

from __future__ import annotations

import os
import traceback
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any, Callable

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

WORLD = 2
JOIN_TIMEOUT_S = 180
PG_TIMEOUT = timedelta(seconds=60)


def _worker(fn: Callable[..., Any], rank: int, world: int, store: str, out: str, tag: str,
            kwargs: dict[str, Any]) -> None:
    code = 0
    try:
        torch.set_num_threads(1)
        os.environ.update({"RANK": str(rank), "LOCAL_RANK": str(rank), "NODE_RANK": "0",
                           "WORLD_SIZE": str(world), "LOCAL_WORLD_SIZE": str(world),
                           "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29555",
                           "OMP_NUM_THREADS": "1"})
        dist.init_process_group("gloo", store=dist.FileStore(store, world), rank=rank,
                                world_size=world, timeout=PG_TIMEOUT)
        try:
            result = fn(rank, world, Path(out), **kwargs)
        except BaseException:
            # a rank that failed reports and exits at once: tearing its process group down
            # can wait on a peer that failed too (a test expecting the error on every rank
            # then hung past the join timeout)
            (Path(out) / f"{tag}-{rank}.err").write_text(traceback.format_exc())
            os._exit(1)
        dist.destroy_process_group()
        torch.save(result, Path(out) / f"{tag}-{rank}.pt")
    except BaseException:
        (Path(out) / f"{tag}-{rank}.err").write_text(traceback.format_exc())
        code = 1
    os._exit(code)  # a forked child must not run the parent's (pytest's) exit handlers


def warm_codec() -> None:
    """Compile the coders' numba kernels in the parent, so that forked ranks inherit them."""
    import numpy as np

    from co3cli.compressors import get_compressor

    rng = np.random.default_rng(0)
    for fmt, coder in (("fp8-e5m2", "ans"), ("fp4-co3", "ans"), ("fp8-e5m2", "huffman")):
        comp = get_compressor("co3", format=fmt, coder=coder)
        v = rng.standard_normal(256).astype(np.float32)
        comp.decompress(comp.compress(v, {}, rng).payload, v.size, {})


def launch(tmp_path: Path, fn: Callable[..., Any], world: int = WORLD, expect_error: bool = False,
           **kwargs: Any) -> list[Any]:
    """``fn(rank, world, tmp_path, **kwargs)`` on every rank; their results in rank order
    (with ``expect_error``: their tracebacks, None for a rank that did not fail)."""
    ctx = mp.get_context("fork" if "fork" in mp.get_all_start_methods() else "spawn")
    tag = f"{fn.__name__}-{uuid.uuid4().hex[:8]}"
    store = str(tmp_path / f"store-{tag}")
    procs = [ctx.Process(target=_worker, args=(fn, r, world, store, str(tmp_path), tag, kwargs))
             for r in range(world)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(JOIN_TIMEOUT_S)
    hung = [p for p in procs if p.is_alive()]
    for p in hung:
        p.kill()
        p.join(5)
    assert not hung, f"{fn.__name__}: {len(hung)} rank(s) hung past {JOIN_TIMEOUT_S} s"
    errs = [tmp_path / f"{tag}-{r}.err" for r in range(world)]
    if expect_error:
        return [e.read_text() if e.exists() else None for e in errs]
    failed = [e.read_text() for e in errs if e.exists()]
    assert not failed, "\n".join(failed)
    return [torch.load(tmp_path / f"{tag}-{r}.pt", weights_only=False) for r in range(world)]
