"""The gradient dump: raw per-layer, per-step gradients in HDF5, schema ``co3.gradients/1``.

A dump is what ``co3 capture`` writes and what ``co3 fit`` / ``co3 compress`` read. It is plain
HDF5, so anyone can write one with h5py alone::

    /                       root group
      attrs:
        schema         str    "co3.gradients/1"  (required; the reader accepts major version 1:
                              "co3.gradients/1" or "co3.gradients/1.<minor>")
        layers         str    JSON list of layer names in their natural (model) order (optional;
                              datasets it does not list follow in sorted order; without it
                              the reader sorts all names)
        task, model, optimizer, lr, seed, co3cli_version, torch_version,
        created (ISO 8601 UTC), config (JSON string)      provenance: what made the dump
        ...                   any other attributes are allowed and ignored by the reader
      grads/                group: one dataset per parameter
        <name>         float32 (steps, numel)   row i = the flattened gradient at steps[i]
          attrs: shape  int64 array             the parameter's shape; prod(shape) == numel
      steps            int64 (steps,)           training step index of each row (required)
      loss             float32 (steps,)         training loss at each step (optional)
      lr               float32 (steps,)         learning rate at each step (optional)
      ...                   other groups (e.g. ``co3/`` in a decompressed dump) are ignored

``steps`` is the commit record. A layer dataset (and ``loss``/``lr``) may have MORE rows than
``steps``: the reader uses the first ``len(steps)`` rows and ignores the rest, which are rows
an incremental writer preallocated or was writing when it was killed. Fewer rows is an error.

Extensions written by ``co3cli.recorder.GradientRecorder`` (all optional, all still
``co3.gradients/1``; readers that ignore them see an ordinary dump):

    attrs  streams     JSON list of stream names, e.g. ["raw", "decoded"]. When present the
                       layers are ``grads/<stream>/<param>`` (layer names ``raw/fc1.weight``);
                       when absent there is one stream and the layout is ``grads/<param>``.
    attrs  reduction   "per-step" (row = one step's gradient) or "epoch-mean" (row = the mean
                       of an epoch's gradients; ``steps`` then holds epoch numbers)
    attrs  aliases     JSON {alias: name}: tied parameters, recorded once under ``name``
    attrs  absent      JSON {param: reason}: selected parameters that were not recorded
                       (e.g. frozen, requires_grad=False)
    grads/<name> attrs dtype   storage type: "float32", "float16" or "bfloat16". h5py has no
                       bfloat16, so bfloat16 rows are stored as uint16 bit patterns (the high
                       half of the float32); ``read_layer`` returns float32 for every type.
                       The reader also accepts "float64" (a float64 dataset from another
                       tool; read rounded to float32, as the attribute declares).

Self-description for generic readers (h5ls, h5py, xarray; all optional, ``co3cli.dump.dims``):
the writers add a root ``description`` (what the file is, the ``len(steps)`` rule, which
commands read it), a ``description`` on bfloat16 layers (how to view the uint16 patterns), and
HDF5 dimension scales at the root, outside ``grads``: ``step`` (a copy of ``steps``) and
``entry_<numel>`` (no data), attached to every layer (xarray's h5netcdf engine shows the dims
``step`` x ``entry_4096`` instead of ``phony_dim_*``) and to ``steps``/``loss``/``lr``. A
dimension scale is never a layer, even inside ``grads``.

Layer names are dataset paths relative to ``grads``; the group is walked recursively, so
``grads/raw/fc1.weight`` is the layer ``raw/fc1.weight``. Rows are C-order flattenings of the
parameter (``g.reshape(-1)``). Writers should store float32. The reader's dtype policy: a layer
without a ``dtype`` attribute must be float32; float16 and float64 are read (as float32) only
when the ``dtype`` attribute names them, so nothing is rounded without the file saying so, and
an undeclared one is refused with a line saying how to fix it; integer datasets are refused
(except uint16 declared ``dtype="bfloat16"``). Any HDF5 layout or standard filter (chunked,
gzip) is read; ``read_layer`` returns float32.

Reading is lazy and validated. ``Dump.open`` checks the structure (schema version, ``grads``,
``steps``, ``loss``, every layer's rank, rows and ``shape`` attribute) without reading data;
``Dump.read_layer`` reads one layer (memory bounded by one layer) and applies the non-finite
policy: ``"error"`` rejects NaN/Inf, ``"zero"`` replaces them by 0 and counts them in
``Dump.nonfinite_counts``::

    with Dump.open("dump.h5") as d:
        for name in d.layers:
            g = d.read_layer(name)          # float32 (steps, numel)

Two writers. ``DumpWriter`` writes whole layers (layer-major, as ``co3 decompress`` decodes
them) to a temporary file that is renamed into place only on success, so a failed write never
leaves a half-written dump behind; HDF5 needs a seekable file, so writing to stdout (``-``) or
a file object spools to a temporary file and copies it out at the end. ``StepWriter`` (used by
the recorder, ``co3 capture`` and the simulators) writes one step at a time, crash-safely: to
the final path, flushing after every step and writing the ``steps`` row last, so a killed run
leaves a valid dump of the committed steps::

    with DumpWriter("dump.h5", {"task": "digits-mlp"}) as w:     # whole layers at once
        w.add_layer("fc1.weight", g, shape=(64, 64))               # g: (steps, 4096)
        w.set_steps(np.arange(steps), loss=loss)

    w = StepWriter("dump.h5", {"fc1.weight": (64, 64)}, attrs=attrs)   # or step by step
    for step, g, loss in training:                                     # g: float32 (4096,)
        w.write(step, {"fc1.weight": g}, loss=loss)
    w.close()

Modules: ``schema`` (the schema string, storage types, the checks the reader and writers
share), ``dims`` (descriptions and dimension scales), ``reader`` (``Dump``), ``writer`` (``DumpWriter``, ``write_dump``), ``step_writer``
(``StepWriter``), ``output`` (copying a finished dump to a stream, the disk-space check, the
gzip rewrite).
"""

from co3cli.dump.reader import Dump
from co3cli.dump.schema import (
    NONFINITE_POLICIES,
    SCHEMA,
    SCHEMA_MAJOR,
    STORAGE_DTYPES,
    bf16_to_float32,
)
from co3cli.dump.step_writer import StepWriter
from co3cli.dump.writer import DumpWriter, write_dump

__all__ = [
    "NONFINITE_POLICIES",
    "SCHEMA",
    "SCHEMA_MAJOR",
    "STORAGE_DTYPES",
    "Dump",
    "DumpWriter",
    "StepWriter",
    "bf16_to_float32",
    "write_dump",
]
