#!/bin/sh
# Runs the conformance cases through one implementation's driver:
#   run.sh selftest            (the runner's own checks, with a lying driver)
#   run.sh cpp DRIVER_CPP
#   run.sh c DRIVER_C
#   run.sh command|perl|php|python TOKENLOCK [LIBTOKENLOCK_C]
# Exits 77 (skipped) when the implementation's language is missing; python
# runs the cases once per backend (the library backend needs LIBTOKENLOCK_C).
here=$(cd "${0%/*}" && pwd)
impl=$1
shift
skip() {
  echo "SKIP: $1"
  exit 77
}
[ -x /usr/bin/python3 ] || skip "/usr/bin/python3 is not installed (it runs the cases; scripts/install-deps installs it)"
cases() {
  /usr/bin/python3 "$here/conformance.py" "$@"
}
case $impl in
  selftest)
    exec /usr/bin/python3 "$here/selftest.py"
    ;;
  cpp|c)
    cases "$impl" -- "$1"
    ;;
  command)
    cases command -- /usr/bin/python3 "$here/driver_command.py" "$1"
    ;;
  perl)
    command -v perl >/dev/null || skip "perl is not installed (scripts/install-deps installs it)"
    TOKENLOCK_COMMAND=$1 cases perl -- perl "$here/driver.pl"
    ;;
  php)
    command -v php >/dev/null || skip "php is not installed (scripts/install-deps installs php-cli)"
    # The module starts no process: it passes where a host disables them,
    # with no command to find.
    TOKENLOCK_COMMAND=/nonexistent/tokenlock cases php -- php \
      -d disable_functions=proc_open,popen,exec,shell_exec,system,passthru,pcntl_exec "$here/driver.php"
    ;;
  python)
    export TOKENLOCK_COMMAND="$1"
    status=0
    if [ -n "${2:-}" ]; then
      TOKENLOCK_LIBRARY=$2 cases python-library -- /usr/bin/python3 "$here/driver.py" library || status=1
    else
      echo "skip python-library: no libtokenlock_c.so was built (TOKENLOCK_C_SHARED is OFF)"
    fi
    cases python-command -- /usr/bin/python3 "$here/driver.py" command || status=1
    exit $status
    ;;
  *)
    echo "run.sh: unknown implementation $impl (selftest, cpp, c, command, perl, php, python)" >&2
    exit 64
    ;;
esac
