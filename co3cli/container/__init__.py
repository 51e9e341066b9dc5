"""The ``.co3`` container: compressed gradient dumps, self-describing and checked.

All integers are little-endian. Every byte is covered by a CRC-32, so any single flipped
byte is detected before anything is decoded::

    file      := preamble header block* trailer
    preamble  := magic "CO3\\x89GRD\\n" (8) | major u16 | minor u16 | header_len u32
    header    := header_len bytes of zlib-compressed UTF-8 JSON | crc32(preamble + header) u32
                 (1.3: deflated with a preset dictionary the stream names: ``hdict``;
                 1.4: the compact header, ``co3cli.container.hcompact``: the JSON less its
                 layer, step and loss lists, which follow it in binary; 1.5: a kind byte, then
                 the compact header's fields as text coded by a context-mixing model,
                 ``co3cli.container.hcm``, or for a long header kind 0, 1.4's)
    block     := layer | group | steps | same | xref | joined | joined-group | compact-group
                 (group: 1.1 and later; joined, joined-group: 1.3 and later; compact-group
                 ``GRC``: 1.4 and later, ``co3cli.container.gcompact``)
    layer     := "LYR\\0" | index u32 | meta_len u32 | meta JSON | table_len u32 | table
                 | chunk * steps | crc32(the whole layer block before it) u32
    group     := "GRP\\0" | n u32 | meta_len u32 | meta (zlib-compressed JSON) | table_len u32 | table
                 | member * n | crc32(the whole group block before it) u32
    joined    := "LYJ\\0" | a layer block's fields, its chunks one ``whole``
    joined-group := "GRJ\\0" | a group block's fields, each member ``gap uvarint | whole``
    whole     := scale f32 * steps | body_len uvarint | body (every step's symbols, in order)
    steps     := "LYS\\0" | a layer block's fields, its table a table set (step groups, each
                 with its own table or stored symbols: ``co3cli.container.tableset``)
    same      := "LYE\\0" | index u32 | source u32 | crc32(the 12 bytes before it) u32
    xref      := "LYX\\0" | index u32 | source u32 | meta_len u32 | meta JSON | table_len u32
                 | table | chunk * steps | crc32(the whole block before it) u32
                 (``co3cli.container.xref``)
    member    := gap uvarint | chunk * steps       (its layer index: the previous member's
                                                    + 1 + gap; the first member's: gap)
    chunk     := scale f32 | body_len uvarint (LEB128) | body (coder payload, body_len bytes)
    trailer   := "END\\0" | n_layers u32 | layer offsets u64 * n_layers | file_crc u32 | "\\x89CO3END"
                 (file_crc = crc32 of every byte before it, trailer head and offsets included)
    trailer 1.3 := "END\\0" | n_layers u32 | zigzag uvarint * n_layers (each layer's offset less
                 the previous layer's; the first's less 0) | trailer_len u32 (the bytes from
                 "END\\0" to here) | file_crc u32 | "\\x89CO3END"
    trailer 1.5 := "E" | nblocks uvarint | block size uvarint * nblocks | each layer's block
                 index in ceil(log2 nblocks) bits | trailer_len (a varint written backwards) |
                 file_crc u32 | "\\x89CO3END"      (``co3cli.container.framing.trailer15_bytes``)
    table_len 1.3: bit 31 set: the table is raw-deflated, table_len & 0x7FFFFFFF bytes

The JSON header records the format (grid config), tie rule, scale rule, coder config,
model, layer names/shapes, steps, losses, the source dump's attributes and the co3cli
version. A layer's ``meta`` holds its fitted model parameters (report metadata only: the
decoder uses the integer ``table``, never floats). Each chunk is one step of one layer and
decodes on its own given its layer's table.

Groups (1.1): small layers share one block, one table and one metadata object (the pooled
fit; per-layer metadata, e.g. scale-fallback provenance, under ``"layers"`` keyed by the
layer index, only where a layer has some). Which layers are grouped is the writer's rule
(:mod:`co3cli.container.plan`), recorded in the header as ``small_layers``; the reader needs
only the layout. Offsets: layer ``i``'s is that of the block holding it (a group's members
share it); blocks come in the order of their first layer, the first right after the header,
and each block ends where the next begins (the last at the trailer). A group's members are
exactly the layers whose offset points at it, in increasing order. Files of 1.0-1.2
were written without and with group blocks (1.0: none); every file is now written as 1.5.

Context across steps (1.2): with a coder whose config has ``key_every`` K (``ctx-steps``),
chunk ``t`` of a layer is coded given chunk ``t - 1`` (its symbols and the coder's state), except
at key steps ``t % K == 0`` (K = 0: chunk 0 only), which decode alone: step ``s`` decodes from
the chunks of its key step ``K * (s // K)`` through ``s``. The layout is unchanged; only such
files were written as 1.2 (now 1.4; :func:`step_context` says which), and a reader refuses a header with
such a coder in a file that says less than 1.2.

Step groups (``LYS``): a layer whose steps drifted codes each run of consecutive steps with
its own table, and a layer of a few entries may be stored without a table; the block tag is
the feature flag (any 1.x file may hold one), and files without one keep their bytes.

Equal layers (``LYE``): a layer holding exactly the values of an earlier layer of the same
shape (tied weights recorded twice; a dump's ``raw`` and ``corrected`` streams when the error
feedback is off) is a 16-byte reference to it: ``source`` is an earlier layer coded in a block of
its own (``LYR``, ``LYS`` or ``LYJ``, never a group member or another reference), and the reader hands
back that block's table, scales and chunks under the new layer's index (its payload: 0 bytes).
Like ``LYS``, the tag is the feature flag: files without an equal layer keep their bytes.

Layers coded given another (``LYX``, ``co3cli.container.xref``): a layer that agrees entry by
entry with an earlier layer of the same shape (the streams of an FL ``transmitted.h5``) has its
chunks coded by ``ctx`` model version 6 given the symbols of the same step of ``source`` (an
earlier layer coded in a block of its own, ``LYR``/``LYS``/``LYJ``/``LYX``; chains at most
``MAX_CHAIN`` long); decoding a step decodes that step of the source first.  The tag is the
feature flag, as for ``LYS`` and ``LYE``.

Small files (1.3 and later): the fixed bytes of a file of 10^4 entries were a
tenth of it (a 1.4 KB header, a table and a final coder state per layer and step, u64
offsets). The header is deflated with a preset dictionary of the keys, configs and torch
module reprs headers repeat (``co3cli.container.hdict``: 1,434 -> 552 bytes on
digits-resnet-tiny; every key and the whole provenance kept); a table is stored deflated where
smaller; offsets are varints. A small layer (``co3cli.container.plan.joinable``: at most
``JOIN_ENTRIES`` entries, steps x numel) coded with one table may have its steps *joined*: one
chunk holding every step (the steps as further rows of its 2-D view, so an adaptive coder's
statistics carry and one final state is paid), written where that is smaller. **Per-step
random access is traded there, and only there**: a step of a joined layer decodes with the
others of its layer (at most ``JOIN_ENTRIES`` symbols). Files whose coder codes each step
given the previous one (``ctx-steps``) and lossless files are never joined (a reader refuses
such blocks there). With the ``ctx`` coder every small layer shares one group whatever its
kind (``plan_groups(pool_all=True)``, recorded in ``small_layers``).

Small files (1.4): the header compact (layer names front-coded, shapes
as varints, ``numel`` and the source's copy of the layer names derived, steps as a progression,
losses as float32 where exact: ``co3cli.container.hcompact``) and every joined group a ``GRC``
block (varint framing, the scales packed bit for bit as exponent differences and mantissas, the
members of one row length coded as one *stack* where smaller: ``co3cli.container.gcompact``).
On the check's small held-out dumps (``benchmarks/results/rate_check.md``): 3-5 % of a
5,000-50,000-entry file; every key and value of the header kept.

Small files (1.5, every file written now): the header's text coded by a context-mixing model
primed with an example header and a guess of the torch module repr from the layer names and
shapes (``co3cli.container.hcm``, ``hprime``: 316-509 -> 174-307 bytes on the check's small
dumps, ``benchmarks/results/small_files.md``, every key and value kept), the trailer as block sizes and each layer's block index
(44 -> 16 bytes with one block), and a ``GRC`` group of a ``ctx`` coder of model version 5
coded as *one stream* of segments (layouts 2 and 3: one final state for the group, the
adaptive statistics carried from member to member, in layout 3 each member's previous step
in the contexts; files written since ``ctx`` model version 7 exists code it with that
version, version 5 with mixed probabilities, whose table a reader before it refuses in one
line) with its flat or octave prior in 6 or ~60 bytes instead of ~30 or ~110
(``co3cli.container.gcompact``). A 1.5 group layout in an older file is refused. Later 1.5
files may hold a ``GRC`` scales section in its short form (a flag in its first byte): each
scale's mantissa cut to the bits it keeps, the scale a writer stores for a group member being
a float32 of few mantissa bits with the same symbols and no larger squared error
(``co3cli.scales.short_scales``; 198 -> 112 bytes of scales on a 15,366-entry dump).

A reader accepts major version 1, any minor version (1.0: no group blocks); it verifies the
file CRC and structure before decoding anything, and each decoder must consume its chunk
exactly.

Limits (a contract: a file beyond any of them is refused with CorruptDataError, one line
naming the limit, before anything big is allocated; memory stays bounded on hostile files):

=====================  ==================================================================
``MAX_HEADER``         compressed header: at most 16 MiB
``MAX_HEADER_JSON``    inflated header JSON: at most 16 MiB (inflated incrementally, so a
                       zlib bomb is stopped at the limit)
``hcm.MAX_TEXT``       a 1.5 header's text (layer lines, JSON, binary): at most 1 MiB, the
                       module guess primed after the layer lines at most 256 KiB
``MAX_META``           one block's metadata JSON: at most 1 MiB (a group's: inflated
                       incrementally, stopped at the limit)
``MAX_DEPTH``          JSON nesting (header and metadata): at most 64 levels
``MAX_TABLE``          one block's integer table: at most 16 MiB
``MAX_CHUNK``          one chunk's body: at most 1 GiB (and within its block)
``MAX_DIMS``           dimensions of a layer's shape: at most 32 (as HDF5)
``MAX_ENTRIES``        entries of one layer (steps x numel): at most 2**31
entries per byte       at most 2**20 entries per byte of a block (no coder comes near: a
                       lie about numel is refused before decoding)
steps x layers         at most the file size over the layers coded in chunks (every chunk
                       costs bytes); an equal-layer reference (``LYE``, 16 bytes) counts its
                       entries against the whole file instead: at most 2**20 per byte of it
joined blocks          at most ``JOIN_ENTRIES`` (2**16) entries a layer, 1 step or more
                       (writers before short scales joined 2 steps or more)
=====================  ==================================================================

Layer names must be distinct, non-empty relative HDF5 paths without NUL, of at most
``co3cli.dump.schema.MAX_NAME_PARTS`` (64) ``/``-separated parts (HDF5 walks a name of n
folders in ~n**2 steps), none a folder of another.

    from co3cli.container import Co3Writer, open_co3
"""

from co3cli.container.blocks import (END_MAGIC, MAGIC, MAJOR, MINOR, Co3File, Co3Writer,
                                     Joined, LayerBlock)
from co3cli.container.framing import table_field_bytes
from co3cli.container.gcompact import HEADER_MINOR
from co3cli.container.header import (COMPACT_MINOR, MAX_CHUNK, MAX_DEPTH, MAX_DIMS, MAX_ENTRIES,
                                     MAX_ENTRIES_PER_BYTE, MAX_HEADER, MAX_HEADER_JSON, MAX_META,
                                     MAX_TABLE, STEP_CONTEXT_MINOR, header_problem, parse_json,
                                     step_context)
from co3cli.container.reader import open_co3
from co3cli.container.plan import (join_config, joinable, plan_config, plan_groups,
                                   plan_units)

__all__ = ["END_MAGIC", "MAGIC", "MAJOR", "MINOR", "Co3File", "Co3Writer", "Joined", "LayerBlock",
           "COMPACT_MINOR", "HEADER_MINOR", "join_config", "joinable", "table_field_bytes",
           "open_co3", "MAX_CHUNK", "MAX_DEPTH", "MAX_DIMS", "MAX_ENTRIES", "MAX_ENTRIES_PER_BYTE",
           "MAX_HEADER", "MAX_HEADER_JSON", "MAX_META", "MAX_TABLE", "header_problem",
           "parse_json", "plan_config", "plan_groups", "plan_units", "STEP_CONTEXT_MINOR",
           "step_context"]
