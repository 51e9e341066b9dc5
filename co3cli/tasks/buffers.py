"""The rule for a model's buffers in federated training (BatchNorm statistics and other state
that gradients do not train): ``BufferState`` and the byte form of buffers.

::

    client c: BufferState.start(c) -> local work -> BufferState.upload(c) -> bytes (raw, each
              buffer in its dtype: pack_buffers)  --uplink, charged-->
    server:   BufferState.aggregate(uploads): unpack_buffers, mean_buffers -> the server's
              buffers (and the evaluated model's)
              average: sent down with the weights, every client starts from them
              local:   each client starts from its own, as it left them

The rule (``FLConfig.buffers``) is described in ``co3cli.tasks.fltask``. Nothing here knows
about the FL engines, so other drivers (a Flower client) can keep buffers the same way.
"""

from __future__ import annotations

from typing import Any

from co3cli.errors import InputError

BUFFER_RULES = ("average", "local")


def model_buffers(model) -> list[tuple[str, Any]]:
    """The model's buffers ``(name, tensor)`` (BatchNorm statistics, ...), in module order."""
    return list(model.named_buffers())


def pack_buffers(tensors) -> bytes:
    """The raw bytes of ``tensors`` in order (each in its own dtype)."""
    return b"".join(t.detach().contiguous().reshape(-1).numpy().tobytes() for t in tensors)


def unpack_buffers(blob: bytes, templates) -> list[Any]:
    """``pack_buffers``' inverse, shaped and typed like ``templates``; InputError on a length
    mismatch."""
    import torch

    out, pos = [], 0
    for t in templates:
        k = t.numel() * t.element_size()
        if pos + k > len(blob):
            raise InputError(f"buffer upload of {len(blob)} bytes is too short")
        piece = torch.frombuffer(bytearray(blob[pos:pos + k]), dtype=t.dtype) if k else \
            torch.empty(0, dtype=t.dtype)
        out.append(piece.view(t.shape).clone())
        pos += k
    if pos != len(blob):
        raise InputError(f"buffer upload of {len(blob)} bytes, expected {pos}")
    return out


def mean_buffers(per_client: list[list[Any]]) -> list[Any]:
    """Element-wise mean over clients (in their order): float buffers as a float64 sum / n cast
    back, integer buffers the floor of the mean."""
    import torch

    n = len(per_client)
    out = []
    for group in zip(*per_client):
        t = group[0]
        if t.is_floating_point():
            acc = torch.zeros(t.shape, dtype=torch.float64)
            for g in group:
                acc += g.to(torch.float64)
            out.append((acc / n).to(t.dtype))
        else:
            acc = torch.zeros(t.shape, dtype=torch.int64)
            for g in group:
                acc += g.to(torch.int64)
            out.append(torch.div(acc, n, rounding_mode="floor").to(t.dtype))
    return out


def buffers_finite(tensors) -> bool:
    """Whether every float buffer is finite."""
    import torch

    return all(bool(torch.isfinite(t).all()) for t in tensors if t.is_floating_point())


class BufferState:
    """The buffer rule's state for one model (see the module docstring): the server's buffers
    and, under ``local``, each client's. ``live`` are the model's own buffer tensors, which
    ``start`` fills before a client's work and ``upload`` reads after it."""

    def __init__(self, model, rule: str, clients: int):
        if rule not in BUFFER_RULES:
            raise InputError(f"buffers={rule!r} is not one of {', '.join(BUFFER_RULES)}")
        self.rule = rule
        self.names = [n for n, _ in model_buffers(model)]
        self.live = [b for _, b in model_buffers(model)]
        self.server = [b.detach().clone() for b in self.live]
        self.clients = ([[b.clone() for b in self.server] for _ in range(clients)]
                        if rule == "local" and self.live else None)

    def __bool__(self) -> bool:
        return bool(self.live)

    def _fill(self, values) -> None:
        import torch

        with torch.no_grad():
            for b, v in zip(self.live, values):
                b.copy_(v)

    def start(self, c: int) -> None:
        """Client ``c`` begins its round: the model gets its starting buffers."""
        if self.live:
            self._fill(self.clients[c] if self.clients is not None else self.server)

    def upload(self, c: int) -> bytes | None:
        """Client ``c`` is done: its buffers' bytes (kept as its own under ``local``); None if
        a float buffer is not finite."""
        if not self.live:
            return b""
        if not buffers_finite(self.live):
            return None
        if self.clients is not None:
            self.clients[c] = [b.detach().clone() for b in self.live]
        return pack_buffers(self.live)

    def aggregate(self, blobs: list[bytes]) -> None:
        """The server: its buffers (and the model's) become the mean of the uploads."""
        if self.live:
            self.set_server(mean_buffers([unpack_buffers(b, self.live) for b in blobs]))

    def set_server(self, values) -> None:
        self.server = [v.detach().clone() for v in values]
        self._fill(self.server)

    def sizes(self) -> dict[str, int]:
        """Buffer name -> entries (config.json)."""
        return {n: int(b.numel()) for n, b in zip(self.names, self.live)}

    @property
    def sent_down(self) -> bool:
        """Whether the clients receive the server's buffers with the weights."""
        return bool(self.live) and self.rule == "average"
