"""The server side: a Flower strategy wrapper that decodes compressed train replies.

::

    configure_train(w)  -> the inner strategy's messages (w kept; downlink bytes counted)
    aggregate_train(replies):
        per reply: check the "co3cli" record (same compressor), count its bytes,
                   u_hat = decompress(payloads, this node's receiver state)
                   reply arrays := w - u_hat   (what the inner strategy would have received)
        -> the inner strategy's aggregate_train (FedAvg, FedProx, FedAdam, ... unchanged)
           + the round's uplink figures in its MetricRecord ("co3cli-..." keys)

The receiver states (tables a co3 payload sent once, per array) are kept per sending node
(``src_node_id``) for the whole run. ``history`` holds one dict per round (``ROUND_FIELDS``)
with, per client, its partition, payload bytes and Flower bytes; uplink bits per entry are
``8 * payload_bytes / (entries * participants)``, as in ``co3 simulate fl``'s ``metrics.csv``;
the non-floating arrays sent as they are (``verbatim_bytes``) and Flower's framing
(``flower_bytes - payload_bytes - verbatim_bytes``) are reported beside them, not in them.

Use::

    from flwr.serverapp.strategy import FedAvg
    from co3cli.flower import CompressedStrategy

    strategy = CompressedStrategy(FedAvg(), "co3", {"format": "fp4-e2m1"})
    result = strategy.start(grid=grid, initial_arrays=arrays, num_rounds=50)
"""

from __future__ import annotations

import json
import time
from typing import Any, Callable

import numpy as np

from co3cli.compressors import Compressor
from co3cli.errors import InputError
from co3cli.flower.client import build_compressor
from co3cli.flower.wire import (META, PAYLOAD_STYPE, SCHEMA, config_json, decode_update,
                                message_bytes, warm_up)

try:  # the base class, when flwr is installed (``co3cli[flower]``)
    from flwr.serverapp.strategy import Strategy as _Base
except ImportError:  # pragma: no cover - without flwr the class is still importable
    _Base = object

ROUND_FIELDS = ("round", "participants", "entries", "payload_bytes", "verbatim_bytes",
                "flower_bytes",
                "framing_bytes", "uplink_bits_per_entry", "flower_bits_per_entry",
                "entropy_bits_per_entry", "downlink_bytes", "scale_fallbacks", "t_compress",
                "t_decompress", "clients")


class CompressedStrategy(_Base):
    """Wraps a Flower ``Strategy``: decodes co3cli-compressed train replies before it
    aggregates them (module docstring). ``compressor``/``params``: as for ``CompressMod``
    (the same config on both sides; a reply coded otherwise is refused); ``on_decode``:
    called as ``on_decode(round, node_id, partition, update)`` with each decoded update."""

    def __init__(self, strategy, compressor: str | dict | Compressor = "co3",
                 params: dict[str, Any] | None = None, *,
                 on_decode: Callable[[int, int, int, dict[str, np.ndarray]], None] | None = None):
        if _Base is object:
            raise InputError("co3cli.flower needs flwr: pip install 'co3cli[flower]'")
        self.inner = strategy
        self.comp = build_compressor(compressor, params, "CompressedStrategy: ")
        self.config = config_json(self.comp)
        self.on_decode = on_decode
        self.recv_state: dict[int, dict[str, dict]] = {}  # node id -> array name -> state
        self.history: list[dict[str, Any]] = []
        self._global: dict[str, np.ndarray] | None = None
        self._downlink = 0

    # -- training: the part that changes -----------------------------------------------------------
    def configure_train(self, server_round, arrays, config, grid):
        self._global = {k: a.numpy() for k, a in arrays.items()}
        messages = list(self.inner.configure_train(server_round, arrays, config, grid))
        self._downlink = sum(message_bytes(m) for m in messages)
        return messages

    def aggregate_train(self, server_round, replies):
        replies = list(replies)
        row = {"round": server_round, "participants": 0, "entries": 0, "payload_bytes": 0,
               "verbatim_bytes": 0, "flower_bytes": 0, "entropy_bits": 0.0, "scale_fallbacks": 0,
               "t_compress": 0.0, "t_decompress": 0.0, "clients": []}
        ent_ok = True
        for msg in replies:
            if msg.has_error():
                continue
            meta = self._check(msg)
            nbytes = message_bytes(msg)
            warm_up(self.comp)
            t0 = time.perf_counter()
            self._decode(server_round, msg, meta)
            row["t_decompress"] += time.perf_counter() - t0
            row["participants"] += 1
            row["entries"] += int(meta["entries"])
            row["payload_bytes"] += int(meta["payload_bytes"])
            row["verbatim_bytes"] += int(meta["verbatim_bytes"])
            row["flower_bytes"] += nbytes
            row["scale_fallbacks"] += int(meta["scale_fallbacks"])
            row["t_compress"] += float(meta["t_compress"])
            if float(meta["entropy_bits"]) < 0:
                ent_ok = False
            else:
                row["entropy_bits"] += float(meta["entropy_bits"])
            row["clients"].append({"node": int(msg.metadata.src_node_id),
                                   "partition": int(meta["partition"]),
                                   "client_rounds": int(meta["client_rounds"]),
                                   "payload_bytes": int(meta["payload_bytes"]),
                                   "flower_bytes": nbytes})
        row = self._finish_row(row, ent_ok)
        arrays, metrics = self.inner.aggregate_train(server_round, replies)
        if metrics is not None and row["participants"]:
            for k in ("payload_bytes", "framing_bytes", "uplink_bits_per_entry",
                      "flower_bits_per_entry", "downlink_bytes"):
                metrics[f"co3cli-{k.replace('_', '-')}"] = row[k]
        return arrays, metrics

    def _finish_row(self, row: dict[str, Any], ent_ok: bool) -> dict[str, Any]:
        n = row["entries"]
        ent = row.pop("entropy_bits")
        row["framing_bytes"] = row["flower_bytes"] - row["payload_bytes"] - row["verbatim_bytes"]
        row["uplink_bits_per_entry"] = 8.0 * row["payload_bytes"] / n if n else float("nan")
        row["flower_bits_per_entry"] = 8.0 * row["flower_bytes"] / n if n else float("nan")
        row["entropy_bits_per_entry"] = ent / n if (n and ent_ok) else None
        row["downlink_bytes"] = self._downlink
        row = {k: row[k] for k in ROUND_FIELDS}
        self.history.append(row)
        return row

    def _check(self, msg) -> Any:
        node = msg.metadata.src_node_id
        if META not in msg.content.config_records:
            raise InputError(f"co3cli.flower: the train reply of node {node} is not compressed "
                             "(no 'co3cli' record): add CompressMod to its ClientApp's mods")
        meta = msg.content.config_records[META]
        if meta.get("schema") != SCHEMA:
            raise InputError(f"co3cli.flower: node {node} sent schema {meta.get('schema')!r}; "
                             f"this server reads {SCHEMA!r}")
        if meta["compressor"] != self.config:
            raise InputError(f"co3cli.flower: node {node} compresses with "
                             f"{json.loads(meta['compressor'])}, the server decodes "
                             f"{json.loads(self.config)}: configure both sides alike")
        return meta

    def _decode(self, server_round: int, msg, meta) -> None:
        """Replace the reply's payloads by the weights they stand for, ``w - u_hat``."""
        from flwr.app import Array, ArrayRecord

        content = msg.content
        (key, rec), = content.array_records.items()
        node = int(msg.metadata.src_node_id)
        u_hat = decode_update(rec, self.comp, self.recv_state.setdefault(node, {}))
        if self._global is None or set(u_hat) != set(self._global):
            raise InputError(f"co3cli.flower: node {node} sent arrays that are not the global "
                             "model's")
        if self.on_decode is not None:
            self.on_decode(server_round, node, int(meta["partition"]), u_hat)
        weights = ArrayRecord()
        for name, u in u_hat.items():
            w = self._global[name]
            if rec[name].stype == PAYLOAD_STYPE:
                u = (w.astype(np.float32) - u).astype(w.dtype)
            weights[name] = Array(np.ascontiguousarray(u))
        del content[META]
        content[key] = weights
        msg.content = content

    # -- everything else: the inner strategy's -----------------------------------------------------
    def configure_evaluate(self, server_round, arrays, config, grid):
        return self.inner.configure_evaluate(server_round, arrays, config, grid)

    def aggregate_evaluate(self, server_round, replies):
        return self.inner.aggregate_evaluate(server_round, replies)

    def summary(self) -> None:
        from logging import INFO

        from flwr.supercore import log

        log(INFO, "\t├── co3cli compressor: %s", self.config)
        self.inner.summary()
