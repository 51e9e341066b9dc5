"""The local processes of the torchrun engine: started, watched and stopped by their launcher.

::

    launcher (dist.launch)                         rank k (python -m co3cli.simulate.dist)
      pipe k ----------- write end (pass_fds) -----> heartbeat thread: b"." every beat_period
      stdin  ----------- the config, as JSON ------> read once at start (no file to go missing)
      watch(): a rank exited != 0      -> the job fails naming it (killed by a signal first)
               no heartbeat for timeout -> "rank k stopped answering (no message for T s)"
               then every rank is killed, the launcher reports one line

    rank k dies with its launcher: PR_SET_PDEATHSIG (Linux, set first thing), then a check that
    its parent is still the launcher's pid it was given (the launcher may have died before the
    prctl), and the heartbeat thread exits the rank when its parent changes or the pipe breaks
    (the portable fallback where prctl is unavailable).

A stopped (SIGSTOP) or wedged rank stops beating while its peers, blocked in a collective, keep
beating: the silent one is named, not the one whose receive timed out. The peers' own gloo
timeout is a backstop set well above ``timeout`` (``gloo_timeout``), so the launcher always
speaks first. The launcher does not count time during which it did not run itself (stopped
with the whole job by Ctrl-Z, or starved), so a resumed job is not blamed on a rank.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from co3cli.errors import InputError

PR_SET_PDEATHSIG = 1
POLL = 0.05  # seconds between two looks of the launcher at its ranks


def beat_period(timeout: float) -> float:
    """Seconds between two heartbeats of a rank: a small fraction of ``timeout``."""
    return min(0.5, timeout / 8)


def gloo_timeout(timeout: float) -> float:
    """The collectives' timeout of a launched rank: a backstop behind the launcher's watch."""
    return 2 * timeout + 30


# -- in a rank ------------------------------------------------------------------------------------
def die_with_launcher(launcher_pid: int, beat_fd: int | None, period: float) -> None:
    """Make this process end with ``launcher_pid`` (its parent) and beat on ``beat_fd``."""
    if sys.platform.startswith("linux"):
        try:
            import ctypes

            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
        except (OSError, AttributeError):
            pass  # the thread below still notices
    if os.getppid() != launcher_pid:  # the launcher died before the prctl took effect
        os._exit(1)

    def beat() -> None:
        while True:
            if os.getppid() != launcher_pid:
                os._exit(1)
            if beat_fd is not None:
                try:
                    os.write(beat_fd, b".")
                except OSError:  # the launcher closed its end: it is gone
                    os._exit(1)
            time.sleep(period)

    threading.Thread(target=beat, name="co3-heartbeat", daemon=True).start()


# -- in the launcher ------------------------------------------------------------------------------
class Rank:
    """One started rank: its process, its log file and the read end of its heartbeat pipe."""

    def __init__(self, rank: int, proc: subprocess.Popen, log, beats: int):
        self.rank, self.proc, self.log, self.beats = rank, proc, log, beats
        self.last = time.monotonic()

    @classmethod
    def start(cls, rank: int, cmd: list[str], config: bytes, log_path: Path, *,
              env: dict[str, str], stderr_to_log: bool = True) -> "Rank":
        """Start ``cmd`` (to which ``--launcher-pid``/``--beat-fd`` are added), hand it
        ``config`` on its stdin; InputError naming the rank when it cannot start."""
        log = open(log_path, "w+")
        rfd, wfd = os.pipe()
        cmd = [*cmd, "--launcher-pid", str(os.getpid()), "--beat-fd", str(wfd)]
        try:
            proc = subprocess.Popen(cmd, env=env, stdin=subprocess.PIPE, stdout=log,
                                    stderr=log if stderr_to_log else None, pass_fds=(wfd,))
        except OSError as e:
            log.close()
            os.close(rfd)
            raise InputError(f"cannot start rank {rank}: {e.strerror or e}") from None
        finally:
            os.close(wfd)
        os.set_blocking(rfd, False)
        try:
            proc.stdin.write(config)
            proc.stdin.close()
        except OSError:
            pass  # it died already; watch() reports it
        return cls(rank, proc, log, rfd)

    def read_beats(self, now: float) -> None:
        try:
            while os.read(self.beats, 4096):
                self.last = now
        except BlockingIOError:
            pass

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()

    def close(self) -> str:
        """Wait for the process; its log's last line."""
        self.proc.wait()
        if self.proc.stdin is not None and not self.proc.stdin.closed:
            try:
                self.proc.stdin.close()
            except OSError:
                pass
        os.close(self.beats)
        self.log.flush()
        self.log.seek(0)
        lines = [ln.strip() for ln in self.log.read().splitlines() if ln.strip()]
        self.log.close()
        return lines[-1] if lines else ""


def watch(ranks: list[Rank], timeout: float) -> tuple[Rank, bool] | None:
    """Wait for the ranks: None when all exited 0; else the one to blame and whether it
    stopped answering (no heartbeat for ``timeout`` s) rather than exited."""
    tick = time.monotonic()
    while True:
        now = time.monotonic()
        if now - tick > 1.0:  # this process did not run meanwhile: nobody was watched
            for r in ranks:
                r.last += now - tick
        tick = now
        for r in ranks:
            r.read_beats(now)
        codes = [r.proc.poll() for r in ranks]
        failed = [r for r, c in zip(ranks, codes) if c not in (None, 0)]
        if failed:  # a rank killed by a signal caused the others' errors
            return min(failed, key=lambda r: (r.proc.returncode >= 0, r.rank)), False
        if all(c == 0 for c in codes):
            return None
        silent = [r for r, c in zip(ranks, codes) if c is None and now - r.last > timeout]
        if silent:
            return max(silent, key=lambda r: now - r.last), True
        time.sleep(POLL)
