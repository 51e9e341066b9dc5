"""What the DDP hook (:mod:`co3cli.ddp`) and the FSDP reduce-scatter (:mod:`co3cli.fsdp`) share:
the payload frame, the first-step config check, the checkpoint checks, collectives that fail
with a named error, and the device transfers.

Payload frame (one per bucket and destination; ``parts``: one co3 packet per parameter or
segment, in a fixed order both sides know)::

    uvarint(len(part)) for each part  ||  the parts  ||  crc32 (u32 LE) of everything before

A payload whose checksum fails raises :class:`PayloadChecksumError` naming the sending rank.
The DDP hook all-gathers, so every rank checks every payload and all raise the same error;
the FSDP reduce-scatter's ranks see only their own, so they agree through a one-integer
all-reduce (:func:`agree`) before anyone raises.

Faults. A collective that fails (a peer died: gloo reports the closed connection; or the
process group's timeout passed) raises :class:`PeerFailureError`, one line naming this rank and
the first line of the backend's message. Mismatched configurations are found at the first step
(:func:`check_configs`, an ``all_gather_object`` of each rank's config): every rank raises
:class:`co3cli.errors.ConfigMismatchError`.
"""

from __future__ import annotations

import contextlib
import zlib
from typing import Any, Iterator

import numpy as np

from co3cli.errors import ConfigMismatchError, Co3Error, CorruptDataError, StateMismatchError
from co3cli.varint import uvarints_from_bytes, uvarints_to_bytes

CRC_BYTES = 4


class PayloadChecksumError(CorruptDataError):
    """A rank's payload arrived with a wrong checksum (the message names the sending rank)."""


class PeerFailureError(Co3Error, RuntimeError):
    """A collective with the other ranks failed: a rank died or the process group timed out."""


# ----------------------------------------------------------------- the frame
def frame(parts: list[bytes]) -> bytes:
    """The lengths, the parts and their crc32 (see the module docstring)."""
    body = uvarints_to_bytes([len(b) for b in parts]) + b"".join(parts)
    return body + zlib.crc32(body).to_bytes(CRC_BYTES, "little")


def intact(payload: bytes) -> bool:
    """Whether ``payload``'s crc32 matches."""
    return len(payload) >= CRC_BYTES and zlib.crc32(payload[:-CRC_BYTES]) == \
        int.from_bytes(payload[-CRC_BYTES:], "little")


def verify(payload: bytes, src: int, who: str) -> None:
    """Raise :class:`PayloadChecksumError` unless ``payload`` (from rank ``src``) is intact."""
    if not intact(payload):
        raise PayloadChecksumError(f"{who}: the payload from rank {src} failed its checksum "
                                   f"({len(payload)} bytes)")


def unframe(payload: bytes, count: int, src: int, who: str) -> list[tuple[int, int]]:
    """The (start, end) of each of the ``count`` parts of a verified payload."""
    body = len(payload) - CRC_BYTES
    lengths, pos = uvarints_from_bytes(payload[:min(9 * count, body)], count, f"{who} lengths")
    ends = pos + np.cumsum(lengths.astype(np.int64))
    if count and ends[-1] != body:
        raise CorruptDataError(f"{who}: rank {src} sent {body} bytes, its lengths say "
                               f"{int(ends[-1])}")
    starts = np.concatenate([[pos], ends[:-1]]).astype(np.int64)
    return list(zip(starts.tolist(), ends.tolist()))


# ----------------------------------------------------------------- collectives
@contextlib.contextmanager
def collective(who: str, rank: int) -> Iterator[None]:
    """Turn a failed collective into :class:`PeerFailureError` (one line)."""
    try:
        yield
    except RuntimeError as e:
        if isinstance(e, Co3Error):
            raise
        first = (str(e).strip().splitlines() or [type(e).__name__])[0]
        raise PeerFailureError(f"{who}: a collective failed on rank {rank} (a rank died or the "
                               f"process group timed out): {first}") from None


def agree(code: int, device: Any, group: Any) -> int:
    """The largest ``code`` over the ranks (one int32 all-reduce)."""
    import torch
    import torch.distributed as dist

    t = torch.tensor([code], dtype=torch.int32, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX, group=group)
    return int(t.item())


def nonfinite(x: Any) -> bool:
    """NaN/Inf in tensor ``x`` (or a float32 sum that overflows), without a float32 copy of
    a bf16/fp16 tensor (the sum accumulates in float32 in chunks)."""
    import torch

    if x.dtype == torch.float32:
        return not bool(torch.isfinite(x.sum()))
    total = torch.zeros((), dtype=torch.float32, device=x.device)
    flat = x.reshape(-1)
    for lo in range(0, flat.numel(), 1 << 20):
        total += flat[lo:lo + (1 << 20)].sum(dtype=torch.float32)
    return not bool(torch.isfinite(total))


def check_configs(mine: dict[str, Any], group: Any, who: str) -> None:
    """All-gather every rank's ``mine`` and raise :class:`ConfigMismatchError` (on every rank,
    naming the first rank that differs and what) unless they are all equal."""
    import torch.distributed as dist

    rank, world = dist.get_rank(group), dist.get_world_size(group)
    everyone: list[Any] = [None] * world
    with collective(who, rank):
        dist.all_gather_object(everyone, mine, group=group)
    for src, theirs in enumerate(everyone):
        if theirs != everyone[0]:
            diff = sorted(k for k in mine if theirs.get(k) != everyone[0].get(k))
            raise ConfigMismatchError(
                f"{who}: rank {src} has " + ", ".join(f"{k}={theirs.get(k)!r}" for k in diff)
                + ", rank 0 has " + ", ".join(f"{k}={everyone[0].get(k)!r}" for k in diff))


# ----------------------------------------------------------------- checkpoints
def check_saved_config(saved: dict[str, Any], config: dict[str, Any], keys: tuple[str, ...],
                       who: str) -> None:
    """Raise :class:`StateMismatchError` if a saved state's config differs in ``keys``."""
    for k in keys:
        if saved.get(k) != config[k]:
            raise StateMismatchError(f"{who} state saved with {k}={saved.get(k)!r}, "
                                     f"loaded with {k}={config[k]!r}")


def check_placement(saved_rank: int, saved_world: int, rank: int, world: int, who: str) -> None:
    """Raise :class:`StateMismatchError` unless a state was saved on this rank of a job this size."""
    if saved_world != world:
        raise StateMismatchError(f"{who} state saved with world size {saved_world}, "
                                 f"loaded with {world}")
    if saved_rank != rank:
        raise StateMismatchError(f"{who} state of rank {saved_rank} loaded on rank {rank}")


# ----------------------------------------------------------------- device transfers
def to_host_bytes(t: Any) -> bytes:
    """A uint8 tensor's bytes on the host (from CUDA: one synchronous copy)."""
    return t.cpu().numpy().tobytes()


def from_bytes(blob: bytes, device: Any) -> Any:
    """``blob`` as a uint8 tensor on ``device`` (CUDA: staged in pinned memory, non_blocking)."""
    import torch

    t = torch.frombuffer(bytearray(blob), dtype=torch.uint8) if blob else \
        torch.empty(0, dtype=torch.uint8)
    if torch.device(device).type != "cuda":
        return t.to(device)
    return t.pin_memory().to(device, non_blocking=True)
