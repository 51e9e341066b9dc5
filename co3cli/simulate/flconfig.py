"""What one ``co3 simulate fl`` run is: ``FLConfig``, its checks, and where its values come from.

::

    FLConfig() defaults
      < config file       JSON (TOML too, with Python >= 3.11): FLConfig fields, or a run's
                          config.json ({"schema": "co3.simulate-fl/1", "config": {...}, ...})
      < explicit options  --clients 20, --format fp4-co3, --param levels=4, --stragglers mds, ...
      < --set key=value   a config field (typed by its FLConfig type) or a compressor parameter
      = resolve_config(options, file=..., sets=...)  --check_config-->  the configured compressor

Changing the compressor at one level (the file says ``co3``, ``-c qsgd`` on the command line)
drops the compressor parameters of the levels below. ``sweep_configs`` expands ``--sweep
name=v1,v2,...`` into configs, typing the values the same way (``parse_field``). The config a
run writes into its folder (``config.json``) is a valid config file: it reruns the run.
"""

from __future__ import annotations

import dataclasses
import json
import math
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from co3cli.checks import check_int, check_real
from co3cli.errors import InputError

try:
    import tomllib
except ImportError:  # Python 3.10: JSON config files only
    tomllib = None

ALGORITHMS = ("fedsgd", "fedavg")
PARTITIONS = ("iid", "dirichlet", "shards")
SCHEDULES = ("constant", "cosine", "step")
RUN_SCHEMA = "co3.simulate-fl/1"  # a run folder's config.json


@dataclass
class FLConfig:
    """One federated run. ``lr`` is the server step for FedSGD and the clients' for FedAvg."""

    task: str = "mnist5k-mlp"
    clients: int = 10
    rounds: int = 200
    algorithm: str = "fedsgd"
    local_steps: int = 1  # FedAvg: E local SGD steps per round
    batch_size: int = 64
    lr: float = 0.1
    server_lr: float = 1.0  # FedAvg: server step on the averaged model delta
    momentum: float = 0.0  # server momentum
    lr_schedule: str = "constant"  # constant | cosine (to 0 at the last round) | step (x0.1 at 1/2, 3/4)
    partition: str = "iid"
    alpha: float = 0.3  # Dirichlet concentration (partition="dirichlet")
    shards_per_client: int = 2  # partition="shards"
    participation: int | None = None  # m clients per round (None: all)
    compressor: str = "none"
    compressor_params: dict[str, Any] = field(default_factory=dict)
    gamma: float = 0.0  # error-feedback memory decay
    eval_every: int = 10
    test_fraction: float = 0.2
    seed: int = 0
    dump_rounds: tuple[int, ...] = ()
    dump_client: int = 0
    # coded back-propagation on each client (co3cli.simulate.uep.train.StragglerConfig fields;
    # None: exact backward). The straggler seed is derived from ``seed`` and the client.
    stragglers: dict[str, Any] | None = None
    # the wall clock (co3cli.simulate.clock, specs: co3cli.simulate.links): client links and
    # devices, the compute-time model, the round deadline, the target accuracy for the summary
    uplink: str | None = None  # e.g. "10mbit", "lognormal:10mbit:0.5", "trace.csv"; None: free
    downlink: str | None = None  # None: "1x" (the client's uplink); "10x", "100mbit", ...
    latency: str | None = None  # one way, e.g. "20ms", "uniform:10ms:50ms"; None: 0
    compute_factor: str | None = None  # per-client slowdown, e.g. "lognormal:1:0.5"; None: 1
    compute_time: str = "measured"  # or seconds per local step ("20ms"): deterministic
    round_deadline: str | None = None  # drop clients arriving later (needs a fixed compute_time)
    target: float | None = None  # test accuracy for summary.json's time to target
    link_seed: int | None = None  # the link and device draws (None: seed)
    # bring your own task: "path/to/job.py:make_task" or "module:function" (co3cli.tasks.fltask;
    # ``task`` is then ignored); buffers (BatchNorm statistics): "average" or "local"
    entry: str | None = None
    buffers: str = "average"

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["dump_rounds"] = list(self.dump_rounds)
        return d

    @classmethod
    def from_dict(cls, doc: dict[str, Any], where: str = "config") -> FLConfig:
        """The config of ``doc`` (missing fields: defaults); unknown fields are refused."""
        unknown = sorted(set(doc) - set(FIELDS))
        if unknown:
            raise InputError(f"{where}: unknown field(s) {unknown}; allowed: {', '.join(FIELDS)}")
        d = dict(doc)
        if not isinstance(d.get("compressor_params", {}), dict):
            raise InputError(f"{where}: compressor_params must be a table of parameters")
        if not isinstance(d.get("stragglers"), (dict, type(None))):
            raise InputError(f"{where}: stragglers must be a table of StragglerConfig fields")
        if "dump_rounds" in d:
            if not isinstance(d["dump_rounds"], (list, tuple)):
                raise InputError(f"{where}: dump_rounds must be a list of rounds")
            d["dump_rounds"] = tuple(d["dump_rounds"])
        return cls(**d)


FIELDS = tuple(f.name for f in dataclasses.fields(FLConfig))


def check_config(cfg: FLConfig):
    """Validate ``cfg`` (InputError naming the field); return the configured compressor."""
    from co3cli.compressors import get_compressor
    from co3cli.tasks import get_task
    from co3cli.tasks.buffers import BUFFER_RULES
    from co3cli.tasks.fltask import check_entry

    if cfg.entry is None:
        get_task(cfg.task)
    else:
        check_entry(cfg.entry)
    if cfg.buffers not in BUFFER_RULES:
        raise InputError(f"buffers={cfg.buffers!r} is not one of {', '.join(BUFFER_RULES)}")
    check_int("clients", cfg.clients, 1)
    check_int("rounds", cfg.rounds, 1)
    for name, allowed in (("algorithm", ALGORITHMS), ("partition", PARTITIONS),
                          ("lr_schedule", SCHEDULES)):
        if getattr(cfg, name) not in allowed:
            raise InputError(f"{name}={getattr(cfg, name)!r} is not one of {', '.join(allowed)}")
    check_int("local_steps", cfg.local_steps, 1)
    check_int("batch_size", cfg.batch_size, 1)
    check_real("lr", cfg.lr, 0.0, lo_open=True)
    check_real("server_lr", cfg.server_lr, 0.0, lo_open=True)
    check_real("momentum", cfg.momentum, 0.0, 0.999)
    check_real("alpha", cfg.alpha, 0.0, lo_open=True)
    check_int("shards_per_client", cfg.shards_per_client, 1)
    if cfg.participation is not None:
        check_int("participation", cfg.participation, 1)
        if cfg.participation > cfg.clients:
            raise InputError(f"participation={cfg.participation} exceeds clients={cfg.clients}")
    check_real("gamma", cfg.gamma, 0.0, 1.0)
    check_int("eval_every", cfg.eval_every, 1)
    check_real("test_fraction", cfg.test_fraction, 0.0, 0.9, lo_open=True)
    check_int("seed", cfg.seed, 0)
    for r in cfg.dump_rounds:
        check_int("dump_rounds entry", r, 0)
        if r >= cfg.rounds:
            raise InputError(f"dump_rounds entry {r} is not a round (rounds 0..{cfg.rounds - 1})")
    check_int("dump_client", cfg.dump_client, 0)
    if cfg.dump_client >= cfg.clients:
        raise InputError(f"dump_client={cfg.dump_client} must be < clients={cfg.clients}")
    if cfg.stragglers is not None:
        straggler_config(cfg, 0)
    from co3cli.simulate.clock import check_clock

    check_clock(cfg)
    return get_compressor(cfg.compressor, **cfg.compressor_params)


def straggler_config(cfg: FLConfig, client: int):
    """Client ``client``'s StragglerConfig (validated), its seed derived from the run's."""
    from co3cli.simulate.uep.train import StragglerConfig

    fields = {f.name for f in dataclasses.fields(StragglerConfig)}
    given = dict(cfg.stragglers or {})
    unknown = sorted(set(given) - fields - {"n_workers"})
    if unknown:
        raise InputError(f"stragglers: unknown field(s) {unknown}; allowed: {', '.join(sorted(fields))}")
    given.pop("n_workers", None)
    for key in ("windows", "class_sizes", "blocks"):
        if isinstance(given.get(key), list):
            given[key] = tuple(given[key])
    seed = int(np.random.SeedSequence([cfg.seed, 0x57A6, client]).generate_state(1)[0])
    return StragglerConfig(**{**given, "seed": seed}).check()


def lr_at(cfg: FLConfig, r: int) -> float:
    """The learning rate of round ``r`` under ``cfg.lr_schedule``."""
    if cfg.lr_schedule == "cosine":
        return cfg.lr * 0.5 * (1 + math.cos(math.pi * r / cfg.rounds))
    if cfg.lr_schedule == "step":
        return cfg.lr * (0.1 if r >= cfg.rounds // 2 else 1.0) * (0.1 if r >= 3 * cfg.rounds // 4 else 1.0)
    return cfg.lr


# -- typed values ----------------------------------------------------------------------------------
def parse_value(v: str) -> Any:
    """'4' -> 4, '0.5' -> 0.5, else the string (a compressor parameter's value)."""
    for conv in (int, float):
        try:
            return conv(v)
        except ValueError:
            pass
    return v


_KIND_TEXT = {int: "an integer", float: "a number", tuple: "comma-separated integers",
              dict: "a JSON object"}


def parse_field(name: str, text: str, who: str) -> Any:
    """``text`` typed by FLConfig field ``name``'s type: int, float, str, comma-separated
    integers (tuple fields), a JSON object (dict fields); ``none`` for an optional field."""
    t = typing.get_type_hints(FLConfig)[name]
    if typing.get_origin(t) in (typing.Union, types.UnionType):  # X | None
        if text.strip().lower() in ("none", "null"):
            return None
        t = next(a for a in typing.get_args(t) if a is not type(None))
    kind = typing.get_origin(t) or t
    try:
        if kind is int:
            return int(text)
        if kind is float:
            return float(text)
        if kind is tuple:
            return tuple(int(x) for x in text.split(",") if x.strip())
        if kind is dict:
            value = json.loads(text)
            if not isinstance(value, dict):
                raise ValueError(text)
            return value
    except ValueError:
        raise InputError(f"{who} {name}: {text!r} is not {_KIND_TEXT[kind]}") from None
    return text


def compressor_param_names(compressor: str) -> tuple[str, ...]:
    """The parameters compressor ``compressor`` takes (InputError for an unknown id)."""
    from co3cli.compressors import get_compressor

    return tuple(get_compressor(compressor).params)


def _set_compressor(doc: dict[str, Any], compressor: str) -> None:
    if compressor != doc["compressor"]:  # another compressor: the old one's parameters go
        doc["compressor"], doc["compressor_params"] = compressor, {}


# -- sweeps ----------------------------------------------------------------------------------------
SWEEP_FIXED = ("compressor_params", "dump_rounds", "stragglers", "dump_client", "compressor")


def sweep_configs(base: FLConfig, spec: str) -> list[tuple[str, FLConfig]]:
    """``"gamma=0,0.5,0.7"`` (a config field or a compressor parameter) -> [(label, config)]."""
    if "=" not in spec:
        raise InputError(f"--sweep {spec!r} must look like name=v1,v2,...")
    key, _, values = spec.partition("=")
    key = key.strip().replace("-", "_")
    vals = [v.strip() for v in values.split(",") if v.strip()]
    if not vals:
        raise InputError(f"--sweep {spec!r} lists no values")
    if key in SWEEP_FIXED:
        raise InputError(f"--sweep cannot vary {key!r}; sweep a scalar field (gamma, lr, "
                         "clients, ...) or a compressor parameter (format, coder, levels, ...)")
    out = []
    for v in vals:
        if key in FIELDS:
            cfg = dataclasses.replace(base, **{key: parse_field(key, v, "--sweep")})
        else:
            cfg = dataclasses.replace(base, compressor_params={**base.compressor_params,
                                                               key: parse_value(v)})
        out.append((f"{key}={v}", cfg))
    return out


# -- config files and command-line values ----------------------------------------------------------
def load_config_file(path: str | Path) -> dict[str, Any]:
    """The FLConfig fields in a JSON or TOML (``.toml``) file; of a run's config.json, its
    ``config``. Fields are not checked here (``FLConfig.from_dict``, ``check_config``)."""
    p = Path(path)
    try:
        raw = p.read_bytes()
    except OSError as e:
        raise InputError(f"cannot read config file {str(p)!r}: {e.strerror or e}") from None
    if p.suffix.lower() == ".toml":
        if tomllib is None:
            raise InputError(f"config file {p}: TOML needs Python 3.11 or later (tomllib); "
                             "give the config as JSON")
        try:
            doc = tomllib.loads(raw.decode("utf-8"))
        except ValueError as e:  # TOMLDecodeError, UnicodeDecodeError
            raise InputError(f"config file {p} is not valid TOML ({e})") from None
    else:
        try:
            doc = json.loads(raw)
        except ValueError as e:
            raise InputError(f"config file {p} is not valid JSON ({e}); a TOML config needs "
                             "the .toml suffix") from None
    if isinstance(doc, dict) and doc.get("schema") == RUN_SCHEMA:
        doc = doc.get("config")
    if not isinstance(doc, dict):
        raise InputError(f"config file {p} must hold a table of config fields")
    return doc


# command-line options that are FLConfig fields as they are
FIELD_OPTIONS = ("task", "clients", "rounds", "algorithm", "local_steps", "batch_size", "lr",
                 "server_lr", "momentum", "lr_schedule", "partition", "alpha",
                 "shards_per_client", "participation", "gamma", "eval_every", "seed",
                 "dump_client", "uplink", "downlink", "latency", "compute_factor", "compute_time",
                 "round_deadline", "target", "link_seed",
                 "entry", "buffers")
CO3_OPTIONS = ("format", "scale", "coder", "model", "refit_every")  # -> co3's parameters
STRAGGLER_OPTIONS = {"windows": "windows", "classes": "class_sizes",
                     "straggler_workers": "workers", "deadline": "deadline",
                     "wait_for": "wait_for"}  # option -> StragglerConfig field
OPTIONS = (FIELD_OPTIONS + CO3_OPTIONS + tuple(STRAGGLER_OPTIONS)
           + ("compressor", "param", "dump_rounds", "stragglers", "rate"))


def resolve_config(options: dict[str, Any] | None = None, *, file: str | Path | None = None,
                   sets: typing.Sequence[str] = ()) -> FLConfig:
    """The effective config: defaults < ``file`` < ``options`` < ``sets`` (in order).

    ``options``: the command-line options given explicitly (names of ``OPTIONS``; ``None``
    values count as not given): FLConfig fields, ``compressor``, co3's ``format``/``scale``/
    ``coder``/``model``/``refit_every``, ``param`` (``name=value`` strings), ``dump_rounds``
    (``"0,5"``), ``stragglers`` (a scheme) with ``windows``/``classes`` (comma lists),
    ``straggler_workers``, ``deadline``, ``wait_for``, ``rate``. ``sets``: ``key=value``.
    """
    doc = FLConfig().to_dict()
    if file is not None:
        doc = FLConfig.from_dict(load_config_file(file), f"config file {file}").to_dict()
    opts = {k: v for k, v in (options or {}).items() if v is not None}
    unknown = sorted(set(opts) - set(OPTIONS))
    if unknown:
        raise InputError(f"unknown simulate fl option(s) {unknown}; allowed: {', '.join(OPTIONS)}")
    if "task" in opts and "entry" in opts:
        raise InputError("give --task (a built-in task) or --entry (your own), not both")
    if "compressor" in opts:
        _set_compressor(doc, opts["compressor"])
    doc.update({k: opts[k] for k in FIELD_OPTIONS if k in opts})
    doc["compressor_params"] = _compressor_params(doc, opts)
    if "dump_rounds" in opts:
        from co3cli.simulate.uep.report import parse_ints

        doc["dump_rounds"] = tuple(parse_ints(opts["dump_rounds"], "--dump-rounds"))
    doc["stragglers"] = _stragglers(doc["stragglers"], opts)
    for item in sets:
        _apply_set(doc, item)
    return FLConfig.from_dict(doc)


def _compressor_params(doc: dict[str, Any], opts: dict[str, Any]) -> dict[str, Any]:
    params = dict(doc["compressor_params"])
    for name in CO3_OPTIONS:
        if name in opts:
            if doc["compressor"] != "co3":
                raise InputError(f"--{name.replace('_', '-')} applies to --compressor co3 only; "
                                 f"use --param for {doc['compressor']!r}")
            params[name] = opts[name]
    for item in opts.get("param", ()):
        key, eq, value = item.partition("=")
        if not eq or not key.strip():
            raise InputError(f"--param {item!r} must look like name=value")
        params[key.strip().replace("-", "_")] = parse_value(value.strip())
    return params


def _stragglers(current: dict[str, Any] | None, opts: dict[str, Any]) -> dict[str, Any] | None:
    """The straggler dict: --stragglers SCHEME starts a new one (unless the file's has that
    scheme); --windows, --classes, ... update it; --rate only applies to one."""
    scheme = opts.get("stragglers")
    if scheme is not None and (current is None or current.get("scheme") != scheme):
        current = {"scheme": scheme, "rate": 1.0}  # 1.0: the --rate default
    if current is None:
        if any(k in opts for k in STRAGGLER_OPTIONS):
            raise InputError("--windows, --classes, --straggler-workers, --deadline and "
                             "--wait-for need --stragglers SCHEME")
        return None
    from co3cli.simulate.uep import report as ur

    current = dict(current)
    if "rate" in opts:
        current["rate"] = opts["rate"]
    for opt, key in STRAGGLER_OPTIONS.items():
        if opt in opts:
            value = opts[opt]
            if opt in ("windows", "classes"):
                parse = ur.parse_floats if opt == "windows" else ur.parse_ints
                value = tuple(parse(value, f"--{opt}"))
            current[key] = value
    return current


def _apply_set(doc: dict[str, Any], item: str) -> None:
    """One ``--set key=value`` onto ``doc``: a config field or a compressor parameter."""
    key, eq, value = item.partition("=")
    key, value = key.strip().replace("-", "_"), value.strip()
    if not eq or not key:
        raise InputError(f"--set {item!r} must look like key=value")
    if key in FIELDS:
        value = parse_field(key, value, "--set")
        if key == "compressor":
            _set_compressor(doc, value)
        doc[key] = value
        return
    params = compressor_param_names(doc["compressor"])
    if key not in params:
        raise InputError(f"--set {key}: unknown key; allowed: a config field ({', '.join(FIELDS)}) "
                         f"or a parameter of compressor {doc['compressor']!r} "
                         f"({', '.join(params) or 'none'})")
    doc["compressor_params"] = {**doc["compressor_params"], key: parse_value(value)}
