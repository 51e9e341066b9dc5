"""The torchrun engine of ``co3 simulate fl``: rank 0 is the server, ranks 1..W the clients.

::

    every rank: Simulation(config)  (same seed -> same data, shards, model, draws)
    round r:  client c lives on rank 1 + c % W (clients > W are multiplexed)
      rank k: for its clients in `who`: ClientMsg -> message bytes --send--> rank 0
      rank 0: recv in client order, check, decode, average, step, eval, metrics row
      rank 0 --broadcast--> status (0 go on, 1 stop), then the model's parameters (and, with
                          buffers="average", the server's buffers: co3cli.tasks.buffers)

Message (client -> server), little-endian::

    b"CO3M" | round u32 | client u32 | nlayers u32 | loss f64 | t_compute f64 | t_compress f64
    | entropy_bits f64 (NaN: none) | straggler_time f64 | recovered f64 | diverged u8
    | scale_fallbacks u32
    | nlayers x payload length u32 | payloads     (nlayers counts the model's layers + 1: the
    | CRC-32 of everything before, u32              last piece holds the buffers, maybe empty)

sent as an int64 length then the bytes (``dist.send``). A message whose CRC, magic, round or
client does not match is reported on stderr with its rank and round and left out of the
average (counted in the ``rejected_uploads`` column); only uplink bytes that arrived intact are
charged. With a compressor whose decoder keeps state learnt from payloads (``co3``: its tables)
the run then stops after that round, since the server's state no longer matches the client's. The server's model reaches the clients by ``dist.broadcast`` of the flat float32
parameters, so all processes compute on the same bits: with the same config this engine and the
in-process one give bit-identical models and identical byte counts (tested).

Launch: ``launch(cfg, out, nproc)`` starts ``nproc`` processes of ``python -m
co3cli.simulate.dist`` on this machine (gloo, a FileStore in a temporary folder, one torch thread
each, the config on their stdin) and watches them (``co3cli.simulate.ranks``): a rank that exits
early stops the job with an error naming the rank and the round, one that sends no heartbeat for
``--timeout`` seconds (stopped, wedged) is named as the one that stopped answering; the others are
killed, and ``metrics.csv`` stays valid up to the last finished round. The ranks die with the
launcher (parent-death signal, and a watch on their parent). For several machines,
``torchrun_command`` prints the equivalent ``torchrun`` line (the module reads ``RANK``,
``WORLD_SIZE``, ``MASTER_ADDR``/``MASTER_PORT`` from the environment when no ``--store`` is given;
there ``--timeout`` is gloo's own timeout).
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import math
import os
import shlex
import shutil
import struct
import sys
import tempfile
import time
import zlib
from pathlib import Path
from typing import Callable

from co3cli.errors import Co3Error, CorruptDataError, InputError
from co3cli.simulate.ranks import Rank, beat_period, die_with_launcher, gloo_timeout, watch

MAGIC = b"CO3M"
_HEAD = struct.Struct("<4sIIIddddddBI")
DEFAULT_TIMEOUT = 300.0


def client_rank(c: int, world: int) -> int:
    """The rank hosting client ``c`` (ranks 1..world-1)."""
    return 1 + c % (world - 1)


def encode_message(r: int, msg) -> bytes:
    ent = math.nan if msg.entropy_bits is None else msg.entropy_bits
    pieces = list(msg.payloads) + [msg.buffers]
    head = _HEAD.pack(MAGIC, r, msg.client, len(pieces), msg.loss, msg.t_compute,
                      msg.t_compress, ent, msg.straggler_time, msg.recovered,
                      1 if msg.diverged else 0, msg.scale_fallbacks)
    lens = struct.pack(f"<{len(pieces)}I", *(len(p) for p in pieces))
    body = head + lens + b"".join(pieces)
    return body + struct.pack("<I", zlib.crc32(body))


def decode_message(data: bytes, r: int, client: int, rank: int, nlayers: int):
    """The ClientMsg in ``data``; CorruptDataError naming round, client and rank otherwise."""
    from co3cli.simulate.fl import ClientMsg

    where = f"round {r}: upload of client {client} from rank {rank}"
    if len(data) < _HEAD.size + 4:
        raise CorruptDataError(f"{where} is truncated ({len(data)} bytes)")
    body, (crc,) = data[:-4], struct.unpack("<I", data[-4:])
    if zlib.crc32(body) != crc:
        raise CorruptDataError(f"{where} failed its checksum")
    magic, rr, cc, n, loss, t_comp, t_cmp, ent, st, rec, div, fb = _HEAD.unpack_from(body, 0)
    if magic != MAGIC or rr != r or cc != client or n < 1 or (n != nlayers + 1 and not div):
        raise CorruptDataError(f"{where} is for round {rr}, client {cc}, {n} layers")
    pos = _HEAD.size
    if len(body) < pos + 4 * n:
        raise CorruptDataError(f"{where} is truncated")
    lens = struct.unpack_from(f"<{n}I", body, pos)
    pos += 4 * n
    if pos + sum(lens) != len(body):
        raise CorruptDataError(f"{where}: payload lengths do not add up")
    payloads = []
    for k in lens:
        payloads.append(bytes(body[pos:pos + k]))
        pos += k
    return ClientMsg(cc, payloads[:-1], loss, t_comp, t_cmp, None if math.isnan(ent) else ent,
                     diverged=bool(div), straggler_time=st, recovered=rec, scale_fallbacks=fb,
                     buffers=payloads[-1])


def _send_bytes(data: bytes, dst: int) -> None:
    import torch
    import torch.distributed as dist

    dist.send(torch.tensor([len(data)], dtype=torch.int64), dst=dst)
    dist.send(torch.frombuffer(bytearray(data), dtype=torch.uint8), dst=dst)


def _recv_bytes(src: int) -> bytes:
    import torch
    import torch.distributed as dist

    n = torch.zeros(1, dtype=torch.int64)
    dist.recv(n, src=src)
    if not 0 < int(n) < 1 << 34:
        raise CorruptDataError(f"rank {src} announced a message of {int(n)} bytes")
    buf = torch.empty(int(n), dtype=torch.uint8)
    dist.recv(buf, src=src)
    return buf.numpy().tobytes()


def _flat_params(sim):
    import torch

    return torch.cat([p.detach().reshape(-1) for p in sim.params])


def _set_params(sim, flat) -> None:
    import torch

    with torch.no_grad():
        pos = 0
        for p in sim.params:
            n = p.numel()
            p.copy_(flat[pos:pos + n].view_as(p))
            pos += n


def _broadcast_buffers(sim) -> None:
    """The server's buffers to the clients, when the buffer rule sends them down."""
    if not sim.buffers.sent_down:
        return
    import torch
    import torch.distributed as dist

    from co3cli.tasks.buffers import pack_buffers, unpack_buffers

    t = torch.frombuffer(bytearray(pack_buffers(sim.buffers.server)), dtype=torch.uint8)
    dist.broadcast(t, src=0)
    if dist.get_rank():
        sim.buffers.set_server(unpack_buffers(t.numpy().tobytes(), sim.buffers.live))


def _broadcast_status(status: int) -> int:
    import torch
    import torch.distributed as dist

    t = torch.tensor([status], dtype=torch.int64)
    dist.broadcast(t, src=0)
    return int(t)


def serve(cfg, out: Path, world: int, progress: bool = False) -> None:
    """Rank 0: the server's loop."""
    import torch.distributed as dist

    from co3cli.simulate.fl import Diverged, RunLog, Simulation
    from co3cli.simulate.flconfig import check_config, lr_at

    comp = check_config(cfg)
    sim = Simulation(cfg, comp)
    log = RunLog(sim, out, progress, engine="torchrun", extra_config={"world_size": world})
    released = True  # False while the clients wait for this round's status broadcast
    try:
        for r in range(cfg.rounds):
            released = False
            lr, who = lr_at(cfg, r), sim.participants()
            msgs, rejected = [], []
            for c in (int(c) for c in who):
                rank = client_rank(c, world)
                data = _recv_bytes(rank)
                try:
                    msgs.append(decode_message(data, r, c, rank, len(sim.params)))
                except CorruptDataError as exc:
                    print(f"co3: warning: {exc}; left out of the average", file=sys.stderr)
                    rejected.append((c, rank))
            if not msgs:
                raise InputError(f"round {r}: no upload arrived intact")
            row = sim.server_round(r, lr, who, msgs)
            row["rejected_uploads"] = len(rejected)
            log.round(row)
            if rejected and comp.receiver_state:
                c, rank = rejected[0]
                raise Diverged(f"round {r}: the upload of client {c} from rank {rank} failed its "
                               f"checksum; {comp.id}'s decoder state for it no longer matches "
                               "the client's, so the run stops here")
            stop = 1 if r == cfg.rounds - 1 else 0
            _broadcast_status(stop)
            released = True
            if not stop:
                dist.broadcast(_flat_params(sim), src=0)
                _broadcast_buffers(sim)
    except Diverged as exc:
        log.stopped = str(exc)
    finally:
        if not released:  # stopping before this round's broadcast: release the clients
            try:
                _broadcast_status(1)
            except Exception:  # noqa: BLE001 - the group may be broken already
                pass
    try:
        log.finish()
    except Diverged:
        pass  # summary.json says why; the launcher reports it


def work(cfg, out: Path, rank: int, world: int) -> None:
    """Ranks 1..W: run this rank's clients every round."""
    import torch.distributed as dist

    from co3cli.simulate.fl import Simulation, open_dump, write_dump_row
    from co3cli.simulate.flconfig import check_config, lr_at

    comp = check_config(cfg)
    sim = Simulation(cfg, comp)
    writer = open_dump(sim, out, "torchrun") if client_rank(cfg.dump_client, world) == rank \
        else None
    flat = _flat_params(sim)
    try:
        for r in range(cfg.rounds):
            lr, who = lr_at(cfg, r), sim.participants()
            for c in (int(c) for c in who):
                if client_rank(c, world) != rank:
                    continue
                msg = sim.client_round(c, r, lr)
                write_dump_row(writer, sim, r, msg.loss, lr)
                _send_bytes(encode_message(r, msg), 0)
            if _broadcast_status(0):
                break
            dist.broadcast(flat, src=0)
            _set_params(sim, flat)
            _broadcast_buffers(sim)
    finally:
        if writer is not None:
            writer.close()


# -- launching -------------------------------------------------------------------------------------
def torchrun_command(cfg_path: str | os.PathLike, out: str | os.PathLike, nproc: int,
                     nnodes: int = 1, endpoint: str = "HOST:29500") -> str:
    """The ``torchrun`` line that runs the same job over ``nnodes`` machines."""
    return (f"OMP_NUM_THREADS=1 torchrun --nnodes={nnodes} --nproc-per-node={nproc} "
            f"--rdzv-backend=c10d --rdzv-endpoint={endpoint} -m co3cli.simulate.dist "
            f"--config {shlex.quote(str(cfg_path))} --out {shlex.quote(str(out))}")


def launch(cfg, out: str | os.PathLike, nproc: int, *, overwrite: bool = False,
           timeout: float = DEFAULT_TIMEOUT, progress: bool = False,
           on_start: Callable[[list], None] | None = None):
    """Run ``cfg`` on ``nproc`` local processes (1 server + nproc-1 clients); an FLResult.

    A rank that exits early, or sends no heartbeat for ``timeout`` seconds, stops the job: every
    rank is killed and one InputError names it. ``on_start`` gets the Popen objects."""
    from co3cli.simulate.fl import STALE, Diverged, FLResult, prepare_output
    from co3cli.simulate.flconfig import check_config

    check_config(cfg)
    if isinstance(nproc, bool) or not isinstance(nproc, int) or nproc < 2:
        raise InputError(f"--nproc {nproc!r} must be >= 2 (a server and at least one client)")
    out = prepare_output(out, overwrite)
    out.mkdir(parents=True, exist_ok=True)
    for stale in STALE:  # before any rank starts writing
        (out / stale).unlink(missing_ok=True)
    config = (json.dumps(cfg.to_dict()) + "\n").encode()
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    tmp = Path(tempfile.mkdtemp(prefix="co3-fl-")).resolve()  # the store and the ranks' logs
    ranks: list[Rank] = []
    try:
        for rank in range(nproc):
            cmd = [sys.executable, "-m", "co3cli.simulate.dist", "--config", "-",
                   "--out", str(out), "--rank", str(rank), "--world", str(nproc),
                   "--store", str(tmp / "store"), "--timeout", str(timeout)]
            if rank == 0 and progress:
                cmd.append("--progress")
            ranks.append(Rank.start(rank, cmd, config, tmp / f"rank{rank}.log", env=env,
                                    stderr_to_log=not (rank == 0 and progress)))
        if on_start is not None:
            on_start([r.proc for r in ranks])
        failure = watch(ranks, timeout)
    finally:
        for r in ranks:
            r.kill()
        tails = [r.close() for r in ranks]
        shutil.rmtree(tmp, ignore_errors=True)
    for rank, tail in enumerate(tails):
        if rank and tail.startswith("co3: warning:"):
            print(tail, file=sys.stderr)
    if failure is not None:
        _raise_failure(out, *failure, tails, timeout)
    summary = out / "summary.json"
    if not summary.exists():
        raise InputError(f"the torchrun job ended without writing {summary}")
    res = json.loads(summary.read_text())
    if res["stopped"] != "finished":
        raise Diverged(res["stopped"])
    return FLResult(**res)


def _raise_failure(out: Path, who: Rank, silent: bool, tails: list[str], timeout: float):
    done = _rounds_done(out)
    held = f"metrics.csv holds the {done} finished round(s)"
    if silent:
        raise InputError(f"rank {who.rank} stopped answering (no message for {timeout:g} s); "
                         f"the other ranks were stopped during round {done}; {held}")
    rc = who.proc.returncode
    how = f"was killed by signal {-rc}" if rc < 0 else f"exited with code {rc}"
    why = f": {tails[who.rank]}" if tails[who.rank] else ""
    raise InputError(f"rank {who.rank} {how} during round {done}{why}; {held}")


def _rounds_done(out: Path) -> int:
    try:
        with open(out / "metrics.csv") as f:
            return max(sum(1 for _ in f) - 1, 0)
    except OSError:
        return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="co3 simulate fl, one rank of the torchrun engine")
    ap.add_argument("--config", required=True, help="JSON or TOML config file; - for stdin")
    ap.add_argument("--out", required=True)
    ap.add_argument("--rank", type=int, default=None)
    ap.add_argument("--world", type=int, default=None)
    ap.add_argument("--store", default=None, help="FileStore path (default: env:// rendezvous)")
    ap.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT)
    ap.add_argument("--progress", action="store_true")
    ap.add_argument("--launcher-pid", type=int, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--beat-fd", type=int, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    launched = args.launcher_pid is not None
    if launched:  # first of all: no orphan if the launcher is gone
        die_with_launcher(args.launcher_pid, args.beat_fd, beat_period(args.timeout))
    try:
        cfg = _read_config(args.config)
        _run_rank(cfg, args, launched)
    except (Co3Error, OSError, RuntimeError, ValueError, TypeError) as exc:
        msg = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        # launched: the log file (stdout) holds it, even with rank 0's stderr on the terminal
        print(f"co3: error: {msg}", file=sys.stdout if launched else sys.stderr, flush=True)
        return 1
    return 0


def _read_config(path: str):
    from co3cli.simulate.flconfig import FLConfig, load_config_file

    if path == "-":
        try:
            doc = json.loads(sys.stdin.buffer.read())
        except ValueError as e:
            raise InputError(f"the config on stdin is not valid JSON ({e})") from None
        return FLConfig.from_dict(doc, "config on stdin")
    return FLConfig.from_dict(load_config_file(path), f"config {path}")


def _run_rank(cfg, args, launched: bool) -> None:
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    # launched: the launcher's heartbeat watch names a silent rank after --timeout s; gloo's
    # own timeout is only a backstop behind it, so a busy peer does not fail the job
    timeout = _dt.timedelta(seconds=gloo_timeout(args.timeout) if launched else args.timeout)
    if args.store:
        store = dist.FileStore(args.store, args.world)
        if launched:
            _arrive(store, args.world)
        dist.init_process_group("gloo", store=store, rank=args.rank, world_size=args.world,
                                timeout=timeout)
    else:
        dist.init_process_group("gloo", timeout=timeout)
    rank, world = dist.get_rank(), dist.get_world_size()
    if world < 2:
        raise InputError("the torchrun engine needs at least 2 ranks")
    try:
        if rank == 0:
            serve(cfg, Path(args.out), world, progress=args.progress)
        else:
            work(cfg, Path(args.out), rank, world)
    finally:
        dist.destroy_process_group()


def _arrive(store, world: int) -> None:
    """Wait, without a deadline, until every rank has started (however loaded the machine):
    the launcher watches them, so the rendezvous proper never waits for a slow starter."""
    store.add("co3/arrived", 1)
    while store.add("co3/arrived", 0) < world:
        time.sleep(0.02)


if __name__ == "__main__":
    sys.exit(main())
