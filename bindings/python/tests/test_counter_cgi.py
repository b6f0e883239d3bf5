"""cgi-examples/python/counter.py run as a CGI program, as a web server
runs it: every status and format, with each backend; byte for byte the
answers of counter.cgi; and both counting one counter together."""

import os
import shutil
import stat
import subprocess
import unittest

from support import (COMMAND, COUNTER_CGI, COUNTER_PY, LIBRARY, Child, CommandTestCase, Gate,
                     LibraryTestCase, tokenlock)

ID_REASON = b"id must be 1 to 64 letters, digits, '_' or '-'"

# Queries counter.cgi refuses with 400, and its reasons.
BAD_QUERIES = [
    ("id=", ID_REASON),
    ("id", ID_REASON),
    ("id=a%2Fb", ID_REASON),
    ("id=..%2F..%2Fetc", ID_REASON),
    ("id=a.b", ID_REASON),
    ("id=caf%C3%A9", ID_REASON),
    ("id=" + "a" * 65, ID_REASON),
    ("id=a&id=b", b"repeated parameter"),
    ("foo=1", b"unknown parameter foo"),
    # Shown escaped, as counter.cgi shows it: never markup, a header or a
    # terminal's escape.
    ("%3Cscript%3Ealert(1)%3C/script%3E=1",
     b"unknown parameter \\x3cscript\\x3ealert\\x281\\x29\\x3c/script\\x3e"),
    ("a%0D%0ASet-Cookie:%20x=1", b"unknown parameter a\\x0d\\x0aSet-Cookie: x"),
    ("%1B%5B2J" + "n" * 20 + "=1", b"unknown parameter \\x1b\\x5b2J" + b"n" * 20),
    ("id=x&zeta=1&alpha=2", b"unknown parameter alpha"),
    ("format=xml", b"format must be text, json or svg"),
    ("format=JSON", b"format must be text, json or svg"),
    ("peek=yes", b"peek must be 0 or 1"),
    ("peek", b"peek must be 0 or 1"),
    ("id=%zz", b"invalid percent-encoding"),
    ("id=ab%4", b"invalid percent-encoding"),
    ("id=ab%", b"invalid percent-encoding"),
    ("id=%00", b"invalid percent-encoding"),
    ("%zz=1", b"invalid percent-encoding"),
    ("=1", b"parameter without a name"),
    ("x" * 2049, b"query string too long"),
    ("id=" + "a" * 257, b"parameter too long"),
    ("n" * 33 + "=1", b"parameter too long"),
    ("&".join("p%d=1" % i for i in range(17)), b"too many parameters"),
]


# A tokenlock command that reports a stale read (exit 75) for every count.
STALE_COMMAND = b"""#!/bin/sh
case "$1" in
  --version) echo "tokenlock 0.1.0"; exit 0 ;;
esac
echo "tokenlock: incr: the network filesystem kept serving a version older than the last committed one" >&2
echo '{"error": "stale_data", "errno": 0, "message": "tokenlock: incr: the network filesystem kept serving a version older than the last committed one"}' >&2
exit 75
"""


class Reply:
    def __init__(self, raw, stderr):
        self.raw = raw
        head, sep, self.body = raw.partition(b"\r\n\r\n")
        if not sep:
            raise AssertionError("no end of headers in %r" % raw[:200])
        lines = head.split(b"\r\n")
        if not lines[0].startswith(b"Status: "):
            raise AssertionError("no Status line first: %r" % lines[0])
        self.status = int(lines[0].split()[1])
        self.headers = dict(line.decode().split(": ", 1) for line in lines[1:])
        self.stderr = stderr.decode(errors="replace")


class CounterCgiTests:
    def setUp(self):
        super().setUp()
        self.data = self.path("counters")
        os.mkdir(self.data)

    def counter(self, name):
        return os.path.join(self.data, name + ".count")

    def cgi(self, query="", method="GET", program=COUNTER_PY, data=None, body=b"", nobody=False,
            timeout=120, **env):
        """Runs the CGI program as a server would (as user nobody, when root
        and asked); checks what every answer must have, and returns it."""
        full = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "GATEWAY_INTERFACE": "CGI/1.1",
                "SERVER_PROTOCOL": "HTTP/1.1", "REQUEST_METHOD": method, "QUERY_STRING": query,
                "TOKENLOCK_COUNTER_DIR": data or self.data, "TOKENLOCK_LIBRARY": LIBRARY,
                "TOKENLOCK_COMMAND": COMMAND, "TOKENLOCK_BACKEND": self.backend}
        if body:
            full["CONTENT_LENGTH"] = str(len(body))
        full.update(env)
        user = {}
        if nobody and os.geteuid() == 0:
            user = {"user": 65534, "group": 65534, "extra_groups": []}
        p = subprocess.run([program], input=body, env=full, capture_output=True, timeout=timeout,
                           **user)
        self.assertEqual(p.returncode, 0, p.stderr)
        r = Reply(p.stdout, p.stderr)
        self.assertEqual(r.headers["Cache-Control"], "no-store")
        self.assertEqual(r.headers["X-Content-Type-Options"], "nosniff")
        if method == "HEAD":
            self.assertEqual(r.body, b"")
        else:
            self.assertEqual(int(r.headers["Content-Length"]), len(r.body))
        self.assertNotIn(self.dir.encode(), r.body, "a server path in the body")
        return r

    def assertStatus(self, reply, status, body=None):
        self.assertEqual(reply.status, status, reply.raw + reply.stderr.encode())
        if body is not None:
            self.assertEqual(reply.body, body + b"\n")
            self.assertEqual(reply.headers["Content-Type"], "text/plain; charset=utf-8")

    def write(self, path, data):
        with open(path, "wb") as f:
            f.write(data)

    # -- 200 -----------------------------------------------------------------------

    def test_get_counts_and_answers_the_count_as_text(self):
        for expected in (1, 2, 3):
            r = self.cgi("id=home")
            self.assertStatus(r, 200, b"%d" % expected)
        with open(self.counter("home"), "rb") as f:
            self.assertEqual(f.read(), b"3\n")
        self.assertTrue(os.path.isdir(self.counter("home") + ".lock"))
        self.assertEqual(r.stderr, "")
        self.assertNoTempFiles()

    def test_the_id_defaults_to_default(self):
        self.assertStatus(self.cgi(""), 200, b"1")
        self.assertStatus(self.cgi("format=text"), 200, b"2")
        with open(self.counter("default"), "rb") as f:
            self.assertEqual(f.read(), b"2\n")

    def test_json_gives_the_id_and_the_count(self):
        self.write(self.counter("a-B_9"), b"41\n")
        r = self.cgi("id=a-B_9&format=json")
        self.assertStatus(r, 200)
        self.assertEqual(r.headers["Content-Type"], "application/json")
        self.assertEqual(r.body, b'{"id":"a-B_9","count":42}\n')

    def test_svg_gives_an_image_of_at_least_six_digits(self):
        self.write(self.counter("img"), b"2\n")
        r = self.cgi("id=img&format=svg")
        self.assertStatus(r, 200)
        self.assertEqual(r.headers["Content-Type"], "image/svg+xml")
        self.assertTrue(r.body.startswith(b'<?xml version="1.0" encoding="UTF-8"?>\n<svg '))
        self.assertIn(b'width="78" height="24"', r.body)
        self.assertIn(b">000003</text>", r.body)
        self.assertIn(b'aria-label="3 hits"', r.body)
        self.write(self.counter("img"), b"1234566\n")
        self.assertIn(b'width="89" height="24"', self.cgi("id=img&format=svg").body)

    def test_peek_answers_without_counting(self):
        self.assertStatus(self.cgi("id=p&peek=1"), 200, b"0")
        self.assertFalse(os.path.exists(self.counter("p")))
        self.assertStatus(self.cgi("id=p&peek=0"), 200, b"1")
        self.assertStatus(self.cgi("peek=1&id=p&format=json"), 200)
        self.assertEqual(self.cgi("id=p&peek=1").body, b"1\n")

    def test_head_never_counts_and_gives_the_headers_of_get(self):
        self.write(self.counter("h"), b"9\n")
        for fmt in ("text", "json", "svg"):
            head = self.cgi("id=h&format=" + fmt, method="HEAD")
            self.assertStatus(head, 200)
            peek = self.cgi("id=h&peek=1&format=" + fmt)
            self.assertEqual(head.headers, peek.headers)
        with open(self.counter("h"), "rb") as f:
            self.assertEqual(f.read(), b"9\n")

    def test_every_durability_level_counts(self):
        for n, sync in enumerate(("none", "file", "file_and_dir"), 1):
            self.assertStatus(self.cgi("id=s", TOKENLOCK_COUNTER_SYNC=sync), 200, b"%d" % n)

    def test_a_wait_budget_in_strtols_syntax_is_accepted(self):
        for n, wait in enumerate((" 250", "+100", "0", "600000"), 1):
            self.assertStatus(self.cgi("id=w", TOKENLOCK_COUNTER_WAIT_MS=wait), 200, b"%d" % n)

    def test_the_lock_directories_follow_the_counters_mode_and_group_only(self):
        # counter.cgi's TOKENLOCK_COUNTER_DIR_MODE and _GROUP, not the
        # module's variables, which the server may have set for others.
        gid = os.getegid()
        for name, env, mode in (
                ("plain", {"TOKENLOCK_GROUP": "no-such-group-tl", "TOKENLOCK_DIR_MODE": "0777"},
                 0o755),
                ("moded", {"TOKENLOCK_COUNTER_DIR_MODE": "0775"}, 0o775),
                ("named", {"TOKENLOCK_COUNTER_GROUP": str(gid)}, 0o775)):
            with self.subTest(env=env):
                self.assertStatus(self.cgi("id=" + name, **env), 200, b"1")
                st = os.stat(self.counter(name) + ".lock")
                self.assertEqual((stat.S_IMODE(st.st_mode), st.st_gid), (mode, gid))
                self.assertStatus(self.cgi("id=" + name, **env), 200, b"2")

    def test_a_counter_group_the_server_is_not_in_answers_500_and_counts_nothing(self):
        r = self.cgi("id=g", TOKENLOCK_COUNTER_GROUP="no-such-group-tl")
        self.assertStatus(r, 500, b"internal error; see the server's error log")
        self.assertIn('"no-such-group-tl"', r.stderr)
        self.assertIn("no such group", r.stderr)
        self.assertFalse(os.path.exists(self.counter("g")))
        self.assertFalse(os.path.exists(self.counter("g") + ".lock"))

    def test_a_request_body_is_read_and_ignored(self):
        self.assertStatus(self.cgi("id=b", body=b"x" * 100000), 200, b"1")

    # -- 400 and 405 ---------------------------------------------------------------

    def test_a_bad_query_is_refused_with_its_reason_and_counts_nothing(self):
        for query, reason in BAD_QUERIES:
            with self.subTest(query=query[:40]):
                self.assertStatus(self.cgi(query), 400, reason)
        self.assertEqual(os.listdir(self.data), [])

    def test_other_methods_are_refused_with_allow(self):
        for method in ("POST", "PUT", "DELETE", "get", ""):
            with self.subTest(method=method):
                r = self.cgi("id=m", method=method, body=b"a=b" if method == "POST" else b"")
                self.assertStatus(r, 405, b"only GET and HEAD are allowed")
                self.assertEqual(r.headers["Allow"], "GET, HEAD")
        self.assertEqual(os.listdir(self.data), [])

    # -- 503 -----------------------------------------------------------------------

    def test_a_counter_busy_past_the_wait_budget_answers_503_with_retry_after(self):
        counter = self.counter("busy")
        self.write(counter, b"5\n")
        before = self.snapshot(counter)
        with tokenlock.lock(counter + ".lock"):
            for wait in ("0", "100"):
                with self.subTest(wait=wait):
                    r = self.cgi("id=busy", TOKENLOCK_COUNTER_WAIT_MS=wait)
                    self.assertStatus(r, 503, b"the counter is busy; try again")
                    self.assertEqual(r.headers["Retry-After"], "1")
                    self.assertIn("counter.py: ", r.stderr)
                    self.assertIn(counter + ".lock", r.stderr)
            # A peek needs no lock.
            self.assertStatus(self.cgi("id=busy&peek=1"), 200, b"5")
        self.assertEqual(self.snapshot(counter), before)
        self.assertStatus(self.cgi("id=busy", TOKENLOCK_COUNTER_WAIT_MS="0"), 200, b"6")

    # -- 500 -----------------------------------------------------------------------

    def test_a_corrupt_counter_answers_500_and_is_left_as_it_is(self):
        counter = self.counter("bad")
        self.write(counter, b"garbage\n")
        before = self.snapshot(counter)
        for query in ("id=bad", "id=bad&peek=1", "id=bad&format=json"):
            with self.subTest(query=query):
                r = self.cgi(query)
                self.assertStatus(r, 500, b"the counter file is corrupt; it was left as it is")
                self.assertIn(counter, r.stderr)
        self.assertEqual(self.snapshot(counter), before)
        self.assertLockFree(counter + ".lock")
        self.assertNoTempFiles()

    def test_a_fifo_or_a_link_to_dev_zero_answers_500_at_once_and_is_left_as_it_is(self):
        # A read that blocks on the FIFO, or reads /dev/zero without end,
        # would hold the web server's worker (and fail with TimeoutExpired).
        fifo, link = self.counter("fifo"), self.counter("zero")
        os.mkfifo(fifo, 0o666)
        os.symlink("/dev/zero", link)
        for name, path, cause in (("fifo", fifo, "FIFO"),
                                  ("zero", link, "symbolic link")):
            for query, method in (("id=%s&peek=1" % name, "GET"), ("id=" + name, "HEAD"),
                                  ("id=" + name, "GET")):
                with self.subTest(query=query, method=method):
                    r = self.cgi(query, method=method, timeout=10)
                    self.assertStatus(r, 500)
                    if method == "GET":
                        self.assertEqual(r.body, b"internal error; see the server's error log\n")
                    self.assertIn(path, r.stderr)
                    self.assertIn(cause, r.stderr)
        self.assertTrue(stat.S_ISFIFO(os.lstat(fifo).st_mode))
        self.assertEqual(os.readlink(link), "/dev/zero")
        for path in (fifo, link):
            self.assertLockFree(path + ".lock")
        self.assertNoTempFiles()

    def test_a_bad_configuration_answers_500_and_logs_the_variable(self):
        for name, value in (("TOKENLOCK_COUNTER_WAIT_MS", "soon"),
                            ("TOKENLOCK_COUNTER_WAIT_MS", "-1"),
                            ("TOKENLOCK_COUNTER_WAIT_MS", "600001"),
                            ("TOKENLOCK_COUNTER_WAIT_MS", "5 "),
                            ("TOKENLOCK_COUNTER_SYNC", "always"),
                            ("TOKENLOCK_COUNTER_DIR_MODE", "0777"),
                            ("TOKENLOCK_COUNTER_DIR_MODE", "1775"),
                            ("TOKENLOCK_COUNTER_DIR_MODE", "0655"),
                            ("TOKENLOCK_COUNTER_DIR_MODE", "u=rwx"),
                            ("TOKENLOCK_COUNTER_REDIS", "redis://127.0.0.1:6379"),
                            ("TOKENLOCK_COUNTER_ETCD", "etcd://127.0.0.1:2379"),
                            ("TOKENLOCK_COUNTER_LOCK", "redis://127.0.0.1:6379"),
                            ("TOKENLOCK_COUNTER_LOCK", "/srv/locks")):
            with self.subTest(**{name: value}):
                for method in ("GET", "HEAD"):
                    r = self.cgi("id=c", method=method, **{name: value})
                    self.assertStatus(r, 500)
                    self.assertIn("counter.py: misconfigured: " + name, r.stderr)
                self.assertEqual(r.headers["Content-Length"], "57")
                self.assertStatus(self.cgi("id=c", **{name: value}), 500,
                                  b"the counter is misconfigured; see the server's error log")
        self.assertEqual(os.listdir(self.data), [])

    def test_a_bad_configuration_is_logged_escaped(self):
        # A value from the environment can neither forge a log line nor
        # drive the terminal of whoever reads the log.
        r = self.cgi("id=c", TOKENLOCK_COUNTER_WAIT_MS="5\r\nforged: \x1b[2J")
        self.assertStatus(r, 500)
        self.assertIn('not "5\\x0d\\x0aforged: \\x1b\\x5b2J"', r.stderr)
        self.assertEqual(r.stderr.count("\n"), 1, r.stderr)
        self.assertNotIn("\x1b", r.stderr)

    def test_a_missing_data_directory_answers_500_without_showing_it(self):
        missing = self.path("nowhere")
        r = self.cgi("id=x", data=missing)
        self.assertStatus(r, 500, b"internal error; see the server's error log")
        self.assertIn(missing, r.stderr)
        self.assertFalse(os.path.exists(missing))

    def test_without_library_or_command_a_hit_answers_500_and_logs_why(self):
        r = self.cgi("id=x", TOKENLOCK_LIBRARY=self.path("no.so"),
                     TOKENLOCK_COMMAND=self.path("no-command"), TOKENLOCK_BACKEND="")
        self.assertStatus(r, 500, b"the counter is misconfigured; see the server's error log")
        self.assertIn(self.path("no.so"), r.stderr)
        self.assertIn(self.path("no-command"), r.stderr)
        self.assertFalse(os.path.exists(self.counter("x")))

    def test_stale_data_answers_503_with_retry_after_and_writes_nothing(self):
        # `tokenlock incr` exit 75: a network filesystem's client kept
        # serving an old version, and nothing was written. A stand-in
        # command gives it here; the library backend has its own tests.
        stub = self.path("tokenlock-stale")
        self.write(stub, STALE_COMMAND)
        os.chmod(stub, 0o755)
        r = self.cgi("id=net", TOKENLOCK_COMMAND=stub, TOKENLOCK_BACKEND="command")
        self.assertStatus(r, 503, b"the counter is busy; try again")
        self.assertEqual(r.headers["Retry-After"], "1")
        self.assertIn("kept serving a version older", r.stderr)
        self.assertFalse(os.path.exists(self.counter("net")))

    # -- counter.cgi -----------------------------------------------------------------

    def need_counter_cgi(self):
        if not os.access(COUNTER_CGI, os.X_OK):
            if os.environ.get("COUNTER_CGI"):
                self.fail("%s is not executable" % COUNTER_CGI)
            self.skipTest("counter.cgi (%s) was not built" % COUNTER_CGI)

    def test_answers_are_byte_for_byte_those_of_counter_cgi(self):
        self.need_counter_cgi()
        requests = [("GET", "id=home"), ("GET", "id=home&format=json"), ("GET", "format=svg"),
                    ("GET", "id=home&peek=1"), ("HEAD", "id=home&format=svg"),
                    ("POST", "id=home"), ("GET", "id=bad"), ("GET", "id=bad&peek=1"),
                    ("GET", "id=max"), ("GET", "id=max&peek=1"),
                    ("GET", "id=busy"), ("GET", "id=fifo"), ("GET", "id=fifo&peek=1"),
                    ("GET", "id=zero"), ("HEAD", "id=zero")]
        requests += [("GET", query) for query, _ in BAD_QUERIES]
        requests += [("GET", q) for q in ("a&&b", "&id=x&", "id=x&format=svg&peek=0",
                                          "zz=%ff%fe", "id=%41%62")]
        answers = {}
        for name, program in (("py", COUNTER_PY), ("cgi", COUNTER_CGI)):
            data = self.path(name)
            os.mkdir(data)
            self.write(os.path.join(data, "bad.count"), b"garbage\n")
            self.write(os.path.join(data, "max.count"), b"18446744073709551615\n")
            os.mkfifo(os.path.join(data, "fifo.count"))
            os.symlink("/dev/zero", os.path.join(data, "zero.count"))
            out = []
            with tokenlock.lock(os.path.join(data, "busy.count.lock")):
                for method, query in requests:
                    out.append(self.cgi(query, method=method, program=program, data=data,
                                        TOKENLOCK_COUNTER_WAIT_MS="0").raw)
                for env in ({"TOKENLOCK_COUNTER_SYNC": "x"}, {"TOKENLOCK_COUNTER_WAIT_MS": "x"},
                            {"TOKENLOCK_COUNTER_DIR_MODE": "0777"},
                            {"TOKENLOCK_COUNTER_GROUP": "no-such-group-tl"},
                            {"TOKENLOCK_GROUP": "no-such-group-tl", "TOKENLOCK_DIR_MODE": "0777"}):
                    out.append(self.cgi("id=home", program=program, data=data, **env).raw)
            answers[name] = out
        for (method, query), py, cgi in zip(requests + [("GET", "sync=x"), ("GET", "wait=x")],
                                            answers["py"], answers["cgi"]):
            with self.subTest(method=method, query=query[:40]):
                self.assertEqual(py, cgi)

    def test_an_unflushable_data_directory_counts_and_answers_200_as_counter_cgi_does(self):
        # Write-only for the CGI's user (mode 0333, as upload drop
        # directories are): each commit is made, but the directory cannot
        # be opened to flush it. The hit is counted, so the answer is 200
        # with its count, and the log says what to fix. Root opens any
        # directory: the programs then run as nobody.
        self.need_counter_cgi()
        os.chmod(self.dir, 0o755)
        os.chmod(self.data, 0o333)
        replies = [self.cgi("id=drop&format=json", program=program, nobody=True)
                   for program in (COUNTER_PY, COUNTER_CGI, COUNTER_PY, COUNTER_CGI)]
        os.chmod(self.data, 0o755)
        for n, r in enumerate(replies, 1):
            self.assertStatus(r, 200)
            self.assertEqual(r.body, b'{"id":"drop","count":%d}\n' % n)
            self.assertEqual(r.headers["Content-Type"], replies[1].headers["Content-Type"])
            self.assertIn("give this user read permission on " + self.data, r.stderr)
        with open(self.counter("drop"), "rb") as f:
            self.assertEqual(f.read(), b"4\n")
        self.assertNoTempFiles()
        self.assertLockFree(self.counter("drop") + ".lock")

    def test_counter_py_and_counter_cgi_count_one_counter_together(self):
        self.need_counter_cgi()
        gate = Gate()

        def client(program):
            gate.wait()
            return [int(self.cgi("id=shared", program=program).body) for _ in range(15)]

        children = [Child(client, program) for program in
                    (COUNTER_PY, COUNTER_PY, COUNTER_CGI, COUNTER_CGI)]
        gate.open()
        values = sorted(v for c in children for v in c.result())
        self.assertEqual(values, list(range(1, 61)))
        with open(self.counter("shared"), "rb") as f:
            self.assertEqual(f.read(), b"60\n")
        self.assertLockFree(self.counter("shared") + ".lock")


class CounterCgiLibraryTest(CounterCgiTests, LibraryTestCase):
    pass


class CounterCgiCommandTest(CounterCgiTests, CommandTestCase):
    pass


if __name__ == "__main__":
    unittest.main()
