"""CO3 gradient compression as a ``torch.distributed`` DDP communication hook.

Modules: :mod:`~co3cli.ddp.state` (``CO3State``: configuration, per-parameter state,
checkpoints, the guard), :mod:`~co3cli.ddp.hook` (``co3_hook``), :mod:`~co3cli.ddp.wire`
(what the DDP hook and the FSDP reduce-scatter share: payload frame, faults, config and
checkpoint checks).

::

    from co3cli.ddp import CO3State, co3_hook
    state = CO3State(process_group=None, format="fp8-e5m2", coder="ans", gamma=0.9, refit_every=100)
    ddp_model.register_comm_hook(state, co3_hook)

Data flow, per gradient bucket, on every rank (``W`` ranks, this one is ``r``)::

    bucket.buffer() g (its device, float32/bf16/fp16; never copied to float32 as a whole)
      first call: every rank's config all-gathered, compared (ConfigMismatchError on all)
      non-finite anywhere? one int32 all-reduce (then the raw all-reduce, see below)
      per parameter p of the bucket (its slice of g; the unit of compression, like co3's layers):
        v_p = g_p + gamma * e_p                 (e_p: float32 memory on g's device; built in e_p)
        packet_p = compress(v_p, sender_state[p])   (quantize + entropy-code -> bytes)
        e_p = v_p - packet_p.v_hat              (memory update, on the device)
      payload = uvarint(len(packet_p)) for each p || the packets || crc32     (ddp.wire.frame)
      all_gather(len(payload))   as one int64 per rank      (on the bucket's device)
      all_gather(payload)        as uint8, padded to max    (on the bucket's device)
      every rank checks every payload's crc32 (PayloadChecksumError naming the sender, on all)
      per parameter p: mean_p = (sum over s = 0..W-1, in rank order, float32, of
                                 v_hat[s]_p = decompress(payload[s]_p, receiver_state[p, s])
                                 (s != r; decoded on the host, copied to the device),
                                 packet_p.v_hat (s == r)) / W
      --into the bucket (float32), or a new bucket-dtype tensor--> completed Future

Where the work happens. CPU buckets: the numba quantizer and the coders on host memory, no
copy at all for float32 buckets. CUDA buckets (:mod:`co3cli.compressors.device`): the
correction, the quantization, ``v_hat`` and the memory update run as torch ops on the GPU; only
the uint8 symbols (1 byte per entry, through a pinned buffer, ``non_blocking``) and the symbol
counts cross to the host, where the entropy coder runs (on the state's worker thread with
``overlap=True``); a refit step (1 in ``refit_every``) also copies ``v`` once for the table
fit; decoded values come back to the device. bf16/fp16 buckets: ``e += g`` upcasts inside the
add; the memory and the float32 sum are float32, one parameter at a time; the result is
written in the bucket's dtype. No GPU was available to this project's sessions: the CUDA
branch is exercised on CPU through ``CO3State(path="torch")`` (bit-identical results, tested)
and ``benchmarks/gpu_check.py`` is the check to run where one is.

Every rank decodes the same bytes with the same per-source receiver state and sums in the
same order in the same dtype, so every replica gets a bit-identical average and the replicas
stay identical (given identical initial weights, which DDP broadcasts). A rank does not decode
its own payload: ``Packet.v_hat`` is bit-identical to that decode (the compressor's contract),
so it keeps receiver states only for the other W-1 ranks.

Faults (:mod:`co3cli.ddp.wire`): a payload that fails its checksum raises
``PayloadChecksumError`` naming the sending rank on every rank (they all check all payloads);
a collective that fails (a rank died, or the process group's timeout) raises
``PeerFailureError`` on the ranks still alive; different configurations across ranks raise
``ConfigMismatchError`` on every rank at the first step. A payload that passes its checksum but
does not decode (a receiver state loaded wrongly) raises ``CorruptDataError`` on that rank.

Exchange. ``exchange="tensor"`` (default): two all-gathers, lengths then uint8 payloads padded
to the longest; ``exchange="object"``: one ``all_gather_object`` of the bytes (pickled; under NCCL
it needs the current CUDA device set). ``benchmarks/bench_ddp.py`` measures both.

Synchronous or overlapped. By default the exchange and decode happen inside the hook call
and it returns an already completed ``torch.futures.Future`` (allowed by the hook contract;
the work does not overlap the rest of the backward pass). ``CO3State(overlap=True)``: the
hook only looks the bucket's parameters up and hands the rest (host copy, compress, the
collectives, decode) to the state's one worker thread, then returns; the future completes
when the worker is done and DDP waits for it at the end of backward. One thread, FIFO: the
buckets are coded and exchanged in the order DDP hands them over, the same on every rank, so
the collectives match and the results are bit-identical to the synchronous path (tested).
It assumes nothing else issues collectives on the group while backward runs (DDP's own
unused-parameter all-reduce comes before the first bucket; tested with DDP's defaults).
Overlap only pays where a core is idle during backward (more cores than ranks, several
buckets); it is off by default.

Keys. State (error memory, sender table, one receiver table per source rank) is kept per
*parameter*, not per bucket: DDP re-buckets after its first iteration (torch 2.x puts every
parameter in one bucket at first, then regroups them in gradient-ready order), and a restored
job starts again from the first-iteration layout, so bucket indices are not stable keys.
A parameter's key is the order in which the hook first sees it; DDP's first iteration always
presents the parameters in the same order (one bucket, model order in torch 2.x), so key ``i``
means the same parameter in every run of the same model and a checkpoint restores onto it.
If a key shows up with a different number of entries, its memory and tables are reset (the
next payload carries a fresh table) and ``stats()["resets"]`` counts it. Per-parameter tables
also fit each layer's own distribution. All ranks see the same layout, so they agree.

Checkpoints. ``state_dict()`` is a picklable dict of *this rank's* state (memories as CPU
tensors, tables as bytes, counters, statistics, the rank and world size it was taken on);
pickling drops the process group (``None`` after unpickling: the default group). Frameworks
write one file from rank 0 and load it on every rank, so ``job_state_dict()`` (a collective)
gathers every rank's state into one dict; ``load_state_dict`` of it takes this rank's part
(``co3cli.integrations`` wires it into Lightning's and Accelerate's checkpoints; README). A
state loaded where it does not belong raises :class:`StateMismatchError`, one line naming
what differs ("co3 DDP state of rank 0 loaded on rank 1", "... saved with world size 4, loaded
with 2", format, coder, model), at load time, or at the hook's first call for a state loaded
before the process group existed.

Guard. A hook asked for but never registered trains silently uncompressed (Lightning's
``ddp_comm_hook`` off CUDA, Accelerate's ``DistributedDataParallelKwargs(comm_hook=...)``):
``state.guard(optimizer, after=1)`` raises :class:`CO3HookNotRunError` if the hook finished no
step in this process by then (``state.check_ran(steps)`` is the check itself).

Non-finite gradients. If any rank's bucket holds NaN/Inf (an fp16 ``GradScaler`` overflow
step, a diverging run), all ranks learn it from a one-integer all-reduce (done every bucket)
and the bucket is averaged uncompressed, NaN/Inf included, so the scaler skips the step; the
error memories and tables are left as they were; ``stats()["nonfinite_buckets"]`` counts it.

Bytes on the wire per rank and step: the payloads (with their 4-byte crc32) plus 8 bytes (the
int64 length) per bucket;
``stats()`` also reports the padded size actually moved by the padded all-gather.
"""


from co3cli.ddp.state import CO3HookNotRunError, CO3State
from co3cli.ddp.hook import co3_hook
from co3cli.ddp.wire import PayloadChecksumError, PeerFailureError

__all__ = ["CO3HookNotRunError", "CO3State", "PayloadChecksumError", "PeerFailureError",
           "co3_hook"]
