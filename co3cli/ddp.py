"""CO3 gradient compression as a ``torch.distributed`` DDP communication hook.

::

    from co3cli.ddp import CO3State, co3_hook
    state = CO3State(process_group=None, format="fp8-e5m2", coder="ans", gamma=0.9, refit_every=100)
    ddp_model.register_comm_hook(state, co3_hook)

Data flow, per gradient bucket, on every rank (``W`` ranks, this one is ``r``)::

    bucket.buffer() (device, any float dtype)
      --copy to host float32-->  g                          (the coder works on host memory)
      per parameter p of the bucket (its slice of g; the unit of compression, like co3's layers):
        v_p = g_p + gamma * e_p                             (e_p: this rank's error memory, host)
        packet_p = compress(v_p, sender_state[p])           (quantize + entropy-code -> bytes)
        e_p = v_p - packet_p.v_hat                          (memory update)
      payload = uvarint(len(packet_p.payload)) for each p  ||  the packets' payloads
      all_gather(len(payload))   as one int64 per rank      (on the bucket's device)
      all_gather(payload)        as uint8, padded to max    (on the bucket's device)
      v_hat[s]_p = decompress(payload[s]_p, receiver_state[p, s])   for every s != r
      v_hat[r]   = the packets' v_hat                       (bit-identical to their decode)
      mean = (sum over s = 0..W-1, in rank order, in float32) / W
      --copy back to the bucket's device and dtype--> completed Future

Every rank decodes the same bytes with the same per-source receiver state and sums in the
same order in the same dtype, so every replica gets a bit-identical average and the replicas
stay identical (given identical initial weights, which DDP broadcasts). A rank does not decode
its own payload: ``Packet.v_hat`` is bit-identical to that decode (the compressor's contract),
so it keeps receiver states only for the other W-1 ranks. A payload that fails to decode
raises ``CorruptDataError`` on the receiving rank; the others then fail at the process group's
timeout.

Exchange. ``exchange="tensor"`` (default): two all-gathers, lengths then uint8 payloads padded
to the longest; ``exchange="object"``: one ``all_gather_object`` of the bytes (pickled; under NCCL
it needs the current CUDA device set). ``benchmarks/bench_ddp.py`` measures both.

Where the data lives. The coder (quantizer, table fit, rANS/Huffman) runs on host memory, so
the bucket is copied to the host once and the average is copied back once. The error memory
``e`` is therefore kept on the host too (``v`` and ``v_hat`` are both host arrays; keeping it on
the device would cost two more copies per step). The two collectives run on the bucket's
device (uint8 and int64 tensors), so under NCCL they go GPU to GPU; under gloo they stay on the
CPU. Nothing else assumes a CPU.

Synchronous or overlapped. By default the exchange and decode happen inside the hook call
and it returns an already completed ``torch.futures.Future`` (allowed by the hook contract;
the work does not overlap the rest of the backward pass). ``CO3State(overlap=True)``: the
hook only looks the bucket's parameters up and hands the rest (host copy, compress, the
collectives, decode) to the state's one worker thread, then returns; the future completes
when the worker is done and DDP waits for it at the end of backward. One thread, FIFO: the
buckets are coded and exchanged in the order DDP hands them over, the same on every rank, so
the collectives match and the results are bit-identical to the synchronous path (tested).
It assumes nothing else issues collectives on the group while backward runs (DDP's own
unused-parameter all-reduce comes before the first bucket; tested with DDP's defaults).
Overlap only pays where a core is idle during backward (more cores than ranks, several
buckets); it is off by default.

Keys. State (error memory, sender table, one receiver table per source rank) is kept per
*parameter*, not per bucket: DDP re-buckets after its first iteration (torch 2.x puts every
parameter in one bucket at first, then regroups them in gradient-ready order), and a restored
job starts again from the first-iteration layout, so bucket indices are not stable keys.
A parameter's key is the order in which the hook first sees it; DDP's first iteration always
presents the parameters in the same order (one bucket, model order in torch 2.x), so key ``i``
means the same parameter in every run of the same model and a checkpoint restores onto it.
If a key shows up with a different number of entries, its memory and tables are reset (the
next payload carries a fresh table) and ``stats()["resets"]`` counts it. Per-parameter tables
also fit each layer's own distribution. All ranks see the same layout, so they agree.

Checkpoints. ``state_dict()`` is a picklable dict of *this rank's* state (memories as CPU
tensors, tables as bytes, counters, statistics, the rank and world size it was taken on);
pickling drops the process group (``None`` after unpickling: the default group). Frameworks
write one file from rank 0 and load it on every rank, so ``job_state_dict()`` (a collective)
gathers every rank's state into one dict; ``load_state_dict`` of it takes this rank's part
(``co3cli.integrations`` wires it into Lightning's and Accelerate's checkpoints; README). A
state loaded where it does not belong raises :class:`StateMismatchError`, one line naming
what differs ("co3 DDP state of rank 0 loaded on rank 1", "... saved with world size 4, loaded
with 2", format, coder, model), at load time, or at the hook's first call for a state loaded
before the process group existed.

Guard. A hook asked for but never registered trains silently uncompressed (Lightning's
``ddp_comm_hook`` off CUDA, Accelerate's ``DistributedDataParallelKwargs(comm_hook=...)``):
``state.guard(optimizer, after=1)`` raises :class:`CO3HookNotRunError` if the hook finished no
step in this process by then (``state.check_ran(steps)`` is the check itself).

Non-finite gradients. If any rank's bucket holds NaN/Inf (an fp16 ``GradScaler`` overflow
step, a diverging run), all ranks learn it from a one-integer all-reduce (done every bucket)
and the bucket is averaged uncompressed, NaN/Inf included, so the scaler skips the step; the
error memories and tables are left as they were; ``stats()["nonfinite_buckets"]`` counts it.

Bytes on the wire per rank and step: the payloads plus 8 bytes (the int64 length) per bucket;
``stats()`` also reports the padded size actually moved by the padded all-gather.
"""

# no "from __future__ import annotations": DDP checks the hook's annotations as objects
import pickle
import time
import weakref
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from co3cli.checks import check_int, check_real
from co3cli.coding import CODERS, row_length
from co3cli.compressors import CO3, ErrorFeedback, get_compressor
from co3cli.errors import Co3Error, CorruptDataError, InputError, StateMismatchError
from co3cli.varint import uvarints_from_bytes, uvarints_to_bytes

EXCHANGES = ("tensor", "object")
STATE_VERSION = 2  # 2: records the rank and world size it was taken on (1 still loads)
JOB_KIND = "co3-ddp-job"  # job_state_dict(): every rank's state in one dict
LENGTH_BYTES = 8  # the int64 payload length each rank all-gathers per bucket


class CO3HookNotRunError(Co3Error, RuntimeError):
    """The co3 hook was asked for but never ran: the model trains uncompressed."""


@dataclass
class _ParamState:
    """What one rank keeps for one parameter between steps."""

    key: int  # the parameter's key (the order the hook first saw it in)
    numel: int
    sender: dict = field(default_factory=dict)  # this rank's compressor state
    receivers: dict[int, dict] = field(default_factory=dict)  # source rank -> decoder state
    cols: int | None = None  # row length of the parameter's 2-D view (the ctx coder's contexts)


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
    """Configuration and per-parameter state of :func:`co3_hook` on one rank.

    ``format``/``coder``/``model``/``scale``/``refit_every`` configure the co3 compressor
    (:class:`co3cli.compressors.CO3`); ``gamma`` in [0, 1] decays the error memory
    (``v = g + gamma * e``, :class:`co3cli.compressors.ErrorFeedback`, keyed by parameter);
    ``exchange`` is ``"tensor"`` (all-gather of lengths, then of padded uint8 payloads; the
    default) or ``"object"`` (``all_gather_object`` of the bytes); ``overlap=True`` returns
    the hook's future at once and codes/exchanges the buckets on one worker thread, in bucket
    order (the same results, bit for bit, as the synchronous default).
    """

    def __init__(self, process_group: Any = None, *, format: str = "fp8-e5m2", coder: str = "ans",
                 gamma: float = 0.9, refit_every: int = 100, model: str = "gennorm-zi",
                 scale: str | None = None, exchange: str = "tensor", overlap: bool = False):
        if not isinstance(overlap, bool):
            raise InputError(f"CO3State: overlap={overlap!r} must be True or False")
        check_int("refit_every", refit_every, lo=1, who="CO3State: ")
        if exchange not in EXCHANGES:
            raise InputError(f"CO3State: exchange {exchange!r} is not one of {', '.join(EXCHANGES)}")
        if coder not in CODERS:
            raise InputError(f"CO3State: coder {coder!r} is not one of {CODERS.allowed()}")
        self.config = {"format": format, "coder": coder, "model": model, "scale": scale,
                       "refit_every": refit_every}
        self.compressor: CO3 = get_compressor("co3", **self.config)  # validates format, model
        self.process_group = process_group
        try:
            self.feedback = ErrorFeedback(gamma)  # keys: parameter keys
        except InputError as e:
            raise InputError(f"CO3State: {e}") from None
        self.exchange = exchange
        self.overlap = overlap
        self._worker: Any = None  # overlap: the one thread that codes and exchanges, FIFO
        self._rng = np.random.default_rng(0)  # co3 is deterministic; the API wants a generator
        self._params: dict[int, _ParamState] = {}  # key -> state
        self._keys: dict[int, tuple[int, weakref.ref]] = {}  # id(parameter) -> (key, ref)
        self._step = _StepTotals()
        self._stats: dict[str, Any] = _empty_stats()
        self._steps_here = 0  # steps the hook finished in this process (not checkpointed)
        self._placement: tuple[int, int] | None = None  # (rank, world) of a state not yet checked

    @property
    def gamma(self) -> float:
        """The error memory's decay (``self.feedback.gamma``; settable, checked)."""
        return self.feedback.gamma

    @gamma.setter
    def gamma(self, value: float) -> None:
        try:
            self.feedback.gamma = value
        except InputError as e:
            raise InputError(f"CO3State: {e}") from None

    # ----------------------------------------------------------------- per parameter
    def _param(self, p: torch.Tensor) -> _ParamState:
        """The state of parameter ``p`` (new or reset when its size changed)."""
        entry = self._keys.get(id(p))
        if entry is None or entry[1]() is not p:
            entry = (len(self._keys), weakref.ref(p))
            self._keys[id(p)] = entry
        key, numel = entry[0], p.numel()
        ps = self._params.get(key)
        if ps is None or ps.numel != numel:
            if ps is not None:
                self._stats["resets"] += 1
            self.feedback.reset(key)
            ps = _ParamState(key, numel)
            self._params[key] = ps
        ps.cols = row_length(tuple(p.shape), numel)
        return ps

    # ----------------------------------------------------------------- statistics
    def _finish_step(self) -> None:
        s, t = self._stats, self._step
        s["steps"] += 1
        self._steps_here += 1
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
        (last step and mean), seconds in host copies/compress/exchange/decode, bucket resets,
        ``scale_fallbacks`` (refits whose scale rule fell back, e.g. co3-poly outside its beta
        range: :class:`co3cli.scales.ScaleResult`)."""
        s = dict(self._stats)
        n = s["entries_total"]
        s["bits_per_entry_mean"] = 8.0 * s["bytes_total"] / n if n else 0.0
        s["entropy_bits_per_entry_mean"] = s["entropy_bits_total"] / n if n else 0.0
        s["params"] = {k: ps.numel for k, ps in sorted(self._params.items())}
        return s

    # ----------------------------------------------------------------- checkpoints
    def state_dict(self) -> dict[str, Any]:
        """A picklable snapshot of this rank: config, per-parameter memories (CPU tensors),
        tables (bytes), and the rank and world size it was taken on (``None`` without a
        process group)."""
        params = {}
        for key, ps in sorted(self._params.items()):
            sender = {k: ps.sender[k] for k in ("scale_fit", "rms_fit", "calls") if k in ps.sender}
            if "table" in ps.sender:
                sender["table"] = ps.sender["table"].to_bytes()
            receivers = {src: rs["table"].to_bytes() for src, rs in sorted(ps.receivers.items())
                         if "table" in rs}
            memory = self.feedback.memory(key)
            memory = np.zeros(ps.numel, np.float32) if memory is None else memory.copy()
            params[key] = {"numel": ps.numel, "memory": torch.from_numpy(memory),
                           "sender": sender, "receivers": receivers}
        rank, world = _where(self.process_group)
        return {"version": STATE_VERSION, "config": dict(self.config), "gamma": self.gamma,
                "exchange": self.exchange, "rank": rank, "world_size": world,
                "params": params, "stats": dict(self._stats)}

    def job_state_dict(self) -> dict[str, Any]:
        """Every rank's :meth:`state_dict` in one dict, for the one checkpoint file of a job.
        A collective (``all_gather_object``): every rank of the group must call it; each gets
        the whole dict (the frameworks write it from rank 0)."""
        if not dist.is_initialized():
            raise InputError("CO3State.job_state_dict: needs the process group "
                             "(call it after init_process_group, on every rank)")
        world = dist.get_world_size(self.process_group)
        ranks: list[Any] = [None] * world
        dist.all_gather_object(ranks, self.state_dict(), group=self.process_group)
        return {"kind": JOB_KIND, "version": STATE_VERSION, "world_size": world,
                "config": dict(self.config), "ranks": ranks}

    def load_state_dict(self, sd: dict[str, Any]) -> None:
        """Restore a :meth:`state_dict` of this rank, or this rank's part of a
        :meth:`job_state_dict` (same world size, format, coder and model; gamma is taken from
        it). Parameters are matched by key on first use; a size mismatch resets that parameter.
        A state that belongs elsewhere raises :class:`StateMismatchError`."""
        if isinstance(sd, dict) and sd.get("kind") == JOB_KIND:
            sd = self._own_part(sd)
        if not isinstance(sd, dict) or sd.get("version") not in (1, STATE_VERSION):
            raise InputError(f"CO3State: not a version-{STATE_VERSION} CO3State state dict")
        self._check_config(sd["config"])
        try:
            gamma = check_real("gamma", sd["gamma"], 0.0, 1.0)
        except InputError as e:
            raise CorruptDataError(f"CO3State: checkpoint {e}") from None
        placement = (sd.get("rank"), sd.get("world_size"))
        if None not in placement:
            self._placement = placement
            if dist.is_initialized():
                self._check_placement(*_where(self.process_group))
        comp = self.compressor
        nsym = comp.grid.nsym
        params: dict[int, _ParamState] = {}
        memories: dict[int, np.ndarray] = {}
        for key, pd in sd["params"].items():
            memory = pd["memory"].detach().cpu().to(torch.float32).numpy().copy()
            if memory.shape != (pd["numel"],):
                raise CorruptDataError(f"CO3State: parameter {key} memory has shape "
                                       f"{tuple(memory.shape)}, expected ({pd['numel']},)")
            sender = {k: v for k, v in pd["sender"].items() if k != "table"}
            if "table" in pd["sender"]:
                sender["table"] = comp.coder.table_from_bytes(pd["sender"]["table"], nsym)
            receivers = {int(src): {"table": comp.coder.table_from_bytes(tb, nsym)}
                         for src, tb in pd["receivers"].items()}
            params[int(key)] = _ParamState(int(key), int(pd["numel"]), sender, receivers)
            memories[int(key)] = memory
        self._params = params
        self.feedback.load_state_dict({"gamma": gamma, "memories": memories})
        self.exchange = sd.get("exchange", self.exchange)
        self._stats = {**_empty_stats(), **sd.get("stats", {})}
        self._step = _StepTotals()

    def _check_config(self, config: dict[str, Any]) -> None:
        for k in ("format", "coder", "model"):
            if config.get(k) != self.config[k]:
                raise StateMismatchError(f"co3 DDP state saved with {k}={config.get(k)!r}, "
                                            f"loaded with {k}={self.config[k]!r}")

    def _own_part(self, job: dict[str, Any]) -> dict[str, Any]:
        """This rank's state out of a :meth:`job_state_dict` (checked against the group)."""
        if job.get("version") != STATE_VERSION or not isinstance(job.get("ranks"), list):
            raise InputError(f"CO3State: not a version-{STATE_VERSION} co3 DDP job state dict")
        self._check_config(job["config"])
        if not dist.is_initialized():
            raise InputError("CO3State: a job state dict is loaded after init_process_group "
                             "(each rank takes its own part)")
        rank, world = _where(self.process_group)
        if job["world_size"] != world or len(job["ranks"]) != world:
            raise StateMismatchError(f"co3 DDP state saved with world size "
                                        f"{job['world_size']}, loaded with {world}")
        return job["ranks"][rank]

    def _check_placement(self, rank: int, world: int) -> None:
        """Raise unless the loaded state was taken on this rank of a job this size."""
        saved_rank, saved_world = self._placement
        if saved_world != world:
            raise StateMismatchError(f"co3 DDP state saved with world size {saved_world}, "
                                        f"loaded with {world}")
        if saved_rank != rank:
            raise StateMismatchError(f"co3 DDP state of rank {saved_rank} loaded on rank {rank}")
        self._placement = None

    # ----------------------------------------------------------------- guard
    def check_ran(self, optimizer_steps: int, who: str = "") -> None:
        """Raise :class:`CO3HookNotRunError` if ``optimizer_steps`` (>= 1) optimizer steps
        went by and the hook finished no step in this process."""
        if optimizer_steps >= 1 and self._steps_here == 0:
            raise CO3HookNotRunError(
                f"{who}co3 DDP hook never ran: 0 hook steps after {optimizer_steps} optimizer "
                f"step(s), training is uncompressed; register it with "
                f"ddp_model.register_comm_hook(state, co3_hook) (Lightning: CO3DDPStrategy, "
                f"Accelerate: co3cli.integrations.accelerate.register)")

    def guard(self, optimizer: torch.optim.Optimizer, after: int = 1) -> Any:
        """Check :meth:`check_ran` after ``after`` steps of ``optimizer`` (a step post-hook that
        removes itself once checked); returns its handle."""
        check_int("after", after, lo=1, who="CO3State.guard: ")
        count = [0]

        def post_step(opt: Any, args: Any, kwargs: Any) -> None:
            count[0] += 1
            if count[0] >= after:
                handle.remove()
                self.check_ran(count[0])

        handle = optimizer.register_step_post_hook(post_step)
        return handle

    def __getstate__(self) -> dict[str, Any]:
        return {"config": self.config, "gamma": self.gamma, "exchange": self.exchange,
                "overlap": self.overlap, "state_dict": pickle.dumps(self.state_dict())}

    def __setstate__(self, d: dict[str, Any]) -> None:
        self.__init__(None, gamma=d["gamma"], exchange=d["exchange"],
                      overlap=d.get("overlap", False), **d["config"])
        self.load_state_dict(pickle.loads(d["state_dict"]))


def _where(group: Any) -> tuple[int | None, int | None]:
    """(rank, world size) in ``group``, or (None, None) without a process group."""
    if not dist.is_initialized():
        return None, None
    return dist.get_rank(group), dist.get_world_size(group)


def _empty_stats() -> dict[str, Any]:
    s: dict[str, Any] = {"steps": 0, "bytes_last_step": 0, "padded_bytes_last_step": 0,
                         "bytes_total": 0, "padded_bytes_total": 0, "entries_per_step": 0,
                         "entries_total": 0, "entropy_bits_total": 0.0, "bits_per_entry_last": 0.0,
                         "entropy_bits_per_entry_last": 0.0, "resets": 0,
                         "nonfinite_buckets": 0, "scale_fallbacks": 0}
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
    """DDP communication hook: co3-compress this rank's bucket (per parameter, with error
    feedback), all-gather the payloads, decode every rank's, and return their mean. By default
    it works synchronously (the returned future is already completed); with
    ``CO3State(overlap=True)`` the work runs on the state's one worker thread, in bucket order,
    and the future completes when it is done. See the module docstring."""
    group = state.process_group
    world = dist.get_world_size(group)
    rank = dist.get_rank(group)
    if state._placement is not None:  # a state loaded before the process group existed
        state._check_placement(rank, world)
    buf = bucket.buffer()
    t0 = time.perf_counter()
    pstates = [state._param(p) for p in bucket.parameters()]
    bounds = np.cumsum([0] + [ps.numel for ps in pstates])
    if bounds[-1] != buf.numel():
        raise RuntimeError(f"co3_hook: bucket {bucket.index()} has {buf.numel()} entries, "
                           f"its parameters {bounds[-1]}")
    last = bucket.is_last()
    fut: torch.futures.Future[torch.Tensor] = torch.futures.Future()
    if not state.overlap:
        fut.set_result(_bucket_mean(state, buf, pstates, bounds, last, rank, world, t0))
        return fut
    if state._worker is None:
        from concurrent.futures import ThreadPoolExecutor

        state._worker = ThreadPoolExecutor(1, thread_name_prefix="co3-ddp")

    def work() -> None:
        try:
            fut.set_result(_bucket_mean(state, buf, pstates, bounds, last, rank, world,
                                        time.perf_counter()))
        except BaseException as e:  # noqa: BLE001 - handed to DDP through the future
            fut.set_exception(e)

    state._worker.submit(work)  # one thread: buckets in order, the same on every rank
    return fut


def _bucket_mean(state: CO3State, buf: torch.Tensor, pstates: list[_ParamState],
                 bounds: np.ndarray, last: bool, rank: int, world: int,
                 t0: float) -> torch.Tensor:
    """The rank-mean of one bucket through co3 (the hook's work; see the module docstring)."""
    group, comp = state.process_group, state.compressor
    g = buf.detach().to(device="cpu", dtype=torch.float32).numpy().reshape(-1)
    # NaN/Inf anywhere (e.g. an fp16 GradScaler overflow step): every rank must take the same
    # path, so the ranks agree with a one-integer all-reduce; then the bucket is averaged as is
    # (the result keeps the NaN/Inf for the scaler to see) and no memory or table is touched
    # (a float32 sum: NaN/Inf propagate; a finite bucket whose sum overflows takes the safe,
    # uncompressed path too)
    bad = torch.tensor([0 if np.isfinite(g.sum()) else 1], dtype=torch.int32, device=buf.device)
    dist.all_reduce(bad, op=dist.ReduceOp.MAX, group=group)
    if int(bad.item()):
        raw = buf.detach().clone()
        dist.all_reduce(raw, group=group)
        state._stats["nonfinite_buckets"] += 1
        state._step.payload_bytes += raw.numel() * raw.element_size()  # what went on the wire
        state._step.padded_bytes += raw.numel() * raw.element_size()
        state._step.entries += g.size
        if last:
            state._finish_step()
        return raw.div_(world)
    own = np.empty(g.size, np.float32)  # this rank's v_hat
    t1 = time.perf_counter()
    parts, entropy = [], 0.0
    for ps, lo, hi in zip(pstates, bounds[:-1], bounds[1:]):
        ps.sender["cols"] = ps.cols
        packet = state.feedback.step(ps.key, g[lo:hi], comp, ps.sender, state._rng)
        own[lo:hi] = packet.v_hat
        parts.append(packet.payload)
        entropy += packet.entropy_bits or 0.0
        state._stats["scale_fallbacks"] += packet.scale_fallbacks
    payload = uvarints_to_bytes([len(b) for b in parts]) + b"".join(parts)
    t2 = time.perf_counter()
    if state.exchange == "tensor":
        payloads, padded = _exchange_tensor(payload, buf.device, group, world)
    else:
        payloads, padded = _exchange_object(payload, group, world)
    t3 = time.perf_counter()
    total = np.zeros(g.size, np.float32)
    for src in range(world):  # rank order, float32: the same sum on every replica
        if src == rank:
            total += own
        else:
            _decode_into(total, payloads[src], src, pstates, bounds, comp)
    total /= np.float32(world)
    t4 = time.perf_counter()
    mean = torch.from_numpy(total).to(device=buf.device, dtype=buf.dtype).view_as(buf)
    t5 = time.perf_counter()

    st = state._step
    st.payload_bytes += len(payload) + LENGTH_BYTES
    st.padded_bytes += padded + LENGTH_BYTES
    st.entries += g.size
    st.entropy_bits += entropy
    st.t_host += (t1 - t0) + (t5 - t4)
    st.t_compress += t2 - t1
    st.t_exchange += t3 - t2
    st.t_decode += t4 - t3
    if last:
        state._finish_step()
    return mean


def _decode_into(total: np.ndarray, payload: bytes, src: int, pstates: list[_ParamState],
                 bounds: np.ndarray, comp: CO3) -> None:
    """Add rank ``src``'s decoded bucket payload to ``total`` (float32), parameter by parameter."""
    count = len(pstates)
    lengths, pos = uvarints_from_bytes(payload[:9 * count], count, "co3 ddp payload lengths")
    ends = pos + np.cumsum(lengths.astype(np.int64))
    if count and ends[-1] != len(payload):
        raise CorruptDataError(f"co3 ddp: rank {src} sent {len(payload)} bytes, its lengths "
                               f"say {int(ends[-1])}")
    starts = np.concatenate([[pos], ends[:-1]])
    for ps, a, b, lo, hi in zip(pstates, starts, ends, bounds[:-1], bounds[1:]):
        rs = ps.receivers.setdefault(src, {})
        rs["cols"] = ps.cols
        total[lo:hi] += comp.decompress(payload[a:b], ps.numel, rs)
