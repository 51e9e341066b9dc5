"""The ``.co3`` header and metadata JSON, read defensively: nesting depth, zlib bombs, structure.

Every limit here is part of the container's contract (``co3cli.container``'s docstring).
"""

from __future__ import annotations

import json
import zlib

import numpy as np

from co3cli.container.hdict import DICTIONARIES, stream_dict_id
from co3cli.dump.schema import MAX_NAME_PARTS
from co3cli.errors import CorruptDataError

MAX_HEADER = 16 << 20
MAX_HEADER_JSON = 16 << 20
MAX_META = 1 << 20
MAX_DEPTH = 64
MAX_TABLE = 16 << 20
MAX_CHUNK = 1 << 30
MAX_DIMS = 32
MAX_ENTRIES = 1 << 31
MAX_ENTRIES_PER_BYTE = 1 << 20


def _nesting_depth(raw: bytes) -> int:
    """Deepest ``[``/``{`` nesting of JSON text ``raw``, outside strings (vectorized scan)."""
    a = np.frombuffer(raw, dtype=np.uint8)
    if not a.size or not (np.any(a == 0x5B) or np.any(a == 0x7B)):
        return 0
    quote = a == 0x22
    if quote.any():  # a quote preceded by an odd run of backslashes is escaped
        bs = (a == 0x5C).astype(np.int32)
        run = np.cumsum(bs, dtype=np.int32)
        last_non = np.maximum.accumulate(np.where(bs == 0, run, 0))
        prev_run = np.concatenate(([0], (run - last_non)[:-1]))
        quote &= prev_run % 2 == 0
        inside = (np.cumsum(quote, dtype=np.int32) - quote) % 2 == 1
    else:
        inside = np.zeros(a.size, dtype=bool)
    step = np.where(inside | quote, 0, (a == 0x5B).astype(np.int32) + (a == 0x7B)
                    - (a == 0x5D) - (a == 0x7D))
    return int(np.cumsum(step, dtype=np.int32).max())


def parse_json(raw: bytes, what: str) -> object:
    """JSON ``raw`` (at most MAX_DEPTH deep) or CorruptDataError naming ``what``."""
    # no deeper than its number of brackets: a short scan-free path for small metadata
    depth = 0 if raw.count(b"[") + raw.count(b"{") <= MAX_DEPTH else _nesting_depth(raw)
    if depth > MAX_DEPTH:
        raise CorruptDataError(f"{what} nests {depth} levels deep (limit {MAX_DEPTH})")
    try:
        return json.loads(raw)
    except (ValueError, RecursionError) as e:
        raise CorruptDataError(f"unreadable {what} ({str(e)[:200]})") from None


def inflate(js: bytes, name: str, what: str = "header", limit: int = MAX_HEADER_JSON) -> bytes:
    """zlib-inflate ``what`` (the header; a group's metadata), refusing more than ``limit``
    bytes of output; a stream naming a preset dictionary (``co3cli.container.hdict``) is
    inflated with it, one naming an unknown dictionary refused."""
    did = stream_dict_id(js)
    if did is None:
        d = zlib.decompressobj()
    elif did in DICTIONARIES:
        d = zlib.decompressobj(zdict=DICTIONARIES[did])
    else:
        raise CorruptDataError(f"{name}: {what} names an unknown preset dictionary (id {did:08x}; "
                               "written by a newer co3cli? upgrade co3cli)")
    try:
        out = d.decompress(js, limit)
        if d.unconsumed_tail:
            raise CorruptDataError(f"{name}: {what} inflates to more than {limit >> 20} MiB "
                                   "(limit; a decompression bomb?)")
        out += d.flush()
    except zlib.error as e:
        raise CorruptDataError(f"{name}: unreadable {what} ({e})") from None
    if len(out) > limit:
        raise CorruptDataError(f"{name}: {what} inflates to more than {limit >> 20} MiB")
    if not d.eof or d.unused_data:
        raise CorruptDataError(f"{name}: unreadable {what} (incomplete or trailing zlib data)")
    return out


def inflate_raw(data: bytes, what: str, limit: int = MAX_TABLE) -> bytes:
    """Raw-deflated ``data`` (a 1.3 block's table) inflated, at most ``limit`` bytes, the
    stream complete and nothing after it; else CorruptDataError naming ``what``."""
    d = zlib.decompressobj(-15)
    try:
        out = d.decompress(data, limit)
        if d.unconsumed_tail:
            raise CorruptDataError(f"{what} inflates to more than {limit >> 20} MiB (limit)")
        out += d.flush()
    except zlib.error as e:
        raise CorruptDataError(f"{what}: unreadable deflated table ({e})") from None
    if len(out) > limit or not d.eof or d.unused_data:
        raise CorruptDataError(f"{what}: unreadable deflated table (incomplete, too long or "
                               "followed by other bytes)")
    return out


STEP_CONTEXT_MINOR = 2
"""The minor version that marks chunks depending on the previous chunk of their layer."""

COMPACT_MINOR = 3
"""The minor version of files whose header may name a preset dictionary, whose blocks may
join a layer's steps into one chunk (``LYJ``/``GRJ``) and whose trailer holds varint offsets."""


TEXT_HEADER_MINOR = 5
"""The minor version of files whose header is coded by a text model (``co3cli.container.hcm``)
and whose trailer lists block sizes (``co3cli.container.framing.trailer15_bytes``)."""


def step_context(header: dict) -> bool:
    """Whether a header's coder codes each step of a layer given the previous one (its config
    has ``key_every``: chunk ``t`` decodes alone when ``t % key_every == 0``, ``key_every`` 0:
    only chunk 0; else after chunk ``t - 1``). Such a file is version 1.2 or later."""
    coder = header.get("coder")
    return isinstance(coder, dict) and ("key_every" in coder or coder.get("id") == "ctx-steps")


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def header_problem(h) -> str | None:
    """What is structurally wrong with a decoded header (None when it is usable)."""
    if not isinstance(h, dict):
        return "not a JSON object"
    for key, kind in (("format", dict), ("coder", dict), ("layers", list), ("steps", list),
                      ("scale_rule", str), ("model", str), ("tie_rule", str),
                      ("co3cli_version", str)):
        if not isinstance(h.get(key), kind):
            return f"{key!r} missing or not a {kind.__name__}"
    if not isinstance(h["format"].get("id"), str) or not isinstance(h["coder"].get("id"), str):
        return "format/coder without an id"
    if not all(_is_int(s) and -2**63 <= s < 2**63 for s in h["steps"]):
        return "steps must be 64-bit integers"
    if h.get("loss") is not None and (not isinstance(h["loss"], list) or len(h["loss"]) != len(h["steps"])
                                      or not all(isinstance(v, (int, float)) for v in h["loss"])):
        return "loss must be a list of numbers, one per step"
    if not isinstance(h.get("source", {}), dict):
        return "source must be an object"
    if "small_layers" in h and not isinstance(h["small_layers"], dict):
        return "small_layers must be an object"
    nsteps = max(1, len(h["steps"]))
    names: dict[str, int] = {}
    for i, lay in enumerate(h["layers"]):
        if not (isinstance(lay, dict) and isinstance(lay.get("name"), str) and _is_int(lay.get("numel"))
                and isinstance(lay.get("shape"), list)):
            return f"layer {i} needs a name, an integer numel and a shape"
        if len(lay["shape"]) > MAX_DIMS:
            return f"layer {i}: shape has {len(lay['shape'])} dimensions (limit {MAX_DIMS})"
        if not all(_is_int(d) and 1 <= d <= MAX_ENTRIES for d in lay["shape"]):
            return f"layer {i}: shape dimensions must be integers in 1..{MAX_ENTRIES}"
        if not 1 <= lay["numel"] <= MAX_ENTRIES // nsteps:
            return (f"layer {i}: {nsteps} step(s) x numel {lay['numel']} entries "
                    f"(limit {MAX_ENTRIES} per layer)")
        prod = 1
        for d in lay["shape"]:
            prod *= d
        if lay["numel"] != prod:
            return f"layer {i} ({lay['name'][:80]!r}): numel {lay['numel']} does not match its shape"
        name = lay["name"]
        parts = name.split("/")
        if not name or any(p in ("", ".", "..") for p in parts) or "\0" in name:
            return f"layer {i}: name {name[:80]!r} is not a valid relative HDF5 path"
        if len(parts) > MAX_NAME_PARTS:
            return (f"layer {i}: name {name[:80]!r}... has {len(parts) - 1} folders (limit "
                    f"{MAX_NAME_PARTS - 1})")
        if name in names:
            return f"layer {i}: name {name[:80]!r} repeats or nests under another layer's name"
        names[name] = i
    return _nesting(names)


def _nesting(names: dict) -> str | None:
    """Whether a layer name (``names``: name -> layer index) is a folder of another: with
    ``/`` ordered first (names hold no NUL), a name's descendants follow it at once, so
    neighbours tell (linear in the names' bytes: listing every folder of a name of ``n``
    components took ``n**2``)."""
    order = sorted(names, key=lambda n: n.replace("/", "\0"))
    for a, b in zip(order, order[1:]):
        if b.startswith(a + "/"):
            if names[a] < names[b]:
                return (f"layer {names[b]}: name {b[:80]!r} repeats or nests under another "
                        "layer's name")
            return f"layer name {a[:80]!r} is also a folder of another layer"
    return None


