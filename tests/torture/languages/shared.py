#!/usr/bin/env python3
"""Readers, writers and slot holders of every implementation with shared
locks on one counter's lock and one semaphore, while a chaos thread sends
kill -9, short stops and stops past the lease to their process sessions.

    shared.py --tokenlock T --source ROOT [--seconds S] [--seed N]
              [--dir D [--dir D2]] [--slots N] [--lease S]
              [--langs php,perl,cxx] [--kinds rsw] [--keep] [--refused]

Workers (three per implementation, each restarted when its process ends);
each hold is one of, chosen by the worker's own seeded random numbers:
  r  a reader: COUNTER.lock shared; reads the counter inside
  s  a slot holder: one of --slots N slots of sem.lock
  w  a writer: COUNTER.lock exclusive; reads the counter and commits it
     plus one through the held token (`tokenlock commit`, fenced: refused
     once the lock was taken over)
  php   shared_worker.php: Lock::acquire with 'shared' / 'slots'
  perl  shared_worker.pl: Tokenlock->acquire with shared / slots
  cxx   shared_worker.sh: `tokenlock run -s` and `run --slots N` (the
        readers and slot holders), `tokenlock acquire --pid` (the writers)
  python shared_worker.py: Lock.acquire with shared=True / slots=N, the
        writers commit with commit_file (fenced); on the C API with
        --library, else on the command. Only where the source tree's
        module has shared locks (class ReadWriteLock or Semaphore).
Every hold has a lease of --lease seconds (a `tokenlock run` refreshes it).
With two --dir (two client mounts of one network share) the workers
alternate between them; those on the first (client caches on) only read
and hold slots: a writer reads the counter itself, and through a cached
size or page it could read an old value, which no version mark catches
here (docs/atomic-writes.md), and commit it twice.

A writer stops itself (SIGSTOP, logged "s") before one commit in 16; the
chaos thread continues it past its lease and the skew allowance, so that
the commit comes after the lock may have been taken over and must then be
refused (a fenced commit), as torture.py's python workers do.

Chaos, to a worker's whole session (a `tokenlock run` and its command
stop and die together): kill -9; a short stop (10-150 ms, inside any
lease); a stop past the lease and the skew allowance (lease + 1.3 to
lease + 2.5 s), after which others may take the hold over and its owner,
continued, must not act as a holder. Six strikes in ten go to a worker
that is in a hold.

The event log (local disk, whatever --dir): every worker appends one line
per step with O_APPEND and one write per line, from inside the hold:
    LANG PID HOLD TAG [ARG] TIME
"+ K" just after the acquire (K: r, s, w), "r V" the counter read ("r
torn:HEX" for a text that is not one decimal and a newline), "c V" before a
writer's commit of V, "W V" after it, "-" just before the release, then
"ok" (released), "l" (the commit or the release was refused with
lock_lost), or "e CODE".

What is checked, at the end (a hold's interval is from its "+" to its "-";
of a killed holder, to its last line; of a hold that ended "l" or was
killed, cut at its first stop, at its lease from the "+" and at its last
line, whichever comes first; a late commit is judged by the counter):
  writer alone  no writer's interval overlaps any other interval on the
                counter's lock
  N slots       never more than N slot intervals at once
  exact         the W values are distinct, in 1..N (N the final counter),
                and N - |W| is at most the writes in doubt (a "c" of a
                killed writer with no answer)
  reads         no read is torn; a read within its interval is at least
                every W logged before its hold began and at most N (only
                on the mount without client caches)
  kept          a hold lost (l) less than half its lease after its "+",
                its worker neither stopped nor killed meanwhile, was taken
                over live: a holder is taken over only when its lease ended
                or its owner is dead (docs/protocol.md); judged on the
                mount without client caches only, as the reads are
  ended         every hold of a worker that was not killed ended (ok or l)
                with no error; and the lock directories hold one free token
                after a final exclusive hold and slot hold by the command
                (which take over the holds of the last killed workers)
With --refused (a filesystem where holders leave owner marks: GlusterFS,
MooseFS, where docs/protocol.md refuses shared holds), no torture: each
implementation's shared and slot acquire must end with not_supported (the
command's exit 69), and the lock directory keep one empty free token.
Exit 0 pass, 1 failure (with the seed), 77 skip.
"""
import argparse
import bisect
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SKEW = 1.0            # the skew allowance others add to a lease before a takeover
LANGS = ["php", "perl", "cxx", "python"]


def parse_args():
    p = argparse.ArgumentParser()
    p.add_argument("--tokenlock", required=True)
    p.add_argument("--source", required=True, help="the project's source tree")
    p.add_argument("--seconds", type=float, default=20)
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--dir", action="append", default=[])
    p.add_argument("--slots", type=int, default=2)
    p.add_argument("--lease", type=float, default=1.5,
                   help="the lease of every hold, in seconds (default: 1.5, above the skew allowance of 1 s)")
    p.add_argument("--langs", default=None,
                   help="the implementations that run workers, three each, of %s (default: all; python "
                        "where the source tree's module has shared locks)" % ",".join(LANGS))
    p.add_argument("--library", default=None,
                   help="libtokenlock_c.so, for the python workers (default: they run the command)")
    p.add_argument("--kinds", default="rsw", help="the kinds of hold the workers choose among (default: rsw)")
    p.add_argument("--keep", action="store_true", help="keep the event log and the workers' stderr after a pass")
    p.add_argument("--php-module", default=None,
                   help="the PHP module file (default: the source tree's bindings/php/Tokenlock.php)")
    p.add_argument("--refused", action="store_true",
                   help="the filesystem refuses shared holds (holders leave owner marks there: GlusterFS, "
                        "MooseFS): check that every implementation refuses them cleanly, instead of the torture")
    return p.parse_args()


# One shared (or slot) acquire of DIR by each implementation, printing the
# error code it ends with ("held" if it got the lock).
REFUSAL_PROBES = {
    "php": ["php", "-r", r"""require $argv[1];
try { \Tokenlock\Lock::acquireShared($argv[2], $argv[3] === 'slots' ? ['slots' => 2, 'wait' => 1] : ['wait' => 1]);
      echo 'held'; } catch (\Tokenlock\Exception $e) { echo $e->getError(); }"""],
    "perl": ["perl", "-e", r"""unshift @INC, shift; require Tokenlock; my ($d, $how) = @ARGV;
my $l = eval { Tokenlock->acquire($d, wait => 1, $how eq 'slots' ? (slots => 2) : (shared => 1)) };
print $l ? 'held' : ref $@ ? $@->code : "perl: $@";"""],
    "python": [sys.executable, "-c", r"""import os, sys
sys.path.insert(0, sys.argv[1]); import tokenlock
tokenlock.use("library" if os.environ.get("TOKENLOCK_LIBRARY") else "command")
try:
    tokenlock.Lock.acquire(sys.argv[2], wait=1, **({"slots": 2} if sys.argv[3] == "slots" else {"shared": True}))
    print("held")
except tokenlock.Error as e:
    print(e.code)"""],
}


def check_refused(a):
    """On a filesystem where holders leave owner marks, every
    implementation's shared and slot acquire ends with not_supported (the
    command's exit 69), and the lock directory keeps its one free token."""
    failures = []
    d = os.path.join(a.dir[-1], "refused-%d.lock" % os.getpid())
    r = subprocess.run([a.tokenlock, "run", "-w", "5", d, "true"], capture_output=True, text=True)
    if r.returncode != 0:
        return ["an exclusive hold of %s failed (%d): %s" % (d, r.returncode, r.stderr)]
    env = dict(os.environ, TOKENLOCK_COMMAND=a.tokenlock)
    env.pop("TOKENLOCK_LIBRARY", None)
    if a.library:
        env["TOKENLOCK_LIBRARY"] = a.library
    module = {"php": a.php_module or os.path.join(a.source, "bindings/php/Tokenlock.php"),
              "perl": os.path.join(a.source, "bindings/perl/lib"), "python": os.path.join(a.source, "bindings/python")}
    for how in ("shared", "slots"):
        r = subprocess.run([a.tokenlock, "run", "-w", "1"] + (["-s"] if how == "shared" else ["--slots", "2"]) +
                           [d, "true"], capture_output=True, text=True)
        if r.returncode != 69 or "not supported" not in r.stderr:
            failures.append("cxx %s: exit %d, not 69 (not_supported): %s" % (how, r.returncode, r.stderr.strip()))
        for lang in [x for x in a.langs.split(",") if x in REFUSAL_PROBES]:
            r = subprocess.run(REFUSAL_PROBES[lang] + [module[lang], d, how], capture_output=True, text=True, env=env)
            if r.stdout.strip() != "not_supported":
                failures.append("%s %s: %r, not not_supported (%s)" % (lang, how, r.stdout.strip(), r.stderr.strip()))
        names = sorted(os.listdir(d))
        if [n for n in names if n.startswith("lockfile")] != ["lockfile"] or os.listdir(os.path.join(d, "lockfile")):
            failures.append("%s after the refused %s acquires: %s, not one empty free token" % (d, how, names))
    shutil.rmtree(d, ignore_errors=True)
    return failures


def python_has_shared(source):
    with open(os.path.join(source, "bindings/python/tokenlock.py")) as f:
        text = f.read()
    return re.search(r"^class (ReadWriteLock|Semaphore)\b", text, re.M) is not None


class Instance:
    def __init__(self, lang, slot, proc):
        self.lang, self.slot, self.proc, self.pid = lang, slot, proc, proc.pid
        self.kills = []       # times of the kill -9 sent to its session
        self.stops = []       # [start, end] of each stop of its session
        self.rc = None


class Torture:
    def __init__(self, a):
        self.a = a
        self.rng = random.Random(a.seed)
        self.work = tempfile.mkdtemp(prefix="tl-shared-")
        self.log = os.path.join(self.work, "events.log")
        open(self.log, "w").close()
        self.stop = os.path.join(self.work, "stop")
        name = "shared-%d" % os.getpid()
        self.views = [os.path.join(d, name) for d in (a.dir or [self.work])]
        os.mkdir(self.views[0])
        with open(os.path.join(self.views[0], "count"), "w") as f:
            f.write("0\n")
        self.lock = threading.Lock()
        self.instances = []
        self.failures = []
        self.counts = {"kill": 0, "stop": 0, "long": 0, "self": 0}
        self.long_stopped = {}     # pid -> the time to continue it
        self.in_hold = {}          # pid -> whether its last logged step is inside a hold
        self.self_stopping = {}    # pid -> the time a writer logged "s", stopping itself before its commit
        self.log_pos = 0
        self.chaos_log = open(os.path.join(self.work, "chaos.log"), "w")   # what was sent, when: for a failure's reader

    def view_index(self, slot):
        """Slot k of an implementation's three: on the views in turn, each
        implementation starting on its own, so that each has workers on
        every view (and writers on the last) whatever their number."""
        n = len(self.a.langs.split(","))
        return (slot % n + slot // n) % len(self.views)

    def view(self, slot):
        return self.views[self.view_index(slot)]

    def caching(self, slot):
        return len(self.views) > 1 and self.view_index(slot) != len(self.views) - 1

    def fail(self, msg):
        with self.lock:
            self.failures.append(msg)

    # --- workers -------------------------------------------------------------
    def command(self, lang, slot):
        a, v = self.a, self.view(slot)
        kinds = self.a.kinds.replace("w", "") if self.caching(slot) else self.a.kinds
        common = [os.path.join(v, "count"), os.path.join(v, "sem.lock"), str(a.slots), "%g" % a.lease,
                  self.stop, self.log, str(self.rng.randrange(1 << 15)), kinds]
        if lang == "php":
            mod = a.php_module or os.path.join(a.source, "bindings/php/Tokenlock.php")
            return ["php", os.path.join(HERE, "shared_worker.php"), mod] + common
        if lang == "perl":
            return ["perl", os.path.join(HERE, "shared_worker.pl"), os.path.join(a.source, "bindings/perl/lib")] + common
        if lang == "cxx":
            return ["bash", os.path.join(HERE, "shared_worker.sh"), a.tokenlock] + common
        if lang == "python":
            return [sys.executable, os.path.join(HERE, "shared_worker.py"), os.path.join(a.source, "bindings/python")] + common
        raise ValueError(lang)

    def run_slot(self, lang, slot):
        while not os.path.exists(self.stop):
            err = open(os.path.join(self.work, "%s-%d.err" % (lang, slot)), "a")
            env = dict(os.environ, TOKENLOCK_COMMAND=self.a.tokenlock)
            env.pop("TOKENLOCK_LIBRARY", None)
            if self.a.library:
                env["TOKENLOCK_LIBRARY"] = self.a.library
            proc = subprocess.Popen(self.command(lang, slot), stdout=subprocess.DEVNULL, stderr=err, env=env,
                                    start_new_session=True)
            err.close()
            inst = Instance(lang, slot, proc)
            with self.lock:
                self.instances.append(inst)
            rc = proc.wait()
            with self.lock:
                inst.rc = rc
                killed = bool(inst.kills)
            if rc != 0 and not (killed and rc == -signal.SIGKILL):
                self.fail("the %s worker %d exited %d (see %s-%d.err)" % (lang, inst.pid, rc, lang, slot))

    def alive(self):
        with self.lock:
            return [i for i in self.instances if i.rc is None]

    # --- chaos ---------------------------------------------------------------
    def follow_log(self):
        """Reads the event lines written since the last call: which workers
        are inside a hold now."""
        with open(self.log) as f:
            f.seek(self.log_pos)
            chunk = f.read()
        end = chunk.rfind("\n") + 1
        self.log_pos += len(chunk[:end].encode())
        for line in chunk[:end].splitlines():
            parts = line.split()
            if len(parts) >= 5:
                self.in_hold[int(parts[1])] = parts[3] not in ("ok", "l", "e")
                if parts[3] == "s":
                    self.self_stopping[int(parts[1])] = float(parts[-1])

    def session(self, sid):
        """The live processes of a worker's session (it leads its own)."""
        found = []
        for name in os.listdir("/proc"):
            if name.isdigit():
                try:
                    with open("/proc/%s/stat" % name) as f:
                        fields = f.read().rsplit(")", 1)[1].split()
                except (OSError, IndexError):
                    continue
                if int(fields[3]) == sid and fields[0] not in ("Z", "X"):
                    found.append(int(name))
        return found

    def signal_session(self, inst, sig):
        self.chaos_log.write("%s %d %s %.6f\n" % (inst.lang, inst.pid, signal.Signals(sig).name, time.time()))
        self.chaos_log.flush()
        for pid in self.session(inst.pid):
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass

    @staticmethod
    def state(pid):
        try:
            with open("/proc/%d/stat" % pid) as f:
                return f.read().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            return "?"

    def take_self_stopped(self):
        """A writer that stopped itself before its commit is continued past
        its lease and the skew allowance, as a long stop is."""
        for pid, t in list(self.self_stopping.items()):
            inst = next((i for i in self.alive() if i.pid == pid), None)
            if inst is None or pid in self.long_stopped:    # gone, or stopped long by a strike already
                del self.self_stopping[pid]
            elif self.state(pid) == "T":
                inst.stops.append([t, None])
                self.long_stopped[pid] = (inst, t + self.a.lease + SKEW + self.rng.uniform(0.3, 1.5))
                self.counts["self"] += 1
                del self.self_stopping[pid]

    def pick(self):
        alive = [i for i in self.alive() if i.pid not in self.long_stopped and i.pid not in self.self_stopping]
        holding = [i for i in alive if self.in_hold.get(i.pid)]
        if holding and self.rng.random() < 0.6:
            return self.rng.choice(holding)
        return self.rng.choice(alive) if alive else None

    def strike(self):
        inst = self.pick()
        if inst is None:
            return
        r = self.rng.random()
        if r < 0.3:
            with self.lock:    # recorded before the slot's thread judges the exit
                inst.kills.append(time.time())
                self.signal_session(inst, signal.SIGKILL)
            self.counts["kill"] += 1
        elif r < 0.8 or len(self.long_stopped) >= 2 or not self.in_hold.get(inst.pid):
            start = time.time()
            self.signal_session(inst, signal.SIGSTOP)
            time.sleep(self.rng.uniform(0.01, 0.15))    # the stop's length, inside any lease
            self.signal_session(inst, signal.SIGCONT)
            inst.stops.append([start, time.time()])
            self.counts["stop"] += 1
        else:
            inst.stops.append([time.time(), None])
            self.signal_session(inst, signal.SIGSTOP)
            self.long_stopped[inst.pid] = (inst, time.time() + self.a.lease + SKEW + self.rng.uniform(0.3, 1.5))
            self.counts["long"] += 1

    def continue_due(self, everyone=False):
        for pid, (inst, due) in list(self.long_stopped.items()):
            if everyone or time.time() >= due:
                self.signal_session(inst, signal.SIGCONT)
                inst.stops[-1][1] = time.time()
                del self.long_stopped[pid]

    def chaos(self, until):
        while time.time() < until:
            self.follow_log()
            self.take_self_stopped()
            self.continue_due()
            self.strike()
            time.sleep(self.rng.uniform(0.1, 0.4))    # the pacing of the chaos, not a synchronisation

    def wind_down(self, threads):
        open(self.stop, "w").close()
        deadline = time.time() + 90
        while time.time() < deadline:
            threads = [t for t in threads if t.is_alive()]
            if not threads:
                break
            # A writer may stop itself after the stop file came: nobody
            # else would continue it. Its lease has not ended, so its
            # commit goes through or is refused, either of which is checked.
            self.follow_log()
            self.take_self_stopped()
            self.continue_due(everyone=True)
            threads[0].join(0.2)    # polls for the workers' end, within the bound above
        if threads:
            self.fail("%d workers did not end within 90 s of the stop (a hold never granted?)" % len(threads))
        for inst in self.alive():
            self.signal_session(inst, signal.SIGKILL)
        with self.lock:
            killed = [i for i in self.instances if i.kills]
        # SIGKILL reaches each process of a killed session in turn: wait
        # until all are gone, so that nothing writes after the final read.
        deadline = time.time() + 10
        while any(self.session(i.pid) for i in killed) and time.time() < deadline:
            time.sleep(0.05)    # polls for their end, within the bound above
        left = [p for i in killed for p in self.session(i.pid)]
        if left:
            self.fail("processes of killed workers outlived them by 10 s: %s" % left)

    def final_holds(self):
        """An exclusive hold of the counter's lock and a slot of the
        semaphore by the command, which take over what the last killed
        workers held; then each lock directory holds one free token."""
        v = self.views[-1]
        for args, d in ((["run", "-w", "30"], "count.lock"), (["run", "-w", "30", "--slots", str(self.a.slots)], "sem.lock")):
            lockdir = os.path.join(v, d)
            r = subprocess.run([self.a.tokenlock] + args + [lockdir, "true"], capture_output=True, text=True)
            if r.returncode != 0:
                self.fail("the final hold of %s failed (%d): %s" % (lockdir, r.returncode, r.stderr))
            names = sorted(n for n in os.listdir(lockdir) if n.startswith("lockfile"))
            if names != ["lockfile"]:
                self.fail("%s holds %s after the final hold, not one free token" % (lockdir, names))
        with open(os.path.join(v, "count")) as f:
            text = f.read()
        if not re.fullmatch(r"(0|[1-9][0-9]*)\n", text):
            self.fail("the counter is not one decimal and a newline: %r" % text)
            return None
        return int(text)

    def run(self):
        threads = []
        for slot, lang in enumerate(self.a.langs.split(",") * 3):
            t = threading.Thread(target=self.run_slot, args=(lang, slot), daemon=True)
            t.start()
            threads.append(t)
        self.chaos(time.time() + self.a.seconds)
        self.wind_down(threads)
        return self.final_holds()

    def abandon(self):
        open(self.stop, "w").close()
        self.continue_due(everyone=True)
        for inst in self.alive():
            self.signal_session(inst, signal.SIGKILL)

    # --- the checks ----------------------------------------------------------
    def holds(self):
        """Every hold from the event log: a dict per (pid, hold number)."""
        holds = {}
        with open(self.log) as f:
            for line in f:
                p = line.split()
                if len(p) < 5:
                    self.fail("a line of the event log is cut: %r" % line)
                    continue
                h = holds.setdefault((int(p[1]), int(p[2])), {"lang": p[0], "pid": int(p[1]), "steps": []})
                h["steps"].append((p[3], p[4] if len(p) > 5 else None, float(p[-1])))
        with self.lock:
            by_pid = {i.pid: i for i in self.instances}
        for h in holds.values():
            h["inst"] = by_pid.get(h["pid"])
            self.shape(h)
        return [h for h in holds.values() if h.get("start") is not None]

    def shape(self, h):
        """The hold's kind, outcome and interval (see the module's text)."""
        steps, inst = h["steps"], h["inst"]
        tags = [s[0] for s in steps]
        killed = inst is not None and bool(inst.kills)
        h["outcome"] = "l" if "l" in tags else "ok" if "ok" in tags else "e" if "e" in tags else None
        if "e" in tags and not killed:
            self.fail("a %s hold of %d ended in an error that no kill explains: %s" % (h["lang"], h["pid"], steps))
        if h["outcome"] is None and not killed:
            self.fail("a %s hold of %d never ended: %s" % (h["lang"], h["pid"], steps))
        plus = [s for s in steps if s[0] == "+"]
        if not plus:
            h["start"] = None
            return
        h["kind"], start = plus[0][1], plus[0][2]
        inside = [s[2] for s in steps if s[0] not in ("ok", "l", "e")]
        end = max(inside)
        if h["outcome"] != "ok":
            # Lost, or killed: a killed holder's child may still log a line
            # after a stop past the lease, in which its hold was taken over.
            stops = [b for b, _ in (inst.stops if inst else []) if start <= b <= end]
            # Not stretched to a "W" after that: the commit came between
            # its "c" and its "W", and a `tokenlock commit` child that the
            # stop missed commits in time while its parent logs "W" late.
            end = min([end, start + self.a.lease] + stops)
        h["start"], h["end"] = start, end
        self.check_kept(h, inst, start)
        h["long_stop"] = inst is not None and any(
            e is not None and e - b > self.a.lease + SKEW and start <= b <= max(inside) for b, e in inst.stops)

    def check_kept(self, h, inst, start):
        """A hold that was lost though it never came near the end of its
        lease (half of it from its "+", which the acquire preceded closely)
        and its worker was neither stopped nor killed meanwhile: it was
        taken over live, which no holder may be (docs/protocol.md, Shared locks and semaphores)."""
        if h["outcome"] != "l" or inst is None or self.caching(inst.slot):
            return
        lost = next(s[2] for s in h["steps"] if s[0] == "l")
        stopped = any(b < lost and (e is None or e > start - self.a.lease) for b, e in inst.stops)
        if lost - start < self.a.lease / 2 and not stopped and not inst.kills:
            self.fail("%s %d lost its %s hold %.3f s after its \"+\" at %.6f, within its lease of %g s, never "
                      "stopped: it was taken over live (unless the process waited half its lease between its "
                      "acquire and its \"+\"); the worker's stderr names the token"
                      % (h["lang"], h["pid"], h["kind"], lost - start, start, self.a.lease))

    def check_overlaps(self, holds):
        rw = sorted((h for h in holds if h["kind"] in ("r", "w")), key=lambda h: h["start"])
        active, most_readers = [], 0
        for h in rw:
            active = [x for x in active if x["end"] > h["start"]]
            for x in active:
                if "w" in (x["kind"], h["kind"]):
                    self.fail("a writer beside another holder of the counter's lock: %s %d %s %.6f-%.6f and "
                              "%s %d %s %.6f-%.6f" % (x["lang"], x["pid"], x["kind"], x["start"], x["end"],
                                                      h["lang"], h["pid"], h["kind"], h["start"], h["end"]))
            active.append(h)
            most_readers = max(most_readers, len(active))
        edges = sorted([(h["start"], 1) for h in holds if h["kind"] == "s"] +
                       [(h["end"], -1) for h in holds if h["kind"] == "s"], key=lambda e: (e[0], e[1]))
        now = most_slots = 0
        for t, d in edges:
            now += d
            if now > self.a.slots:
                self.fail("%d slot holders at once at %.6f, of %d slots" % (now, t, self.a.slots))
            most_slots = max(most_slots, now)
        return most_readers, most_slots

    def check_counter(self, holds, n):
        commits, doubt = {}, 0
        for h in holds:
            tags = [s[0] for s in h["steps"]]
            for tag, arg, t in h["steps"]:
                if tag == "W":
                    v = int(arg)
                    if v in commits:
                        self.fail("value %d committed twice: by %d and %d" % (v, commits[v][0], h["pid"]))
                    commits[v] = (h["pid"], t)
                    if not 1 <= v <= n:
                        self.fail("value %d (by %d) is outside 1..%d, the final counter" % (v, h["pid"], n))
            if "c" in tags and not {"W", "l", "e"} & set(tags[tags.index("c"):]):
                doubt += 1      # killed in its commit: it may have written
        if not 0 <= n - len(commits) <= doubt:
            self.fail("counter %d = %d logged commits + %d more; kill -9 left %d in doubt" %
                      (n, len(commits), n - len(commits), doubt))
        return commits, doubt

    def check_reads(self, holds, commits, n):
        by_time = sorted((t, v) for v, (_, t) in commits.items())
        times = [t for t, _ in by_time]
        highest, m = [], 0
        for _, v in by_time:
            m = max(m, v)
            highest.append(m)
        checked = 0
        for h in holds:
            cached = h["inst"] is not None and self.caching(h["inst"].slot)
            for tag, arg, t in h["steps"]:
                if tag != "r" or cached or t > h["end"]:
                    continue
                if arg.startswith("torn:"):
                    self.fail("%s %d read a torn counter inside its hold: %s" % (h["lang"], h["pid"], arg))
                    continue
                k = bisect.bisect_left(times, h["start"])
                floor = highest[k - 1] if k else 0
                if not floor <= int(arg) <= n:
                    self.fail("%s %d read %s at %.6f, outside %d (committed before its hold) .. %d (final)"
                              % (h["lang"], h["pid"], arg, t, floor, n))
                checked += 1
        return checked

    def report(self, holds, n, commits, doubt, reads, most):
        langs = sorted({h["lang"] for h in holds})
        for lang in langs:
            parts = []
            for kind, name in (("r", "reader"), ("w", "writer"), ("s", "slot")):
                mine = [h for h in holds if h["lang"] == lang and h["kind"] == kind]
                lost = sum(h["outcome"] == "l" for h in mine)
                parts.append("%d %s (%d lost, %d killed)" % (len(mine), name, lost,
                                                             sum(h["outcome"] is None for h in mine)))
            print("%-6s holds: %s" % (lang, ", ".join(parts)))
        stopped = [h for h in holds if h["long_stop"]]
        selfs = [h for h in stopped if any(s[0] == "s" for s in h["steps"])]
        print("counter %d: %d logged commits, %d in doubt; %d reads checked; at most %d readers at once, "
              "%d of %d slots; stopped past the lease inside a hold: %d (%d taken over, then refused with "
              "lock_lost), of them writers stopped before their commit: %d (%d commits refused); chaos: %d kill -9, "
              "%d short stops, %d stops past the lease, %d writers' own stops continued past it"
              % (n, len(commits), doubt, reads, most[0], most[1], self.a.slots, len(stopped),
                 sum(h["outcome"] == "l" for h in stopped), len(selfs),
                 sum(any(s[0] == "l" for s in h["steps"][:-1]) for h in selfs), self.counts["kill"],
                 self.counts["stop"], self.counts["long"], self.counts["self"]))

    def check(self, n):
        holds = self.holds()
        most = self.check_overlaps(holds)
        commits, doubt = self.check_counter(holds, n)
        reads = self.check_reads(holds, commits, n)
        self.report(holds, n, commits, doubt, reads, most)


def missing(a):
    """The reason this machine cannot run every implementation, or None."""
    for prog in ("perl", "php", "bash", "od"):
        if shutil.which(prog) is None:
            return "%s is not installed (scripts/install-deps installs it)" % prog
    if not os.access(a.tokenlock, os.X_OK):
        return "%s is not built" % a.tokenlock
    return None


def main():
    a = parse_args()
    reason = missing(a)
    if reason:
        print("SKIP: " + reason)
        return 77
    if a.seed is None:
        a.seed = int.from_bytes(os.urandom(4), "little")
    print("shared: seed %d (replay: --seed %d), %s" % (a.seed, a.seed, ", ".join(a.dir) or "a local temporary directory"),
          flush=True)
    if a.langs is None:
        a.langs = ",".join(LANGS if python_has_shared(a.source) else LANGS[:-1])
        if "python" not in a.langs:
            print("NOTE: %s/bindings/python/tokenlock.py has no shared locks (no class ReadWriteLock or "
                  "Semaphore): no python workers" % a.source)
    if a.refused:
        failures = check_refused(a)
        for f in failures:
            print("FAIL: " + f)
        if failures:
            return 1
        print("refused by every implementation (%s, and the command), the lock left free" % a.langs)
        return 0
    t = Torture(a)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    try:
        n = t.run()
    except BaseException:
        t.abandon()
        raise
    if n is not None:
        t.check(n)
    for f in t.failures:
        print("FAIL: " + f)
    if t.failures:
        print("FAIL with seed %d; the event log and the workers' stderr kept in %s" % (a.seed, t.work))
        return 1
    shutil.rmtree(t.views[0], ignore_errors=True)
    if a.keep:
        print("the event log and the workers' stderr: %s" % t.work)
    else:
        shutil.rmtree(t.work, ignore_errors=True)
    print("ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
