"""Client links and devices for the wall clock of ``co3 simulate fl``: specs, seeded draws, traces.

Four per-client quantities, each given by a spec (``--uplink``, ``--downlink``, ``--latency``,
``--compute-factor``; the FLConfig fields of the same names)::

    spec text --parse_spec--> LinkSpec (a LINK_SPECS entry, its config() goes into config.json)
              --bind(clients, rng)--> Bound:  at(clients, round, time) -> one value per client

    VALUE                   the same for every client: 10mbit, 2.5Mbit/s, 100kbps, 1e6 (bit/s);
                            20ms, 0.5s, 300us, 0.02 (seconds); 1.5 (a compute factor)
    fixed:VALUE             the same, spelled out
    lognormal:MEDIAN:SIGMA  per client, drawn once: MEDIAN * exp(SIGMA * z), z ~ N(0, 1)
    uniform:LO:HI           per client, drawn once: uniform in [LO, HI]
    trace:FILE[:COLUMN]     a CSV trace (FILE.csv alone works too), see below
    Nx                      --downlink only: N times the client's own uplink (10x)

Defaults: no ``--uplink``: the network is free (infinite rate); ``--downlink`` defaults to
``1x`` (the client's uplink); no ``--latency``: 0; no ``--compute-factor``: 1. A latency is one
way, paid once by the download and once by the upload. Distributions draw one value per
client for the whole run (clients differ, rounds do not), each quantity from its own stream of
``link_seed``, so changing one spec never changes the draws of another; traces vary over rounds
or time.

Trace files: a header with ``client``, then ``round`` or ``time`` (seconds on the simulated
clock), then value columns named after the quantity (``uplink``, ``downlink``, ``latency``,
``compute_factor``; ``trace:FILE:COLUMN`` picks another). Values take the units above (a bare
number is bit/s or seconds). A client's value holds from its row's round (time) until its next
row; its first row also covers the rounds before it. Every client of the run must have a row;
rates and factors must be > 0, latencies >= 0; each is refused with one line naming the file
and row otherwise::

    client,round,uplink,downlink,latency
    0,0,10mbit,100mbit,20ms
    0,50,2mbit,20mbit,40ms
    1,0,5mbit,50mbit,30ms
"""

from __future__ import annotations

import csv
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from co3cli.errors import InputError
from co3cli.registry import Configurable, Registry

# quantity -> (unit kind, option name)
QUANTITIES = {"uplink": "rate", "downlink": "rate", "latency": "time", "compute_factor": "factor"}
_UNITS = {
    "rate": {"": 1.0, "bit": 1.0, "kbit": 1e3, "mbit": 1e6, "gbit": 1e9,
             "bps": 1.0, "kbps": 1e3, "mbps": 1e6, "gbps": 1e9},
    "time": {"": 1.0, "s": 1.0, "ms": 1e-3, "us": 1e-6},
    "factor": {"": 1.0, "x": 1.0},
}
_EXAMPLE = {"rate": "a rate such as 10mbit, 2.5Mbit/s, 100kbit or 1e6 (bit/s)",
            "time": "a time such as 20ms, 0.5s, 300us or 0.02 (seconds)",
            "factor": "a factor such as 1.5"}
_NUMBER = re.compile(r"^\s*([-+]?(?:\d+\.?\d*|\.\d+)(?:e[-+]?\d+)?)\s*([a-z]*)(/s)?\s*$", re.I)
_RELATIVE = re.compile(r"^\s*((?:\d+\.?\d*|\.\d+)(?:e[-+]?\d+)?)\s*x\s*$", re.I)


def option(quantity: str) -> str:
    return "--" + quantity.replace("_", "-")


def parse_value(text: Any, quantity: str, who: str = "") -> float:
    """``text`` ("10mbit", "20ms", 1.5) in bit/s, seconds or as a factor; InputError otherwise."""
    kind = QUANTITIES[quantity]
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        value = float(text)
    else:
        m = _NUMBER.match(str(text))
        unit = m.group(2).lower() if m else None
        if m is None or unit not in _UNITS[kind] or (m.group(3) and kind != "rate"):
            raise InputError(f"{who}{text!r} is not {_EXAMPLE[kind]}")
        value = float(m.group(1)) * _UNITS[kind][unit]
    if not math.isfinite(value) or value < 0 or (value == 0 and kind != "time"):
        raise InputError(f"{who}{text!r} must be {'>= 0' if kind == 'time' else '> 0'}")
    return value


LINK_SPECS: Registry = Registry(
    "link spec", describe="VALUE (10mbit, 20ms, 1.5), FILE.csv, Nx (--downlink: N x the uplink)")


class LinkSpec(Configurable):
    """A spec of one per-client quantity; its ``bind(clients, rng) -> Bound`` turns it into the
    run's values (:class:`Drawn` specs draw them once; traces and ``Nx`` bind otherwise)."""

    kind = "link spec"
    ARGS: ClassVar[tuple[str, ...]] = ()  # the ':'-separated arguments, in order

    @classmethod
    def parse(cls, args: list[str], quantity: str, who: str) -> LinkSpec:
        if len(args) != len(cls.ARGS):
            form = ":".join([cls.id] + [a.upper() for a in cls.ARGS])
            raise InputError(f"{who}{cls.id} takes {len(cls.ARGS)} argument(s): {form}")
        return cls(quantity=quantity, **{a: parse_value(v, quantity, who)
                                         for a, v in zip(cls.ARGS, args)})


class Drawn(LinkSpec):
    """A spec whose values are one draw per client for the whole run: each subclass defines
    ``draw(clients, rng) -> np.ndarray``."""

    def bind(self, clients: int, rng: np.random.Generator) -> Bound:
        return Bound(self.draw(clients, rng))


@dataclass
class Bound:
    """A quantity's value per client: ``static`` (one per client) or a ``trace``, or ``times``
    the uplink (``relative``)."""

    static: np.ndarray | None = None
    trace: Trace | None = None
    relative: float | None = None

    def at(self, clients: np.ndarray, r: int, t: float, uplink: np.ndarray | None = None):
        if self.static is not None:
            return self.static[clients]
        if self.trace is not None:
            return self.trace.at(clients, r, t)
        return self.relative * uplink


@LINK_SPECS.register
class Fixed(Drawn):
    """the same value for every client"""

    id = "fixed"
    PARAMS = {"quantity": None, "value": None}
    ARGS = ("value",)

    def draw(self, clients, rng):
        return np.full(clients, float(self.params["value"]))


@LINK_SPECS.register
class LogNormal(Drawn):
    """per client: MEDIAN * exp(SIGMA * z), z ~ N(0, 1), drawn once"""

    id = "lognormal"
    PARAMS = {"quantity": None, "median": None, "sigma": None}
    ARGS = ("median", "sigma")

    @classmethod
    def parse(cls, args, quantity, who):
        if len(args) == 2:  # sigma is a plain number whatever the quantity
            return cls(quantity=quantity, median=parse_value(args[0], quantity, who),
                       sigma=_plain(args[1], "sigma", who))
        return super().parse(args, quantity, who)

    def check(self):
        if not self.params["median"] > 0:
            raise InputError(f"lognormal: median={self.params['median']!r} must be > 0")

    def draw(self, clients, rng):
        p = self.params
        return p["median"] * np.exp(p["sigma"] * rng.standard_normal(clients))


@LINK_SPECS.register
class Uniform(Drawn):
    """per client: uniform in [LO, HI], drawn once"""

    id = "uniform"
    PARAMS = {"quantity": None, "lo": None, "hi": None}
    ARGS = ("lo", "hi")

    def check(self):
        if not self.params["hi"] >= self.params["lo"]:
            raise InputError(f"uniform: hi={self.params['hi']!r} must be >= lo={self.params['lo']!r}")

    def draw(self, clients, rng):
        return rng.uniform(self.params["lo"], self.params["hi"], clients)


@LINK_SPECS.register
class Relative(LinkSpec):
    """--downlink only: N times the client's uplink (Nx)"""

    id = "relative"
    PARAMS = {"quantity": None, "factor": None}
    ARGS = ("factor",)

    def check(self):
        if self.params["quantity"] != "downlink":
            raise InputError(f"{option(self.params['quantity'])}: Nx (N times the uplink) is "
                             "for --downlink only")

    @classmethod
    def parse(cls, args, quantity, who):
        return cls(quantity=quantity, factor=_plain(args[0], "factor", who, positive=True)) \
            if len(args) == 1 else super().parse(args, quantity, who)

    def bind(self, clients, rng):
        return Bound(relative=float(self.params["factor"]))


@LINK_SPECS.register
class TraceSpec(LinkSpec):
    """a CSV trace: client, round or time -> value (trace:FILE[:COLUMN] or FILE.csv)"""

    id = "trace"
    PARAMS = {"quantity": None, "path": None, "column": None}

    @classmethod
    def parse(cls, args, quantity, who):
        if len(args) not in (1, 2) or not args[0]:
            raise InputError(f"{who}trace takes a file and optionally a column: trace:FILE[:COLUMN]")
        column = args[1] if len(args) == 2 else quantity
        return cls(quantity=quantity, path=args[0], column=column)

    def check(self):
        self.trace = Trace.read(self.params["path"], self.params["column"], self.params["quantity"])

    def bind(self, clients, rng):
        self.trace.require_clients(clients)
        return Bound(trace=self.trace)


def _plain(text: str, name: str, who: str, positive: bool = False) -> float:
    try:
        v = float(text)
    except ValueError:
        raise InputError(f"{who}{name}={text!r} is not a number") from None
    if not math.isfinite(v) or v < 0 or (positive and v == 0):
        raise InputError(f"{who}{name}={text!r} must be {'> 0' if positive else '>= 0'}")
    return v


def parse_spec(text: Any, quantity: str) -> LinkSpec:
    """The LinkSpec of ``text`` for ``quantity`` (uplink, downlink, latency, compute_factor)."""
    who = f"{option(quantity)} {text!r}: "
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        return Fixed(quantity=quantity, value=parse_value(text, quantity, who))
    if not isinstance(text, str) or not text.strip():
        raise InputError(f"{who}a spec must be a non-empty string; allowed: {LINK_SPECS.allowed()}")
    text = text.strip()
    head, sep, rest = text.partition(":")
    if head in LINK_SPECS and sep:
        return LINK_SPECS.get(head).parse(rest.split(":") if head != "trace" else
                                          _trace_args(rest), quantity, who)
    if text.lower().endswith(".csv"):
        return TraceSpec(quantity=quantity, path=text, column=quantity)
    if _RELATIVE.match(text) and quantity != "compute_factor":
        if quantity != "downlink":
            raise InputError(f"{who}Nx (N times the uplink) is for --downlink only")
        return Relative.parse([_RELATIVE.match(text).group(1)], quantity, who)
    if _NUMBER.match(text) or (text[:1].isdigit() or text[:1] in "+-."):
        return Fixed(quantity=quantity, value=parse_value(text, quantity, f"{option(quantity)} "))
    try:
        LINK_SPECS.get(head)
    except InputError as exc:
        raise InputError(f"{who}{exc}") from None
    raise InputError(f"{who}{head} needs arguments after ':'; allowed: {LINK_SPECS.allowed()}")


def _trace_args(rest: str) -> list[str]:
    """FILE[:COLUMN]: the column is what follows the last ':' when it is not part of a path."""
    path, sep, col = rest.rpartition(":")
    if sep and col and "/" not in col and "\\" not in col and not col.lower().endswith(".csv"):
        return [path, col]
    return [rest]


# -- traces ----------------------------------------------------------------------------------------
class Trace:
    """One column of a CSV trace: per client, sorted keys (rounds or seconds) and values."""

    def __init__(self, path: str, column: str, by: str, table: dict[int, tuple[np.ndarray, np.ndarray]]):
        self.path, self.column, self.by, self.table = path, column, by, table

    @classmethod
    def read(cls, path: str, column: str, quantity: str) -> Trace:
        p = Path(path)
        try:
            with open(p, newline="", encoding="utf-8") as f:
                rows = list(csv.reader(f))
        except OSError as exc:
            raise InputError(f"cannot read trace {str(p)!r}: {exc.strerror or exc}") from None
        except (UnicodeDecodeError, csv.Error) as exc:
            raise InputError(f"trace {p} is not a CSV file ({exc})") from None
        rows = [r for r in rows if any(c.strip() for c in r)]
        if not rows:
            raise InputError(f"trace {p} is empty")
        head = [h.strip().lower() for h in rows[0]]
        by = "round" if "round" in head else "time" if "time" in head else None
        if "client" not in head or by is None or column.lower() not in head:
            raise InputError(f"trace {p}: the header must name client, round or time, and the "
                             f"column {column!r}; it has {', '.join(head)}")
        ic, ik, iv = head.index("client"), head.index(by), head.index(column.lower())
        keys: dict[int, list[tuple[float, float]]] = {}
        for n, row in enumerate(rows[1:], start=2):
            where = f"trace {p} row {n}: "
            if len(row) != len(head):
                raise InputError(f"{where}has {len(row)} cells, the header {len(head)}")
            try:
                c, k = int(row[ic]), float(row[ik])
            except ValueError:
                raise InputError(f"{where}client {row[ic]!r} and {by} {row[ik]!r} must be "
                                 "numbers") from None
            if c < 0 or not math.isfinite(k) or k < 0:
                raise InputError(f"{where}client {c} and {by} {row[ik]!r} must be >= 0")
            value = parse_value(row[iv].strip(), quantity, f"{where}{column}=")
            keys.setdefault(c, []).append((k, value))
        table = {}
        for c, kv in keys.items():
            kv.sort(key=lambda x: x[0])
            k = np.array([x[0] for x in kv])
            if np.any(np.diff(k) == 0):
                raise InputError(f"trace {p}: client {c} has two rows for {by} "
                                 f"{k[:-1][np.diff(k) == 0][0]:g}")
            table[c] = (k, np.array([x[1] for x in kv]))
        return cls(str(p), column, by, table)

    def require_clients(self, clients: int) -> None:
        missing = [c for c in range(clients) if c not in self.table]
        if missing:
            shown = ", ".join(map(str, missing[:10])) + (", ..." if len(missing) > 10 else "")
            raise InputError(f"trace {self.path}: no rows for client(s) {shown} (the run has "
                             f"{clients} clients, 0..{clients - 1})")

    def at(self, clients: np.ndarray, r: int, t: float) -> np.ndarray:
        key = float(r) if self.by == "round" else float(t)
        out = np.empty(len(clients))
        for i, c in enumerate(clients):  # one lookup per client and round
            k, v = self.table[int(c)]
            out[i] = v[max(int(np.searchsorted(k, key, side="right")) - 1, 0)]
        return out


# -- the network of a run --------------------------------------------------------------------------
@dataclass
class Network:
    """The bound quantities of a run's clients; ``at`` gives them for one round."""

    uplink: Bound
    downlink: Bound
    latency: Bound
    compute_factor: Bound
    specs: dict[str, dict[str, Any] | None]
    time_indexed: bool  # some trace is indexed by time (the clock), not by round

    @classmethod
    def build(cls, texts: dict[str, Any], clients: int, seed: int) -> Network:
        """``texts``: quantity -> spec text or None (the defaults above)."""
        bound, specs, timed = {}, {}, False
        streams = np.random.SeedSequence([seed, 0x11C5]).spawn(len(QUANTITIES))
        for (q, ss) in zip(QUANTITIES, streams):
            text = texts.get(q)
            if text is None and q == "downlink":
                text = "1x"
            if text is None:
                default = {"uplink": math.inf, "latency": 0.0, "compute_factor": 1.0}[q]
                bound[q], specs[q] = Bound(static=np.full(clients, default)), None
                continue
            spec = parse_spec(text, q)
            bound[q], specs[q] = spec.bind(clients, np.random.default_rng(ss)), spec.config()
            timed |= isinstance(spec, TraceSpec) and spec.trace.by == "time"
        return cls(**bound, specs=specs, time_indexed=timed)

    def at(self, clients: np.ndarray, r: int, t: float):
        """(uplink bit/s, downlink bit/s, latency s, compute factor) of ``clients`` in round r
        starting at clock time ``t``."""
        up = self.uplink.at(clients, r, t)
        return (up, self.downlink.at(clients, r, t, uplink=up), self.latency.at(clients, r, t),
                self.compute_factor.at(clients, r, t))
