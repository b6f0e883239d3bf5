#!/usr/bin/env python3
"""Holds every ctest test of a build tree to the labelling rule of
tests/CMakeLists.txt: exactly one tier label, and otherwise only labels
that the rule names (a misspelt label would leave a test out of the runs
that select by label).

    tiers_check.py CTEST BUILD_DIR
"""
import json
import subprocess
import sys

TIERS = {"unit", "integration", "e2e", "fuzz", "model", "bench"}
OTHERS = {"redis", "etcd", "apache", "lighttpd", "php-fpm", "browser", "netfs", "security",
          "bindings", "perl", "php", "python", "threads", "conformance", "torture", "weekly"}


def labels_of(test):
    for prop in test.get("properties", []):
        if prop.get("name") == "LABELS":
            return prop.get("value", [])
    return []


def main():
    ctest, build = sys.argv[1], sys.argv[2]
    listing = subprocess.run([ctest, "--show-only=json-v1"], cwd=build, check=True,
                             capture_output=True, text=True).stdout
    tests = json.loads(listing)["tests"]
    if len(tests) < 10:
        print("only %d tests listed in %s: the check would prove nothing" % (len(tests), build))
        return 1
    faults = []
    for t in tests:
        labels = labels_of(t)
        tiers = [x for x in labels if x in TIERS]
        unknown = [x for x in labels if x not in TIERS | OTHERS]
        if len(tiers) != 1:
            faults.append("%s: %d tier labels (%s); it needs one of %s"
                          % (t["name"], len(tiers), ", ".join(labels) or "no labels",
                             ", ".join(sorted(TIERS))))
        if unknown:
            faults.append("%s: unknown labels %s (tests/CMakeLists.txt lists the labels)"
                          % (t["name"], ", ".join(unknown)))
    for f in faults:
        print(f)
    counts = {}
    for t in tests:
        for x in labels_of(t):
            if x in TIERS:
                counts[x] = counts.get(x, 0) + 1
    print("%d tests: %s" % (len(tests), ", ".join("%s %d" % kv for kv in sorted(counts.items()))))
    return 1 if faults else 0


if __name__ == "__main__":
    sys.exit(main())
