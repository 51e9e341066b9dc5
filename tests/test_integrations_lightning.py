"""co3cli.integrations.lightning: CO3DDPStrategy on 2 CPU gloo ranks (Lightning, optional extra).

Each test runs its ranks in child processes (tests/dist_ranks.py: join timeout, no process left).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
L = pytest.importorskip(
    "lightning", reason="Lightning is an optional extra: pip install co3cli[lightning]")

from co3cli.ddp import CO3HookNotRunError, CO3State, co3_hook  # noqa: E402
from co3cli.errors import InputError  # noqa: E402
from co3cli.integrations.lightning import CO3DDPStrategy  # noqa: E402
from dist_ranks import launch, warm_codec  # noqa: E402

LOSS_TOL = 0.02  # |final loss(co3 fp8) - final loss(uncompressed)|, relative


class Net(L.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.net = torch.nn.Sequential(torch.nn.Linear(12, 32), torch.nn.ReLU(),
                                       torch.nn.Linear(32, 3))
        self.losses: list[float] = []

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = torch.nn.functional.cross_entropy(self.net(x), y)
        self.losses.append(float(loss.detach()))
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1, momentum=0.9)


def _loader() -> torch.utils.data.DataLoader:
    gen = torch.Generator().manual_seed(7)
    x = torch.randn(64, 12, generator=gen)
    y = (x[:, 0] > 0).long() + (x[:, 1] > 0.5).long()
    return torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=8)


def _fit(strategy, epochs: int, ckpt_path=None, save_to=None) -> dict:
    model = Net()
    trainer = L.Trainer(accelerator="cpu", devices=2, strategy=strategy, max_epochs=epochs,
                        logger=False, enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False, num_sanity_val_steps=0)
    trainer.fit(model, _loader(), ckpt_path=ckpt_path)
    if save_to is not None:
        trainer.save_checkpoint(save_to)  # every rank: the strategy gathers the co3 states
    params = torch.cat([p.detach().reshape(-1) for p in model.parameters()]).numpy().copy()
    return {"params": params, "losses": model.losses}


def _co3() -> CO3State:
    return CO3State(format="fp8-e5m2", coder="ans", gamma=0.9, refit_every=2)


def _run_co3(rank, world, out: Path, epochs: int) -> dict:
    strategy = CO3DDPStrategy(_co3())
    return {**_fit(strategy, epochs), "stats": strategy.co3_state.stats()}


def _run_plain(rank, world, out: Path, epochs: int) -> dict:
    from lightning.pytorch.strategies import DDPStrategy
    return _fit(DDPStrategy(), epochs)


def _run_lightning_own_hook(rank, world, out: Path) -> dict:
    """The issue: Lightning's own ddp_comm_hook argument registers nothing on CPU."""
    from lightning.pytorch.strategies import DDPStrategy
    state = _co3()
    _fit(DDPStrategy(ddp_comm_state=state, ddp_comm_hook=co3_hook), 1)
    return {"steps": state.stats()["steps"]}


class _Unhooked(CO3DDPStrategy):
    def _register_ddp_hooks(self) -> None:  # a strategy that forgot to register
        pass


def _run_unhooked(rank, world, out: Path) -> dict:
    _fit(_Unhooked(_co3()), 1)
    return {}


def _run_resume(rank, world, out: Path, first: int, total: int) -> dict:
    ckpt = out / "job.ckpt"
    if first:
        _fit(CO3DDPStrategy(_co3()), first, save_to=ckpt)
        return {}
    strategy = CO3DDPStrategy(_co3())
    return {**_fit(strategy, total, ckpt_path=ckpt), "stats": strategy.co3_state.stats()}


def _run_resume_other_coder(rank, world, out: Path) -> dict:
    strategy = CO3DDPStrategy(CO3State(format="fp8-e5m2", coder="huffman"))
    _fit(strategy, 3, ckpt_path=out / "job.ckpt")
    return {}


# ---------------------------------------------------------------------- tests
@pytest.fixture(scope="module", autouse=True)
def _warm():
    warm_codec()


def test_strategy_refuses_a_second_hook():
    with pytest.raises(InputError, match="ddp_comm_hook"):
        CO3DDPStrategy(_co3(), ddp_comm_hook=co3_hook)
    with pytest.raises(InputError, match="guard_steps"):
        CO3DDPStrategy(_co3(), guard_steps=0)


def test_the_hook_runs_on_cpu_and_replicas_agree(tmp_path):
    r0, r1 = launch(tmp_path, _run_co3, epochs=1)
    assert np.array_equal(r0["params"], r1["params"])
    for r in (r0, r1):
        assert r["stats"]["steps"] == 4 and r["stats"]["bytes_total"] > 0  # 4 batches per rank


def test_a_hook_that_never_ran_fails_at_the_first_step(tmp_path):
    errors = launch(tmp_path, _run_unhooked, expect_error=True)
    for e in errors:
        assert e is not None and "CO3HookNotRunError: CO3DDPStrategy: co3 DDP hook never ran" in e


def test_lightning_own_comm_hook_argument_registers_nothing_on_cpu(tmp_path):
    r0, r1 = launch(tmp_path, _run_lightning_own_hook)
    assert r0["steps"] == r1["steps"] == 0  # why CO3DDPStrategy exists


def test_training_matches_the_uncompressed_run(tmp_path):
    co3 = launch(tmp_path, _run_co3, epochs=6)
    plain = launch(tmp_path, _run_plain, epochs=6)
    final = lambda r: float(np.mean(r["losses"][-4:]))  # noqa: E731  (the last epoch)
    for a, b in zip(co3, plain):
        assert abs(final(a) - final(b)) <= LOSS_TOL * final(b), (final(a), final(b))
        assert final(a) < 0.8 * float(np.mean(a["losses"][:4]))  # it trained


def test_resumed_run_is_bit_identical_to_an_uninterrupted_one(tmp_path):
    whole = launch(tmp_path, _run_co3, epochs=3)
    launch(tmp_path, _run_resume, first=2, total=3)
    job = torch.load(tmp_path / "job.ckpt", weights_only=True)["co3"]  # the one file
    assert job["world_size"] == 2 and [sd["rank"] for sd in job["ranks"]] == [0, 1]
    resumed = launch(tmp_path, _run_resume, first=0, total=3)
    for rank in range(2):
        assert np.array_equal(whole[rank]["params"], resumed[rank]["params"]), f"rank {rank}"
        assert resumed[rank]["stats"]["steps"] == whole[rank]["stats"]["steps"] == 12
    errors = launch(tmp_path, _run_resume_other_coder, expect_error=True)
    for e in errors:
        assert "StateMismatchError: co3 DDP state saved with coder='ans', loaded with " \
               "coder='huffman'" in e
