"""The compressor contract: what a sender turns a gradient into, as bytes, and back.

::

    sender:    v (float32, 1-D) --compress(v, state, rng)--> Packet(payload: bytes, v_hat, ...)
    receiver:  payload --decompress(payload, numel, state)--> v_hat   (bit-identical to the sender's)

What travels is ``payload`` (its length is what a run is charged); what stays local is
``state``: one dict per (sender, tensor) on each side, kept across calls (a fitted table, a
scale, a call counter). The receiver's state is built only from payloads. Error feedback is not a
compressor's business: :class:`co3cli.compressors.feedback.ErrorFeedback` sends
``v = g + gamma * e`` and keeps ``e = v - v_hat``, so every compressor gets it the same way, under
every transport (the FL engines, the DDP hook).

Transports may put ``"cols"`` (the row length of the tensor's 2-D view,
:func:`co3cli.coding.row_length`) in both states; context-modelling coders use it.

Compressors are registered in ``COMPRESSORS`` (``get_compressor(id, **params)``); a new one is a
:class:`Compressor` subclass in its own module plus one ``@COMPRESSORS.register`` line. A payload
that does not decode exactly (truncated, corrupt, a table it needs was never sent) raises
``CorruptDataError``; bad parameters raise ``InputError``.

A transport that cannot keep a state object between calls (a Flower client, recreated every
round, keeps only plain records) exports it with ``export_state(state)`` (plain values: int,
float, str, bytes, bool, float arrays; the caches named in ``DERIVED_STATE`` are dropped and
rebuilt on use) and rebuilds it with ``import_state(doc)``; the calls after that produce the
same bytes as with the original state.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from co3cli.quantize import as_f32_1d
from co3cli.registry import Configurable, Registry

COMPRESSORS: Registry = Registry("compressor")


@dataclass
class Packet:
    """One compressed tensor: the bytes sent, what the receiver will decode, side figures."""

    payload: bytes
    v_hat: np.ndarray  # float32, what decompress(payload) returns, bit for bit
    entropy_bits: float | None = None  # empirical entropy of the coded symbols, if any
    # scale computations in this call whose rule handed over to another (co3cli.scales.ScaleResult,
    # e.g. co3-poly outside its beta range); transports sum it into their metrics
    scale_fallbacks: int = 0


def get_compressor(id: str, **params: Any) -> Compressor:
    """A configured compressor; unknown ids and bad parameters raise InputError."""
    return COMPRESSORS.build(id, **params)


class Compressor(Configurable, abc.ABC):
    """Base class: subclasses set ``id``, ``PARAMS`` (name -> default) and the two methods."""

    kind: ClassVar[str] = "compressor"
    stochastic: ClassVar[bool] = False  # uses the rng given to compress
    receiver_state: ClassVar[bool] = False  # the decoder learns state from payloads (tables)
    DERIVED_STATE: ClassVar[tuple[str, ...]] = ()  # state caches export_state drops

    def export_state(self, state: dict) -> dict[str, Any]:
        """``state`` as plain values (see the module docstring); InputError on an object that
        a subclass did not teach it to export."""
        out: dict[str, Any] = {}
        for key, value in state.items():
            if key in self.DERIVED_STATE:
                continue
            if isinstance(value, np.generic):
                value = value.item()
            if isinstance(value, np.ndarray):
                out[key] = value.copy()
            elif isinstance(value, (bool, int, float, str, bytes)):
                out[key] = value
            else:
                from co3cli.errors import InputError

                raise InputError(f"{self.id}: state entry {key!r} ({type(value).__name__}) "
                                 "cannot be exported; override export_state/import_state")
        return out

    def import_state(self, doc: dict[str, Any]) -> dict:
        """The state ``export_state`` exported (a new dict)."""
        return dict(doc)

    @abc.abstractmethod
    def compress(self, v: np.ndarray, state: dict, rng: np.random.Generator) -> Packet:
        """``v`` float32 1-D -> the payload and ``v_hat`` (see the module docstring)."""

    @abc.abstractmethod
    def decompress(self, payload: bytes, numel: int, state: dict) -> np.ndarray:
        """The payload -> ``v_hat`` (float32, ``numel`` entries), bit-identical to compress's."""


@COMPRESSORS.register
class NoCompression(Compressor):
    """float32 as is: 32 bits per entry, the reference."""

    id = "none"

    def compress(self, v, state, rng):
        v = as_f32_1d(v)
        return Packet(v.astype("<f4").tobytes(), v.copy(), None)

    def decompress(self, payload, numel, state):
        from co3cli.errors import CorruptDataError

        if len(payload) != 4 * numel:
            raise CorruptDataError(f"none: payload has {len(payload)} bytes, expected {4 * numel}")
        return np.frombuffer(payload, dtype="<f4").astype(np.float32)
