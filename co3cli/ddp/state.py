"""``CO3State``: the configuration and per-parameter state of :func:`co3cli.ddp.co3_hook` on one
rank (error memories, coder tables, statistics), its checkpoints (``state_dict``,
``job_state_dict``) and the guard; see :mod:`co3cli.ddp` for the data flow."""

from __future__ import annotations

import pickle
import weakref
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from co3cli.checks import check_int, check_real
from co3cli.coding import CODERS, row_length
from co3cli.compressors import CO3, get_compressor
from co3cli.compressors.device import TorchCO3
from co3cli.ddp import wire
from co3cli.errors import Co3Error, CorruptDataError, InputError

EXCHANGES = ("tensor", "object")
WHO = "co3 DDP"
STATE_VERSION = 2  # 2: records the rank and world size it was taken on (1 still loads)
JOB_KIND = "co3-ddp-job"  # job_state_dict(): every rank's state in one dict
LENGTH_BYTES = 8  # the int64 payload length each rank all-gathers per bucket
CONFIG_KEYS = ("format", "coder", "model")  # a checkpoint must match these


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
    order (the same results, bit for bit, as the synchronous default); ``path``: ``"auto"``
    (CPU buckets through the numba quantizer, CUDA buckets through torch ops on the device) or
    ``"torch"`` (torch ops for every bucket; the same bits, for tests).
    """

    def __init__(self, process_group: Any = None, *, format: str = "fp8-e5m2", coder: str = "ans",
                 gamma: float = 0.9, refit_every: int = 100, model: str = "gennorm-zi",
                 scale: str | None = None, exchange: str = "tensor", overlap: bool = False,
                 path: str = "auto"):
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
        try:  # error feedback + co3 on the bucket's device; keys: parameter keys
            self.feedback = TorchCO3(self.compressor, gamma, path)
        except InputError as e:
            raise InputError(f"CO3State: {e}") from None
        self.exchange = exchange
        self.overlap = overlap
        self.path = path
        self.checked = False  # the ranks' configs were compared (the hook's first call)
        self._worker: Any = None  # overlap: the one thread that codes and exchanges, FIFO
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
            memory = self.feedback.memory(key)  # a host copy
            memory = np.zeros(ps.numel, np.float32) if memory is None else memory
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
        self.feedback.gamma = gamma
        self.feedback.memories = {}
        for key, memory in memories.items():
            self.feedback.load(key, memory)
        self.exchange = sd.get("exchange", self.exchange)
        self._stats = {**_empty_stats(), **sd.get("stats", {})}
        self._step = _StepTotals()

    def _check_config(self, config: dict[str, Any]) -> None:
        wire.check_saved_config(config, self.config, CONFIG_KEYS, WHO)

    def _own_part(self, job: dict[str, Any]) -> dict[str, Any]:
        """This rank's state out of a :meth:`job_state_dict` (checked against the group)."""
        if job.get("version") != STATE_VERSION or not isinstance(job.get("ranks"), list):
            raise InputError(f"CO3State: not a version-{STATE_VERSION} co3 DDP job state dict")
        self._check_config(job["config"])
        if not dist.is_initialized():
            raise InputError("CO3State: a job state dict is loaded after init_process_group "
                             "(each rank takes its own part)")
        rank, world = _where(self.process_group)
        if len(job["ranks"]) != job["world_size"]:
            raise CorruptDataError(f"{WHO} job state: {len(job['ranks'])} ranks for world size "
                                   f"{job['world_size']}")
        wire.check_placement(rank, job["world_size"], rank, world, WHO)
        return job["ranks"][rank]

    def _check_placement(self, rank: int, world: int) -> None:
        """Raise unless the loaded state was taken on this rank of a job this size."""
        wire.check_placement(*self._placement, rank, world, WHO)
        self._placement = None

    def check_configs(self) -> None:
        """Compare every rank's configuration (a collective; the hook's first call does it):
        :class:`co3cli.errors.ConfigMismatchError` on every rank if they differ."""
        wire.check_configs({**self.config, "gamma": self.gamma, "exchange": self.exchange,
                            "world": dist.get_world_size(self.process_group)},
                           self.process_group, WHO)
        self.checked = True

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
                "overlap": self.overlap, "path": self.path,
                "state_dict": pickle.dumps(self.state_dict())}

    def __setstate__(self, d: dict[str, Any]) -> None:
        self.__init__(None, gamma=d["gamma"], exchange=d["exchange"],
                      overlap=d.get("overlap", False), path=d.get("path", "auto"), **d["config"])
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


