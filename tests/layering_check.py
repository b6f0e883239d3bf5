#!/usr/bin/env python3
"""Holds lib/src to its layering (docs/api.md, Source layout): each folder,
and each file at the top of lib/src, may include only what stands below it
in LAYERS, so that no two folders include each other; and at most
TOP_FILES_MAX source files stand at the top of lib/src.

    layering_check.py SOURCE_DIR

An include is read as `#include "X"`: "tokenlock/..." is a public header
(always allowed), "F/..." is folder F of lib/src, and a bare name is a file
at the top of lib/src. Fails, naming the file, the line and both places,
for an include that runs up or sideways, and for a folder or top-level
file that LAYERS does not place.
"""
import os
import re
import sys

# Lowest first. A place may include its own files and those of the
# places on lower lines; places on one line do not include each other.
LAYERS = [
    ["core/"],                                  # errors, messages, pure helpers
    ["posix/", "net/", "c_api/"],               # the OS seam; sockets and URLs; the C API's own
    ["cleanup_registry.hpp", "grant_handle.hpp", "lock_grant.hpp"],  # shared by several topics
    ["wait/"],                                  # the parts of a wait: no lock directory in them
    ["lockdir/"],                               # the rename-token lock, its trust rule and its wait loop
    ["doctor/", "files/"],                      # the doctor; atomic writes, updates, fences
    ["open/"],                                  # lock specs and open_lock
    ["redis/", "etcd/"],                        # the lock servers' backends
    ["lock.cpp", "keep_alive.cpp", "signal_cleanup.cpp"],  # over every backend
    ["with_os.hpp"],                            # the tests' way in, over everything
]
TOP_FILES_MAX = 8
SOURCE_ENDINGS = (".cpp", ".hpp", ".c", ".h")
INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"')


def place_of(rel):
    """The place of a path relative to lib/src: "folder/" or a top file."""
    return rel.split("/", 1)[0] + "/" if "/" in rel else rel


def main():
    src = os.path.join(sys.argv[1], "lib", "src")
    rank = {p: i for i, line in enumerate(LAYERS) for p in line}
    files = []
    for root, _, names in os.walk(src):
        for n in names:
            if n.endswith(SOURCE_ENDINGS):
                files.append(os.path.relpath(os.path.join(root, n), src))
    if len(files) < 20:
        print("only %d source files under %s: the check would prove nothing" % (len(files), src))
        return 1
    faults = []
    top = sorted(f for f in files if "/" not in f)
    if len(top) > TOP_FILES_MAX:
        faults.append("%d source files at the top of lib/src (at most %d): %s; move a topic "
                      "into a folder" % (len(top), TOP_FILES_MAX, ", ".join(top)))
    edges = set()
    for f in sorted(files):
        here = place_of(f)
        if here not in rank:
            faults.append("lib/src/%s: %s is in no layer of %s; add it where it belongs"
                          % (f, here, os.path.basename(__file__)))
            continue
        with open(os.path.join(src, f), encoding="utf-8", errors="replace") as text:
            for number, line in enumerate(text, 1):
                m = INCLUDE.match(line)
                if not m or m.group(1).startswith("tokenlock/"):
                    continue
                there = place_of(m.group(1))
                if there == here:
                    continue
                edges.add((here, there))
                if there not in rank:
                    faults.append("lib/src/%s:%d includes %s: %s is in no layer"
                                  % (f, number, m.group(1), there))
                elif rank[there] >= rank[here]:
                    faults.append("lib/src/%s:%d includes %s: %s may not include %s (%s); move "
                                  "the piece it needs down, or behind an interface"
                                  % (f, number, m.group(1), here, there,
                                     "same layer" if rank[there] == rank[here] else "a layer above"))
    for f in faults:
        print(f)
    print("%d files, %d places, %d include relations between places, %d at the top; %s"
          % (len(files), len({place_of(f) for f in files}), len(edges), len(top),
             "faults: %d" % len(faults) if faults else "every include runs down"))
    return 1 if faults else 0


if __name__ == "__main__":
    sys.exit(main())
