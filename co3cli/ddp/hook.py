"""``co3_hook``: the DDP communication hook (compress, exchange, decode, average one bucket);
see :mod:`co3cli.ddp` for the data flow."""

# no "from __future__ import annotations": DDP checks the hook's annotations as objects
import time
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from co3cli.compressors import CO3
from co3cli.ddp import wire
from co3cli.ddp.state import LENGTH_BYTES, WHO, CO3State, _ParamState


def co3_hook(state: CO3State, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """DDP communication hook: co3-compress this rank's bucket (per parameter, with error
    feedback), all-gather the payloads, decode every rank's, and return their mean. By default
    it works synchronously (the returned future is already completed); with
    ``CO3State(overlap=True)`` the work runs on the state's one worker thread, in bucket order,
    and the future completes when it is done. See the module docstring."""
    group = state.process_group
    world = dist.get_world_size(group)
    rank = dist.get_rank(group)
    if state._placement is not None:  # a state loaded before the process group existed
        state._check_placement(rank, world)
    buf = bucket.buffer()
    t0 = time.perf_counter()
    pstates = [state._param(p) for p in bucket.parameters()]
    bounds = np.cumsum([0] + [ps.numel for ps in pstates])
    if bounds[-1] != buf.numel():
        raise RuntimeError(f"co3_hook: bucket {bucket.index()} has {buf.numel()} entries, "
                           f"its parameters {bounds[-1]}")
    last = bucket.is_last()
    fut: torch.futures.Future[torch.Tensor] = torch.futures.Future()
    if not state.overlap:
        fut.set_result(_bucket_mean(state, buf, pstates, bounds, last, rank, world, t0))
        return fut
    if state._worker is None:
        from concurrent.futures import ThreadPoolExecutor

        state._worker = ThreadPoolExecutor(1, thread_name_prefix="co3-ddp")

    def work() -> None:
        try:
            fut.set_result(_bucket_mean(state, buf, pstates, bounds, last, rank, world,
                                        time.perf_counter()))
        except BaseException as e:  # noqa: BLE001 - handed to DDP through the future
            fut.set_exception(e)

    state._worker.submit(work)  # one thread: buckets in order, the same on every rank
    return fut


def _exchange_tensor(payload: bytes, device: torch.device, group: Any,
                     world: int) -> tuple[list[bytes], int]:
    """All-gather variable-length payloads: lengths first, then uint8 tensors padded to the
    longest, both on ``device``. Returns every rank's bytes and the padded length."""
    n = torch.tensor([len(payload)], dtype=torch.int64, device=device)
    lengths_t = [torch.empty_like(n) for _ in range(world)]
    dist.all_gather(lengths_t, n, group=group)
    lengths = torch.cat(lengths_t).cpu().tolist()
    padded = max(lengths)
    send = wire.from_bytes(payload + bytes(padded - len(payload)), device)
    recv = [torch.empty(padded, dtype=torch.uint8, device=device) for _ in range(world)]
    dist.all_gather(recv, send, group=group)
    blob = wire.to_host_bytes(torch.cat(recv))
    return [blob[s * padded:s * padded + lengths[s]] for s in range(world)], padded


def _exchange_object(payload: bytes, group: Any, world: int) -> tuple[list[bytes], int]:
    out: list[Any] = [None] * world
    dist.all_gather_object(out, payload, group=group)
    return out, len(payload)


def _bucket_mean(state: CO3State, buf: torch.Tensor, pstates: list[_ParamState],
                 bounds: np.ndarray, last: bool, rank: int, world: int,
                 t0: float) -> torch.Tensor:
    """The rank-mean of one bucket through co3 (the hook's work; see the module docstring)."""
    group, comp = state.process_group, state.compressor
    flat = buf.detach().reshape(-1)
    with wire.collective(WHO, rank):
        if not state.checked:
            state.check_configs()
        # NaN/Inf anywhere (e.g. an fp16 GradScaler overflow step): every rank must take the
        # same path, so the ranks agree with a one-integer all-reduce; then the bucket is
        # averaged as is (the result keeps the NaN/Inf for the scaler) and no memory or table
        # is touched
        if wire.agree(int(wire.nonfinite(flat)), buf.device, group):
            raw = buf.detach().clone()
            dist.all_reduce(raw, group=group)
            state._stats["nonfinite_buckets"] += 1
            state._step.payload_bytes += raw.numel() * raw.element_size()  # what went on the wire
            state._step.padded_bytes += raw.numel() * raw.element_size()
            state._step.entries += flat.numel()
            if last:
                state._finish_step()
            return raw.div_(world)
    t1 = time.perf_counter()
    own, parts, entropy = [], [], 0.0  # this rank's v_hat per parameter (on buf's device)
    for ps, lo, hi in zip(pstates, bounds[:-1], bounds[1:]):
        ps.sender["cols"] = ps.cols
        packet = state.feedback.step(ps.key, flat[lo:hi], ps.sender)
        own.append(packet.v_hat)
        parts.append(packet.payload)
        entropy += packet.entropy_bits
        state._stats["scale_fallbacks"] += packet.scale_fallbacks
    payload = wire.frame(parts)
    t2 = time.perf_counter()
    with wire.collective(WHO, rank):
        if state.exchange == "tensor":
            payloads, padded = _exchange_tensor(payload, buf.device, group, world)
        else:
            payloads, padded = _exchange_object(payload, group, world)
    t3 = time.perf_counter()
    for src in range(world):  # every rank checks every payload: all raise the same error
        wire.verify(payloads[src], src, WHO)
    spans = [wire.unframe(payloads[src], len(pstates), src, WHO) if src != rank else None
             for src in range(world)]
    out = buf if buf.dtype == torch.float32 else torch.empty_like(buf)
    out = out.view(-1)
    w = torch.tensor(world, dtype=torch.float32, device=buf.device)
    for i, (ps, lo, hi) in enumerate(zip(pstates, bounds[:-1], bounds[1:])):
        total = None  # rank order, float32: the same sum on every replica
        for src in range(world):
            part = own[i] if src == rank else \
                _decode(payloads[src], spans[src][i], src, ps, comp, buf.device)
            total = part + 0.0 if total is None else total.add_(part)  # 0 + x, as the old sum
        out[lo:hi] = total.div_(w)
    t4 = time.perf_counter()

    st = state._step
    st.payload_bytes += len(payload) + LENGTH_BYTES
    st.padded_bytes += padded + LENGTH_BYTES
    st.entries += flat.numel()
    st.entropy_bits += entropy
    st.t_host += t1 - t0
    st.t_compress += t2 - t1
    st.t_exchange += t3 - t2
    st.t_decode += t4 - t3
    if last:
        state._finish_step()
    return out.view_as(buf)


def _decode(payload: bytes, span: tuple[int, int], src: int, ps: _ParamState, comp: CO3,
            device: torch.device) -> torch.Tensor:
    """Rank ``src``'s packet for parameter ``ps``, decoded (float32, on ``device``)."""
    rs = ps.receivers.setdefault(src, {})
    rs["cols"] = ps.cols
    v_hat = torch.from_numpy(comp.decompress(payload[span[0]:span[1]], ps.numel, rs))
    return v_hat if v_hat.device == torch.device(device) else \
        v_hat.pin_memory().to(device, non_blocking=True) if torch.device(device).type == "cuda" \
        else v_hat.to(device)
