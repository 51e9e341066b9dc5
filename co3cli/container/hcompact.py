"""The ``.co3`` 1.4 header: the JSON less its repetitive parts, which follow it in binary.

A 1.3 header is one JSON object deflated with a preset dictionary. In a file of 10^4 entries
its layer list (every name in full, ``numel`` beside the shape it is the product of), its
step and loss lists (floats as 17-digit decimals) and the source's ``layers`` attribute (the
same names again, as a JSON string) were a third of the header. A 1.4 header is the same
object, every key and value kept, laid out as::

    compact := json_len uvarint | JSON (the header less the moved fields) | moved
    moved   := flags u8 | [layers] | [steps] | [loss]        (in that order, where flagged)
    flags   := bit 0 layers | bit 1 steps | bit 2 loss float32 | bit 3 loss float64
               | bit 4 source.layers is the layer names' ``json.dumps``
    layers  := n uvarint | (shared uvarint | suffix_len uvarint | suffix UTF-8
               | ndim uvarint | dim uvarint * ndim) * n
               (a name: the first ``shared`` characters of the previous name + suffix;
               ``numel``: the product of the dims)
    steps   := n uvarint | first zigzag | stride zigzag | flag u8 (0: steps are
               ``first + k * stride``; 1: the n - 1 differences follow as zigzag varints)
    loss    := one little-endian float32 (flag 2) or float64 (flag 3) per step

The whole is deflated with the preset dictionary (``co3cli.container.hdict``). A field moves
only where its binary form gives back exactly the JSON value, and the writer checks that the
whole header round-trips (where it would not, the whole header stays in the JSON), so the
header a reader gets is the one written. The reader bounds every count by the bytes left, the
steps by the file's size and the layer names' characters in all by what a JSON header could
hold (a lying count is refused in one line, before anything big is allocated).
"""

from __future__ import annotations

import json

import numpy as np

from co3cli.container.framing import read_uvarint
from co3cli.container.header import MAX_HEADER_JSON
from co3cli.errors import CorruptDataError, InputError
from co3cli.varint import uvarint

LAYERS, STEPS, LOSS32, LOSS64, SOURCE_LAYERS = 1, 2, 4, 8, 16
_KNOWN = LAYERS | STEPS | LOSS32 | LOSS64 | SOURCE_LAYERS
_STEP_MAX = 1 << 62  # steps and strides within +-2**62 move (zigzag fits 9 varint bytes)


def _json(obj) -> bytes:
    return json.dumps(obj, separators=(",", ":"), sort_keys=True).encode()


def _zz(v: int) -> bytes:
    return uvarint(2 * v if v >= 0 else -2 * v - 1)


def _layers_bytes(layers) -> bytes | None:
    if not isinstance(layers, list):
        return None
    out, prev = [uvarint(len(layers))], ""
    for lay in layers:
        if not (isinstance(lay, dict) and set(lay) == {"name", "numel", "shape"}
                and isinstance(lay["name"], str) and isinstance(lay["shape"], list)
                and all(type(d) is int and d >= 1 for d in lay["shape"])):
            return None
        name = lay["name"]
        k = 0
        while k < min(len(name), len(prev)) and name[k] == prev[k]:
            k += 1
        try:
            suffix = name[k:].encode("utf-8")
        except UnicodeEncodeError:  # a lone surrogate: the JSON escapes it, the binary cannot
            return None
        out += [uvarint(k), uvarint(len(suffix)), suffix, uvarint(len(lay["shape"]))]
        out += [uvarint(d) for d in lay["shape"]]
        prev = name
    return b"".join(out)


def _steps_bytes(steps) -> bytes | None:
    if not isinstance(steps, list) or not steps or not all(type(s) is int and abs(s) < _STEP_MAX for s in steps):
        return None
    d = np.diff(np.asarray(steps, dtype=np.int64)).tolist()
    stride = d[0] if d else 0
    if any(abs(x) >= _STEP_MAX for x in d):
        return None
    head = uvarint(len(steps)) + _zz(steps[0]) + _zz(stride)
    if all(x == stride for x in d):
        return head + b"\0"
    return head + b"\1" + b"".join(_zz(x) for x in d)


def _loss_bytes(loss, nsteps: int) -> tuple[int, bytes] | None:
    if not isinstance(loss, list) or len(loss) != nsteps or not all(type(v) is float for v in loss):
        return None
    a = np.asarray(loss, dtype=np.float64)
    if not np.all(np.isfinite(a)):
        return None
    with np.errstate(over="ignore"):  # beyond float32's range: inf, unequal, so float64
        narrow = a.astype(np.float32)
    if np.array_equal(narrow.astype(np.float64), a):
        return LOSS32, a.astype("<f4").tobytes()
    return LOSS64, a.astype("<f8").tobytes()


def steps_and_loss(h: dict, rest: dict) -> tuple[int, list[bytes], bool]:
    """Header ``h``'s steps (and, with them, its loss) moved out of ``rest`` (its JSON part):
    (flags, binary parts, whether the loss moved)."""
    sb = _steps_bytes(h.get("steps"))
    if sb is None:
        return 0, [], False
    del rest["steps"]
    lo = _loss_bytes(h.get("loss"), len(h["steps"]))
    if lo is None:
        return STEPS, [sb], False
    del rest["loss"]
    return STEPS | lo[0], [sb, lo[1]], True


def read_steps_and_loss(r: "_Reader", flags: int, h: dict, max_steps: int) -> None:
    """Into header ``h``: the steps and the loss ``flags`` say were moved, read from ``r``."""
    if flags & STEPS:
        h["steps"] = _read_steps(r, max_steps)
    if flags & (LOSS32 | LOSS64):
        size = 4 if flags & LOSS32 else 8
        b = r.take(size * len(h["steps"]), "the losses")
        h["loss"] = np.frombuffer(b, dtype="<f4" if size == 4 else "<f8").astype(float).tolist()


def pack_header(h: dict) -> bytes:
    """The compact form of header ``h`` (before deflating); ``unpack_header`` gives back
    exactly ``h`` (checked here: where it would not, the whole header stays in the JSON).
    InputError where the header is more than a reader takes."""
    rest, flags, parts = dict(h), 0, []
    lb = _layers_bytes(h.get("layers"))
    if lb is not None:
        del rest["layers"]
        flags |= LAYERS
        parts.append(lb)
        src = h.get("source")
        if isinstance(src, dict) and src.get("layers") == json.dumps([x["name"] for x in h["layers"]]):
            rest["source"] = {k: v for k, v in src.items() if k != "layers"}
            flags |= SOURCE_LAYERS
    more, binary, _ = steps_and_loss(h, rest)
    flags |= more
    parts += binary
    js = _json(rest)
    out = uvarint(len(js)) + js + bytes([flags]) + b"".join(parts)
    try:
        same = _json(unpack_header(out, len(h.get("steps") or ()) + 1)) == _json(h)
    except CorruptDataError:  # beyond what a reader takes (more steps than a JSON header holds)
        same = False
    if not same:  # the whole header in the JSON
        js = _json(h)
        out = uvarint(len(js)) + js + b"\0"
    if len(out) > MAX_HEADER_JSON:
        raise InputError(f"the .co3 header would be {len(out):,} bytes (a reader takes at most "
                         f"{MAX_HEADER_JSON:,}): too many steps or layers for one file")
    return out


class _Reader:
    def __init__(self, buf: bytes, pos: int, what: str):
        self.buf, self.pos, self.what = buf, pos, what

    def uv(self, field: str) -> int:
        v, self.pos = read_uvarint(self.buf, self.pos, len(self.buf), f"{self.what} ({field})")
        return v

    def zz(self, field: str) -> int:
        z = self.uv(field)
        return (z >> 1) ^ -(z & 1)

    def count(self, field: str, each: int = 1) -> int:
        """A count of items of at least ``each`` bytes each, bounded by the bytes left."""
        n = self.uv(field)
        if n * each > len(self.buf) - self.pos:
            raise CorruptDataError(f"{self.what}: {n} {field} in {len(self.buf) - self.pos} bytes")
        return n

    def take(self, n: int, field: str) -> bytes:
        if n > len(self.buf) - self.pos:
            raise CorruptDataError(f"{self.what}: {field} overruns the header")
        out = self.buf[self.pos:self.pos + n]
        self.pos += n
        return out


def _read_layers(r: _Reader, max_dims: int) -> list:
    layers, prev, chars = [], "", 0
    for i in range(r.count("layers", 3)):
        k = r.uv("name prefix")
        if k > len(prev):
            raise CorruptDataError(f"{r.what}: layer {i} shares {k} characters of a "
                                   f"{len(prev)}-character name")
        n = r.uv("name length")
        chars += k + n  # names that share prefixes grow as their count squared: bounded as a
        if chars > MAX_HEADER_JSON:  # JSON header listing them in full would be
            raise CorruptDataError(f"{r.what}: layer names of more than {MAX_HEADER_JSON:,} "
                                   "characters in all")
        try:
            name = prev[:k] + r.take(n, "a layer name").decode("utf-8")
        except UnicodeDecodeError:
            raise CorruptDataError(f"{r.what}: layer {i}'s name is not UTF-8") from None
        ndim = r.count("dimensions")
        if ndim > max_dims:
            raise CorruptDataError(f"{r.what}: layer {i} has {ndim} dimensions (limit {max_dims})")
        shape = [r.uv("a dimension") for _ in range(ndim)]
        numel = 1
        for d in shape:
            numel *= d
        layers.append({"name": name, "numel": numel, "shape": shape})
        prev = name
    return layers


def _read_steps(r: _Reader, max_steps: int) -> list:
    n = r.uv("steps")
    max_steps = min(max_steps, MAX_HEADER_JSON // 2)  # as many as a JSON header could list
    if not 1 <= n <= max_steps:
        raise CorruptDataError(f"{r.what}: {n} steps (at most {max_steps} in this file)")
    first, stride = r.zz("first step"), r.zz("step stride")
    kind = r.take(1, "the steps' kind")[0]
    if kind == 0:
        steps = [first + k * stride for k in range(n)]
    elif kind == 1:
        if n - 1 > len(r.buf) - r.pos:
            raise CorruptDataError(f"{r.what}: {n - 1} step differences overrun the header")
        d = [r.zz("a step difference") for _ in range(n - 1)]
        if not d or d[0] != stride or all(x == stride for x in d):
            raise CorruptDataError(f"{r.what}: step differences disagree with the stride")
        steps = np.cumsum([first] + d, dtype=object).tolist()
    else:
        raise CorruptDataError(f"{r.what}: unknown steps kind {kind}")
    if any(abs(s) >= 2**63 for s in steps):
        raise CorruptDataError(f"{r.what}: a step beyond 64 bits")
    return steps


def unpack_header(raw: bytes, max_steps: int, max_dims: int = 32,
                  what: str = "header") -> dict:
    """The header object of compact bytes ``raw`` (CorruptDataError naming ``what`` where the
    bytes are not exactly such a header; ``max_steps`` bounds the step count)."""
    from co3cli.container.header import parse_json

    r = _Reader(raw, 0, what)
    js = r.take(r.uv("JSON length"), "the JSON")
    h = parse_json(js, what)
    if not isinstance(h, dict):
        raise CorruptDataError(f"{what}: not a JSON object")
    flags = r.take(1, "the flags")[0]
    if flags & ~_KNOWN or flags & LOSS32 and flags & LOSS64 or flags & SOURCE_LAYERS \
            and not flags & LAYERS or flags & (LOSS32 | LOSS64) and not flags & STEPS:
        raise CorruptDataError(f"{what}: bad flags {flags:#04x}")
    moved = {"layers": flags & LAYERS, "steps": flags & STEPS, "loss": flags & (LOSS32 | LOSS64)}
    if any(k in h for k, on in moved.items() if on):
        raise CorruptDataError(f"{what}: a field is both in the JSON and moved")
    if flags & LAYERS:
        h["layers"] = _read_layers(r, max_dims)
        if flags & SOURCE_LAYERS:
            src = h.get("source")
            if not isinstance(src, dict) or "layers" in src:
                raise CorruptDataError(f"{what}: source layers moved without a source")
            src["layers"] = json.dumps([x["name"] for x in h["layers"]])
    read_steps_and_loss(r, flags, h, max_steps)
    if r.pos != len(raw):
        raise CorruptDataError(f"{what}: {len(raw) - r.pos} unexpected bytes after its fields")
    return h

