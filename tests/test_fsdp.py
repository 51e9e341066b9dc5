"""co3cli.fsdp: the co3 reduce-scatter under FSDP2 ``fully_shard`` on 2 and 4 gloo ranks.

Ranks run in forked child processes (FileStore rendezvous) with a join timeout and a process
group timeout; hung ranks are killed, so a failure is reported instead of hanging.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import torch.distributed as dist

from co3cli.errors import InputError, StateMismatchError
from co3cli.fsdp import CO3FSDPState, CO3ReduceScatter, attach
from dist_ranks import launch, warm_codec



# ---------------------------------------------------------------------- in the ranks
def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(12, 64), torch.nn.ReLU(), torch.nn.Linear(64, 32),
                               torch.nn.ReLU(), torch.nn.Linear(32, 3))


def _batch(rank: int, step: int) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(1000 * step + rank)
    x = torch.randn(32, 12, generator=gen)
    return x, (x[:, 0] > 0).long() + (x[:, 1] > 0).long()


def _sharded(state: CO3FSDPState | None) -> torch.nn.Module:
    from torch.distributed.fsdp import fully_shard

    model = _model()
    for layer in model:
        if isinstance(layer, torch.nn.Linear):
            fully_shard(layer)
    fully_shard(model)
    if state is not None:
        attach(model, state)
    return model


def _train(model, rank: int, steps: range, lr: float = 0.5) -> float:
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    loss = torch.zeros(())
    for step in steps:
        x, y = _batch(rank, step)
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
    mean = loss.detach().clone()
    dist.all_reduce(mean)
    return float(mean) / dist.get_world_size()


def _full(model) -> np.ndarray:
    """Every parameter, gathered in full (the same on every rank if the shards agree)."""
    return torch.cat([p.full_tensor().detach().reshape(-1) for p in model.parameters()]).numpy()


def _local(model) -> list[torch.Tensor]:
    return [p.to_local().detach().clone() for p in model.parameters()]


def _scenario_train(rank: int, world: int, out: Path, steps: int) -> dict[str, Any]:
    plain = _sharded(None)
    loss_plain = _train(plain, rank, range(steps))
    state = CO3FSDPState(format="fp8-e5m2", coder="ans", gamma=0.9, refit_every=5)
    co3 = _sharded(state)
    loss_co3 = _train(co3, rank, range(steps))
    fp4_state = CO3FSDPState(format="fp4-co3", coder="ans", gamma=0.9, refit_every=5)
    fp4 = _sharded(fp4_state)
    loss_fp4 = _train(fp4, rank, range(steps))
    return {"plain": loss_plain, "co3": loss_co3, "fp4": loss_fp4, "full": _full(co3),
            "stats": state.stats(), "initial": _train(_sharded(None), rank, range(1), lr=0.0)}


def _scenario_resume(rank: int, world: int, out: Path, n: int, m: int,
                     phase: str) -> dict[str, Any]:
    state = CO3FSDPState(format="fp4-co3", coder="ans", gamma=0.9, refit_every=3)
    model = _sharded(state)
    ckpt = out / f"ckpt-{rank}.pt"
    if phase == "whole":
        _train(model, rank, range(n + m))
    elif phase == "first":
        _train(model, rank, range(n))
        torch.save({"params": _local(model), "co3": state.state_dict()}, ckpt)
    else:  # "second": fresh processes restore and continue
        sd = torch.load(ckpt, weights_only=False)
        with torch.no_grad():
            for p, t in zip(model.parameters(), sd["params"]):
                p.to_local().copy_(t)
        state.load_state_dict(sd["co3"])
        _train(model, rank, range(n, n + m))
    return {"full": _full(model), "stats": state.stats()}


def _scenario_bad(rank: int, world: int, out: Path) -> dict[str, Any]:
    """Rank 1 uses another format: every rank gets ConfigMismatchError at the first step."""
    fmt = "fp4-co3" if rank == 1 else "fp8-e5m2"
    model = _sharded(CO3FSDPState(format=fmt))
    result: dict[str, Any] = {}
    try:
        _train(model, rank, range(1))
    except InputError as e:
        result["mismatch"] = (type(e).__name__, str(e))
    state = CO3FSDPState(format="fp8-e5m2")
    sd = state.state_dict()
    sd["rank"] = 1 - rank
    # one reduce-scatter by hand: close to the exact one, each rank's shard from its own row
    gen = torch.Generator().manual_seed(rank)
    x = torch.randn(world * 100, generator=gen) * (1 + torch.arange(world).repeat_interleave(100))
    exact, co3 = torch.empty(100), torch.empty(100)
    dist.reduce_scatter_tensor(exact, x.clone(), op=dist.ReduceOp.AVG)
    CO3ReduceScatter(state, 0, (60, 40))(co3, x, dist.group.WORLD, dist.ReduceOp.AVG)
    result["direct_rel_err"] = float((co3 - exact).norm() / exact.norm())
    result["direct_bytes"] = state.stats()["bytes_total"]
    try:
        state.load_state_dict(sd)
    except StateMismatchError as e:
        result["wrong_rank"] = str(e)
    return result


SCENARIOS = {"train": _scenario_train, "resume": _scenario_resume, "bad": _scenario_bad}


def _launch(tmp_path: Path, world: int, scenario: str, **kwargs: Any) -> list[dict[str, Any]]:
    """The scenario on ``world`` forked gloo ranks (tests/dist_ranks.py: join timeout, no
    process left, a failing rank's traceback in the assertion)."""
    return launch(tmp_path, SCENARIOS[scenario], world=world, **kwargs)


@pytest.fixture(scope="module", autouse=True)
def _warm_codec():
    """Compile the coders' numba kernels once in the parent so forked ranks inherit them."""
    torch.set_num_threads(1)
    warm_codec()


def _check_training(results: list[dict[str, Any]], world: int) -> None:
    r0 = results[0]
    assert r0["plain"] < 0.9 * r0["initial"]  # it learns
    for name in ("co3", "fp4"):
        assert abs(r0[name] - r0["plain"]) <= 0.05 * r0["plain"], (name, r0)
    for r in results[1:]:  # every rank holds the same full parameters
        assert np.array_equal(r["full"], r0["full"])
    for r in results:
        st = r["stats"]
        assert st["calls"] > 0 and st["bytes_total"] > 0
        assert st["bits_per_entry_mean"] < 16  # fp8 plus tables, well under float32


# ---------------------------------------------------------------------- tests
def test_two_ranks_follow_uncompressed_fsdp_and_agree(tmp_path):
    _check_training(_launch(tmp_path, 2, "train", steps=12), 2)


@pytest.mark.slow
def test_four_ranks_follow_uncompressed_fsdp_and_agree(tmp_path):
    _check_training(_launch(tmp_path, 4, "train", steps=25), 4)


@pytest.mark.slow
@pytest.mark.parametrize("world", [2, 4])
def test_resumed_run_is_bit_identical(tmp_path, world):
    whole = _launch(tmp_path, world, "resume", n=4, m=4, phase="whole")
    _launch(tmp_path, world, "resume", n=4, m=4, phase="first")
    second = _launch(tmp_path, world, "resume", n=4, m=4, phase="second")
    for a, b in zip(whole, second):
        assert np.array_equal(a["full"], b["full"])
        assert a["stats"]["bytes_total"] == b["stats"]["bytes_total"]


def test_mismatched_config_and_wrong_rank_state_are_named_errors(tmp_path):
    results = _launch(tmp_path, 2, "bad")
    for rank, r in enumerate(results):
        name, msg = r["mismatch"]
        assert name == "ConfigMismatchError" and "\n" not in msg
        assert "format='fp4-co3'" in msg and "format='fp8-e5m2'" in msg
        assert r["wrong_rank"] == f"co3 FSDP state of rank {1 - rank} loaded on rank {rank}"
        assert 0 < r["direct_rel_err"] < 0.1  # fp8-e5m2: a few % of quantization error
        assert r["direct_bytes"] > 0  # (the first payload carries its tables)


@pytest.mark.parametrize("kwargs, match", [
    ({"format": "fp9"}, "fp9"),
    ({"coder": "zip"}, "coder 'zip'"),
    ({"gamma": 2.0}, "gamma"),
    ({"refit_every": 0}, "refit_every"),
    ({"path": "gpu"}, "path 'gpu'"),
])
def test_bad_parameters_raise_input_error(kwargs, match):
    with pytest.raises(InputError, match=match):
        CO3FSDPState(**kwargs)


def test_state_dict_of_another_world_or_config_is_refused():
    state = CO3FSDPState(format="fp8-e5m2")
    sd = state.state_dict()
    with pytest.raises(StateMismatchError, match="saved with world size 2, loaded with 1"):
        state.load_state_dict({**sd, "world": 2})
    with pytest.raises(StateMismatchError, match="format='fp8-e5m2'"):
        CO3FSDPState(format="fp4-co3").load_state_dict(sd)
    with pytest.raises(StateMismatchError, match="not a version-1"):
        state.load_state_dict({"version": 99})
    state.load_state_dict(sd)  # its own state round-trips


def test_attach_refuses_a_model_without_fsdp_modules():
    with pytest.raises(InputError, match="no fully_shard module"):
        attach(_model(), CO3FSDPState())
