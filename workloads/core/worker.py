"""The interpreter: runs a generator with one thread per worker, after Jepsen's
`generator/interpreter.clj`.

The main loop owns the (pure) generator and the context. It asks for the next op,
waits until the op's time, and hands it to the worker thread of the op's process;
each completion comes back to the main loop, which updates the generator (every
invocation and completion is an update). Worker threads write the invocation and
the completion to the history the moment they happen.

Client workers: a client opened per process; an exception, an invalid completion
or a timeout (`op_timeout`) becomes `info` with an `error`; after any `info` the
worker closes its client and the thread continues as a new process (process +
concurrency) with a fresh client. A client that cannot be opened fails the op
(`fail`: nothing was sent). A client that stamps times of its own (a consumer's
rebalance callbacks) gets the history's clock: `client.use_clock(clock)`, when the
opened client has that method. The nemesis worker (process "nemesis") runs nemesis ops
through `Nemesis.invoke(test, op) -> op` and records both as `info`. `sleep` ops
only make their thread sleep. `time_limit` bounds the whole run; ops still open
then are left without a completion (they may or may not have happened).
"""

from __future__ import annotations

import concurrent.futures
import queue
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from checker.history import FAULT_STOPS, HEAL, HistoryWriter, fault_took_effect
from workloads.core import generator as gen
from workloads.core.client import Client, completed, validate

__all__ = ["Interpreter", "Nemesis", "NoopNemesis", "Progress"]

NS_PER_SECOND = 1_000_000_000
RATE_WINDOW_SECONDS = 5.0
IDLE_WAIT_SECONDS = 0.05
STOP = object()


class Nemesis(Protocol):
    def invoke(self, test: Any, op: Mapping[str, Any]) -> Mapping[str, Any]: ...


class NoopNemesis:
    """Does nothing; answers every op with its value unchanged."""

    def invoke(self, test: Any, op: Mapping[str, Any]) -> Mapping[str, Any]:
        return dict(op)


@dataclass
class Progress:
    """Live counters, safe to read from another thread (`snapshot`)."""

    started: float = field(default_factory=time.monotonic)
    invoked: int = 0
    ok: int = 0
    fail: int = 0
    info: int = 0
    nemesis_ops: int = 0
    faults: dict[str, Any] = field(default_factory=dict)
    instant: dict[str, int] = field(default_factory=dict)  # fault -> times, no stop op
    _recent: deque = field(default_factory=deque)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def invocation(self) -> None:
        with self._lock:
            self.invoked += 1

    def completion(self, kind: str) -> None:
        now = time.monotonic()
        with self._lock:
            setattr(self, kind, getattr(self, kind) + 1)
            self._recent.append(now)
            while self._recent and self._recent[0] < now - RATE_WINDOW_SECONDS:
                self._recent.popleft()

    def nemesis(self, op: Mapping[str, Any]) -> None:
        f = op.get("f")
        with self._lock:
            self.nemesis_ops += 1
            if f == HEAL:
                self.faults.clear()
            elif f in FAULT_STOPS:
                if fault_took_effect(op):
                    self.faults[f] = dict(op)
            elif f in FAULT_STOPS.values():
                for start, stop in FAULT_STOPS.items():
                    if f == stop:
                        self.faults.pop(start, None)
            elif fault_took_effect(op):
                name = str(op.get("fault") or f)
                self.instant[name] = self.instant.get(name, 0) + 1

    def snapshot(self) -> dict[str, Any]:
        now = time.monotonic()
        with self._lock:
            window = min(RATE_WINDOW_SECONDS, max(now - self.started, 1e-9))
            recent = sum(1 for t in self._recent if t >= now - window)
            return {"elapsed": now - self.started, "ops_per_second": recent / window,
                    "invoked": self.invoked, "ok": self.ok, "fail": self.fail,
                    "info": self.info, "nemesis_ops": self.nemesis_ops,
                    "faults": dict(self.faults), "instant_faults": dict(self.instant)}


class Interpreter:
    """Runs generators against `client` (a factory value opened per process) and
    `nemesis`, recording into `history`. `nodes[i % len(nodes)]` is client thread i's
    node. `clock()` is ns since the test started (the history's times)."""

    def __init__(self, test: Any, client: Client, history: HistoryWriter, *,
                 concurrency: int, nemesis: Nemesis | None = None,
                 nodes: Sequence[str] = (), op_timeout: float = 10.0,
                 clock: Callable[[], int] | None = None) -> None:
        if concurrency < 1:
            raise ValueError("concurrency must be at least 1")
        self.test = test
        self.client = client
        self.history = history
        self.concurrency = concurrency
        self.nemesis = nemesis if nemesis is not None else NoopNemesis()
        self.nodes = tuple(nodes)
        self.op_timeout = op_timeout
        start = time.monotonic_ns()
        self.clock = clock if clock is not None else (lambda: time.monotonic_ns() - start)
        self.progress = Progress()
        self.marks: set[str] = set()
        self._completions: queue.Queue = queue.Queue()

    # -- client setup and teardown ---------------------------------------------------------

    def setup_clients(self) -> None:
        """`setup` once, on a client opened on the first node (e.g. topic creation)."""
        self._once(lambda client: client.setup(self.test))

    def teardown_clients(self) -> None:
        self._once(lambda client: client.teardown(self.test))

    def _once(self, action: Callable[[Client], None]) -> None:
        client = self.client.open(self.test, self.nodes[0] if self.nodes else None)
        try:
            action(client)
        finally:
            client.close(self.test)

    # -- the main loop ---------------------------------------------------------------------

    def run(self, generator: Any, time_limit: float | None = None) -> None:
        """Run `generator` until it is exhausted (and every op has completed) or
        `time_limit` seconds have passed; then stop the workers."""
        ctx = gen.Context.initial(self.concurrency, time=self.clock())
        inboxes: dict[Any, queue.Queue] = {thread: queue.Queue() for thread in ctx.threads}
        workers = [threading.Thread(target=self._work, args=(thread, inboxes[thread]),
                                    name=f"worker-{thread}", daemon=True)
                   for thread in ctx.threads]
        for worker in workers:
            worker.start()
        deadline = None if time_limit is None else self.clock() + int(time_limit * NS_PER_SECOND)
        outstanding = 0
        try:
            while True:
                done = self._next_completion(0)
                while done is not None:
                    outstanding -= 1
                    generator, ctx = self._complete(generator, ctx, *done)
                    done = self._next_completion(0)
                now = self.clock()
                if deadline is not None and now >= deadline:
                    break
                ctx = ctx.at(now)
                result = gen.op(generator, self.test, ctx)
                if result is None and outstanding == 0:
                    break
                wait = IDLE_WAIT_SECONDS
                if result is not None and result is not gen.PENDING:
                    item, following = result
                    thread = ctx.thread_of(item["process"])
                    if thread not in ctx.free:
                        wait = IDLE_WAIT_SECONDS
                    elif item["time"] <= now:
                        ctx = ctx.busy(thread)
                        generator = gen.update(following, self.test, ctx, item)
                        outstanding += 1
                        inboxes[thread].put(item)
                        continue
                    else:
                        wait = (item["time"] - now) / NS_PER_SECOND
                if deadline is not None:
                    wait = min(wait, (deadline - now) / NS_PER_SECOND)
                done = self._next_completion(max(wait, 0.0))
                while done is not None:
                    outstanding -= 1
                    generator, ctx = self._complete(generator, ctx, *done)
                    done = self._next_completion(0)
        finally:
            self._finish(inboxes, workers, outstanding)

    def _next_completion(self, timeout: float) -> tuple[Any, dict | None] | None:
        try:
            thread, event = (self._completions.get(timeout=timeout) if timeout > 0
                             else self._completions.get_nowait())
        except queue.Empty:
            return None
        if isinstance(event, BaseException):
            raise event
        return thread, event

    def _complete(self, generator: Any, ctx: gen.Context, thread: Any,
                  event: dict | None) -> tuple[Any, gen.Context]:
        ctx = ctx.at(self.clock())
        if event is None:
            return generator, ctx.release(thread)
        generator = gen.update(generator, self.test, ctx, event)
        crashed = event.get("type") == "info" and thread != gen.NEMESIS
        return generator, ctx.release(thread, crashed=crashed)

    def _finish(self, inboxes: dict[Any, queue.Queue], workers: list[threading.Thread],
                outstanding: int) -> None:
        """Let open ops complete (up to the op timeout and a little), then stop workers."""
        deadline = time.monotonic() + self.op_timeout + 2.0
        while outstanding > 0 and time.monotonic() < deadline:
            try:
                _, event = self._completions.get(timeout=deadline - time.monotonic())
            except queue.Empty:
                break
            outstanding -= 1
        for inbox in inboxes.values():
            inbox.put(STOP)
        for worker in workers:
            worker.join(timeout=max(deadline - time.monotonic(), 1.0))

    # -- workers ---------------------------------------------------------------------------

    def _work(self, thread: Any, inbox: queue.Queue) -> None:
        try:
            if thread == gen.NEMESIS:
                self._nemesis_loop(inbox)
            else:
                self._client_loop(thread, inbox)
        except BaseException as error:
            self._completions.put((thread, error))

    def _sleep_op(self, thread: Any, item: Mapping[str, Any]) -> None:
        time.sleep(float(item.get("value") or 0))
        self.marks.add(str(item.get("f")))
        self._completions.put((thread, None))

    def _nemesis_loop(self, inbox: queue.Queue) -> None:
        while (item := inbox.get()) is not STOP:
            if item.get("type") == "sleep":
                self._sleep_op(gen.NEMESIS, item)
                continue
            op = {key: value for key, value in item.items() if key != "time"}
            op.update(type="info", process=gen.NEMESIS)
            self.history.append({**op, "time": self.clock()})
            try:
                done = {**self.nemesis.invoke(self.test, op), "type": "info",
                        "process": gen.NEMESIS, "f": op["f"]}
            except Exception as error:
                done = {**op, "error": f"{type(error).__name__}: {error}"}
            done.pop("index", None)
            written = self.history.append({**done, "time": self.clock()})
            self.progress.nemesis(written.to_json())
            self._completions.put((gen.NEMESIS, written.to_json()))

    def _client_loop(self, thread: int, inbox: queue.Queue) -> None:
        node = self.nodes[thread % len(self.nodes)] if self.nodes else None
        client: Client | None = None
        executor = concurrent.futures.ThreadPoolExecutor(1, f"client-{thread}")
        try:
            while (item := inbox.get()) is not STOP:
                if item.get("type") == "sleep":
                    self._sleep_op(thread, item)
                    continue
                op = {key: value for key, value in item.items() if key != "time"}
                op["type"] = "invoke"
                if client is None:
                    try:
                        client = self._open(node)
                    except Exception as error:
                        self._record(thread, op, completed(
                            op, "fail", op.get("value"),
                            error=f"no client: {type(error).__name__}: {error}"))
                        continue
                self.history.append({**op, "time": self.clock()})
                self.progress.invocation()
                abandoned = False
                try:
                    future = executor.submit(client.invoke, self.test, dict(op))
                    done = validate(op, future.result(timeout=self.op_timeout))
                except concurrent.futures.TimeoutError:
                    abandoned = True
                    done = completed(op, "info", op.get("value"),
                                     error=f"timeout: no answer in {self.op_timeout} s")
                except Exception as error:
                    done = completed(op, "info", op.get("value"),
                                     error=f"indeterminate: {type(error).__name__}: {error}")
                self._record(thread, op, done, invoked=True)
                if done["type"] == "info":
                    self._close(client, background=abandoned)
                    client = None
                    if abandoned:
                        executor.shutdown(wait=False)
                        executor = concurrent.futures.ThreadPoolExecutor(1, f"client-{thread}")
        finally:
            if client is not None:
                self._close(client, background=False)
            executor.shutdown(wait=False)

    def _open(self, node: str | None) -> Client:
        client = self.client.open(self.test, node)
        use_clock = getattr(client, "use_clock", None)
        if use_clock is not None:
            use_clock(self.clock)
        return client

    def _record(self, thread: int, op: dict, done: dict, invoked: bool = False) -> None:
        if not invoked:
            self.history.append({**op, "time": self.clock()})
            self.progress.invocation()
        done.pop("index", None)
        written = self.history.append({**done, "time": self.clock()})
        self.progress.completion(written.type)
        self._completions.put((thread, written.to_json()))

    def _close(self, client: Client, background: bool) -> None:
        def close() -> None:
            try:
                client.close(self.test)
            except Exception:
                pass

        if background:
            threading.Thread(target=close, name="client-close", daemon=True).start()
        else:
            close()
