#!/usr/bin/env python3
"""Prints a TCP port on 127.0.0.1 for a server a test or bench starts, from
the counter that the C++ tests share (tests/support/ports.hpp has the why):
below the kernel's range for outgoing connections, and never the port
another test process of this user was just given.

    reserve_port.py [COUNT]     prints COUNT ports (default 1), one per line
"""
import fcntl
import os
import socket
import sys

FIRST = 20000


def range_end():
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            low = int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768
    return (low if low >= FIRST + 2000 else 32768) - 1000


def bindable(port):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        s.bind(("127.0.0.1", port))
        return True
    except OSError:
        return False
    finally:
        s.close()


def reserve(fd, end):
    os.lseek(fd, 0, os.SEEK_SET)
    text = os.read(fd, 16).decode(errors="replace").strip()
    port = int(text) if text.isdigit() else 0
    if not FIRST <= port < end:
        port = FIRST + os.getpid() % (end - FIRST)
    for _ in range(end - FIRST):
        candidate, port = port, (port + 1 if port + 1 < end else FIRST)
        if bindable(candidate):
            os.ftruncate(fd, 0)
            os.pwrite(fd, b"%d\n" % port, 0)
            return candidate
    raise SystemExit("no free TCP port on 127.0.0.1 in [%d, %d)" % (FIRST, end))


def main():
    count = int(sys.argv[1]) if len(sys.argv) > 1 else 1
    path = "/tmp/tokenlock-test-ports.%d" % os.getuid()
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)
    end = range_end()
    print("\n".join(str(reserve(fd, end)) for _ in range(count)))
    os.close(fd)


if __name__ == "__main__":
    main()
