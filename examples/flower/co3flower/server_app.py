"""The ServerApp: FedAvg wrapped in CompressedStrategy; test accuracy on the server."""

from __future__ import annotations

import json
from pathlib import Path

from flwr.app import ArrayRecord, ConfigRecord, Context, MetricRecord
from flwr.serverapp import Grid, ServerApp
from flwr.serverapp.strategy import FedAvg

from co3cli.flower import CompressedStrategy, settings_from_run_config
from co3flower.task import load

app = ServerApp()


@app.main()
def main(grid: Grid, context: Context) -> None:
    cfg = context.run_config
    model, _, test = load(str(cfg["task"]), int(cfg["seed"]))
    settings = settings_from_run_config(cfg)
    strategy = CompressedStrategy(
        FedAvg(fraction_train=float(cfg["fraction-train"]), fraction_evaluate=0.0),
        settings.get("compressor", "co3"), settings.get("params"))
    accuracy = {}

    def evaluate(rnd: int, arrays: ArrayRecord) -> MetricRecord:
        from co3cli.tasks import evaluate as eval_model

        model.load_state_dict(arrays.to_torch_state_dict())
        loss, acc = eval_model(model, test.x, test.y)
        accuracy[rnd] = acc
        return MetricRecord({"test_loss": loss, "test_accuracy": acc})

    strategy.start(grid=grid, initial_arrays=ArrayRecord(model.state_dict()),
                   num_rounds=int(cfg["num-server-rounds"]), evaluate_fn=evaluate,
                   train_config=ConfigRecord({}))
    if cfg.get("out"):
        out = Path(str(cfg["out"]))
        out.mkdir(parents=True, exist_ok=True)
        rows = [dict(row, test_accuracy=accuracy.get(row["round"])) for row in strategy.history]
        doc = {"schema": "co3cli.flower-history/1", "run_config": dict(cfg),
               "compressor": json.loads(strategy.config), "initial_accuracy": accuracy.get(0),
               "rounds": rows}
        (out / "history.json").write_text(json.dumps(doc, indent=2) + "\n")
