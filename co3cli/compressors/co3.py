"""The ``co3`` compressor: convert (a float grid), compress (an entropy coder with a model table).

::

    v --scale (refit: the scale rule; between refits: s_fit * rms_fit / rms)--> y = v * s
      --quantize (the grid)--> symbols --table.encode--> payload;  v_hat = dequantize(symbols) / s

``co3`` payload (one tensor, one call)::

    flags u8 (bit 0: a new table follows) | scale f32 LE
    | [uvarint(len) + table bytes]           (when bit 0 is set: refit calls)
    | coded symbols                         (the coder's self-delimiting payload)

``coder``: any registered coder (:data:`co3cli.coding.CODERS`: ``ans`` by default, ``huffman``,
``ctx``, context-adaptive and several times smaller on gradient matrices, several times slower);
``ctx`` takes the ``"cols"`` the transport puts in both states for its 2-D contexts.

``coder="ctx-steps"`` (context across steps, :mod:`co3cli.coding.ctx_steps`): sender and receiver
each keep the tensor's coding stream in their state (``"stream"``: the model and the last
decoded symbols), so each call is coded given the previous one. The flags byte then also carries
the stream position: ``flags = table bit | (steps since the key step mod 128) << 1``. Position 0
is a key step (coded alone: the receiver resets its stream); every refit (a new table) and every
``key_every`` calls start one. The receiver checks the position against its own stream: a
receiver without the previous step (a state lost, or restored from another point) refuses the
packet with one CorruptDataError line instead of decoding garbage. A client that skips rounds
keeps its stream, as the server keeps that client's, so they stay in step. ``export_state``
carries the stream (its bytes), so an exported and re-imported state codes the same bytes.

The sender refits the symbol model (``model``, any of :data:`co3cli.tables.TABLE_MODELS`,
gennorm-zi by default) and the scale rule every ``refit_every`` calls and sends the new table
once; in between, the scale follows the gradient's magnitude (``scale = s_fit * rms_fit / rms``:
every scale rule is scale-equivariant) and the table is reused. A symbol the table cannot code
forces a refit. The model is fitted to a deterministic sample of ``fit_entries`` entries
(16,384 by default; the table still covers every symbol of the full counts): on the bundled
MNIST dump that changes the payload by -0.001 % (fp8) / -0.009 % (fp4) against a fit to every
entry and makes a refit ~3x cheaper. A refit whose scale rule fell back to another (:class:`co3cli.scales.ScaleResult`:
``co3-poly`` outside its beta range) sets ``Packet.scale_fallbacks`` and counts in the sender
state's ``"scale_fallbacks"`` (its last reason in ``"scale_fallback_reason"``).

Reference: Z.-J. Chen, E. E. Hernandez, Y.-C. Huang, S. Rini, "Convert, compress, correct: Three
steps toward communication-efficient DNN training", arXiv:2203.09044; the model-based table from
"DNN gradient lossless compression: Can GenNorm be the answer?", arXiv:2111.07599.
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass

import numpy as np

from co3cli.checks import check_int
from co3cli.coding import CODERS
from co3cli.compressors.base import COMPRESSORS, Compressor, Packet
from co3cli.errors import CorruptDataError, InputError
from co3cli.quantize import as_f32_1d, dequantize, dequantize_table, quantize
from co3cli.tables import entropy_bits
from co3cli.varint import uvarints_from_bytes, uvarints_to_bytes


@dataclass
class Frame:
    """One call's sender decisions (:meth:`CO3.frame`): the scale, the payload head (flags,
    scale, a new table), the caller's quantized ``(symbols, counts)``, the ctx-steps stream
    (or None) and whether the scale rule fell back."""

    scale: np.float32
    head: bytes
    quantized: tuple
    stream: object
    fell_back: int

    def encode(self, state: dict, sym: np.ndarray) -> bytes:
        """The coded symbols (host array): in the stream, or with the state's table."""
        if self.stream is not None:
            return self.stream.encode(sym)
        return state["table"].encode(sym, cols=state.get("cols"))


@COMPRESSORS.register
class CO3(Compressor):
    """Convert (a float grid), compress (an entropy coder with a model table), see module doc."""

    id = "co3"
    receiver_state = True
    PARAMS = {"format": "fp8-e5m2", "scale": None, "coder": "ans", "model": "gennorm-zi",
              "refit_every": 10, "fit_entries": 1 << 14}
    DERIVED_STATE = ("uncodable",)

    def export_state(self, state):
        """The table travels as its bytes (``to_bytes``, what a refit payload carries)."""
        doc = super().export_state({k: v for k, v in state.items() if k not in ("table", "stream")})
        if "table" in state:
            doc["table"] = state["table"].to_bytes()
        if "stream" in state:
            doc["stream"] = state["stream"].to_bytes()
        return doc

    def import_state(self, doc):
        state = dict(doc)
        if "table" in state:
            state["table"] = self.coder.table_from_bytes(bytes(state["table"]), self.grid.nsym)
        if "stream" in state:
            from co3cli.coding.ctx_steps import CtxStepsStream

            state["stream"] = CtxStepsStream.from_bytes(state["table"], bytes(state["stream"]))
        return state

    def check(self) -> None:
        from co3cli.formats import get_grid
        from co3cli.scales import compute_scale
        from co3cli.tables import TABLE_MODELS

        p = self.params
        check_int("refit_every", p["refit_every"], lo=1, who="co3: ")
        check_int("fit_entries", p["fit_entries"], lo=256, who="co3: ")
        try:
            self.grid = get_grid(p["format"])
            self.coder = CODERS.build(p["coder"])
            self.steps = hasattr(getattr(self.coder, "TABLE", None), "stream")  # ctx-steps
            TABLE_MODELS.check(p["model"])
            if p["scale"] is not None:  # validated once, on a tiny tensor
                compute_scale(np.ones(4, np.float32), self.grid, p["scale"])
        except InputError as e:
            raise InputError(f"co3: {e}") from None

    def _refit(self, v: np.ndarray, state: dict, rms: float) -> tuple[bytes, int]:
        """New scale and table in ``state``; the table's bytes and 1 if the scale rule fell back."""
        from co3cli.scales import fit_sample, scale_info
        from co3cli.tables import model_weights

        info = scale_info(v, self.grid, self.params["scale"])
        scale = info.scale
        if info.fallback:
            state["scale_fallbacks"] = state.get("scale_fallbacks", 0) + 1
            state["scale_fallback_reason"] = info.reason
        _, counts = quantize(v, self.grid, scale, with_counts=True)
        # the model is fitted to a deterministic sample (``fit_entries``), the table covers
        # every symbol of the full counts: a refit round costs a few normal rounds, not ten
        sample = fit_sample(v, self.params["fit_entries"])
        weights, _ = model_weights(sample[None, :], np.array([scale], np.float32), counts,
                                   self.grid, self.params["model"])
        table = self.coder.table_from_weights(weights)
        state.update(table=table, scale_fit=float(scale), rms_fit=rms, calls=0)
        state.pop("uncodable", None)  # derived from the table on first use
        return table.to_bytes(), int(info.fallback)

    def compress(self, v, state, rng):
        v = as_f32_1d(v)
        rms = math.sqrt(float(np.dot(v, v)) / v.size)
        frame = self.frame(state, rms, v.size, lambda: v,
                           lambda scale: quantize(v, self.grid, scale, with_counts=True))
        sym, counts = frame.quantized
        return Packet(frame.head + frame.encode(state, sym),
                      dequantize(sym, self.grid, frame.scale), entropy_bits(counts),
                      scale_fallbacks=frame.fell_back)

    def frame(self, state: dict, rms: float, numel: int, values, quantize_at) -> Frame:
        """The sender's decisions for one call, shared by every path that quantizes (this
        class's numba path, :mod:`co3cli.compressors.device`'s torch ops): refit when due or
        when a symbol the table cannot code appears, the scale, the stream position and the
        payload head. ``values()``: the tensor as a host float32 array (called on refits only);
        ``quantize_at(scale)``: ``(symbols, counts)`` in the caller's own arrays."""
        table_bytes, fell_back = b"", 0
        if "table" not in state or state["calls"] >= self.params["refit_every"]:
            table_bytes, fell_back = self._refit(values(), state, rms)
        scale = self._scale(state, rms)
        quantized = quantize_at(scale)
        if not table_bytes and np.any(quantized[1][self._uncodable(state)]):
            table_bytes, fell_back = self._refit(values(), state, rms)  # a symbol the table cannot code
            scale = self._scale(state, rms)
            quantized = quantize_at(scale)
        state["calls"] += 1
        pos, stream = 0, None
        if hasattr(state["table"], "stream"):  # context across steps: the stream's position
            stream = self._stream(state, numel, bool(table_bytes))
            pos = 0 if stream.next_is_key else stream.since_key % 128
        head = struct.pack("<Bf", (1 if table_bytes else 0) | pos << 1, scale)
        if table_bytes:
            head += uvarints_to_bytes([len(table_bytes)]) + table_bytes
        return Frame(scale, head, quantized, stream, fell_back)

    @staticmethod
    def _stream(state: dict, numel: int, new_table: bool):
        """The state's ``ctx-steps`` stream (a new one with a new table or another size)."""
        stream = state.get("stream")
        if new_table or stream is None or stream.n != numel:
            stream = state["stream"] = state["table"].stream(numel, state.get("cols"))
        return stream

    def _stream_decode(self, state: dict, pos: int, body: bytes, numel: int, new_table: bool):
        stream = self._stream(state, numel, new_table)
        if pos == 0:
            stream.reset()
        elif stream.next_is_key or stream.since_key % 128 != pos:
            raise CorruptDataError(
                f"co3: ctx-steps packet {pos} step(s) after its key step, this receiver's stream "
                f"is at {0 if stream.next_is_key else stream.since_key % 128} (a state lost or "
                "restored out of step; the sender's next key step resynchronises)")
        return stream.decode(body)

    @staticmethod
    def _uncodable(state: dict) -> np.ndarray:
        """Symbols the state's table cannot code (bool per symbol), cached in the state."""
        if "uncodable" not in state:
            state["uncodable"] = state["table"].ints() == 0
        return state["uncodable"]

    @staticmethod
    def _scale(state: dict, rms: float) -> np.float32:
        if state["rms_fit"] > 0 and rms > 0:
            s = np.float32(state["scale_fit"] * state["rms_fit"] / rms)
            if math.isfinite(float(s)) and s > 0:
                return s
        return np.float32(state["scale_fit"])

    def decompress(self, payload, numel, state):
        if len(payload) < 5:
            raise CorruptDataError(f"co3: payload of {len(payload)} bytes is truncated")
        flags, scale = struct.unpack_from("<Bf", payload, 0)
        if (flags > 1 and not self.steps) or not (math.isfinite(scale) and scale > 0):
            raise CorruptDataError(f"co3: bad payload header (flags {flags}, scale {scale})")
        pos = 5
        if flags & 1:
            (n,), used = uvarints_from_bytes(payload[pos:pos + 9], 1, "co3 table length")
            pos += used
            if pos + int(n) > len(payload):
                raise CorruptDataError("co3: table truncated")
            state["table"] = self.coder.table_from_bytes(payload[pos:pos + int(n)], self.grid.nsym)
            pos += int(n)
        if self.steps and "table" in state:
            sym = self._stream_decode(state, flags >> 1, payload[pos:], numel, bool(flags & 1))
            return dequantize(sym, self.grid, np.float32(scale))
        if "table" not in state:
            raise CorruptDataError("co3: payload needs a table that was never sent")
        table = state["table"]
        if hasattr(table, "decode_lookup"):  # decode and dequantize in one pass
            return table.decode_lookup(payload[pos:], numel,
                                       dequantize_table(self.grid, np.float32(scale)))
        sym = table.decode(payload[pos:], numel, cols=state.get("cols"))
        return dequantize(sym, self.grid, np.float32(scale))
