"""What a compressed Flower reply carries, what the client keeps between rounds, and its bytes.

A compressed train reply (``RecordDict``) holds, beside the ClientApp's own ``MetricRecord``:

* one ``ArrayRecord`` (the ClientApp's key, e.g. ``"arrays"``): every floating array of the
  update as ``Array(dtype=<the tensor's dtype>, shape=<its shape>, stype=PAYLOAD_STYPE,
  data=<the compressor's payload>)``; non-floating arrays (counters such as BatchNorm's
  ``num_batches_tracked``) travel as the client's own values, unchanged (stype
  ``numpy.ndarray``);
* ``ConfigRecord`` ``"co3cli"``: ``schema`` (``SCHEMA``), ``compressor`` (its config, JSON,
  sorted keys: the server refuses a payload coded with another one), ``partition`` (the
  node's ``partition-id``, -1 without one), ``entries`` (coded entries), ``payload_bytes``
  (the coded arrays' payloads), ``verbatim_bytes`` (the non-floating arrays),
  ``entropy_bits`` (-1 when the compressor codes no symbols), ``scale_fallbacks``,
  ``t_compress`` (seconds), ``client_rounds`` (train replies this node has coded in this
  run, this one included: its state persisted), ``sends``.

The client's ``context.state`` (a ``RecordDict``, kept by Flower across rounds however often
it recreates the ClientApp) holds ``"co3cli.client"`` (``ConfigRecord``: the compressor
config, gamma, the rng state as JSON, rounds done), ``"co3cli.memory"`` (``ArrayRecord``:
the error-feedback memories, one per array name) and ``"co3cli.send"`` /
``"co3cli.send-arrays"`` (each array's compressor state, :meth:`Compressor.export_state`;
keys ``<array name>\\x1f<state key>``).

Bytes: ``message_bytes(msg)`` is what Flower's object store ships for a message: the sum of
the deflated objects of its tree (message, records, arrays, array chunks), each with its
header, identical chunks once. ``payload_bytes`` is the sum of the coded arrays' ``data``
(what ``co3 simulate fl`` charges), ``verbatim_bytes`` that of the others; the rest is
Flower's framing (object headers, message metadata, the records' JSON).
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from co3cli.compressors import Compressor, ErrorFeedback

SCHEMA = "co3cli.flower/1"
PAYLOAD_STYPE = "co3cli.payload/1"
META = "co3cli"
STATE_CLIENT, STATE_MEMORY = "co3cli.client", "co3cli.memory"
STATE_SEND, STATE_SEND_ARRAYS = "co3cli.send", "co3cli.send-arrays"
_SEP = "\x1f"


def is_coded(dtype: np.dtype) -> bool:
    """Arrays of this dtype go through the compressor (floating point), others verbatim."""
    return np.issubdtype(np.dtype(dtype), np.floating)


def config_json(comp: Compressor) -> str:
    return json.dumps(comp.config(), sort_keys=True)


def message_bytes(msg) -> int:
    """Bytes Flower ships for ``msg``: its deflated object tree (see the module docstring)."""
    from flwr.supercore.inflatable.inflatable_object import get_all_nested_objects

    return sum(len(obj.deflate()) for obj in get_all_nested_objects(msg).values())


def row_cols(shape: tuple[int, ...]) -> int:
    from co3cli.coding import row_length

    return row_length(tuple(shape), int(np.prod(shape, dtype=np.int64)))


# -- client state in context.state -----------------------------------------------------------------
class ClientState:
    """A client's compressor states, error feedback and rng, loaded from / saved to a RecordDict."""

    def __init__(self, comp: Compressor, gamma: float, seed: int, stream: int):
        self.comp, self.config = comp, config_json(comp)
        self.feedback = ErrorFeedback(gamma)
        # stochastic compressors draw from this client's own generator: seed x stream (the
        # node's partition-id, else its node id)
        self.rng = np.random.default_rng([seed, stream])
        self.send: dict[str, dict] = {}
        self.rounds = 0

    @classmethod
    def load(cls, store, comp: Compressor, gamma: float, seed: int, stream: int) -> ClientState:
        """The state kept in ``store`` (``context.state``), or a fresh one (first round, or the
        store was written for another compressor or gamma)."""
        st = cls(comp, gamma, seed, stream)
        if STATE_CLIENT not in store.config_records:
            return st
        head = store.config_records[STATE_CLIENT]
        if head["compressor"] != st.config or float(head["gamma"]) != st.feedback.gamma:
            return st
        st.rng.bit_generator.state = json.loads(head["rng"])
        st.rounds = int(head["rounds"])
        if STATE_MEMORY in store.array_records:
            mem = store.array_records[STATE_MEMORY]
            st.feedback.load_state_dict({"gamma": st.feedback.gamma,
                                         "memories": {k: a.numpy() for k, a in mem.items()}})
        docs: dict[str, dict[str, Any]] = {}
        scalars = store.config_records.get(STATE_SEND) or {}
        arrays = store.array_records.get(STATE_SEND_ARRAYS) or {}
        for key, value in [*scalars.items(), *((k, a.numpy()) for k, a in arrays.items())]:
            name, _, field = key.partition(_SEP)
            docs.setdefault(name, {})[field] = value
        st.send = {name: comp.import_state(doc) for name, doc in docs.items()}
        return st

    def save(self, store) -> None:
        """Write this state into ``store`` (replacing what it held)."""
        from flwr.app import Array, ArrayRecord, ConfigRecord

        store[STATE_CLIENT] = ConfigRecord({
            "schema": SCHEMA, "compressor": self.config, "gamma": self.feedback.gamma,
            "rng": json.dumps(self.rng.bit_generator.state), "rounds": self.rounds})
        mem = ArrayRecord()
        for k in self.feedback.keys():
            mem[str(k)] = Array(np.asarray(self.feedback.memory(k)))
        store[STATE_MEMORY] = mem
        scalars, arrays = ConfigRecord(), ArrayRecord()
        for name, state in self.send.items():
            for field, value in self.comp.export_state(state).items():
                if isinstance(value, np.ndarray):
                    arrays[name + _SEP + field] = Array(value)
                else:
                    scalars[name + _SEP + field] = value
        store[STATE_SEND], store[STATE_SEND_ARRAYS] = scalars, arrays


# -- encode / decode one update --------------------------------------------------------------------
_WARM: set[str] = set()  # compressor configs this process has run once


def warm_up(comp: Compressor) -> None:
    """Code and decode one throwaway tensor (fresh states, its own generator) the first time a
    process meets a compressor config, so that ``t_compress``/``t_decompress`` do not include
    one-time costs (numba cache loads, lazy imports): Flower starts a new process per ClientApp
    task in deployment. Nothing the run keeps is touched; the bytes are unchanged."""
    key = config_json(comp)
    if key in _WARM:
        return
    v = np.random.default_rng(0).standard_normal(4096).astype(np.float32)
    pkt = comp.compress(v, {"cols": 64}, np.random.default_rng(0))
    comp.decompress(pkt.payload, v.size, {"cols": 64})
    _WARM.add(key)


def encode_update(update: dict[str, np.ndarray], st: ClientState) -> tuple[Any, dict[str, Any]]:
    """The update's ``ArrayRecord`` of payloads (error feedback and compressor state in ``st``)
    and its figures for the ``"co3cli"`` record."""
    import time

    from flwr.app import Array, ArrayRecord

    warm_up(st.comp)
    rec = ArrayRecord()
    entries = nbytes = verbatim = fallbacks = 0
    ent, ent_ok, t = 0.0, True, 0.0
    for name, u in update.items():
        u = np.asarray(u)
        if not is_coded(u.dtype):
            rec[name] = Array(u)
            verbatim += len(rec[name].data)
            continue
        g = np.ascontiguousarray(u, dtype=np.float32).reshape(-1)
        state = st.send.setdefault(name, {"cols": row_cols(u.shape)})
        t0 = time.perf_counter()
        pkt = st.feedback.step(name, g, st.comp, state, st.rng)
        t += time.perf_counter() - t0
        rec[name] = Array(dtype=str(u.dtype), shape=tuple(int(s) for s in u.shape),
                          stype=PAYLOAD_STYPE, data=pkt.payload)
        entries += g.size
        nbytes += len(pkt.payload)
        fallbacks += pkt.scale_fallbacks
        if pkt.entropy_bits is None:
            ent_ok = False
        else:
            ent += pkt.entropy_bits
    st.rounds += 1
    return rec, {"schema": SCHEMA, "compressor": st.config, "client_rounds": st.rounds,
                 "entries": entries, "payload_bytes": nbytes, "verbatim_bytes": verbatim,
                 "entropy_bits": ent if ent_ok else -1.0, "scale_fallbacks": fallbacks,
                 "t_compress": t}


def decode_update(rec, comp: Compressor, states: dict[str, dict]) -> dict[str, np.ndarray]:
    """Payload arrays -> the decoded update (float32, in the arrays' shapes); verbatim arrays
    as they came. ``states``: the server's receiver state of this client, per array name."""
    from co3cli.errors import CorruptDataError

    out = {}
    for name, arr in rec.items():
        if arr.stype != PAYLOAD_STYPE:
            out[name] = arr.numpy()
            continue
        shape = tuple(arr.shape)
        numel = int(np.prod(shape, dtype=np.int64))
        state = states.setdefault(name, {"cols": row_cols(shape)})
        try:
            v_hat = comp.decompress(bytes(arr.data), numel, state)
        except CorruptDataError as e:
            raise CorruptDataError(f"array {name!r}: {e}") from None
        out[name] = v_hat.reshape(shape)
    return out
