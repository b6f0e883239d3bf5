#!/usr/bin/env bash
# The demo page (cgi-examples/counter/index.html, as scripts/demo serves it)
# in headless Chromium, behind a real Apache on 127.0.0.1 that this script
# starts and stops by its pid.
#   browser_e2e.sh INDEX_HTML COUNTER_CGI SCREENSHOT_DIR
# tests/e2e/browser_check.py does the looking; the screenshot it inspects
# stays in SCREENSHOT_DIR (demo-page.png). Skipped (77) with the reason when
# Apache, Chromium, chromedriver, Selenium or Pillow is missing
# (scripts/install-deps installs them).
set -euo pipefail
page=$1 cgi_binary=$2 shots=$3
here=$(cd "$(dirname "$0")" && pwd)
. "$here/webserver.sh"

skip() { echo "SKIP: $*"; exit 77; }
command -v apache2 >/dev/null || skip "apache2 is not installed"
[ -x /usr/bin/chromium ] || skip "chromium is not installed"
[ -x /usr/bin/chromedriver ] || skip "chromium-driver is not installed"
/usr/bin/python3 -c 'import selenium, PIL' 2>/dev/null || skip "python3-selenium or python3-pil is not installed"

work=$(mktemp -d)
chmod 0755 "$work"
trap 'stop_server; rm -rf "$work"' EXIT
mkdir -p "$work/cgi" "$work/apache" "$shots"
cp "$cgi_binary" "$work/cgi/counter.cgi"
cp "$page" "$work/apache/index.html"
chmod 0755 "$work/cgi" "$work/cgi/counter.cgi" "$work/apache"
chmod 0644 "$work/apache/index.html"
make_data_dir "$work/data"

port=$(pick_port)
start_apache "$work/apache" "$port" "$work/cgi" TOKENLOCK_COUNTER_DIR="$work/data" ||
  { echo "FAIL: apache did not start"; exit 1; }
echo "apache on 127.0.0.1:$port (pid $SERVER_PID)"
# Chromium keeps its profile and crash reports under HOME.
HOME=$work /usr/bin/python3 "$here/browser_check.py" "http://127.0.0.1:$port/" "$shots"
