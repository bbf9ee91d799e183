"""The parent's side of a consumer child process (`workloads.groups.consumer`).

`ConsumerChild` starts a Python running the `main` of a given module (imported, not run
with `-m`, so that runpy never warns of a double import), or a given command line (the
Java client's, `workloads.kafka.java`), writes its configuration,
and sends requests with increasing ids; a reader thread hands each reply to the request
waiting for its id, so a request that timed out (its child SIGSTOPped, say) can never
take the answer of a later one; the callback events of a reply that came too late go
with the next reply, so none is lost. A request that gets no reply in its timeout raises
`TimeoutError`; a child that exited raises `ChildGone`; a reply with an error raises
`MemberError` (which keeps the callback events of that reply). The child's stderr goes to
the client logger (`kchaos.clients.group`).

`ConsumerChildren` is the registry one workload's clients share: it starts children,
lists the live ones (`pids()`, what a nemesis may SIGSTOP), forgets a child once its
client lets it go, and kills whatever is left at teardown. A child is started with the
module whose `main` serves it (a library's group member, `workloads.kafka.confluent_member`
say; the transfer workers run `workloads.transfer.child`). An abandoned child (`abandon`)
gets its stdin closed and is left to finish what it was doing (a zombie) until it exits
by itself or the teardown.
"""

from __future__ import annotations

import json
import logging
import os
import queue
import signal
import subprocess
import sys
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

__all__ = ["ChildGone", "ConsumerChild", "ConsumerChildren", "MemberError"]

log = logging.getLogger("kchaos.clients.group")
PROJECT_ROOT = Path(__file__).resolve().parents[2]
REAP_SECONDS = 5.0


class ChildGone(Exception):
    """The consumer child exited (or was killed) before answering."""


class MemberError(Exception):
    """The child answered a request with an error."""

    def __init__(self, message: str, events: list[dict[str, Any]]) -> None:
        super().__init__(message)
        self.events = events


def _environment() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        part for part in (str(PROJECT_ROOT), env.get("PYTHONPATH", "")) if part)
    return env


def command_of(main: str | Sequence[str]) -> tuple[str, ...]:
    """The command line of a child: a Python running module `main`'s `main`, or `main`
    itself when it is a command line."""
    if isinstance(main, str):
        return (sys.executable, "-c", f"from {main} import main; main()")
    return tuple(main)


def _spawn(command: Sequence[str]) -> subprocess.Popen:
    return subprocess.Popen(list(command), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, bufsize=1, env=_environment(),
                            cwd=PROJECT_ROOT)


class ChildConfig(Protocol):
    """What a child is started with: its first line, and its group (for the logs)."""

    group: str

    def to_json(self) -> dict[str, Any]: ...


class ConsumerChild:
    """One running member process; see the module docstring."""

    def __init__(self, config: ChildConfig, main: str | Sequence[str],
                 process: subprocess.Popen | None = None) -> None:
        self.config = config
        self.process = process if process is not None else _spawn(command_of(main))
        self._waiting: dict[int, queue.Queue] = {}
        self._lock = threading.Lock()
        self._next_id = 0
        self._gone = False
        self._late_events: list[dict[str, Any]] = []
        threading.Thread(target=self._read_replies, name=f"child-{self.pid}",
                         daemon=True).start()
        threading.Thread(target=self._read_stderr, name=f"child-{self.pid}-err",
                         daemon=True).start()
        self._write(config.to_json())

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def alive(self) -> bool:
        return self.process.poll() is None

    def _write(self, message: Mapping[str, Any]) -> None:
        try:
            self.process.stdin.write(json.dumps(message) + "\n")
            self.process.stdin.flush()
        except (BrokenPipeError, ValueError, OSError) as error:
            raise self._gone_error() from error

    def _gone_error(self) -> ChildGone:
        code = self.process.poll()
        return ChildGone(f"consumer child {self.pid} exited"
                         + (f" with code {code}" if code is not None else ""))

    def _read_replies(self) -> None:
        for line in self.process.stdout:
            try:
                reply = json.loads(line)
            except json.JSONDecodeError:
                log.info("consumer %s printed: %s", self.pid, line.rstrip())
                continue
            with self._lock:
                waiting = self._waiting.pop(reply.get("id"), None)
                if waiting is None:
                    self._late_events.extend(reply.get("events") or [])
                    continue
                if self._late_events:
                    reply["events"] = [*self._late_events, *(reply.get("events") or [])]
                    self._late_events = []
            waiting.put(reply)
        with self._lock:
            self._gone = True
            waiting_now, self._waiting = list(self._waiting.values()), {}
        for waiting in waiting_now:
            waiting.put(None)

    def _read_stderr(self) -> None:
        for line in self.process.stderr:
            log.info("consumer %s (%s): %s", self.pid, self.config.group, line.rstrip())

    def request(self, op: str, timeout: float, **fields: Any) -> dict[str, Any]:
        """The child's reply to one request: {"result": ..., "events": [...]}."""
        answer: queue.Queue = queue.Queue(1)
        with self._lock:
            if self._gone:
                raise self._gone_error()
            self._next_id += 1
            ident = self._next_id
            self._waiting[ident] = answer
        self._write({"id": ident, "op": op, **fields})
        try:
            reply = answer.get(timeout=timeout)
        except queue.Empty:
            with self._lock:
                self._waiting.pop(ident, None)
            try:
                reply = answer.get_nowait()
            except queue.Empty:
                raise TimeoutError(f"consumer child {self.pid}: no answer to {op} in "
                                   f"{timeout} s") from None
        if reply is None:
            raise self._gone_error()
        if "error" in reply:
            raise MemberError(reply["error"], reply.get("events") or [])
        return reply

    def kill(self) -> None:
        """SIGKILL (a stopped child too) and reap."""
        if self.alive:
            try:
                os.kill(self.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self._reap()

    def _reap(self) -> None:
        _reap(self.process)

    def abandon(self) -> None:
        """Close its stdin: it finishes what it was doing, then exits by itself."""
        try:
            self.process.stdin.close()
        except (OSError, ValueError):
            pass

    def close(self, timeout: float) -> dict[str, Any] | None:
        """Close the member (it leaves its group), killing the child if that takes longer
        than `timeout` or fails; the close's reply, or None."""
        reply = None
        try:
            reply = self.request("close", timeout)
        except (TimeoutError, ChildGone, MemberError) as error:
            log.info("consumer child %s: close: %s; killing it", self.pid, error)
            self.kill()
            return None
        self._reap()
        return reply


def _reap(process: subprocess.Popen) -> None:
    """Wait for an exiting process and close its pipes."""
    try:
        process.wait(REAP_SECONDS)
    except subprocess.TimeoutExpired:
        log.warning("consumer child %s did not exit", process.pid)
    for stream in (process.stdin, process.stdout, process.stderr):
        try:
            stream.close()
        except (OSError, ValueError):
            pass


class ConsumerChildren:
    """The consumer children of one workload (shared by all its clients). With `spares`
    each command keeps that many processes started ahead of need (`prepare`), waiting for
    their configuration, so a new child answers without the wait of a runtime's start (a
    JVM takes a second or more on busy cores)."""

    def __init__(self, spares: int = 0) -> None:
        self._lock = threading.Lock()
        self._live: dict[int, ConsumerChild] = {}
        self._abandoned: list[ConsumerChild] = []
        self._spare_count = spares
        self._spares: dict[tuple[str, ...], list[subprocess.Popen]] = {}

    def start(self, config: ChildConfig, main: str | Sequence[str]) -> ConsumerChild:
        child = ConsumerChild(config, main, self._spare(command_of(main)))
        with self._lock:
            self._live[child.pid] = child
            self._abandoned = [c for c in self._abandoned if c.alive]
        return child

    def prepare(self, main: str | Sequence[str]) -> None:
        """Start spares of `main` until it has as many as this registry keeps."""
        command = command_of(main)
        with self._lock:
            waiting = self._spares.setdefault(command, [])
            exited = [p for p in waiting if p.poll() is not None]
            waiting[:] = [p for p in waiting if p not in exited]
            while len(waiting) < self._spare_count:
                waiting.append(_spawn(command))
        for process in exited:
            _reap(process)

    def _spare(self, command: tuple[str, ...]) -> subprocess.Popen | None:
        """A live spare of `command` (others started to keep the count), or None."""
        if not self._spare_count:
            return None
        with self._lock:
            waiting = self._spares.get(command, [])
            ready = waiting.pop(0) if waiting else None
        self.prepare(command)
        if ready is not None and ready.poll() is not None:
            _reap(ready)
            return None
        return ready

    def release(self, child: ConsumerChild) -> None:
        """The child's client lets it go (it is being closed or killed)."""
        with self._lock:
            self._live.pop(child.pid, None)

    def abandon(self, child: ConsumerChild) -> None:
        """The child's client gives it up without closing it (`ConsumerChild.abandon`); it
        is killed at the teardown if it is still running then."""
        self.release(child)
        child.abandon()
        with self._lock:
            self._abandoned.append(child)

    def pids(self) -> list[int]:
        with self._lock:
            return sorted(pid for pid, child in self._live.items() if child.alive)

    def kill_all(self) -> None:
        """Kill every child and spare."""
        with self._lock:
            children = [*self._live.values(), *self._abandoned]
            spares = [p for waiting in self._spares.values() for p in waiting]
            self._live, self._abandoned, self._spares = {}, [], {}
        for child in children:
            child.kill()
        for spare in spares:
            spare.kill()
            _reap(spare)
