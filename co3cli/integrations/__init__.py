"""co3 in the training frameworks people use: transports over :mod:`co3cli.ddp`.

- :mod:`co3cli.integrations.lightning`: ``CO3DDPStrategy``, a Lightning ``DDPStrategy`` that
  registers :func:`co3cli.ddp.co3_hook` on any device (Lightning's own ``ddp_comm_hook``
  registers nothing unless the device is CUDA), saves every rank's co3 state into the one
  checkpoint file and fails loudly if the hook never ran.
- :mod:`co3cli.integrations.accelerate`: ``register(accelerator, model, state)``, the recipe
  after ``accelerator.prepare`` (``DistributedDataParallelKwargs(comm_hook=...)`` is ignored
  by Accelerate for anything but its built-in hooks), with the same checkpoint and guard.

- :mod:`co3cli.integrations.lightning_record`: ``RecordGradients``, a Lightning callback that
  records each optimizer step's gradients *after* Lightning's gradient clipping (in
  ``on_train_batch_end`` of a batch that stepped), with the loss, into a ``co3.gradients/1`` dump.
- :mod:`co3cli.integrations.hf`: ``RecordGradients``, a ``transformers.TrainerCallback`` that
  records in ``on_pre_optimizer_step`` (after ``max_grad_norm`` clipping, before the update;
  transformers >= 4.45), with the loss.

Lightning, Accelerate and transformers are optional extras (``pip install co3cli[lightning]``,
``co3cli[accelerate]``, ``co3cli[hf]``); each module imports its framework when imported.
"""
