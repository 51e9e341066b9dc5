"""Flower adapter: any co3cli compressor, with error feedback, inside a Flower federation.

::

    ServerApp: CompressedStrategy(FedAvg(...), "co3", {...})        the global model w (float32)
        | train message (w)                        ^ reply: payloads + "co3cli" record
        v                                          |
    ClientApp(mods=[CompressMod("co3", {...}, gamma=0.9)])
        train function -> w_local (or u)  -->  u = w - w_local;  v = u + gamma e;
        payload = compress(v); e = v - v_hat  (e, compressor states, rng: context.state)
    server: u_hat = decompress(payload) (per-node receiver state); the inner strategy
        aggregates w - u_hat as if the client had sent its weights

:class:`~co3cli.flower.client.CompressMod` (client Mod) and
:class:`~co3cli.flower.server.CompressedStrategy` (strategy wrapper) use the public compressor
API (:mod:`co3cli.compressors`: ``COMPRESSORS``, ``ErrorFeedback``, ``export_state``); the wire
format, the client state and byte counting are in :mod:`co3cli.flower.wire`. The same
compressor config on the same update tensors gives the same payload bytes as ``co3 simulate
fl`` (``tests/test_flower.py`` checks it in Flower's simulation engine); Flower's framing is
counted beside the payload. Needs ``flwr`` (``pip install 'co3cli[flower]'``: flwr[simulation]
>= 1.42, < 2: the Message API and the HTTP SuperLink). ``examples/flower/`` runs the same app in
simulation and deployed on several machines. The legacy ``client_fn``/``NumPyClient`` path
(``flwr.compat``, kept by Flower for backward compatibility) is not wrapped: its messages carry
other records.
"""

from co3cli.flower.client import CompressMod, build_compressor, settings_from_run_config
from co3cli.flower.server import ROUND_FIELDS, CompressedStrategy
from co3cli.flower.wire import PAYLOAD_STYPE, SCHEMA, message_bytes

__all__ = ["CompressMod", "CompressedStrategy", "PAYLOAD_STYPE", "ROUND_FIELDS", "SCHEMA",
           "build_compressor", "message_bytes", "settings_from_run_config"]
