"""The ``.co3`` 1.5 header: the 1.4 compact header's fields as text, coded by a context-mixing
model (``co3cli.coding.textcm``) primed with what both sides know.

A 1.4 header (``co3cli.container.hcompact``, deflated with a preset dictionary) was 440-510 of
the 11-37 KB of a default file of 15,000-50,000 entries, two thirds of it the provenance
(torch's module repr, the capture's config, timestamps, losses). A 1.5 header is the same
object, every key and value kept, laid out as::

    header  := kind u8 | body
    kind 0  := the 1.4 compact header, deflated with the 1.4 dictionary (headers of more than
               MAX_TEXT bytes of text: slow to model, and a small share of their files)
    kind 1  := textcm payload of
               flags u8 | len uvarint | layers | <module guess primed> | len uvarint | JSON
               | len uvarint | binary
    flags   := the compact header's (bit 0 layers, 1 steps, 2 loss float32, 3 loss float64,
               4 source.layers is the layer names' ``json.dumps``) | bit 5 both timestamps
               binary | bit 6 source.final_loss is the last loss | bit 7 source.config is
               embedded as the object it is the ``json.dumps(sort_keys=True)`` of
    layers  := per layer, ``name`` ``" "`` dims joined by ``","`` ``"\\n"`` (numel: the dims'
               product)
    JSON    := the header less the moved fields, keys sorted except that ``source`` comes last
               and in it ``model_repr`` then ``config`` (they follow what predicts them)
    binary  := [steps] [loss] [created]       (steps, loss: as in the compact header)
    created := zigzag uvarint of the header's ``created`` in seconds from 2020-01-01T00:00:00Z,
               zigzag uvarint of the source's ``created`` less it (both ``YYYY-MM-DDTHH:MM:SS
               +00:00``, UTC)

The text model is primed first with ``co3cli.container.hprime.PRIME`` and, once the layer
lines are known, with :func:`~co3cli.container.hprime.module_guess` of them (as JSON string
text, as ``model_repr`` appears). A field moves only where its form gives back exactly the
value (else it stays in the JSON, as in the compact header), and the writer checks that the
whole header round-trips (else it writes kind 0). On the check's small dumps the header
(preamble and CRC included) fell from 316-509 to 175-307 bytes
(``benchmarks/results/small_files.md``).

The reader bounds the text (``MAX_TEXT`` in all; the model's history and the work with it),
the layer lines (a dimension at most 19 digits, no leading zeros, at most ``max_dims``), the
steps (as the compact header does) and the timestamps (years 1-9999); anything else is one
CorruptDataError line.
"""

from __future__ import annotations

import datetime as _dt
import json

from co3cli.container.framing import read_uvarint
from co3cli.container.hcompact import (LAYERS, LOSS32, LOSS64, SOURCE_LAYERS, STEPS, _Reader,
                                       pack_header, read_steps_and_loss, steps_and_loss,
                                       unpack_header)
from co3cli.container.hdict import deflate
from co3cli.container.header import MAX_HEADER_JSON, inflate, parse_json
from co3cli.errors import CorruptDataError
from co3cli.varint import uvarint

KIND_DEFLATE, KIND_TEXT = 0, 1
CREATED, FINAL_LOSS, CONFIG = 32, 64, 128
MAX_TEXT = 1 << 20
"""Bytes of layer lines, JSON and binary a kind-1 header holds at most."""
MAX_GUESS = 1 << 18
"""Bytes of the module guess primed at most (``4 x`` the layer lines' bytes + 1024 below)."""
_EPOCH = _dt.datetime(2020, 1, 1, tzinfo=_dt.timezone.utc)
_LAST = ("model_repr", "config")


def _json(obj) -> bytes:
    return json.dumps(obj, separators=(",", ":"), sort_keys=True).encode()


def _zz(v: int) -> bytes:
    return uvarint(2 * v if v >= 0 else -2 * v - 1)


def _seconds(s) -> int | None:
    """Seconds from 2020 of an ISO UTC timestamp that gives back exactly ``s``, else None."""
    if not isinstance(s, str) or len(s) != 25 or not s.endswith("+00:00"):
        return None
    try:
        d = _dt.datetime.fromisoformat(s)
    except ValueError:
        return None
    if d.isoformat() != s:
        return None
    return (d - _EPOCH) // _dt.timedelta(seconds=1)


def _timestamp(sec: int, what: str) -> str:
    try:
        return (_EPOCH + _dt.timedelta(seconds=sec)).isoformat()
    except OverflowError:
        raise CorruptDataError(f"{what}: a timestamp out of range") from None


def _layer_lines(layers) -> bytes | None:
    if not isinstance(layers, list):
        return None
    out = []
    for lay in layers:
        if not (isinstance(lay, dict) and set(lay) == {"name", "numel", "shape"}
                and isinstance(lay["name"], str) and "\n" not in lay["name"]
                and isinstance(lay["shape"], list)
                and all(type(d) is int and d >= 1 for d in lay["shape"])):
            return None
        out.append(lay["name"] + " " + ",".join(map(str, lay["shape"])) + "\n")
    try:
        return "".join(out).encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate: the JSON escapes it, the text cannot
        return None


def _read_layer_lines(text: bytes, max_dims: int, what: str) -> list:
    try:
        lines = text.decode("utf-8").split("\n")
    except UnicodeDecodeError:
        raise CorruptDataError(f"{what}: layer lines are not UTF-8") from None
    if lines[-1] != "":
        raise CorruptDataError(f"{what}: layer lines do not end with a newline")
    layers = []
    for i, line in enumerate(lines[:-1]):
        name, sep, dims = line.rpartition(" ")
        if not sep:
            raise CorruptDataError(f"{what}: layer line {i} has no shape")
        parts = dims.split(",") if dims else []
        if len(parts) > max_dims:
            raise CorruptDataError(f"{what}: layer {i} has {len(parts)} dimensions "
                                   f"(limit {max_dims})")
        shape = []
        for p in parts:
            if not (p.isdigit() and p.isascii() and len(p) <= 19 and p[0] != "0"):
                raise CorruptDataError(f"{what}: layer {i} has a bad dimension {p[:24]!r}")
            shape.append(int(p))
        numel = 1
        for d in shape:
            numel *= d
        layers.append({"name": name, "numel": numel, "shape": shape})
    return layers


def _sections(h: dict):
    """(flags, layer lines, (name, shape) per layer moved, JSON, binary) of header ``h``."""
    rest, flags = dict(h), 0
    lines = _layer_lines(h.get("layers"))
    src = h.get("source")
    src = dict(src) if isinstance(src, dict) else src
    if lines is not None:
        del rest["layers"]
        flags |= LAYERS
        names = json.dumps([x["name"] for x in h["layers"]])
        if isinstance(src, dict) and src.get("layers") == names:
            del src["layers"]
            flags |= SOURCE_LAYERS
    more, binary, loss_moved = steps_and_loss(h, rest)
    flags |= more
    if loss_moved and isinstance(src, dict) and type(src.get("final_loss")) is float \
            and src["final_loss"] == h["loss"][-1]:
        del src["final_loss"]
        flags |= FINAL_LOSS
    if isinstance(src, dict):
        t0, t1 = _seconds(h.get("created")), _seconds(src.get("created"))
        if t0 is not None and t1 is not None:
            del rest["created"], src["created"]
            flags |= CREATED
            binary.append(_zz(t0) + _zz(t1 - t0))
        cfg = src.get("config")
        if isinstance(cfg, str):
            try:
                obj = json.loads(cfg)
            except (ValueError, RecursionError):
                obj = None
            if isinstance(obj, dict) and json.dumps(obj, sort_keys=True) == cfg:
                src["config"] = obj
                flags |= CONFIG
        rest["source"] = src
    layers = [(x["name"], x["shape"]) for x in h["layers"]] if lines is not None else []
    return flags, lines or b"", layers, _ordered_json(rest), b"".join(binary)


def _ordered_json(rest: dict) -> bytes:
    """``rest`` as compact JSON, keys sorted but ``source`` last, in it ``_LAST`` last."""
    head = _json({k: v for k, v in rest.items() if k != "source"})
    if "source" not in rest:
        return head
    src = rest["source"]
    if not isinstance(src, dict):
        body = _json(src)
    else:
        first = _json({k: v for k, v in src.items() if k not in _LAST})
        tail = [_json(k) + b":" + _json(src[k]) for k in _LAST if k in src]
        body = first[:-1] + (b"," if len(first) > 2 and tail else b"") + b",".join(tail) + b"}"
    return head[:-1] + (b"," if len(head) > 2 else b"") + b'"source":' + body + b"}"


def _guess(layers, cap: int) -> bytes:
    """The first ``cap`` bytes of the module guess of ``layers`` as JSON string text (each
    character escaped alone: the guess's first ``cap`` characters give them)."""
    from co3cli.container.hprime import module_guess

    return json.dumps(module_guess(layers, cap))[1:-1].encode()[:cap]


def _guess_cap(nlines: int) -> int:
    """Bytes of the module guess primed after ``nlines`` bytes of layer lines."""
    return min(4 * nlines + 1024, MAX_GUESS)


def _capacity(text: int) -> int:
    """History the model needs for ``text`` bytes of sections (the prime, the guess, flags and
    lengths included)."""
    from co3cli.container.hprime import PRIME

    return len(PRIME) + 28 + _guess_cap(text) + text


def pack_header15(h: dict) -> bytes:
    """The 1.5 header bytes of ``h`` (kind and body); :func:`unpack_header15` gives back
    exactly ``h`` (checked here: where the text form would not, the 1.4 form, kind 0).
    InputError where the header is more than a reader takes (``pack_header``)."""
    from co3cli.coding.textcm import TextEncoder
    from co3cli.container.hprime import PRIME

    flags, lines, layers, js, binary = _sections(h)
    text = len(lines) + len(js) + len(binary)
    if text <= MAX_TEXT:
        guess = _guess(layers, _guess_cap(len(lines)))
        enc = TextEncoder(_capacity(text))
        enc.prime(PRIME)
        enc.encode(bytes([flags]) + uvarint(len(lines)) + lines)
        enc.prime(guess)
        enc.encode(uvarint(len(js)) + js + uvarint(len(binary)) + binary)
        out = bytes([KIND_TEXT]) + enc.finish()
        try:
            same = _json(unpack_header15(out, len(h.get("steps") or ()) + 1)) == _json(h)
        except CorruptDataError:
            same = False
        if same:
            return out
    return bytes([KIND_DEFLATE]) + deflate(pack_header(h))


def _read_len(dec, left: int, what: str) -> int:
    buf = b""
    for _ in range(9):
        buf += dec.decode(1)
        if buf[-1] < 0x80:
            break
    n, _ = read_uvarint(buf, 0, len(buf), f"{what} (a section length)")
    if n > left:
        raise CorruptDataError(f"{what}: a section of {n} bytes (at most {left} left of "
                               f"{MAX_TEXT})")
    return n


def unpack_header15(raw: bytes, max_steps: int, max_dims: int = 32,
                    what: str = "header") -> dict:
    """The header object of 1.5 header bytes ``raw`` (CorruptDataError naming ``what`` where
    they are not exactly such a header; ``max_steps`` bounds the step count)."""
    from co3cli.coding.textcm import TextDecoder
    from co3cli.container.hprime import PRIME

    if not raw:
        raise CorruptDataError(f"{what}: empty")
    if raw[0] == KIND_DEFLATE:
        return unpack_header(inflate(raw[1:], what), max_steps, max_dims, what)
    if raw[0] != KIND_TEXT:
        raise CorruptDataError(f"{what}: unknown header kind {raw[0]} (written by a newer "
                               "co3cli? upgrade co3cli)")
    try:
        dec = TextDecoder(raw[1:], _capacity(MAX_TEXT))
        dec.prime(PRIME)
        flags = dec.decode(1)[0]
        n = _read_len(dec, MAX_TEXT, what)
        lines = dec.decode(n)
        layers = _read_layer_lines(lines, max_dims, what) if flags & LAYERS else None
        if layers is None and lines:
            raise CorruptDataError(f"{what}: layer lines without the layers flag")
        dec.prime(_guess([(x["name"], x["shape"]) for x in layers or ()], _guess_cap(n)))
        js = dec.decode(_read_len(dec, MAX_TEXT - n, what))
        binary = dec.decode(_read_len(dec, MAX_TEXT - n - len(js), what))
        dec.finish()
    except CorruptDataError as e:
        msg = str(e)
        raise CorruptDataError(msg if msg.startswith(what) else f"{what}: {msg}") from None
    h = parse_json(js, what)
    if not isinstance(h, dict):
        raise CorruptDataError(f"{what}: not a JSON object")
    return _restore(h, flags, layers, binary, max_steps, what)


def _restore(h: dict, flags: int, layers, binary: bytes, max_steps: int, what: str) -> dict:
    src = h.get("source")
    needs_src = flags & (SOURCE_LAYERS | FINAL_LOSS | CREATED | CONFIG)
    if flags & SOURCE_LAYERS and not flags & LAYERS or flags & LOSS32 and flags & LOSS64 \
            or flags & (LOSS32 | LOSS64) and not flags & STEPS \
            or flags & FINAL_LOSS and not flags & (LOSS32 | LOSS64) \
            or needs_src and not isinstance(src, dict):
        raise CorruptDataError(f"{what}: bad flags {flags:#04x}")
    moved = {"layers": LAYERS, "steps": STEPS, "loss": LOSS32 | LOSS64, "created": CREATED}
    if any(k in h for k, bit in moved.items() if flags & bit) or isinstance(src, dict) and any(
            k in src for k, bit in (("layers", SOURCE_LAYERS), ("final_loss", FINAL_LOSS),
                                    ("created", CREATED)) if flags & bit):
        raise CorruptDataError(f"{what}: a field is both in the JSON and moved")
    if flags & LAYERS:
        h["layers"] = layers
        if flags & SOURCE_LAYERS:
            src["layers"] = json.dumps([x["name"] for x in layers])
    r = _Reader(binary, 0, what)
    read_steps_and_loss(r, flags, h, max_steps)
    if flags & FINAL_LOSS:  # (only with a loss: the flags were checked)
        if not h["loss"]:
            raise CorruptDataError(f"{what}: a final loss derived from no loss")
        src["final_loss"] = h["loss"][-1]
    if flags & CREATED:
        t0 = r.zz("created")
        h["created"] = _timestamp(t0, what)
        src["created"] = _timestamp(t0 + r.zz("source created"), what)
    if r.pos != len(binary):
        raise CorruptDataError(f"{what}: {len(binary) - r.pos} unexpected bytes after its fields")
    if flags & CONFIG:
        if not isinstance(src.get("config"), dict):
            raise CorruptDataError(f"{what}: the embedded config is not an object")
        src["config"] = json.dumps(src["config"], sort_keys=True)
    if len(_json(h)) > MAX_HEADER_JSON:
        raise CorruptDataError(f"{what}: more than {MAX_HEADER_JSON:,} bytes as JSON")
    # the keys in the order a 1.4 header gives them: sorted, the moved fields after
    late = [k for k, bit in (("layers", LAYERS), ("steps", STEPS), ("loss", LOSS32 | LOSS64))
            if flags & bit]
    if isinstance(src, dict):
        tail = ["layers"] if flags & SOURCE_LAYERS else []
        h["source"] = {k: src[k] for k in sorted(set(src) - set(tail)) + tail}
    return {k: h[k] for k in sorted(set(h) - set(late)) + late}
