"""tokenlock for Python: the rename-token lock, atomic writes and fenced updates.

One file with nothing but the standard library: put it beside your script
(or on sys.path) on any host, shared hosting included.

    import tokenlock

    with tokenlock.lock("/srv/app/data/guestbook.lock", wait=10.0) as held:
        ...                                  # only one process at a time here;
                                             # the lease is kept alive meanwhile
    lock = tokenlock.Lock("/srv/app/data/db.lock", wait=None)   # for ever
    with lock:
        with lock:                           # re-entrant in its thread
            ...

    tokenlock.write_file("/srv/app/data/config.json", text)      # never torn
    hits = tokenlock.increment("/srv/app/data/hits.count")        # exact
    tokenlock.update_file("/srv/app/data/guestbook.txt",
                          lambda old: (old or b"") + entry)       # fenced

Backends
    The module does the work through one of two backends, named in
    `tokenlock.backend`:

    "library"  libtokenlock_c.so, the C interface (tokenlock/tokenlock.h),
               loaded with ctypes. Looked for in TOKENLOCK_LIBRARY (only
               there when it is set), beside this file, then with
               ctypes.util.find_library("tokenlock_c").
    "command"  the tokenlock command, run once per operation (a few
               milliseconds each). Looked for in TOKENLOCK_COMMAND (only
               there when it is set), beside this file, in ~/bin, then on
               PATH. Used when the library cannot be loaded, so that a host
               where only the statically linked command was copied works too.

    TOKENLOCK_BACKEND=library or =command, or use(), chooses one; when it
    cannot be had, use() raises and `tokenlock.load_error` says why. Both
    backends take the same lock directory through the same protocol, so
    processes using either, the C++ library or the command exclude each
    other.

Errors
    Every failure raises tokenlock.Error (or a subclass), whose str() is the
    library's message: the path, the step, the cause and, where known, the
    fix. `.code` is the error's name in the library's one vocabulary
    (tokenlock/errors.hpp: "busy", "timed_out", "lock_lost",
    "corrupt_data", "bad_argument", "not_owner", "untrusted", "system", ...),
    which the library backend gets from tokenlock_strerror() and the
    command backend from the command's --errors=json line; never from a
    message. `.errno` is set for system errors. Busy (busy; its subclass
    TimedOut, timed_out), LockLost and CorruptData are subclasses; Busy and
    TimedOut are also the builtin TimeoutError; system errors are also instances of the matching OSError
    subclass (FileNotFoundError, PermissionError, ...), and bad arguments of
    ValueError.

Shared locks and semaphores
    Readers together, a writer alone, in py-filelock's ReadWriteLock shape;
    and semaphores of N slots (docs/protocol.md, Shared locks and
    semaphores):

        rw = tokenlock.ReadWriteLock("/srv/app/data/page.lock")
        with rw.read_lock():                 # with other readers
            ...
        with rw.write_lock():                # alone; waiting, it bars new readers
            ...
        with tokenlock.Semaphore("/srv/app/data/jobs.lock", slots=3):
            ...                              # at most 3 at once
        tokenlock.lock(lockdir, shared=True) # the same holds as a Lock
        tokenlock.holders(lockdir)           # who holds it, in which mode

    Each holder has its own lease, kept alive in a with-block and taken
    over as an exclusive holder's is. A shared hold has no fence:
    Lock.commit_file() refuses it (BadArgument).

Sharing with a group
    A lock directory another user could change is refused (code
    "untrusted"; docs/security.md). To share locks with other users, name
    the one group you share with: the `group` option of lock(),
    Lock.acquire(), update_file() and increment() (a group name, or a gid),
    else TOKENLOCK_GROUP, read at each call. You must be a member of it
    (else BadArgument); lock directories, tokens and workspaces of its
    members are then trusted, and a lock directory created gets that group
    and group write. Without a named group, TOKENLOCK_DIR_MODE with group
    write (0775, 0770) shares only lock directories you own, with their own
    group. Being merely in a group (`users`) trusts nothing.

Fork and threads
    A Lock is held by one thread at a time, re-entrantly: the holding
    thread's acquire() is counted, another thread's waits for the last
    release(). A with-block's lease is refreshed at a third of the lease
    by one daemon thread shared by all such blocks, which ends a second
    after the last (keep_alive=False: not). A forked child never
    releases its parent's lock: its release() and refresh() raise
    Error("not_owner"), and its garbage collector leaves the lock alone.
"""

import atexit
import ctypes
import datetime
import errno as _errno
import heapq
import os
import stat
import threading
import time
import types
import warnings

# ctypes.util, shutil and subprocess are imported where they are needed, and
# re not at all: importing them takes about 15 ms, three times as long as
# counter.cgi takes to answer a hit.

__all__ = [
    "Lock", "lock", "write_file", "update_file", "increment", "read_counter", "use",
    "version", "Error", "Busy", "TimedOut", "LockLost", "CorruptData", "DirSyncFailed", "BadArgument",
    "OSFailure", "ModeConflict", "ReadWriteLock", "Semaphore", "Holder", "holders",
    "BackendUnavailable", "backend", "library_path", "command_path", "load_error",
    "DEFAULT_WAIT", "DEFAULT_LEASE", "set_legacy_timeout", "COUNTER_READ_LIMIT", "READ_LIMIT",
]

DEFAULT_WAIT = 10.0
"""Seconds an acquire waits for a busy lock unless told otherwise (the library's default)."""

DEFAULT_LEASE = 60.0
"""Seconds of a lease unless told otherwise (the library's default)."""

backend = None
"""The backend in use: "library", "command", or None when neither was found."""

library_path = None
"""The libtokenlock_c.so the library backend loaded, or None."""

command_path = None
"""The tokenlock command the command backend runs, or None."""

load_error = None
"""Why the preferred backend could not be had (None when it was)."""

_SYNC_LEVELS = {"none": 0, "file": 1, "file_and_dir": 2}

# The names of errors are the library's (tokenlock/errors.hpp, Names): the
# library backend asks tokenlock_strerror() for the name of a return code,
# the command backend reads it from the JSON line that TOKENLOCK_ERRORS=json
# makes the command print last on stderr.


def _token_expiry(token):
    """The expiry (microseconds since the epoch) a held token's name or a
    share entry's carries, or None when it is not "lockfile.<expiry>.<owner>"
    or "s.<expiry>.<owner>"."""
    parts = token.split(".", 2)
    # str.isdigit() alone would take other scripts' digits. "s." names a
    # shared holder's entry, which carries its own expiry.
    if (len(parts) == 3 and parts[0] in ("lockfile", "s") and parts[2] and parts[1]
            and not parts[1].strip("0123456789") and parts[1][0] != "0" and len(parts[1]) <= 19):
        return int(parts[1])
    return None


# ---- errors -------------------------------------------------------------------


class Error(Exception):
    """A tokenlock failure.

    str(e) (also `e.message`) is the library's message, naming the path,
    the step and the cause. `e.code` is the condition's name: "busy",
    "timed_out", "lock_lost", "token_missing", "lock_corrupt",
    "corrupt_data", "bad_argument", "not_owner", "dir_sync_failed",
    "not_fenced", "stale_data", "backend_unavailable" (a spec names a lock
    server this build lacks), "not_supported" (a shared lock or semaphore
    where holders leave owner marks: GlusterFS), "system", "no_memory", "unavailable" (no
    backend), "command_failed" (the command died or answered nonsense).
    `e.errno` is the errno of a system error, else None.
    """

    def __init__(self, message, code="system", errno=None):
        super().__init__(message)
        self.message = message
        self.code = code
        self.errno = errno

    def __str__(self):
        return self.message

    def __reduce__(self):
        # Pickled (by multiprocessing, say) with its code and errno, which
        # the default, built from args alone, would lose.
        kind = "os" if isinstance(self, OSFailure) else type(self).__name__
        return (_restore_error, (kind, self.message, self.code, self.errno))


class Busy(Error, TimeoutError):
    """The lock is held by another: code "busy" (one attempt), or
    "timed_out" (the wait budget ran out: TimedOut). Also the builtin
    TimeoutError, as py-filelock's Timeout is, so that code written
    against `except TimeoutError` keeps working; `errno` stays None."""


class TimedOut(Busy):
    """The wait budget ran out while another held the lock (code
    "timed_out"). A Busy, so also a TimeoutError."""


class LockLost(Error):
    """Our token was taken over (its lease ended, or its owner was judged
    dead): we no longer hold the lock, and what was done under it may have
    overlapped with the new holder. A fenced update wrote nothing."""


class CorruptData(Error):
    """A counter file holds something other than one unsigned decimal and a
    newline. It was left as it is: repair or remove it by hand."""


class DirSyncFailed(Error):
    """The new contents are in place (an update is committed, a count is
    made), but the directory could not be flushed, so a crash may undo them
    (code "dir_sync_failed"). Do not repeat the update. `e.value` is
    increment()'s new value (None for the other calls)."""

    def __init__(self, message, errno=None, value=None):
        Error.__init__(self, message, "dir_sync_failed", errno)
        self.value = value

    def __reduce__(self):
        return (DirSyncFailed, (self.message, self.errno, self.value))


class BadArgument(Error, ValueError):
    """An unusable argument (a negative wait, an unknown sync level, a path
    with a NUL byte ...). Also a ValueError."""

    def __init__(self, message):
        Error.__init__(self, message, "bad_argument")


class ModeConflict(Error, RuntimeError):
    """A ReadWriteLock asked for the other mode by the thread that holds it
    (code "mode_conflict"): reads are not upgraded to writes nor writes
    downgraded in place; nothing was changed. Also a RuntimeError, as
    py-filelock's ReadWriteLock raises."""

    def __init__(self, message):
        Error.__init__(self, message, "mode_conflict")


class BackendUnavailable(Error):
    """Neither libtokenlock_c.so nor the tokenlock command could be found or
    loaded (code "unavailable"); the message says where they were looked
    for."""

    def __init__(self, message):
        Error.__init__(self, message, "unavailable")


class OSFailure(Error, OSError):
    """A system call failed (code "system"). The exception is also an
    instance of the OSError subclass that matches its errno, so
    `except FileNotFoundError` and `except PermissionError` work."""

    def __init__(self, message, errno):
        OSError.__init__(self, errno, message)
        self.message = message
        self.code = "system"

    def __str__(self):
        return self.message


_os_failure_classes = {}


def _restore_error(kind, message, code, err):
    if kind == "os":
        return _os_failure(message, err)
    cls = globals().get(kind)
    if not (isinstance(cls, type) and issubclass(cls, Error)):
        cls = Error
    e = cls.__new__(cls, message)
    Error.__init__(e, message, code, err)
    return e


def _os_failure(message, err):
    """An OSFailure that is also the OSError subclass Python uses for `err`."""
    if not err:
        return Error(message, "system")
    base = type(OSError(err, ""))
    if base is OSError:
        return OSFailure(message, err)
    cls = _os_failure_classes.get(base)
    if cls is None:
        cls = type(base.__name__, (OSFailure, base), {"__module__": __name__,
                                                        "__doc__": OSFailure.__doc__})
        _os_failure_classes[base] = cls
    return cls(message, err)


def _error_for(name, message, err=0):
    """The exception for an error's name (and errno, for "system")."""
    if name == "busy":
        return Busy(message, name)
    if name == "timed_out":
        return TimedOut(message, name)
    if name == "lock_lost":
        return LockLost(message, name)
    if name == "corrupt_data":
        return CorruptData(message, name)
    if name == "bad_argument":
        return BadArgument(message)
    if name == "system":
        return _os_failure(message, err)
    if name == "no_memory":
        return Error(message, name, _errno.ENOMEM)
    if name == "dir_sync_failed":
        return DirSyncFailed(message, err or None)
    if name == "untrusted" and "TOKENLOCK_GROUP" in message:
        # The fix names the library's and the command's spelling of it.
        message += " (in Python: the group option of lock(), update_file() and increment())"
    return Error(message, name, err or None)


def _from_oserror(step, path, e, then=""):
    """An OSError from this module's own system calls, as tokenlock reports
    them: step, path, cause (and what was left)."""
    msg = "tokenlock: %s %s: %s" % (step, _show(path), e.strerror or e)
    if getattr(e, "filename", None) is not None and os.fsdecode(e.filename) != _show(path):
        msg = "tokenlock: %s %s: %s: %s" % (step, _show(path), os.fsdecode(e.filename),
                                             e.strerror or e)
    return _os_failure(msg + then, e.errno)


# ---- arguments ----------------------------------------------------------------


def _show(path):
    return os.fsdecode(path)


def _path(path, what="path"):
    """`path` (str, bytes or os.PathLike) as bytes for the C interface and the
    command line; refuses what C would silently cut short."""
    try:
        p = os.fsencode(path)
    except TypeError:
        raise BadArgument("tokenlock: %s must be a str, bytes or os.PathLike, not %s"
                          % (what, type(path).__name__)) from None
    if not p:
        raise BadArgument("tokenlock: %s must not be empty" % what)
    if b"\0" in p:
        raise BadArgument("tokenlock: %s %r contains a NUL byte" % (what, os.fsdecode(p)))
    return p


def _seconds(value, what, allow_zero):
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise BadArgument("tokenlock: %s must be a number of seconds, not %r" % (what, value))
    if value != value or value < 0 or (value == 0 and not allow_zero) or value > 1e9:
        raise BadArgument("tokenlock: %s must be %s seconds, not %r"
                          % (what, "0 or more" if allow_zero else "more than 0", value))
    return value


# Seconds after its timestamp at which a token of the deployed Perl rename
# lock is stale; None: the library's default (60 s, that procedure's own).
_legacy_timeout = None


def set_legacy_timeout(seconds):
    """Sets the age, in seconds, at which a token of the widely deployed
    Perl rename lock ("lockfile<epoch seconds>", docs/protocol.md, Legacy
    tokens) counts as stale and is taken over, for every lock taken from
    now on in this process; None returns to the default, 60 s, which is
    that procedure's own. Set it to the timeout your old scripts use while
    they share lock directories with tokenlock."""
    global _legacy_timeout
    _legacy_timeout = None if seconds is None else _seconds(seconds, "legacy_timeout", False)


def _legacy_args():
    return [] if _legacy_timeout is None else [b"--legacy-timeout",
                                               _secs(_legacy_timeout).encode()]


def _group(group):
    """The one group named for sharing (docs/security.md, Who is trusted):
    `group` (a name, or a gid as an int or decimal), else TOKENLOCK_GROUP,
    read at each call as the command reads it; as bytes, or None."""
    if group is None:
        return os.environb.get(b"TOKENLOCK_GROUP") or None
    if isinstance(group, int) and not isinstance(group, bool):
        if not 0 <= group < 2 ** 32:
            raise BadArgument("tokenlock: group must be a group name or a gid from 0 to "
                              "4294967295, not %d" % group)
        return b"%d" % group
    if not isinstance(group, (str, bytes)):
        raise BadArgument("tokenlock: group must be a group name (str) or a gid (int), not %s"
                          % type(group).__name__)
    g = os.fsencode(group)
    if not g or b"\0" in g:
        raise BadArgument("tokenlock: group must be a group name or a gid, not %r" % (group,))
    return g


class _Share(tuple):
    """How a lock is taken: (shared, slots), slots 0 for no limit."""

    __slots__ = ()
    shared = property(lambda self: self[0])
    slots = property(lambda self: self[1])


_EXCLUSIVE = _Share((False, 0))
_MAX_SLOTS = 999999


def _share(shared, slots):
    """The _Share of the `shared` and `slots` options; slots implies shared."""
    if slots is None:
        return _Share((True, 0)) if shared else _EXCLUSIVE
    if isinstance(slots, bool) or not isinstance(slots, int) or not 1 <= slots <= _MAX_SLOTS:
        raise BadArgument("tokenlock: slots must be a whole number from 1 to %d (a semaphore "
                          "of that many holders), or None, not %r" % (_MAX_SLOTS, slots))
    return _Share((True, slots))


def _dir_mode_problem(mode):
    # The command's rules (tools/cli.cpp, dir_mode_problem), so that both
    # backends take the same TOKENLOCK_DIR_MODE.
    if mode & 0o700 != 0o700:
        return "the owner needs read, write and search permission (0700) on a lock directory"
    if mode & 0o002:
        return ("a lock directory writable by others is refused by every process that uses "
                "it (docs/security.md): share it with a group instead, with 0775 or 0770 and "
                "the group option or TOKENLOCK_GROUP")
    if mode & 0o1000:
        return ("in a sticky lock directory only a token's owner may rename it, so users lock "
                "each other out")
    return None


def _env_dir_mode():
    """TOKENLOCK_DIR_MODE (an octal mode such as 0775), which the command
    reads itself and the library backend passes as dir_mode; None unset."""
    text = os.environ.get("TOKENLOCK_DIR_MODE")
    if not text:
        return None
    if text.strip("01234567") or len(text.lstrip("0")) > 4 or int(text, 8) > 0o7777:
        raise BadArgument('tokenlock: TOKENLOCK_DIR_MODE takes an octal mode such as 0775, '
                          'not "%s"' % text)
    problem = _dir_mode_problem(int(text, 8))
    if problem:
        raise BadArgument("tokenlock: TOKENLOCK_DIR_MODE %s: %s" % (text, problem))
    return int(text, 8)


def _sync(sync):
    if sync not in _SYNC_LEVELS:
        raise BadArgument("tokenlock: sync must be 'none', 'file' or 'file_and_dir', not %r"
                          % (sync,))
    return sync


def _data(value, what):
    if isinstance(value, str):
        return value.encode("utf-8")
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    raise TypeError("tokenlock: %s must be bytes or str, not %s" % (what, type(value).__name__))


def _by(by):
    if isinstance(by, bool) or not isinstance(by, int) or not 0 <= by < 2 ** 64:
        raise BadArgument("tokenlock: by must be an integer from 0 to 2**64-1, not %r" % (by,))
    return by


def _parse_counter(path, text):
    """The value of a counter file's contents, exactly as the library reads it:
    one unsigned 64-bit decimal without leading zeros and a newline."""
    if text is None:
        return None
    ok = (2 <= len(text) <= 21 and text.endswith(b"\n") and text[:-1].isdigit()
          and (text[0:1] != b"0" or len(text) == 2))
    if ok and int(text[:-1]) < 2 ** 64:
        return int(text[:-1])
    shown = "".join(chr(c) if 0x20 <= c < 0x7F else "\\x%02x" % c for c in text[:24])
    if len(text) > 24:
        shown += "..."
    raise CorruptData("tokenlock: read counter %s: the file does not hold one unsigned decimal "
                      "and a newline (it holds \"%s\", %d bytes); it was left as it is: repair "
                      "or remove it by hand" % (_show(path), shown, len(text)), "corrupt_data")


COUNTER_READ_LIMIT = 64
"""The most bytes of a counter file read (one decimal of at most 20 digits
and a newline); a larger one is CorruptData, not read and left as it is."""

READ_LIMIT = 64 << 20
"""The most bytes update_file() reads of its target (the library's
update_options::read_limit); a larger one fails with EFBIG, the lock
released and nothing written."""

_TYPE_NAMES = ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
               (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


def _not_regular(step, path, mode):
    if stat.S_ISDIR(mode):
        return _os_failure("tokenlock: %s %s: is a directory; name a file"
                           % (step, _show(path)), _errno.EISDIR)
    kind = next((name for test, name in _TYPE_NAMES if test(mode)), "not a regular file")
    return _os_failure("tokenlock: %s %s: it is %s, not a regular file, and was not read (it "
                       "could block or never end); nothing was written: replace it with a "
                       "regular file" % (step, _show(path), kind), _errno.EINVAL)


def _over_limit(step, path, size, counter):
    if counter:
        return CorruptData("tokenlock: %s %s: the file holds %s bytes, more than a counter's %d "
                           "(one decimal of at most 20 digits and a newline); it was left as it "
                           "is and not read: repair or remove it by hand"
                           % (step, _show(path), size, COUNTER_READ_LIMIT), "corrupt_data")
    return _os_failure("tokenlock: %s %s: the file is too large: %s bytes, more than "
                       "tokenlock.READ_LIMIT of %d bytes; nothing was read or written"
                       % (step, _show(path), size, READ_LIMIT), _errno.EFBIG)


def _open_for_reading(path, step):
    """A descriptor of `path` opened without following a link at it and
    without blocking (a FIFO would wait for a writer), or None when nothing
    is there."""
    try:
        return os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY
                       | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError as e:
        # O_NOFOLLOW answers ELOOP for a link (EMLINK on FreeBSD); ELOOP also
        # means a loop in the directories above, which lstat tells apart.
        if e.errno in (_errno.ELOOP, _errno.EMLINK) and os.path.islink(path):
            raise _os_failure(
                "tokenlock: %s %s: it is a symbolic link, and links are not followed here "
                "(an update or increment replaces the link with a file), so what it points "
                "to, maybe another user's file, was not read; nothing was written: name the "
                "file it points to, or remove the link" % (step, _show(path)),
                _errno.ELOOP) from None
        raise _from_oserror(step, path, e) from None


def _read_bounded(path, step, counter=False):
    """The contents of the regular file `path`, or None when it does not
    exist. A link at `path` is not followed, and anything but a regular
    file (a FIFO, a device, a directory) is refused before the first byte
    is read; at most COUNTER_READ_LIMIT (counter) or READ_LIMIT bytes are
    read, more is refused (CorruptData, EFBIG)."""
    fd = _open_for_reading(path, step)
    if fd is None:
        return None
    limit = COUNTER_READ_LIMIT if counter else READ_LIMIT
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise _not_regular(step, path, st.st_mode)
        if st.st_size > limit:
            raise _over_limit(step, path, st.st_size, counter)
        # The size may change while we read, and /proc's says 0: one byte
        # past the limit tells a file of exactly the limit from a longer one.
        chunks, got = [], 0
        while True:
            chunk = os.read(fd, min(limit + 1 - got, 1 << 20))
            if not chunk:
                return b"".join(chunks)
            chunks.append(chunk)
            got += len(chunk)
            if got > limit:
                raise _over_limit(step, path, "over %d" % limit, counter)
    except OSError as e:
        if isinstance(e, Error):
            raise
        raise _from_oserror(step, path, e) from None
    finally:
        os.close(fd)


def read_counter(path):
    """The value of the counter file `path`, read without its lock, or None
    when the file does not exist.

    Counter files are only ever replaced whole (by rename), so the value is
    one that some increment committed. Raises CorruptData when the file is
    not a counter (also when it holds more than COUNTER_READ_LIMIT bytes,
    which are not read), and an OSFailure when it cannot be read: ELOOP for
    a symbolic link at `path` (increment() would replace it, so what it
    points to is not the counter), EINVAL for a FIFO, a device or a socket
    (refused without blocking), EISDIR for a directory.
    """
    p = _path(path)
    return _parse_counter(p, _read_bounded(p, "read counter", counter=True))


# ---- the library backend ------------------------------------------------------


class _Options(ctypes.Structure):
    _fields_ = [("wait_ms", ctypes.c_int64), ("lease_ms", ctypes.c_int64),
                ("legacy_timeout_ms", ctypes.c_int64), ("dir_mode", ctypes.c_int),
                ("sync", ctypes.c_int), ("group", ctypes.c_char_p),
                ("mode", ctypes.c_int), ("slots", ctypes.c_int)]


class _Holder(ctypes.Structure):
    _fields_ = [("id", ctypes.c_char * 256), ("mode", ctypes.c_int), ("slots", ctypes.c_int),
                ("waiting_writer", ctypes.c_int), ("stale", ctypes.c_int),
                ("expiry_us", ctypes.c_int64)]


# The MAJOR.MINOR versions of the library whose tokenlock_options is _Options
# above (0.2.0 added `group` at its end, 0.3.0 `mode` and `slots` after it).
# An older library ignores what it lacks: without `mode` a shared lock or a
# semaphore would be taken exclusively, without `group` it trusts every
# group the caller is in. A newer one may read fields past the end of ours.
_OPTIONS_VERSIONS = ((0, 3),)

# What a library older than _OPTIONS_VERSIONS lacks, by the version that added it.
_OPTIONS_ADDED = (((0, 2), "`group`, so it would share locks with every group this user is in"),
                  ((0, 3), "`mode` and `slots`, so a shared lock or a semaphore would be "
                           "taken exclusively"))


def _options_layout_problem(path, version):
    """Why the library at `path`, of `version`, cannot be given _Options, or
    None when it can."""
    parts = version.split(".")
    if len(parts) != 3 or not all(p and not p.strip("0123456789") for p in parts):
        return "%s says its version is %r, not MAJOR.MINOR.PATCH" % (path, version)
    known = tuple(int(p) for p in parts[:2])
    if known in _OPTIONS_VERSIONS:
        return None
    wanted = " or ".join("%d.%d.x" % v for v in _OPTIONS_VERSIONS)
    if known < min(_OPTIONS_VERSIONS):
        lacks = ", and no ".join(what for added, what in _OPTIONS_ADDED if known < added)
        return ("%s is version %s, older than this tokenlock.py (%s): its tokenlock_options "
                "has no %s; install the libtokenlock_c.so built with this tokenlock.py"
                % (path, version, wanted, lacks))
    return ("%s is version %s, newer than this tokenlock.py (%s): its tokenlock_options "
            "may have fields this module does not fill; use the tokenlock.py of the same "
            "release" % (path, version, wanted))


# `current` is a void pointer, not c_char_p, which would stop at a NUL byte.
_UPDATE_FN = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t,
                              ctypes.c_int, ctypes.c_void_p)


class _Library:
    name = "library"

    def __init__(self, path):
        self.path = path
        lib = ctypes.CDLL(path)
        c_int, c_char_p, c_void_p, c_size_t = (ctypes.c_int, ctypes.c_char_p, ctypes.c_void_p,
                                               ctypes.c_size_t)
        opts = ctypes.POINTER(_Options)
        for fname, res, args in [
            ("tokenlock_options_init", None, [opts]),
            ("tokenlock_acquire", c_int, [c_char_p, opts, ctypes.POINTER(c_void_p)]),
            ("tokenlock_try_acquire", c_int, [c_char_p, opts, ctypes.POINTER(c_void_p)]),
            ("tokenlock_release", c_int, [c_void_p]),
            ("tokenlock_refresh", c_int, [c_void_p, opts]),
            ("tokenlock_token", c_char_p, [c_void_p]),
            ("tokenlock_expiry_us", ctypes.c_int64, [c_void_p]),
            ("tokenlock_holders", c_int, [c_char_p, opts, ctypes.POINTER(_Holder), c_size_t,
                                          ctypes.POINTER(c_size_t)]),
            ("tokenlock_commit_file", c_int, [c_void_p, c_char_p, c_char_p, c_size_t, opts]),
            ("tokenlock_write_file", c_int, [c_char_p, c_char_p, c_size_t, opts]),
            ("tokenlock_buffer_set", c_int, [c_void_p, c_char_p, c_size_t]),
            ("tokenlock_update_file", c_int, [c_char_p, c_char_p, opts, _UPDATE_FN, c_void_p]),
            ("tokenlock_increment", c_int, [c_char_p, c_char_p, ctypes.c_uint64, opts,
                                            ctypes.POINTER(ctypes.c_uint64)]),
            ("tokenlock_last_error", c_char_p, []),
            ("tokenlock_last_errno", c_int, []),
            ("tokenlock_strerror", c_char_p, [c_int]),
            ("tokenlock_version", c_char_p, []),
        ]:
            try:
                f = getattr(lib, fname)
            except AttributeError:
                raise OSError("%s does not export %s: it is not libtokenlock_c.so, or too old"
                              % (path, fname)) from None
            f.restype = res
            f.argtypes = args
        problem = _options_layout_problem(path, lib.tokenlock_version().decode("ascii", "replace"))
        if problem:
            raise OSError(problem)
        self.lib = lib
        self._options_made = {}

    def version(self):
        return self.lib.tokenlock_version().decode()

    def _error(self, code):
        # The message and errno are per thread, and read on the thread that
        # made the failing call, right after it.
        message = os.fsdecode(self.lib.tokenlock_last_error() or b"")
        name = self.lib.tokenlock_strerror(code).decode()
        return _error_for(name, message or "tokenlock: %s" % name, self.lib.tokenlock_last_errno())

    def _options(self, wait=None, lease=None, sync=None, group=None, share=_EXCLUSIVE):
        # Kept and reused (never changed once made): building one costs as
        # much as a third of an uncontended acquire.
        dir_mode = _env_dir_mode()
        key = (wait, lease, sync, _legacy_timeout, group, dir_mode, share)
        o = self._options_made.get(key)
        if o is None:
            o = _Options()
            self.lib.tokenlock_options_init(ctypes.byref(o))
            # The structure keeps the bytes that `group` points to alive.
            o.group = group
            if share.shared:
                o.mode = 1  # TOKENLOCK_SHARED
                if share.slots:
                    o.slots = share.slots
            if dir_mode is not None:
                o.dir_mode = dir_mode
            if wait is not None:
                o.wait_ms = int(round(wait * 1000))
            if lease is not None:
                o.lease_ms = max(1, int(round(lease * 1000)))
            if sync is not None:
                o.sync = _SYNC_LEVELS[sync]
            if _legacy_timeout is not None:
                o.legacy_timeout_ms = max(1, int(round(_legacy_timeout * 1000)))
            if len(self._options_made) < 64:
                self._options_made[key] = o
        return o

    def acquire(self, lockdir, wait, lease, once, group, share=_EXCLUSIVE):
        out = ctypes.c_void_p()
        o = self._options(wait=wait, lease=lease, group=group, share=share)
        f = self.lib.tokenlock_try_acquire if once else self.lib.tokenlock_acquire
        rc = f(lockdir, ctypes.byref(o), ctypes.byref(out))
        if rc:
            raise self._error(rc)
        return {"handle": out.value, "token": os.fsdecode(self.lib.tokenlock_token(out.value)),
                "pid": os.getpid()}

    def expiry_us(self, state):
        return self.lib.tokenlock_expiry_us(state["handle"])

    def holders(self, lockdir, group):
        o = self._options(group=group)
        count, capacity = ctypes.c_size_t(), 8
        while True:
            out = (_Holder * capacity)()
            rc = self.lib.tokenlock_holders(lockdir, ctypes.byref(o), out, capacity,
                                            ctypes.byref(count))
            if rc:
                raise self._error(rc)
            # Holders may come between two calls: asked again with room for them.
            if count.value <= capacity:
                break
            capacity = count.value + 8
        return [Holder(os.fsdecode(h.id), "shared" if h.mode == 1 else "exclusive", h.slots,
                       bool(h.waiting_writer), bool(h.stale), h.expiry_us)
                for h in out[:count.value]]

    def commit_file(self, state, lockdir, path, data, sync):
        o = self._options(sync=sync)
        rc = self.lib.tokenlock_commit_file(state["handle"], path, data, len(data),
                                            ctypes.byref(o))
        if rc:
            raise self._error(rc)

    def refresh(self, state, lockdir, lease):
        o = self._options(lease=lease)
        rc = self.lib.tokenlock_refresh(state["handle"], ctypes.byref(o))
        if rc:
            raise self._error(rc)
        state["token"] = os.fsdecode(self.lib.tokenlock_token(state["handle"]))

    def release(self, state, lockdir):
        handle, state["handle"] = state["handle"], None
        # The C library frees the handle whatever it returns, and refuses in
        # a forked child (not_owner) without touching the parent's token.
        rc = self.lib.tokenlock_release(handle)
        if rc:
            raise self._error(rc)

    def abandon(self, state, lockdir):
        handle, state["handle"] = state.get("handle"), None
        if handle:
            self.lib.tokenlock_release(handle)

    def write_file(self, path, data, sync):
        o = self._options(sync=sync)
        rc = self.lib.tokenlock_write_file(path, data, len(data), ctypes.byref(o))
        if rc:
            raise self._error(rc)

    def update_file(self, path, lockdir, fn, wait, lease, sync, group):
        outcome = {}
        set_buffer = self.lib.tokenlock_buffer_set

        def call(arg, current, current_len, exists, next_buffer):
            # Nothing may escape into C: an exception here would make ctypes
            # print it and return 0, and 0 commits.
            try:
                old = ctypes.string_at(current, current_len) if exists else None
                new = _data(fn(old), "the update function's result")
                rc = set_buffer(next_buffer, new, len(new))
                if rc:
                    outcome["error"] = self._error(rc)
                    return 1
                outcome["data"] = new
                return 0
            except BaseException as e:  # noqa: B902 - KeyboardInterrupt too must not commit
                outcome["exception"] = e
                return 1

        callback = _UPDATE_FN(call)
        o = self._options(wait=wait, lease=lease, sync=sync, group=group)
        rc = self.lib.tokenlock_update_file(path, lockdir, ctypes.byref(o), callback, None)
        if "exception" in outcome:
            e = outcome.pop("exception")
            try:
                raise e
            finally:
                del e
        if "error" in outcome:
            raise outcome.pop("error")
        if rc:
            raise self._error(rc)
        return outcome["data"]

    def increment(self, path, lockdir, by, wait, lease, sync, group):
        value = ctypes.c_uint64()
        o = self._options(wait=wait, lease=lease, sync=sync, group=group)
        rc = self.lib.tokenlock_increment(path, lockdir, by, ctypes.byref(o), ctypes.byref(value))
        if rc:
            e = self._error(rc)
            if isinstance(e, DirSyncFailed):
                e.value = value.value  # counted: the C interface hands out the value
            raise e
        return value.value


# ---- the command backend ------------------------------------------------------

def _command_environment():
    # Made at each run, so that changes to os.environ reach the command.
    return dict(os.environ, TOKENLOCK_ERRORS="json")


def _error_line(stderr):
    """(name, errno, the text before it) from the command's JSON error line
    (its last line on stderr), or None when the last line is not one (a
    command from before --errors=json)."""
    lines = stderr.rstrip(b"\n").split(b"\n")
    if not lines[-1].startswith(b'{"error"'):
        return None
    import json

    try:
        fields = json.loads(lines[-1].decode("utf-8", "surrogateescape"))
        name, err = fields["error"], fields["errno"]
    except (ValueError, KeyError, TypeError):
        return None
    if not isinstance(name, str) or not isinstance(err, int):
        return None
    return name, err, os.fsdecode(b"\n".join(lines[:-1])).strip()


def _arg(path):
    # A path that starts with '-' would be read as an option.
    return b"./" + path if path.startswith(b"-") else path


def _secs(seconds):
    return "%.6f" % seconds


def _group_args(group):
    # One word with "=": a gid or name starting with "-" stays the value.
    return [b"--group=" + group] if group else []


# `tokenlock incr` refuses a wait beyond a year and has none without limit:
# a longer one is cut to a year, which waits as long in practice.
_LONGEST_FILE_WAIT = 31536000.0


class _Command:
    name = "command"

    def __init__(self, path):
        self.path = path
        self._has_commit = None

    def _run(self, args, step, target, input=None, once=False):
        """Runs the command; its stdout on success, else the exception its
        exit status and message stand for."""
        import subprocess

        try:
            # close_fds=False lets subprocess use posix_spawn (vfork), several
            # times cheaper than fork from a large interpreter; Python's own
            # descriptors are not inheritable unless made so.
            # stdin: a CGI program's is the request body, not the command's.
            feed = {"input": input} if input is not None else {"stdin": subprocess.DEVNULL}
            p = subprocess.run([self.path] + args, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, close_fds=False,
                               env=_command_environment(), **feed)
        except OSError as e:
            raise BackendUnavailable("tokenlock: %s %s: cannot run the tokenlock command %s: %s"
                                     % (step, _show(target), _show(self.path),
                                        e.strerror or e)) from None
        if p.returncode == 0:
            return p.stdout
        e = self._error(p.returncode, p.stderr, step, target, once)
        e.output = p.stdout
        raise e

    def _error(self, status, stderr, step, target, once):
        if status < 0:
            return Error("tokenlock: %s %s: the tokenlock command %s was killed by signal %d"
                         % (step, _show(target), _show(self.path), -status), "command_failed")
        named = _error_line(stderr)
        message = named[2] if named else os.fsdecode(stderr).strip()
        if not message:
            message = ("tokenlock: %s %s: the tokenlock command exited with status %d"
                       % (step, _show(target), status))
        if named:
            return _error_for(named[0], message, named[1])
        # No error line: a command from before --errors=json. Its exit
        # status alone says this much.
        if status == 1:
            return Busy(message, "busy") if once else TimedOut(message, "timed_out")
        if status == 3:
            return LockLost(message, "lock_lost")
        if status == 64:
            return BadArgument(message)
        return Error(message, "command_failed")

    def version(self):
        out = self._run([b"--version"], "version", self.path)
        return os.fsdecode(out).split()[-1]

    def acquire(self, lockdir, wait, lease, once, group, share=_EXCLUSIVE):
        args = [b"acquire", b"--pid", b"%d" % os.getpid()] + _group_args(group)
        if share.shared:
            args += [b"--slots", b"%d" % share.slots] if share.slots else [b"--shared"]
        # The command's own default is to wait for ever; the library's is 10 s.
        args += [b"-n"] if once else [b"-w", _secs(DEFAULT_WAIT if wait is None else wait).encode()]
        args += [b"--lease", _secs(DEFAULT_LEASE if lease is None else lease).encode()]
        args += _legacy_args()
        out = self._run(args + [_arg(lockdir)], "acquire", lockdir, once=once or wait == 0)
        token = os.fsdecode(out).strip()
        if _token_expiry(token) is None:
            raise Error("tokenlock: acquire %s: the tokenlock command printed %r, not a token"
                        % (_show(lockdir), token), "command_failed")
        return {"token": token, "pid": os.getpid(), "lease": lease, "group": group}

    @staticmethod
    def expiry_us(state):
        return _token_expiry(state["token"])

    def holders(self, lockdir, group):
        import json

        out = self._run([b"status", b"--json"] + _group_args(group) + _legacy_args()
                        + [_arg(lockdir)], "holders", lockdir)
        try:
            status = json.loads(out.decode("utf-8", "surrogateescape"))
            if "holders" not in status and status["state"] != "free":
                raise KeyError("holders")
            return [Holder(h["token"], h.get("mode", "exclusive"), h.get("slots", 0),
                           bool(h.get("waiting_writer")), bool(h.get("stale")),
                           h.get("expires_us"))
                    for h in status.get("holders", ())]
        except (ValueError, KeyError, TypeError, AttributeError):
            raise Error("tokenlock: holders %s: the tokenlock command's status --json printed "
                        "%r, not the holders of a lock (a command older than 0.3.0?): install "
                        "the command built with this tokenlock.py"
                        % (_show(lockdir), out[:200]), "command_failed") from None

    def commit_file(self, state, lockdir, path, data, sync):
        if state["pid"] != os.getpid():
            raise self._not_owner("commit", lockdir)
        self._run([b"commit", b"--sync", sync.encode(), b"--allow-empty"]
                  + _group_args(state["group"]) + [_arg(lockdir), state["token"].encode(),
                                                   _arg(path)], "commit", path, input=data)

    def _not_owner(self, step, lockdir):
        return Error("tokenlock: %s %s: this process (pid %d) is a forked child of the one that "
                     "acquired the lock, and never %ss its parent's lock"
                     % (step, _show(lockdir), os.getpid(), step), "not_owner")

    def refresh(self, state, lockdir, lease):
        if state["pid"] != os.getpid():
            raise self._not_owner("refresh", lockdir)
        lease = state["lease"] if lease is None else lease
        out = self._run([b"refresh", b"--lease", _secs(DEFAULT_LEASE if lease is None else lease)
                         .encode()] + _group_args(state["group"])
                        + [_arg(lockdir), state["token"].encode()], "refresh", lockdir)
        state["token"] = os.fsdecode(out).strip()

    def release(self, state, lockdir):
        if state["pid"] != os.getpid():
            raise self._not_owner("release", lockdir)
        token, state["token_held"] = state["token"], False
        self._run([b"release"] + _group_args(state["group"]) + [_arg(lockdir), token.encode()],
                  "release", lockdir)

    def abandon(self, state, lockdir):
        if state.get("token_held", True) and state["pid"] == os.getpid():
            state["token_held"] = False
            try:
                import subprocess

                subprocess.run([self.path, b"release"] + _group_args(state["group"])
                               + [_arg(lockdir), state["token"].encode()],
                               stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
            except Exception:  # noqa: BLE001 - at garbage collection there is no one to tell
                pass

    def write_file(self, path, data, sync):
        self._run([b"write", b"--sync", sync.encode(), b"--allow-empty", _arg(path)], "write",
                  path, input=data)

    def increment(self, path, lockdir, by, wait, lease, sync, group):
        # `incr` takes no lease: it holds its lock only while it counts,
        # under the command's own lease.
        wait = DEFAULT_WAIT if wait is None else wait
        # A wait that rounds to 0 ms is one attempt, as the library counts it.
        once = round(wait * 1000) == 0
        args = [b"incr", b"--by", b"%d" % by, b"--sync", sync.encode()] + _group_args(group)
        args += [b"-n"] if once else [b"-w", _secs(min(wait, _LONGEST_FILE_WAIT)).encode()]
        if lockdir is not None:
            args += [b"--lock", _arg(lockdir)]
        args += _legacy_args()
        try:
            out = self._run(args + [_arg(path)], "increment", path, once=once)
        except DirSyncFailed as e:
            # Counted all the same: the command printed the new value.
            e.value = self._counter_value(e.output, path)
            raise
        return self._counter_value(out, path)

    @staticmethod
    def _counter_value(out, path):
        try:
            return int(out)
        except ValueError:
            raise Error("tokenlock: increment %s: the tokenlock command printed %r, not a "
                        "number" % (_show(path), out), "command_failed") from None

    def _require_commit(self, path):
        """update_file commits through `tokenlock commit`, which a command
        older than this module lacks: asked once, by the exit status of
        `commit --help`, before anything is locked or written."""
        if self._has_commit is None:
            import subprocess

            try:
                p = subprocess.run([self.path, b"commit", b"--help"], stdin=subprocess.DEVNULL,
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                   close_fds=False, env=_command_environment())
            except OSError:
                return  # the run that follows reports the missing command
            self._has_commit = p.returncode == 0
        if not self._has_commit:
            raise BackendUnavailable(
                "tokenlock: update %s: the tokenlock command %s has no 'commit' (it is older "
                "than this module); nothing was written: install the command built with this "
                "tokenlock.py, or use the library backend" % (_show(path), _show(self.path)))

    def update_file(self, path, lockdir, fn, wait, lease, sync, group):
        """Lock, read, call fn, commit fenced through the token, unlock: the
        library's update_file (docs/atomic-writes.md) over a lock held by
        the command, committed by `tokenlock commit`."""
        self._require_commit(path)
        lockdir = path + b".lock" if lockdir is None else lockdir
        state = self.acquire(lockdir, wait, lease, False, group)
        try:
            current = _read_bounded(path, "update")
            new = _data(fn(current), "the update function's result")
            try:
                self._run([b"commit", b"--sync", sync.encode(), b"--allow-empty"]
                          + _group_args(group) + [_arg(lockdir), state["token"].encode(),
                                                  _arg(path)], "update", path, input=new)
            except Error as e:
                if e.code != "not_fenced":
                    raise
                # A token that cannot hold the temporary file (a legacy
                # script's plain-file lockfile, or the lock on another
                # filesystem): the library then commits beside the target,
                # ownership proved by a refresh just before, and so do we.
                self.refresh(state, lockdir, None)
                self.write_file(path, new, sync)
        except DirSyncFailed:
            # Committed: the release below must still happen, and the
            # caller learns that a crash may undo the update.
            self._release_quietly(state, lockdir)
            raise
        except BaseException as e:
            try:
                self.release(state, lockdir)
            except Error as release_error:
                if hasattr(e, "add_note"):
                    e.add_note("while releasing the lock: %s" % release_error)
            raise
        # After the commit a failed release is not reported: the update is
        # in place, and a caller told it failed might apply it twice.
        self._release_quietly(state, lockdir)
        return new

    def _release_quietly(self, state, lockdir):
        try:
            self.release(state, lockdir)
        except Error:
            pass


# ---- choosing the backend -------------------------------------------------------

_here = os.path.dirname(os.path.abspath(__file__))
_backend = None
_unavailable = "tokenlock: no backend was found"


def _library_candidates(library):
    if library is not None:
        return [os.fspath(library)]
    env = os.environ.get("TOKENLOCK_LIBRARY")
    if env:
        return [env]
    candidates = [os.path.join(_here, "libtokenlock_c.so")]
    try:
        import ctypes.util

        found = ctypes.util.find_library("tokenlock_c")
    except Exception:  # noqa: BLE001 - find_library runs tools that may be missing
        found = None
    return candidates + ([found] if found else [])


def _command_candidates(command):
    if command is not None:
        return [os.fspath(command)]
    env = os.environ.get("TOKENLOCK_COMMAND")
    if env:
        return [env]
    candidates = [os.path.join(_here, "tokenlock"), os.path.expanduser("~/bin/tokenlock")]
    import shutil

    found = shutil.which("tokenlock")
    return candidates + ([found] if found else [])


def _load_library(library):
    problems = []
    for path in _library_candidates(library):
        if os.sep in path and not os.path.exists(path):
            problems.append("%s: no such file" % path)
            continue
        try:
            return _Library(path), []
        except OSError as e:
            problems.append(str(e))
    return None, problems


def _find_command(command):
    problems = []
    for path in _command_candidates(command):
        if os.path.isfile(path) and os.access(path, os.X_OK):
            return _Command(os.path.abspath(path)), []
        problems.append("%s: %s" % (path, "not executable" if os.path.exists(path)
                                    else "no such file"))
    return None, problems


def use(backend=None, library=None, command=None):
    """Chooses the backend and returns its name ("library" or "command").

    backend: "library", "command", or None for the library when it loads
    and the command otherwise (TOKENLOCK_BACKEND gives the default).
    library: the path of libtokenlock_c.so (else TOKENLOCK_LIBRARY, beside
    this file, find_library). command: the path of the tokenlock command
    (else TOKENLOCK_COMMAND, beside this file, ~/bin, PATH).

    Raises BackendUnavailable, naming every place looked at and why each
    failed, when the backend asked for (or, for None, either) cannot be
    had; the backend in use then stays as it was. Locks already held keep
    the backend that acquired them.
    """
    global _backend, load_error
    wanted = backend if backend is not None else (os.environ.get("TOKENLOCK_BACKEND") or None)
    if wanted not in (None, "library", "command"):
        raise BadArgument("tokenlock: backend must be 'library' or 'command', not %r" % (wanted,))
    chosen, problems = None, []
    if wanted in (None, "library"):
        chosen, lib_problems = _load_library(library)
        if lib_problems:
            problems.append("libtokenlock_c.so: " + "; ".join(lib_problems))
    if chosen is None and wanted in (None, "command"):
        chosen, cmd_problems = _find_command(command)
        if cmd_problems:
            problems.append("the tokenlock command: " + "; ".join(cmd_problems))
    if chosen is None:
        raise BackendUnavailable(
            "tokenlock: cannot %s: %s; set TOKENLOCK_LIBRARY to libtokenlock_c.so or "
            "TOKENLOCK_COMMAND to the tokenlock command, or put one beside %s"
            % ("load the library" if wanted == "library" else "run the command"
               if wanted == "command" else "find libtokenlock_c.so or the tokenlock command",
               "; ".join(problems), os.path.join(_here, "tokenlock.py")))
    _backend = chosen
    load_error = "; ".join(problems) if problems else None
    _publish()
    return chosen.name


def _publish():
    global backend, library_path, command_path
    backend = _backend.name if _backend else None
    library_path = _backend.path if isinstance(_backend, _Library) else None
    command_path = os.fsdecode(_backend.path) if isinstance(_backend, _Command) else None


def _current():
    if _backend is None:
        raise BackendUnavailable(_unavailable)
    return _backend


def version():
    """The version of the library or command in use, "MAJOR.MINOR.PATCH"."""
    return _current().version()


# ---- the lock -----------------------------------------------------------------


# A wait for ever is made of waits of a year (the command's longest), each
# begun again when it runs out.
_FOREVER_STEP = _LONGEST_FILE_WAIT


def _wait(value):
    """A wait in seconds, or None for a wait without end (None, -1, inf)."""
    if value is None or (isinstance(value, (int, float)) and not isinstance(value, bool)
                         and value in (-1, float("inf"))):
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
        raise BadArgument("tokenlock: wait must be 0 or more seconds, or None or -1 to wait "
                          "for ever, not %r" % (value,))
    return _seconds(value, "wait", True)


def _file_wait(value):
    """The wait of update_file() and increment(): None for the default
    (10 s, the library's), -1 or inf for a year, the command's longest."""
    if value is None:
        return None
    value = _wait(value)
    return _LONGEST_FILE_WAIT if value is None else value


class _OnClassOrLock:
    """A method that does one thing called on the class and another called
    on an instance: Lock.acquire(lockdir) takes a new lock,
    held.acquire() takes the same one again."""

    def __init__(self, on_class, on_lock):
        self._on_class, self._on_lock = on_class, on_lock
        self.__doc__ = on_class.__doc__

    def __get__(self, obj, cls=None):
        if obj is None:
            return types.MethodType(self._on_class, cls)
        return types.MethodType(self._on_lock, obj)


_AS_GIVEN = object()


class Lock:
    """A lock on a lock directory, re-entrant in its thread.

    Lock.acquire(), Lock.try_acquire() and lock() give a held Lock;
    Lock(lockdir, ...) makes one not yet held, taken by acquire() or a
    with-statement. The thread holding it may acquire() it again: each
    acquire() is matched by a release(), and the token is given back at the
    last. Another thread that acquires the same Lock waits (up to its wait)
    until then, and then takes the lock itself; other Locks, threads and
    processes wait on the token as always.

    In a with-statement the lease is kept alive: one daemon thread of the
    module, shared by every such block, refreshes it at a third of the
    lease until the block ends, as the C++ library's keep_alive does, so a holder that is alive is never taken
    over however long it works; only one that stops (killed, suspended,
    its host gone) loses the lock when the lease ends. If the lock was
    taken over all the same (broken by hand, the clock stepped), the block
    ends with LockLost. keep_alive=False leaves the lease to refresh().
    Outside a with-statement, refresh() is yours to call.

    A Lock still held when it is garbage-collected (or at interpreter exit)
    is released then, with a ResourceWarning; never by a forked child.
    """

    def __init__(self, lockdir, wait=DEFAULT_WAIT, lease=DEFAULT_LEASE, group=None,
                 keep_alive=True, shared=False, slots=None):
        """A Lock on `lockdir`, not yet held; wait, lease, group, shared and
        slots are those of its acquire() (see Lock.acquire), keep_alive that
        of its with-statements."""
        self._lockdir = _path(lockdir, "lockdir")
        self._share = _share(shared, slots)
        self._wait = _wait(wait)
        self._lease = _seconds(lease, "lease", False)
        self._group = group
        self._keep_alive = bool(keep_alive)
        self._backend, self._state = None, None
        self._count, self._owner, self._taking = 0, None, False
        # A Lock given held by Lock.acquire() is not counted again by the
        # with-statement that follows (`with tokenlock.lock(d) as held`).
        self._adopt = False
        self._cond = threading.Condition(threading.Lock())
        # Serialises the keep-alive's refresh with release on one token.
        self._io = threading.Lock()
        # _kept: in the keeper's care (under _io); _lost: what it found.
        self._kept, self._lost = False, None

    def _acquire_new(cls, lockdir, wait=DEFAULT_WAIT, lease=DEFAULT_LEASE, group=None,
                     keep_alive=True, shared=False, slots=None):
        """Acquires the lock directory `lockdir` (created if missing; its parent
        must exist), waiting up to `wait` seconds (0: one attempt; None, -1
        or inf: for ever) for a holder to let go. The lease of `lease`
        seconds is how long the lock stays ours without refresh() once we
        stall (in a with-statement it is kept alive: see Lock); a holder
        that dies is detected on the same host at once.

        Raises Busy ("busy", with wait=0) or TimedOut ("timed_out") when
        another holds it, both TimeoutError, otherwise an Error naming the
        directory and the cause.

        group: the one group the lock is shared with, by name or gid
        (default TOKENLOCK_GROUP); see the module's "Sharing with a group".

        shared=True takes the lock shared: held together with other shared
        holders, never beside an exclusive one, and not while an exclusive
        holder waits (writer preference). slots=N (1 to 999999, implies
        shared) takes one of N slots of a semaphore: at most N holders at
        once; every user of the lock directory must give the same N. Each
        shared holder has its own lease, kept alive and taken over as an
        exclusive holder's is. A shared hold has no workspace (`path` is
        None) and no fence: commit_file() refuses it.

        Called on a Lock (held.acquire(wait=...)), acquires that Lock again:
        counted in the thread holding it, else waiting as above.
        """
        held = cls(lockdir, wait, lease, group, keep_alive, shared, slots)
        held._acquire_again()
        held._adopt = True
        return held

    def _acquire_again(self, wait=_AS_GIVEN):
        wait = self._wait if wait is _AS_GIVEN else _wait(wait)
        deadline = None if wait is None else time.monotonic() + wait
        if not self._count_or_wait_turn(wait, deadline):
            return self
        try:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            self._take_token(left, once=wait == 0)
        except BaseException:
            with self._cond:
                self._taking = False
                self._cond.notify_all()
            raise
        with self._cond:
            self._taking, self._count, self._owner = False, 1, threading.get_ident()
        return self

    acquire = _OnClassOrLock(_acquire_new, _acquire_again)

    def _count_or_wait_turn(self, wait, deadline):
        """Counts a nested acquire (False), or waits for another thread's
        hold of this Lock to end and marks the token as being taken (True)."""
        me = threading.get_ident()
        with self._cond:
            self._adopt = False
            if self._count and self._owner == me:
                self._count += 1
                return False
            while self._count or self._taking:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    msg = ("tokenlock: acquire %s: held by another thread of this process "
                           "through the same Lock%s" % (self.lockdir, "" if wait == 0 else
                                                        " for %gs, the wait" % wait))
                    raise Busy(msg, "busy") if wait == 0 else TimedOut(msg, "timed_out")
                self._cond.wait(left)
            self._taking = True
            return True

    def _take_token(self, wait, once):
        b = _current()
        g = _group(self._group)
        while True:
            try:
                state = b.acquire(self._lockdir, _FOREVER_STEP if wait is None else wait,
                                  self._lease, once, g, self._share)
                break
            except TimedOut:
                if wait is not None:
                    raise
        self._backend, self._state, self._lost = b, state, None
        _live[id(state)] = (b, state, self._lockdir)

    @classmethod
    def try_acquire(cls, lockdir, lease=DEFAULT_LEASE, group=None, keep_alive=True,
                    shared=False, slots=None):
        """One attempt at `lockdir`: a held Lock, or None when another holds
        it. Other failures raise as in acquire(); group, shared and slots as
        there."""
        try:
            return cls.acquire(lockdir, 0, lease, group, keep_alive, shared, slots)
        except Busy:
            return None

    @property
    def lockdir(self):
        """The lock directory, as given (as a str)."""
        return os.fsdecode(self._lockdir)

    @property
    def token(self):
        """The token's name in the lock directory:
        "lockfile.<expiry>.<host>-<hash8>.<pid>.<start>.<nonce>"; for a
        shared hold, the share's id (the lone share's token name, or its
        entry's, "s.<expiry>.<owner>"), which `tokenlock release` takes. It
        changes with every refresh(). None before the first acquire."""
        return self._state["token"] if self._state else None

    @property
    def path(self):
        """The held token's directory, the holder's private workspace (None
        before the first acquire, and for a shared hold, which has none)."""
        if self._state is None or self._share.shared:
            return None
        return os.path.join(self.lockdir, self.token)

    @property
    def mode(self):
        """How the lock is taken: "exclusive" or "shared" (also a semaphore's
        slot)."""
        return "shared" if self._share.shared else "exclusive"

    @property
    def slots(self):
        """The semaphore's size (slots=N), or None."""
        return self._share.slots or None

    @property
    def expiry_us(self):
        """When the lease ends, in microseconds since the Unix epoch (None
        before the first acquire)."""
        if self._state is None:
            return None
        if self._backend.name == "library" and self._state.get("handle"):
            return self._backend.expiry_us(self._state)
        return _token_expiry(self._state["token"])

    @property
    def expires(self):
        """When the lease ends, as an aware datetime in UTC (None before the
        first acquire)."""
        us = self.expiry_us
        return None if us is None else (datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)
                                        + datetime.timedelta(microseconds=us))

    @property
    def held(self):
        """True while acquired more often than released."""
        return self._count > 0

    @property
    def backend(self):
        """The backend that acquired this lock: "library" or "command"."""
        return self._backend.name if self._backend else None

    def refresh(self, lease=None):
        """Starts a new lease of `lease` seconds (default: the acquire's) from
        now. Raises LockLost when the token was taken over; the lock then
        still has to be released, which fails the same way."""
        if not self._count:
            raise Error("tokenlock: refresh %s: this lock is not held (released already, "
                        "or never acquired)" % self.lockdir, "not_owner")
        lease = self._lease if lease is None else _seconds(lease, "lease", False)
        with self._io:
            self._backend.refresh(self._state, self._lockdir, lease)

    def commit_file(self, path, data, sync="file_and_dir"):
        """Replaces `path` with `data` (bytes, or str as UTF-8) through the
        held token, fenced: if the lock was taken over meanwhile, nothing is
        written and LockLost is raised (docs/atomic-writes.md). The lock
        stays held. A shared hold has no fence: BadArgument, nothing
        written; take the lock exclusively to write. Error("not_fenced") when
        `path` is on another filesystem than the lock directory."""
        p, d, s = _path(path), _data(data, "data"), _sync(sync)
        if not self._count:
            raise Error("tokenlock: commit %s: the lock %s is not held (released already, or "
                        "never acquired); nothing was written" % (_show(p), self.lockdir),
                        "not_owner")
        with self._io:
            self._backend.commit_file(self._state, self._lockdir, p, d, s)

    def release(self):
        """Counts one release; the last one frees the lock. That one raises
        LockLost when the token had been taken over (what was done under it
        may have overlapped with the new holder), and Error("not_owner")
        when called in a forked child, which leaves its parent's lock alone;
        either way this Lock is then no longer held. Error("not_owner") too
        when the Lock is not held."""
        with self._cond:
            if not self._count:
                raise Error("tokenlock: release %s: this lock is not held (released already, "
                            "or never acquired)" % self.lockdir, "not_owner")
            self._adopt = False
            if self._count > 1:
                self._count -= 1
                return
        state = self._state
        try:
            _live.pop(id(state), None)
            if state.get("pid") != os.getpid():
                # A forked child: nothing keeps the lease alive here, and
                # the parent's token is refused without being touched.
                return self._backend.release(state, self._lockdir)
            with self._io:
                # No refresh after this; one under way has ended (it holds _io).
                kept, self._kept = self._kept, False
                if kept:
                    _keeper.drop(self)
                self._backend.release(state, self._lockdir)
            if self._lost is not None:
                raise self._lost
        finally:
            with self._cond:
                self._count, self._owner = 0, None
                self._cond.notify_all()

    # ---- the with-statement and its keep-alive ---------------------------------

    def __enter__(self):
        with self._cond:
            adopt = self._adopt and self._count and self._owner == threading.get_ident()
            self._adopt = False
        if not adopt:
            self._acquire_again()
        self._keep_lease()
        return self

    def _keep_lease(self):
        """Hands the lease to the keeper, once per hold (keep_alive=True)."""
        if self._keep_alive and not self._kept:
            with self._io:
                self._kept = True
            _keeper.keep(self)

    def __exit__(self, exc_type, exc, tb):
        if exc is None:
            self.release()
            return False
        # The body's exception goes on; a failed release is added to it
        # rather than hiding it.
        try:
            self.release()
        except Error as e:
            if hasattr(exc, "add_note"):
                exc.add_note("while releasing the lock: %s" % e)
        return False

    def _refresh_kept(self):
        """The keeper's refresh: False when the lease is no longer kept."""
        with self._io:
            if not self._kept:
                return False
            try:
                self._backend.refresh(self._state, self._lockdir, self._lease)
            except LockLost as e:
                self._lost = e  # raised by the release that ends the block
                self._kept = False
                return False
            except Error:
                # A passing failure (EIO, a full table): the next try may
                # work, and the lease has two more thirds to run.
                pass
            return True

    def __del__(self):
        # __del__ rather than weakref.finalize, which costs as much as a
        # tenth of an uncontended acquire and release. A Lock kept alive is
        # referenced by the keeper until released, so never found here.
        if getattr(self, "_count", 0):
            self._count = 0
            try:
                if _live.pop(id(self._state), None) is not None:
                    _abandon(self._backend, self._state, self._lockdir)
            except Exception:  # noqa: BLE001 - late in interpreter exit, module globals may be gone
                pass

    def __repr__(self):
        return "<tokenlock.Lock %r %s%s %s>" % (
            self.lockdir, "" if not self._share.shared else "slot/%d " % self._share.slots
            if self._share.slots else "shared ", self.token, "held" if self._count else "released")


class _Keeper:
    """One daemon thread that refreshes the lease of every Lock held in a
    with-block, each at a third of its lease. One thread for all, started
    at the first block and ended a second after the last, so that a short
    block costs a dictionary entry rather than a thread's start and join."""

    LINGER = 1.0

    def __init__(self):
        self._cond = threading.Condition(threading.Lock())
        self._kept = {}      # id(lock) -> (lock, generation)
        self._due = []       # heap of (when, generation, id(lock)); stale ones skipped
        self._generation = 0
        self._thread = None

    def keep(self, lock):
        with self._cond:
            self._generation += 1
            self._kept[id(lock)] = (lock, self._generation)
            self._schedule(lock, self._generation)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, daemon=True,
                                                name="tokenlock-keep-alive")
                self._thread.start()

    def _schedule(self, lock, generation):
        heapq.heappush(self._due, (time.monotonic() + lock._lease / 3, generation, id(lock)))
        # Released locks leave stale entries: rebuilt when they outnumber the rest.
        if len(self._due) > 64 + 2 * len(self._kept):
            live = {(g, k) for k, (_, g) in self._kept.items()}
            self._due = [e for e in self._due if (e[1], e[2]) in live]
            heapq.heapify(self._due)
        self._cond.notify()

    def drop(self, lock):
        with self._cond:
            self._kept.pop(id(lock), None)

    def held(self):
        """The Locks whose leases are kept alive now."""
        with self._cond:
            return [lock for lock, _ in self._kept.values()]

    def _next(self):
        """The next (lock, generation) due, waited for; None to end."""
        with self._cond:
            while True:
                while self._due and self._kept.get(self._due[0][2], (None, -1))[1] != self._due[0][1]:
                    heapq.heappop(self._due)
                if not self._due:
                    if not self._cond.wait(self.LINGER) and not self._due:
                        self._thread = None
                        return None
                    continue
                when, generation, key = self._due[0]
                if when <= time.monotonic():
                    heapq.heappop(self._due)
                    return self._kept[key][0], generation
                self._cond.wait(when - time.monotonic())

    def _run(self):
        while True:
            due = self._next()
            if due is None:
                return
            lock, generation = due
            kept = lock._refresh_kept()
            with self._cond:
                if self._kept.get(id(lock), (None, -1))[1] == generation:
                    if kept:
                        self._schedule(lock, generation)
                    else:
                        del self._kept[id(lock)]

    def forget(self):
        """In a forked child: no thread, and the parent's locks are its own."""
        self.__init__()

    def stop_all(self):
        """At exit: no refresh may use a token being given back."""
        for lock in self.held():
            with lock._io:
                lock._kept = False
        with self._cond:
            self._kept.clear()


_keeper = _Keeper()
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_keeper.forget)


# The locks held, by id of their state, so that those still held at exit are
# released then (as a lock found at garbage collection is).
_live = {}


def _abandon(backend_obj, state, lockdir):
    if state.get("pid") == os.getpid():
        try:
            warnings.warn("tokenlock: the lock %s was still held when its Lock was "
                          "garbage-collected or the interpreter exited; it was released then"
                          % _show(lockdir), ResourceWarning, stacklevel=3)
        except Exception:  # noqa: BLE001 - at interpreter exit warnings may be gone
            pass
    # In a forked child both backends leave the parent's token alone: the C
    # library refuses (and frees the child's copy), the command is not run.
    backend_obj.abandon(state, lockdir)


@atexit.register
def _release_at_exit():
    _keeper.stop_all()
    while _live:
        _, (backend_obj, state, lockdir) = _live.popitem()
        _abandon(backend_obj, state, lockdir)


def lock(lockdir, wait=DEFAULT_WAIT, lease=DEFAULT_LEASE, group=None, keep_alive=True,
         shared=False, slots=None):
    """Acquires `lockdir` (as Lock.acquire) for a with-statement:

        with tokenlock.lock("/srv/app/data/db.lock", wait=10.0, lease=60.0) as held:
            ...   # held.token, held.expires

    The lease is kept alive while the block runs (keep_alive=False: by
    held.refresh() alone), and the lock is released when the block ends,
    also by an exception, which goes on. A LockLost from the release after
    a normal end is raised.
    """
    return Lock.acquire(lockdir, wait=wait, lease=lease, group=group, keep_alive=keep_alive,
                        shared=shared, slots=slots)


# ---- shared locks and semaphores ----------------------------------------------


class Holder:
    """One holder of a lock, as holders() lists it.

    id: the token's name, a share entry's ("s.<expiry>.<owner>") or a lone
    share's; mode: "exclusive" or "shared"; slots: the semaphore's size, 0
    when none; waiting_writer: True for an exclusive acquirer's mark (it
    holds nothing, and bars new shared holders until it gets in); stale:
    its lease ended or its process is gone, so the next acquirer takes it
    over; expiry_us: when its lease ends, in microseconds since the epoch
    (also `expires`, an aware datetime in UTC).
    """

    __slots__ = ("id", "mode", "slots", "waiting_writer", "stale", "expiry_us")

    def __init__(self, id, mode, slots, waiting_writer, stale, expiry_us):
        self.id, self.mode, self.slots = id, mode, slots
        self.waiting_writer, self.stale, self.expiry_us = waiting_writer, stale, expiry_us

    @property
    def expires(self):
        if self.expiry_us is None:
            return None
        return (datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)
                + datetime.timedelta(microseconds=self.expiry_us))

    def __eq__(self, other):
        if not isinstance(other, Holder):
            return NotImplemented
        return all(getattr(self, f) == getattr(other, f) for f in self.__slots__)

    __hash__ = None

    def __repr__(self):
        return "<tokenlock.Holder %s %s%s%s%s>" % (
            self.mode, "slot/%d " % self.slots if self.slots else "",
            "waiting " if self.waiting_writer else "", "stale " if self.stale else "", self.id)


def holders(lockdir, group=None):
    """Who holds the lock directory `lockdir`: a list of Holder, empty when
    it is free; an exclusive acquirer's waiting mark is listed too
    (waiting_writer). A snapshot: holders come and go meanwhile. group as
    in Lock.acquire()."""
    return _current().holders(_path(lockdir, "lockdir"), _group(group))


class _Held:
    """What acquire_read(), acquire_write() and Semaphore.acquire() return:
    the hold, ended by a with-block around it (whose lease is kept alive)."""

    __slots__ = ("_owner", "_lock")

    def __init__(self, owner, lock):
        self._owner, self._lock = owner, lock

    def __enter__(self):
        self._lock._keep_lease()
        return self._owner

    def __exit__(self, exc_type, exc, tb):
        return self._lock.__exit__(exc_type, exc, tb)


class _PerThread:
    """The Locks of an object used by many threads: each thread gets its
    own, so that threads hold (and wait) as separate holders do, and each
    releases only what it acquired."""

    def __init__(self, make):
        self._make = make
        self._local = threading.local()
        self.mine()  # arguments are checked now, not at the first acquire

    def mine(self):
        locks = getattr(self._local, "locks", None)
        if locks is None:
            locks = self._local.locks = self._make()
        return locks


class ReadWriteLock:
    """A read/write lock on a lock directory, in the shape of py-filelock's
    ReadWriteLock: readers (acquire_read, read_lock) hold together, a
    writer (acquire_write, write_lock) holds alone, and a writer that
    waits bars new readers, so a stream of readers cannot starve it.

        rw = tokenlock.ReadWriteLock("/srv/app/data/page.lock", wait=10.0)
        with rw.read_lock():
            page = open("/srv/app/data/page.html").read()
        with rw.write_lock():
            tokenlock.write_file("/srv/app/data/page.html", new_page)

    Each thread using one ReadWriteLock is a holder of its own (threads
    read together, and wait for a writer, as processes do), re-entrant
    within one mode as Lock is: each acquire is matched by a release(), and
    the last frees its hold; a thread releases only what it acquired.
    Asking for the other mode while the thread holds one raises
    ModeConflict (a RuntimeError, as py-filelock's) and changes nothing: a
    read hold is never upgraded nor a write hold downgraded in place, since
    two readers upgrading at once would wait for each other for ever;
    release, then acquire the other mode.

    wait: seconds each acquire waits by default (0: one attempt; None, -1
    or inf: for ever), then TimedOut (Busy for 0); lease and group as in
    Lock.acquire(). In a with-block the lease is kept alive (keep_alive).
    The lock directory is an ordinary tokenlock lock directory: an
    exclusive Lock on it is a writer, Lock(..., shared=True) a reader.
    """

    def __init__(self, lockdir, wait=DEFAULT_WAIT, lease=DEFAULT_LEASE, group=None,
                 keep_alive=True):
        self._locks = _PerThread(lambda: (Lock(lockdir, wait, lease, group, keep_alive,
                                               shared=True),
                                          Lock(lockdir, wait, lease, group, keep_alive)))

    def _acquire(self, mode, wait):
        read, write = self._locks.mine()
        lock, other = (read, write) if mode == "read" else (write, read)
        if other._count:
            raise ModeConflict(
                "tokenlock: acquire %s for %s: this thread holds it for %s through this "
                "ReadWriteLock, and a hold is not %s in place; nothing was changed: release() "
                "it first, then acquire_%s()"
                % (lock.lockdir, "writing" if mode == "write" else "reading",
                   "reading" if mode == "write" else "writing",
                   "upgraded" if mode == "write" else "downgraded", mode))
        lock._acquire_again(wait)
        return _Held(self, lock)

    def acquire_read(self, wait=_AS_GIVEN):
        """Takes the lock shared, waiting up to `wait` seconds (default the
        object's); returns a hold a with-statement can end. ModeConflict
        when this thread holds it for writing."""
        return self._acquire("read", wait)

    def acquire_write(self, wait=_AS_GIVEN):
        """Takes the lock exclusively, waiting up to `wait` seconds (default
        the object's) for readers and writers to leave; returns a hold a
        with-statement can end. ModeConflict when this thread holds it for
        reading."""
        return self._acquire("write", wait)

    def release(self):
        """Counts one release of this thread's hold; the last frees it.
        Error("not_owner") when this thread holds none; LockLost as
        Lock.release()."""
        for lock in self._locks.mine():
            if lock._count:
                return lock.release()
        raise Error("tokenlock: release %s: this thread does not hold this ReadWriteLock "
                    "(released already, never acquired, or acquired by another thread)"
                    % self.lockdir, "not_owner")

    def read_lock(self, wait=_AS_GIVEN):
        """A with-statement's shared hold: `with rw.read_lock(wait=5):`."""
        return self._acquire("read", wait)

    def write_lock(self, wait=_AS_GIVEN):
        """A with-statement's exclusive hold: `with rw.write_lock(wait=5):`."""
        return self._acquire("write", wait)

    @property
    def lockdir(self):
        """The lock directory, as given (as a str)."""
        return self._locks.mine()[0].lockdir

    @property
    def mode(self):
        """This thread's hold: "read", "write", or None."""
        read, write = self._locks.mine()
        return "read" if read._count else "write" if write._count else None

    @property
    def held(self):
        """True while this thread holds it (in either mode)."""
        return self.mode is not None

    def __repr__(self):
        return "<tokenlock.ReadWriteLock %r %s>" % (self.lockdir, self.mode or "released")


class Semaphore:
    """A counting semaphore on a lock directory: at most `slots` holders at
    once, across threads, processes and hosts (1 to 999999; every user of
    the lock directory must give the same number).

        jobs = tokenlock.Semaphore("/srv/app/data/ffmpeg.lock", slots=3, wait=None)
        with jobs:
            subprocess.run(["ffmpeg", ...])

    Each thread using one Semaphore takes a slot of its own, re-entrant in
    that thread as Lock is (a nested acquire counts, it takes no second
    slot; two slots in one thread take two Semaphores). Each slot has its
    own lease, kept alive in a with-block and taken over when its holder
    dies or stalls past it. wait, lease and group as in Lock.acquire(); a
    writer (an exclusive Lock on the directory) waits for every slot to be
    given back.
    """

    def __init__(self, lockdir, slots, wait=DEFAULT_WAIT, lease=DEFAULT_LEASE, group=None,
                 keep_alive=True):
        self._locks = _PerThread(lambda: Lock(lockdir, wait, lease, group, keep_alive,
                                              slots=slots))

    def acquire(self, wait=_AS_GIVEN):
        """Takes a slot for this thread, waiting up to `wait` seconds
        (default the object's) for one to be given back; returns a hold a
        with-statement can end. TimedOut (Busy with 0) when none was."""
        lock = self._locks.mine()
        lock._acquire_again(wait)
        return _Held(self, lock)

    def release(self):
        """Counts one release of this thread's slot; the last gives it back."""
        self._locks.mine().release()

    def __enter__(self):
        self._locks.mine().__enter__()
        return self

    def __exit__(self, exc_type, exc, tb):
        return self._locks.mine().__exit__(exc_type, exc, tb)

    @property
    def slots(self):
        """The semaphore's size."""
        return self._locks.mine().slots

    @property
    def lockdir(self):
        """The lock directory, as given (as a str)."""
        return self._locks.mine().lockdir

    @property
    def held(self):
        """True while this thread holds a slot."""
        return self._locks.mine().held

    @property
    def token(self):
        """This thread's slot's id while held (see Lock.token), else None."""
        lock = self._locks.mine()
        return lock.token if lock.held else None

    def __repr__(self):
        return "<tokenlock.Semaphore %r slots=%d %s>" % (self.lockdir, self.slots,
                                                         "held" if self.held else "released")


# ---- files --------------------------------------------------------------------


def write_file(path, data, sync="file_and_dir"):
    """Replaces `path` with `data` (bytes, or str written as UTF-8)
    atomically: readers see the old or the new contents, never a mixture.
    On failure the file is untouched and no temporary file is left.

    sync: "none" (rename only), "file" (flush the file first) or
    "file_and_dir" (also flush the directory after: the rename survives a
    crash). DirSyncFailed means the new contents are in place but a crash
    may bring the old ones back.
    """
    p, d, s = _path(path), _data(data, "data"), _sync(sync)
    _current().write_file(p, d, s)


def update_file(path, fn, lock=None, wait=None, lease=None, sync="file_and_dir", group=None):
    """Read-modify-write of `path` under a lock: acquires `lock` (a lock
    directory; default path + ".lock"), reads the file, calls
    fn(current) with its contents as bytes (None when it does not exist),
    writes what fn returns (bytes, or str as UTF-8) atomically, releases.
    Returns the bytes written.

    The commit is fenced through the held token: if the lock was taken over
    meanwhile (this process stalled past its lease), nothing is written and
    LockLost is raised. If fn raises, nothing is written, the lock is
    released and the exception reaches the caller unchanged. fn runs with
    the lock held: keep it short, or give a `lease` (seconds) that covers
    it. wait: seconds to wait for the lock (default 10; -1 or inf: a
    year, which is for ever in practice). group: the one
    group the lock is shared with (default TOKENLOCK_GROUP), as in
    Lock.acquire().
    """
    p = _path(path)
    ld = None if lock is None else _path(lock, "lock")
    wait = _file_wait(wait)
    lease = None if lease is None else _seconds(lease, "lease", False)
    if not callable(fn):
        raise TypeError("tokenlock: fn must be callable, not %s" % type(fn).__name__)
    return _current().update_file(p, ld, fn, wait, lease, _sync(sync), _group(group))


def increment(path, by=1, lock=None, wait=None, lease=None, sync="file_and_dir", group=None):
    """Adds `by` to the decimal counter in `path` (a missing file counts as 0)
    under the lock `lock` (default path + ".lock") and returns the new
    value. The file holds one unsigned decimal and a newline, as
    `tokenlock incr` and counter.cgi keep it; anything else raises
    CorruptData and is left as it is. by=0 reads the counter under the
    lock.

    wait: seconds to wait for a busy lock (default 10; 0: one attempt; -1
    or inf: a year): then TimedOut, or Busy with wait 0, with nothing
    changed.
    lease: seconds of the lease while counting, with the library backend;
    the command backend runs one `tokenlock incr -w SECS` (-n for 0),
    which holds its lock only while it counts, under its own lease, and
    waits at most a year (the command's limit) for a longer wait.
    DirSyncFailed: the new value is committed, only its durability is in
    doubt; its `value` is the new value. group: the one group the lock is
    shared with (default TOKENLOCK_GROUP), as in Lock.acquire().
    """
    p = _path(path)
    ld = None if lock is None else _path(lock, "lock")
    wait = _file_wait(wait)
    lease = None if lease is None else _seconds(lease, "lease", False)
    return _current().increment(p, ld, _by(by), wait, lease, _sync(sync), _group(group))


try:
    use()
except Error as _e:
    # Importing never fails: the first call says what is missing.
    _unavailable = load_error = str(_e)
