"""The client side: a Flower Mod that compresses a ClientApp's train reply.

::

    train message (global arrays w) --> the ClientApp's train function --> reply
        reply arrays: the local model w_local (sends="weights"; u = w - w_local)
                      or the update u itself   (sends="update": a FedSGD step lr * g, ...)
        per floating array:  v = u + gamma * e;  payload = compress(v);  e = v - v_hat
    --> reply with the payloads (``co3cli.flower.wire``) --> the server's CompressedStrategy

The error-feedback memories ``e``, every array's compressor state (tables, scales, refit
counters) and the client's rng live in ``context.state``: Flower recreates ClientApps (and, in
its simulation engine, runs a node on whichever actor is free), the context's state is what it
keeps for each node across rounds. Messages other than train replies pass through unchanged.

Use::

    from flwr.clientapp import ClientApp
    from co3cli.flower import CompressMod

    app = ClientApp(mods=[CompressMod("co3", {"format": "fp4-e2m1"}, gamma=0.9)])
"""

from __future__ import annotations

from typing import Any

import numpy as np

from co3cli.checks import check_int
from co3cli.compressors import COMPRESSORS, Compressor
from co3cli.errors import InputError
from co3cli.flower.wire import META, ClientState, encode_update

SENDS = ("weights", "update")


def build_compressor(compressor: str | dict | Compressor, params: dict[str, Any] | None = None,
                     who: str = "") -> Compressor:
    """A compressor from an id (+ ``params``), a config dict ``{"id": ..., **params}``, or one
    already built; unknown ids and parameters raise InputError."""
    if isinstance(compressor, Compressor):
        if params:
            raise InputError(f"{who}params are given with a compressor that is already built")
        return compressor
    if isinstance(compressor, dict):
        if params:
            raise InputError(f"{who}params are given with a compressor config")
        return COMPRESSORS.from_config(dict(compressor))
    return COMPRESSORS.build(compressor, **(params or {}))


def settings_from_run_config(run_config, prefix: str = "co3cli-") -> dict[str, Any]:
    """CompressMod's arguments from a Flower run config (``pyproject.toml``'s
    ``[tool.flwr.app.config]``, ``flwr run --run-config``): ``<prefix>compressor`` (an id),
    ``<prefix>params`` (JSON object), ``<prefix>gamma``, ``<prefix>seed``, ``<prefix>sends``;
    missing keys take CompressMod's defaults, unknown ``<prefix>`` keys are refused."""
    import json

    known = ("compressor", "params", "gamma", "seed", "sends")
    ours = {k[len(prefix):]: v for k, v in run_config.items() if k.startswith(prefix)}
    unknown = sorted(set(ours) - set(known))
    if unknown:
        raise InputError(f"run config: unknown key(s) {[prefix + k for k in unknown]}; allowed: "
                         f"{', '.join(prefix + k for k in known)}")
    if "params" in ours:
        try:
            ours["params"] = json.loads(ours["params"]) if ours["params"] else {}
        except (TypeError, ValueError):
            raise InputError(f"run config: {prefix}params={ours['params']!r} is not a JSON "
                             "object of compressor parameters") from None
        if not isinstance(ours["params"], dict):
            raise InputError(f"run config: {prefix}params must be a JSON object")
    return ours


def _stream(context) -> int:
    """The node's partition-id (node_config), else its node id: the key of its rng."""
    pid = context.node_config.get("partition-id")
    if pid is None:
        return int(context.node_id)
    return check_int("partition-id", pid, lo=0, who="co3cli.flower: node_config ")


def _single_array_record(content, who: str):
    recs = list(content.array_records.items())
    if len(recs) != 1:
        raise InputError(f"co3cli.flower: {who} holds {len(recs)} ArrayRecords; expected one "
                         "(the model or its update)")
    return recs[0]


class CompressMod:
    """A client Mod compressing train replies with any co3cli compressor (module docstring).

    ``compressor``: an id of :data:`co3cli.compressors.COMPRESSORS` (with ``params``), a config
    dict, or a built compressor; ``gamma``: error-feedback decay in [0, 1]; ``seed``: of the
    clients' generators (stochastic compressors); ``sends``: what the train function's reply
    arrays are, ``"weights"`` (the local model) or ``"update"`` (``u = w - w_local`` itself).
    """

    def __init__(self, compressor: str | dict | Compressor = "co3",
                 params: dict[str, Any] | None = None, *, gamma: float = 0.0, seed: int = 0,
                 sends: str = "weights"):
        from co3cli.checks import check_real

        self.comp = build_compressor(compressor, params, "CompressMod: ")
        self.gamma = check_real("gamma", gamma, 0.0, 1.0, who="CompressMod: ")
        self.seed = check_int("seed", seed, lo=0, who="CompressMod: ")
        if sends not in SENDS:
            raise InputError(f"CompressMod: sends={sends!r} is not one of {', '.join(SENDS)}")
        self.sends = sends

    @classmethod
    def from_run_config(cls, prefix: str = "co3cli-"):
        """A Mod configured by each run's config (:func:`settings_from_run_config`): the same
        ClientApp serves runs with different compressors."""
        cache: dict[str, CompressMod] = {}

        def mod(msg, context, call_next):
            import json

            settings = settings_from_run_config(context.run_config, prefix)
            key = json.dumps(settings, sort_keys=True)
            if key not in cache:
                cache.clear()
                cache[key] = cls(**settings)
            return cache[key](msg, context, call_next)

        return mod

    def __call__(self, msg, context, call_next):
        from flwr.app import ConfigRecord, MessageType

        if msg.metadata.message_type != MessageType.TRAIN:
            return call_next(msg, context)
        w = None
        if self.sends == "weights":  # read before the train function may change it in place
            _, rec = _single_array_record(msg.content, "the train message")
            w = {k: a.numpy() for k, a in rec.items()}
        reply = call_next(msg, context)
        if reply.has_error():
            return reply
        key, rec = _single_array_record(reply.content, "the train reply")
        arrays = {k: a.numpy() for k, a in rec.items()}
        if w is not None:
            arrays = self._delta(w, arrays)
        stream = _stream(context)
        st = ClientState.load(context.state, self.comp, self.gamma, self.seed, stream)
        payloads, meta = encode_update(arrays, st)
        st.save(context.state)
        meta["partition"] = int(context.node_config.get("partition-id", -1))
        meta["sends"] = self.sends
        content = reply.content
        content[key] = payloads
        content[META] = ConfigRecord(meta)
        reply.content = content
        return reply

    @staticmethod
    def _delta(w: dict[str, np.ndarray], local: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """u = w - w_local (float32) for floating arrays; the local value for the others."""
        from co3cli.flower.wire import is_coded

        if set(w) != set(local):
            raise InputError("co3cli.flower: the train reply's arrays "
                             f"{sorted(set(local) ^ set(w))[:3]} do not match the global model's")
        out = {}
        for k, x in local.items():
            if is_coded(x.dtype):
                if w[k].shape != x.shape:
                    raise InputError(f"co3cli.flower: array {k!r} has shape {x.shape} in the "
                                     f"reply, {w[k].shape} in the global model")
                out[k] = np.subtract(w[k], x, dtype=np.float32)
            else:
                out[k] = x
        return out
