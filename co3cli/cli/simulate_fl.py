"""``co3 simulate fl`` (federated training through the codec) and ``co3 simulate plot``.

The config of a run: defaults < ``--config FILE`` < the options given on the command line <
``--set key=value`` (``co3cli.simulate.flconfig.resolve_config``); the run, sweep or torchrun
job: ``co3cli.simulate.flrun.run_job``.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import List, Optional

import typer

from co3cli.cli.common import (
    JsonOpt, QuietOpt, emit, emit_json, given, kind_choices, torch_one_thread,
)
from co3cli.cli.simulate_clock import LINKS, link_overrides, simulate_clock_cli
from co3cli.plot import require_matplotlib

simulate_app = typer.Typer(help="Simulate training through the codec: federated (fl, plot, "
                           "clock) and against stragglers (uep).\n\nExample: co3 simulate fl "
                           "-c co3 --format fp4-co3 --gamma 0.7 --lr 0.3 -o run/ && co3 "
                           "simulate plot run/ -o run.png",
                           no_args_is_help=True)

O = typer.Option
FL = SimpleNamespace(  # the options of `co3 simulate fl`, in the order --help lists them
    output=O(..., "--output", "-o", help="Run folder (config.json, metrics.csv, summary.json; "
             "with --sweep one folder per point plus sweep.csv)."),
    config=O(None, "--config", help="Config file (JSON, or TOML with Python >= 3.11): FLConfig "
             "fields, or a run's config.json; the options given here override it."),
    set_=O([], "--set", help="key=value over a config field (typed like it, e.g. clients=20, "
          "participation=none) or a compressor parameter; repeatable; overrides everything."),
    task=O("mnist5k-mlp", "--task", "-t", help=f"{kind_choices('task')}."),
    entry=O(None, "--entry", help="Your own task instead of --task: path/to/job.py:make_task "
            "or module:function, returning model (a factory), train (or clients: one dataset "
            "per client), test, and optionally loss and metric (see examples/fl_job.py)."),
    buffers=O("average", "--buffers", help="Model buffers (BatchNorm statistics): average "
              "(the server averages the clients' and sends them down) or local (each client "
              "keeps its own; the server evaluates their average)."),
    clients=O(10, "--clients"),
    rounds=O(200, "--rounds"),
    algorithm=O("fedsgd", "--algorithm", help="fedsgd (one gradient per round) or fedavg "
                "(E local steps; the upload is the delta)."),
    local_steps=O(1, "--local-steps", help="FedAvg: local SGD steps E."),
    batch_size=O(64, "--batch-size"),
    lr=O(0.1, "--lr", help="Server lr (FedSGD) or client lr (FedAvg)."),
    server_lr=O(1.0, "--server-lr", help="FedAvg: server step on the averaged delta."),
    momentum=O(0.0, "--momentum", help="Server momentum."),
    lr_schedule=O("constant", "--lr-schedule", help="constant, cosine, step."),
    partition=O("iid", "--partition", help="iid, dirichlet (--alpha), shards "
                "(--shards-per-client)."),
    alpha=O(0.3, "--alpha", help="Dirichlet concentration over labels."),
    shards_per_client=O(2, "--shards-per-client"),
    participation=O(None, "--participation", help="Clients per round (default: all)."),
    compressor=O("none", "--compressor", "-c", help=f"{kind_choices('compressor')}."),
    format=O(None, "--format", help="co3: grid (default fp8-e5m2)."),
    scale=O(None, "--scale", help=f"co3: scale rule {kind_choices('scale')}."),
    coder=O(None, "--coder", help=f"co3: {kind_choices('coder')}."),
    model=O(None, "--model", help="co3: symbol model (default gennorm-zi)."),
    refit_every=O(None, "--refit-every", help="co3: refit the model and scale every N rounds "
                  "(default 10)."),
    param=O([], "--param", "-p", help="Other compressor parameter name=value (e.g. levels=4, "
            "fraction=0.01); repeatable."),
    gamma=O(0.0, "--gamma", help="Error-feedback memory decay in [0, 1]."),
    eval_every=O(10, "--eval-every"),
    seed=O(0, "--seed"),
    dump_rounds=O(None, "--dump-rounds", help="Comma-separated rounds whose uploads of "
                  "--dump-client go to transmitted.h5 (streams raw, corrected, decoded)."),
    dump_client=O(0, "--dump-client"),
    sweep=O(None, "--sweep", help="name=v1,v2,... over a config field or compressor parameter "
            "(e.g. gamma=0,0.5,1)."),
    overwrite=O(False, "--overwrite", help="Replace a run in --output."),
    stragglers=O(None, "--stragglers", help="Code each client's backward products against "
                 "stragglers: uncoded, repetition, mds, eep, now-uep, ew-uep."),
    windows=O(None, "--windows", help="--stragglers: window probabilities (default "
              "0.45,0.35,0.20)."),
    classes=O(None, "--classes", help="--stragglers: blocks per class (default 1,2,6)."),
    straggler_workers=O(None, "--straggler-workers", help="--stragglers: workers n."),
    deadline=O(None, "--deadline", help="--stragglers: stop each product at this time "
               "(1/rate units)."),
    wait_for=O(None, "--wait-for", help="--stragglers: stop after this many results."),
    rate=O(1.0, "--rate", help="--stragglers: exponential latency rate."),
    engine=O("inprocess", "--engine", help="inprocess (default) or torchrun: rank 0 the server, "
             "ranks 1..N-1 the clients, real bytes over torch.distributed (gloo) between "
             "processes."),
    nproc=O(3, "--nproc", help="torchrun engine: processes on this machine."),
    timeout=O(300.0, "--timeout", help="torchrun engine: seconds a rank may send nothing "
              "(no heartbeat) before the job fails naming it (with --print-torchrun: gloo's "
              "timeout)."),
    print_torchrun=O(False, "--print-torchrun", help="Write the config to --output and print "
                     "the torchrun line for running the job on several machines, instead of "
                     "running it."),
    # the wall clock (co3cli.simulate.clock); link specs: co3cli.simulate.links
    uplink=O(None, "--uplink", help="Clock: client uplink, e.g. 10mbit, lognormal:10mbit:0.5, "
             "uniform:1mbit:20mbit, trace.csv (default: free)."),
    downlink=O(None, "--downlink", help="Clock: client downlink, a rate or 10x (times the "
               "uplink; default 1x)."),
    latency=O(None, "--latency", help="Clock: one-way latency per message, e.g. 20ms, "
              "uniform:10ms:50ms (default 0)."),
    compute_factor=O(None, "--compute-factor", help="Clock: per-client compute slowdown, e.g. "
                     "lognormal:1:0.5, uniform:1:4 (default 1)."),
    compute_time=O("measured", "--compute-time", help="Clock: client compute per local step, "
                   "measured or seconds (e.g. 20ms: deterministic)."),
    round_deadline=O(None, "--round-deadline", help="Drop clients arriving after this (e.g. "
                     "2s) from the average; needs --compute-time in seconds."),
    target=O(None, "--target", help="Test accuracy whose wall-clock time summary.json reports."),
    link_seed=O(None, "--link-seed", help="Seed of the link and device draws (default --seed)."),
)


@simulate_app.command("fl")
def simulate_fl_cli(
    ctx: typer.Context, output: str = FL.output, config: Optional[Path] = FL.config,
    set_: List[str] = FL.set_, task: str = FL.task, entry: Optional[str] = FL.entry,
    buffers: str = FL.buffers, clients: int = FL.clients,
    rounds: int = FL.rounds, algorithm: str = FL.algorithm, local_steps: int = FL.local_steps,
    batch_size: int = FL.batch_size, lr: float = FL.lr, server_lr: float = FL.server_lr,
    momentum: float = FL.momentum, lr_schedule: str = FL.lr_schedule, partition: str = FL.partition,
    alpha: float = FL.alpha, shards_per_client: int = FL.shards_per_client,
    participation: Optional[int] = FL.participation, compressor: str = FL.compressor,
    format: Optional[str] = FL.format, scale: Optional[str] = FL.scale,
    coder: Optional[str] = FL.coder, model: Optional[str] = FL.model,
    refit_every: Optional[int] = FL.refit_every, param: List[str] = FL.param,
    gamma: float = FL.gamma, eval_every: int = FL.eval_every, seed: int = FL.seed,
    dump_rounds: Optional[str] = FL.dump_rounds, dump_client: int = FL.dump_client,
    sweep: Optional[str] = FL.sweep, overwrite: bool = FL.overwrite,
    stragglers: Optional[str] = FL.stragglers, windows: Optional[str] = FL.windows,
    classes: Optional[str] = FL.classes, straggler_workers: Optional[int] = FL.straggler_workers,
    deadline: Optional[float] = FL.deadline, wait_for: Optional[int] = FL.wait_for,
    rate: float = FL.rate, engine: str = FL.engine, nproc: int = FL.nproc,
    timeout: float = FL.timeout, print_torchrun: bool = FL.print_torchrun,
    uplink: Optional[str] = FL.uplink, downlink: Optional[str] = FL.downlink,
    latency: Optional[str] = FL.latency, compute_factor: Optional[str] = FL.compute_factor,
    compute_time: str = FL.compute_time, round_deadline: Optional[str] = FL.round_deadline,
    target: Optional[float] = FL.target, link_seed: Optional[int] = FL.link_seed,
    json_out: bool = JsonOpt, quiet: bool = QuietOpt,
):
    """Federated training where every upload is really compressed, sent as bytes and decoded.

    Example: co3 simulate fl --task mnist5k-mlp --clients 10 --rounds 200 --compressor co3
    --format fp4-co3 --gamma 0.7 --coder ans --lr 0.3 --seed 0 -o run/

    Example: co3 simulate fl -c co3 --format fp4-co3 --sweep gamma=0,0.5,0.7,0.9,1 -o sweep/

    Example: co3 simulate fl -c qsgd -p levels=2 --partition dirichlet --alpha 0.3 -o q/

    Example: co3 simulate fl -c co3 --format fp8-e5m2 --engine torchrun --nproc 4 -o tr/

    Example: co3 simulate fl -c co3 --format fp4-co3 --stragglers ew-uep --straggler-workers 15
    --deadline 1.0 -o uep/

    Example: co3 simulate fl --config run/config.json --set gamma=0.9 -o run-g09/

    Example: co3 simulate fl -c co3 --format fp4-co3 --uplink lognormal:10mbit:0.5 --downlink 10x
    --latency 20ms --target 0.9 -o run/

    Example: co3 simulate fl --entry examples/fl_job.py:make_task --clients 5 -c co3 -o mine/
    """
    from co3cli.simulate.flconfig import OPTIONS, resolve_config
    from co3cli.simulate.flrun import run_job

    torch_one_thread()
    cfg = resolve_config(given(ctx, locals(), OPTIONS), file=config, sets=set_)
    job = run_job(cfg, output, engine=engine, sweep=sweep, nproc=nproc, timeout=timeout,
                  print_torchrun=print_torchrun, overwrite=overwrite, progress=not quiet)
    _print_job(job, cfg.compressor, output, json_out, quiet)


def _print_job(job, compressor: str, output: str, json_out: bool, quiet: bool) -> None:
    """The torchrun line, a sweep's rows or one run's summary."""
    if job.torchrun is not None:
        emit(job.torchrun)
    elif job.sweep is not None:
        if json_out:
            emit_json(job.sweep)
            return
        for r in job.sweep:
            acc = r["final_accuracy"]
            emit(f"{r['run']}: accuracy {'-' if acc is None else f'{100 * acc:.2f} %'}, "
                 f"{r['mean_bits_per_entry']:.3f} bits/entry, "
                 f"{r['total_uplink_bytes']:,} uplink bytes ({r['stopped']})")
    elif json_out:
        emit_json(job.result.to_dict())
    elif not quiet:
        res = job.result
        emit(f"{compressor}: {res.rounds_done} rounds, final accuracy "
             f"{100 * res.final_accuracy:.2f} % (best {100 * res.best_accuracy:.2f} %), "
             f"{res.mean_bits_per_entry:.3f} bits/entry, {res.total_uplink_bytes:,} uplink "
             f"bytes, {res.seconds:.1f} s -> {output}")
        clock = res.clock or {}
        if clock.get("wallclock_s") is not None:
            tt = clock["time_to_target_s"]
            emit(f"wall clock {clock['wallclock_s']:.2f} s; target: "
                 + (f"{tt:.2f} s" if tt is not None else clock["target_reason"]))


@simulate_app.command("plot")
def simulate_plot_cli(
    runs: List[str] = typer.Argument(..., help="Run folders of co3 simulate fl."),
    output: str = typer.Option(..., "--output", "-o", help="PNG file."),
    labels: Optional[str] = typer.Option(None, "--labels", help="Comma-separated legend "
                                         "labels, one per run (default: from each run's "
                                         "config, e.g. 'co3 fp4-co3 gamma=0.7')."),
    uplink: List[str] = LINKS.uplink, downlink: Optional[str] = LINKS.downlink,
    latency: Optional[str] = LINKS.latency, compute_factor: Optional[str] = LINKS.compute_factor,
    compute_time: Optional[str] = LINKS.compute_time, link_seed: Optional[int] = LINKS.link_seed,
):
    """Accuracy vs round, vs cumulative uplink MB, bits/entry vs round and, for runs with a
    wall clock, accuracy vs wall-clock time (recomputed for each --uplink given).

    Example: co3 simulate plot run-none run-co3 run-qsgd -o compare.png

    Example: co3 simulate plot run-none run-co3 -o compare.png --labels float32,"co3 fp4"

    Example: co3 simulate plot run-none run-co3 -o clock.png --uplink 1mbit --uplink 10mbit
    --downlink 10x --latency 20ms
    """
    from co3cli.simulate.flplot import parse_labels, plot_runs

    require_matplotlib(output)
    links = link_overrides(downlink, latency, compute_factor, compute_time, link_seed)
    plot_runs(runs, output, parse_labels(labels, runs), uplinks=list(uplink), links=links)


simulate_app.command("clock")(simulate_clock_cli)
