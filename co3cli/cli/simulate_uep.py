"""``co3 simulate uep``: UEP-coded matrix multiplication against stragglers (analyze, mc, train).

The commands parse their options and print; the work is in ``co3cli.simulate.uep.report``
(building the codes, the analysis, the Monte Carlo check, the straggler setting and the training
run with its provenance file).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer

from co3cli.cli.common import JsonOpt, QuietOpt, emit, kind_choices, torch_one_thread
from co3cli.plot import require_matplotlib

uep_app = typer.Typer(help="UEP-coded matrix multiplication against stragglers: exact "
                       "analysis, Monte Carlo, coded back-propagation.\n\nExample: co3 "
                       "simulate uep analyze --workers 30 --json", no_args_is_help=True)

_UEP_SETTING = dict(
    windows=typer.Option("0.40,0.35,0.25", "--windows", help="Window probabilities Gamma "
                         "(sum 1), one per class (now-uep, ew-uep)."),
    classes=typer.Option("3,3,3", "--classes", help="Blocks per class, most important first."),
    workers=typer.Option(30, "--workers", help="Workers of mds, eep, now-uep, ew-uep (uncoded "
                         "uses one per block, repetition r per block)."),
    repetition=typer.Option(2, "--repetition", help="Copies per block for the repetition "
                            "scheme."),
    schemes=typer.Option("now-uep,ew-uep,eep", "--schemes", help="Comma-"
                         f"separated: {kind_choices('uep code')}."),
)


def _uep_codes(windows, classes, workers, repetition, schemes):
    from co3cli.simulate.uep import report as ur

    return ur.build_codes([x.strip() for x in schemes.split(",") if x.strip()],
                          windows=ur.parse_floats(windows, "--windows"),
                          classes=ur.parse_ints(classes, "--classes"), workers=workers,
                          r=repetition)


@uep_app.command("analyze")
def uep_analyze_cli(
    windows: str = _UEP_SETTING["windows"], classes: str = _UEP_SETTING["classes"],
    workers: int = _UEP_SETTING["workers"], repetition: int = _UEP_SETTING["repetition"],
    schemes: str = _UEP_SETTING["schemes"],
    error_vs_time: bool = typer.Option(False, "--error-vs-time", help="Also the expected "
                                       "normalised error vs time (exact)."),
    energies: Optional[str] = typer.Option(None, "--energies", help="Energy of one block of "
                                           "each class (default 10,1,0.1,... decreasing)."),
    rate: float = typer.Option(1.0, "--rate", help="Exponential latency rate lambda."),
    shift: float = typer.Option(0.0, "--shift", help="Latency shift (shifted exponential)."),
    t_max: Optional[float] = typer.Option(None, "--t-max", help="Last time of the error curve "
                                          "(default shift + 4/rate)."),
    points: int = typer.Option(41, "--points", help="Times on the error curve."),
    plot: Optional[Path] = typer.Option(None, "--plot", help="PNG: decoding probability vs N "
                                        "(and error vs time)."),
    json_out: bool = JsonOpt,
):
    """Exact P(class decoded | N received) per scheme, N = 0..workers; error vs time.

    Example: co3 simulate uep analyze --windows 0.40,0.35,0.25 --classes 3,3,3 --workers 30 --json

    Example: co3 simulate uep analyze --error-vs-time --schemes uncoded,repetition,mds,eep,now-uep,ew-uep --plot uep.png
    """
    from co3cli.simulate.uep import report as ur

    if plot is not None:
        require_matplotlib(plot)  # before any work
    codes = _uep_codes(windows, classes, workers, repetition, schemes)
    L = next(iter(codes.values())).n_classes
    e = ur.class_energies(energies, L) if error_vs_time or energies is not None else None
    res = ur.analyze(codes, energies=e, rate=rate, shift=shift, t_max=t_max, points=points)
    if plot is not None:
        from co3cli.simulate.uep.plots import write_plot

        write_plot(res, plot)
    if json_out:
        emit(json.dumps(res, indent=1))
    else:
        _print_analysis(res, L)


def _print_analysis(res: dict, L: int) -> None:
    for sid, sres in res["schemes"].items():
        emit(f"{sid} ({sres['workers']} workers): P(class decoded | N)")
        N = sres["N"]
        show = sorted(set([0] + list(range(0, N[-1] + 1, max(1, N[-1] // 10))) + [N[-1]]))
        emit("   N  " + "  ".join(f"class{c + 1:>2}" for c in range(L)))
        for n in show:
            emit(f"{n:4d}  " + "  ".join(f"{p[n]:7.4f}" for p in sres["p_decode"]))
    if "error_vs_time" in res:
        cur = res["error_vs_time"]
        emit("expected normalised error vs time")
        emit("     t  " + "  ".join(f"{sid:>10}" for sid in res["schemes"]))
        for i in range(0, len(cur["t"]), max(1, len(cur["t"]) // 8)):
            emit(f"{cur['t'][i]:6.2f}  " + "  ".join(f"{cur[sid][i]:10.4g}"
                                                    for sid in res["schemes"]))


@uep_app.command("mc")
def uep_mc_cli(
    windows: str = _UEP_SETTING["windows"], classes: str = _UEP_SETTING["classes"],
    workers: int = _UEP_SETTING["workers"], repetition: int = _UEP_SETTING["repetition"],
    schemes: str = _UEP_SETTING["schemes"],
    n_received: str = typer.Option("6,9,12,18,24", "--n", help="Numbers of results received."),
    trials: int = typer.Option(500, "--trials"),
    seed: int = typer.Option(0, "--seed"),
    json_out: bool = JsonOpt,
):
    """Monte Carlo with the real encoder/decoder next to the exact decoding probabilities.

    Example: co3 simulate uep mc --windows 0.40,0.35,0.25 --classes 3,3,3 --workers 30 --trials 500
    """
    from co3cli.simulate.uep import report as ur

    codes = _uep_codes(windows, classes, workers, repetition, schemes)
    rows = ur.monte_carlo_check(codes, ur.parse_ints(n_received, "--n"), trials=trials,
                                seed=seed)
    if json_out:
        emit(json.dumps(rows, indent=1))
        return
    emit(f"{'scheme':<11} {'N':>3} {'class':>5} {'exact':>8} {'MC':>8} {'z':>6}")
    for r in rows:
        emit(f"{r['scheme']:<11} {r['N']:3d} {r['class'] + 1:5d} {r['exact']:8.4f} "
             f"{r['monte_carlo']:8.4f} {r['z']:6.2f}")
    worst = max((abs(r["z"]) for r in rows), default=0.0)
    emit(f"{len(rows)} points, {trials} trials each; largest |z| = {worst:.2f}")


@uep_app.command("train")
def uep_train_cli(
    output: Path = typer.Option(..., "--output", "-o", help="Per-step CSV (loss, accuracy, "
                                "compute and simulated straggler time)."),
    task: str = typer.Option("mnist5k-mlp", "--task", "-t", help=f"{kind_choices('task')}; "
                             "every nn.Linear's backward products are coded (CNNs: the dense "
                             "layers)."),
    scheme: str = typer.Option("ew-uep", "--scheme", help=f"{kind_choices('uep code')}, or "
                               "exact (plain autograd, no stragglers)."),
    workers: Optional[int] = typer.Option(None, "--workers", help="Workers n (mds, eep, UEP: "
                                          "required; uncoded: K; repetition: r K)."),
    windows: str = typer.Option("0.45,0.35,0.20", "--windows"),
    classes: str = typer.Option("1,2,6", "--classes", help="Blocks per class (sum = 9 for the "
                                "default 3x3 row-by-column blocks)."),
    repetition: int = typer.Option(2, "--repetition"),
    deadline: Optional[float] = typer.Option(None, "--deadline"),
    wait_for: Optional[int] = typer.Option(None, "--wait-for"),
    rate: float = typer.Option(1.0, "--rate"),
    shift: float = typer.Option(0.0, "--shift"),
    partition: str = typer.Option("sorted", "--partition", help="sorted (the authors': rows "
                                  "and columns ordered by --sort-by, descending, before the "
                                  "uniform 3x3 split; the product is un-permuted after) or "
                                  "contiguous (blocks in the original order)."),
    sort_by: str = typer.Option("mean-abs", "--sort-by", help="Statistic the sorted partition "
                                "orders rows/columns by: mean-abs (mean |.|) or l2."),
    steps: int = typer.Option(300, "--steps"),
    batch_size: int = typer.Option(64, "--batch-size"),
    lr: float = typer.Option(0.1, "--lr"),
    seed: int = typer.Option(0, "--seed"),
    eval_every: int = typer.Option(25, "--eval-every"),
    target: Optional[float] = typer.Option(None, "--target", help="Accuracy whose simulated "
                                           "time-to-reach is reported (e.g. 0.85)."),
    json_out: bool = JsonOpt, quiet: bool = QuietOpt,
):
    """Train with coded back-propagation against stragglers, on a simulated clock.

    Each dense layer's two backward products go through the coded distributed multiplication
    with stragglers; the clock adds each product's waiting time to the compute time.

    Example: co3 simulate uep train --scheme ew-uep --workers 15 --deadline 1.0 --steps 300 -o ew.csv

    Example: co3 simulate uep train --scheme mds --workers 15 --wait-for 9 --target 0.85 -o mds.csv

    Writes the CSV and, next to it, CSV.json with the config, versions and summary.
    """
    from co3cli.simulate.uep import report as ur

    torch_one_thread()
    cfg = ur.straggler_setting(scheme, workers=workers, windows=windows, classes=classes,
                               repetition=repetition, rate=rate, shift=shift, deadline=deadline,
                               wait_for=wait_for, seed=seed, partition=partition,
                               sort_by=sort_by)
    res = ur.train_to_files(task, cfg, output, steps=steps, batch_size=batch_size, lr=lr,
                            seed=seed, eval_every=eval_every, target=target, progress=not quiet)
    if json_out:
        emit(ur.to_json(res))
    elif not quiet:
        ttt = res.get("time_to_target")
        reach = ("" if not target else f", reached {100 * target:.0f} % at {ttt:.1f}"
                 if ttt is not None else f", never reached {100 * target:.0f} %")
        emit(f"{res.get('label', scheme)}: final accuracy {100 * res['final_accuracy']:.2f} %, "
             f"simulated time {res['total_sim_time']:.1f}{reach} -> {output}")
