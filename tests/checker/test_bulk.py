"""The garbage collector paused while many objects are built, and resumed as it was."""

from __future__ import annotations

import gc
import threading

from checker.history import collector_paused


def test_the_collector_resumes_when_the_last_of_nested_and_concurrent_blocks_ends():
    assert gc.isenabled()
    inside = threading.Event()
    release = threading.Event()

    def other_block() -> None:
        with collector_paused():
            inside.set()
            release.wait(10)

    worker = threading.Thread(target=other_block)
    with collector_paused():
        assert not gc.isenabled()
        worker.start()
        assert inside.wait(10)
        with collector_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()
    assert not gc.isenabled()
    release.set()
    worker.join(10)
    assert gc.isenabled()


def test_a_collector_that_was_off_stays_off():
    gc.disable()
    try:
        with collector_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_an_error_inside_still_resumes_the_collector():
    try:
        with collector_paused():
            raise KeyError("x")
    except KeyError:
        pass
    assert gc.isenabled()
