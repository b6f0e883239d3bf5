#!/usr/bin/env bash
# tokenlock attacked by a hostile local user (docs/security.md), with two
# real accounts:
#   attacks.sh TOKENLOCK COUNTER_CGI RACER
# RACER is tests/security/racer.c built. Each attack prints one line,
# "attack N: refused (...)" or "attack N: SUCCEEDED (...)", and the suite
# exits 1 when any succeeded; the group-shared set-up that the threat model
# keeps working prints "setup: ..." lines the same way.
#
# Needs root, to make the accounts tl_victim and tl_attacker and the group
# tl_share (those it made are removed at the end); skipped (77) otherwise.
# Everything else lives in one directory under /tmp, removed at the end:
#   sticky/  mode 1777, standing for /tmp
#   shared/  mode 0777, a directory the attacker can write
#   group-locks/  mode 2770 in tl_share: locks shared by group, by choice
#   victim/  the victim's home, with canary files in docs/ and .ssh/
#   rootdir/ a root-owned directory with canaries (root as the victim)
# Races run up to TL_SECURITY_TRIES times (default 100) within
# TL_SECURITY_RACE_SECONDS (default 15) per race, and stop at the first
# success.
set -uo pipefail
if [ $# -ne 3 ]; then
  echo "usage: attacks.sh TOKENLOCK COUNTER_CGI RACER" >&2
  exit 64
fi
if [ "$(id -u)" != 0 ]; then
  echo "SKIP: the security suite needs root, to create the accounts tl_victim and tl_attacker (run ctest -L security as root)"
  exit 77
fi
for tool in setpriv useradd userdel groupadd groupdel mkfifo timeout stat; do
  command -v "$tool" >/dev/null ||
    { echo "SKIP: $tool is not installed (util-linux, passwd, coreutils)"; exit 77; }
done
tries=${TL_SECURITY_TRIES:-100}
race_seconds=${TL_SECURITY_RACE_SECONDS:-15}
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=tests/security/setup.sh
. "$here/setup.sh"
# shellcheck source=tests/security/attacks_files.sh
. "$here/attacks_files.sh"
# shellcheck source=tests/security/attacks_lock.sh
. "$here/attacks_lock.sh"
# shellcheck source=tests/security/attacks_redis.sh
. "$here/attacks_redis.sh"
# shellcheck source=tests/security/attacks_sharing.sh
. "$here/attacks_sharing.sh"
# shellcheck source=tests/security/attacks_output.sh
. "$here/attacks_output.sh"

make_world "$1" "$2" "$3"
# Attack 1 aims at the canaries and checks them itself; after each of the
# others, the victim's and root's canaries must be as they were too.
attack_1
plant_canaries "$home" tl_victim
plant_canaries "$rootdir" root
for attack in 2 3 4 5 6 7 8 9 10 11 12 redis; do
  "attack_$attack"
  canaries_checked "attack $attack"
done
group_shared_setup
echo "security suite: $succeeded of $reported checks SUCCEEDED against tokenlock"
[ "$succeeded" = 0 ]
