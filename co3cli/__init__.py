"""co3cli: how many bits does a gradient really need?

Data flow (see README.md for the commands)::

    training run --capture--> dump.h5 --fit--> fits --codebook--> book.json
                                 |                                   |
                                 +-----------compress--------------> grads.co3 --decompress--> dump_q.h5
                                                                         |
                                               report: bits/entry vs entropy

    simulate fl, Flower, the DDP hook, the FSDP reduce-scatter:
                                 g --ErrorFeedback--> v --Compressor--> payload --> the wire
                                 (co3: grid + model table + coder; baselines: qsgd, topk, ...)

Layers (imports point downwards only; ``tests/test_layering.py`` enforces it, with no circles)::

    cli          co3cli.cli.*: one module per command group; parse, call one function, print
    transports   ddp (DDP comm hook), fsdp (FSDP2 reduce-scatter), integrations (Lightning,
                 Accelerate), flower (Flower Mod + strategy), recorder, capture, tasks, jobs,
                 simulate.* (FL engines, links and clock, UEP), demo
    compressors  co3cli.compressors: the contract, co3, baselines, error feedback (one of each)
    I/O          fileio, progress (bars, heartbeats), container (.co3 blocks, groups), dump (HDF5), data, codec,
                 references (which layer is coded given which), codebook, fitting, report
    core         errors, registry, checks, varint, detmath (exp/log/pow, the same bits on every
                 machine), formats (grids), quantize, scales, models, mixture,
                 coding (huffman, ans, ctx), tables (model -> integer table)

Every pluggable kind (grids, scale rules, models, coders, compressors, UEP codes, tasks) is one
:class:`co3cli.registry.Registry`: a stable id, a config dict, ``from_config``.

References:
  Z.-J. Chen, E. E. Hernandez, Y.-C. Huang, S. Rini, "DNN gradient lossless compression: Can
  GenNorm be the answer?", ICC 2022, arXiv:2111.07599 (models, tables, codec);
  Z.-J. Chen, E. E. Hernandez, Y.-C. Huang, S. Rini, "Convert, compress, correct: Three steps
  toward communication-efficient DNN training", arXiv:2203.09044 (compressors, error feedback);
  B. Tegin, E. E. Hernandez, S. Rini, T. M. Duman, "Straggler mitigation through unequal error
  protection for distributed approximate matrix multiplication", IEEE JSAC 40(2), 2022,
  doi:10.1109/JSAC.2021.3118350 (co3cli.simulate.uep).
"""

__version__ = "0.1.0"

from co3cli.errors import Co3Error, CorruptDataError, InputError  # noqa: E402

__all__ = ["__version__", "Co3Error", "CorruptDataError", "GradientRecorder", "InputError"]


def __getattr__(name: str):
    # lazy, so that ``import co3cli`` does not import torch/h5py
    if name == "GradientRecorder":
        from co3cli.recorder import GradientRecorder

        return GradientRecorder
    raise AttributeError(f"module 'co3cli' has no attribute {name!r}")
