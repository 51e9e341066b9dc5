"""Record a Hugging Face ``Trainer`` run's gradients into a dump, after clipping, with the loss.

::

    from transformers import Trainer
    from co3cli.integrations.hf import RecordGradients

    trainer = Trainer(model=model, args=args, train_dataset=ds,
                      callbacks=[RecordGradients("grads.h5", every=10)])
    trainer.train()                     # grads.h5: co3 fit grads.h5, co3 compress grads.h5 ...

Where in the Trainer's step::

    forward (the model's output.loss --forward hook: kept) -> backward   (x gradient_accumulation)
        -> clip to max_grad_norm -> on_pre_optimizer_step --> recorded here
        -> optimizer.step -> on_optimizer_step -> model.zero_grad -> on_step_end (too late:
           the gradients are gone)

``on_pre_optimizer_step`` (transformers >= 4.45; older versions are refused with that
message) runs after the Trainer's clipping and before the update, so the recorded gradients
are the ones the optimizer applies. The loss of a row is the mean of the model outputs'
``loss`` (as ``Trainer.compute_loss`` reads it: ``outputs["loss"]``) over the micro-batches
accumulated into the step, taken by a forward hook on the training-mode forwards; a model that
returns no loss there (a custom ``compute_loss``, a label smoother) gives a dump without one.
Step indices are ``state.global_step`` (optimizer steps taken before this one). Only the world
process zero records.

With fp16 mixed precision and ``max_grad_norm=0`` the gradients are still loss-scaled at this
point (the Trainer unscales them only to clip); keep clipping on (the default, 1.0) or use bf16.
Sharded setups (DeepSpeed ZeRO, FSDP) hold no whole ``p.grad`` here: not supported.

Keyword arguments go to :class:`co3cli.recorder.GradientRecorder` (``every``, ``steps``,
``layers``, ``dtype``, ``on_nonfinite``, ``attrs``, ``background``, ...). transformers is an
optional extra: ``pip install co3cli[hf]``.
"""

from __future__ import annotations

import os
from typing import Any

import transformers
from transformers import TrainerCallback

from co3cli.errors import InputError
from co3cli.recorder import GradientRecorder

MIN_VERSION = "4.45"
"""The first transformers with ``TrainerCallback.on_pre_optimizer_step``."""


class RecordGradients(TrainerCallback):
    """Record ``p.grad`` of the Trainer's model after clipping, before each optimizer step, into
    the dump ``path``; see the module docstring."""

    def __init__(self, path: str | os.PathLike, **recorder_kwargs: Any) -> None:
        if not hasattr(TrainerCallback, "on_pre_optimizer_step"):
            raise InputError(f"RecordGradients needs transformers>={MIN_VERSION} (its "
                             "on_pre_optimizer_step event runs after clipping, before the update); "
                             f"installed: {transformers.__version__}")
        if "optimizer" in recorder_kwargs or "average" in recorder_kwargs:
            raise InputError("RecordGradients: optimizer/average are not accepted (the callback "
                             "takes the lr from the Trainer's optimizer)")
        self.path = path
        self.recorder_kwargs = recorder_kwargs
        self.recorder: GradientRecorder | None = None
        self._hook = None
        self._losses: list[float] = []

    def on_train_begin(self, args: Any, state: Any, control: Any, model: Any = None,
                       optimizer: Any = None, **kwargs: Any) -> None:
        if not state.is_world_process_zero or self.recorder is not None:
            return
        attrs = {"framework": "transformers", "transformers_version": transformers.__version__,
                 "recorded_at": "on_pre_optimizer_step (after max_grad_norm clipping)",
                 "max_grad_norm": float(args.max_grad_norm or 0.0),
                 "gradient_accumulation_steps": int(args.gradient_accumulation_steps),
                 **self.recorder_kwargs.get("attrs", {})}
        rest = {k: v for k, v in self.recorder_kwargs.items() if k != "attrs"}
        self.recorder = GradientRecorder(model, self.path, attrs=attrs, optimizer=optimizer,
                                         **rest)
        self._hook = model.register_forward_hook(self._keep_loss)

    def _keep_loss(self, module: Any, inputs: Any, output: Any) -> None:
        import torch

        if not (module.training and torch.is_grad_enabled()):
            return
        loss = output.get("loss") if isinstance(output, dict) else getattr(output, "loss", None)
        if loss is not None:  # kept on its device: read once per optimizer step, no sync here
            self._losses.append(loss.detach().float().mean())

    def on_pre_optimizer_step(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self.recorder is None:
            return
        mean = float(sum(self._losses) / len(self._losses)) if self._losses else None
        self._losses = []
        self.recorder.step(loss=mean, step=state.global_step)

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.close()

    def close(self) -> None:
        """Remove the loss hook and close the dump (also when training failed)."""
        if self._hook is not None:
            self._hook.remove()
            self._hook = None
        if self.recorder is not None:
            recorder, self.recorder = self.recorder, None
            recorder.close()
