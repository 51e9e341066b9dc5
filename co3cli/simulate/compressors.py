"""Gradient compressors for the simulators: what a client turns a gradient into, as bytes.

::

    client:  v (float32, 1-D) --compress(v, state, rng)--> Packet(payload: bytes, v_hat, ...)
    server:  payload --decompress(payload, numel, state)--> v_hat   (bit-identical to the client's)

What travels is ``payload`` (its length is what a run is charged); what stays local is
``state``: one dict per (client, layer) on each side, kept across rounds (a fitted table, a
scale, a round counter). The receiver's state is built only from payloads. Error feedback is
not a compressor's business: the engine sends ``v = g + gamma * e`` and keeps ``e = v - v_hat``,
so every compressor gets it the same way.

Registered ids (``get_compressor(id, **params)``): ``none`` (float32, 32 bits/entry) and ``co3``
here; the baselines ``qsgd``, ``topk``, ``signsgd``, ``sketch`` and ``tinyscript`` in
``co3cli.simulate.baselines``. A payload that does not decode exactly (truncated, corrupt, a
table it needs was never sent) raises ``CorruptDataError``; bad parameters raise ``InputError``.

``co3`` payload (one layer, one round)::

    flags u8 (bit 0: a new table follows) | scale f32 LE
    | [uvarint(len) + table bytes]           (when bit 0 is set: refit rounds)
    | coded symbols                         (the coder's self-delimiting payload)

``coder``: ``ans`` (default), ``huffman`` or ``ctx`` (context-adaptive, several times smaller on
gradient matrices and several times slower). Engines may put ``"cols"`` (the row length of the
tensor's 2-D view, ``co3cli.codec.row_length``) in both states; ``ctx`` uses it for its 2-D
contexts, the order-0 coders ignore it.

The client refits the symbol model (``model``, gennorm-zi by default) and the scale rule every
``refit_every`` calls and sends the new table once; in between, the scale follows the
gradient's magnitude (``scale = s_fit * rms_fit / rms``: every scale rule is scale-equivariant)
and the table is reused. A symbol the table cannot code forces a refit.
"""

from __future__ import annotations

import abc
import math
import struct
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from co3cli.errors import CorruptDataError, InputError

COMPRESSORS: dict[str, type[Compressor]] = {}


@dataclass
class Packet:
    """One compressed layer: the bytes sent, what the receiver will decode, side figures."""

    payload: bytes
    v_hat: np.ndarray  # float32, what decompress(payload) returns, bit for bit
    entropy_bits: float | None = None  # empirical entropy of the coded symbols, if any


def register(cls: type[Compressor]) -> type[Compressor]:
    if cls.id in COMPRESSORS:
        raise InputError(f"compressor {cls.id!r} is already registered")
    COMPRESSORS[cls.id] = cls
    return cls


def get_compressor(id: str, **params: Any) -> Compressor:
    """A configured compressor; unknown ids and bad parameters raise InputError."""
    import importlib

    importlib.import_module("co3cli.simulate.baselines")  # registers the baselines

    if id not in COMPRESSORS:
        raise InputError(f"unknown compressor {id!r}; allowed: {', '.join(sorted(COMPRESSORS))}")
    return COMPRESSORS[id](**params)


class Compressor(abc.ABC):
    """Base class: subclasses set ``id``, ``PARAMS`` (name -> default) and the two methods."""

    id: ClassVar[str] = ""
    PARAMS: ClassVar[dict[str, Any]] = {}
    stochastic: ClassVar[bool] = False  # uses the rng given to compress
    receiver_state: ClassVar[bool] = False  # the decoder learns state from payloads (tables)

    def __init__(self, **params: Any):
        unknown = sorted(set(params) - set(self.PARAMS))
        if unknown:
            allowed = ", ".join(self.PARAMS) or "none"
            raise InputError(f"compressor {self.id!r}: unknown parameter(s) {unknown}; "
                             f"allowed: {allowed}")
        self.params = {**self.PARAMS, **{k: v for k, v in params.items() if v is not None}}
        self.check()

    def check(self) -> None:
        """Validate ``self.params`` (raise InputError)."""

    def config(self) -> dict[str, Any]:
        return {"id": self.id, **self.params}

    @abc.abstractmethod
    def compress(self, v: np.ndarray, state: dict, rng: np.random.Generator) -> Packet:
        """``v`` float32 1-D -> the payload and ``v_hat`` (see the module docstring)."""

    @abc.abstractmethod
    def decompress(self, payload: bytes, numel: int, state: dict) -> np.ndarray:
        """The payload -> ``v_hat`` (float32, ``numel`` entries), bit-identical to compress's."""


def _f32(v: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(v, dtype=np.float32).reshape(-1)


def entropy_bits(counts: np.ndarray) -> float:
    """Empirical order-0 entropy (bits) of a symbol histogram, times its size."""
    c = np.asarray(counts, dtype=np.float64)
    c = c[c > 0]
    n = c.sum()
    return float(-(c * np.log2(c / n)).sum()) if n else 0.0


@register
class NoCompression(Compressor):
    """float32 as is: 32 bits per entry, the reference."""

    id = "none"

    def compress(self, v, state, rng):
        v = _f32(v)
        return Packet(v.astype("<f4").tobytes(), v.copy(), None)

    def decompress(self, payload, numel, state):
        if len(payload) != 4 * numel:
            raise CorruptDataError(f"none: payload has {len(payload)} bytes, expected {4 * numel}")
        return np.frombuffer(payload, dtype="<f4").astype(np.float32)


@register
class CO3(Compressor):
    """Convert (a float grid), compress (an entropy coder with a model table), see module doc."""

    id = "co3"
    receiver_state = True
    PARAMS = {"format": "fp8-e5m2", "scale": None, "coder": "ans", "model": "gennorm-zi",
              "refit_every": 10}
    CODERS = ("ans", "huffman", "ctx")

    def check(self) -> None:
        from co3cli.formats import get_grid
        from co3cli.models import MODELS

        p = self.params
        self.grid = get_grid(p["format"])
        if p["coder"] not in self.CODERS:
            raise InputError(f"co3: coder {p['coder']!r} is not one of {', '.join(self.CODERS)}")
        if p["model"] not in MODELS and p["model"] not in ("gennorm2-zi",):
            raise InputError(f"co3: unknown model {p['model']!r}")
        r = p["refit_every"]
        if isinstance(r, bool) or not isinstance(r, int) or r < 1:
            raise InputError(f"co3: refit_every={r!r} must be an integer >= 1")
        from co3cli.coding import get_coder

        self.coder = get_coder(p["coder"])
        if p["scale"] is not None:  # validated once, on a tiny tensor
            from co3cli.quantize import compute_scale

            compute_scale(np.ones(4, np.float32), self.grid, p["scale"])

    def _refit(self, v: np.ndarray, state: dict, rms: float) -> bytes:
        from co3cli import codebook as cb
        from co3cli.quantize import compute_scale, quantize

        scale = compute_scale(v, self.grid, self.params["scale"])
        _, counts = quantize(v, self.grid, scale, with_counts=True)
        weights, _ = cb.model_weights(v[None, :], np.array([scale], np.float32), counts,
                                      self.grid, self.params["model"])
        table = self.coder.table_from_weights(weights)
        state.update(table=table, scale_fit=float(scale), rms_fit=rms, calls=0)
        state.pop("uncodable", None)  # derived from the table on first use
        return table.to_bytes()

    def compress(self, v, state, rng):
        from co3cli.quantize import dequantize, quantize
        from co3cli.varint import uvarints_to_bytes

        v = _f32(v)
        rms = math.sqrt(float(np.dot(v, v)) / v.size)
        table_bytes = b""
        if "table" not in state or state["calls"] >= self.params["refit_every"]:
            table_bytes = self._refit(v, state, rms)
        scale = self._scale(state, rms)
        sym, counts = quantize(v, self.grid, scale, with_counts=True)
        if not table_bytes and np.any(counts[self._uncodable(state)]):
            table_bytes = self._refit(v, state, rms)  # a symbol the old table cannot code
            scale = self._scale(state, rms)
            sym, counts = quantize(v, self.grid, scale, with_counts=True)
        state["calls"] += 1
        head = struct.pack("<Bf", 1 if table_bytes else 0, scale)
        if table_bytes:
            head += uvarints_to_bytes([len(table_bytes)]) + table_bytes
        body = state["table"].encode(sym, cols=state.get("cols"))
        return Packet(head + body, dequantize(sym, self.grid, scale), entropy_bits(counts))

    @staticmethod
    def _uncodable(state: dict) -> np.ndarray:
        """Symbols the state's table cannot code (bool per symbol), cached in the state."""
        if "uncodable" not in state:
            from co3cli.codebook import table_ints

            state["uncodable"] = table_ints(state["table"]) == 0
        return state["uncodable"]

    @staticmethod
    def _scale(state: dict, rms: float) -> np.float32:
        if state["rms_fit"] > 0 and rms > 0:
            s = np.float32(state["scale_fit"] * state["rms_fit"] / rms)
            if math.isfinite(float(s)) and s > 0:
                return s
        return np.float32(state["scale_fit"])

    def decompress(self, payload, numel, state):
        from co3cli.quantize import dequantize
        from co3cli.varint import uvarints_from_bytes

        if len(payload) < 5:
            raise CorruptDataError(f"co3: payload of {len(payload)} bytes is truncated")
        flags, scale = struct.unpack_from("<Bf", payload, 0)
        if flags not in (0, 1) or not (math.isfinite(scale) and scale > 0):
            raise CorruptDataError(f"co3: bad payload header (flags {flags}, scale {scale})")
        pos = 5
        if flags:
            (n,), used = uvarints_from_bytes(payload[pos:pos + 9], 1, "co3 table length")
            pos += used
            if pos + int(n) > len(payload):
                raise CorruptDataError("co3: table truncated")
            state["table"] = self.coder.table_from_bytes(payload[pos:pos + int(n)], self.grid.nsym)
            pos += int(n)
        if "table" not in state:
            raise CorruptDataError("co3: payload needs a table that was never sent")
        sym = state["table"].decode(payload[pos:], numel, cols=state.get("cols"))
        return dequantize(sym, self.grid, np.float32(scale))
