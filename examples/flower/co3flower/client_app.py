"""The ClientApp: local SGD on this node's shard; CompressMod codes the reply."""

from __future__ import annotations

import numpy as np
import torch
from flwr.app import ArrayRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp

from co3cli.flower import CompressMod
from co3flower.task import load, local_sgd, shard

# the compressor, its parameters, gamma: from the run config (co3cli-* keys)
app = ClientApp(mods=[CompressMod.from_run_config()])


@app.train()
def train(msg: Message, context: Context) -> Message:
    cfg, node = context.run_config, context.node_config
    pid, parts = int(node["partition-id"]), int(node["num-partitions"])
    model, data, _ = load(str(cfg["task"]), int(cfg["seed"]))
    model.load_state_dict(msg.content["arrays"].to_torch_state_dict())
    rnd = int(msg.content["config"]["server-round"])
    torch.manual_seed(int(cfg["seed"]))
    idx = shard(len(data.y), pid, parts, int(cfg["seed"]))
    rng = np.random.default_rng([int(cfg["seed"]), pid, rnd])
    loss = local_sgd(model, data, idx, int(cfg["local-steps"]), int(cfg["batch-size"]),
                     float(cfg["lr"]), rng)
    metrics = MetricRecord({"train_loss": loss, "num-examples": int(idx.size)})
    return Message(RecordDict({"arrays": ArrayRecord(model.state_dict()), "metrics": metrics}),
                   reply_to=msg)
