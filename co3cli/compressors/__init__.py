"""Gradient compressors, below every transport (FL engines, the DDP hook, future ones).

::

    g --ErrorFeedback.correct--> v --Compressor.compress--> Packet(payload, v_hat) --> the wire
                                  e = v - v_hat <--ErrorFeedback.update--+
    the wire --Compressor.decompress(payload, numel, receiver state)--> v_hat

Modules: :mod:`~co3cli.compressors.base` (the contract, ``COMPRESSORS`` registry, ``none``),
:mod:`~co3cli.compressors.co3` (``co3``: grid + model table + entropy coder),
:mod:`~co3cli.compressors.baselines` (``qsgd``, ``topk``, ``signsgd``, ``sketch``,
``tinyscript``), :mod:`~co3cli.compressors.feedback` (error feedback with decay gamma),
:mod:`~co3cli.compressors.device` (``co3`` with its error feedback as torch ops on the
tensor's device, bit-identical to the numba path: the DDP/FSDP GPU-bucket path).
Transports import from here; they implement neither a compressor nor error feedback themselves.
"""

from co3cli.compressors.base import COMPRESSORS, Compressor, NoCompression, Packet, get_compressor
from co3cli.compressors.co3 import CO3
from co3cli.compressors import baselines  # noqa: F401  (registers the baselines)
from co3cli.compressors.feedback import ErrorFeedback

__all__ = ["COMPRESSORS", "CO3", "Compressor", "ErrorFeedback", "NoCompression", "Packet",
           "baselines", "get_compressor"]
