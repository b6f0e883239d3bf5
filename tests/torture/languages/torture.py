#!/usr/bin/env python3
"""Every implementation increments one counter file under one lock
directory at once, while a chaos thread sends kill -9 and SIGSTOP/SIGCONT
to the workers, the holder of the moment most of all.

    torture.py --tokenlock T --lock-worker W --source ROOT [--seconds S]
               [--seed N] [--dir D [--dir D2]]

Workers (each a slot restarted when its process ends, until the end):
  perl     worker.pl: the native Perl module's increment()
  perl-lock worker.pl: the native Perl module's acquire() and release(),
           the counter written by the worker under it, with a marker check
           for two live holders (below)
  php      worker.php: the PHP module's increment()
  python   worker.py: the C API through ctypes, update_file with a 1 s
           lease; it checks its token inside the critical section and
           sometimes stops itself there (a late commit, below)
  command  a shell loop of `tokenlock incr`
  cxx      lock_worker incr: the C++ library's increment_counter
  legacy   tests/legacy/my_flock.pl incr: the old Perl rename lock
  stall    lock_worker stall-update: the C++ library's update_file, stopped
           by itself just before its commit of a value no counter reaches
With two --dir (two client mounts of one network share) the workers
alternate between them.

Chaos: kill -9 to a worker or to the holder (the pid in the token, which
may be the `tokenlock` child of a worker); short stops (below any lease
here); and for a stopped-in-the-critical-section python or stall worker, a
stop that lasts until another process has taken the lock over (lease 1 s +
skew allowance 1 s). The legacy workers are never signalled: their lock has
no lease and no fence, and a write by `open '>'` interrupted by kill -9
empties the counter; that is the old lock's defect, not tokenlock's.

Logs: each worker appends one line per step to its own log, with O_APPEND
and one write per line, before it goes on: "i" before an increment, "d V"
after one committed V, "l" when it was refused with lock_lost, "e CODE" on
another error (CODE/ERRNO for a system error), "s" just before a self-stop in the critical section, "t"
when the critical section found the lock directory no longer holds its
token. lock_worker incr logs V only.

What is checked, at the end:
  exact      with N the final counter, G the increments of the legacy
             workers (never signalled, so each finished run counts all its
             increments) and D the committed values the others logged:
             0 <= N - G - |D| <= A, where A counts the increments that may
             have committed unlogged: an "i" (or a lock_worker run) left
             open by a process killed with -9, or an "e" of a worker whose
             `tokenlock` child was killed with -9 during that increment.
             Every A is tied to a kill -9 the chaos thread sent.
  cut short  on a network share, a worker on a mount with client caches
             (every --dir but the last) may read the counter through a
             cached size that is older than the file: "12" of "12\n". The
             version mark turns that into a stale read, but the first
             update after a takeover (which clears the workspace) or before
             the first marked commit reads unchecked (docs/atomic-writes.md);
             and the library's check (update.cpp, matches_mark) takes the
             file's time after the read, which may be the new version's
             while the bytes were cut at the old size: more than the skew
             allowance past the mark (after a legacy or perl-lock write),
             it passes as written outside the lock. The counter's parser
             then refuses the text as corrupt_data, nothing written. Such a
             refusal passes, counted, when its message shows a counter line
             cut before its newline (lock_worker prints none: its exit 4
             passes on such a mount). A counter that really is corrupt stays
             so, and fails the workers on the mount without caches and the
             final read.
  no twice   no value is in D twice, and every value is in 1..N.
  fenced     every "s" is followed by "l" in its log (the stop lasted until
             the lock was taken over, so its commit came late), every "t" by
             "l" (a holder that found its token gone must not commit), and
             every stall worker printed lock_lost, never committed (its value
             would show in N). The count of refused late commits is printed.
             A late commit refused with any other error (system/ESTALE, as
             a GlusterFS client once answered for the renamed token) fails.
  one holder the chaos thread lists the lock directory at each tick: two
             tokens at once, confirmed by a second listing, is a failure. A
             holder that committed without holding the lock shows as a
             duplicate value or a wrong N; the python workers check their
             token inside the critical section ("t" above); the perl-lock
             workers, whose holds no one may take over (a lease of an hour),
             claim a marker with O_EXCL inside: the marker of another live
             process there is two live holders ("x PID"). Markers left by
             killed holders are no evidence: a killed holder's token stays
             until it is taken over, so ownership is judged by the token.
  intact     the counter is one decimal and a newline; the lock directory
             holds only "lockfile" after a final `tokenlock incr --by 0`
             (which takes over the token of a holder killed at the end); no
             temporary file is left beside the counter. Before that read,
             what a killed worker left running in its session (a command
             worker's `tokenlock incr`) is killed: its increment is in doubt
             already, and it must not commit after the read.
Exit 0 pass, 1 failure (with the seed), 77 skip.
"""
import argparse
import re
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def parse_args():
    p = argparse.ArgumentParser()
    p.add_argument("--tokenlock", required=True)
    p.add_argument("--lock-worker", required=True)
    p.add_argument("--library", required=True, help="libtokenlock_c.so")
    p.add_argument("--source", required=True, help="the project's source tree")
    p.add_argument("--seconds", type=float, default=20)
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--dir", action="append", default=[])
    p.add_argument("--php-module", default=None,
                   help="the PHP module file the workers require (default: the source tree's "
                        "bindings/php/Tokenlock.php, the module in one file, as hosts deploy it)")
    p.add_argument("--marked-writers-only", action="store_true",
                   help="leave out the workers that write the counter without the version mark that the "
                        "library keeps on network filesystems: legacy and perl-lock (see torture_languages_netfs.sh)")
    return p.parse_args()


class Instance:
    def __init__(self, kind, slot, n, log, proc):
        self.kind, self.slot, self.n, self.log, self.proc = kind, slot, n, log, proc
        self.pid = proc.pid
        self.kills = []      # times this process was sent kill -9
        self.rc = None


class Torture:
    def __init__(self, a):
        self.a = a
        self.rng = random.Random(a.seed)
        self.work = tempfile.mkdtemp(prefix="tl-torture-")
        self.logs = os.path.join(self.work, "logs")
        os.mkdir(self.logs)
        self.stop = os.path.join(self.work, "stop")
        self.views = []
        name = "share-%d" % os.getpid()
        for d in a.dir or [self.work]:
            self.views.append(os.path.join(d, name))
        os.mkdir(self.views[0])
        os.mkdir(os.path.join(self.views[0], "perl-tmp"))
        with open(os.path.join(self.views[0], "count"), "w") as f:   # perl-lock reads it as it is
            f.write("0\n")
        self.markdir = os.path.join(self.work, "marker")
        os.mkdir(self.markdir)
        self.lock = threading.Lock()
        self.instances = []
        self.child_kills = []     # (time, pid, parent instance)
        self.legacy_done = 0
        self.stall = {"lock_lost": 0, "other": []}
        self.failures = []
        self.stopped_by_us = set()
        self.chaos_counts = {"kill": 0, "stop": 0, "late": 0}
        self.cut_short_exits = 0

    def counter(self, slot):
        return os.path.join(self.views[slot % len(self.views)], "count")

    def caching_view(self, slot):
        """Whether the slot's workers use a client mount with caches on
        (two --dir: the first; see watched)."""
        return len(self.views) > 1 and slot % len(self.views) != len(self.views) - 1

    def watched(self):
        """The counter through the last view: the mount without client
        caches, where a listing shows the lock directory as it is."""
        return self.counter(len(self.views) - 1)

    def fail(self, msg):
        with self.lock:
            self.failures.append(msg)

    # --- workers ---------------------------------------------------------
    def command(self, kind, slot, log):
        a, c = self.a, self.counter(slot)
        src = a.source
        if kind == "perl":
            return ["perl", os.path.join(HERE, "worker.pl"), os.path.join(src, "bindings/perl/lib"), c, self.stop, log,
                    "incr"]
        if kind == "perl-lock":
            return ["perl", os.path.join(HERE, "worker.pl"), os.path.join(src, "bindings/perl/lib"), c, self.stop, log,
                    "lock", self.markdir, os.path.join(os.path.dirname(c), "perl-tmp")]
        if kind == "php":
            mod = a.php_module or os.path.join(src, "bindings/php/Tokenlock.php")
            return ["php", os.path.join(HERE, "worker.php"), mod, c, self.stop, log]
        if kind == "python":
            return [sys.executable, os.path.join(HERE, "worker.py"), os.path.join(src, "bindings/python"),
                    c, self.stop, log, str(self.rng.randrange(1 << 30)), "12",
                    "1" if slot % len(self.views) == len(self.views) - 1 else "0"]
        if kind == "command":
            loop = ('while [ ! -e "$1" ]; do echo "i $(date +%s.%N)" >>"$2"; '
                    'if v=$("$3" incr -w 60 "$4"); then echo "d $v $(date +%s.%N)" >>"$2"; '
                    'else echo "e $? $(date +%s.%N)" >>"$2"; fi; done')
            return ["bash", "-c", loop, "loop", self.stop, log, a.tokenlock, c]
        if kind == "cxx":
            return [a.lock_worker, "--lock", c + ".lock", "incr", c, "20", log]
        if kind == "legacy":
            return ["perl", os.path.join(a.source, "tests/legacy/my_flock.pl"), c + ".lock", "60", "0.002",
                    "incr", c, "20"]
        raise ValueError(kind)

    def start(self, kind, slot, n):
        log = os.path.join(self.logs, "%s-%d-%d.log" % (kind, slot, n))
        open(log, "a").close()
        err = open(os.path.join(self.logs, "%s-%d-%d.err" % (kind, slot, n)), "w")
        env = dict(os.environ, TOKENLOCK_COMMAND=self.a.tokenlock, TOKENLOCK_LIBRARY=self.a.library)
        proc = subprocess.Popen(self.command(kind, slot, log), stdout=subprocess.DEVNULL, stderr=err,
                                env=env, start_new_session=True)
        err.close()
        inst = Instance(kind, slot, n, log, proc)
        with self.lock:
            self.instances.append(inst)
        return inst

    def run_slot(self, kind, slot):
        n = 0
        while not os.path.exists(self.stop):
            inst = self.start(kind, slot, n)
            inst.rc = inst.proc.wait()
            n += 1
            self.judge_exit(inst)

    def judge_exit(self, inst):
        rc = inst.rc
        with self.lock:
            killed = bool(inst.kills)
        if inst.kind == "legacy":
            if rc != 0:
                self.fail("the legacy worker %s exited %d: %s" % (inst.log, rc, self.err_of(inst)))
            else:
                with self.lock:
                    self.legacy_done += 20
        elif rc == -signal.SIGKILL and killed:
            pass
        elif inst.kind == "cxx" and rc in (5, 6):
            pass    # stale_data or lock_lost, refused before a commit: nothing written
        elif inst.kind == "cxx" and rc == 4 and self.caching_view(inst.slot):
            with self.lock:
                self.cut_short_exits += 1    # corrupt_data without its text: see "cut short"
        elif rc != 0:
            self.fail("the %s worker %s exited %d: %s" % (inst.kind, inst.log, rc, self.err_of(inst)))

    def err_of(self, inst):
        with open(inst.log[:-4] + ".err") as f:
            return f.read()[-2000:]

    # --- the lock directory, as the chaos thread sees it -----------------
    def tokens(self):
        try:
            names = os.listdir(self.watched() + ".lock")
        except OSError:
            return []
        return sorted(n for n in names if n.startswith("lockfile") and n != "lockfile")

    def token_pids(self):
        pids = set()
        for t in self.tokens():
            parts = t.split(".")
            if len(parts) >= 6 and parts[-3].isdigit():
                pids.add(int(parts[-3]))
        return pids

    def check_one_holder(self):
        first = self.tokens()
        if len(first) < 2:
            return
        time.sleep(0.005)   # a listing is not a snapshot: a rename may show twice (docs/protocol.md)
        again = self.tokens()
        if len(again) >= 2 and set(first) & set(again) == set(first):
            self.fail("two tokens at once in the lock directory: %s" % again)

    def owner(self, pid):
        """The signalable worker instance that is pid or its parent."""
        try:
            with open("/proc/%d/stat" % pid) as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            return None
        with self.lock:
            for inst in self.instances:
                if inst.rc is None and inst.kind != "legacy" and inst.pid in (pid, ppid):
                    return inst
        return None

    def alive_instances(self):
        with self.lock:
            return [i for i in self.instances if i.rc is None and i.kind != "legacy"]

    @staticmethod
    def state(pid):
        try:
            with open("/proc/%d/stat" % pid) as f:
                return f.read().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            return "?"

    # --- chaos -------------------------------------------------------------
    def continue_taken_over(self):
        """Continues each process stopped in its critical section once its
        token is gone (another process took the lock over) and the counter
        has moved on by 3 since the stop, so that a late commit, were it let
        through, would show as a value committed twice. Without progress
        (the end of the run) 3 s after the token went suffice, and once the
        stop file is there, the takeover alone."""
        held = self.token_pids()
        now = time.time()
        for pid, rec in list(self.awaiting.items()):
            if pid in held:
                continue
            rec.setdefault("gone", now)
            value = self.peek()
            moved = value is not None and rec["at"] is not None and value >= rec["at"] + 3
            if moved or self.ending or now > rec["gone"] + 3:
                self.signal(pid, signal.SIGCONT)
                del self.awaiting[pid]
                self.chaos_counts["late"] += 1

    def peek(self):
        """The counter outside the lock (the legacy workers write it in
        place, so a read may see it empty: None)."""
        try:
            with open(self.watched()) as f:
                return int(f.read())
        except (OSError, ValueError):
            return None

    def await_takeover(self, pid):
        self.awaiting[pid] = {"at": self.peek()}

    def find_self_stopped(self):
        for inst in self.alive_instances():
            if inst.kind == "python" and inst.pid not in self.awaiting and self.state(inst.pid) == "T":
                self.await_takeover(inst.pid)
        for pid in self.stall_stopped():
            if pid not in self.awaiting:
                self.await_takeover(pid)

    def pick(self):
        """A signalable pid: the holder's half of the time, else a worker's."""
        if self.rng.random() < 0.5:
            for pid in sorted(self.token_pids()):
                inst = self.owner(pid)
                if inst is not None:
                    return pid, inst
        alive = [i for i in self.alive_instances() if i.pid not in self.awaiting]
        if not alive:
            return None, None
        inst = self.rng.choice(alive)
        return inst.pid, inst

    def strike(self):
        pid, inst = self.pick()
        if pid is None or pid in self.awaiting:
            return
        r = self.rng.random()
        if r < 0.35:
            self.kill(pid, inst)
        elif inst.kind == "python" and pid == inst.pid and pid in self.token_pids():
            # Stopped past its lease (1 s + 1 s skew): taken over meanwhile.
            if not self.signal(pid, signal.SIGSTOP):
                return
            self.await_takeover(pid)
            self.chaos_counts["stop"] += 1
        else:
            # Shorter than any lease of these workers (60 s, 3600 s):
            # others wait for it; nobody may take over a live holder.
            if not self.signal(pid, signal.SIGSTOP):
                return
            time.sleep(self.rng.uniform(0.02, 0.3))
            self.signal(pid, signal.SIGCONT)
            self.chaos_counts["stop"] += 1

    @staticmethod
    def signal(pid, sig):
        """False when the pid has gone: a holder's child (the command's
        process under `run`) may end, or be a zombie its parent reaps,
        between the pick and the signal, even while stopped."""
        try:
            os.kill(pid, sig)
            return True
        except ProcessLookupError:
            return False

    def kill(self, pid, inst):
        # Sent and recorded under the lock: the slot's thread judges the
        # exit as soon as the process is gone, and must find the kill
        # (under load it once judged first: "exited -9" with no kill).
        with self.lock:
            now = time.time()
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                return
            if pid == inst.pid:
                inst.kills.append(now)
            else:
                self.child_kills.append((now, pid, inst))
        self.chaos_counts["kill"] += 1

    def chaos(self, until):
        self.awaiting = {}
        self.ending = False
        next_stall = time.time() + 1
        while time.time() < until:
            self.check_one_holder()
            self.find_self_stopped()
            self.continue_taken_over()
            if time.time() >= next_stall and not self.stall_busy():
                self.start_stall()
                next_stall = time.time() + self.rng.uniform(1.5, 3)
            self.strike()
            time.sleep(self.rng.uniform(0.03, 0.2))   # pacing of the chaos, not a synchronisation

    # --- the stalled C++ update ---------------------------------------------
    STALL_VALUE = 900000000000

    def start_stall(self):
        slot = len(self.stalls)
        c = self.counter(slot)
        p = subprocess.Popen([self.a.lock_worker, "--lock", c + ".lock", "stall-update", c, "1000",
                              str(self.STALL_VALUE)],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        rec = {"proc": p, "stopped": False, "out": []}
        self.stalls.append(rec)
        threading.Thread(target=self.read_stall, args=(rec,), daemon=True).start()

    def read_stall(self, rec):
        for line in rec["proc"].stdout:
            line = line.strip()
            rec["out"].append(line)
            if line == "T":
                rec["stopped"] = True
        rec["proc"].wait()

    def stall_stopped(self):
        return [r["proc"].pid for r in self.stalls
                if r["stopped"] and r["proc"].poll() is None and self.state(r["proc"].pid) == "T"]

    def stall_busy(self):
        return any(r["proc"].poll() is None for r in self.stalls)

    # --- the end ---------------------------------------------------------------
    def release_the_stopped(self):
        """After the stop file: a process still stopped in its critical
        section waits for a takeover that no worker may come to make; the
        command makes it, so that its commit comes late as the others did."""
        deadline = time.time() + 60
        while time.time() < deadline:
            if not self.release_round():
                return
        self.fail("processes still stopped in their critical section after 60 s: %s" % sorted(self.awaiting))

    def release_round(self):
        """One look for processes stopped in their critical section, and a
        takeover that lets each one's commit come late. False when none is
        left (or the takeover failed, which is reported)."""
        self.find_self_stopped()
        self.continue_taken_over()
        if not self.awaiting:
            return False
        lock = self.watched() + ".lock"
        r = subprocess.run([self.a.tokenlock, "acquire", "-w", "30", lock], capture_output=True, text=True)
        if r.returncode != 0:
            self.fail("the final takeover of %s failed: %s" % (lock, r.stderr))
            return False
        self.continue_taken_over()
        subprocess.run([self.a.tokenlock, "release", lock, r.stdout.strip()], check=False)
        return True

    def wind_down(self, threads):
        open(self.stop, "w").close()
        self.ending = True
        self.release_the_stopped()
        # A legacy worker never takes over a tokenlock token: one left by a
        # holder killed near the end, when no tokenlock worker is left to
        # free it, would hold it for ever. So tokenlock frees it, as
        # docs/protocol.md (Legacy tokens) says it must, until every slot ended.
        ended = threading.Event()
        nudger = threading.Thread(target=self.free_dead_holders, args=(ended,), daemon=True)
        nudger.start()
        self.join_slots(threads)
        self.end_orphans()
        ended.set()
        nudger.join()

    def end_orphans(self):
        """A worker killed with -9 may leave a child behind in its session:
        the `tokenlock incr` of a command worker, which goes on waiting (up
        to its 60 s) and commits whenever it gets the lock, after the final
        read too (seen on MooseFS: the counter one above that read). Its
        increment is in doubt already (the killed worker's open "i"): it is
        killed, so that nothing writes the counter after the slots ended."""
        with self.lock:
            sessions = {i.pid: max(i.kills) for i in self.instances if i.kills}
        deadline = time.time() + 10
        while True:
            left = self.session_members(sessions)
            if not left:
                return
            if time.time() > deadline:
                self.fail("processes of killed workers did not end within 10 s of SIGKILL: %s" % left)
                return
            for pid in left:
                self.signal(pid, signal.SIGKILL)
            time.sleep(0.05)    # polls for their end, within the bound above

    @staticmethod
    def session_members(sessions):
        """Live processes in one of `sessions` (session id: the time its
        leader was killed; each worker leads its own: start_new_session)
        that started before that kill: pids wrap, and a later process may
        lead a session of a reused id."""
        with open("/proc/stat") as f:
            boot = next(int(ln.split()[1]) for ln in f if ln.startswith("btime "))
        tick = os.sysconf("SC_CLK_TCK")
        found = []
        for name in os.listdir("/proc"):
            if not name.isdigit():
                continue
            try:
                with open("/proc/%s/stat" % name) as f:
                    fields = f.read().rsplit(")", 1)[1].split()
                sid, started = int(fields[3]), boot + int(fields[19]) / tick
            except (OSError, IndexError, ValueError):
                continue
            if sid in sessions and fields[0] not in ("Z", "X") and started <= sessions[sid] + 1:
                found.append(int(name))
        return found

    def free_dead_holders(self, ended):
        while not ended.wait(0.5):
            # A python worker that logged "s" just before the stop file came
            # may stop itself only after release_the_stopped looked (it was
            # still running then): nobody else would ever continue it.
            self.release_round()
            subprocess.run([self.a.tokenlock, "incr", "--by", "0", "-w", "5", self.watched()],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def join_slots(self, threads):
        for t in threads:
            t.join(60)
            if t.is_alive():
                self.fail("a worker slot did not end within 60 s of the stop (a lock never freed?)")
                for inst in self.alive_instances():
                    self.signal(inst.pid, signal.SIGKILL)
        for rec in self.stalls:
            # A stall that printed T but stopped itself only after the
            # stopped ones were continued would stay stopped: continue it
            # again until it ends.
            for _ in range(60):
                try:
                    os.kill(rec["proc"].pid, signal.SIGCONT)
                except ProcessLookupError:
                    pass
                try:
                    rec["proc"].wait(1)
                    break
                except subprocess.TimeoutExpired:
                    continue
            if rec["proc"].poll() is None:
                self.fail("a stalled update never ended")
                rec["proc"].kill()

    def abandon(self):
        """After a fault of this script: no worker it started outlives it
        (they would go on writing to the share the rig takes down)."""
        open(self.stop, "w").close()
        with self.lock:
            procs = [i.proc for i in self.instances if i.rc is None]
        procs += [rec["proc"] for rec in getattr(self, "stalls", [])]
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()

    def run(self):
        kinds = ["perl", "perl-lock", "php", "php", "python", "python", "command", "command", "cxx", "legacy"]
        if self.a.marked_writers_only:
            kinds[1], kinds[-1] = "perl", "cxx"
        self.stalls = []
        threads = []
        for slot, kind in enumerate(kinds):
            t = threading.Thread(target=self.run_slot, args=(kind, slot), daemon=True)
            t.start()
            threads.append(t)
        self.chaos(time.time() + self.a.seconds)
        self.wind_down(threads)
        final = subprocess.run([self.a.tokenlock, "incr", "--by", "0", "-w", "30", self.watched()],
                               capture_output=True, text=True)
        if final.returncode == 75 and not self.a.marked_writers_only:
            # The last write was a legacy worker's, in the second of the last
            # version mark, on a filesystem whose times have whole seconds:
            # the updater cannot tell it from a stale read and refuses, nothing
            # written (docs/atomic-writes.md). Every worker has stopped, so a
            # plain read gives the counter.
            print("NOTE: the final tokenlock read was refused with stale_data (a legacy write in the "
                  "second of the last commit); the counter is read directly")
            with open(self.watched()) as f:
                text = f.read()
            if not re.fullmatch(r"(0|[1-9][0-9]*)\n", text):
                self.fail("the counter is not one number and a newline: %r" % text)
                return None
            return int(text)
        if final.returncode != 0:
            self.fail("the final read of the counter failed: %s" % final.stderr)
            return None
        return int(final.stdout)

    # --- the checks --------------------------------------------------------------
    def read_log(self, inst):
        with open(inst.log) as f:
            lines = [ln.split() for ln in f.read().splitlines() if ln.strip()]
        if inst.kind == "cxx":
            return [["d", ln[0]] for ln in lines]
        return lines

    def killed_child_during(self, inst, start, end):
        return any(p is inst and start <= t <= end for t, _, p in self.child_kills)

    # The text a counter parser quotes when it refuses one (every
    # implementation words it alike).
    HOLDS = re.compile(r'does not hold one unsigned decimal and a newline \(it holds "(.*?)", (\d+) bytes\)')

    def cut_short_reads(self, inst):
        """How many of the instance's corrupt_data refusals quote a counter
        line cut before its newline, read through a cached size (see "cut
        short"): none off a caching mount, or if any quotes something else."""
        if not self.caching_view(inst.slot):
            return 0
        with open(inst.log[:-4] + ".err") as f:
            quoted = self.HOLDS.findall(f.read())
        if not all(re.fullmatch(r"(0|[1-9][0-9]*)?", text) and int(size) == len(text) for text, size in quoted):
            return 0
        return len(quoted)

    def scan(self, inst, acc):
        """Adds the instance's committed values and open increments to acc."""
        lines = self.read_log(inst)
        opened = None
        cut_short = self.cut_short_reads(inst)
        for i, ln in enumerate(lines):
            tag = ln[0]
            if tag == "d":
                acc["done"].append((int(ln[1]), inst.log))
                opened = None
            elif tag == "i":
                opened = float(ln[1])
            elif tag == "e" and ln[1] in ("stale_data", "75"):
                acc["stale"] += 1    # a client's stale cache, detected: nothing written
                opened = None
            elif tag == "e" and ln[1] in ("corrupt_data", "65") and cut_short > 0:
                cut_short -= 1
                acc["cut"] += 1      # a cached size, read unchecked: nothing written
                opened = None
            elif tag == "e":
                if opened is not None and self.killed_child_during(inst, opened, float(ln[-1])):
                    acc["ambiguous"] += 1
                else:
                    acc["errors"].append("%s: %s" % (inst.log, " ".join(ln)))
                opened = None
            elif tag == "l":
                acc["lost"] += 1
                opened = None
            elif tag == "x":
                self.fail("%s: two live holders at once: the marker of live process %s was there" % (inst.log, ln[1]))
            elif tag in ("s", "t"):
                nxt = next((x[0] for x in lines[i + 1:] if x[0] in ("d", "l", "e")), None)
                if nxt == "d" or (nxt is None and not inst.kills):
                    self.fail("%s: after '%s' (the lock taken over in the critical section) the increment "
                              "was %s, not refused with lock_lost" % (inst.log, tag, "committed" if nxt else "never ended"))
                acc["late"] += tag == "s"
        if inst.kills and (opened is not None or inst.kind == "cxx"):
            acc["ambiguous"] += 1

    def check(self, n):
        acc = {"done": [], "ambiguous": 0, "errors": [], "lost": 0, "late": 0, "stale": 0,
               "cut": self.cut_short_exits}
        for inst in self.instances:
            if inst.kind != "legacy":
                self.scan(inst, acc)
        for e in acc["errors"]:
            self.fail("a worker's increment failed (no kill -9 explains it): " + e)
        seen = {}
        for v, log in acc["done"]:
            if v in seen:
                self.fail("value %d committed twice: %s and %s" % (v, seen[v], log))
            seen[v] = log
            if not 1 <= v <= n:
                self.fail("value %d (%s) is outside 1..%d, the final counter" % (v, log, n))
        unlogged = n - self.legacy_done - len(seen)
        if not 0 <= unlogged <= acc["ambiguous"]:
            self.fail("counter %d = %d legacy + %d logged + %d unaccounted increments; kill -9 left only %d "
                      "increments in doubt: %s" % (n, self.legacy_done, len(seen), unlogged, acc["ambiguous"],
                                                   "lost updates" if unlogged < 0 else "increments that no worker reported"))
        self.check_stalls()
        print("counter %d: %d logged, %d legacy, %d committed by killed workers unlogged (at most %d in doubt); "
              "refused with lock_lost: %d (late commits after a stop in the critical section: %d python, %d C++ stall); "
              "refused as stale reads: %d; refused as corrupt, read cut short through a cached size: %d; "
              "chaos: %d kill -9, %d stops"
              % (n, len(seen), self.legacy_done, unlogged, acc["ambiguous"], acc["lost"], acc["late"],
                 self.stall["lock_lost"], acc["stale"], acc["cut"], self.chaos_counts["kill"],
                 self.chaos_counts["stop"]))
        return acc

    def check_stalls(self):
        for rec in self.stalls:
            out = rec["out"]
            if any(line.startswith("lock_lost") for line in out):   # "lock_lost MESSAGE"
                self.stall["lock_lost"] += 1
            elif "committed" in out:
                self.fail("a stalled C++ update committed after its lock was taken over: %s" % out)
            elif "T" in out:
                self.fail("a stalled C++ update ended with %s: %s" % (out, rec["proc"].stderr.read()))
            # Never reaching "T": it did not get the lock within 30 s of contention, nothing to judge.

    def check_intact(self, n):
        c = self.watched()
        with open(c) as f:
            text = f.read()
        if text != "%d\n" % n:
            self.fail("the counter holds %r" % text)
        names = sorted(os.listdir(c + ".lock"))
        if [x for x in names if x.startswith("lockfile")] != ["lockfile"]:
            self.fail("the lock directory holds %s after the final increment" % names)
        left = [x for x in os.listdir(os.path.dirname(c)) if ".tmp." in x]
        if left:
            self.fail("temporary files left beside the counter: %s" % left)


def missing(a):
    """The reason this machine cannot run every implementation, or None."""
    import shutil
    for prog in ("perl", "php", "bash"):
        if shutil.which(prog) is None:
            return "%s is not installed (scripts/install-deps installs it)" % prog
    for path in (a.tokenlock, a.lock_worker):
        if not os.access(path, os.X_OK):
            return "%s is not built" % path
    if not os.path.exists(a.library):
        return "%s (the C API) is not built" % a.library
    return None


def main():
    a = parse_args()
    reason = missing(a)
    if reason:
        print("SKIP: " + reason)
        return 77
    if a.seed is None:
        a.seed = int.from_bytes(os.urandom(4), "little")
    print("seed %d (replay: --seed %d), %s" % (a.seed, a.seed, ", ".join(a.dir) or "a local temporary directory"),
          flush=True)
    t = Torture(a)
    # The rig's `timeout` ends a run that hangs with SIGTERM: as an
    # exception, so that abandon() stops the workers before the share goes.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    try:
        n = t.run()
    except BaseException:
        t.abandon()
        raise
    if n is not None:
        t.check(n)
        t.check_intact(n)
    for f in t.failures:
        print("FAIL: " + f)
    if t.failures:
        print("FAIL with seed %d; logs kept in %s" % (a.seed, t.work))
        return 1
    import shutil
    shutil.rmtree(t.views[0], ignore_errors=True)
    shutil.rmtree(t.work, ignore_errors=True)
    print("ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
