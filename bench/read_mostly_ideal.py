#!/usr/bin/env python3
"""The ceiling of bench/read_mostly's load: a read/write lock that costs
nothing, simulated (docs/benchmarks.md, Shared locks and semaphores).

P processes loop; each turn is a write with probability W, else a read, and
holds for H ms. A lock that grants at no cost and wakes with a latency of L
ms is simulated event by event, with writer preference (a waiting writer
bars new readers: the rename-token lock's choice) or reader preference
(flock(2)'s: readers join while a writer waits), and for comparison every
turn exclusive. Prints operations per second and the ratio of each shared
policy to the all-exclusive one: what no implementation of that policy can
beat on this load, whatever its system calls cost.

    bench/read_mostly_ideal.py [--procs P] [--writes W] [--hold-ms H]
                               [--wake-ms L] [--seconds S] [--seed N]
"""
import argparse
import heapq
import random


def simulate(procs, writes, hold, wake, seconds, seed, writer_preference):
    """Operations per second of `procs` looping processes on an ideal lock."""
    rng = random.Random(seed)
    wants_write = {p: rng.random() < writes for p in range(procs)}
    waiting = list(range(procs))  # in the order they came
    releases = []  # (time, process, was a write)
    readers, writer = 0, False
    ops, end = 0, seconds * 1000.0

    def grant(now):
        nonlocal readers, writer
        while not writer:
            writers_waiting = [p for p in waiting if wants_write[p]]
            if readers == 0 and writers_waiting:
                p = writers_waiting[0]
                waiting.remove(p)
                writer = True
                heapq.heappush(releases, (now + wake + hold, p, True))
                return
            if writer_preference and writers_waiting:
                return
            joining = [p for p in waiting if not wants_write[p]]
            if not joining:
                return
            for p in joining:
                waiting.remove(p)
                readers += 1
                heapq.heappush(releases, (now + wake + hold, p, False))

    grant(0.0)
    while releases:
        now, p, was_write = heapq.heappop(releases)
        if now > end:
            break
        ops += 1
        if was_write:
            writer = False
        else:
            readers -= 1
        wants_write[p] = rng.random() < writes
        waiting.append(p)
        grant(now)
    return ops / seconds


def main():
    a = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    a.add_argument("--procs", type=int, default=8)
    a.add_argument("--writes", type=float, default=0.1)
    a.add_argument("--hold-ms", type=float, default=1.0)
    a.add_argument("--wake-ms", type=float, default=0.0)
    a.add_argument("--seconds", type=float, default=60.0)
    a.add_argument("--seed", type=int, default=1)
    o = a.parse_args()
    run = lambda w, pref: simulate(o.procs, w, o.hold_ms, o.wake_ms, o.seconds, o.seed, pref)
    exclusive = run(1.0, True)
    print(f"{o.procs} processes, {o.writes * 100:.0f} % writes, holding {o.hold_ms} ms, "
          f"waking in {o.wake_ms} ms: all exclusive {exclusive:.0f}/s")
    for name, pref in (("writer preference", True), ("reader preference (flock)", False)):
        rate = run(o.writes, pref)
        print(f"{name:26s} {rate:7.0f}/s = {rate / exclusive:.2f} x all exclusive")


if __name__ == "__main__":
    main()
