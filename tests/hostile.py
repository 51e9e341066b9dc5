"""Hostile ``.co3`` files, assembled from the byte layout in ``co3cli.container``'s docstring.

Every file here has correct CRCs (header, layers, file) but content that lies. The builder
packs its own bytes (it does not use ``Co3Writer``), so it can write what the writer never
would. ``python tests/hostile.py`` (re)writes the committed corpus under ``tests/hostile/``.
"""

from __future__ import annotations

import json
import struct
import zlib
from pathlib import Path

import numpy as np

MAGIC = b"CO3\x89GRD\n"
END_MAGIC = b"\x89CO3END"
CORPUS = Path(__file__).parent / "hostile"


def uvarint(n: int) -> bytes:
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def header_block(header_z: bytes, major: int = 1, minor: int = 0) -> bytes:
    """preamble + compressed header + crc32(preamble + header)."""
    pre = MAGIC + struct.pack("<HHI", major, minor, len(header_z))
    return pre + header_z + struct.pack("<I", zlib.crc32(pre + header_z))


def layer_block(index: int, meta_raw: bytes, table: bytes, chunks, *, meta_len=None,
                table_len=None, body_lens=None) -> bytes:
    """``LYR\\0 | index | meta_len | meta | table_len | table | chunks | crc`` (lengths may lie)."""
    b = b"LYR\0" + struct.pack("<II", index, len(meta_raw) if meta_len is None else meta_len)
    b += meta_raw + struct.pack("<I", len(table) if table_len is None else table_len) + table
    for t, (scale, body) in enumerate(chunks):
        blen = len(body) if body_lens is None else body_lens[t]
        b += struct.pack("<f", scale) + uvarint(blen) + body
    return b + struct.pack("<I", zlib.crc32(b))


def group_block(meta_raw: bytes, table: bytes, members, *, n=None, meta_len=None, table_len=None,
                gaps=None, body_lens=None) -> bytes:
    """``GRP\0 | n | meta_len | meta | table_len | table | (gap | chunks) * n | crc`` (1.1);
    ``members``: (layer index, chunks); lengths, count and gaps may lie."""
    b = b"GRP\0" + struct.pack("<II", len(members) if n is None else n,
                                len(meta_raw) if meta_len is None else meta_len)
    b += meta_raw + struct.pack("<I", len(table) if table_len is None else table_len) + table
    prev = -1
    for k, (index, chunks) in enumerate(members):
        b += uvarint(index - prev - 1 if gaps is None else gaps[k])
        prev = index
        for t, (scale, body) in enumerate(chunks):
            blen = len(body) if body_lens is None else body_lens[t]
            b += struct.pack("<f", scale) + uvarint(blen) + body
    return b + struct.pack("<I", zlib.crc32(b))


def assemble(head: bytes, layers: list[bytes], offsets=None, n_layers=None, refs=None) -> bytes:
    """head + blocks + trailer with the file CRC (offsets / count may lie; ``refs``: per
    layer, the block holding it, for files with group blocks)."""
    out = bytearray(head)
    offs = []
    for lay in layers:
        offs.append(len(out))
        out += lay
    offs = [offs[k] for k in refs] if refs is not None and offsets is None else offs
    offs = offs if offsets is None else offsets
    n = len(offs) if n_layers is None else n_layers
    out += b"END\0" + struct.pack("<I", n) + struct.pack(f"<{len(offs)}Q", *offs)
    out += struct.pack("<I", zlib.crc32(bytes(out))) + END_MAGIC
    return bytes(out)


def dumps(obj) -> bytes:
    return json.dumps(obj, separators=(",", ":"), sort_keys=True).encode()


def base(steps: int = 2, coder_id: str = "ans", seed: int = 0):
    """A small honest file's parts: (header dict, [(meta bytes, table, chunks)])."""
    from co3cli.codec import encode_layer
    from co3cli.coding import get_coder
    from co3cli.formats import get_grid
    from co3cli.quantize import TIE_RULE

    grid, coder = get_grid("fp8-e5m2"), get_coder(coder_id)
    rng = np.random.default_rng(seed)
    shapes = {"fc1.weight": (8, 16), "fc1.bias": (8,)}
    layers, parts = [], []
    for name, shape in shapes.items():
        data = (rng.standard_normal((steps, int(np.prod(shape)))) * 1e-3).astype(np.float32)
        enc = encode_layer(data, grid, coder, model="gennorm-zi", shape=shape)
        parts.append((dumps(enc.meta), enc.table.to_bytes(),
                      list(zip(enc.scales.tolist(), enc.bodies))))
        layers.append({"name": name, "shape": list(shape), "numel": int(np.prod(shape))})
    header = {"co3cli_version": "0", "created": "2026-01-01T00:00:00Z", "format": grid.config(),
              "tie_rule": TIE_RULE, "scale_rule": "absmax", "coder": coder.config(),
              "model": "gennorm-zi", "codebook": None, "layers": layers,
              "steps": list(range(steps)), "loss": None, "source": {"task": "hostile"}}
    return header, parts


def build(header: dict | None = None, parts=None, *, header_raw: bytes | None = None,
          header_z: bytes | None = None, **layer_kw) -> bytes:
    """A whole file from parts (defaults: ``base()``), every CRC correct."""
    if header is None or parts is None:
        h0, p0 = base()
        header = h0 if header is None else header
        parts = p0 if parts is None else parts
    if header_z is None:
        header_z = zlib.compress(dumps(header) if header_raw is None else header_raw, 9)
    blocks = [layer_block(i, m, t, c, **layer_kw) for i, (m, t, c) in enumerate(parts)]
    return assemble(header_block(header_z), blocks)


def bomb_z(json_bytes: bytes, pad_mib: int = 800) -> bytes:
    """zlib stream of ``json_bytes`` followed by ``pad_mib`` MiB of spaces (small on disk)."""
    c = zlib.compressobj(9)
    out = [c.compress(json_bytes)]
    spaces = b" " * (1 << 20)
    for _ in range(pad_mib):
        out.append(c.compress(spaces))
    out.append(c.flush())
    return b"".join(out)


def nested(depth: int) -> bytes:
    return b"[" * depth + b"]" * depth


def base_groups(steps: int = 2, seed: int = 0):
    """A small honest 1.1 file's parts: (header dict, group meta bytes, table, members, lone
    layer parts): ten 16-entry biases in one group, then a matrix coded alone."""
    from co3cli.codec import encode_group, encode_layer
    from co3cli.coding import get_coder
    from co3cli.container import plan_config
    from co3cli.formats import get_grid

    h, _ = base(steps)
    grid, coder = get_grid("fp8-e5m2"), get_coder("ans")
    rng = np.random.default_rng(seed)
    datas = [(rng.standard_normal((steps, 16)) * 1e-3).astype(np.float32) for _ in range(10)]
    g = encode_group(datas, grid, coder, shapes=[(16,)] * 10)
    members = [(i, list(zip(m.scales.tolist(), m.bodies))) for i, m in enumerate(g.members)]
    w = (rng.standard_normal((steps, 128)) * 1e-3).astype(np.float32)
    enc = encode_layer(w, grid, coder, shape=(8, 16))
    lone = (dumps(enc.meta), enc.table.to_bytes(), list(zip(enc.scales.tolist(), enc.bodies)))
    layers = [{"name": f"l{i}.bias", "shape": [16], "numel": 16} for i in range(10)]
    header = dict(h, layers=layers + [{"name": "fc.weight", "shape": [8, 16], "numel": 128}],
                  small_layers=plan_config())
    return header, zlib.compress(dumps(g.meta), 9), g.table.to_bytes(), members, lone


def build_groups(parts=None, *, header=None, minor: int = 1, lone_index: int = 10, offsets=None,
                 **group_kw) -> bytes:
    """A 1.1 file (defaults: ``base_groups()``): the group block, then the lone layer."""
    h, meta, table, members, lone = base_groups() if parts is None else parts
    blocks = [group_block(meta, table, members, **group_kw), layer_block(lone_index, *lone)]
    head = header_block(zlib.compress(dumps(h if header is None else header), 9), minor=minor)
    return assemble(head, blocks, offsets=offsets, refs=[0] * len(members) + [1])


def group_corpus() -> dict[str, bytes]:
    """Hostile 1.1 files (group blocks), each refused by every reader."""
    parts = base_groups()
    h, meta, table, members, lone = parts
    files = {"group_in_v10.co3": build_groups(minor=0),
             "group_count_lie.co3": build_groups(n=len(members) + 1),
             "group_member_lie.co3": build_groups(gaps=[0] * (len(members) - 1) + [1]),
             "group_nested_meta.co3": build_groups((h, zlib.compress(nested(100_000), 9), table,
                                                    members, lone)),
             "group_meta_bomb.co3": build_groups((h, bomb_z(dumps({"model": "gennorm-zi"}), 2),
                                                  table, members, lone)),
             "group_meta_not_zlib.co3": build_groups((h, dumps({"model": "gennorm-zi"}), table,
                                                      members, lone)),
             "group_garbage_table.co3": build_groups((h, meta, b"\xff" * 40, members, lone))}
    short = [(i, [(s, b[: len(b) // 2]) for s, b in ch]) for i, ch in members]
    files["group_short_bodies.co3"] = build_groups((h, meta, table, short, lone))
    nan = [(members[0][0], [(float("nan"), members[0][1][0][1])] + members[0][1][1:])] + members[1:]
    files["group_nan_scale.co3"] = build_groups((h, meta, table, nan, lone))
    files["group_body_overrun.co3"] = build_groups(body_lens=[1 << 20, 1 << 20])
    files["group_bad_layers_meta.co3"] = build_groups((h, zlib.compress(dumps(
        {"model": "gennorm-zi", "layers": [1]})), table, members, lone))
    g0 = len(header_block(zlib.compress(dumps(h), 9)))  # the group's offset
    lone_at = len(build_groups()) - len(layer_block(10, *lone)) - (4 + 4 + 8 * 11 + 4 + 7)
    files["group_split_offsets.co3"] = build_groups(offsets=[g0] * 9 + [lone_at, lone_at])
    return files


def corpus() -> dict[str, bytes]:
    """The committed hostile files: name -> bytes (each refused by every reader)."""
    h, parts = base()
    files = {}
    files["header_bomb.co3"] = build(h, parts, header_z=bomb_z(dumps(h)))
    files["nested_meta.co3"] = build(h, [(nested(100_000),) + parts[0][1:]] + parts[1:])
    deep = dict(h, source={"x": json.loads(nested(60))})  # legal depth, then too deep:
    files["nested_header.co3"] = build(h, parts, header_raw=dumps(deep)[:-1] + b',"y":'
                                       + nested(100_000) + b"}")
    files["steps_lie.co3"] = build(dict(h, steps=[0] * 2_000_000), parts)
    for p in (30, 40):
        lay = [dict(h["layers"][0], shape=[1 << p], numel=1 << p)] + h["layers"][1:]
        files[f"numel_2e{p}.co3"] = build(dict(h, layers=lay), parts)
    lay = [dict(h["layers"][0], shape=[1] * 1_000_000 + [128])] + h["layers"][1:]
    files["million_dims.co3"] = build(dict(h, layers=lay), parts)
    files["duplicate_names.co3"] = build(dict(h, layers=[h["layers"][0], dict(
        h["layers"][1], name=h["layers"][0]["name"])]), parts)
    files["nested_names.co3"] = build(dict(h, layers=[h["layers"][0], dict(
        h["layers"][1], name=h["layers"][0]["name"] + "/x")]), parts)
    files["bad_meta_fit.co3"] = build(h, [(dumps({"model": "gennorm-zi", "params": "x"}),)
                                          + parts[0][1:]] + parts[1:])
    files["garbage_table.co3"] = build(h, [(parts[0][0], b"\xff" * 40, parts[0][2])] + parts[1:])
    files["spliced_layers.co3"] = build(h, [parts[1], parts[0]])
    chunks = [(s, b[: len(b) // 2]) for s, b in parts[0][2]]
    files["short_bodies.co3"] = build(h, [(parts[0][0], parts[0][1], chunks)] + parts[1:])
    files["nan_scale.co3"] = build(h, [(parts[0][0], parts[0][1], [(float("nan"), parts[0][2][0][1])]
                                        + parts[0][2][1:])] + parts[1:])
    return files


def steps_block(index: int, meta_raw: bytes, groups, chunks) -> bytes:
    """``LYS\0`` block: the layer block's fields, its table field the table set of ``groups``
    ((steps, kind, table bytes); counts, kinds and lengths as given, so they may lie)."""
    tableset = uvarint(len(groups)) + b"".join(uvarint(n) + bytes([k]) + uvarint(len(t)) + t
                                               for n, k, t in groups)
    b = b"LYS\0" + layer_block(index, meta_raw, tableset, chunks)[4:-4]  # its CRC: anew
    return b + struct.pack("<I", zlib.crc32(b))


def build_steps(groups_fn=None, chunks_fn=None) -> bytes:
    """``base()``'s two-layer file, layer 1 written as an ``LYS`` block with one table group
    per step (the layer's own table); ``groups_fn(groups, table)`` and ``chunks_fn(chunks)``
    may make it lie."""
    h, parts = base(steps=2)
    meta, table, chunks = parts[1]
    groups = [(1, 0, table), (1, 0, table)]
    groups = groups if groups_fn is None else groups_fn(groups, table)
    chunks = chunks if chunks_fn is None else chunks_fn(chunks)
    blocks = [layer_block(0, *parts[0]), steps_block(1, meta, groups, chunks)]
    return assemble(header_block(zlib.compress(dumps(h), 9)), blocks)


STEPS_LIES = {  # name -> (groups_fn, what the reader says)
    "too_few_steps": (lambda g, t: g[:1], "cover 1 of 2"),
    "too_many_groups": (lambda g, t: g * 2, "4 step groups for 2 steps"),
    "overrun": (lambda g, t: [(3, 0, t)], "overruns the layer"),
    "zero_steps": (lambda g, t: [(0, 0, t), (2, 0, t)], "overruns the layer"),
    "unknown_kind": (lambda g, t: [(1, 7, t), (1, 0, t)], "unknown kind 7"),
    "stored_with_table": (lambda g, t: [(1, 1, t), (1, 0, t)], "carries a table"),
    "garbage_table": (lambda g, t: [(1, 0, b"\xff" * 20), (1, 0, t)], "table"),
}


def steps_corpus() -> dict[str, bytes]:
    """Hostile files with step groups (``LYS`` blocks), each refused by every reader."""
    return {f"steps_{name}.co3": build_steps(fn) for name, (fn, _) in STEPS_LIES.items()}


def same_block(index: int, source: int, extra: bytes = b"") -> bytes:
    """``LYE\0 | index | source | crc``: layer ``index`` equals layer ``source``."""
    b = b"LYE\0" + struct.pack("<II", index, source) + extra
    return b + struct.pack("<I", zlib.crc32(b))


def build_same(index: int = 2, source: int = 0, *, shape=(8, 16), extra: bytes = b"",
               chain: bool = False) -> bytes:
    """``base()``'s two layers, then a third (``fc2.weight``, ``shape``) written as a reference
    to ``source``; ``chain``: layer 1 is a reference to layer 0 (both (8, 16)) too."""
    h, parts = base()
    lays = h["layers"] + [{"name": "fc2.weight", "shape": list(shape),
                           "numel": int(np.prod(shape))}]
    second = layer_block(1, *parts[1])
    if chain:
        lays[1] = dict(lays[0], name="fc1b.weight")
        second = same_block(1, 0)
    blocks = [layer_block(0, *parts[0]), second, same_block(index, source, extra)]
    return assemble(header_block(zlib.compress(dumps(dict(h, layers=lays)), 9)), blocks)


SAME_LIES = {  # name -> (build_same kwargs, what the reader says)
    "forward": ({"source": 2}, "not an earlier layer"),
    "out_of_range": ({"source": 9}, "not an earlier layer"),
    "index": ({"index": 5}, "not an earlier layer"),
    "other_shape": ({"source": 1}, "of another shape"),
    "long": ({"extra": b"\0" * 4}, "bad or damaged reference"),
    "chain": ({"source": 1, "chain": True}, "itself a reference"),
}


def same_corpus() -> dict[str, bytes]:
    """Hostile files with references to equal layers (``LYE`` blocks)."""
    return {f"same_{name}.co3": build_same(**kw) for name, (kw, _) in SAME_LIES.items()}


def xref_block(index: int, source: int, meta_raw: bytes, table: bytes, chunks, **lies) -> bytes:
    """``LYX\0 | index | source | meta_len | meta | table_len | table | chunks | crc``: layer
    ``index`` coded given layer ``source`` (``co3cli.container.xref``; ``lies``: lengths, as
    ``layer_block``'s)."""
    b = b"LYX\0" + struct.pack("<I", index) + struct.pack("<I", source) \
        + layer_block(index, meta_raw, table, chunks, **lies)[8:-4]  # from meta_len on; CRC anew
    return b + struct.pack("<I", zlib.crc32(b))


def xref_parts(steps: int = 2, seed: int = 0):
    """``base(coder_id="ctx")``'s two layers, and the parts of a third (8, 16) layer close to
    the first, coded given it (a ``ctx`` model version 6 table): (header, parts, third, the
    third's chunks coded given itself)."""
    from co3cli.codec import encode_layer
    from co3cli.coding import get_coder
    from co3cli.formats import get_grid

    h, parts = base(steps, "ctx", seed)
    rng = np.random.default_rng(seed)  # base()'s first layer, drawn again
    first = (rng.standard_normal((steps, 128)) * 1e-3).astype(np.float32)
    grid, coder = get_grid("fp8-e5m2"), get_coder("ctx")
    ref = encode_layer(first, grid, coder, model="gennorm-zi", shape=(8, 16), keep_symbols=True)
    near = first + (rng.standard_normal(first.shape) * 1e-5).astype(np.float32)
    enc = encode_layer(near, grid, coder, model="gennorm-zi", shape=(8, 16), keep_symbols=True)
    table = enc.table.with_reference()
    bodies = [table.encode(enc.sym[t], cols=16, ref=ref.sym[t]) for t in range(steps)]
    again = [table.encode(enc.sym[t], cols=16, ref=enc.sym[t]) for t in range(steps)]
    assert [bytes(b) for b in ref.bodies] == [c for _, c in parts[0][2]]
    return h, parts, (dumps(enc.meta), table.to_bytes(), list(zip(enc.scales.tolist(), bodies))), \
        list(zip(enc.scales.tolist(), again))


def build_xref(index: int = 2, source: int = 0, *, shape=(8, 16), coder: str = "ctx",
               same: bool = False, table: bytes | None = None, plain: bool = False,
               chain: int = 0) -> bytes:
    """``xref_parts()``'s file: layers 0 and 1 as ``base()``'s, layer 2 (``fc2.weight``,
    ``shape``) an ``LYX`` block given ``source``; ``same``: layer 1 an (8, 16) ``LYE``
    reference to layer 0; ``table``: layer 2's table instead (``"v4"``: its prior as a
    version 4 table, which takes no reference); ``plain``: layer 2 an ``LYR``
    block (with its version 6 table); ``chain``: that many more ``LYX`` layers after it,
    each given the one before (and equal to it); ``coder``: the header's coder id."""
    h, parts, third, again = xref_parts()
    lays = h["layers"] + [{"name": f"fc{k}.weight", "shape": list(shape),
                           "numel": int(np.prod(shape))} for k in range(2, 3 + chain)]
    second = layer_block(1, *parts[1])
    if same:
        lays[1] = dict(lays[0], name="fc1b.weight")
        second = same_block(1, 0)
    meta, tab, chunks = third
    tab = tab if table is None else bytes([4]) + tab[1:] if table == "v4" else table
    blocks = [layer_block(0, *parts[0]), second,
              layer_block(2, meta, tab, chunks) if plain else
              xref_block(index, source, meta, tab, chunks)]
    blocks += [xref_block(k, k - 1, meta, tab, again) for k in range(3, 3 + chain)]
    if coder != "ctx":
        from co3cli.coding import get_coder

        h = dict(h, coder=get_coder(coder).config())
    h = dict(h, layers=lays)
    return assemble(header_block(zlib.compress(dumps(h), 9)), blocks)


XREF_LIES = {  # name -> (build_xref kwargs, what the reader says)
    "forward": ({"source": 3}, "not an earlier layer"),
    "self": ({"source": 2}, "not an earlier layer"),
    "out_of_range": ({"source": 99}, "not an earlier layer"),
    "index": ({"index": 5}, "bad block tag or index"),
    "other_shape": ({"source": 1}, "of another shape"),
    "source_same": ({"source": 1, "same": True}, "a reference to an equal layer"),
    "chain": ({"chain": 4}, "a chain of more than 4"),
    "coder": ({"coder": "ans"}, "whose coder is 'ans'"),
    "table_v4": ({"table": "v4"}, "takes no reference"),
    "plain_reference_table": ({"plain": True}, "block that names none"),
}


def build_xref_grouped() -> bytes:
    """``base_groups()``'s 1.1 file (header coder ``ctx``) and a 16-entry layer coded given a
    member of its group (which no layer may be coded given)."""
    h, meta, table, members, lone = base_groups()
    lays = h["layers"] + [{"name": "x.bias", "shape": [16], "numel": 16}]
    h = dict(h, layers=lays, coder=dict(h["coder"], id="ctx"))
    blocks = [group_block(meta, table, members), layer_block(10, *lone),
              xref_block(11, 0, *xref_parts()[2])]
    head = header_block(zlib.compress(dumps(h), 9), minor=1)
    return assemble(head, blocks, refs=[0] * len(members) + [1, 2])


def xref_corpus() -> dict[str, bytes]:
    """Hostile files with layers coded given another (``LYX`` blocks)."""
    files = {f"xref_{name}.co3": build_xref(**kw) for name, (kw, _) in XREF_LIES.items()}
    files["xref_group_source.co3"] = build_xref_grouped()
    return files


# ----------------------------------------------------------------- .co3 1.5


def honest15(coder: str = "ctx", seed: int = 0) -> bytes:
    """A small 1.5 file from the writer: ``ctx``: ten biases and a (8, 16) matrix in one
    ``GRC`` block coded as one stream; ``ans``: the biases in a group, the matrix alone."""
    import tempfile

    from co3cli.codec import compress
    from co3cli.dump import write_dump

    import os

    rng = np.random.default_rng(seed)
    layers = {f"l{i}.bias": ((rng.standard_normal((3, 16)) * 1e-3).astype(np.float32), (16,))
              for i in range(10)}
    os.environ["SOURCE_DATE_EPOCH"] = "1767225600"  # the same bytes each time
    layers["fc.weight"] = ((rng.standard_normal((3, 1200)) * 1e-3).astype(np.float32), (30, 40))
    with tempfile.TemporaryDirectory() as tmp:
        write_dump(f"{tmp}/d.h5", layers, steps=np.arange(3), loss=[2.5, 2.0, 1.5],
                   attrs={"task": "hostile", "created": "2026-01-01T00:00:00+00:00"})
        compress(f"{tmp}/d.h5", f"{tmp}/d.co3", coder=coder, threads=1)
        return Path(f"{tmp}/d.co3").read_bytes()


def split15(data: bytes):
    """(header bytes, the blocks' bytes each, each layer's block) of a 1.5 file."""
    from co3cli.container import open_co3

    hlen = struct.unpack_from("<I", data, 12)[0]
    import io

    c = open_co3(io.BytesIO(data))
    starts = sorted(set(c.offsets))
    ends = starts[1:] + [c._end]
    return (data[16:16 + hlen], [data[a:b] for a, b in zip(starts, ends)],
            [starts.index(o) for o in c.offsets])


def text_header(flags: int, lines: bytes, js: bytes, binary: bytes, *, lens=None,
                kind: int = 1) -> bytes:
    """A 1.5 header (kind byte, then the text model's payload) of the given sections, each
    length as given in ``lens`` (may lie)."""
    from co3cli.coding.textcm import TextEncoder
    from co3cli.container.hcm import _guess, _guess_cap
    from co3cli.container.hprime import PRIME

    lens = lens or (len(lines), len(js), len(binary))
    try:  # (lines the reader refuses: it stops before the guess)
        layers = [(ln.rpartition(" ")[0], [int(d) for d in ln.rpartition(" ")[2].split(",") if d])
                  for ln in lines.decode().split("\n")[:-1]]
    except ValueError:
        layers = []
    enc = TextEncoder(len(PRIME) + (1 << 22))
    enc.prime(PRIME)
    enc.encode(bytes([flags]) + uvarint(lens[0]) + lines)
    enc.prime(_guess(layers, _guess_cap(len(lines))))
    enc.encode(uvarint(lens[1]) + js + uvarint(lens[2]) + binary)
    return bytes([kind]) + enc.finish()


def trailer15(sizes, index, width=None, pad=b"", tlen_delta: int = 0) -> bytes:
    """``"E" | nblocks | sizes | map | tlen`` (without the CRC): ``index`` each layer's block;
    ``width`` bits each (default: what the count needs), ``pad`` appended; lengths may lie."""
    width = (len(sizes) - 1).bit_length() if width is None else width
    bits = "".join(format(k, f"0{width}b") if width else "" for k in index)
    bits += "0" * (-len(bits) % 8)
    body = (b"E" + uvarint(len(sizes)) + b"".join(uvarint(n) for n in sizes)
            + (int(bits, 2).to_bytes(len(bits) // 8, "big") if bits else b"") + pad)
    return body + uvarint(len(body) + tlen_delta)[::-1]


def assemble15(header: bytes, blocks: list[bytes], index: list[int], *, minor: int = 5,
               trailer: bytes | None = None) -> bytes:
    """preamble (version 1.``minor``) + header + its CRC + blocks + trailer + file CRC."""
    pre = MAGIC + struct.pack("<HHI", 1, minor, len(header))
    out = pre + header + struct.pack("<I", zlib.crc32(pre + header)) + b"".join(blocks)
    out += trailer15([len(b) for b in blocks], index) if trailer is None else trailer
    return out + struct.pack("<I", zlib.crc32(out)) + END_MAGIC


def assemble14(data15: bytes, blocks: list[bytes], index: list[int]) -> bytes:
    """The blocks of a 1.5 file under the 1.4 header and trailer of its header object."""
    import io

    from co3cli.container import open_co3
    from co3cli.container.hcompact import pack_header
    from co3cli.container.hdict import deflate

    header = deflate(pack_header(open_co3(io.BytesIO(data15)).header))
    pre = MAGIC + struct.pack("<HHI", 1, 4, len(header))
    out = pre + header + struct.pack("<I", zlib.crc32(pre + header))
    starts = []
    for b in blocks:
        starts.append(len(out))
        out += b
    offs = [starts[k] for k in index]
    deltas = [b - a for a, b in zip([0] + offs, offs)]
    tr = b"END\0" + struct.pack("<I", len(offs)) + b"".join(
        uvarint(2 * d if d >= 0 else -2 * d - 1) for d in deltas)
    out += tr + struct.pack("<I", len(tr))
    return out + struct.pack("<I", zlib.crc32(out)) + END_MAGIC


def grc15(block: bytes, edit) -> bytes:
    """A ``GRC`` block with ``edit(bytes up to its CRC)`` applied and its CRC anew."""
    b = edit(block[:-4])
    return b + struct.pack("<I", zlib.crc32(b))


def _header_sections(data: bytes):
    from co3cli.container import open_co3
    from co3cli.container.hcm import _sections

    import io

    return _sections(open_co3(io.BytesIO(data)).header)


def v15_corpus() -> dict[str, bytes]:
    """Hostile 1.5 files (text-model header, block sizes in the trailer, ``GRC`` streams),
    each refused by every reader; the values: what the reader says (``V15_SAYS``)."""
    from co3cli.container.hcm import CONFIG, CREATED, LAYERS, SOURCE_LAYERS, STEPS

    ok = honest15()
    head, blocks, index = split15(ok)
    flags, lines, _, js, binary = _header_sections(ok)
    files = {}

    def with_header(h):
        return assemble15(h, blocks, index)

    files["v15_header_kind.co3"] = with_header(b"\x07" + head[1:])
    files["v15_header_cut.co3"] = with_header(head[:-3])
    files["v15_header_extended.co3"] = with_header(head + b"\0\0")
    files["v15_section_huge.co3"] = with_header(text_header(flags, lines, js, binary,
                                                            lens=(len(lines), 1 << 30, 0)))
    files["v15_flags.co3"] = with_header(text_header(SOURCE_LAYERS, b"", js, b""))
    files["v15_moved_twice.co3"] = with_header(text_header(
        flags, lines, js[:-1] + b',"steps":[0,1,2]}', binary))
    files["v15_layer_dims.co3"] = with_header(text_header(
        flags, lines.replace(b" 16\n", b" 016\n", 1), js, binary))
    files["v15_layer_noshape.co3"] = with_header(text_header(flags, b"x\n" + lines, js, binary))
    files["v15_layer_nul.co3"] = with_header(text_header(flags, b"\0" + lines, js, binary))
    deep = b"x/" + b"a/" * 99_999 + b"a"  # 100,000 folders deep (listing them took 10 GB)
    files["v15_layer_deep.co3"] = with_header(text_header(flags, deep + b" 1\nx 1\n" + lines,
                                                          js, binary))
    many = b"x " + b",".join([b"1"] * 40) + b"\n"
    files["v15_layer_many_dims.co3"] = with_header(text_header(flags, many + lines, js, binary))
    from co3cli.container.hcm import _seconds, _zz

    h = json.loads(js)
    assert flags & CREATED and "created" not in h
    import io

    from co3cli.container import open_co3

    full = open_co3(io.BytesIO(ok)).header
    t0, t1 = _seconds(full["created"]), _seconds(full["source"]["created"])
    tail = _zz(t0) + _zz(t1 - t0)
    assert binary.endswith(tail)
    files["v15_created.co3"] = with_header(text_header(
        flags, lines, js, binary[:-len(tail)] + _zz(10**13) + _zz(0)))
    files["v15_config.co3"] = with_header(text_header(
        flags | CONFIG, lines, js[:-2] + b',"config":1}}', binary))
    assert flags & LAYERS and flags & STEPS
    n = len(index)
    files["v15_trailer_blocks.co3"] = assemble15(head, blocks, index, trailer=trailer15(
        [len(blocks[0])] * (n + 1), [0] * n))
    files["v15_trailer_sizes.co3"] = assemble15(head, blocks, index, trailer=trailer15(
        [len(blocks[0]) + 1], [0] * n))
    files["v15_trailer_map.co3"] = assemble15(head, blocks, index, trailer=trailer15(
        [len(blocks[0]) - 1, 1], [1] * n))
    files["v15_trailer_pad.co3"] = assemble15(head, blocks, index, trailer=trailer15(
        [len(blocks[0])], [0] * n, pad=b"\x01"))
    files["v15_trailer_tlen.co3"] = assemble15(head, blocks, index, trailer=trailer15(
        [len(blocks[0])], [0] * n, tlen_delta=1 << 20))
    grc = blocks[0]
    layout_at = 4 + len(uvarint(n))
    files["v15_stream_in_14.co3"] = assemble14(ok, blocks, index)
    files["v15_prior_kind.co3"] = assemble15(head, [grc15(grc, lambda b: b[:layout_at + 1]
                                                         + b"\x09" + b[layout_at + 2:])], index)
    files["v15_layout.co3"] = assemble15(head, [grc15(grc, lambda b: b[:layout_at] + b"\x07"
                                                      + b[layout_at + 1:])], index)
    files["v15_stream_v4_table.co3"] = assemble15(head, [grc15(grc, lambda b: b[:layout_at + 2]
                                                               + b"\x04" + b[layout_at + 3:])],
                                                  index)
    return files


V15_SAYS = {"v15_header_kind.co3": "unknown header kind", "v15_header_cut.co3": "text payload",
            "v15_header_extended.co3": "text payload", "v15_section_huge.co3": "a section of",
            "v15_flags.co3": "bad flags", "v15_moved_twice.co3": "both in the JSON and moved",
            "v15_layer_dims.co3": "bad dimension", "v15_layer_noshape.co3": "has no shape",
            "v15_layer_many_dims.co3": "dimensions", "v15_layer_nul.co3": "HDF5 path",
            "v15_layer_deep.co3": "100000 folders", "v15_created.co3": "timestamp",
            "v15_config.co3": "config is not an object", "v15_trailer_blocks.co3": "blocks for",
            "v15_trailer_sizes.co3": "do not add up", "v15_trailer_map.co3": "layer index",
            "v15_trailer_pad.co3": "trailer", "v15_trailer_tlen.co3": "trailer is corrupt",
            "v15_stream_in_14.co3": "needs 1.5", "v15_prior_kind.co3": "bad prior kind",
            "v15_layout.co3": "bad group layout", "v15_stream_v4_table.co3": "model version 5"}


def base_lossless():
    """A small honest lossless file's parts (``--format bf16-lossless``, table version 3):
    (header dict, [(meta bytes, table, chunks)]) of one coded layer (2 steps of 3000 words,
    +-0 words: compact mode) and one stored raw."""
    import tempfile

    import h5py

    from co3cli.container import open_co3
    from co3cli.lossless import compress_lossless

    rng = np.random.default_rng(7)
    x = rng.laplace(scale=1e-3, size=(2, 3000)).astype(np.float32)
    x[rng.random(x.shape) < 0.2] = 0.0
    w = (x.view(np.uint32) >> 16).astype(np.uint16)
    tmp = tempfile.TemporaryDirectory()
    src, dst = Path(tmp.name, "src.h5"), Path(tmp.name, "dst.co3")
    with h5py.File(src, "w") as f:
        f.attrs["schema"] = "co3.gradients/1"
        f.attrs["layers"] = json.dumps(["fc.weight", "fc.bias"])
        for name, data in (("fc.weight", w), ("fc.bias", w[:, :30].copy())):
            ds = f.create_dataset(f"grads/{name}", data=data)
            ds.attrs["shape"] = np.asarray([data.shape[1]], dtype=np.int64)
            ds.attrs["dtype"] = "bfloat16"
        f.create_dataset("steps", data=np.arange(2, dtype=np.int64))
    compress_lossless(src, dst, format="bf16-lossless")
    with open(dst, "rb") as f:
        co3 = open_co3(f)
        parts = [(dumps(b.meta), b.table, list(zip(b.scales.tolist(), b.bodies)))
                 for b in co3.layers()]
        header = co3.header
    tmp.cleanup()
    return dict(header, created="2026-01-01T00:00:00Z", co3cli_version="0"), parts


def _body_lie(body: bytes, fn) -> bytes:
    """``body`` (a version-3 chunk of 3000 words) with ``fn(parts)`` applied to its parts:
    [varint, lane states, renormalisation words, raw bytes] (bytearrays)."""
    n = 0
    i = 0
    while True:
        n |= (body[i] & 0x7F) << (7 * i)
        i += 1
        if body[i - 1] < 0x80:
            break
    parts = [bytearray(body[:i]), bytearray(body[i:i + 32]), bytearray(body[i + 32:i + 32 + 2 * n]),
             bytearray(body[i + 32 + 2 * n:])]
    fn(parts)
    return b"".join(parts)


LOSSLESS_LIES = {  # name -> (table fn, chunk body fn, what a decoder says)
    "garbage_table": (lambda t: b"\x03\x01\x01" + b"\xff" * 30, None, "table"),
    "symbols_lie": (lambda t: t[:7] + uvarint(1 << 40) + t[8:], None, "symbols"),
    "pairs_lie": (lambda t: t[:-3] + b"\x7f", None, "table"),
    "v2_table": (lambda t: bytes([2]) + t[1:], None, "version"),
    "low_state": (None, lambda p: p[1].__setitem__(slice(0, 4), b"\x01\x00\x00\x00"),
                  "wrong coder state"),
    "words_lie": (None, lambda p: p.__setitem__(0, bytearray(uvarint(len(p[2]) // 2 + 1))),
                  "left over"),
    "short_raw": (None, lambda p: p.__setitem__(3, p[3][:-1]), "runs out"),
    "long_raw": (None, lambda p: p[3].extend(b"\0\0\0\0"), "bytes left over"),
}


def lossless_corpus() -> dict[str, bytes]:
    """Hostile lossless (version 3) files: a table or a chunk that lies."""
    h, parts = base_lossless()
    files = {}
    for name, (tfn, bfn, _) in LOSSLESS_LIES.items():
        meta, table, chunks = parts[0]
        table = table if tfn is None else tfn(table)
        if bfn is not None:
            chunks = [(chunks[0][0], _body_lie(chunks[0][1], bfn))] + chunks[1:]
        files[f"lossless3_{name}.co3"] = build(h, [(meta, table, chunks)] + parts[1:])
    return files


if __name__ == "__main__":
    CORPUS.mkdir(exist_ok=True)
    for name, data in {**corpus(), **group_corpus(), **steps_corpus(), **same_corpus(),
                       **xref_corpus(), **v15_corpus(), **lossless_corpus()}.items():
        (CORPUS / name).write_bytes(data)
        print(f"{name}: {len(data)} bytes")
