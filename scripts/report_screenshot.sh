#!/usr/bin/env bash
# Open a report in headless Chromium, save a PNG screenshot, and fail on any console message
# (the report has no script, so any console output is an error) or a missing/empty PNG.
#
#   scripts/report_screenshot.sh [REPORT.html] [SHOT.png]
#
# Without REPORT, runs/report.html is (re)built: from the runs in runs/ if there are any,
# otherwise from a short memory smoke run (bench compare). SHOT defaults to REPORT with .png.
set -euo pipefail
# Paths given are relative to the caller's directory; everything else to the repository.
REPORT=${1:+$(realpath -m "$1")}
SHOT=${2:+$(realpath -m "$2")}
cd "$(dirname "$0")/.."

BIN=${BIN:-.venv/bin}
BUILD=0
if [ -z "$REPORT" ]; then REPORT=$(realpath -m runs/report.html); BUILD=1; fi
SHOT=${SHOT:-${REPORT%.html}.png}

if ! command -v chromium >/dev/null 2>&1; then
    echo "note: installing Debian's chromium (apt-get)"
    if [ "$(id -u)" -eq 0 ]; then SUDO=""; else SUDO="sudo"; fi
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq chromium >/dev/null
fi

if [ "$BUILD" = 1 ]; then
    if compgen -G "runs/*/summary.json" >/dev/null; then
        "$BIN/bench" report runs/ -o "$REPORT"
    else
        "$BIN/bench" compare --schedulers memory --workload smoke --duration 6s --warmup 1s -o "$REPORT"
    fi
elif [ ! -f "$REPORT" ]; then
    echo "error: no report at $REPORT; give an existing .html file, or no argument to build runs/report.html" >&2
    exit 2
fi

PROFILE=$(mktemp -d)
LOG=$(mktemp)
trap 'rm -rf "$PROFILE" "$LOG"' EXIT
rm -f "$SHOT"
URL="file://$REPORT"

# --enable-logging=stderr makes page console messages appear as "CONSOLE" lines.
chromium --headless --no-sandbox --disable-gpu --disable-quic --no-first-run \
    --disable-background-networking --disable-component-update --disable-sync \
    --user-data-dir="$PROFILE" --enable-logging=stderr --v=0 \
    --hide-scrollbars --window-size=1400,3000 --screenshot="$SHOT" "$URL" >"$LOG" 2>&1 || {
    echo "error: chromium failed on $URL" >&2; cat "$LOG" >&2; exit 1; }

if grep -E "CONSOLE[(:]|Uncaught|net::ERR_" "$LOG" >&2; then
    echo "error: the report logged console errors (above) in Chromium" >&2
    exit 1
fi
if [ ! -s "$SHOT" ] || [ "$(head -c 8 "$SHOT" | od -An -tx1 | tr -d ' \n')" != "89504e470d0a1a0a" ]; then
    echo "error: no PNG screenshot at $SHOT" >&2
    cat "$LOG" >&2
    exit 1
fi
echo "screenshot: $SHOT ($(stat -c %s "$SHOT") bytes) of $REPORT"
