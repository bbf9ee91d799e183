"""Regenerate the stored fixture runs of tests/test_report*.py (real checkers, seeded).

    .venv/bin/python tests/data/store/make.py

Runs: queue-valid (no anomaly), queue-anomalies (every queue anomaly type, acks and
election losses, node logs), queue-unknown (a checker out of budget), register-lin
(a linearizability counterexample), harness-error (no results.json).
"""

from __future__ import annotations

import json
import random
import shutil
from datetime import datetime
from pathlib import Path

from checker.queue.acks import AcksChecker
from checker.core import Result, compose
from checker.cluster.elections import ElectionChecker
from checker.lin.files import check_files
from checker.history import Op, load_history, op_from_json
from checker.queue.analysis import QueueChecker

HERE = Path(__file__).parent
QUEUE = HERE.parent / "queue"
START_MS = 1_735_689_600_000  # 2025-01-01T00:00:00Z
S = 1_000_000_000
BROKER = {"min.insync.replicas": 2, "unclean.leader.election.enable": False}


def simulate(seed: int, seconds: int, loss_at: float | None) -> tuple[list[dict], list[dict]]:
    """A queue workload on keys 0..3 with a partition from 10 s to 16 s; returns ops and
    controller events. With `loss_at`, partition 1 has an unclean election then that drops
    the last three acknowledged writes."""
    rng = random.Random(seed)
    ops: list[dict] = []
    logs: dict[int, list[int]] = {k: [] for k in range(4)}
    acked: dict[int, list[int]] = {k: [] for k in range(4)}
    events = [{"time": START_MS + 200, "controller_id": 1, "controller_epoch": 1,
               "event": "elect-leader", "topic": "kchaos", "partition": k, "selector": "offline",
               "old_leader": None, "new_leader": 1 + k % 3, "leader_epoch": 0,
               "isr": [1, 2, 3], "unclean": False} for k in range(4)]
    value = 0
    position = {p: {k: 0 for k in range(4)} for p in (10, 11)}
    t = int(0.5 * S)
    dropped = False
    busy: dict[int, int] = {}
    while t < seconds * S:
        t += rng.randint(5_000_000, 40_000_000)
        slow = 10 * S <= t <= 16 * S
        if loss_at is not None and not dropped and t >= loss_at * S:
            dropped = True
            del logs[1][-3:]
            events.append({"time": START_MS + t // 1_000_000 + 5, "controller_id": 2,
                           "controller_epoch": 2, "event": "elect-leader", "topic": "kchaos",
                           "partition": 1, "selector": "offline", "old_leader": 2,
                           "new_leader": 3, "leader_epoch": 1, "isr": [3], "unclean": True})
            events.append({"time": START_MS + t // 1_000_000 + 900, "controller_id": 2,
                           "controller_epoch": 2, "event": "isr-change", "topic": "kchaos",
                           "partition": 1, "selector": "noop", "old_leader": 3,
                           "new_leader": 3, "leader_epoch": 1, "isr": [3, 1], "unclean": False})
        if rng.random() < 0.7:
            process, key = rng.randrange(4), rng.randrange(4)
            if busy.get(process, 0) >= t:
                continue
            value += 1
            latency = rng.randint(1_000_000, 6_000_000) * (20 if slow else 1)
            busy[process] = t + latency
            ops.append({"time": t, "type": "invoke", "process": process, "f": "send",
                        "value": [["send", key, value]], "acks": "all"})
            if slow and rng.random() < 0.15:
                ops.append({"time": t + latency, "type": "fail", "process": process,
                            "f": "send", "value": [["send", key, value]],
                            "error": "NOT_ENOUGH_REPLICAS"})
                continue
            logs[key].append(value)
            acked[key].append(value)
            ops.append({"time": t + latency, "type": "ok", "process": process, "f": "send",
                        "value": [["send", key, [len(logs[key]) - 1, value]]], "node": 1 + key % 3})
        else:
            process = rng.choice((10, 11))
            quiet = loss_at is not None and (loss_at - 1.0) * S <= t < loss_at * S
            if busy.get(process, 0) >= t or quiet:
                continue
            busy[process] = t + 3_000_000
            ops.append(_poll(process, t, logs, position[process], rng.randint(1, 3) * 1_000_000))
    t += S
    for process in (10, 11):
        t += 2_000_000
        ops.append({"time": t, "type": "invoke", "process": process, "f": "assign",
                    "value": list(range(4))})
        ops.append({"time": t + 500_000, "type": "ok", "process": process, "f": "assign",
                    "value": list(range(4))})
        t += 1_000_000
        ops.append(_poll(process, t, logs, {k: 0 for k in range(4)}, 1_000_000))
    return ops, events


def _poll(process: int, t: int, logs: dict, position: dict, latency: int) -> dict:
    read = {}
    for key, log in logs.items():
        start = position[key]
        if start < len(log):
            read[str(key)] = [[o, log[o]] for o in range(start, len(log))]
            position[key] = read[str(key)][-1][0] + 1
    return {"time": t, "type": "invoke", "process": process, "f": "poll", "value": [["poll"]],
            "complete": {"time": t + latency, "type": "ok", "process": process, "f": "poll",
                         "value": [["poll", read]]}}


def with_nemesis(ops: list[dict]) -> list[dict]:
    nemesis = [
        {"time": 10 * S, "type": "info", "process": "nemesis", "f": "start-partition",
         "value": {"n1": ["n2", "n3"], "n2": ["n1"], "n3": ["n1"]}},
        {"time": 16 * S, "type": "info", "process": "nemesis", "f": "stop-partition",
         "value": "network-healed"},
        {"time": 20 * S, "type": "info", "process": "nemesis", "f": "kill",
         "value": {"n2": "killed"}},
        {"time": 23 * S, "type": "info", "process": "nemesis", "f": "start",
         "value": {"n2": "started"}},
        {"time": 26 * S, "type": "info", "process": "nemesis", "f": "expire-session",
         "value": {"n3": "expired"}},
    ]
    return ops + nemesis


def injected(offset_seconds: float) -> list[dict]:
    """Every *-bad queue fixture, re-keyed apart and spread over time."""
    out = []
    for i, path in enumerate(sorted(QUEUE.glob("*-bad.jsonl"))):
        name = path.name.removesuffix("-bad.jsonl")
        base = int((offset_seconds + 0.9 * i) * S)
        for line in path.read_text().splitlines():
            op = json.loads(line)
            op["time"] = base + op["time"]
            op["value"] = _rekey(op["value"], name)
            out.append(op)
    return out


def _rekey(value, name):
    if not isinstance(value, list):
        return value
    micro = []
    for m in value:
        if m[0] == "send":
            micro.append(["send", f"{name}-{m[1]}", m[2]])
        elif m[0] == "poll" and len(m) > 1:
            micro.append(["poll", {f"{name}-{k}": v for k, v in m[1].items()}])
        else:
            micro.append(m)
    return micro


def flatten(ops: list[dict]) -> list[Op]:
    """Expand polls with an inline completion, order by time, number densely."""
    flat = []
    for op in ops:
        done = op.pop("complete", None)
        flat.append(op)
        if done:
            flat.append(done)
    flat.sort(key=lambda o: o["time"])
    history = []
    for index, op in enumerate(flat):
        history.append(op_from_json({**op, "index": index}, "<fixture>", index + 1))
    return history


def write_run(test: dict, folder: str, ops: list[Op], events: list[dict] | None,
              results: Result | None, logs: bool = False) -> Path:
    run = HERE / test["name"] / folder
    shutil.rmtree(run, ignore_errors=True)
    run.mkdir(parents=True)
    (run / "test.json").write_text(json.dumps(test, indent=1) + "\n")
    (run / "history.jsonl").write_text("".join(json.dumps(op.to_json()) + "\n" for op in ops))
    if results is not None:
        (run / "results.json").write_text(json.dumps(results.to_json(), indent=1) + "\n")
    (run / "kchaos.log").write_text("INFO kchaos: run started\nINFO kchaos: run finished\n")
    for n in (1, 2, 3):
        node = run / "nodes" / f"n{n}"
        (node / "data").mkdir(parents=True)
        mine = [e for e in events or [] if e["controller_id"] == n]
        (node / "data" / "controller-events.jsonl").write_text(
            "".join(json.dumps(e) + "\n" for e in mine))
        if logs:
            lines = []
            for second in range(0, 31):
                stamp = datetime.fromtimestamp(START_MS / 1000 + second)
                lines.append(f"[{stamp:%Y-%m-%d %H:%M:%S},000] INFO broker.node: n{n} alive "
                             f"at +{second} s")
            (node / "server.log").write_text("\n".join(lines) + "\n")
            (node / "zookeeper.log").write_text(
                f"{datetime.fromtimestamp(START_MS / 1000):%Y-%m-%d %H:%M:%S},000 [myid:{n}] - "
                "INFO  [main:QuorumPeer] - started\n")
    link = HERE / test["name"] / "latest"
    link.unlink(missing_ok=True)
    link.symlink_to(folder)
    return run


def queue_results(test: dict, ops: list[Op], events: list[dict], run_dir: Path) -> Result:
    checker = compose({"queue": QueueChecker(), "acks": AcksChecker(),
                       "elections": ElectionChecker()})
    from checker.cluster.event_log import ControllerEvent

    controller = [ControllerEvent(**{**e, "isr": tuple(e["isr"]), "node": f"n{e['controller_id']}"})
                  for e in events]
    return checker.check(test, ops, {"controller_events": controller, "store_dir": str(run_dir)})


def test_config(name: str, seed: int) -> dict:
    return {"name": name, "seed": seed, "workload": "queue", "nemesis": ["partition-halves",
            "kill", "expire-session"], "nodes": ["n1", "n2", "n3"], "acks": "all",
            "broker_config": BROKER, "start_wall_ms": START_MS, "time_limit": 30,
            "key_partitions": {str(k): ["kchaos", k] for k in range(4)}}


def main() -> None:
    ops, events = simulate(1, 30, None)
    test = test_config("queue-valid", 1)
    history = flatten(with_nemesis(ops))
    run = write_run(test, "20250101T000000", history, events, None, logs=True)
    (run / "results.json").write_text(
        json.dumps(queue_results(test, history, events, run).to_json(), indent=1) + "\n")

    ops, events = simulate(2, 30, 12.0)
    test = test_config("queue-anomalies", 2)
    test["key_partitions"].update({f"{p.name.removesuffix('-bad.jsonl')}-x": ["kchaos", 9]
                                   for p in QUEUE.glob("*-bad.jsonl")})
    history = flatten(with_nemesis(ops + injected(3.0)))
    run = write_run(test, "20250101T010000", history, events, None, logs=True)
    (run / "results.json").write_text(
        json.dumps(queue_results(test, history, events, run).to_json(), indent=1) + "\n")

    ops, events = simulate(3, 10, None)
    test = test_config("queue-unknown", 3)
    history = flatten(ops)
    valid = queue_results(test, history, events, HERE)
    valid.checkers["linearizability"] = Result(
        "unknown", error="budget spent: 60.0 s on partition 'x' (2,000,000 configurations)")
    valid.valid = "unknown"
    write_run(test, "20250101T020000", history, events, valid)

    lin = HERE / "register-lin" / "20250101T030000"
    lin_ops = [
        {"time": 1_000_000, "type": "invoke", "process": 0, "f": "write", "value": 1},
        {"time": 2_000_000, "type": "ok", "process": 0, "f": "write", "value": 1},
        {"time": 3_000_000, "type": "invoke", "process": 1, "f": "write", "value": 2},
        {"time": 4_000_000, "type": "invoke", "process": 2, "f": "read", "value": None},
        {"time": 5_000_000, "type": "ok", "process": 1, "f": "write", "value": 2},
        {"time": 6_000_000, "type": "ok", "process": 2, "f": "read", "value": 2},
        {"time": 7_000_000, "type": "invoke", "process": 0, "f": "read", "value": None},
        {"time": 8_000_000, "type": "ok", "process": 0, "f": "read", "value": 1},
    ]
    history = flatten(lin_ops)
    test = {"name": "register-lin", "seed": 4, "workload": "register", "model": "register"}
    write_run(test, lin.name, history, [], None)
    [file_result] = check_files([str(lin / "history.jsonl")], model="register")
    body = file_result.to_json()
    body["file"] = "history.jsonl"
    results = Result(False, checkers={"linearizability": Result(
        False, stats={"files": [body]}, seconds=file_result.seconds)})
    (lin / "results.json").write_text(json.dumps(results.to_json(), indent=1) + "\n")

    ops, events = simulate(5, 5, None)
    test = test_config("harness-error", 5)
    write_run(test, "20250101T040000", flatten(ops)[:-7], events, None)
    latest = HERE / "latest"
    latest.unlink(missing_ok=True)
    latest.symlink_to("queue-anomalies/latest")
    for name in ("queue-valid", "queue-anomalies", "queue-unknown", "register-lin"):
        print(name, json.loads((HERE / name / "latest" / "results.json").read_text())["valid"])
    assert load_history(HERE / "queue-anomalies" / "latest" / "history.jsonl")


if __name__ == "__main__":
    main()
