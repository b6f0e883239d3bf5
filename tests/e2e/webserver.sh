# Private Apache and lighttpd instances for counter.cgi, on 127.0.0.1 only.
# Sourced by the end-to-end tests, scripts/demo and the benchmark. Every
# server runs in the foreground as a child of the caller, which stops it by
# its pid (stop_server); nothing is installed into the system's config.
#
#   pick_port [FIRST]                 prints a free port on 127.0.0.1
#   start_apache WORK PORT CGI_DIR [NAME=VALUE...]   sets SERVER_PID
#   start_lighttpd WORK PORT CGI_DIR [NAME=VALUE...] sets SERVER_PID
#   stop_server                       stops $SERVER_PID and waits for it
#
# CGI_DIR is served at /cgi-bin/; NAME=VALUE pairs reach the CGI programs
# as environment variables. When running as root the CGI programs run as
# www-data, so the data they write must be writable by www-data.
# APACHE_INCLUDE, when set, names a file of more Apache configuration that
# start_apache includes (phpfpm.sh writes one).

port_is_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# A port below the kernel's range for outgoing connections: a port in that
# range may be the local end of a client's connection (ab, curl, a Redis
# client), which a connect test does not see and which makes the server's
# bind fail with EADDRINUSE. [10000, 19000): the C++ tests' servers take
# theirs from [20000, ...) (tests/support/ports.hpp).
pick_port() {
  local p=${1:-$((10000 + RANDOM % 9000))}
  while ! port_is_free "$p"; do p=$((p + 1)); done
  echo "$p"
}

# Waits until something accepts connections on the port (polling a
# condition, bounded), or the server died.
wait_for_port() {
  local port=$1 pid=$2 tries=0
  until ! port_is_free "$port"; do
    kill -0 "$pid" 2>/dev/null || return 1
    tries=$((tries + 1))
    [ $tries -gt 400 ] && return 1
    sleep 0.025
  done
}

cgi_user() { [ "$(id -u)" -eq 0 ] && echo www-data || id -un; }

start_apache() {
  local work=$1 port=$2 cgi_dir=$3
  shift 3
  mkdir -p "$work/run" "$work/logs"
  # mod_cgid's socket is created as the CGI user: its directory must be
  # searchable by that user.
  chmod 0755 "$work" "$work/run"
  local mods=/usr/lib/apache2/modules user
  user=$(cgi_user)
  {
    echo "ServerRoot \"$work\""
    echo "Listen 127.0.0.1:$port"
    echo "ServerName 127.0.0.1"
    for m in mpm_event authz_core alias cgid env mime dir; do echo "LoadModule ${m}_module $mods/mod_$m.so"; done
    echo "PidFile $work/run/apache.pid"
    echo "DefaultRuntimeDir $work/run"
    echo "ScriptSock $work/run/cgid.sock"
    echo "ErrorLog $work/logs/error.log"
    echo "LogLevel warn"
    if [ "$(id -u)" -eq 0 ]; then echo "User $user"; echo "Group $user"; fi
    echo "DocumentRoot \"$work\""
    # The demo's page (scripts/demo, e2e_browser), served as a site serves it.
    echo "TypesConfig /dev/null"
    echo "AddType text/html .html"
    echo "DirectoryIndex index.html"
    echo "StartServers 2"
    echo "ServerLimit 16"
    echo "ThreadsPerChild 25"
    echo "MaxRequestWorkers 400"
    echo "ScriptAlias /cgi-bin/ \"$cgi_dir/\""
    echo "<Directory \"$cgi_dir\">"
    echo "  Require all granted"
    echo "</Directory>"
    for kv in "$@"; do echo "SetEnv ${kv%%=*} \"${kv#*=}\""; done
    [ -z "${APACHE_INCLUDE:-}" ] || echo "Include \"$APACHE_INCLUDE\""
  } >"$work/apache.conf"
  apache2 -t -f "$work/apache.conf" >"$work/logs/configtest.log" 2>&1 || {
    cat "$work/logs/configtest.log" >&2
    return 1
  }
  apache2 -f "$work/apache.conf" -DFOREGROUND >"$work/logs/stdout.log" 2>&1 &
  SERVER_PID=$!
  wait_for_port "$port" "$SERVER_PID" || {
    # Before its error log is open (a failed bind), Apache writes to stderr.
    echo "apache did not start; its output and error log:" >&2
    cat "$work/logs/stdout.log" "$work/logs/error.log" >&2 2>/dev/null || true
    return 1
  }
}

start_lighttpd() {
  local work=$1 port=$2 cgi_dir=$3
  shift 3
  mkdir -p "$work/run" "$work/logs"
  local user
  user=$(cgi_user)
  # lighttpd opens its error log after dropping to its user.
  chown "$user" "$work/logs" 2>/dev/null || true
  {
    echo "server.document-root = \"$work\""
    echo "server.bind = \"127.0.0.1\""
    echo "server.port = $port"
    echo "server.pid-file = \"$work/run/lighttpd.pid\""
    echo "server.errorlog = \"$work/logs/error.log\""
    echo "server.modules = (\"mod_alias\", \"mod_cgi\", \"mod_setenv\")"
    echo "server.max-connections = 512"
    if [ "$(id -u)" -eq 0 ]; then echo "server.username = \"$user\""; echo "server.groupname = \"$user\""; fi
    echo "alias.url = (\"/cgi-bin/\" => \"$cgi_dir/\")"
    echo "\$HTTP[\"url\"] =~ \"^/cgi-bin/\" { cgi.assign = (\".cgi\" => \"\") }"
    local env=""
    for kv in "$@"; do env="$env\"${kv%%=*}\" => \"${kv#*=}\", "; done
    [ -n "$env" ] && echo "setenv.set-environment = ( ${env%, } )"
  } >"$work/lighttpd.conf"
  lighttpd -tt -f "$work/lighttpd.conf" >"$work/logs/configtest.log" 2>&1 || {
    cat "$work/logs/configtest.log" >&2
    return 1
  }
  lighttpd -D -f "$work/lighttpd.conf" >"$work/logs/stdout.log" 2>&1 &
  SERVER_PID=$!
  wait_for_port "$port" "$SERVER_PID" || {
    echo "lighttpd did not start; its error log:" >&2
    cat "$work/logs/error.log" "$work/logs/stdout.log" >&2 2>/dev/null
    return 1
  }
}

stop_server() {
  [ -n "${SERVER_PID:-}" ] || return 0
  kill -TERM "$SERVER_PID" 2>/dev/null || true
  wait "$SERVER_PID" 2>/dev/null || true
  SERVER_PID=
}

# Pids of the running server's processes, at any depth below SERVER_PID,
# whose command name is $1. Told by /proc/PID/stat, which every user may
# read: /proc/PID/exe of processes running as the CGI user needs ptrace
# rights that root in a container may lack. Builtins only, so that the scan
# is quick enough to catch CGI processes that live a few milliseconds.
server_processes_named() {
  local name=$1 stat line rest q ppid pid
  for stat in /proc/[0-9]*/stat; do
    read -r line 2>/dev/null <"$stat" || continue
    rest=${line#*\(}
    [ "${rest%%) *}" = "$name" ] || continue
    pid=${line%% *}
    q=$pid
    while [ "$q" -gt 1 ]; do
      read -r line 2>/dev/null <"/proc/$q/stat" || break
      rest=${line##*) }
      ppid=${rest#* }
      ppid=${ppid%% *}
      if [ "$ppid" = "$SERVER_PID" ]; then echo "$pid"; break; fi
      q=$ppid
    done
  done
}

# A data directory the CGI user can write, below a path it can search.
make_data_dir() {
  mkdir -p "$1"
  chmod 0755 "$(dirname "$1")"
  chown "$(cgi_user)" "$1"
}
