#!/usr/bin/python3
"""Runs the protocol's cases (tests/conformance/cases) against one
implementation's driver.

    conformance.py [--cases FILE] [--case NAME]... IMPLEMENTATION -- DRIVER [ARGS...]

Every case starts a fresh driver in a fresh directory, builds the case's
lock-directory state itself, speaks the line protocol of README.md to the
driver, makes the in-between moves of other processes itself (a takeover is
a rename of the exact token, as another process would make it) and then
checks each answer and the state after. Exit status 0 when every case that
applies passed (known failures included, and named), 1 otherwise.
"""

import errno
import os
import re
import shutil
import stat
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
CASES = os.path.join(HERE, "cases")
HELD = re.compile(r"\Alockfile\.[1-9][0-9]{0,18}\.[A-Za-z0-9_-]{1,32}-[0-9a-f]{8}"
                  r"\.[1-9][0-9]*\.[0-9]{1,20}\.[0-9a-f]{16}\Z")
TEMP = re.compile(r"\A\..+\.tmp\.[0-9a-f]{16}\Z")
ANSWER_TIMEOUT = 60


class CaseError(Exception):
    """A case failed: the message says what was expected and what came."""


# ---- this host's identity, as lib/src/posix/posix_os.cpp makes it --------

def _fnv1a(data, h=0xcbf29ce484222325):
    for byte in data:
        h = ((h ^ byte) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
    return h


def _first_line(path):
    try:
        with open(path, "rb") as f:
            return f.readline().rstrip(b"\n")
    except OSError:
        return b""


def host_tag():
    host = _first_line("/proc/sys/kernel/hostname") or os.uname().nodename.encode()
    host = re.sub(rb"[^A-Za-z0-9-]", b"_", (host or b"host")[:32])
    try:
        ns = os.readlink("/proc/self/ns/pid").encode()
    except OSError:
        ns = b""
    h = _fnv1a(host, _fnv1a(ns, _fnv1a(_first_line("/proc/sys/kernel/random/boot_id"))))
    return "%s-%08x" % (host.decode(), (h >> 32) ^ (h & 0xFFFFFFFF))


def start_time(pid):
    with open("/proc/%d/stat" % pid) as f:
        line = f.read()
    return int(line[line.rindex(")") + 2:].split()[19])


def dead_pid():
    """(pid, start time) of a process that has exited and been reaped."""
    child = subprocess.Popen(["cat"], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL)
    started = start_time(child.pid)
    child.stdin.close()
    child.wait()
    return child.pid, started


def zombie_pid():
    """(pid, start time, the process) of a child that has exited and is not
    yet reaped: waitid(WNOWAIT) returns once it is a zombie."""
    child = subprocess.Popen(["true"])
    os.waitid(os.P_PID, child.pid, os.WEXITED | os.WNOWAIT)
    return child.pid, start_time(child.pid), child


def token_name(expiry_s, tag, pid, start, nonce):
    return "lockfile.%d.%s.%d.%d.%016x" % (int(expiry_s * 1e6), tag, pid, start, nonce)


# Shared names (docs/protocol.md, Shared locks and semaphores): the start
# field is a 20-digit mode, the host tag's hash flipped.
SHARE_KINDS = {"lone": 0, "group": 1, "draining": 2}


def flipped(tag):
    host, hash8 = tag.rsplit("-", 1)
    return "%s-%08x" % (host, int(hash8, 16) ^ 0xFFFFFFFF)


def shared_name(expiry_s, tag, pid, start, kind, limit, nonce):
    mode = 10 ** 19 + SHARE_KINDS[kind] * 10 ** 18 + limit * 10 ** 12 + (start if start < 10 ** 12 else 0)
    return token_name(expiry_s, flipped(tag), pid, mode, nonce)


def entry_name(expiry_s, tag, pid, start, nonce):
    return "s." + token_name(expiry_s, tag, pid, start, nonce)[len("lockfile."):]


def token_kind(name):
    """lockfile, exclusive, legacy, lone, group, draining or other."""
    if name == "lockfile":
        return "lockfile"
    if re.match(r"\Alockfile[1-9][0-9]*\Z", name):
        return "legacy"
    if not HELD.match(name):
        return "other"
    mode = int(name.split(".")[4])
    if mode < 10 ** 19:
        return "exclusive"
    kind = (mode - 10 ** 19) // 10 ** 18
    return {v: k for k, v in SHARE_KINDS.items()}.get(kind, "reserved")


# ---- the case file -------------------------------------------------------

def unescape(text):
    return text.replace("\\n", "\n").replace("\\s", " ")


def read_cases(path=CASES):
    cases, case = [], None
    with open(path) as f:
        for number, raw in enumerate(f, 1):
            line = raw.split(" #", 1)[0].strip()
            if not line or line.startswith("#"):
                continue
            word, _, rest = line.partition(" ")
            where = "%s:%d" % (path, number)
            if word == "case":
                case = {"name": rest.strip(), "where": where, "steps": [],
                        "skip": {}, "known": {}, "about": ""}
                cases.append(case)
            elif case is None:
                raise ValueError("%s: %r before the first case" % (where, line))
            elif word == "about":
                case["about"] = rest
            elif word == "needs" and rest == "root":
                case["root"] = True
            elif word in ("skip", "known"):
                impls, _, reason = rest.partition(":")
                if not reason.strip():
                    raise ValueError("%s: %s needs IMPL[,IMPL]: REASON" % (where, word))
                for impl in impls.split(","):
                    case[word][impl.strip()] = reason.strip()
            elif word in ("set", "act", "do", "after"):
                case["steps"].append((word, rest, where))
            else:
                raise ValueError("%s: unknown word %r" % (where, word))
    names = [c["name"] for c in cases]
    dup = {n for n in names if names.count(n) > 1}
    if dup:
        raise ValueError("%s: cases named twice: %s" % (path, ", ".join(sorted(dup))))
    return cases


# ---- one case ------------------------------------------------------------

PATH_OPS = {"acquire", "commit", "update", "increment", "read", "write", "holder", "holders"}
OTHER_HOST = "elsewhere-0badc0de"


class Case:
    """One case in its own directory `root`, with its own driver."""

    def __init__(self, case, root, driver):
        self.case, self.root, self.driver_argv = case, root, driver
        self.labels = {}     # (lock directory, entry name) -> label
        self.kinds = {}      # (lock directory, entry name) -> file type at set-up
        self.nonce = 0
        self.me = (os.getpid(), start_time(os.getpid()))
        self.tag = host_tag()
        self.driver = None
        self.zombies = []
        self.stderr = tempfile.TemporaryFile(mode="w+")
        # The settings a deployment gives every process (set env).
        self.env = {k: v for k, v in os.environ.items()
                    if k not in ("TOKENLOCK_DIR_MODE", "TOKENLOCK_GROUP")}

    def path(self, relative):
        if relative.startswith("/") or ".." in relative.split("/"):
            raise ValueError("%s: paths are relative to the case: %r" % (self.case["where"], relative))
        return os.path.join(self.root, relative)

    # -- set-up --

    def plant(self, lockdir, name, label, make):
        d = self.path(lockdir)
        os.makedirs(d, exist_ok=True)
        make(os.path.join(d, name))
        self.labels[(lockdir, name)] = label
        self.kinds[(lockdir, name)] = stat.S_IFMT(os.lstat(os.path.join(d, name)).st_mode)

    def owner(self, kind):
        if kind == "live":
            return self.tag, self.me
        if kind == "dead":
            return self.tag, dead_pid()
        if kind == "reused":
            return self.tag, (self.me[0], self.me[1] + 1)
        if kind == "foreign":
            return OTHER_HOST, self.me
        if kind == "zombie":
            pid, started, child = zombie_pid()
            self.zombies.append(child)
            return self.tag, (pid, started)
        raise ValueError("unknown owner %r (live, dead, reused, foreign)" % kind)

    def new_token(self, kind, lease):
        self.nonce += 1
        tag, (pid, started) = self.owner(kind)
        return token_name(time.time() + float(lease), tag, pid, started, 0xC0FFEE000000 + self.nonce)

    def new_shared(self, kind, owner, lease, limit):
        self.nonce += 1
        tag, (pid, started) = self.owner(owner)
        return shared_name(time.time() + float(lease), tag, pid, started, kind, int(limit),
                           0xC0FFEE000000 + self.nonce)

    def set_up_shared(self, what, args):
        """share L OWNER LEASE LIMIT [LABEL], cover L KIND OWNER LEASE LIMIT
        [LABEL], member L COVER OWNER LEASE [LABEL [KIND]]; False when `what`
        is none of them."""
        if what == "share":
            self.plant(args[0], self.new_shared("lone", args[1], args[2], args[3]),
                       args[4] if len(args) > 4 else "S", os.mkdir)
        elif what == "cover":
            self.plant(args[0], self.new_shared(args[1], args[2], args[3], args[4]),
                       args[5] if len(args) > 5 else "C", os.mkdir)
        elif what == "member":
            lockdir, cover = args[0], args[1]
            token = [n for (l, n), lab in self.labels.items() if l == lockdir and lab == cover]
            self.nonce += 1
            tag, (pid, started) = self.owner(args[2])
            name = entry_name(time.time() + float(args[3]), tag, pid, started, 0xC0FFEE000000 + self.nonce)
            self.maker(args[5] if len(args) > 5 else "dir")(os.path.join(self.path(lockdir), token[0], name))
        else:
            return False
        return True

    def set_up(self, words):
        what, args = words[0], words[1:]
        if self.set_up_shared(what, args):
            return
        if what == "dir":
            d = self.path(args[0])
            os.makedirs(d, exist_ok=True)
            os.chmod(d, int(args[1], 8) if len(args) > 1 else 0o755)
        elif what == "free":
            self.plant(args[0], "lockfile", "lockfile", os.mkdir)
        elif what in ("token", "tokenfile"):
            label = args[3] if len(args) > 3 else "T"
            make = os.mkdir if what == "token" else (lambda p: open(p, "w").close())
            self.plant(args[0], self.new_token(args[1], args[2]), label, make)
        elif what == "init":
            # A creator's directory beside L, as a creator killed before its
            # rename leaves it (docs/protocol.md, Creating the lock directory).
            parent, name = os.path.split(args[0])
            label = args[3] if len(args) > 3 else "I"
            made = args[0] + ".init." + self.new_token(args[1], args[2])[len("lockfile."):]
            self.plant(parent or ".", os.path.basename(made), label, os.mkdir)
            os.mkdir(os.path.join(self.path(made), "lockfile"))
        elif what == "inside":
            # An entry in a planted token's workspace.
            lockdir, label, name = args[0], args[1], args[2]
            token = [n for (l, n), lab in self.labels.items() if l == lockdir and lab == label]
            self.maker(args[3])(os.path.join(self.path(lockdir), token[0], name))
        elif what == "legacy":
            label = args[2] if len(args) > 2 else "T"
            name = "lockfile%d" % int(time.time() - float(args[1]))
            self.plant(args[0], name, label, os.mkdir)
        elif what == "entry":
            lockdir, name = os.path.split(args[0])
            self.plant(lockdir, name, name, self.maker(args[1]))
        elif what == "file":
            with open(self.path(args[0]), "w") as f:
                f.write(unescape(" ".join(args[1:])))
        elif what == "chmod":
            os.chmod(self.path(args[0]), int(args[1], 8))
        elif what == "chown":
            os.lchown(self.path(args[0]), int(args[1]), -1)
        elif what == "chgrp":
            os.lchown(self.path(args[0]), -1, int(args[1]))
        elif what == "env":
            # TOKENLOCK_DIR_MODE and TOKENLOCK_GROUP, as every process of a
            # deployment gets them; "mygroup" is the runner's effective gid.
            self.env[args[0]] = str(os.getegid()) if args[1] == "mygroup" else args[1]
        elif what == "symlink":
            os.symlink(args[1], self.path(args[0]))
        else:
            raise ValueError("unknown set-up %r" % what)

    @staticmethod
    def maker(kind):
        if kind == "dir":
            return os.mkdir
        if kind == "file":
            return lambda p: open(p, "w").close()
        if kind == "fifo":
            return os.mkfifo
        if kind.startswith("symlink:"):
            return lambda p: os.symlink(kind[len("symlink:"):], p)
        raise ValueError("unknown entry kind %r (dir, file, fifo, symlink:TARGET)" % kind)

    # -- the other process's moves --

    def drivers_token(self, lockdir):
        mine = [n for n in os.listdir(self.path(lockdir))
                if (lockdir, n) not in self.labels and HELD.match(n)]
        if len(mine) != 1:
            raise CaseError("expected the driver's one token in %s, found %s" % (lockdir, mine))
        return mine[0]

    def act(self, words):
        what, lockdir = words[0], words[1]
        d = self.path(lockdir)
        if what == "takeover":
            # As a process that judged the token stale renames exactly it.
            label = words[2] if len(words) > 2 else "U"
            new = self.new_token("live", 60)
            os.rename(os.path.join(d, self.drivers_token(lockdir)), os.path.join(d, new))
            self.labels[(lockdir, new)] = label
            self.kinds[(lockdir, new)] = stat.S_IFDIR
        elif what == "inside":
            # Another user plants an entry in the driver's workspace.
            entry = os.path.join(d, self.drivers_token(lockdir), words[2])
            self.maker(words[3])(entry)
            if len(words) > 4:
                os.chmod(entry, int(words[4], 8))
        elif what == "free":
            # A takeover and a release by another process, seen together.
            os.rename(os.path.join(d, self.drivers_token(lockdir)), os.path.join(d, "lockfile"))
        else:
            raise ValueError("unknown act %r (takeover, inside, free)" % what)

    # -- the driver --

    def start(self):
        self.driver = subprocess.Popen(self.driver_argv, stdin=subprocess.PIPE, env=self.env,
                                       stdout=subprocess.PIPE, stderr=self.stderr,
                                       universal_newlines=True, bufsize=1)

    def ask(self, words):
        if words[0] in PATH_OPS:
            words = [words[0], self.path(words[1])] + words[2:]
        line = " ".join(words)
        try:
            self.driver.stdin.write(line + "\n")
            self.driver.stdin.flush()
        except BrokenPipeError:
            raise CaseError("the driver ended before %r%s" % (line, self.driver_output()))
        answer = self.driver.stdout.readline()
        if not answer:
            raise CaseError("the driver ended without answering %r%s" % (line, self.driver_output()))
        return self.normalise(answer.strip())

    @staticmethod
    def normalise(answer):
        words = answer.split()
        if words[:2] == ["error", "system"] and len(words) == 3 and words[2].isdigit():
            return "system:" + errno.errorcode.get(int(words[2]), words[2])
        if words[:1] == ["error"] and len(words) == 2:
            return words[1]
        return answer

    def driver_output(self):
        self.stderr.seek(0)
        text = self.stderr.read().strip()
        return "; the driver said: " + text[-2000:] if text else ""

    def finish(self):
        if self.driver is None:
            return
        try:
            self.driver.stdin.write("quit\n")
            self.driver.stdin.close()
        except BrokenPipeError:
            pass
        try:
            self.driver.wait(ANSWER_TIMEOUT)
        except subprocess.TimeoutExpired:
            self.driver.kill()
            self.driver.wait()
            raise CaseError("the driver did not end on quit")
        self.driver.stdout.close()

    # -- the state after --

    def classify(self, lockdir, name):
        if (lockdir, name) in self.labels:
            return self.labels[(lockdir, name)]
        if name == "lockfile":
            return "lockfile"
        return "held" if HELD.match(name) else name

    def check_after(self, words, where):
        target, verb, rest = words[0], words[1], words[2:]
        p = self.path(target)
        if verb == "missing":
            if os.path.lexists(p):
                raise CaseError("%s: %s exists, expected it missing" % (where, target))
        elif verb == "holds":
            if not os.path.isdir(p) or os.path.islink(p):
                raise CaseError("%s: %s is not a directory" % (where, target))
            got = sorted(self.classify(target, n) for n in os.listdir(p))
            if "turnstile" in got and "turnstile" not in rest:
                # Where PHP and Perl waiters lined up (docs/protocol.md, The
                # turnstile): allowed, but only at rest, for its owner alone.
                st = os.lstat(os.path.join(p, "turnstile"))
                if not stat.S_ISREG(st.st_mode) or st.st_size != 0 or stat.S_IMODE(st.st_mode) & 0o007:
                    raise CaseError("%s: %s/turnstile is not an empty file closed to others (mode %o, size %d)"
                                    % (where, target, st.st_mode, st.st_size))
                got.remove("turnstile")
            if got != sorted(rest):
                raise CaseError("%s: %s holds %s, expected %s (entries: %s)"
                                % (where, target, got, sorted(rest), sorted(os.listdir(p))))
            self.check_kinds(target, where)
        elif verb == "workspace":
            # The entries inside the driver's token.
            inside = os.path.join(p, self.drivers_token(target))
            got = sorted(os.listdir(inside))
            if got != sorted(rest):
                raise CaseError("%s: the workspace in %s holds %s, expected %s"
                                % (where, target, got, sorted(rest)))
        elif verb == "reads":
            want = unescape(" ".join(rest))
            try:
                with open(p) as f:
                    got = f.read()
            except OSError as e:
                raise CaseError("%s: cannot read %s: %s" % (where, target, e))
            if got != want:
                raise CaseError("%s: %s reads %r, expected %r" % (where, target, got, want))
        elif verb in ("token", "entries"):
            self.check_shared(target, verb, rest, where)
        elif verb == "mode":
            got = stat.S_IMODE(os.lstat(p).st_mode)
            if got != int(rest[0], 8):
                raise CaseError("%s: %s has mode %o, expected %s" % (where, target, got, rest[0]))
        else:
            raise ValueError("%s: unknown check %r (missing, holds, workspace, reads, mode)" % (where, verb))

    def check_shared(self, lockdir, verb, rest, where):
        """`token KIND`: the one token's kind (token_kind); `entries N`: the
        number of share entries ("s.*") inside it."""
        names = [n for n in os.listdir(self.path(lockdir)) if n.startswith("lockfile")]
        if len(names) != 1:
            raise CaseError("%s: %s holds %s, expected one token" % (where, lockdir, names))
        if verb == "token":
            if token_kind(names[0]) != rest[0]:
                raise CaseError("%s: the token of %s is %s (%s), expected %s"
                                % (where, lockdir, token_kind(names[0]), names[0], rest[0]))
            return
        inside = os.path.join(self.path(lockdir), names[0])
        got = [n for n in os.listdir(inside) if n.startswith("s.")] if os.path.isdir(inside) else []
        if len(got) != int(rest[0]):
            raise CaseError("%s: the token of %s holds %d share entries %s, expected %s"
                            % (where, lockdir, len(got), sorted(got), rest[0]))

    def check_kinds(self, lockdir, where):
        d = self.path(lockdir)
        for (l, name), kind in self.kinds.items():
            full = os.path.join(d, name)
            if l == lockdir and os.path.lexists(full) and stat.S_IFMT(os.lstat(full).st_mode) != kind:
                raise CaseError("%s: %s/%s changed its file type" % (where, lockdir, name))

    def check_no_leftovers(self):
        """No temporary file and no creator's directory anywhere in the case."""
        for top, dirs, files in os.walk(self.root):
            for name in dirs + files:
                where = os.path.relpath(top, self.root)
                if (where, name) in self.labels:
                    continue
                if TEMP.match(name) or ".init." in name:
                    raise CaseError("left behind: %s" % os.path.join(top, name)[len(self.root) + 1:])

    # -- the whole case --

    def run(self):
        # Started first, so that the time a driver takes to start never
        # passes between a lease set up and the request that judges it; its
        # environment is the one set-up it needs before it starts.
        for word, rest, _ in self.case["steps"]:
            if word == "set" and rest.split()[0] == "env":
                self.set_up(rest.split())
        self.start()
        if self.ask(["ping"]) != "ok":
            raise CaseError("the driver did not answer ping with ok%s" % self.driver_output())
        for word, rest, where in self.case["steps"]:
            if word == "set":
                if rest.split()[0] != "env":  # applied before the start
                    self.set_up(rest.split())
            elif word == "act":
                self.act(rest.split())
            elif word == "after":
                self.check_after(rest.split(), where)
            else:
                request, sep, expected = rest.partition("=>")
                if not sep:
                    raise ValueError("%s: do OPERATION ARGS => EXPECTED" % where)
                got = self.ask(request.split())
                if got != expected.strip():
                    raise CaseError("%s: %s answered %r, expected %r%s"
                                    % (where, request.strip(), got, expected.strip(),
                                       self.driver_output()))
        self.check_no_leftovers()
        self.finish()


def run_case(case, driver):
    root = tempfile.mkdtemp(prefix="conformance-")
    runner = Case(case, root, driver)
    try:
        runner.run()
        return None
    except CaseError as e:
        return str(e)
    finally:
        if runner.driver is not None and runner.driver.poll() is None:
            runner.driver.kill()
            runner.driver.wait()
        for zombie in runner.zombies:
            zombie.wait()
        for top, dirs, _ in os.walk(root):
            for d in dirs:
                if not os.path.islink(os.path.join(top, d)):
                    os.chmod(os.path.join(top, d), 0o700)
        shutil.rmtree(root)


def main(argv):
    wanted, path = [], CASES
    while len(argv) > 1 and argv[0] in ("--case", "--cases"):
        if argv[0] == "--case":
            wanted.append(argv[1])
        else:
            path = argv[1]
        argv = argv[2:]
    if len(argv) < 3 or argv[1] != "--":
        sys.stderr.write("usage: conformance.py [--cases FILE] [--case NAME]... IMPLEMENTATION"
                         " -- DRIVER [ARGS...]\n")
        return 64
    impl, driver = argv[0], argv[2:]
    cases = read_cases(path)
    unknown = set(wanted) - {c["name"] for c in cases}
    if unknown:
        sys.stderr.write("conformance.py: no case named %s\n" % ", ".join(sorted(unknown)))
        return 64
    failed = 0
    for case in cases:
        if wanted and case["name"] not in wanted:
            continue
        name = case["name"]
        if impl in case["skip"]:
            print("skip %s: %s" % (name, case["skip"][impl]))
            continue
        if case.get("root") and os.geteuid() != 0:
            print("skip %s: its state needs root to build (chown)" % name)
            continue
        error = run_case(case, driver)
        known = case["known"].get(impl)
        if known and error:
            print("known failure %s: %s (%s)" % (name, known, error))
        elif known:
            failed += 1
            print("FAIL %s: marked as a known failure (%s) but passed: remove the mark" % (name, known))
        elif error:
            failed += 1
            print("FAIL %s (%s): %s" % (name, case["where"], error))
        else:
            print("ok %s" % name)
    print("%s: %d failed" % (impl, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
