# A private php-fpm behind the private Apache of webserver.sh, reached
# through mod_proxy_fcgi on a unix socket: the way most hosts run PHP.
# Sourced (after webserver.sh) by the end-to-end tests and the benchmarks.
# php-fpm runs in the foreground as a child of the caller, which stops it
# by its pid (stop_php_fpm); nothing is installed into the system's config,
# and the system's php.ini applies, as on a host.
#
#   find_php_fpm                      prints the php-fpm binary, or fails
#   require_fpm_rig [COMMAND...]      exits 77 with the reason unless Apache,
#                                     ab, curl, php-fpm, mod_proxy_fcgi and
#                                     the COMMANDs are there
#   start_php_fpm WORK CHILDREN       sets FPM_PID and FPM_SOCKET
#   fpm_apache_config WORK URL DIR    writes WORK/fpm-apache.conf, which
#                                     serves DIR's *.php files at URL/
#                                     through FPM_SOCKET, and sets
#                                     APACHE_INCLUDE to it for start_apache
#   copy_for_fpm FILE DIR             copies a PHP program into DIR without
#                                     its #! line
#   deploy_fpm_counter SOURCE_DIR DIR [TOKENLOCK]
#                                     counter.php as a host has it: in DIR
#                                     with Tokenlock.php and the command
#                                     beside it (for a module that runs it)
#   wait_for_fpm_log PATTERN COUNT    waits until the pool's log holds COUNT
#                                     lines with PATTERN (fixed string)
#   stop_php_fpm                      stops $FPM_PID and waits for it
#
# The pool is static (CHILDREN workers from the start, so that a load test
# measures requests, not process creation). As root its workers and its
# socket belong to the CGI user (cgi_user), as Apache's CGI programs do, so
# that both kinds of counters can share one data directory. Variables that
# Apache's SetEnv sets reach the scripts as FastCGI parameters (getenv()).
# What the scripts write to stderr goes to WORK/logs/php-fpm.log.

find_php_fpm() {
  local f
  if [ -n "${PHP_FPM:-}" ]; then
    [ -x "$PHP_FPM" ] && echo "$PHP_FPM"
    return
  fi
  f=$(command -v php-fpm 2>/dev/null) && { echo "$f"; return 0; }
  # Debian installs it as /usr/sbin/php-fpmX.Y, off the PATH of most users.
  for f in $(ls -1 /usr/sbin/php-fpm* 2>/dev/null | sort -rV); do
    [ -x "$f" ] && { echo "$f"; return 0; }
  done
  return 1
}

require_fpm_rig() {
  local need
  for need in apache2 ab curl "$@"; do
    command -v "$need" >/dev/null || { echo "SKIP: $need is not installed (scripts/install-deps installs it)"; exit 77; }
  done
  find_php_fpm >/dev/null || { echo "SKIP: php-fpm is not installed (scripts/install-deps installs it)"; exit 77; }
  [ -e /usr/lib/apache2/modules/mod_proxy_fcgi.so ] ||
    { echo "SKIP: Apache's mod_proxy_fcgi is not installed (scripts/install-deps installs apache2)"; exit 77; }
}

start_php_fpm() {
  local work=$1 children=$2 fpm user
  fpm=$(find_php_fpm) || { echo "php-fpm is not installed (scripts/install-deps installs it)" >&2; return 1; }
  mkdir -p "$work/run" "$work/logs"
  # Apache's workers connect to the socket: they need search permission.
  chmod 0755 "$work" "$work/run"
  FPM_SOCKET=$work/run/php-fpm.sock
  FPM_LOG=$work/logs/php-fpm.log
  user=$(cgi_user)
  {
    echo "[global]"
    echo "pid = $work/run/php-fpm.pid"
    echo "error_log = $FPM_LOG"
    echo "daemonize = no"
    # A script's message to stderr is one line of the log, however long.
    echo "log_limit = 8192"
    echo "[counter]"
    echo "listen = $FPM_SOCKET"
    echo "listen.mode = 0660"
    if [ "$(id -u)" -eq 0 ]; then
      echo "user = $user"
      echo "group = $user"
      echo "listen.owner = $user"
      echo "listen.group = $user"
    fi
    echo "pm = static"
    echo "pm.max_children = $children"
    echo "catch_workers_output = yes"
    echo "decorate_workers_output = no"
  } >"$work/php-fpm.conf"
  "$fpm" -t -y "$work/php-fpm.conf" >"$work/logs/php-fpm-configtest.log" 2>&1 || {
    cat "$work/logs/php-fpm-configtest.log" >&2
    return 1
  }
  "$fpm" -F -y "$work/php-fpm.conf" >"$work/logs/php-fpm-stdout.log" 2>&1 &
  FPM_PID=$!
  local tries=0
  until [ -S "$FPM_SOCKET" ]; do
    tries=$((tries + 1))
    if ! kill -0 "$FPM_PID" 2>/dev/null || [ $tries -gt 400 ]; then
      echo "php-fpm ($fpm) did not create $FPM_SOCKET; its output and log:" >&2
      cat "$work/logs/php-fpm-stdout.log" "$work/logs/php-fpm.log" >&2 2>/dev/null || true
      return 1
    fi
    sleep 0.025
  done
}

fpm_apache_config() {
  local work=$1 url=$2 dir=$3 mods=/usr/lib/apache2/modules
  {
    echo "LoadModule proxy_module $mods/mod_proxy.so"
    echo "LoadModule proxy_fcgi_module $mods/mod_proxy_fcgi.so"
    echo "Alias $url/ \"$dir/\""
    # Only the PHP programs are served; the module beside them and anything
    # else in the directory are not.
    echo "<Directory \"$dir\">"
    echo "  Require all denied"
    echo "  <FilesMatch \"^[a-z_]+\\.php\$\">"
    echo "    Require all granted"
    echo "    SetHandler \"proxy:unix:$FPM_SOCKET|fcgi://localhost\""
    echo "  </FilesMatch>"
    echo "  <Files \"Tokenlock.php\">"
    echo "    Require all denied"
    echo "  </Files>"
    echo "</Directory>"
  } >"$work/fpm-apache.conf"
  APACHE_INCLUDE=$work/fpm-apache.conf
}

# php-fpm, unlike php-cgi and php, does not skip a #! line: it would be
# sent as the start of the body, and a declare() after it is a fatal error.
# A program written to run both ways (counter.php) is deployed without it.
copy_for_fpm() {
  local file=$1 dir=$2 first
  IFS= read -r first <"$file" || true
  if [[ $first == '#!'* ]]; then
    tail -n +2 "$file" >"$dir/$(basename "$file")"
  else
    cp "$file" "$dir/"
  fi
}

deploy_fpm_counter() {
  local src=$1 dir=$2 tool=${3:-}
  mkdir -p "$dir"
  copy_for_fpm "$src/cgi-examples/php/counter.php" "$dir"
  cp "$src/bindings/php/Tokenlock.php" "$dir/"
  chmod 0755 "$dir"
  chmod 0644 "$dir/counter.php" "$dir/Tokenlock.php"
  if [ -n "$tool" ]; then
    cp "$tool" "$dir/tokenlock"
    chmod 0755 "$dir/tokenlock"
  fi
}

# Workers' stderr reaches the log through the master, a little after the
# answer: poll it (bounded) rather than read it once.
wait_for_fpm_log() {
  local pattern=$1 count=$2 tries=0 n
  while n=$(grep -c -F -- "$pattern" "$FPM_LOG" 2>/dev/null) || true; [ "${n:-0}" -lt "$count" ]; do
    tries=$((tries + 1))
    [ $tries -gt 200 ] && return 1
    sleep 0.025
  done
}

stop_php_fpm() {
  [ -n "${FPM_PID:-}" ] || return 0
  kill -TERM "$FPM_PID" 2>/dev/null || true
  wait "$FPM_PID" 2>/dev/null || true
  FPM_PID=
}
