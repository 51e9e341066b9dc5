"""co3cli.integrations.lightning_record.RecordGradients: the recorded gradients are the ones the
optimizer applied, after Lightning's gradient clipping, with the loss (Lightning optional)."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
L = pytest.importorskip(
    "lightning", reason="Lightning is an optional extra: pip install co3cli[lightning]")

from co3cli.dump import Dump  # noqa: E402
from co3cli.integrations.lightning_record import RecordGradients  # noqa: E402

CLIP = 0.05


class Net(L.LightningModule):
    """Keeps, per optimizer step, the gradients before clipping (on_before_optimizer_step) and
    after (in configure_gradient_clipping, right after Lightning's own clipping)."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.net = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.ReLU(),
                                       torch.nn.Linear(8, 3))
        self.before, self.after, self.losses = [], [], []

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = torch.nn.functional.cross_entropy(self.net(x), y)
        self.losses.append(float(loss.detach()))
        return loss

    def _grads(self):
        return {n: p.grad.detach().reshape(-1).clone().numpy() for n, p in self.named_parameters()}

    def on_before_optimizer_step(self, optimizer):
        self.before.append(self._grads())

    def configure_gradient_clipping(self, optimizer, gradient_clip_val=None,
                                    gradient_clip_algorithm=None):
        self.clip_gradients(optimizer, gradient_clip_val, gradient_clip_algorithm)
        self.after.append(self._grads())

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1, momentum=0.9)


def _fit(tmp_path, clip, accumulate=1, batches=6):
    gen = torch.Generator().manual_seed(3)
    x = torch.randn(8 * batches, 6, generator=gen)
    y = (x[:, 0] > 0).long() + (x[:, 1] > 0).long()
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=8)
    model, path = Net(), tmp_path / "grads.h5"
    trainer = L.Trainer(accelerator="cpu", devices=1, max_epochs=1, gradient_clip_val=clip,
                        accumulate_grad_batches=accumulate, logger=False,
                        enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False, callbacks=[RecordGradients(path)])
    trainer.fit(model, loader)
    return model, path


def _rows(path):
    with Dump.open(path) as d:
        return d.steps, d.loss, {n: d.read_layer(n) for n in d.layers}, d.attrs


def test_records_the_clipped_gradients_with_the_loss(tmp_path):
    model, path = _fit(tmp_path, clip=CLIP)
    steps, loss, grads, attrs = _rows(path)
    assert steps.tolist() == list(range(6))
    assert attrs["framework"] == "lightning" and attrs["gradient_clip_val"] == CLIP
    for i, after in enumerate(model.after):
        norm = np.sqrt(sum(float(np.sum(g.astype(np.float64) ** 2)) for g in after.values()))
        assert norm == pytest.approx(CLIP, rel=1e-3)  # clipping really acted
        for name, g in after.items():
            assert np.array_equal(grads[name][i], g), (i, name)
            assert not np.allclose(grads[name][i], model.before[i][name])  # not the pre-clip ones
    assert loss is not None and np.allclose(loss, model.losses, rtol=1e-6)


def test_without_clipping_the_gradients_are_the_backward_ones(tmp_path):
    model, path = _fit(tmp_path, clip=None)
    steps, loss, grads, _ = _rows(path)
    assert len(steps) == len(model.before) == 6
    for i, before in enumerate(model.before):
        for name, g in before.items():
            assert np.array_equal(grads[name][i], g)
    assert np.allclose(loss, model.losses, rtol=1e-6)


def test_accumulation_records_one_row_per_optimizer_step(tmp_path):
    model, path = _fit(tmp_path, clip=CLIP, accumulate=2, batches=5)
    steps, loss, grads, _ = _rows(path)
    assert steps.tolist() == [0, 1, 2] and len(model.after) == 3  # the last window has 1 batch
    for i, after in enumerate(model.after):
        for name, g in after.items():
            assert np.array_equal(grads[name][i], g)
    want = [np.mean(model.losses[0:2]), np.mean(model.losses[2:4]), model.losses[4]]
    assert np.allclose(loss, want, rtol=1e-5)


def test_refuses_what_the_callback_sets_itself():
    from co3cli.errors import InputError

    with pytest.raises(InputError, match="optimizer/average are not accepted"):
        RecordGradients("x.h5", average=True)


class Manual(Net):
    """Manual optimization: backward, clip and step in training_step."""

    def __init__(self) -> None:
        super().__init__()
        self.automatic_optimization = False

    def training_step(self, batch, batch_idx):
        opt = self.optimizers()
        x, y = batch
        loss = torch.nn.functional.cross_entropy(self.net(x), y)
        self.losses.append(float(loss.detach()))
        opt.zero_grad()
        self.manual_backward(loss)
        self.clip_gradients(opt, gradient_clip_val=CLIP, gradient_clip_algorithm="norm")
        self.after.append(self._grads())
        opt.step()
        return loss


def test_manual_optimization(tmp_path):
    x = torch.randn(32, 6, generator=torch.Generator().manual_seed(5))
    y = (x[:, 0] > 0).long()
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=8)
    model, path = Manual(), tmp_path / "grads.h5"
    trainer = L.Trainer(accelerator="cpu", devices=1, max_epochs=1, logger=False,
                        enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False, callbacks=[RecordGradients(path)])
    trainer.fit(model, loader)
    steps, loss, grads, _ = _rows(path)
    assert steps.tolist() == [0, 1, 2, 3]
    for i, after in enumerate(model.after):
        for name, g in after.items():
            assert np.array_equal(grads[name][i], g)
    assert np.allclose(loss, model.losses, rtol=1e-6)
