"""co3cli.integrations.accelerate: the register() recipe on 2 CPU gloo ranks (Accelerate,
optional extra). Ranks run in child processes (tests/dist_ranks.py: join timeout, none left).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
accelerate = pytest.importorskip(
    "accelerate", reason="Accelerate is an optional extra: pip install co3cli[accelerate]")

from co3cli.ddp import CO3State, co3_hook  # noqa: E402
from co3cli.errors import InputError  # noqa: E402
from co3cli.integrations.accelerate import register  # noqa: E402
from dist_ranks import launch, warm_codec  # noqa: E402

LOSS_TOL = 0.02  # |final loss(co3 fp8) - final loss(uncompressed)|, relative
BATCHES = 4  # per rank and epoch


def _co3(**kw) -> CO3State:
    return CO3State(**{"format": "fp8-e5m2", "coder": "ans", "gamma": 0.9, "refit_every": 2, **kw})


def _setup(hook: str, state: CO3State | None = None, kwargs_handlers=()):
    from accelerate import Accelerator

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(12, 32), torch.nn.ReLU(), torch.nn.Linear(32, 3))
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    gen = torch.Generator().manual_seed(7)
    x = torch.randn(64, 12, generator=gen)
    y = (x[:, 0] > 0).long() + (x[:, 1] > 0.5).long()
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=8)
    acc = Accelerator(cpu=True, kwargs_handlers=list(kwargs_handlers))
    model, opt, loader = acc.prepare(model, opt, loader)
    if hook == "co3":
        state = register(acc, model, state, optimizer=opt)
    return acc, model, opt, loader, state


def _train(acc, model, opt, loader, epochs: range) -> list[float]:
    losses = []
    for _ in epochs:
        for x, y in loader:
            opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(x), y)
            acc.backward(loss)
            opt.step()
            losses.append(float(loss.detach()))
    return losses


def _params(model) -> np.ndarray:
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()]).numpy().copy()


def _run(rank, world, out: Path, hook: str, epochs: int) -> dict:
    acc, model, opt, loader, state = _setup(hook, _co3())
    losses = _train(acc, model, opt, loader, range(epochs))
    return {"params": _params(model), "losses": losses,
            "stats": state.stats() if hook == "co3" else None}


def _run_kwargs_hook(rank, world, out: Path) -> dict:
    """The issue: DistributedDataParallelKwargs(comm_hook=co3_hook) is silently ignored."""
    from accelerate.utils import DistributedDataParallelKwargs

    state = _co3()
    acc, model, opt, loader, _ = _setup("none", kwargs_handlers=[
        DistributedDataParallelKwargs(comm_hook=co3_hook, comm_state_option={"state": state})])
    _train(acc, model, opt, loader, range(1))
    return {"steps": state.stats()["steps"]}


def _run_guard(rank, world, out: Path) -> dict:
    """register's guard on an optimizer whose model never runs the hook."""
    acc, model, opt, loader, _ = _setup("none")
    _co3().guard(opt.optimizer)
    _train(acc, model, opt, loader, range(1))
    return {}


def _run_resume(rank, world, out: Path, first: int, total: int) -> dict:
    acc, model, opt, loader, state = _setup("co3", _co3())
    if first:
        _train(acc, model, opt, loader, range(first))
        acc.save_state(str(out / "ckpt"))  # every rank: the co3 object gathers all states
        return {}
    acc.load_state(str(out / "ckpt"))
    done = state.stats()["steps"] // BATCHES
    _train(acc, model, opt, loader, range(done, total))
    return {"params": _params(model), "stats": state.stats()}


def _run_resume_other_format(rank, world, out: Path) -> dict:
    acc, model, opt, loader, state = _setup("co3", _co3(format="fp4-co3"))
    acc.load_state(str(out / "ckpt"))
    return {}


# ---------------------------------------------------------------------- tests
@pytest.fixture(scope="module", autouse=True)
def _warm():
    warm_codec()


def test_register_refuses_a_model_that_is_not_ddp():
    with pytest.raises(InputError, match="not DistributedDataParallel"):
        register(None, torch.nn.Linear(2, 2), _co3())


def test_the_hook_runs_and_replicas_agree(tmp_path):
    r0, r1 = launch(tmp_path, _run, hook="co3", epochs=1)
    assert np.array_equal(r0["params"], r1["params"])
    for r in (r0, r1):
        assert r["stats"]["steps"] == BATCHES and r["stats"]["bytes_total"] > 0


def test_the_guard_fails_loudly_when_the_hook_never_ran(tmp_path):
    for e in launch(tmp_path, _run_guard, expect_error=True):
        assert e is not None and "CO3HookNotRunError: co3 DDP hook never ran: 0 hook steps " \
                                 "after 1 optimizer step(s)" in e


def test_comm_hook_in_ddp_kwargs_is_ignored_by_accelerate(tmp_path):
    r0, r1 = launch(tmp_path, _run_kwargs_hook)
    assert r0["steps"] == r1["steps"] == 0  # why register() exists


def test_training_matches_the_uncompressed_run(tmp_path):
    co3 = launch(tmp_path, _run, hook="co3", epochs=6)
    plain = launch(tmp_path, _run, hook="none", epochs=6)
    final = lambda r: float(np.mean(r["losses"][-BATCHES:]))  # noqa: E731  (the last epoch)
    for a, b in zip(co3, plain):
        assert abs(final(a) - final(b)) <= LOSS_TOL * final(b), (final(a), final(b))
        assert final(a) < 0.8 * float(np.mean(a["losses"][:BATCHES]))  # it trained


def test_resumed_run_is_bit_identical_to_an_uninterrupted_one(tmp_path):
    whole = launch(tmp_path, _run, hook="co3", epochs=3)
    launch(tmp_path, _run_resume, first=2, total=3)
    resumed = launch(tmp_path, _run_resume, first=0, total=3)
    for rank in range(2):
        assert np.array_equal(whole[rank]["params"], resumed[rank]["params"]), f"rank {rank}"
        assert resumed[rank]["stats"]["steps"] == whole[rank]["stats"]["steps"] == 3 * BATCHES
    assert len(list((tmp_path / "ckpt").glob("custom_checkpoint_*.pkl"))) == 1  # one file
    for e in launch(tmp_path, _run_resume_other_format, expect_error=True):
        assert "StateMismatchError: co3 DDP state saved with format='fp8-e5m2', loaded " \
               "with format='fp4-co3'" in e
