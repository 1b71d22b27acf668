"""Calls made from many threads at once, for the tests of thread safety."""

from __future__ import annotations

import threading

__all__ = ["failures_at_once"]


def failures_at_once(jobs, right, rounds: int = 5, timeout: float = 120.0) -> list[str]:
    """One thread per job, all released together, each calling ``right(job)`` ``rounds``
    times (``right`` computes and says whether the result is the expected one).  Returns
    ``"job K"`` for each job that once got a wrong result; fails if a thread hangs."""
    jobs = list(jobs)
    barrier = threading.Barrier(len(jobs))
    failures: list[str] = []

    def run(k):
        barrier.wait()
        for _ in range(rounds):
            if not right(jobs[k]):
                failures.append(f"job {k}")
                return

    threads = [threading.Thread(target=run, args=(k,)) for k in range(len(jobs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=timeout)
    assert not any(t.is_alive() for t in threads), "a caller hung"
    return failures
