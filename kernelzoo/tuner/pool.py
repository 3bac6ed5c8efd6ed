"""The tuner's side of the workers: one long-lived subprocess per (plugin, device).

A worker that dies (segfault, abort, illegal address) or does not answer a trial within
the timeout is killed; that trial fails with kind ``crash`` or ``timeout`` and the next
request for the same plugin starts a fresh worker. Workers are started together, so their
imports (torch: ~2 s each) overlap.

Workers die with the tuner: each asks the kernel for SIGKILL when its parent dies
(``PR_SET_PDEATHSIG``), so a tuner killed outright leaves no worker running its trial. The Optuna
trial such a tuner left RUNNING is marked FAIL by the next tuner to open the study
(:func:`fail_interrupted_trials`): each trial names the tuner that runs it (host and pid).
"""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kernelzoo.db.models import Outcome
from kernelzoo.errors import KernelzooError
from kernelzoo.timing import Load, Timing

if TYPE_CHECKING:
    import optuna

STARTUP_TIMEOUT_S = 300.0  # importing torch and triton on a cold file cache can take a minute
BUSY_RETRIES = 2  # a trial timed under load is timed again this many times, after BUSY_WAIT_S each
BUSY_WAIT_S = 1.0
TUNER_ATTR = "tuner"  # the Optuna trial's user attribute naming the tuner that runs it: "host:pid"


class WorkerLost(KernelzooError, RuntimeError):
    """A worker died or timed out; ``kind`` is 'crash' or 'timeout'."""

    def __init__(self, kind: Outcome, message: str) -> None:
        super().__init__(message)
        self.kind = kind


@dataclass(frozen=True)
class TrialResult:
    """A trial's timing, or why it failed."""

    timing: Timing | None
    outcome: Outcome = Outcome.OK
    message: str = ""
    busy: str = ""  # why the timing was taken under a load that makes it unusable ('' if it was not)

    @property
    def ok(self) -> bool:
        return self.outcome is Outcome.OK


class Worker:
    """One ``python -m kernelzoo.tuner.worker`` process; its stderr goes to a temporary file."""

    def __init__(self) -> None:
        self.log = tempfile.TemporaryFile()  # noqa: SIM115 - lives as long as the worker; close() closes it
        self.proc = subprocess.Popen([sys.executable, "-m", "kernelzoo.tuner.worker"], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=self.log,
                                     env={**os.environ, "KERNELZOO_TUNER_PID": str(os.getpid())})
        self._buffer = b""

    def request(self, msg: dict[str, Any], timeout: float) -> dict[str, Any]:
        """Send ``msg`` and wait up to ``timeout`` seconds for the reply; WorkerLost if none comes."""
        self.send(msg)
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                self.kill()
                raise WorkerLost(Outcome.TIMEOUT, f"no answer within {timeout:g} s; the worker was killed")
            reply = self.read(left)
            if reply is not None:
                return reply

    def send(self, msg: dict[str, Any]) -> None:
        """Send ``msg`` without waiting for the reply (:meth:`read` takes it); WorkerLost if the worker is gone."""
        try:
            assert self.proc.stdin is not None, "started with a pipe"
            self.proc.stdin.write((json.dumps(msg) + "\n").encode())
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            raise self._lost() from None

    @property
    def stdout(self) -> Any:
        """The pipe replies come on, for ``select`` over several workers."""
        return self.proc.stdout

    def read(self, timeout: float = 0.0) -> dict[str, Any] | None:
        """The next reply if it is complete within ``timeout`` seconds (reading what has arrived), else None;
        WorkerLost if the worker died."""
        if b"\n" not in self._buffer:
            ready, _, _ = select.select([self.proc.stdout], [], [], max(timeout, 0.0))
            if ready:
                assert self.proc.stdout is not None, "started with a pipe"
                chunk = os.read(self.proc.stdout.fileno(), 1 << 16)
                if not chunk:
                    raise self._lost()
                self._buffer += chunk
        if b"\n" not in self._buffer:
            return None
        line, _, self._buffer = self._buffer.partition(b"\n")
        return json.loads(line)

    def _lost(self) -> WorkerLost:
        try:
            code = self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.kill()
            code = self.proc.returncode
        how = f"signal {signal.Signals(-code).name}" if code is not None and code < 0 else f"exit code {code}"
        return WorkerLost(Outcome.CRASH, f"the worker died ({how}); its last output:\n{self.log_tail()}")

    def log_tail(self, size: int = 2000) -> str:
        """The end of the worker's stderr."""
        self.log.flush()
        self.log.seek(0, os.SEEK_END)
        self.log.seek(max(0, self.log.tell() - size))
        return self.log.read().decode(errors="replace").strip()

    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def ask_to_exit(self) -> None:
        """Tell the worker to exit, without waiting for it."""
        stdin = self.proc.stdin
        if self.proc.poll() is None and stdin is not None and not stdin.closed:
            try:
                stdin.write(b'{"cmd": "exit"}\n')
                stdin.close()
            except OSError:
                self.kill()

    def close(self) -> None:
        """Ask the worker to exit; kill it if it has not within 5 s."""
        self.ask_to_exit()
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.kill()
        self.log.close()


class WorkerPool:
    """Workers by (plugin, device), started on first use and replaced when lost."""

    def __init__(self, trial_timeout_s: float, startup_timeout_s: float = STARTUP_TIMEOUT_S,
                 busy_retries: int = BUSY_RETRIES, busy_wait_s: float = BUSY_WAIT_S) -> None:
        self.trial_timeout_s = trial_timeout_s
        self.startup_timeout_s = startup_timeout_s
        self.busy_retries, self.busy_wait_s = busy_retries, busy_wait_s
        self._workers: dict[tuple[str, str], Worker] = {}
        self._started: dict[tuple[str, str], bool] = {}

    def start(self, plugins: list[str], device: str) -> None:
        """Launch the workers of ``plugins`` now, without waiting for them (their imports overlap)."""
        for plugin in plugins:
            if (plugin, device) not in self._workers:
                self._workers[(plugin, device)] = Worker()
                self._started[(plugin, device)] = False

    def _worker(self, plugin: str, device: str) -> Worker:
        key = (plugin, device)
        if key not in self._workers or not self._workers[key].alive():
            if key in self._workers:
                self._workers.pop(key).close()
            self.start([plugin], device)
        worker = self._workers[key]
        if not self._started[key]:
            reply = worker.request({"cmd": "hello", "device": device}, self.startup_timeout_s)
            if not reply.get("ok"):
                worker.kill()
                raise WorkerLost(Outcome.ERROR, f"the worker did not start: {reply.get('message')}")
            self._started[key] = True
        return worker

    def request(self, plugin: str, device: str, msg: dict[str, Any], timeout: float | None = None) -> dict[str, Any]:
        """The reply of the (plugin, device) worker; WorkerLost if it died or timed out (it is then dropped)."""
        worker = self._worker(plugin, device)
        try:
            return worker.request(msg, timeout if timeout is not None else self.trial_timeout_s)
        except WorkerLost:
            self._workers.pop((plugin, device)).close()
            raise

    def hello(self, plugin: str, device: str) -> dict[str, Any]:
        return self.request(plugin, device, {"cmd": "hello", "device": device}, self.startup_timeout_s)

    def trial(self, plugin: str, device: str, msg: dict[str, Any]) -> TrialResult:
        """Run one trial; a lost worker is a failed trial, never an exception. A timing the worker found taken under
        load (``busy``) is taken again after a pause, ``busy_retries`` times at most; the last one is returned."""
        for attempt in range(self.busy_retries + 1):
            if attempt:
                time.sleep(self.busy_wait_s)
            try:
                reply = self.request(plugin, device, {"cmd": "trial", **msg})
            except WorkerLost as lost:
                return TrialResult(None, lost.kind, str(lost))
            if not reply.get("ok"):
                return TrialResult(None, Outcome(reply.get("kind", "error")), reply.get("message", ""))
            load = Load(**reply["load"]) if reply.get("load") else None
            result = TrialResult(Timing(tuple(reply["times_ms"]), load=load), busy=reply.get("busy") or "")
            if not result.busy:
                break
        return result

    def close(self) -> None:
        """Stop every worker; they exit (tearing torch down: ~1 s each) side by side."""
        for worker in self._workers.values():
            worker.ask_to_exit()
        for worker in self._workers.values():
            worker.close()
        self._workers.clear()

    def __enter__(self) -> WorkerPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def tuner_tag() -> str:
    """This tuner, as a running trial names it: ``host:pid``."""
    return f"{socket.gethostname()}:{os.getpid()}"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie (dead, not yet reaped) is not running a trial
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True


def fail_interrupted_trials(study: optuna.Study) -> int:
    """Mark FAIL the RUNNING trials of ``study`` whose tuner, on this host, is no longer alive; how many.

    A trial of a tuner on another host, or of a live one here, is left as it is."""
    from optuna.trial import TrialState

    host = socket.gethostname()
    failed = 0
    for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        owner = str(t.user_attrs.get(TUNER_ATTR, ""))
        name, _, pid = owner.rpartition(":")
        if name != host or not pid.isdigit() or _alive(int(pid)):
            continue
        try:
            study._storage.set_trial_state_values(t._trial_id, TrialState.FAIL)
        except RuntimeError:  # another tuner ended it meanwhile
            continue
        failed += 1
    return failed
