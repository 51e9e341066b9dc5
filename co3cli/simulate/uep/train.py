"""Training with coded back-propagation: every dense layer's two backward products go through
the UEP-coded distributed multiplication (``co3cli.simulate.uep.coded_matmul``) with stragglers.

Data flow (one SGD step, ``train_coded``)::

    minibatch x --forward (exact: F.linear, conv layers untouched)--> loss
      |
      `-- backward, for each nn.Linear (y = x W^T + b) attached by CodedBackprop:
            delta = dL/dy (flattened to 2-D: rows = batch x leading dims)
            grad_input = coded_matmul(delta,   W)   only if the input needs a gradient
            grad_W     = coded_matmul(delta^T, X)   (X = the layer input, 2-D)
            grad_b     = delta.sum(0)               exact (no multiplication)
              each coded product: partition (sorted by default: rows of the left factor and
              columns of the right one by mean|.|, then rxc M x N blocks, importance-ranked
              classes; the product is un-permuted afterwards)
              -> n workers with i.i.d. shift + Exp(rate) latencies -> stop at the deadline
              (or after wait_for results; neither: wait for all) -> decode -> blocks of the
              lost classes are zero -> C_hat, cast back to the tensor's dtype/shape
            per product: finish_time (the deadline, the wait_for-th arrival, or the last
            arrival if all came earlier), classes/blocks recovered
      |
      `-- optimizer.step(); clock += compute_s + straggler_s
            compute_s   = measured wall time of the step minus the time spent inside the
                          simulator's coded_matmul calls (those stand for the remote workers
                          and the decoder, whose cost is the simulated straggler time)
            straggler_s = sum over the step's coded products of finish_time (sequential:
                          layer by layer, grad_input and grad_W one after the other)

Units: latencies are in seconds when ``rate`` (lambda) is in 1/s; with ``rate=1`` the
straggler clock is in units of the mean worker time 1/lambda. Evaluation passes are not on
the clock. ``train_coded(task, None, ...)`` is the exact autograd baseline (no coded products,
clock = compute only).

Exactness: with ``deadline=None`` and ``wait_for=None`` every worker's result is used, so the
gradients equal the exact ones (float64 products, least-squares decoding, cast back) whenever
the code decodes from all n results: always for uncoded, repetition, mds and eep; for now-uep
and ew-uep only when every window received enough workers (a property of the random code: with
15 workers and Gamma = (0.45, 0.35, 0.20) the 6-block class is decodable only ~6 % of the time
even without stragglers).

Determinism: the straggler randomness (latencies, random code coefficients and windows) of each
coded product uses its own generator seeded from ``StragglerConfig.seed``'s generator, in the
order the products are computed; the model init, data split and minibatch order come from
``train_coded``'s ``seed``; so the same configuration gives identical losses.
"""

from __future__ import annotations

import csv
import math
import time
import types
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Iterator

import numpy as np

from co3cli.checks import check_int, check_int_list, check_real
from co3cli.errors import InputError
from co3cli.progress import progress_bar
from co3cli.simulate.uep.codes import CODES, Code, get_code
from co3cli.simulate.uep.latency import Latency, check_deadline
from co3cli.simulate.uep.matmul import IMPORTANCE, MODES, check_partition, coded_matmul

__all__ = ["StragglerConfig", "CodedBackprop", "train_coded", "CSV_COLUMNS"]

CSV_COLUMNS = ("step", "train_loss", "test_accuracy", "compute_s", "straggler_s", "sim_time",
               "recovered_fraction", "class_recovered", "products", "sim_overhead_s")
"""Per-step CSV columns; ``class_recovered`` is the per-class block-recovered fraction of the
step joined by ``;`` (class 0 = most important); ``recovered_fraction`` is the fraction of all
blocks recovered over the step's products."""


# ----------------------------------------------------------------------------- configuration


@dataclass
class StragglerConfig:
    """How each coded backward product is computed: the code, the latencies and the stopping rule.

    ``scheme``: a code id of ``co3cli.simulate.uep.CODES``; ``workers``: n (None: the code's
    default -- K for uncoded, r K for repetition; required for mds/eep/now-uep/ew-uep);
    ``windows``: the window probabilities Gamma (now-uep/ew-uep only); ``class_sizes`` must sum
    to the number of blocks K (rxc: M N, cxr: P); ``rate``/``shift``: the latency
    ``shift + Exp(rate)``; ``deadline``: stop at this time; ``wait_for``: stop after this many
    results (both: whichever is first; neither: wait for all); ``seed``: the straggler RNG;
    ``partition``: ``sorted`` (the authors' construction: rows/columns -- cxr: the inner index --
    sorted by ``sort_by`` before the uniform split) or ``contiguous`` (original order).
    """

    scheme: str
    workers: int | None = None
    windows: tuple[float, ...] | None = (0.45, 0.35, 0.20)
    class_sizes: tuple[int, ...] = (1, 2, 6)
    r: int = 2
    mode: str = "rxc"
    blocks: Any = (3, 3)
    importance: str = "frobenius"
    partition: str = "sorted"
    sort_by: str = "mean-abs"
    rate: float = 1.0
    shift: float = 0.0
    deadline: float | None = None
    wait_for: int | None = None
    seed: int = 0

    def check(self) -> StragglerConfig:
        """Validate every field (InputError, one line, naming the field); returns self."""
        if not isinstance(self.scheme, str) or self.scheme not in CODES:
            raise InputError(f"scheme must be one of {CODES.allowed()}, got {self.scheme!r}")
        if self.workers is not None:
            check_int("workers", self.workers, lo=1)
        if self.mode not in MODES:
            raise InputError(f"mode must be one of {', '.join(MODES)}, got {self.mode!r}")
        if self.importance not in IMPORTANCE:
            raise InputError(f"importance must be one of {', '.join(IMPORTANCE)}, got {self.importance!r}")
        check_partition(self.partition, self.sort_by)
        K = self._K()
        if not isinstance(self.class_sizes, (tuple, list)) or any(
                isinstance(k, bool) or not isinstance(k, (int, np.integer)) for k in self.class_sizes):
            raise InputError(f"class_sizes={self.class_sizes!r} must be a non-empty list of "
                             "integers >= 1")
        check_int_list("class_sizes", self.class_sizes, lenient=True)
        if sum(self.class_sizes) != K:
            raise InputError(f"class_sizes {list(self.class_sizes)} sum to {sum(self.class_sizes)}, "
                             f"but blocks {self.blocks!r} give K={K} blocks")
        Latency(rate=self.rate, shift=self.shift)  # raises InputError
        if self.deadline is not None:
            check_deadline(self.deadline)
        if self.wait_for is not None:
            check_int("wait_for", self.wait_for, lo=1)
        check_int("seed", self.seed, lo=0)
        code = self.code()
        if self.wait_for is not None and self.wait_for > code.n_workers:
            raise InputError(f"wait_for must be <= the number of workers n={code.n_workers}, got {self.wait_for!r}")
        return self

    def _K(self) -> int:
        b = self.blocks
        if self.mode == "rxc":
            if not isinstance(b, (tuple, list)) or len(b) != 2:
                raise InputError(f"blocks must be (M, N) for mode 'rxc', got {b!r}")
            return check_int("blocks M", b[0], lo=1) * check_int("blocks N", b[1], lo=1)
        if isinstance(b, (tuple, list)):
            if len(b) != 1:
                raise InputError(f"blocks must be an integer P for mode 'cxr', got {b!r}")
            b = b[0]
        return check_int("blocks P", b, lo=1)

    def code(self) -> Code:
        """The configured code (``get_code``); only the parameters the scheme takes are passed."""
        allowed = {"class_sizes", *CODES.get(self.scheme).PARAMS} if self.scheme in CODES else set()
        params = {"class_sizes": tuple(self.class_sizes), "workers": self.workers,
                  "windows": self.windows, "r": self.r}
        return get_code(self.scheme, **{k: v for k, v in params.items() if k in allowed})

    @property
    def latency(self) -> Latency:
        return Latency(rate=self.rate, shift=self.shift)

    def label(self) -> str:
        """Short description, e.g. ``ew-uep n=15 T=0.5`` (`` contiguous`` / `` sort=l2`` appended
        when the partition is not the default sorted-by-mean|.|)."""
        stop = (f"T={self.deadline:g}" if self.deadline is not None else "") + (
            f" wait={self.wait_for}" if self.wait_for is not None else "")
        part = (" contiguous" if self.partition == "contiguous" else
                (f" sort={self.sort_by}" if self.sort_by != "mean-abs" else ""))
        return f"{self.scheme} n={self.code().n_workers} {stop.strip() or 'wait-all'}{part}"

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly dict (tuples as lists) plus the resolved number of workers."""
        d = {k: (list(v) if isinstance(v, tuple) else v) for k, v in asdict(self).items()}
        d["n_workers"] = self.code().n_workers
        return d


# ----------------------------------------------------------------------------- coded backprop


def _coded_linear_fn() -> Any:
    """The autograd Function (built lazily so that importing this module does not import torch)."""
    import torch
    import torch.nn.functional as F
    from torch.autograd.function import once_differentiable

    class CodedLinear(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, weight, bias, runner):  # exact forward
            ctx.save_for_backward(x, weight)
            ctx.runner = runner
            ctx.has_bias = bias is not None
            return F.linear(x, weight, bias)

        @staticmethod
        @once_differentiable
        def backward(ctx, grad_out):
            x, w = ctx.saved_tensors
            runner: CodedBackprop = ctx.runner
            d2 = grad_out.reshape(-1, grad_out.shape[-1])
            gi = gw = gb = None
            if ctx.needs_input_grad[0]:
                gi = runner.product(d2, w).to(x.device, x.dtype).reshape(x.shape)
            if ctx.needs_input_grad[1]:
                gw = runner.product(d2.T, x.reshape(-1, x.shape[-1])).to(w.device, w.dtype)
            if ctx.has_bias and ctx.needs_input_grad[2]:
                gb = d2.sum(0)
            return gi, gw, gb, None

    return CodedLinear


class CodedBackprop:
    """Makes the ``nn.Linear`` layers of a model back-propagate through coded products.

    ``attach(model)`` replaces each Linear's forward by a custom autograd Function (exact
    forward; backward: grad_input = coded(delta, W), grad_W = coded(delta^T, X), grad_b exact);
    ``detach()`` restores them (also on leaving ``with cb.attach(model): ...``). Per coded
    product it records the finish time, the classes/blocks recovered and (``exact_error=True``,
    costly) the relative error; ``step_stats()`` returns the sums/means since the last call and
    resets them.
    """

    def __init__(self, config: StragglerConfig, *, exact_error: bool = False):
        if not isinstance(config, StragglerConfig):
            raise InputError(f"config must be a StragglerConfig, got {type(config).__name__}")
        self.config = config.check()
        self.code = config.code()
        self.exact_error = bool(exact_error)
        self._seeds = np.random.default_rng(config.seed)
        self._latency = config.latency
        self._modules: list[Any] = []
        self._fn = _coded_linear_fn()
        self._reset()

    def _reset(self) -> None:
        self._finish: list[float] = []
        self._decoded: list[np.ndarray] = []
        self._blocks: list[np.ndarray] = []
        self._errors: list[float] = []
        self._overhead = 0.0

    # -- attaching
    def attach(self, model: Any) -> CodedBackprop:
        """Route every ``nn.Linear`` of ``model`` through the coded backward; returns self."""
        from torch import nn

        if self._modules:
            raise InputError("CodedBackprop is already attached to a model; detach() it first")
        linears = [m for m in model.modules() if isinstance(m, nn.Linear)]
        if not linears:
            raise InputError("the model has no nn.Linear layer to code")
        if any("forward" in vars(m) for m in linears):
            raise InputError("a Linear layer of the model already has an overridden forward "
                             "(attached by another CodedBackprop?)")
        fn, runner = self._fn, self

        def forward(mod: Any, x: Any) -> Any:
            return fn.apply(x, mod.weight, mod.bias, runner)

        for m in linears:
            m.forward = types.MethodType(forward, m)
        self._modules = linears
        return self

    def detach(self) -> None:
        """Restore the original forwards (no-op when not attached)."""
        for m in self._modules:
            vars(m).pop("forward", None)
        self._modules = []

    def __enter__(self) -> CodedBackprop:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.detach()

    @property
    def attached(self) -> int:
        """Number of Linear layers currently routed through the coded backward."""
        return len(self._modules)

    # -- one coded product
    def product(self, A: Any, B: Any) -> Any:
        """C_hat = A @ B through the coded multiplication (a torch tensor, float64 -> caller
        casts), recording the straggler statistics."""
        import torch

        cfg = self.config
        rng = np.random.default_rng(int(self._seeds.integers(0, 2**63 - 1)))
        t0 = time.perf_counter()
        with np.errstate(over="ignore", invalid="ignore"):  # a diverging run: the loss check says so
            C, info = coded_matmul(A, B, self.code, mode=cfg.mode, blocks=cfg.blocks,
                                   importance=cfg.importance, partition=cfg.partition,
                                   sort_by=cfg.sort_by, latency=self._latency,
                                   deadline=cfg.deadline, wait_for=cfg.wait_for, rng=rng,
                                   exact=self.exact_error)
        self._overhead += time.perf_counter() - t0
        self._finish.append(info["finish_time"])
        self._decoded.append(np.asarray(info["recovered"], dtype=np.float64))
        self._blocks.append(np.bincount(info["block_class"], weights=info["block_recovered"],
                                        minlength=self.code.n_classes) / np.asarray(self.code.class_sizes))
        if self.exact_error:
            self._errors.append(info["rel_error"])
        return torch.from_numpy(C)

    def step_stats(self) -> dict[str, Any]:
        """Statistics of the coded products since the last call (then reset).

        ``products``; ``straggler_s`` = sum of their finish times; ``class_decoded`` (per class:
        fraction of products where the whole class was recovered); ``class_recovered`` (per
        class: mean fraction of its blocks recovered); ``recovered_fraction`` (fraction of all
        blocks recovered); ``rel_error`` (mean, or None without ``exact_error``);
        ``sim_overhead_s`` (wall time spent in the simulator)."""
        k = len(self._finish)
        L = self.code.n_classes
        blocks = np.asarray(self._blocks).reshape(k, L)
        sizes = np.asarray(self.code.class_sizes, dtype=np.float64)
        out = {
            "products": k,
            "straggler_s": float(np.sum(self._finish)) if k else 0.0,
            "class_decoded": np.asarray(self._decoded).reshape(k, L).mean(0) if k else np.full(L, np.nan),
            "class_recovered": blocks.mean(0) if k else np.full(L, np.nan),
            "recovered_fraction": float((blocks @ sizes).mean() / sizes.sum()) if k else math.nan,
            "rel_error": float(np.mean(self._errors)) if self._errors else None,
            "sim_overhead_s": self._overhead,
        }
        self._reset()
        return out


# ----------------------------------------------------------------------------- training


def _fmt(v: Any) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return ""
    if isinstance(v, np.ndarray):
        return ";".join(f"{x:.6g}" for x in v.tolist())
    if isinstance(v, float):
        return f"{v:.9g}"
    return str(v)


def train_coded(task: str, straggler: StragglerConfig | None, *, steps: int, batch_size: int = 64,
                lr: float = 0.1, momentum: float = 0.0, seed: int = 0, eval_every: int = 10,
                out_csv: str | Path | None = None, target_accuracy: float | None = None,
                progress: bool = False, test_fraction: float = 0.2) -> dict[str, Any]:
    """SGD on a built-in task with the coded backward attached (``straggler=None``: exact
    autograd, no straggler time). One CPU thread.

    Per step (``out_csv``: one CSV row each, columns ``CSV_COLUMNS``): the training loss, the
    test accuracy (every ``eval_every`` steps and at the last step; empty otherwise), the
    measured compute time, the simulated straggler time and the cumulative simulated clock.
    Returns a summary: ``final_accuracy``, ``best_accuracy``, ``time_to_target`` (simulated
    clock at the first evaluation with accuracy >= ``target_accuracy``; None if never or no
    target) with ``straggler_time_to_target``, ``compute_time_to_target`` and
    ``step_to_target``; totals; mean recovered fractions; ``evals`` (step, sim_time,
    straggler_time, test_accuracy, train_loss per evaluation) and ``config``.
    """
    import torch
    import torch.nn.functional as F

    from co3cli.tasks import (
        TorchThreads, build_model, epoch_batches, evaluate_counts, get_task, load_task_data,
    )

    get_task(task)
    steps = check_int("steps", steps, lo=1)
    batch_size = check_int("batch_size", batch_size, lo=1)
    eval_every = check_int("eval_every", eval_every, lo=1)
    seed = check_int("seed", seed, lo=0)
    lr = check_real("lr", lr, 0.0, lo_open=True)
    momentum = check_real("momentum", momentum, 0.0, 1.0, hi_open=True)
    if target_accuracy is not None:
        target_accuracy = check_real("target_accuracy", target_accuracy, 0.0, 1.0, lo_open=True)
    if straggler is not None and not isinstance(straggler, StragglerConfig):
        raise InputError(f"straggler must be a StragglerConfig or None, got {type(straggler).__name__}")

    config = dict(task=task, steps=steps, batch_size=batch_size, lr=lr, momentum=momentum,
                  seed=seed, eval_every=eval_every, target_accuracy=target_accuracy,
                  test_fraction=test_fraction,
                  straggler=None if straggler is None else straggler.to_dict())
    runner = CodedBackprop(straggler) if straggler is not None else None
    fh = writer = None
    bar = progress_bar(progress, "uep train " + ("exact" if straggler is None else straggler.scheme),
                       total=steps, unit="step")
    if out_csv is not None:
        fh = open(out_csv, "w", newline="")
        writer = csv.writer(fh)
        writer.writerow(CSV_COLUMNS)
    try:
        with TorchThreads(1):
            train, test = load_task_data(task, test_fraction, seed)
            model = build_model(task, seed)
            opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=momentum)
            gen = torch.Generator().manual_seed(seed)
            n = len(train)
            bs = min(batch_size, n)

            def batches() -> Iterator[tuple[Any, Any]]:  # endless; last partial batch dropped
                while True:
                    yield from epoch_batches(train, bs, gen)

            def evaluate() -> float:  # one batch; a float32 mean, as this CSV has always had
                _, correct, n = evaluate_counts(model, test.x, test.y, batch=max(1, len(test)))
                return float(np.float32(correct) / np.float32(n))

            if runner is not None:
                runner.attach(model)
            L = runner.code.n_classes if runner is not None else 0
            clock = strag_clock = comp_clock = 0.0
            evals: list[dict[str, Any]] = []
            rec_sum, dec_sum, rec_frac_sum, n_rec = np.zeros(L), np.zeros(L), 0.0, 0
            hit: dict[str, Any] | None = None
            it = batches()
            loss_v = math.nan
            for step in range(steps):
                x, y = next(it)
                t0 = time.perf_counter()
                opt.zero_grad(set_to_none=True)
                loss = F.cross_entropy(model(x), y)
                loss.backward()
                opt.step()
                wall = time.perf_counter() - t0
                loss_v = float(loss.detach())
                if not math.isfinite(loss_v):
                    raise InputError(f"step {step}: the training loss is {loss_v} (lr {lr:g}); "
                                     "training diverged: lower --lr")
                if runner is not None:
                    st = runner.step_stats()
                    compute = max(wall - st["sim_overhead_s"], 0.0)
                    strag, overhead = st["straggler_s"], st["sim_overhead_s"]
                    rec_frac, cls, prods = st["recovered_fraction"], st["class_recovered"], st["products"]
                    if prods:
                        rec_sum += cls
                        dec_sum += st["class_decoded"]
                        rec_frac_sum += rec_frac
                        n_rec += 1
                else:
                    compute, strag, overhead, rec_frac, cls, prods = wall, 0.0, 0.0, math.nan, None, 0
                comp_clock += compute
                strag_clock += strag
                clock += compute + strag
                acc = math.nan
                if (step + 1) % eval_every == 0 or step == steps - 1:
                    acc = evaluate()
                    ev = dict(step=step, sim_time=clock, straggler_time=strag_clock,
                              compute_time=comp_clock, test_accuracy=acc, train_loss=loss_v)
                    evals.append(ev)
                    if hit is None and target_accuracy is not None and acc >= target_accuracy:
                        hit = ev
                    if not bar.disable:  # on stderr (a bar, or a heartbeat line when piped)
                        bar.set_postfix({"loss": f"{loss_v:.4f}", "acc": f"{acc:.4f}",
                                         "sim": f"{clock:.2f}"}, refresh=False)
                if writer is not None:
                    writer.writerow([_fmt(v) for v in (step, loss_v, acc, compute, strag, clock, rec_frac,
                                                       cls, prods, overhead)])
                bar.update(1)
    finally:
        bar.close()
        if runner is not None:
            runner.detach()
        if fh is not None:
            fh.close()
    accs = [e["test_accuracy"] for e in evals]
    return {
        "task": task,
        "label": "exact (autograd)" if straggler is None else straggler.label(),
        "steps": steps,
        "final_accuracy": accs[-1],
        "best_accuracy": max(accs),
        "final_loss": loss_v,
        "target_accuracy": target_accuracy,
        "time_to_target": None if hit is None else hit["sim_time"],
        "straggler_time_to_target": None if hit is None else hit["straggler_time"],
        "compute_time_to_target": None if hit is None else hit["compute_time"],
        "step_to_target": None if hit is None else hit["step"],
        "total_sim_time": clock,
        "total_straggler_time": strag_clock,
        "total_compute_time": comp_clock,
        "recovered_fraction": rec_frac_sum / n_rec if n_rec else None,
        "class_recovered": (rec_sum / n_rec).tolist() if n_rec else None,
        "class_decoded": (dec_sum / n_rec).tolist() if n_rec else None,
        "evals": evals,
        "config": config,
    }
