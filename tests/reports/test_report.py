"""Reports rendered from the stored fixture runs (tests/data/store, see make.py there)."""

from __future__ import annotations

import html
import json
import re
import shutil
from pathlib import Path

import pytest

from checker.history import load_history
from checker.stats import StatsChecker
from harness.cli import main
from harness.store import index_store, run_files
from reports import write_report
from reports.html import element, escape, render
from reports.run import load_run, nemesis_periods
from reports.timeline import MAX_OPS, write_timeline

FIXTURES = Path(__file__).parent.parent / "data" / "store"
PLOTS = {"latency-raw.png", "latency-quantiles.png", "rate.png", "offsets.png", "leaders.png",
         "unseen.png"}
QUEUE_ANOMALIES = ("lost-write", "unseen", "duplicate", "inconsistent-offsets", "G1a",
                   "poll-skip", "nonmonotonic-poll", "int-poll-skip", "int-nonmonotonic-poll",
                   "nonmonotonic-send")


@pytest.fixture
def store(tmp_path: Path) -> Path:
    copy = tmp_path / "store"
    shutil.copytree(FIXTURES, copy, symlinks=True)
    return copy


def text_of(page: str) -> str:
    """The visible text of a page, tags dropped and entities decoded."""
    body = re.sub(r"<(script|style)>.*?</\1>", "", page, flags=re.S)
    return html.unescape(re.sub(r"<[^>]+>", " ", body))


def test_valid_run(store: Path) -> None:
    report = write_report(run_files(store / "queue-valid" / "latest"))
    page = report.path.read_text()
    assert report.verdict is True
    assert 'class="banner valid"' in page and "VALID" in page and "no anomalies found" in page
    assert "seed 1" in text_of(page)
    assert {p.file for p in report.plots} == PLOTS
    for plot in PLOTS:
        data = (report.path.parent / plot).read_bytes()
        assert data.startswith(b"\x89PNG") and len(data) > 10_000
        assert f'src="{plot}"' in page
    assert "No write was lost." in page
    assert "start-partition" in text_of(page) and "expire-session" in text_of(page)


def test_the_banner_names_the_debug_knobs_a_run_used(store: Path) -> None:
    run_dir = (store / "queue-valid" / "latest").resolve()
    test = json.loads((run_dir / "test.json").read_text())
    assert "debug knobs" not in text_of(write_report(run_files(run_dir)).path.read_text())
    test.setdefault("broker_config", {})["kchaos.debug.ack-commit-before-replication"] = "true"
    (run_dir / "test.json").write_text(json.dumps(test))
    text = text_of(write_report(run_files(run_dir)).path.read_text())
    assert "debug knobs (seeded defects): kchaos.debug.ack-commit-before-replication=true" in text


def test_each_allowed_type_is_shown_with_its_reason(store: Path) -> None:
    from checker.allowed import because
    run_dir = (store / "queue-valid" / "latest").resolve()
    results = json.loads((run_dir / "results.json").read_text())
    queue = results["checkers"]["queue"]
    queue["anomalies"] = {"int-send-skip": {"count": 2, "examples": []}}
    queue["allowed"] = ["int-send-skip"]
    queue["stats"]["allowed-because"] = {"int-send-skip": because("int-send-skip")}
    (run_dir / "results.json").write_text(json.dumps(results))
    text = text_of(write_report(run_files(run_dir)).path.read_text())
    assert f"int-send-skip: {because('int-send-skip')}" in text
    reason = because("int-send-skip")
    assert f"int-send-skip : 2 found, 0 witnesses shown (allowed: {reason})" in text


def test_invalid_run_shows_every_queue_anomaly_with_witnesses(store: Path) -> None:
    report = write_report(run_files(store / "queue-anomalies" / "latest"))
    page = report.path.read_text()
    text = text_of(page)
    assert report.verdict is False and 'class="banner invalid"' in page
    for kind in QUEUE_ANOMALIES:
        assert re.search(rf"\b{re.escape(kind)} *: \d+ found", text), kind
    assert "lost-acknowledged" in text
    assert "unclean-election-loss" in text and "unexplained-loss" in text
    # The witness of the injected G1a: a failed send read by a poll, with its ops by index.
    g1a = text[text.index("G1a : 1 found"):]
    assert "p-G1a" in g1a and "send #" in g1a and "(fail)" in g1a and "G1a-x" in g1a


def test_lost_writes_are_attributed_to_the_unclean_election(store: Path) -> None:
    page = write_report(run_files(store / "queue-anomalies" / "latest")).path.read_text()
    section = text_of(page[page.index('id="losses"'):page.index('id="anomalies"')])
    assert section.count("unclean election") == 3
    assert "kchaos-1 leader 2 → 3" in section
    assert section.count("unexplained: no election after the ack") == 3


def test_anomaly_links_point_into_node_logs_at_the_time(store: Path) -> None:
    run = store / "queue-anomalies" / "latest"
    page = write_report(run_files(run)).path.read_text()
    # Lost at ~11.4 s after the start: the server.log line stamped +12 s (line 13).
    anchors = re.findall(r'href="(nodes/n1/server\.log\.html#L\d+)"', page)
    assert "nodes/n1/server.log.html#L13" in anchors
    view = (run / "nodes" / "n1" / "server.log.html").read_text()
    assert 'id="L13"' in view and "n1 alive at +12 s" in view
    assert (run / "nodes" / "n2" / "data" / "controller-events.jsonl.html").is_file()


def test_unknown_run(store: Path) -> None:
    report = write_report(run_files(store / "queue-unknown" / "latest"))
    page = report.path.read_text()
    assert report.verdict == "unknown" and 'class="banner unknown"' in page
    assert re.search(r"UNKNOWN: linearizability \(.*\) could not decide", text_of(page))
    assert "budget spent: 60.0 s" in text_of(page)


def test_linearizability_counterexample(store: Path) -> None:
    page = write_report(run_files(store / "register-lin" / "latest")).path.read_text()
    section = page[page.index('id="linearizability"'):page.index('id="nemesis"')]
    text = text_of(section)
    assert "not linearizable" in text
    assert "longest linearizable prefix" in text
    assert "cannot linearize" in text and "read(None) -> 1" in text
    assert "<svg" in section and section.count("<rect") >= 3
    for role in ("linearized", "stuck"):
        assert role in text


def test_counterexample_of_the_composed_checker_comes_from_results_json(tmp_path: Path) -> None:
    from checker.core import compose_results
    from checker.lin.checker import LinearizabilityChecker
    from tests.support.queue_histories import simulate

    run = tmp_path / "queue-lin" / "20250101T050000"
    run.mkdir(parents=True)
    b = simulate(7, 100)
    b.send("p", "x", 1001, 0)
    b.send("p", "x", 1002, 1)
    b.poll("q", {"x": [(0, 1001), (1, 1002)]})
    b.send("r", "x", 1003, kind="info")
    stale = b.poll("s", {"x": [(0, 1001), (1, 1003)]}) - 1
    (run / "history.jsonl").write_text("".join(json.dumps(op.to_json()) + "\n" for op in b.ops))
    test = {"name": "queue-lin", "seed": 7, "acks": "all",
            "broker_config": {"min.insync.replicas": 2}}
    (run / "test.json").write_text(json.dumps(test))
    result = LinearizabilityChecker().check(test, b.ops, {})
    results = compose_results({"linearizability": result})
    (run / "results.json").write_text(json.dumps(results.to_json()))
    decoy = {"partition_results": [{"partition": "decoy", "valid": False, "counterexample": {
        "prefix": [], "state": "decoy-state", "stuck": [0], "pending": [], "descriptions": {}}}]}
    (run / "linearizability.json").write_text(json.dumps(decoy))  # no longer read

    page = write_report(run_files(run)).path.read_text()
    section = page[page.index('id="linearizability"'):page.index('id="nemesis"')]
    text = text_of(section)
    assert "Partition x: not linearizable" in text
    assert "log of 2 records, the last 1002 at offset 1" in text
    assert "impossible: reads 1003 at offset 1, which holds 1002" in text
    assert f">{stale}<" in section
    assert "<svg" in section and section.count("<rect") >= 4
    for role in ("linearized", "stuck", "pending"):
        assert role in text
    assert "decoy" not in page
    assert re.search(r"nonlinearizable *: 1 found", text_of(page))
    assert "could not decide" not in text_of(page)


def test_harness_error_run_still_gets_a_report(store: Path) -> None:
    report = write_report(run_files(store / "harness-error" / "latest"))
    page = report.path.read_text()
    assert report.verdict is None and "NO RESULTS" in page
    assert "results.json is missing" in text_of(page)


def test_timeline(store: Path) -> None:
    run = store / "queue-valid" / "latest"
    write_report(run_files(run))
    page = (run / "timeline.html").read_text()
    assert page.count('class="op ok"') > 1000
    assert 'class="op nemesis"' in page
    assert 'title="process 0, send, ok' in page


def test_timeline_is_capped_with_a_notice(tmp_path: Path) -> None:
    from checker.history import Op
    from reports.plots import client_spans

    ops = []
    for i in range(MAX_OPS + 10):
        ops.append(Op(2 * i, 10 * i, "invoke", 0, "send", [["send", 0, i]]))
        ops.append(Op(2 * i + 1, 10 * i + 5, "ok", 0, "send", [["send", 0, [i, i]]]))
    page = write_timeline(ops, client_spans(ops), tmp_path).read_text()
    assert f"the first {MAX_OPS}" in page
    assert page.count('>send</div>') == MAX_OPS


def test_nemesis_periods_pair_starts_with_stops_and_heal(store: Path) -> None:
    run = load_run(run_files(store / "queue-valid" / "latest"))
    periods = {p.f: p for p in nemesis_periods(run.ops)}
    assert periods["start-partition"].start == 10 * 10**9
    assert periods["start-partition"].end == 16 * 10**9
    assert periods["kill"].end == 23 * 10**9
    assert periods["expire-session"].start == periods["expire-session"].end


def test_script_payloads_render_as_text(store: Path) -> None:
    run = store / "queue-valid" / "latest"
    payload = '<script>alert("pwned")</script><img src=x onerror=alert(1)>'
    test = json.loads((run / "test.json").read_text())
    test["name"] = payload
    test["note"] = payload
    (run / "test.json").write_text(json.dumps(test))
    with open(run / "history.jsonl", "a") as history:
        index = sum(1 for _ in open(run / "history.jsonl"))
        history.write(json.dumps({"index": index, "time": 31 * 10**9, "type": "info",
                                  "process": "nemesis", "f": payload, "value": payload}) + "\n")
    results = json.loads((run / "results.json").read_text())
    results["checkers"]["queue"]["anomalies"] = {payload: {"count": 1, "examples": [
        {"key": payload, "value": payload, "ops": [0], payload: payload}]}}
    results["checkers"]["queue"]["error"] = payload
    (run / "results.json").write_text(json.dumps(results))
    (run / "nodes" / "n1" / "server.log").write_text(payload + "\n")
    write_report(run_files(run))
    index_store(store)
    for page in (run / "report.html", run / "timeline.html", store / "index.html",
                 run / "nodes" / "n1" / "server.log.html"):
        text = page.read_text()
        assert "<script>alert" not in text and "<img src=x" not in text, page
        assert "&lt;script&gt;alert(&quot;pwned&quot;)" in text or page.name == "index.html"
    report = (run / "report.html").read_text()
    assert report.count("<script>") == 1  # ours: the image check


def test_escape_and_render() -> None:
    assert escape("<b>&'\"") == "&lt;b&gt;&amp;&#x27;&quot;"
    assert escape(None) == "" and escape([1, "<x>"]) == '[1, &quot;&lt;x&gt;&quot;]'
    cell = element("td", "<i>", title='"><script>')
    assert cell == '<td title="&quot;&gt;&lt;script&gt;">&lt;i&gt;</td>'
    assert escape(cell) is cell
    page = render("index.html", {"style": "", "summary": "<s>", "rows": "", "written": "now"})
    assert "&lt;s&gt;" in page


def test_index_lists_runs_newest_first_with_verdicts(store: Path) -> None:
    for run in ("queue-valid", "queue-anomalies"):
        write_report(run_files(store / run / "latest"))
    page = index_store(store).read_text()
    text = text_of(page)
    order = [text.index(name) for name in ("harness-error", "register-lin", "queue-unknown",
                                           "queue-anomalies", "queue-valid")]
    assert order == sorted(order)
    assert 'class="verdict-invalid"' in page and 'class="verdict-valid"' in page
    assert 'class="verdict-unknown"' in page and 'class="verdict-none"' in page
    assert "lost-write: 4" in text and "5 runs" in text
    assert 'href="queue-valid/20250101T000000/report.html"' in page
    assert "latest" not in re.findall(r'href="([^"]+)"', page)[0]


def test_kchaos_report_command(store: Path, capsys) -> None:
    assert main(["report", str(store / "queue-anomalies")]) == 0
    out = capsys.readouterr().out
    assert out.startswith("INVALID: wrote ") and "6 plots" in out
    assert (store / "queue-anomalies" / "20250101T010000" / "report.html").is_file()
    assert (store / "index.html").is_file()
    assert main(["report", str(store / "latest")]) == 0
    assert main(["report", str(store / "nowhere")]) == 3


def test_exported_members() -> None:
    import reports

    assert sorted(reports.__all__) == ["Report", "make_server", "write_index", "write_report"]
    assert all(hasattr(reports, name) for name in reports.__all__)


def test_availability_section_renders_from_results(store: Path) -> None:
    run = store / "queue-valid" / "latest"
    plain = write_report(run_files(run)).path.read_text()
    assert 'id="availability"' not in plain
    results = json.loads((run / "results.json").read_text())
    results["checkers"]["availability"] = {"valid": True, "anomalies": {}, "seconds": 0.01,
                                           "stats": {
        "event-logs": 3,
        "overall": {"seconds": 21, "buckets-without-ok-send": 5, "fraction": 0.238},
        "fault-windows": [{"fault": "start-partition", "value": {"n1": ["<n2>"]},
                           "start-s": 5.0, "end-s": 12.0, "buckets": 7,
                           "buckets-without-ok-send": 5, "fraction": 0.714},
                          {"fault": "pause", "value": None, "start-s": 15.0, "end-s": None,
                           "buckets": 6, "buckets-without-ok-send": 0, "fraction": 0.0}],
        "all-faults": {"buckets": 13, "buckets-without-ok-send": 5, "fraction": 0.385},
        "write-stalls": [{"key": "<k>", "seconds": 5.5, "start-s": 5.51, "end-s": 11.01,
                          "ok-sends": 31}],
        "failovers": [{"topic": "kchaos", "partition": 1, "old-leader": 1, "new-leader": 2,
                       "selector": "offline", "unclean": True, "at-s": 5.25,
                       "from": "broker-change", "seconds": 0.25}]}}
    (run / "results.json").write_text(json.dumps(results))
    page = write_report(run_files(run)).path.read_text()
    assert 'href="#availability"' in page and "<n2>" not in page and "<k>" not in page
    section = text_of(page[page.index('id="availability"'):page.index('id="plots"')])
    assert "without an ok send: 5 of 21 (23.8 %)" in section
    assert "start-partition 5.000 12.000" in " ".join(section.split())
    assert '{"n1": ["<n2>"]} 7 5 71.4 %' in " ".join(section.split())
    assert "never healed" in section and "all fault seconds 13 5 38.5 %" in " ".join(
        section.split())
    assert "<k> 5.500 5.510 11.010 31" in " ".join(section.split())
    assert "kchaos-1 1 → 2 (unclean) offline 5.250 0.250 broker-change" in " ".join(
        section.split())


def test_the_stats_checkers_counts_by_f_are_one_table_under_the_checkers(store: Path) -> None:
    run = store / "queue-valid" / "latest"
    assert 'id="operations"' not in write_report(run_files(run)).path.read_text()
    results = json.loads((run / "results.json").read_text())
    stats = StatsChecker().check({}, load_history(run / "history.jsonl"), {})
    results["checkers"]["stats"] = stats.to_json()
    (run / "results.json").write_text(json.dumps(results))
    page = write_report(run_files(run)).path.read_text()
    section = " ".join(text_of(page[page.index('id="operations"'):
                                    page.index('id="losses"')]).split())
    assert "assign 2 0 0 2 poll 417 0 0 417 send 812 18 0 830" in section
    assert "from 3 invocations" in section
    assert '"by-f"' not in page and '&quot;by-f&quot;' not in page

    results["checkers"]["stats"]["stats"].update({
        "by-f": {"crash": {"ok": 0, "fail": 0, "info": 4}, "send": {"ok": 0, "fail": 5, "info": 0},
                 "txn": {"ok": 0, "fail": 1, "info": 0}},
        "never-succeeded": ["send"], "too-few": ["txn"], "not-judged": ["crash"]})
    (run / "results.json").write_text(json.dumps(results))
    page = write_report(run_files(run)).path.read_text()
    section = " ".join(text_of(page[page.index('id="operations"'):
                                    page.index('id="losses"')]).split())
    assert ("crash 0 0 4 4 not judged: ends its process send 0 5 0 5 never succeeded "
            "txn 0 1 0 1 never succeeded, too few to judge") in section


def test_failovers_list_the_workloads_topics_first_and_sum_up_internal_ones(
        store: Path) -> None:
    run = store / "queue-valid" / "latest"
    results = json.loads((run / "results.json").read_text())
    internal = [{"topic": "__consumer_offsets", "partition": p, "old-leader": 1,
                 "new-leader": 2, "selector": "offline", "unclean": False, "at-s": 3.0 + p,
                 "from": "broker-change", "seconds": 0.5} for p in range(50)]
    own = {"topic": "kchaos", "partition": 1, "old-leader": 1, "new-leader": 2,
           "selector": "offline", "unclean": False, "at-s": 60.0, "from": "broker-change",
           "seconds": 0.25}
    results["checkers"]["availability"] = {"valid": True, "anomalies": {}, "seconds": 0.01,
                                           "stats": {"failovers": [*internal, own]}}
    (run / "results.json").write_text(json.dumps(results))
    page = write_report(run_files(run)).path.read_text()
    section = " ".join(text_of(page[page.index("Failovers"):page.index('id="plots"')]).split())
    assert "__consumer_offsets-" not in section
    assert section.index("kchaos-1 1 → 2") < section.index("__consumer_offsets (50 partitions)")
    assert ("__consumer_offsets (50 partitions) 50 leader changes offline 3.000 to 52.000 "
            "up to 0.500 broker-change") in section


def test_the_latency_line_has_gaps_where_no_second_has_data() -> None:
    import math

    from reports.plots import gapped

    x, y = gapped([0, 1, 2, 7, 8], [5.0, 6.0, 7.0, 8.0, 9.0], 1.0)
    assert list(x[:3]) == [0.5, 1.5, 2.5] and math.isnan(x[3]) and list(x[4:]) == [7.5, 8.5]
    assert math.isnan(y[3]) and list(y[4:]) == [8.0, 9.0]
    x, _ = gapped([0, 1], [1.0, 2.0], 2.0)
    assert list(x) == [1.0, 3.0]


def test_a_lost_write_has_one_table_and_the_anomalies_point_to_it(store: Path) -> None:
    page = write_report(run_files(store / "queue-anomalies" / "latest")).path.read_text()
    anomalies = text_of(page[page.index('id="anomalies"'):page.index('id="linearizability"')])
    anomalies = " ".join(anomalies.split())
    lost = anomalies[anomalies.index("lost-write :"):]
    assert lost.split("found")[1].startswith("; each is a row of Lost writes above")
    for kind in ("unclean-election-loss", "unexplained-loss", "lost-acknowledged"):
        assert re.search(rf"{kind} : \d+ found[^;]*; each is a row of Lost writes", anomalies)
    assert ("inconsistent-offsets : 4 found; 4 hold a write that was lost, its offset written "
            "again: see Lost writes above G1a") in anomalies


def test_one_instantaneous_fault_is_one_period_named_as_the_user_asked() -> None:
    from checker.history import Op

    ops = [Op(0, 10, "info", "nemesis", "expire-session", "controller",
              {"fault": "expire-session"}),
           Op(1, 20, "info", "nemesis", "expire-session", {"n3": "expired"},
              {"fault": "expire-session"}),
           Op(2, 30, "info", "nemesis", "start-partition", "zookeeper",
              {"fault": "isolate-zookeeper"}),
           Op(3, 40, "info", "nemesis", "start-partition", {"n1": ["z1"], "z1": ["n1"]},
              {"fault": "isolate-zookeeper"}),
           Op(4, 50, "info", "nemesis", "stop-partition", None, {"fault": "isolate-zookeeper"}),
           Op(5, 60, "info", "nemesis", "stop-partition", "network-healed",
              {"fault": "isolate-zookeeper"})]
    expire, partition = nemesis_periods(ops)
    assert (expire.name, expire.start, expire.end, expire.value, expire.ops) == (
        "expire-session", 10, 20, {"n3": "expired"}, (0, 1))
    assert expire.instantaneous and not partition.instantaneous
    assert (partition.name, partition.f, partition.value) == (
        "isolate-zookeeper", "start-partition", "zookeeper")


def test_the_timeline_shows_a_fault_once_by_its_name(tmp_path: Path) -> None:
    from checker.history import Op

    ops = [Op(0, 10, "info", "nemesis", "start-partition", "zookeeper",
              {"fault": "isolate-zookeeper"}),
           Op(1, 20, "info", "nemesis", "start-partition", {"n1": ["z1"]},
              {"fault": "isolate-zookeeper"}),
           Op(2, 30, "info", "nemesis", "heal", None)]
    page = write_timeline(ops, [], tmp_path).read_text()
    assert page.count('class="op nemesis" title=') == 2
    assert ">isolate-zookeeper</div>" in page and ">start-partition</div>" not in page


def _with_checkers(run: Path, **checkers: dict) -> None:
    results = json.loads((run / "results.json").read_text())
    results["checkers"].update(checkers)
    (run / "results.json").write_text(json.dumps(results))


def test_allowed_loss_and_faults_that_never_took_effect_have_their_own_banner_and_colour(
        store: Path) -> None:
    """Neither is a big green VALID, in the report nor in the store index."""
    allowed = store / "queue-valid" / "latest"
    _with_checkers(allowed, acks={"valid": True, "allowed": ["lost-allowed-by-configuration"],
                                  "anomalies": {"lost-allowed-by-configuration": {
                                      "count": 47, "examples": []}}, "stats": {}})
    page = write_report(run_files(allowed)).path.read_text()
    assert 'class="banner allowed"' in page and 'class="banner valid"' not in page
    assert "ALLOWED: 47 acknowledged writes lost" in text_of(page)
    report = write_report(run_files(allowed))
    assert report.state == "allowed"
    _with_checkers(allowed, acks={"valid": True, "anomalies": {}, "stats": {}},
                   faults={"valid": True, "anomalies": {}, "stats": {
                       "asked": ["kill-coordinator"], "invoked": {"kill-coordinator": 2},
                       "took_effect": {"kill-coordinator": 0}, "never": ["kill-coordinator"]}})
    page = write_report(run_files(allowed)).path.read_text()
    assert 'class="banner inconclusive"' in page
    assert "INCONCLUSIVE" in text_of(page) and "never: kill-coordinator" in text_of(page)
    index = index_store(store).read_text()
    assert '<span class="verdict-inconclusive">inconclusive</span>' in index


def test_an_election_from_the_eligible_leader_replicas_is_shown_clean_and_named_so() -> None:
    from reports.report import _election_text

    election = {"time": 2_000, "topic": "kchaos", "partition": 1, "old_leader": 1,
                "new_leader": 2, "leader_epoch": 4, "isr": [], "unclean": False, "elr": True}
    text = text_of(str(_election_text(election, 1_000)))
    assert "clean election from the eligible leader replicas +1.000 s:" in " ".join(text.split())
    assert "unclean" not in text
