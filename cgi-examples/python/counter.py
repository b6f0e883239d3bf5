#!/usr/bin/python3
"""counter.py: the hit counter of counter.cgi, as a Python CGI program.

It answers the same URLs with the same statuses and bodies, reads the
same configuration, and counts in the same files (DIR/NAME.count, locked
by DIR/NAME.count.lock), so counter.py, counter.cgi and `tokenlock incr`
can count one counter together. docs/cgi-guide.md describes the URLs,
statuses and deployment.

    GET counter.py?id=NAME[&format=text|json|svg][&peek=1]

Deploy it with tokenlock.py beside it, and beside that libtokenlock_c.so
or the tokenlock command (or name them with TOKENLOCK_LIBRARY,
TOKENLOCK_COMMAND): see tokenlock.py's docstring.

Configuration (environment, e.g. Apache's SetEnv):
    TOKENLOCK_COUNTER_DIR      the data directory (/var/lib/tokenlock-counter)
    TOKENLOCK_COUNTER_WAIT_MS  how long a hit waits for a busy counter (5000)
    TOKENLOCK_COUNTER_SYNC     none, file or file_and_dir (file_and_dir)
    TOKENLOCK_COUNTER_DIR_MODE the mode of the lock directories it creates (0755)
    TOKENLOCK_COUNTER_GROUP    the one group the counters' locks are shared with
As counter.cgi, it reads only these: the module's TOKENLOCK_DIR_MODE and
TOKENLOCK_GROUP are set from them. TOKENLOCK_COUNTER_LOCK (and its older
names TOKENLOCK_COUNTER_REDIS and _ETCD), which places counter.cgi's locks
elsewhere, is refused (500).
"""

import os
import sys

# The module is deployed beside this script.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

PROGRAM = "counter.py"
DEFAULT_DIR = b"/var/lib/tokenlock-counter"
DEFAULT_WAIT_MS = 5000

# The limits of counter.cgi's query parser (cgi-examples/counter/cgi.hpp).
MAX_QUERY = 2048
MAX_PARAMETERS = 16
MAX_NAME = 32
MAX_VALUE = 256

REASONS = {200: "OK", 400: "Bad Request", 405: "Method Not Allowed",
           500: "Internal Server Error", 503: "Service Unavailable"}

_ID_CHARS = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-")
_HEX = b"0123456789abcdefABCDEF"
_SPACE = b" \t\n\v\f\r"
_DIGITS = b"0123456789"


# Hand-written rather than with re: importing re (and the enum module it
# needs) takes about 6 ms, a sixth of what this whole program takes to answer.
def valid_id(counter_id):
    return 1 <= len(counter_id) <= 64 and all(c in _ID_CHARS for c in counter_id)


_SHOWN = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789 _-.,:/=+@%")


def shown(value):
    """`value` (bytes from the query string or the environment) as it may be
    shown in a response or the log, as counter.cgi shows it: a few printable
    characters as they are, every other byte as \\xNN, at most 64 bytes, so
    that it can neither drive a terminal, forge a log line, nor become
    markup."""
    out = b"".join(bytes([c]) if c in _SHOWN else b"\\x%02x" % c for c in value[:64])
    return out + (b"..." if len(value) > 64 else b"")


def strtol_prefix(text):
    """The length of what C's strtol(text, &end, 10) consumes (whitespace,
    a sign, digits), or 0 when it finds no digits."""
    i, n = 0, len(text)
    while i < n and text[i] in _SPACE:
        i += 1
    if i < n and text[i] in b"+-":
        i += 1
    start = i
    while i < n and text[i] in _DIGITS:
        i += 1
    return i if i > start else 0


class Response:
    def __init__(self, status, body, content_type=b"text/plain; charset=utf-8", headers=()):
        self.status = status
        self.body = body
        self.content_type = content_type
        self.headers = list(headers)


def text(status, body, headers=()):
    return Response(status, body + b"\n", headers=headers)


def log(message):
    sys.stderr.write("%s: %s\n" % (PROGRAM, message))
    sys.stderr.flush()


def percent_decode(raw):
    """The decoded bytes, or None for a bad escape or a NUL ('+' is a space)."""
    out = bytearray()
    i, n = 0, len(raw)
    while i < n:
        c = raw[i]
        if c == 0x2B:  # '+'
            out.append(0x20)
        elif c == 0x25:  # '%'
            if i + 2 >= n:
                return None
            hi, lo = raw[i + 1], raw[i + 2]
            if hi not in _HEX or lo not in _HEX:
                return None
            d = int(raw[i + 1:i + 3], 16)
            if d == 0:
                return None
            out.append(d)
            i += 2
        elif c == 0:
            return None
        else:
            out.append(c)
        i += 1
    return bytes(out)


def parse_query(query):
    """(parameters, None), or (None, reason) for what counter.cgi refuses:
    an over-long query, invalid percent-encoding, a parameter without a
    name, too long, repeated, or one too many. Empty pieces are ignored; a
    parameter without '=' has an empty value."""
    if len(query) > MAX_QUERY:
        return None, b"query string too long"
    params = {}
    for piece in query.split(b"&"):
        if not piece:
            continue
        name, eq, value = piece.partition(b"=")
        name = percent_decode(name)
        value = percent_decode(value) if eq else b""
        if name is None or value is None:
            return None, b"invalid percent-encoding"
        if not name:
            return None, b"parameter without a name"
        if len(name) > MAX_NAME or len(value) > MAX_VALUE:
            return None, b"parameter too long"
        if name in params:
            return None, b"repeated parameter"
        if len(params) == MAX_PARAMETERS:
            return None, b"too many parameters"
        params[name] = value
    return params, None


class Config:
    def __init__(self, environ):
        """Reads the configuration; ValueError, naming the variable, for a
        value counter.cgi would refuse too."""
        self.dir = environ.get(b"TOKENLOCK_COUNTER_DIR") or DEFAULT_DIR
        self.wait_ms = DEFAULT_WAIT_MS
        wait = environ.get(b"TOKENLOCK_COUNTER_WAIT_MS")
        if wait:
            # counter.cgi takes what strtol takes, all of it.
            ms = int(wait) if strtol_prefix(wait) == len(wait) else -1
            if not 0 <= ms <= 600000:
                raise ValueError('TOKENLOCK_COUNTER_WAIT_MS must be 0 to 600000 milliseconds, '
                                 'not "%s"' % shown(wait).decode())
            self.wait_ms = ms
        for name in ("TOKENLOCK_COUNTER_LOCK", "TOKENLOCK_COUNTER_REDIS", "TOKENLOCK_COUNTER_ETCD"):
            if environ.get(name.encode()):
                # Counting under a lock other than the one counter.cgi takes
                # would let the two lose each other's hits.
                raise ValueError(name + " is set, but counter.py locks through lock directories "
                                 "beside the counters only (use counter.cgi, or unset it)")
        self.dir_mode = dir_mode(environ.get(b"TOKENLOCK_COUNTER_DIR_MODE"))
        self.group = environ.get(b"TOKENLOCK_COUNTER_GROUP") or None
        self.sync = "file_and_dir"
        sync = environ.get(b"TOKENLOCK_COUNTER_SYNC")
        if sync:
            if sync not in (b"none", b"file", b"file_and_dir"):
                raise ValueError('TOKENLOCK_COUNTER_SYNC must be none, file or file_and_dir, '
                                 'not "%s"' % shown(sync).decode())
            self.sync = sync.decode()

    def apply(self):
        """Sets the module's variables from the counter's, so that the
        server's TOKENLOCK_DIR_MODE or TOKENLOCK_GROUP (meant for other
        programs) changes nothing, as in counter.cgi."""
        os.environ["TOKENLOCK_DIR_MODE"] = "%04o" % self.dir_mode
        os.environ.pop("TOKENLOCK_GROUP", None)


def dir_mode(text):
    """TOKENLOCK_COUNTER_DIR_MODE by counter.cgi's rule (tokenlock's
    --dir-mode): octal, the owner may read, write and search, not writable
    by others (refused by every process: docs/security.md), not sticky."""
    if not text:
        return 0o755
    prefix = "TOKENLOCK_COUNTER_DIR_MODE must be "
    mode = 0
    for c in text:
        if not 0x30 <= c <= 0x37 or mode > 0o777:
            raise ValueError(prefix + 'an octal mode such as 0775, not "%s"' % shown(text).decode())
        mode = mode * 8 + c - 0x30
    if mode & 0o700 != 0o700 or mode & 0o1002:
        raise ValueError(prefix + "a mode that gives the owner read, write and search permission "
                         "and is neither writable by others nor sticky (0755, or 0775 to share "
                         "with a group), not " + shown(text).decode())
    return mode


def svg(value):
    # Zero-padded to six digits so that the image keeps its size as the count
    # grows, until it has more digits.
    digits = "%06d" % value
    width = 12 + 11 * len(digits)
    return ('<?xml version="1.0" encoding="UTF-8"?>\n'
            '<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="24" viewBox="0 0 %d 24" '
            'role="img" aria-label="%d hits">\n'
            '<title>%d hits</title>\n'
            '<rect width="%d" height="24" rx="3" fill="#1d1f21"/>\n'
            '<text x="%d" y="17" fill="#b5f566" font-size="16" '
            'font-family="DejaVu Sans Mono, Menlo, Consolas, monospace" text-anchor="middle" '
            'letter-spacing="1">%s</text>\n'
            '</svg>\n' % (width, width, value, value, width, width // 2, digits)).encode()


def value_response(counter_id, fmt, value):
    if fmt == b"json":
        return Response(200, b'{"id":"%s","count":%d}\n' % (counter_id, value),
                        b"application/json")
    if fmt == b"svg":
        return Response(200, svg(value), b"image/svg+xml")
    return Response(200, b"%d\n" % value)


def handle(method, query, cfg, tokenlock):
    if method not in ("GET", "HEAD"):
        return text(405, b"only GET and HEAD are allowed", [(b"Allow", b"GET, HEAD")])
    params, reason = parse_query(query)
    if params is None:
        return text(400, reason)
    # counter.cgi keeps parameters in a sorted map: the same one is named.
    for name in sorted(params):
        if name not in (b"id", b"format", b"peek"):
            return text(400, b"unknown parameter " + shown(name))
    counter_id = params.get(b"id", b"default")
    if not valid_id(counter_id):
        return text(400, b"id must be 1 to 64 letters, digits, '_' or '-'")
    fmt = params.get(b"format", b"text")
    if fmt not in (b"text", b"json", b"svg"):
        return text(400, b"format must be text, json or svg")
    peek = params.get(b"peek", b"0")
    if peek not in (b"0", b"1"):
        return text(400, b"peek must be 0 or 1")

    path = cfg.dir + b"/" + counter_id + b".count"
    try:
        if peek == b"1" or method == "HEAD":
            value = tokenlock.read_counter(path) or 0
        else:
            value = tokenlock.increment(path, wait=cfg.wait_ms / 1000.0, sync=cfg.sync,
                                        group=cfg.group)
    except tokenlock.Error as e:
        log(e)
        # stale_data: a network client's cache served an old version and did
        # not let go in time; nothing was written, and a retry will likely
        # succeed.
        if isinstance(e, tokenlock.Busy) or e.code == "stale_data":
            return text(503, b"the counter is busy; try again", [(b"Retry-After", b"1")])
        if isinstance(e, tokenlock.CorruptData):
            return text(500, b"the counter file is corrupt; it was left as it is")
        # Neither libtokenlock_c.so nor the command where they were looked for.
        if isinstance(e, tokenlock.BackendUnavailable):
            return text(500, b"the counter is misconfigured; see the server's error log")
        if not isinstance(e, tokenlock.DirSyncFailed) or e.value is None:
            return text(500, b"internal error; see the server's error log")
        # The hit is counted; only its durability is in doubt.
        value = e.value
    return value_response(counter_id, fmt, value)


def drain_request_body(content_length):
    """Reads a request body (up to 1 MiB) that is never used: a CGI that
    exits while the server still writes it makes Apache reset the
    connection instead of answering."""
    # counter.cgi reads CONTENT_LENGTH with atoll: what strtol takes, else 0.
    raw = content_length or b""
    end = strtol_prefix(raw)
    left = min(int(raw[:end]) if end else 0, 1 << 20)
    stdin = sys.stdin.buffer
    while left > 0:
        chunk = stdin.read(min(left, 65536))
        if not chunk:
            break
        left -= len(chunk)


def write_response(out, r, head_only):
    head = [b"Status: %d %s" % (r.status, REASONS.get(r.status, "Unknown").encode()),
            b"Content-Type: " + r.content_type,
            b"Content-Length: %d" % len(r.body),
            b"Cache-Control: no-store",
            # A browser must not guess HTML in a text answer that echoes input.
            b"X-Content-Type-Options: nosniff"]
    head += [name + b": " + value for name, value in r.headers]
    out.write(b"\r\n".join(head) + b"\r\n\r\n" + (b"" if head_only else r.body))
    out.flush()


def main():
    environ = os.environb
    try:
        drain_request_body(environ.get(b"CONTENT_LENGTH"))
    except OSError:
        pass
    method = os.fsdecode(environ.get(b"REQUEST_METHOD", b""))
    head_only = method == "HEAD"
    try:
        cfg = Config(environ)
    except ValueError as e:
        log("misconfigured: %s" % e)
        write_response(sys.stdout.buffer,
                       text(500, b"the counter is misconfigured; see the server's error log"),
                       head_only)
        return 0
    try:
        cfg.apply()
        import tokenlock
        response = handle(method, environ.get(b"QUERY_STRING", b""), cfg, tokenlock)
    except Exception:  # noqa: BLE001 - the client gets a 500, the log the details
        import traceback

        log(traceback.format_exc().rstrip())
        response = text(500, b"internal error; see the server's error log")
    write_response(sys.stdout.buffer, response, head_only)
    return 0


if __name__ == "__main__":
    sys.exit(main())
