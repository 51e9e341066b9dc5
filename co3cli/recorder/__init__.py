"""Record a training loop's gradients into a ``co3.gradients/1`` dump, from your own code.

::

    your loop: loss.backward() --rec.step(loss=loss)--> p.grad of the selected parameters
        --cast (float32 | float16 | bfloat16), NaN/Inf policy--> StepWriter.write --> dump.h5

    from co3cli import GradientRecorder
    with GradientRecorder(model, "dump.h5", every=10, layers="*.weight") as rec:
        for x, y in loader:
            loss = loss_fn(model(x), y); opt.zero_grad(); loss.backward()
            rec.step(loss=loss)          # records p.grad on every 10th call (steps 0, 10, ...)
            opt.step()

The dump is written incrementally to its final path and flushed after each recorded step
(``co3cli.dump.StepWriter``), so a killed run leaves a valid dump of the steps committed so far
(with the default background writer, ``background=True``, all but at most the last two handed
over; ``co3cli.recorder.background`` says how ``.grad`` tensors are borrowed without a copy and
checked). The schema extensions ``streams``, ``reduction``, ``aliases``, ``absent`` and the
layer attribute ``dtype`` are described in ``co3cli.dump``. Memory is bounded: each gradient
is copied to the CPU once, written and dropped (``average=True`` keeps one float64 sum per
parameter).

Options, each an explicit recorded choice (``config`` root attribute):

* selection: ``layers`` = comma-separated globs over parameter names (``"*.weight,fc2.*"``) or
  ``"re:<regex>"`` (``re.fullmatch``); ``every=N`` (steps ``s % N == 0``) or ``steps=[...]``.
* ``dtype``: storage type, ``"float32"`` (default), ``"float16"`` or ``"bfloat16"``.
* ``on_nonfinite``: NaN/Inf in a recorded value: ``"error"`` (default), ``"skip"`` the step
  (counted in ``steps_skipped``) or ``"record"`` as is.
* ``on_missing``: a selected trainable parameter whose ``.grad`` is None: ``"error"`` (default)
  or ``"skip"`` the step. Zeros are never written in its place. Frozen parameters
  (``requires_grad=False``) are not recorded; the root attribute ``absent`` lists them.
* tied parameters (one tensor under several names) are recorded once under the first name;
  the root attribute ``aliases`` maps each other name to it.
* ``streams=("raw", "decoded")``: several values per parameter (what a compressor
  transmitted, ...): ``rec.step(streams={"decoded": {name: tensor}})``; ``raw`` is ``p.grad``.
* ``average=True``: ``step`` accumulates, ``end_epoch`` writes the epoch mean as one row
  (``steps`` = epoch numbers, ``reduction="epoch-mean"``).
* ``background=True`` (default): ``step`` hands the step to a writer thread and returns; the
  writer's errors (NaN/Inf, I/O, a borrowed tensor modified in place) are raised by the next
  ``step``, ``flush`` or ``close``. ``background=False`` writes inside ``step``. In-place
  writes that bypass autograd's version counter (through ``.data`` or ``.numpy()`` views) after
  ``step`` are not detected: use ``background=False`` in such loops.
* ``resume=True``: append to an existing dump with the same layout (without it, an existing
  file at ``path`` is replaced).

Step indices count ``step`` calls from 0 (on resume: from the last committed step + 1), or are
given explicitly with ``rec.step(step=...)`` (epoch indices: ``rec.end_epoch(epoch=...)``).
``rec.set_attrs(final_loss=..., ...)`` adds root attributes known only at the end of training;
they are written when the recorder closes (and only if the dump holds a step).
"""

from co3cli.recorder.gradient_recorder import (
    DTYPES,
    MISSING_POLICIES,
    NONFINITE_POLICIES,
    GradientRecorder,
)
from co3cli.recorder.select import select

__all__ = ["DTYPES", "MISSING_POLICIES", "NONFINITE_POLICIES", "GradientRecorder", "select"]
