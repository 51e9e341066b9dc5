"""Writing and reading the blocks of a ``.co3`` file (the layout: ``co3cli.container``)."""

from __future__ import annotations

import json
import struct
import zlib
from dataclasses import dataclass, field
from typing import BinaryIO, Iterator

import numpy as np

from co3cli.container.chunks import LAYER_HEAD as _LAYER_HEAD
from co3cli.container.chunks import _F32, _check_scales, _meta_table, _read_chunks
from co3cli.container.framing import read_uvarint, table_field, trailer15_bytes
from co3cli.container.gcompact import (COMPACT_GROUP_TAG, HEADER_MINOR, PER_MEMBER, STACKED,
                                       STREAMS, body_members, pack_group, parse_group,
                                       payload_shares, stream_segments)
from co3cli.container.hcm import pack_header15
from co3cli.container.hdict import deflate
from co3cli.container.header import COMPACT_MINOR, TEXT_HEADER_MINOR, step_context
from co3cli.container.plan import joinable
from co3cli.container.tableset import (KIND_RAW, STEPS_TAG, pack_tableset, parse_tableset,
                                       representative_table)
from co3cli.container.xref import MAX_CHAIN, XREF_HEAD, XREF_TAG, check_source
from co3cli.coding import row_length
from co3cli.errors import CorruptDataError, InputError
from co3cli.fileio import CO3_MAGIC
from co3cli.varint import uvarint

MAGIC = CO3_MAGIC  # b"CO3\x89GRD\n"
END_MAGIC = b"\x89CO3END"
MAJOR, MINOR = 1, 5  # minor 1: group blocks; minor 2 (STEP_CONTEXT_MINOR): chunks with context
# across steps; minor 3 (COMPACT_MINOR): the header deflated with a preset dictionary, joined
# steps (LYJ/GRJ blocks), varint offsets in the trailer; minor 4 (HEADER_MINOR): the compact
# header (co3cli.container.hcompact), GRC blocks (gcompact); minor 5 (TEXT_HEADER_MINOR, every
# file written now): the header coded by a text model (hcm), block sizes in the trailer
_PRE = struct.Struct("<8sHHI")
_U32 = struct.Struct("<I")
LAYER_TAG, GROUP_TAG = b"LYR\0", b"GRP\0"
SAME_TAG = b"LYE\0"  # a layer equal to an earlier one (its index, the source's): no chunks
_SAME = struct.Struct("<4sII")
JOINED_TAG, JOINED_GROUP_TAG = b"LYJ\0", b"GRJ\0"  # 1.3: each layer's steps in one chunk


@dataclass
class Joined:
    """A layer's steps coded as one chunk (``LYJ``/``GRJ`` blocks, ``.co3`` 1.3): a scale per
    step and one body, the steps' symbols in order (the layer's 2-D view with the steps as
    further rows)."""

    scales: list
    body: bytes


def _chunks_bytes(chunks) -> bytes:
    if isinstance(chunks, Joined):
        return (struct.pack(f"<{len(chunks.scales)}f", *chunks.scales) + uvarint(len(chunks.body))
                + chunks.body)
    return b"".join(_F32.pack(scale) + uvarint(len(body)) + body for scale, body in chunks)


def _nchunks(chunks) -> int:
    return len(chunks.scales) if isinstance(chunks, Joined) else len(chunks)


def _json(obj) -> bytes:
    return json.dumps(obj, separators=(",", ":"), sort_keys=True).encode()


class _CrcWriter:
    """File wrapper that tracks position and the running CRC-32 of everything written."""

    def __init__(self, f: BinaryIO):
        self.f, self.pos, self.crc = f, 0, 0

    def write(self, b: bytes) -> None:
        self.f.write(b)
        self.pos += len(b)
        self.crc = zlib.crc32(b, self.crc)


class Co3Writer:
    """Streaming writer: header first, then one block at a time, then the trailer.

    Blocks come in the order of their first layer: :meth:`write_layer` writes the lowest layer
    not yet written; :meth:`write_group` a group whose first member is that layer. ``groups``:
    whether the file may hold group blocks; ``step_context``: the coder codes each step given
    the previous one (no joined blocks then). Files are written as version 1.5: the header
    coded by a text model (``co3cli.container.hcm``), block sizes in the trailer
    (``co3cli.container.framing.trailer15_bytes``), joined groups ``GRC``."""

    def __init__(self, f: BinaryIO, header: dict, groups: bool = False,
                 step_context: bool = False):
        self.w = _CrcWriter(f)
        self.header = header
        self.nlayers = len(header["layers"])
        self.offsets: list[int | None] = [None] * self.nlayers
        self.layer_bytes: list[int] = []
        self._next = 0
        self._groups = groups
        self._alone: set[int] = set()  # layers written in a block of their own (LYR/LYS)
        self._chain: dict[int, int] = {}  # an LYX layer: the LYX blocks of its chain
        self._step_context = step_context
        js = pack_header15(header)
        pre = _PRE.pack(MAGIC, MAJOR, TEXT_HEADER_MINOR, len(js))
        self.w.write(pre + js + _U32.pack(zlib.crc32(pre + js)))

    def _check_chunks(self, idx: int, chunks) -> None:
        if _nchunks(chunks) != len(self.header["steps"]):
            raise InputError(f"layer {idx}: {_nchunks(chunks)} chunks for "
                             f"{len(self.header['steps'])} steps")
        if isinstance(chunks, Joined) and self._step_context:
            raise InputError(f"layer {idx}: joined steps in a file coded in context across steps")

    def _claim(self, indices: list[int]) -> int:
        if not indices or indices[0] != self._next:
            raise InputError(f"block of layers {indices[:3]}...: layer {self._next} comes next")
        if any(b <= a for a, b in zip(indices, indices[1:])) or indices[-1] >= self.nlayers \
                or any(self.offsets[i] is not None for i in indices):
            raise InputError(f"layers {indices[:8]}: not increasing, out of range or already written")
        start = self.w.pos
        for i in indices:
            self.offsets[i] = start
        while self._next < self.nlayers and self.offsets[self._next] is not None:
            self._next += 1
        return start

    def write_layer(self, meta: dict, table: bytes, chunks: list[tuple[float, bytes]],
                    step_groups: list[tuple[int, int, bytes]] | None = None) -> int:
        """Write one layer block; returns its size in bytes. ``step_groups`` ((steps, kind,
        table), ``co3cli.container.tableset``): an ``LYS`` block with those tables instead of
        ``table`` (which must then be empty). ``chunks``: (scale, body) per step, or
        :class:`Joined` (an ``LYJ`` block)."""
        idx = self._next
        if idx >= self.nlayers:
            raise InputError("more layers written than the header declares")
        self._check_chunks(idx, chunks)
        tag = JOINED_TAG if isinstance(chunks, Joined) else LAYER_TAG
        if step_groups is not None:
            if tag == JOINED_TAG:
                raise InputError("a layer with step groups codes its steps apart")
            if table:
                raise InputError("a layer with step groups takes its tables from them")
            tag, table = STEPS_TAG, pack_tableset(step_groups, len(self.header["steps"]))
        start = self._claim([idx])
        mj = _json(meta)
        block = (_LAYER_HEAD.pack(tag, idx, len(mj)) + mj + table_field(table)
                 + _chunks_bytes(chunks))
        self.w.write(block + _U32.pack(zlib.crc32(block)))
        self.layer_bytes.append(self.w.pos - start)
        self._alone.add(idx)
        return self.layer_bytes[-1]

    def write_xref(self, meta: dict, table: bytes, chunks: list[tuple[float, bytes]],
                   source: int) -> int:
        """Write the next layer as coded given layer ``source`` (written before in a block of
        its own, the same shape; ``co3cli.container.xref``): an ``LYX`` block of ``chunks``
        ((scale, body) per step, each body coded given that step of the source); returns
        its size in bytes."""
        idx = self._next
        if idx >= self.nlayers:
            raise InputError("more layers written than the header declares")
        self._check_chunks(idx, chunks)
        lays = self.header["layers"]
        chain = self._chain.get(source, 0) + 1
        if isinstance(chunks, Joined) or self._step_context or source not in self._alone \
                or lays[source]["shape"] != lays[idx]["shape"] or chain > MAX_CHAIN:
            raise InputError(f"layer {idx} cannot be coded given layer {source}")
        start = self._claim([idx])
        mj = _json(meta)
        block = (XREF_HEAD.pack(XREF_TAG, idx, source, len(mj)) + mj + table_field(table)
                 + _chunks_bytes(chunks))
        self.w.write(block + _U32.pack(zlib.crc32(block)))
        self.layer_bytes.append(self.w.pos - start)
        self._alone.add(idx)
        self._chain[idx] = chain
        return self.layer_bytes[-1]

    def write_same(self, source: int) -> int:
        """Write the next layer as equal to layer ``source`` (written before, coded alone in
        its own block, the same shape): a ``LYE`` block; returns its size in bytes."""
        idx = self._next
        if idx >= self.nlayers:
            raise InputError("more layers written than the header declares")
        lays = self.header["layers"]
        if source not in self._alone or lays[source]["shape"] != lays[idx]["shape"]:
            raise InputError(f"layer {idx} cannot refer to layer {source}")
        start = self._claim([idx])
        block = _SAME.pack(SAME_TAG, idx, source)
        self.w.write(block + _U32.pack(zlib.crc32(block)))
        self.layer_bytes.append(self.w.pos - start)
        return self.layer_bytes[-1]

    def write_group(self, meta: dict, table: bytes,
                    members: list[tuple[int, list[tuple[float, bytes]]]],
                    stacks: list[bytes] | None = None, layout: int = STACKED) -> list[int]:
        """Write one group block (``members``: (layer index, chunks), indices increasing;
        chunks all :class:`Joined`: a ``GRC`` block, ``co3cli.container.gcompact``, with
        ``stacks`` the bodies of ``layout`` (``STACKED``: one per stack; ``STREAMS``: one),
        the members' own bodies empty); returns each member's bytes (its own, plus an equal
        share of the group's head, meta, table and CRC: the shares sum to the block's size)."""
        if not self._groups:
            raise InputError("this writer was opened for a file without group blocks")
        indices = [i for i, _ in members]
        for i, chunks in members:
            self._check_chunks(i, chunks)
        joined = {isinstance(chunks, Joined) for _, chunks in members}
        if len(joined) > 1:
            raise InputError("a group's members are all joined or none")
        if joined == {True}:
            return self._write_compact_group(meta, table, members, stacks, layout)
        if stacks is not None:
            raise InputError("stacked bodies are for a group of joined members")
        self._claim(indices)
        mj = deflate(_json(meta))
        head = _LAYER_HEAD.pack(GROUP_TAG, len(members), len(mj)) + mj + table_field(table)
        parts, prev = [], -1
        for i, chunks in members:
            parts.append(uvarint(i - prev - 1) + _chunks_bytes(chunks))
            prev = i
        block = head + b"".join(parts)
        self.w.write(block + _U32.pack(zlib.crc32(block)))
        return self._shares(len(block) + 4, [len(p) for p in parts])

    def _shares(self, size: int, own: list[int]) -> list[int]:
        """Each member's bytes: ``own`` plus an equal share of the rest of ``size``."""
        shared = size - sum(own)
        out = [o + shared // len(own) for o in own]
        out[0] += shared % len(own)
        self.layer_bytes += out
        return out

    def _write_compact_group(self, meta, table, members, stacks, layout) -> list[int]:
        lays = self.header["layers"]
        cols = [row_length(lays[i]["shape"], lays[i]["numel"]) for i, _ in members]
        sizes = [len(self.header["steps"]) * lays[i]["numel"] for i, _ in members]
        if stacks is None:
            bodies, layout = [chunks.body for _, chunks in members], PER_MEMBER
            groups = [[k] for k in range(len(members))]
        else:
            if layout not in (STACKED,) + STREAMS:
                raise InputError(f"group layout {layout} has no shared bodies")
            groups, bodies = body_members(layout, cols), stacks
            if len(bodies) != len(groups) or any(chunks.body for _, chunks in members):
                raise InputError(f"{len(bodies)} stacked bodies for {len(groups)} stacks")
        self._claim([i for i, _ in members])
        block = pack_group(_json(meta), table, [c.scales for _, c in members], bodies, layout)
        self.w.write(block + _U32.pack(zlib.crc32(block)))
        return self._shares(len(block) + 4, payload_shares(bodies, groups, sizes))

    def close(self) -> int:
        """Write the trailer; returns the total file size."""
        missing = [i for i, o in enumerate(self.offsets) if o is None]
        if missing:
            raise InputError(f"{self.nlayers - len(missing)} layers written, header declares "
                             f"{self.nlayers}")
        self.w.write(trailer15_bytes(self.offsets, self.w.pos))
        self.w.write(_U32.pack(self.w.crc) + END_MAGIC)
        return self.w.pos


@dataclass
class LayerBlock:
    index: int
    name: str
    meta: dict
    table: bytes
    scales: np.ndarray  # float32 (steps,)
    bodies: list[bytes]
    nbytes: int  # the layer's bytes in the file, side information included (a group member:
    # its own bytes and its share of the group's)
    payload_bytes: int = 0
    group: int | None = None  # a group member: the index of the group's first layer
    cache: dict = field(default_factory=dict, repr=False)  # shared by a group's members
    # (a reader may keep the parsed table there)
    same_as: int | None = None  # an ``LYE`` block: the index of the layer it equals (whose
    # table, scales and bodies it carries; ``payload_bytes`` 0, ``nbytes`` its own block's)
    step_groups: list | None = None  # an ``LYS`` block: (steps, kind, table bytes) per group
    # (``table``: the representative one, ``tableset.representative_table``)
    joined: bool = False  # ``LYJ``/``GRJ``: ``bodies`` is one chunk holding every step
    table_nbytes: int = 0  # the table's bytes in the file (1.3: deflated where smaller)
    stack: tuple | None = None  # a stacked ``GRC`` member: (its body's index in the group,
    # its first symbol there, the body's symbols, their row length; a ``STREAMS`` body's:
    # its segments, (entries, row length, lag) each); ``bodies``: that body
    xref: "LayerBlock | None" = None  # an ``LYX`` block: the block of the layer its chunks
    # are coded given (its ``index``), read and verified with it

    @property
    def side_bytes(self) -> int:
        return self.nbytes - self.payload_bytes


@dataclass
class Co3File:
    """A verified ``.co3`` file, opened for layer-by-layer reading."""

    f: BinaryIO
    size: int
    header: dict
    offsets: list[int]
    version: tuple[int, int] = (MAJOR, 0)
    _end: int = field(default=0, repr=False)
    _stops: dict = field(default_factory=dict, repr=False)  # block start -> its end
    _refs: dict = field(default_factory=dict, repr=False)  # block start -> its layers
    _groups: dict = field(default_factory=dict, repr=False)  # parsed groups not yet all read

    @property
    def layer_names(self) -> list[str]:
        return [lay["name"] for lay in self.header["layers"]]

    @property
    def header_bytes(self) -> int:
        return self.offsets[0] if self.offsets else self._end

    @property
    def trailer_bytes(self) -> int:
        return self.size - self._end

    def _block(self, start: int) -> bytes:
        stop = self._stops[start]
        self.f.seek(start)
        buf = self.f.read(stop - start)
        if len(buf) != stop - start:
            raise CorruptDataError("file is truncated")
        return buf

    def read_layer(self, i: int) -> LayerBlock:
        start = self.offsets[i]
        if i in self._groups.get(start, ()):  # a group read before, this member not yet
            return self._take(start, i)
        buf = self._block(start)
        if buf[:4] == SAME_TAG:
            return self._read_same(i, buf)
        if buf[:4] == XREF_TAG:
            return self._read_xref(i, buf)
        if buf[:4] == COMPACT_GROUP_TAG and self.version[1] >= HEADER_MINOR \
                and self._joined_ok(True):
            self._groups[start] = self._read_compact_group(start, buf)
            return self._take(start, i)
        if buf[:4] == GROUP_TAG and self.version[1] >= 1 or self._joined_ok(buf[:4] == JOINED_GROUP_TAG):
            self._groups[start] = self._read_group(start, buf, buf[:4] == JOINED_GROUP_TAG)
            return self._take(start, i)
        return self._read_single(i, buf)

    def _joined_ok(self, joined: bool) -> bool:
        """Whether a joined block may be read here (it may not in a file of context across
        steps or of float words: their decoders go step by step)."""
        if joined and self.version[1] >= COMPACT_MINOR and (
                step_context(self.header) or self.header["format"].get("kind") == "lossless"):
            raise CorruptDataError("a block of joined steps in a file whose coder codes step "
                                   "by step")
        return joined and self.version[1] >= COMPACT_MINOR

    def _take(self, start: int, i: int) -> LayerBlock:
        members = self._groups[start]
        block = members.pop(i)
        if not members:
            del self._groups[start]
        return block

    def _read_single(self, i: int, buf: bytes) -> LayerBlock:
        lay = self.header["layers"][i]
        mv = memoryview(buf)
        if len(buf) < _LAYER_HEAD.size + 8:
            raise CorruptDataError(f"layer {i}: block too short")
        if _U32.unpack_from(buf, len(buf) - 4)[0] != zlib.crc32(mv[:-4]):
            raise CorruptDataError(f"layer {i} ({lay['name']}): checksum mismatch")
        end = len(buf) - 4
        tag, idx, mlen = _LAYER_HEAD.unpack_from(buf, 0)
        joined = self._joined_ok(tag == JOINED_TAG)
        if tag not in (LAYER_TAG, STEPS_TAG) and not joined or idx != i \
                or len(self._refs[self.offsets[i]]) != 1:
            raise CorruptDataError(f"layer {i}: bad block tag or index")
        meta, table, pos, tbytes = _meta_table(buf, mv, mlen, end, f"layer {i}",
                                               minor=self.version[1])
        groups = None
        if tag == STEPS_TAG:
            groups = parse_tableset(table, len(self.header["steps"]), f"layer {i}")
            if step_context(self.header) and (len(groups) != 1 or groups[0][1] != KIND_RAW):
                # the writer stores such a layer whole or codes it in context, never in groups
                raise CorruptDataError(f"layer {i}: step groups in a file whose coder codes "
                                       "each step given the previous one")
            table = representative_table(groups, self.header)
        scales, bodies, payload, pos = _read_chunks(buf, pos, end, len(self.header["steps"]),
                                                    f"layer {i}", joined, lay["numel"])
        if pos != end:
            raise CorruptDataError(f"layer {i}: {end - pos} unexpected bytes after its chunks")
        _check_scales(scales, f"layer {i} ({lay['name']})")
        return LayerBlock(i, lay["name"], meta, table, scales, bodies, len(buf), payload,
                          step_groups=groups, joined=joined, table_nbytes=tbytes)

    def _read_same(self, i: int, buf: bytes) -> LayerBlock:
        """An ``LYE`` block: layer ``i`` equals an earlier layer coded in a block of its own
        (not a group member, not itself an ``LYE`` block) of the same shape."""
        lays = self.header["layers"]
        if len(buf) != _SAME.size + 4 or _U32.unpack_from(buf, _SAME.size)[0] != zlib.crc32(buf[:_SAME.size]):
            raise CorruptDataError(f"layer {i} ({lays[i]['name']}): bad or damaged reference block")
        _, idx, source = _SAME.unpack_from(buf, 0)
        if idx != i or not 0 <= source < i or len(self._refs[self.offsets[source]]) != 1:
            raise CorruptDataError(f"layer {i}: refers to layer {source}, which is not an "
                                   "earlier layer coded alone")
        if lays[source]["shape"] != lays[i]["shape"]:
            raise CorruptDataError(f"layer {i} ({lays[i]['name']}): refers to layer {source} "
                                   f"of another shape")
        sbuf = self._block(self.offsets[source])
        if sbuf[:4] == SAME_TAG:
            raise CorruptDataError(f"layer {i}: refers to layer {source}, itself a reference")
        src = self._read_xref(source, sbuf) if sbuf[:4] == XREF_TAG else \
            self._read_single(source, sbuf)
        return LayerBlock(i, lays[i]["name"], src.meta, src.table, src.scales, src.bodies,
                          len(buf), 0, same_as=source, step_groups=src.step_groups,
                          joined=src.joined, xref=src.xref)

    def _read_xref(self, i: int, buf: bytes, chain: int = 1) -> LayerBlock:
        """An ``LYX`` block (``co3cli.container.xref``), its source's block (and so on up the
        chain: ``chain`` such blocks so far) read and verified with it."""
        lay = self.header["layers"][i]
        what = f"layer {i}"
        if len(buf) < XREF_HEAD.size + 8 or \
                _U32.unpack_from(buf, len(buf) - 4)[0] != zlib.crc32(memoryview(buf)[:-4]):
            raise CorruptDataError(f"{what} ({lay['name']}): checksum mismatch or block too short")
        end = len(buf) - 4
        _, idx, source, mlen = XREF_HEAD.unpack_from(buf, 0)
        if idx != i or len(self._refs[self.offsets[i]]) != 1:
            raise CorruptDataError(f"{what}: bad block tag or index")
        check_source(self.header, self._refs, self.offsets, i, source, chain)
        meta, table, pos, tbytes = _meta_table(buf, memoryview(buf), mlen, end, what,
                                               minor=self.version[1], start=XREF_HEAD.size)
        scales, bodies, payload, pos = _read_chunks(buf, pos, end, len(self.header["steps"]),
                                                    what, False, lay["numel"])
        if pos != end:
            raise CorruptDataError(f"{what}: {end - pos} unexpected bytes after its chunks")
        _check_scales(scales, f"{what} ({lay['name']})")
        sbuf = self._block(self.offsets[source])
        if sbuf[:4] == SAME_TAG:
            raise CorruptDataError(f"{what}: coded given layer {source}, a reference to an "
                                   "equal layer (name that layer's source)")
        src = self._read_xref(source, sbuf, chain + 1) if sbuf[:4] == XREF_TAG else \
            self._read_single(source, sbuf)
        return LayerBlock(i, lay["name"], meta, table, scales, bodies, len(buf), payload,
                          table_nbytes=tbytes, xref=src)

    def _read_group(self, start: int, buf: bytes, joined: bool = False) -> dict[int, LayerBlock]:
        refs = self._refs[start]
        what = f"group of layer {refs[0]}"
        mv = memoryview(buf)
        if len(buf) < _LAYER_HEAD.size + 8:
            raise CorruptDataError(f"{what}: block too short")
        if _U32.unpack_from(buf, len(buf) - 4)[0] != zlib.crc32(mv[:-4]):
            raise CorruptDataError(f"{what}: checksum mismatch")
        end = len(buf) - 4
        _, n, mlen = _LAYER_HEAD.unpack_from(buf, 0)
        if n != len(refs):
            raise CorruptDataError(f"{what}: {n} members declared, the layer index points "
                                   f"{len(refs)} layers at it")
        meta, table, pos, tbytes = _meta_table(buf, mv, mlen, end, what, zipped=True,
                                               minor=self.version[1])
        per_layer = meta.pop("layers", {})
        if not isinstance(per_layer, dict) or not all(isinstance(v, dict) for v in per_layer.values()):
            raise CorruptDataError(f"{what}: per-layer metadata is not an object of objects")
        nsteps = len(self.header["steps"])
        cache: dict = {}
        out, prev, sizes = {}, -1, []
        for i in refs:
            at = pos
            gap, pos = read_uvarint(buf, pos, end, f"{what} member index")
            if prev + 1 + gap != i:
                raise CorruptDataError(f"{what}: member {prev + 1 + gap} where the layer index "
                                       f"has layer {i}")
            scales, bodies, payload, pos = _read_chunks(buf, pos, end, nsteps, f"layer {i}",
                                                        joined, self.header["layers"][i]["numel"])
            name = self.header["layers"][i]["name"]
            out[i] = LayerBlock(i, name, {**meta, **per_layer.get(str(i), {})}, table, scales,
                                bodies, 0, payload, refs[0], cache, joined=joined,
                                table_nbytes=tbytes)
            sizes.append(pos - at)
            prev = i
        if pos != end:
            raise CorruptDataError(f"{what}: {end - pos} unexpected bytes after its members")
        scales = np.concatenate([b.scales for b in out.values()])
        if not np.all(np.isfinite(scales) & (scales > 0)):  # all at once; then say which
            for i, b in out.items():
                _check_scales(b.scales, f"layer {i} ({b.name})")
        shared = len(buf) - sum(sizes)
        for k, i in enumerate(refs):
            out[i].nbytes = sizes[k] + shared // n + (shared % n if k == 0 else 0)
        return out

    def _read_compact_group(self, start: int, buf: bytes) -> dict[int, LayerBlock]:
        """A ``GRC`` block (``co3cli.container.gcompact``): its members' blocks, each joined
        (a stacked member's ``stack``: its body's index, first symbol, symbols, row length)."""
        refs, lays = self._refs[start], self.header["layers"]
        what = f"group of layer {refs[0]}"
        if len(buf) < 12 or _U32.unpack_from(buf, len(buf) - 4)[0] != zlib.crc32(buf[:-4]):
            raise CorruptDataError(f"{what}: checksum mismatch or block too short")
        nsteps = len(self.header["steps"])
        for i in refs:
            if not joinable(nsteps, lays[i]["numel"]):
                raise CorruptDataError(f"{what}: joined steps ({nsteps} x {lays[i]['numel']} "
                                       f"entries) beyond what a joined block holds")
        cols = [row_length(lays[i]["shape"], lays[i]["numel"]) for i in refs]
        meta, table, tbytes, layout, scales, bodies, groups, sizes = parse_group(
            buf, len(buf) - 4, cols, nsteps, what)
        if layout in STREAMS and self.version[1] < TEXT_HEADER_MINOR:
            raise CorruptDataError(f"{what}: group layout {layout} in a file of version "
                                   f"1.{self.version[1]} (needs 1.{TEXT_HEADER_MINOR})")
        per_layer = meta.pop("layers", {})
        if not isinstance(per_layer, dict) or not all(isinstance(v, dict) for v in per_layer.values()):
            raise CorruptDataError(f"{what}: per-layer metadata is not an object of objects")
        entries = [nsteps * lays[i]["numel"] for i in refs]
        segs = stream_segments(layout, groups[0], cols, [lays[i]["numel"] for i in refs],
                               nsteps) if layout in STREAMS else None
        pay = payload_shares(bodies, groups, entries, framed=False)
        own = payload_shares(bodies, groups, entries)
        shared = len(buf) - sum(own)
        cache: dict = {}
        out = {}
        for g, members in enumerate(groups):
            first, total = 0, sum(entries[k] for k in members)
            for k in members:
                i = refs[k]
                _check_scales(scales[k], f"layer {i} ({lays[i]['name']})")
                out[i] = LayerBlock(
                    i, lays[i]["name"], {**meta, **per_layer.get(str(i), {})}, table, scales[k],
                    [bodies[g]], own[k] + shared // len(refs) + (shared % len(refs) if k == 0 else 0),
                    pay[k], refs[0], cache, joined=True, table_nbytes=tbytes,
                    stack=(g, first, total, cols[k] if segs is None else tuple(segs))
                    if layout != PER_MEMBER else None)
                first += entries[k]
        return out

    def reference_users(self) -> dict[int, int]:
        """For each layer an ``LYX`` block names as its source, the last such layer (from the
        blocks' heads: a hint for caching, each block is verified when it is read)."""
        lays, users = self.header["layers"], {}
        for i, start in enumerate(self.offsets):
            if len(self._refs[start]) != 1 or self._stops[start] - start < XREF_HEAD.size:
                continue
            self.f.seek(start)
            head = self.f.read(XREF_HEAD.size)
            if len(head) == XREF_HEAD.size and head[:4] == XREF_TAG:
                source = XREF_HEAD.unpack(head)[2]
                if source < i and lays[source]["shape"] == lays[i]["shape"]:
                    users[source] = i
        return users

    def layers(self) -> Iterator[LayerBlock]:
        for i in range(len(self.offsets)):
            yield self.read_layer(i)
