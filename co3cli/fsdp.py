"""CO3 gradient compression as the reduce-scatter of FSDP2 (``torch.distributed.fsdp.fully_shard``).

::

    from co3cli.fsdp import CO3FSDPState, attach
    for layer in model.layers:
        fully_shard(layer)
    fully_shard(model)
    state = CO3FSDPState(format="fp8-e5m2", coder="ans", gamma=0.9)
    attach(model, state)          # every FSDP module of the model gets a co3 reduce-scatter

Data flow, per FSDP module and backward, on rank ``r`` of ``W`` (FSDP calls the comm with the
flat gradient ``input`` laid out as ``W`` rows of ``S`` entries, row ``d`` destined to rank ``d``'s
shard, each row the concatenation of the module's parameters' dim-0 chunks)::

    input x[W, S] (its device, reduce dtype; no float32 copy of it is made)
    first call: every rank's config all-gathered and compared (ConfigMismatchError on all)
    non-finite anywhere? one int32 all-reduce (then the plain reduce-scatter, see below)
    per destination d != r, per parameter segment p of the row (key (module, p, d)):
        v = x[d]_p + gamma * e_(p,d)                (TorchCO3: what r owes d's shard; e on x's
        packet = co3.compress(v, sender[(p, d)])     device, float32; symbols to the host,
        e_(p,d) = v - packet.v_hat                   coded there: co3cli.compressors.device)
    payload[d] = uvarint(len(packet_p)) for each p || the packets || crc32   (co3cli.ddp.wire)
    all_to_all_single(lengths)  then  all_to_all_single(payloads, split sizes)   (gloo and NCCL)
    every rank checks the crc32 of what it got; one int32 all-reduce: on a failure every rank
    raises PayloadChecksumError naming the sender
    per segment p: shard_p = sum over s = 0..W-1 in rank order, float32, of
            x[r]_p (s == r: this rank's own part never leaves it, so it is exact)
            decompress(payload from s, receiver[(p, s)])   (s != r; host, then to the device)
    shard_p /= W (op AVG; SUM leaves it) --> output (device, its dtype)

Each shard is reduced by exactly one rank, so consistency is a property of the bytes: every
payload is decoded with the receiver state built from that sender's earlier payloads only, and
the sum order is fixed, so a rank that replays the same payloads gets the same bits. The
sender's ``Packet.v_hat`` is bit-identical to the receiver's decode (the compressor contract).

Keys. A key is ``(module index, segment index)``: module index is the order of the FSDP module in
``model.modules()``, the segments are the module's parameters' padded shards (FSDP's private
``fsdp_params``, read once at :func:`attach`); when a row does not match them (a parameter had no
gradient) the row is one segment. A layout change resets that module's memories and tables
(``stats()["resets"]``).

Synchronous. FSDP2 calls the comm without ``async_op`` and on CPU/gloo in the backward's
thread; the exchange and decode happen inside the call. Non-finite gradients (any rank) take
the plain ``reduce_scatter_single`` path untouched (no memory or table update).

Checks and faults (shared with the DDP hook: :mod:`co3cli.ddp.wire`). The first call
all-gathers every rank's config and world size and raises :class:`ConfigMismatchError` on every
rank if they differ. A failed collective (a rank died, or the process group's timeout) raises
``PeerFailureError``. Checkpoints: ``state_dict()`` records rank, world size and config;
:meth:`CO3FSDPState.load_state_dict` raises :class:`StateMismatchError` ("co3 FSDP state of rank
0 loaded on rank 1") on another rank, world size, format, coder, model or scale. Each rank saves
and restores its own state.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from co3cli.checks import check_int
from co3cli.coding import CODERS
from co3cli.compressors import CO3, get_compressor
from co3cli.compressors.device import TorchCO3
from co3cli.ddp import wire
from co3cli.errors import InputError, StateMismatchError

STATE_VERSION = 1
LENGTH_BYTES = 8  # the int64 payload length sent to each peer per call
WHO = "co3 FSDP"
CONFIG_KEYS = ("format", "coder", "model", "scale")  # a checkpoint must match these


class CO3FSDPState:
    """Configuration, error memories and coder tables of the co3 reduce-scatter on one rank.

    ``format``/``coder``/``model``/``scale``/``refit_every`` configure
    :class:`co3cli.compressors.CO3`; ``gamma`` in [0, 1] decays the error memory
    (one float32 memory per (module, segment, peer), on the gradients' device); ``path``:
    ``"auto"`` (numba on CPU, torch ops on CUDA) or ``"torch"`` (torch ops everywhere; the
    same bits)."""

    def __init__(self, *, format: str = "fp8-e5m2", coder: str = "ans", gamma: float = 0.9,
                 refit_every: int = 100, model: str = "gennorm-zi", scale: str | None = None,
                 path: str = "auto"):
        check_int("refit_every", refit_every, lo=1, who="CO3FSDPState: ")
        if coder not in CODERS:
            raise InputError(f"CO3FSDPState: coder {coder!r} is not one of {CODERS.allowed()}")
        self.config = {"format": format, "coder": coder, "model": model, "scale": scale,
                       "refit_every": refit_every}
        self.compressor: CO3 = get_compressor("co3", **self.config)  # validates format, model
        try:  # error feedback + co3 on the gradients' device; keys: (module, segment, dest)
            self.feedback = TorchCO3(self.compressor, gamma, path)
        except InputError as e:
            raise InputError(f"CO3FSDPState: {e}") from None
        self.senders: dict[tuple, dict] = {}  # (module, segment, destination) -> sender state
        self.receivers: dict[tuple, dict] = {}  # (module, segment, source) -> decoder state
        self.layouts: dict[int, tuple[int, ...]] = {}  # module -> segment sizes in use
        self.checked = False
        self._stats = {"calls": 0, "bytes_total": 0, "entries_total": 0, "resets": 0,
                       "nonfinite_calls": 0, "t_compress_total": 0.0, "t_exchange_total": 0.0,
                       "t_decode_total": 0.0}

    @property
    def gamma(self) -> float:
        return self.feedback.gamma

    def stats(self) -> dict[str, Any]:
        """Counters of this rank: calls, bytes sent (payloads + 8-byte lengths per peer), entries
        reduced, layout resets, non-finite calls, seconds compressing/exchanging/decoding."""
        s = dict(self._stats)
        s["bits_per_entry_mean"] = 8.0 * s["bytes_total"] / s["entries_total"] \
            if s["entries_total"] else 0.0
        return s

    # ----------------------------------------------------------------- layout
    def _layout(self, module: int, sizes: tuple[int, ...], row: int) -> tuple[int, ...]:
        """The segment sizes of ``module``'s rows (reset its keys when the layout changed)."""
        layout = sizes if sum(sizes) == row and sizes else (row,)
        old = self.layouts.get(module)
        if old != layout:
            if old is not None:
                self._stats["resets"] += 1
            for table in (self.senders, self.receivers):
                for k in [k for k in table if k[0] == module]:
                    del table[k]
            for k in [k for k in self.feedback.keys() if k[0] == module]:
                self.feedback.reset(k)
            self.layouts[module] = layout
        return layout

    def _check_config(self, group: Any, world: int) -> None:
        wire.check_configs({**self.config, "gamma": self.gamma, "world": world}, group, WHO)
        self.checked = True

    # ----------------------------------------------------------------- checkpoints
    def state_dict(self) -> dict[str, Any]:
        """A picklable snapshot: rank, world, config, memories, sender and receiver tables."""
        import torch.distributed as dist

        rank = dist.get_rank() if dist.is_initialized() else 0
        world = dist.get_world_size() if dist.is_initialized() else 1
        return {"version": STATE_VERSION, "rank": rank, "world": world,
                "config": dict(self.config), "gamma": self.gamma,
                "layouts": dict(self.layouts), "checked": self.checked,
                "memories": {k: self.feedback.memory(k) for k in self.feedback.keys()},
                "senders": {k: self.compressor.export_state(v) for k, v in self.senders.items()},
                "receivers": {k: self.compressor.export_state(v)
                              for k, v in self.receivers.items()},
                "stats": dict(self._stats)}

    def load_state_dict(self, sd: dict[str, Any]) -> None:
        """Restore a :meth:`state_dict` saved by the same rank of a job of the same size and
        configuration (else :class:`StateMismatchError`)."""
        import torch.distributed as dist

        if not isinstance(sd, dict) or sd.get("version") != STATE_VERSION:
            raise StateMismatchError(f"co3 fsdp: not a version-{STATE_VERSION} CO3FSDPState "
                                     "state dict")
        rank = dist.get_rank() if dist.is_initialized() else 0
        world = dist.get_world_size() if dist.is_initialized() else 1
        wire.check_placement(sd["rank"], sd["world"], rank, world, WHO)
        wire.check_saved_config(sd["config"], self.config, CONFIG_KEYS, WHO)
        self.feedback.gamma = sd["gamma"]
        self.feedback.memories = {}
        for k, m in sd["memories"].items():
            self.feedback.load(k, m)
        self.senders = {k: self.compressor.import_state(v) for k, v in sd["senders"].items()}
        self.receivers = {k: self.compressor.import_state(v) for k, v in sd["receivers"].items()}
        self.layouts = dict(sd["layouts"])
        self.checked = bool(sd["checked"])
        self._stats = dict(sd["stats"])

    # ----------------------------------------------------------------- one reduce-scatter
    def reduce_scatter(self, module: int, sizes: tuple[int, ...], output: Any, input: Any,
                       group: Any, op: Any) -> None:
        """Compressed reduce-scatter of ``input`` (``W * S`` entries) into ``output`` (``S``)."""
        import torch
        import torch.distributed as dist

        world, rank = dist.get_world_size(group), dist.get_rank(group)
        if op not in (dist.ReduceOp.SUM, dist.ReduceOp.AVG):
            raise InputError(f"co3 fsdp: reduce op {op} is not supported (SUM, AVG); do not set "
                             "a gradient divide factor with co3")
        x = input.detach().reshape(world, -1)
        with wire.collective(WHO, rank):
            if not self.checked:
                self._check_config(group, world)
            if wire.agree(int(wire.nonfinite(x)), input.device, group):
                self._stats["nonfinite_calls"] += 1
                dist.reduce_scatter_tensor(output, input, op=op, group=group)
                return
        layout = self._layout(module, sizes, x.shape[1])
        bounds = np.cumsum((0,) + layout)
        t0 = time.perf_counter()
        payloads = [b""] * world
        for d in range(world):
            if d != rank:
                payloads[d] = wire.frame([
                    self.feedback.step((module, seg, d), x[d, lo:hi],
                                       self.senders.setdefault((module, seg, d), {})).payload
                    for seg, (lo, hi) in enumerate(zip(bounds[:-1], bounds[1:]))])
        t1 = time.perf_counter()
        with wire.collective(WHO, rank):
            received = _all_to_all(payloads, group, world, input.device)
            bad = 0  # 1 + the highest rank whose payload failed its checksum here
            for src in range(world):
                if src != rank and not wire.intact(received[src]):
                    bad = src + 1
            bad = wire.agree(bad, input.device, group)  # every rank raises, or none
        if bad:
            raise wire.PayloadChecksumError(f"{WHO}: a payload from rank {bad - 1} failed its "
                                            "checksum")
        t2 = time.perf_counter()
        spans = [wire.unframe(received[src], len(layout), src, WHO) if src != rank else None
                 for src in range(world)]
        out = output.view(-1)
        w = torch.tensor(world, dtype=torch.float32, device=output.device)
        for seg, (lo, hi) in enumerate(zip(bounds[:-1], bounds[1:])):
            total = None  # rank order, float32
            for src in range(world):
                if src == rank:
                    part = x[rank, lo:hi]
                else:
                    rs = self.receivers.setdefault((module, seg, src), {})
                    a, b = spans[src][seg]
                    part = torch.from_numpy(self.compressor.decompress(
                        received[src][a:b], int(hi - lo), rs)).to(output.device)
                total = part.to(torch.float32) + 0.0 if total is None else total.add_(part)
            if op == dist.ReduceOp.AVG:
                total.div_(w)
            out[lo:hi] = total
        t3 = time.perf_counter()
        s = self._stats
        s["calls"] += 1
        s["bytes_total"] += sum(len(p) for p in payloads) + LENGTH_BYTES * (world - 1)
        s["entries_total"] += x.numel()
        s["t_compress_total"] += t1 - t0
        s["t_exchange_total"] += t2 - t1
        s["t_decode_total"] += t3 - t2


def _all_to_all(payloads: list[bytes], group: Any, world: int, device: Any) -> list[bytes]:
    """Send ``payloads[d]`` to rank ``d``; return what every rank sent to this one (two
    ``all_to_all_single`` calls: the lengths, then the bytes with split sizes)."""
    import torch
    import torch.distributed as dist

    send_len = torch.tensor([len(p) for p in payloads], dtype=torch.int64, device=device)
    recv_len = torch.empty(world, dtype=torch.int64, device=device)
    dist.all_to_all_single(recv_len, send_len, group=group)
    ins, outs = [len(p) for p in payloads], recv_len.cpu().tolist()
    recv = torch.empty(sum(outs), dtype=torch.uint8, device=device)
    dist.all_to_all_single(recv, wire.from_bytes(b"".join(payloads), device), outs, ins,
                           group=group)
    data = wire.to_host_bytes(recv)
    ends = np.cumsum(outs)
    return [data[e - n:e] for n, e in zip(outs, ends)]


class CO3ReduceScatter:
    """The ``ReduceScatter`` comm FSDP2 calls for one module (built by :func:`attach`)."""

    def __init__(self, state: CO3FSDPState, module: int, sizes: tuple[int, ...]):
        self.state, self.module, self.sizes = state, module, sizes

    def allocate(self, size, *, dtype, device):
        import torch

        return torch.empty(*size, dtype=dtype, device=device)

    def __call__(self, output_tensor, input_tensor, group, op, async_op: bool = False):
        self.state.reduce_scatter(self.module, self.sizes, output_tensor, input_tensor, group, op)
        return _DoneWork() if async_op else None


class _DoneWork:
    """What an ``async_op=True`` caller waits on: the work is already done."""

    def wait(self, timeout: Any = None) -> bool:
        return True

    def is_completed(self) -> bool:
        return True


def attach(model: Any, state: CO3FSDPState) -> int:
    """Give every ``fully_shard`` module of ``model`` a co3 reduce-scatter sharing ``state``;
    returns how many modules got one (InputError when none is an FSDP module)."""
    from torch.distributed.fsdp import FSDPModule

    count = 0
    for m in model.modules():
        if not isinstance(m, FSDPModule):
            continue
        sizes: tuple[int, ...] = ()
        try:  # the padded shard sizes of the module's parameters (torch-private, optional)
            groups = m._get_fsdp_state()._fsdp_param_groups
            sizes = tuple(int(p.padded_sharded_param_size.numel())
                          for p in groups[0].fsdp_params if p.sharded_param.requires_grad)
        except (AttributeError, IndexError):
            pass
        m.set_custom_reduce_scatter(CO3ReduceScatter(state, count, sizes))
        count += 1
    if not count:
        raise InputError("co3 fsdp: the model has no fully_shard module; call fully_shard first")
    return count
