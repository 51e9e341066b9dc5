"""co3cli.integrations.hf.RecordGradients: the recorded gradients are the ones the Trainer's
optimizer applies (after max_grad_norm clipping), with the loss (transformers optional)."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers",
                    reason="transformers is an optional extra: pip install co3cli[hf]")

from transformers import Trainer, TrainingArguments  # noqa: E402

from co3cli.dump import Dump  # noqa: E402
from co3cli.integrations.hf import RecordGradients  # noqa: E402

CLIP = 0.05


class Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.fc1, self.fc2 = torch.nn.Linear(6, 8), torch.nn.Linear(8, 3)
        self.losses: list[float] = []

    def forward(self, x, labels=None):
        logits = self.fc2(torch.relu(self.fc1(x)))
        out = {"logits": logits}
        if labels is not None:
            out["loss"] = torch.nn.functional.cross_entropy(logits, labels)
            if self.training:
                self.losses.append(float(out["loss"].detach()))
        return out


class Rows(torch.utils.data.Dataset):
    def __init__(self, n: int) -> None:
        gen = torch.Generator().manual_seed(3)
        self.x = torch.randn(n, 6, generator=gen)
        self.y = (self.x[:, 0] > 0).long() + (self.x[:, 1] > 0).long()

    def __len__(self) -> int:
        return len(self.y)

    def __getitem__(self, i):
        return {"x": self.x[i], "labels": self.y[i]}


def _train(tmp_path, clip, accumulate=1, steps=4):
    model, path = Net(), tmp_path / "grads.h5"
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    applied = []  # what optimizer.step() finds in p.grad: the gradients it applies
    opt.register_step_pre_hook(lambda o, a, k: applied.append(
        {n: p.grad.detach().reshape(-1).clone().numpy() for n, p in model.named_parameters()}))
    args = TrainingArguments(output_dir=str(tmp_path / "out"), max_steps=steps,
                             per_device_train_batch_size=8, gradient_accumulation_steps=accumulate,
                             max_grad_norm=clip, use_cpu=True, report_to="none",
                             save_strategy="no", logging_strategy="no", dataloader_num_workers=0,
                             remove_unused_columns=False, seed=0)
    callback = RecordGradients(path)
    Trainer(model=model, args=args, train_dataset=Rows(8 * steps * accumulate),
            optimizers=(opt, None), callbacks=[callback]).train()
    return model, path, applied


def _rows(path):
    with Dump.open(path) as d:
        return d.steps, d.loss, {n: d.read_layer(n) for n in d.layers}, d.attrs


def test_records_the_clipped_gradients_with_the_loss(tmp_path):
    model, path, applied = _train(tmp_path, clip=CLIP)
    steps, loss, grads, attrs = _rows(path)
    assert steps.tolist() == [0, 1, 2, 3] and len(applied) == 4
    assert attrs["framework"] == "transformers" and attrs["max_grad_norm"] == CLIP
    for i, g in enumerate(applied):
        norm = np.sqrt(sum(float(np.sum(v.astype(np.float64) ** 2)) for v in g.values()))
        assert norm == pytest.approx(CLIP, rel=1e-3)  # clipping really acted
        for name, v in g.items():
            assert np.array_equal(grads[name][i], v), (i, name)
    assert loss is not None and np.allclose(loss, model.losses, rtol=1e-6)


def test_accumulated_steps_record_the_mean_loss(tmp_path):
    model, path, applied = _train(tmp_path, clip=0.0, accumulate=2, steps=2)
    steps, loss, grads, _ = _rows(path)
    assert steps.tolist() == [0, 1] and len(applied) == 2
    for i, g in enumerate(applied):
        for name, v in g.items():
            assert np.array_equal(grads[name][i], v)
    assert np.allclose(loss, [np.mean(model.losses[0:2]), np.mean(model.losses[2:4])], rtol=1e-6)


def test_a_transformers_without_the_hook_is_refused_naming_the_version(monkeypatch):
    from transformers import TrainerCallback

    from co3cli.errors import InputError

    monkeypatch.delattr(TrainerCallback, "on_pre_optimizer_step")
    with pytest.raises(InputError, match=r"needs transformers>=4\.45 .*installed: "):
        RecordGradients("x.h5")
