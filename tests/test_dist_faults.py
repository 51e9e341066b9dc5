"""Faults in the co3 DDP hook and FSDP reduce-scatter, on 2 gloo ranks (tests/dist_ranks.py): a
corrupt payload, a rank that dies mid-step, ranks configured differently. Each ends, on every
rank still alive, with one named one-line error (never a hang past the process group's
timeout, set to 20 s here)."""

from __future__ import annotations

import os
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")

import dist_ranks  # noqa: E402
from dist_ranks import launch, warm_codec  # noqa: E402

from co3cli.ddp import CO3State, co3_hook, wire  # noqa: E402
from co3cli.errors import Co3Error  # noqa: E402


@pytest.fixture(autouse=True)
def _short_timeout(monkeypatch):
    monkeypatch.setattr(dist_ranks, "PG_TIMEOUT", timedelta(seconds=20))
    torch.set_num_threads(1)
    warm_codec()


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(12, 32), torch.nn.ReLU(), torch.nn.Linear(32, 3))


def _train(model, rank: int, steps: int) -> None:
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(steps):
        gen = torch.Generator().manual_seed(1000 * step + rank)
        x, y = torch.randn(16, 12, generator=gen), torch.randint(0, 3, (16,), generator=gen)
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()


def _error(fn) -> tuple[str, str] | None:
    """Run ``fn``; the name and message of the co3 error it raised (None if it did not)."""
    try:
        fn()
    except Co3Error as e:
        return type(e).__name__, str(e)
    return None


def _corrupt_from(rank: int, calls: int) -> None:
    """From its ``calls``-th frame on, this rank flips a byte of every payload it sends."""
    frame, count = wire.frame, [0]

    def corrupting(parts):
        out = bytearray(frame(parts))
        count[0] += 1
        if count[0] > calls:
            out[len(out) // 2] ^= 0x40
        return bytes(out)

    if dist_ranks.dist.get_rank() == rank:
        wire.frame = corrupting


def _ddp(**co3: Any):
    model = torch.nn.parallel.DistributedDataParallel(_model(), bucket_cap_mb=0.001)
    state = CO3State(None, **co3)
    model.register_comm_hook(state, co3_hook)
    return model


def _fsdp(**co3: Any):
    from torch.distributed.fsdp import fully_shard

    from co3cli.fsdp import CO3FSDPState, attach

    model = _model()
    for layer in model:
        if isinstance(layer, torch.nn.Linear):
            fully_shard(layer)
    fully_shard(model)
    attach(model, CO3FSDPState(**co3))
    return model


WRAP = {"ddp": _ddp, "fsdp": _fsdp}


def _scenario_corrupt(rank: int, world: int, out: Path, kind: str) -> Any:
    model = WRAP[kind]()
    _corrupt_from(1, 3)
    return _error(lambda: _train(model, rank, 4))


def _scenario_config(rank: int, world: int, out: Path, kind: str) -> Any:
    model = WRAP[kind](gamma=0.5 if rank == 1 else 0.9)
    return _error(lambda: _train(model, rank, 2))


def _scenario_die(rank: int, world: int, out: Path, kind: str) -> Any:
    """Rank 1 ends its process in the middle of step 2 (inside the co3 comm)."""
    model = WRAP[kind]()
    if rank == 1:
        count = [0]
        if kind == "ddp":
            import co3cli.ddp.hook as hook

            inner = hook._bucket_mean
            target, name = hook, "_bucket_mean"
        else:
            from co3cli.fsdp import CO3FSDPState

            inner = CO3FSDPState.reduce_scatter
            target, name = CO3FSDPState, "reduce_scatter"

        def dying(*args, **kwargs):
            count[0] += 1
            if count[0] == 3:
                os._exit(3)
            return inner(*args, **kwargs)

        setattr(target, name, dying)
    _train(model, rank, 4)  # rank 0: raises (the launcher records its traceback)
    return None


def _last_line(traceback: str) -> str:
    return traceback.strip().splitlines()[-1]


@pytest.mark.parametrize("kind", ["ddp", "fsdp"])
def test_a_corrupt_payload_is_named_on_every_rank(tmp_path, kind):
    results = launch(tmp_path, _scenario_corrupt, kind=kind)
    for r in results:
        assert r is not None, "no error raised"
        name, msg = r
        assert name == "PayloadChecksumError", r
        assert "payload from rank 1 failed its checksum" in msg and "\n" not in msg


@pytest.mark.parametrize("kind", ["ddp", "fsdp"])
def test_mismatched_configs_are_named_on_every_rank_at_the_first_step(tmp_path, kind):
    for r in launch(tmp_path, _scenario_config, kind=kind):
        assert r is not None and r[0] == "ConfigMismatchError", r
        assert "rank 1 has gamma=0.5, rank 0 has gamma=0.9" in r[1] and "\n" not in r[1]


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["ddp", "fsdp"])
def test_a_rank_that_dies_mid_step_ends_the_others_with_a_named_error(tmp_path, kind):
    tracebacks = launch(tmp_path, _scenario_die, expect_error=True, kind=kind)
    assert tracebacks[1] is None  # it left without a word (os._exit)
    last = _last_line(tracebacks[0])
    assert "PeerFailureError: co3" in last and "a collective failed on rank 0" in last, \
        tracebacks[0][-2000:]
