"""Queue history builders, and hypothesis: simulated valid histories have no anomalies;
one injected anomaly of each type is found.

`Builder` is imported by the other queue, acks and election checker tests.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from checker.history import pair_operations
from checker.queue.analysis import analyse
from tests.support.queue_histories import INJECTIONS, inject, simulate


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 2**32), st.integers(1, 120))
def test_simulated_valid_histories_have_no_anomalies(seed, steps):
    b = simulate(seed, steps)
    pair_operations(b.ops)
    analysis = analyse(b.ops)
    assert analysis.anomalies == {}
    assert analysis.losses == []






@settings(max_examples=40, deadline=None)
@given(st.integers(0, 2**32), st.integers(0, 80), st.sampled_from(INJECTIONS))
def test_an_injected_anomaly_is_found(seed, steps, kind):
    b = simulate(seed, steps)
    inject(b, kind)
    analysis = analyse(b.ops)
    assert kind in analysis.anomalies
    assert all(w["key"] == "x" for a in analysis.anomalies.values() for w in a.examples)
