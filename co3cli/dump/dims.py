"""What makes a dump explain itself to generic HDF5 readers (h5ls, h5py, xarray/h5netcdf):
short ``description`` attributes and HDF5 dimension scales ``step`` x ``entry_<numel>``.

::

    /                     attrs description = DESCRIPTION (what the file is, the len(steps) rule,
                          which commands read it)
      step        int64 (steps,)   dimension scale "step": the training step of each row, a copy
                                   of ``steps`` (the coordinate xarray shows)
      entry_<n>   (n,)             netCDF-style dimension without data (no storage): one per
                                   distinct layer size n
      steps, loss, lr              attached to ``step``
      grads/<layer>                dims[0] = step, dims[1] = entry_<numel>
                                   bf16 layers: attrs description = BF16_DESCRIPTION

The scales live at the root, outside ``grads``, so a reader that takes every dataset under
``grads`` for a layer (co3cli before this module, or any other) never meets them; the reader
also skips a dimension scale inside ``grads`` (a dump written by xarray). Everything is optional:
dumps without it (older ones, or one a writer was killed before closing) read the same. Written
by ``DumpWriter`` and ``StepWriter`` when they close (:func:`attach_dims`).
"""

from __future__ import annotations

import numpy as np

DESCRIPTION = (
    "co3 gradient dump (schema co3.gradients/1). grads/<layer> holds one row per recorded step: "
    "the parameter's gradient flattened in C order (its shape is the dataset attribute 'shape'); "
    "steps holds the training step of each row, loss and lr (optional) one value per row. "
    "Use only the first len(steps) rows of every dataset: later rows were preallocated or were "
    "being written when the writer stopped. Read with co3cli.dump.Dump; commands: co3 fit, "
    "co3 compress, co3 report, co3 codebook build."
)
"""The root ``description`` every writer adds (unless given its own)."""

BF16_DESCRIPTION = (
    "bfloat16 gradients stored as uint16 bit patterns (the top 16 bits of a float32; HDF5 has no "
    "bfloat16). As float32: (x.astype('uint32') << 16).view('float32'); with ml_dtypes: "
    "x.view(ml_dtypes.bfloat16). co3cli.dump.Dump.read_layer returns float32."
)
"""The ``description`` of a layer stored as bfloat16 (``dtype`` attribute ``"bfloat16"``)."""

STEP = "step"
MAX_ATTACHED = 4000
"""Datasets one scale is attached to at most: HDF5 keeps a scale's back-references in one
attribute of its object header, at most 64 KiB (about 4,090 references with HDF5 2.0); a dump
of more layers (a mixture-of-experts model's) gets no scales (they are optional)."""
_NOT_A_VARIABLE = "This is a netCDF dimension but not a netCDF variable."


def entry_dim(numel: int) -> str:
    return f"entry_{int(numel)}"


def is_dimension_scale(ds) -> bool:
    """Whether an h5py dataset is an HDF5 dimension scale (never a layer)."""
    cls = ds.attrs.get("CLASS")
    return cls in (b"DIMENSION_SCALE", "DIMENSION_SCALE")


def attach_dims(h5, layers, nrows: int) -> bool:
    """Create (or bring up to date) the ``step`` and ``entry_<numel>`` scales of an open, writable
    dump and attach them to ``grads/<layer>`` (``layers``: the layer names) and ``steps`` /
    ``loss`` / ``lr``; ``nrows`` rows are committed. Idempotent (a resumed dump keeps its scales,
    ``step`` is resized). Returns False, changing nothing, when a root name it needs is taken
    by something else or there are more than ``MAX_ATTACHED`` layers and lists."""
    if len(layers) + 3 > MAX_ATTACHED:
        return False
    grads = h5["grads"]
    numels = sorted({int(grads[n].shape[1]) for n in layers})
    names = [STEP] + [entry_dim(n) for n in numels]
    if any(n in h5 and not is_dimension_scale(h5[n]) for n in names):
        return False
    steps = np.asarray(h5["steps"][:nrows], dtype=np.int64)
    if STEP in h5:
        step = h5[STEP]
        step.resize((nrows,))
        step[...] = steps
    else:
        step = h5.create_dataset(STEP, data=steps, maxshape=(None,), chunks=(256,))
        step.make_scale(STEP)
    for n in numels:
        if entry_dim(n) not in h5:  # no data is written: no storage is allocated
            h5.create_dataset(entry_dim(n), shape=(n,), dtype=np.float32).make_scale(
                f"{_NOT_A_VARIABLE}{n:10d}")
    for name in layers:
        ds = grads[name]
        _attach(ds, 0, step, STEP)
        _attach(ds, 1, h5[entry_dim(ds.shape[1])], "entry")
    for key in ("steps", "loss", "lr"):
        if key in h5:
            _attach(h5[key], 0, step, STEP)
    return True


def _attach(ds, axis: int, scale, label: str) -> None:
    dim = ds.dims[axis]
    if len(dim) == 0:
        dim.attach_scale(scale)
        dim.label = label
