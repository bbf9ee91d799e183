"""`kchaos replay` on a real cluster: a short stored run, replayed, invokes the same faults
on the same roles at about the same times, and says what it replays."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from harness.replay import schedule_of_run
from harness.store import read_test
from nemesis.schedule import read_schedule
from tests.harness.test_run_end_to_end import NOTHING, leftovers

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(300)]

KCHAOS = str(Path(sys.executable).parent / "kchaos")
SHORT = ["--nodes", "3", "--time-limit", "8", "--nemesis", "kill-leader,partition-one",
         "--nemesis-interval", "1.5", "--recovery-seconds", "2", "--final-read-seconds", "10",
         "--keys", "2", "--seed", "4"]


def kchaos(store: Path, *argv: str) -> subprocess.CompletedProcess:
    done = subprocess.run([KCHAOS, *argv], capture_output=True, text=True, timeout=240)
    with open(store / "stdout.txt", "a") as out:
        out.write(f"$ kchaos {' '.join(argv)}\n{done.stdout}\n--- stderr ---\n{done.stderr}\n")
    return done


@pytest.mark.long
def test_a_replay_invokes_the_recorded_faults_on_the_same_roles_at_the_same_times(tmp_path):
    store = tmp_path / "store"
    store.mkdir()
    # The source is not checked (no Spark): only its schedule matters here.
    source = kchaos(store, "run", "--store", str(store), "--no-check", *SHORT)
    assert source.returncode == 0, source.stdout[-3000:] + source.stderr[-3000:]
    source_run = (store / "queue" / "latest").resolve()
    recorded = schedule_of_run(source_run).ops
    assert any(op.f == "kill" and op.value == "leader" for op in recorded), recorded

    done = kchaos(store, "replay", str(source_run))
    assert done.returncode in (0, 1), done.stdout[-3000:] + done.stderr[-3000:]
    assert "kchaos replay: the source's anomaly types are not known (it was not checked)" \
        in done.stdout
    replay_run = (store / "queue" / "latest").resolve()
    assert replay_run != source_run
    test = read_test(replay_run)
    assert test["replay"]["run"] == str(source_run) and test["replay"]["ops"] == len(recorded)
    assert test["seed"] == 4 and test["time_limit"] == 8.0
    assert (replay_run / "results.json").is_file(), "a replay is checked"
    ran = read_schedule(replay_run / "schedule.json").ops  # times to the microsecond
    assert [(op.f, op.value, op.seconds) for op in ran] == \
        [(op.f, op.value, round(op.seconds, 6)) for op in recorded]

    # An op the source invoked at the very end (a stop its schedule clamped to the time
    # limit) is not invoked when the replay's nemesis is still busy as the limit passes;
    # the final phase stops that fault instead. Every earlier op is invoked again.
    replayed = schedule_of_run(replay_run).ops
    early = [op for op in recorded if op.seconds < 7.0]
    assert len(early) >= 3 and len(replayed) >= len(early)
    assert [(op.f, op.value) for op in replayed] == \
        [(op.f, op.value) for op in recorded][:len(replayed)]
    late = [round(new.seconds - old.seconds, 3)
            for old, new in zip(recorded, replayed, strict=False)]
    assert all(-0.05 <= delay < 1.0 for delay in late), late
    assert leftovers(store) == NOTHING
