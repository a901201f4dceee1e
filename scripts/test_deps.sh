#!/usr/bin/env bash
# The test suite opens report.html in headless Chromium (Debian's `chromium`). Install it
# when we are root and it is missing; otherwise say so (that one test then skips).
set -u
if command -v chromium >/dev/null || command -v chromium-browser >/dev/null; then exit 0; fi
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  echo "installing Debian's chromium (the report test renders report.html in it)" >&2
  (apt-get install -y -qq chromium >/dev/null 2>&1 || { apt-get update -qq >/dev/null 2>&1 && apt-get install -y -qq chromium >/dev/null 2>&1; }) && exit 0
fi
echo "note: chromium is not installed; tests/test_report.py's browser check will skip (apt-get install chromium)" >&2
exit 0
