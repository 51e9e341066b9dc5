"""A Lightning DDP strategy that really runs the co3 hook, on any device.

::

    import lightning as L
    from co3cli.ddp import CO3State
    from co3cli.integrations.lightning import CO3DDPStrategy

    strategy = CO3DDPStrategy(CO3State(format="fp4-co3", coder="ans", gamma=0.9))
    trainer = L.Trainer(accelerator="cpu", devices=2, strategy=strategy, max_epochs=3)
    trainer.fit(model, loader)                   # checkpoints hold every rank's co3 state
    trainer.fit(model, loader, ckpt_path="last.ckpt")   # each rank takes its own back

What it changes in ``lightning.pytorch.strategies.DDPStrategy``:

- ``_register_ddp_hooks``: registers ``co3_hook`` with ``ddp.register_comm_hook`` whatever the
  device (the parent registers its ``ddp_comm_hook`` only when ``root_device`` is CUDA, so on
  CPU it silently trains uncompressed).
- ``optimizer_step``: after the first ``guard_steps`` optimizer steps it calls
  ``CO3State.check_ran``; a hook that never ran raises ``CO3HookNotRunError``.
- ``save_checkpoint`` (called on every rank by ``Trainer.save_checkpoint`` and
  ``ModelCheckpoint``): gathers every rank's state (``CO3State.job_state_dict``) into
  ``checkpoint["co3"]`` of the one file rank 0 writes; ``load_checkpoint`` (every rank, after
  the process group exists, before the first step) gives each rank its own part. A checkpoint
  from another world size, format, coder or model raises ``StateMismatchError``.
"""

from __future__ import annotations

from typing import Any, Callable

from lightning.pytorch.strategies import DDPStrategy

from co3cli.checks import check_int
from co3cli.ddp import CO3State, co3_hook
from co3cli.errors import InputError

CHECKPOINT_KEY = "co3"


class CO3DDPStrategy(DDPStrategy):
    """``DDPStrategy`` with the co3 hook registered on any device (see the module docstring).
    ``co3_state`` defaults to ``CO3State()``; other keyword arguments go to ``DDPStrategy``
    (``ddp_comm_hook``/``ddp_comm_state``/``ddp_comm_wrapper`` are refused: the hook is co3's)."""

    strategy_name = "co3_ddp"

    def __init__(self, co3_state: CO3State | None = None, *, guard_steps: int = 1,
                 **kwargs: Any) -> None:
        taken = sorted(k for k in ("ddp_comm_hook", "ddp_comm_state", "ddp_comm_wrapper")
                       if kwargs.get(k) is not None)
        if taken:
            raise InputError(f"CO3DDPStrategy: {', '.join(taken)} not accepted "
                             "(the strategy registers co3_hook with co3_state)")
        if co3_state is not None and not isinstance(co3_state, CO3State):
            raise InputError(f"CO3DDPStrategy: co3_state must be a CO3State, "
                             f"got {type(co3_state).__name__}")
        check_int("guard_steps", guard_steps, lo=1, who="CO3DDPStrategy: ")
        super().__init__(**kwargs)
        self.co3_state = co3_state if co3_state is not None else CO3State()
        self.guard_steps = guard_steps
        self._optimizer_steps = 0

    def _register_ddp_hooks(self) -> None:
        self.model.register_comm_hook(self.co3_state, co3_hook)

    def optimizer_step(self, optimizer: Any, closure: Callable[[], Any], model: Any = None,
                       **kwargs: Any) -> Any:
        out = super().optimizer_step(optimizer, closure, model, **kwargs)
        if self._optimizer_steps < self.guard_steps:
            self._optimizer_steps += 1
            if self._optimizer_steps == self.guard_steps:
                self.co3_state.check_ran(self._optimizer_steps, who="CO3DDPStrategy: ")
        return out

    def save_checkpoint(self, checkpoint: dict[str, Any], filepath: Any,
                        storage_options: Any = None) -> None:
        checkpoint[CHECKPOINT_KEY] = self.co3_state.job_state_dict()  # every rank calls this
        super().save_checkpoint(checkpoint, filepath, storage_options=storage_options)

    def load_checkpoint(self, checkpoint_path: Any,
                        weights_only: bool | None = None) -> dict[str, Any]:
        # the co3 state is plain tensors, bytes, numbers and dicts: weights-only loads read it
        checkpoint = super().load_checkpoint(checkpoint_path, weights_only=weights_only)
        if CHECKPOINT_KEY in checkpoint:
            self.co3_state.load_state_dict(checkpoint[CHECKPOINT_KEY])
        return checkpoint
