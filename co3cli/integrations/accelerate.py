"""The co3 hook under Hugging Face Accelerate: register after ``prepare``.

::

    from accelerate import Accelerator
    from co3cli.ddp import CO3State
    from co3cli.integrations.accelerate import register

    accelerator = Accelerator()                         # under accelerate launch (CPU or GPU)
    model, opt, loader = accelerator.prepare(model, opt, loader)
    state = register(accelerator, model, CO3State(format="fp4-co3"), optimizer=opt)
    ...                                                 # the usual loop: accelerator.backward(loss)
    accelerator.save_state("ckpt")                      # one custom_checkpoint_*.pkl: all ranks
    accelerator.load_state("ckpt")                      # each rank takes its own part

Why a helper: ``DistributedDataParallelKwargs(comm_hook=co3_hook)`` gives no error and no
warning, and registers nothing (Accelerate knows only its built-in hook names), so the model
trains uncompressed. ``register``

- registers ``co3_hook`` on the prepared model (``DistributedDataParallel``; anything else is an
  ``InputError``: a single-process run has nothing to compress);
- registers a checkpoint object with ``accelerator.register_for_checkpointing``: its
  ``state_dict`` (called on every rank by ``save_state``) gathers every rank's co3 state
  (``CO3State.job_state_dict``) into the file the main process writes, and ``load_state_dict``
  gives each rank its own part (a mismatch raises ``StateMismatchError``);
- with ``optimizer=``, guards it: after ``guard_steps`` optimizer steps without a hook step it
  raises ``CO3HookNotRunError``.
"""

from __future__ import annotations

from typing import Any

from torch.nn.parallel import DistributedDataParallel

from co3cli.ddp import CO3State, co3_hook
from co3cli.errors import InputError


class CO3Checkpoint:
    """The object Accelerate checkpoints: every rank's state of ``state`` in one dict."""

    def __init__(self, state: CO3State) -> None:
        self.state = state

    def state_dict(self) -> dict[str, Any]:
        return self.state.job_state_dict()

    def load_state_dict(self, sd: dict[str, Any]) -> None:
        self.state.load_state_dict(sd)


def register(accelerator: Any, model: Any, state: CO3State | None = None, *,
             optimizer: Any = None, guard_steps: int = 1) -> CO3State:
    """Register ``co3_hook`` on ``model`` (as returned by ``accelerator.prepare``), its state
    for ``save_state``/``load_state``, and (with ``optimizer``) the never-ran guard. Returns
    the state (``CO3State()`` when none is given)."""
    if not isinstance(model, DistributedDataParallel):
        raise InputError(f"co3 accelerate.register: the model is a {type(model).__name__}, not "
                         "DistributedDataParallel (call it after accelerator.prepare, in a "
                         "multi-process run)")
    if state is None:
        state = CO3State()
    elif not isinstance(state, CO3State):
        raise InputError(f"co3 accelerate.register: state must be a CO3State, "
                         f"got {type(state).__name__}")
    model.register_comm_hook(state, co3_hook)
    accelerator.register_for_checkpointing(CO3Checkpoint(state))
    if optimizer is not None:  # an AcceleratedOptimizer steps the optimizer it wraps
        state.guard(getattr(optimizer, "optimizer", optimizer), after=guard_steps)
    return state
