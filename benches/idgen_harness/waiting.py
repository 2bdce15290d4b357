"""Waiting, for the tests and the benchmarks alike: for a condition (wait_until), and for a set of
threads started together (run_threads). Standard library only, so that a script run by the
system's python3 may import it too."""

import threading
import time


def wait_until(what, predicate, timeout=30, step=0.1):
    """predicate()'s first true value, polled every `step` seconds; an AssertionError naming
    `what` after `timeout` seconds. The harness's one wait: every test waits with it."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout} s")
        time.sleep(step)


def run_threads(work, args, timeout=None):
    """work(a) for each a of args, each in a thread of its own, all started before any is waited
    for; then waits for each (at most `timeout` seconds apiece, None: as long as it takes).
    Returns what they raised, in the order of args: a thread's exception, or a TimeoutError for a
    thread still running (a daemon thread, so it cannot hold the process). [] when all went well:
    `assert not run_threads(...)`."""
    errors = {}

    def run(i, a):
        try:
            work(a)
        except Exception as e:  # noqa: BLE001 - handed to the caller, who asserts on it
            errors[i] = e

    args = list(args)
    threads = [threading.Thread(target=run, args=(i, a), daemon=True) for i, a in enumerate(args)]
    for t in threads:
        t.start()
    for i, t in enumerate(threads):
        t.join(timeout)
        if t.is_alive():
            errors.setdefault(i, TimeoutError(f"work({args[i]!r}) still running after {timeout} s"))
    return [errors[i] for i in sorted(errors)]
