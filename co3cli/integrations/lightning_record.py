"""Record a Lightning run's gradients into a dump, after gradient clipping, with the loss.

::

    import lightning as L
    from co3cli.integrations.lightning_record import RecordGradients

    trainer = L.Trainer(max_epochs=3, gradient_clip_val=1.0,
                        callbacks=[RecordGradients("grads.h5", every=10)])
    trainer.fit(model, loader)          # grads.h5: co3 fit grads.h5, co3 compress grads.h5 ...

Where in Lightning's step (automatic optimization)::

    training_step -> backward -> on_after_backward -> on_before_optimizer_step
        -> gradient clipping (gradient_clip_val, configure_gradient_clipping)
        -> optimizer update --(torch step post-hook: "this batch stepped")
        -> on_train_batch_end: p.grad still holds the clipped gradients --> recorded here
    next batch: training_step -> zero_grad -> ...

``on_before_optimizer_step`` and ``on_after_backward`` run *before* clipping, so a recorder
there stores gradients the optimizer never applied. This callback marks each real optimizer
step with a ``torch.optim.Optimizer.register_step_post_hook`` (a step that mixed precision
skips for an Inf/NaN never runs it, so it is not recorded) and records in
``on_train_batch_end`` of that batch, where the gradients are the clipped (and, under mixed
precision, unscaled) ones and Lightning has not zeroed them yet. The same holds without
clipping, with gradient accumulation (one row per optimizer step) and with manual
optimization (``self.manual_backward`` + ``opt.step()`` in ``training_step``).

The loss of a row is the mean of the ``training_step`` losses of the batches that made its
gradient (the loss returned by ``training_step``, or its ``"loss"`` key; none when it returns
neither). Step indices are ``trainer.global_step - 1``: the optimizer step just taken. Only
global rank 0 records (under DDP every rank holds the same averaged gradients).

Keyword arguments go to :class:`co3cli.recorder.GradientRecorder` (``every``, ``steps``,
``layers``, ``dtype``, ``on_nonfinite``, ``attrs``, ``background``, ...); the recorder is made in
``on_train_start`` and closed when fitting ends or fails (committed steps stay valid).
Lightning is an optional extra: ``pip install co3cli[lightning]``.
"""

from __future__ import annotations

import os
from typing import Any

from lightning.pytorch.callbacks import Callback

from co3cli.errors import InputError
from co3cli.recorder import GradientRecorder


class RecordGradients(Callback):
    """Record ``p.grad`` of the LightningModule after each optimizer step (after clipping)
    into the dump ``path``; see the module docstring."""

    def __init__(self, path: str | os.PathLike, **recorder_kwargs: Any) -> None:
        if "optimizer" in recorder_kwargs or "average" in recorder_kwargs:
            raise InputError("RecordGradients: optimizer/average are not accepted (the callback "
                             "takes the lr from the trainer's first optimizer)")
        self.path = path
        self.recorder_kwargs = recorder_kwargs
        self.recorder: GradientRecorder | None = None
        self._hooks: list[Any] = []
        self._stepped = False
        self._losses: list[float] = []

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        if not trainer.is_global_zero or self.recorder is not None:
            return
        attrs = {"framework": "lightning", "recorded_at": "after the optimizer step's "
                 "gradient clipping (on_train_batch_end of a batch that stepped)",
                 "gradient_clip_val": float(trainer.gradient_clip_val or 0.0),
                 "accumulate_grad_batches": int(trainer.accumulate_grad_batches),
                 **self.recorder_kwargs.get("attrs", {})}
        kwargs = {k: v for k, v in self.recorder_kwargs.items() if k != "attrs"}
        optimizers = list(trainer.optimizers)
        self.recorder = GradientRecorder(pl_module, self.path, attrs=attrs,
                                         optimizer=optimizers[0] if optimizers else None, **kwargs)
        self._hooks = [opt.register_step_post_hook(self._mark_step) for opt in optimizers]

    def _mark_step(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        self._stepped = True

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any,
                           batch_idx: int) -> None:
        if self.recorder is None:
            return
        loss = outputs.get("loss") if isinstance(outputs, dict) else outputs
        if loss is not None:
            value = float(loss.detach()) if hasattr(loss, "detach") else float(loss)
            if pl_module.automatic_optimization:  # Lightning divided it for accumulation
                value *= trainer.accumulate_grad_batches
            self._losses.append(value)
        if not self._stepped:
            return
        mean = sum(self._losses) / len(self._losses) if self._losses else None
        self._stepped, self._losses = False, []
        self.recorder.step(loss=mean, step=max(trainer.global_step - 1, 0))

    def _close(self) -> None:
        for hook in self._hooks:
            hook.remove()
        self._hooks = []
        if self.recorder is not None:
            recorder, self.recorder = self.recorder, None
            recorder.close()

    def on_train_end(self, trainer: Any, pl_module: Any) -> None:
        self._close()

    def on_exception(self, trainer: Any, pl_module: Any, exception: BaseException) -> None:
        self._close()

    def teardown(self, trainer: Any, pl_module: Any, stage: str) -> None:
        self._close()
