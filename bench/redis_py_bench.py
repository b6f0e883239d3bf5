#!/usr/bin/env python3
"""redis-py's Lock (Debian python3-redis) on the workloads of redis_bench,
for the side-by-side table of docs/redis.md.

  redis_py_bench.py PORT PASSWORD pair ROUNDS N
  redis_py_bench.py PORT PASSWORD handoff N
  redis_py_bench.py PORT PASSWORD contend PROCS SECONDS

Prints "FIGURE name=value unit=..." lines like redis_bench."""
import multiprocessing
import os
import statistics
import sys
import time

import redis


def client(port, password):
    return redis.Redis(host="127.0.0.1", port=port, password=password or None)


def pair(port, password, rounds, n):
    r = client(port, password)
    floor, lock = [], []
    for _ in range(rounds):
        t = time.perf_counter()
        for _ in range(n):
            r.set("bench:pyfloor", "x", nx=True, px=30000)
            r.delete("bench:pyfloor")
        floor.append((time.perf_counter() - t) / n * 1e6)
        t = time.perf_counter()
        for _ in range(n):
            lk = r.lock("bench:pypair", timeout=30)
            lk.acquire()
            lk.release()
        lock.append((time.perf_counter() - t) / n * 1e6)
    ratio = statistics.median(l / f for f, l in zip(floor, lock))
    print(f"FIGURE name=py_floor_set_nx_del value={statistics.median(floor):.1f} unit=us")
    print(f"FIGURE name=py_lock_acquire_release value={statistics.median(lock):.1f} unit=us")
    print(f"FIGURE name=py_lock_vs_floor value={ratio:.2f} unit=x")


def handoff(port, password, n):
    lat = []
    for _ in range(n):
        r = client(port, password)
        held = r.lock("bench:pyhandoff", timeout=30)
        held.acquire()
        ready_r, ready_w = os.pipe()
        done_r, done_w = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(ready_r)
            os.close(done_r)
            w = redis.Redis(host="127.0.0.1", port=port, password=password or None,
                            client_name="waiter").lock("bench:pyhandoff", timeout=30)
            os.write(ready_w, b"r")
            w.acquire(blocking=True, blocking_timeout=10)
            os.write(done_w, str(time.monotonic_ns()).encode())
            w.release()
            os._exit(0)
        os.close(ready_w)
        os.close(done_w)
        os.read(ready_r, 1)
        # Released once the waiter's first try has failed (its connection,
        # named "waiter", shows SET as its last command): it is then polling.
        while True:
            listing = r.execute_command("CLIENT", "LIST")
            if isinstance(listing, bytes):
                listing = listing.decode()
            if any("name=waiter" in l and "cmd=set" in l for l in str(listing).splitlines()):
                break
        before = time.monotonic_ns()
        held.release()
        done = int(os.read(done_r, 64))
        lat.append((done - before) / 1e3)
        os.waitpid(pid, 0)
        os.close(ready_r)
        os.close(done_r)
    print(f"FIGURE name=py_handoff_median value={statistics.median(lat):.1f} unit=us")
    lat.sort()
    print(f"FIGURE name=py_handoff_p90 value={lat[int(0.9 * len(lat))]:.1f} unit=us")


def worker(port, password, seconds, gate, out):
    gate.wait()
    r = client(port, password)
    count = 0
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        lk = r.lock("bench:pycontend", timeout=30)
        lk.acquire(blocking=True, blocking_timeout=60)
        lk.release()
        count += 1
    out.put(count)


def contend(port, password, procs, seconds):
    gate = multiprocessing.Barrier(procs)
    out = multiprocessing.Queue()
    ps = [multiprocessing.Process(target=worker, args=(port, password, seconds, gate, out))
          for _ in range(procs)]
    for p in ps:
        p.start()
    counts = [out.get() for _ in ps]
    for p in ps:
        p.join()
    s, sq = sum(counts), sum(c * c for c in counts)
    print(f"FIGURE name=py_contend_{procs}_ops value={s / seconds:.0f} unit=acquisitions/s")
    print(f"FIGURE name=py_contend_{procs}_jain value={(s * s / (procs * sq)) if sq else 0:.3f} unit=index")


def main():
    port, password, mode = int(sys.argv[1]), sys.argv[2], sys.argv[3]
    if mode == "pair":
        pair(port, password, int(sys.argv[4]), int(sys.argv[5]))
    elif mode == "handoff":
        handoff(port, password, int(sys.argv[4]))
    elif mode == "contend":
        contend(port, password, int(sys.argv[4]), float(sys.argv[5]))
    else:
        sys.exit("bad mode")


if __name__ == "__main__":
    main()
