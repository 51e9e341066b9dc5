"""CO3 gradient compression as a ``torch.distributed`` DDP communication hook.

::

    from co3cli.ddp import CO3State, co3_hook
    state = CO3State(process_group=None, format="fp8-e5m2", coder="ans", gamma=0.9, refit_every=100)
    ddp_model.register_comm_hook(state, co3_hook)

Data flow, per gradient bucket, on every rank (``W`` ranks, this one is ``r``)::

    bucket.buffer() (device, any float dtype)
      --copy to host float32-->  g                          (the coder works on host memory)
      v = g + gamma * e                                     (e: this rank's error memory, host)
      packet = compress(v, sender_state[bucket])            (quantize + entropy-code -> bytes)
      e = v - packet.v_hat                                  (memory update)
      all_gather(len(payload))   as one int64 per rank      (on the bucket's device)
      all_gather(payload)        as uint8, padded to max    (on the bucket's device)
      v_hat[s] = decompress(payload[s], receiver_state[bucket, s])   for every s != r
      v_hat[r] = packet.v_hat                               (bit-identical to its decode)
      mean = (sum over s = 0..W-1, in rank order, in float64) / W  -> float32
      --copy back to the bucket's device and dtype--> completed Future

Every rank decodes the same bytes with the same per-source receiver state and sums in the
same order in the same dtype, so every replica gets a bit-identical average and the replicas
stay identical (given identical initial weights, which DDP broadcasts).

Where the data lives. The coder (quantizer, table fit, rANS/Huffman) runs on host memory, so
the bucket is copied to the host once and the average is copied back once. The error memory
``e`` is therefore kept on the host too (``v`` and ``v_hat`` are both host arrays; keeping it on
the device would cost two more copies per step). The two collectives run on the bucket's
device (uint8 and int64 tensors), so under NCCL they go GPU to GPU; under gloo they stay on the
CPU. Nothing else assumes a CPU.

Synchronous hook. The exchange and decode happen inside the hook call and it returns an
already completed ``torch.futures.Future``; that is allowed by the hook contract, but the
work does not overlap the rest of the backward pass as allreduce-based hooks do.

Buckets. Per-bucket state (error memory, sender table, one receiver table per source rank) is
keyed by ``bucket.index()``. DDP rebuilds its buckets after the first iteration; when a key
shows up with a different number of entries, that bucket's memory and tables are reset (the
next payload carries a fresh table) and ``stats()["bucket_resets"]`` counts it. All ranks see the
same bucket layout, so they reset together.

Checkpoints. ``state_dict()`` is a picklable dict (memories as CPU tensors, tables as bytes,
counters, statistics); ``load_state_dict`` restores it; pickling a ``CO3State`` drops the process
group (``process_group`` is ``None`` after unpickling: the default group). Each rank has its own
memory, so each rank saves and restores its own state.

Bytes on the wire per rank and step: the payloads plus 8 bytes (the int64 length) per bucket;
``stats()`` also reports the padded size actually moved by the padded all-gather.
"""

# no "from __future__ import annotations": DDP checks the hook's annotations as objects
import math
import pickle
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from co3cli.errors import CorruptDataError, InputError
from co3cli.simulate.compressors import CO3, get_compressor

EXCHANGES = ("tensor", "object")
STATE_VERSION = 1
LENGTH_BYTES = 8  # the int64 payload length each rank all-gathers per bucket


@dataclass
class _BucketState:
    """What one rank keeps for one bucket between steps."""

    numel: int
    memory: np.ndarray  # float32, host: the error-feedback memory e
    sender: dict = field(default_factory=dict)  # this rank's compressor state
    receivers: dict[int, dict] = field(default_factory=dict)  # source rank -> decoder state


@dataclass
class _StepTotals:
    """Per-step accumulators (reset when the last bucket of a step is done)."""

    payload_bytes: int = 0
    padded_bytes: int = 0
    entries: int = 0
    entropy_bits: float = 0.0
    t_host: float = 0.0
    t_compress: float = 0.0
    t_exchange: float = 0.0
    t_decode: float = 0.0


class CO3State:
    """Configuration and per-bucket state of :func:`co3_hook` on one rank.

    ``format``/``coder``/``model``/``scale``/``refit_every`` configure the co3 compressor
    (``co3cli.simulate.compressors.CO3``); ``gamma`` in [0, 1] decays the error memory
    (``v = g + gamma * e``); ``exchange`` is ``"tensor"`` (all-gather of lengths, then of padded
    uint8 payloads; the default) or ``"object"`` (``all_gather_object`` of the bytes).
    """

    def __init__(self, process_group: Any = None, *, format: str = "fp8-e5m2", coder: str = "ans",
                 gamma: float = 0.9, refit_every: int = 100, model: str = "gennorm-zi",
                 scale: str | None = None, exchange: str = "tensor"):
        if isinstance(gamma, bool) or not isinstance(gamma, (int, float)) \
                or not math.isfinite(gamma) or not 0.0 <= gamma <= 1.0:
            raise InputError(f"CO3State: gamma={gamma!r} must be a number in [0, 1]")
        if isinstance(refit_every, bool) or not isinstance(refit_every, int) or refit_every < 1:
            raise InputError(f"CO3State: refit_every={refit_every!r} must be an integer >= 1")
        if exchange not in EXCHANGES:
            raise InputError(f"CO3State: exchange {exchange!r} is not one of {', '.join(EXCHANGES)}")
        if coder not in CO3.CODERS:
            raise InputError(f"CO3State: coder {coder!r} is not one of {', '.join(CO3.CODERS)}")
        self.config = {"format": format, "coder": coder, "model": model, "scale": scale,
                       "refit_every": refit_every}
        self.compressor: CO3 = get_compressor("co3", **self.config)  # validates format, model
        self.process_group = process_group
        self.gamma = float(gamma)
        self.exchange = exchange
        self._rng = np.random.default_rng(0)  # co3 is deterministic; the API wants a generator
        self._buckets: dict[int, _BucketState] = {}
        self._step = _StepTotals()
        self._stats: dict[str, Any] = _empty_stats()

    # ----------------------------------------------------------------- per bucket
    def _bucket(self, key: int, numel: int) -> _BucketState:
        b = self._buckets.get(key)
        if b is None or b.numel != numel:
            if b is not None:
                self._stats["bucket_resets"] += 1
            b = _BucketState(numel, np.zeros(numel, np.float32))
            self._buckets[key] = b
        return b

    # ----------------------------------------------------------------- statistics
    def _finish_step(self) -> None:
        s, t = self._stats, self._step
        s["steps"] += 1
        s["bytes_last_step"] = t.payload_bytes  # payloads + lengths, this rank
        s["padded_bytes_last_step"] = t.padded_bytes
        s["bytes_total"] += t.payload_bytes
        s["padded_bytes_total"] += t.padded_bytes
        s["entries_per_step"] = t.entries
        s["entries_total"] += t.entries
        s["entropy_bits_total"] += t.entropy_bits
        s["bits_per_entry_last"] = 8.0 * t.payload_bytes / t.entries if t.entries else 0.0
        s["entropy_bits_per_entry_last"] = t.entropy_bits / t.entries if t.entries else 0.0
        for name in ("t_host", "t_compress", "t_exchange", "t_decode"):
            s[name + "_last"] = getattr(t, name)
            s[name + "_total"] += getattr(t, name)
        self._step = _StepTotals()

    def stats(self) -> dict[str, Any]:
        """Counters of this rank: steps, bytes sent (last step, total; payloads + 8-byte
        lengths, and the padded size the all-gather moves), bits/entry and entropy bits/entry
        (last step and mean), seconds in host copies/compress/exchange/decode, bucket resets."""
        s = dict(self._stats)
        n = s["entries_total"]
        s["bits_per_entry_mean"] = 8.0 * s["bytes_total"] / n if n else 0.0
        s["entropy_bits_per_entry_mean"] = s["entropy_bits_total"] / n if n else 0.0
        s["buckets"] = {k: b.numel for k, b in sorted(self._buckets.items())}
        return s

    # ----------------------------------------------------------------- checkpoints
    def state_dict(self) -> dict[str, Any]:
        """A picklable snapshot: config, per-bucket memories (CPU tensors) and tables (bytes)."""
        buckets = {}
        for key, b in sorted(self._buckets.items()):
            sender = {k: b.sender[k] for k in ("scale_fit", "rms_fit", "calls") if k in b.sender}
            if "table" in b.sender:
                sender["table"] = b.sender["table"].to_bytes()
            receivers = {src: rs["table"].to_bytes() for src, rs in sorted(b.receivers.items())
                         if "table" in rs}
            buckets[key] = {"numel": b.numel, "memory": torch.from_numpy(b.memory.copy()),
                            "sender": sender, "receivers": receivers}
        return {"version": STATE_VERSION, "config": dict(self.config), "gamma": self.gamma,
                "exchange": self.exchange, "buckets": buckets, "stats": dict(self._stats)}

    def load_state_dict(self, sd: dict[str, Any]) -> None:
        """Restore a :meth:`state_dict` (same format, coder and model; gamma is taken from it)."""
        if not isinstance(sd, dict) or sd.get("version") != STATE_VERSION:
            raise InputError(f"CO3State: not a version-{STATE_VERSION} CO3State state dict")
        for k in ("format", "coder", "model"):
            if sd["config"].get(k) != self.config[k]:
                raise InputError(f"CO3State: checkpoint has {k}={sd['config'].get(k)!r}, "
                                 f"this state has {self.config[k]!r}")
        comp = self.compressor
        nsym = comp.grid.nsym
        buckets: dict[int, _BucketState] = {}
        for key, bd in sd["buckets"].items():
            memory = bd["memory"].detach().cpu().to(torch.float32).numpy().copy()
            if memory.shape != (bd["numel"],):
                raise CorruptDataError(f"CO3State: bucket {key} memory has shape "
                                       f"{tuple(memory.shape)}, expected ({bd['numel']},)")
            sender = {k: v for k, v in bd["sender"].items() if k != "table"}
            if "table" in bd["sender"]:
                sender["table"] = comp.coder.table_from_bytes(bd["sender"]["table"], nsym)
            receivers = {int(src): {"table": comp.coder.table_from_bytes(tb, nsym)}
                         for src, tb in bd["receivers"].items()}
            buckets[int(key)] = _BucketState(int(bd["numel"]), memory, sender, receivers)
        self._buckets = buckets
        self.gamma = float(sd["gamma"])
        self.exchange = sd.get("exchange", self.exchange)
        self._stats = {**_empty_stats(), **sd.get("stats", {})}
        self._step = _StepTotals()

    def __getstate__(self) -> dict[str, Any]:
        return {"config": self.config, "gamma": self.gamma, "exchange": self.exchange,
                "state_dict": pickle.dumps(self.state_dict())}

    def __setstate__(self, d: dict[str, Any]) -> None:
        self.__init__(None, gamma=d["gamma"], exchange=d["exchange"], **d["config"])
        self.load_state_dict(pickle.loads(d["state_dict"]))


def _empty_stats() -> dict[str, Any]:
    s: dict[str, Any] = {"steps": 0, "bytes_last_step": 0, "padded_bytes_last_step": 0,
                         "bytes_total": 0, "padded_bytes_total": 0, "entries_per_step": 0,
                         "entries_total": 0, "entropy_bits_total": 0.0, "bits_per_entry_last": 0.0,
                         "entropy_bits_per_entry_last": 0.0, "bucket_resets": 0}
    for name in ("t_host", "t_compress", "t_exchange", "t_decode"):
        s[name + "_last"] = 0.0
        s[name + "_total"] = 0.0
    return s


def _exchange_tensor(payload: bytes, device: torch.device, group: Any,
                     world: int) -> tuple[list[bytes], int]:
    """All-gather variable-length payloads: lengths first, then uint8 tensors padded to the
    longest, both on ``device``. Returns every rank's bytes and the padded length."""
    n = torch.tensor([len(payload)], dtype=torch.int64, device=device)
    lengths_t = [torch.empty_like(n) for _ in range(world)]
    dist.all_gather(lengths_t, n, group=group)
    lengths = torch.cat(lengths_t).cpu().tolist()
    padded = max(lengths)
    send = torch.zeros(padded, dtype=torch.uint8)
    send.numpy()[:len(payload)] = np.frombuffer(payload, dtype=np.uint8)
    send = send.to(device)
    recv = [torch.empty(padded, dtype=torch.uint8, device=device) for _ in range(world)]
    dist.all_gather(recv, send, group=group)
    return [recv[s][:lengths[s]].cpu().numpy().tobytes() for s in range(world)], padded


def _exchange_object(payload: bytes, group: Any, world: int) -> tuple[list[bytes], int]:
    out: list[Any] = [None] * world
    dist.all_gather_object(out, payload, group=group)
    return out, len(payload)


def co3_hook(state: CO3State, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """DDP communication hook: co3-compress this rank's bucket with error feedback, all-gather
    the payloads, decode every rank's, and return their mean (synchronously: the future is
    already completed). See the module docstring for the data flow."""
    group = state.process_group
    world = dist.get_world_size(group)
    rank = dist.get_rank(group)
    buf = bucket.buffer()
    t0 = time.perf_counter()
    g = buf.detach().to(device="cpu", dtype=torch.float32).numpy().reshape(-1)
    b = state._bucket(bucket.index(), g.size)
    v = g + np.float32(state.gamma) * b.memory if state.gamma else g.copy()
    t1 = time.perf_counter()
    packet = state.compressor.compress(v, b.sender, state._rng)
    np.subtract(v, packet.v_hat, out=b.memory)
    t2 = time.perf_counter()
    if state.exchange == "tensor":
        payloads, padded = _exchange_tensor(packet.payload, buf.device, group, world)
    else:
        payloads, padded = _exchange_object(packet.payload, group, world)
    t3 = time.perf_counter()
    total = np.zeros(g.size, np.float64)
    for src in range(world):  # rank order, float64: the same sum on every replica
        if src == rank:
            total += packet.v_hat
        else:
            rs = b.receivers.setdefault(src, {})
            total += state.compressor.decompress(payloads[src], g.size, rs)
    total /= world
    t4 = time.perf_counter()
    mean = torch.from_numpy(total.astype(np.float32)).to(device=buf.device, dtype=buf.dtype)
    fut: torch.futures.Future[torch.Tensor] = torch.futures.Future()
    fut.set_result(mean.view_as(buf))
    t5 = time.perf_counter()

    st = state._step
    st.payload_bytes += len(packet.payload) + LENGTH_BYTES
    st.padded_bytes += padded + LENGTH_BYTES
    st.entries += g.size
    st.entropy_bits += packet.entropy_bits or 0.0
    st.t_host += (t1 - t0) + (t5 - t4)
    st.t_compress += t2 - t1
    st.t_exchange += t3 - t2
    st.t_decode += t4 - t3
    if bucket.is_last():
        state._finish_step()
    return fut
