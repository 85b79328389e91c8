#!/usr/bin/env bash
# Open a report in headless Chromium, save a PNG screenshot, and fail on any console message
# (the report has no script, so any console output is an error), a missing/empty PNG, a first
# screen (1400x900) that does not show the recommendation and the lag figure, or a page that
# scrolls sideways on a phone (390 px wide).
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
# The layout checks: a copy of the report with a probe script that writes what it measured into
# the DOM, which --dump-dom prints once the page has loaded.
PROBE="$PROFILE/probe.html"
PHONE="$PROFILE/phone.html"
python3 - "$REPORT" "$PROBE" "$PHONE" <<'PY'
import sys
page = open(sys.argv[1], encoding="utf-8").read()
probe = """<script>
addEventListener("load", () => {
  const bottom = (sel) => { const e = document.querySelector(sel); return e ? e.getBoundingClientRect().bottom : 1e9; };
  const first = Math.max(bottom("#first .pick"), bottom("#first ul"), bottom("#figure-lag_cdf img"));
  const overflow = Math.max(0, document.documentElement.scrollWidth - innerWidth);
  document.body.setAttribute("data-first-bottom", String(Math.round(first)));
  parent.postMessage({overflow: overflow, width: innerWidth}, "*");
});
</script>"""
open(sys.argv[2], "w", encoding="utf-8").write(page.replace("</body>", probe + "</body>", 1))
# A phone's width: the report in a 390 px frame (a headless window is never narrower than 500 px)
phone = """<!DOCTYPE html><html><body><iframe src="probe.html" style="width:390px;height:844px;border:0"></iframe>
<script>addEventListener("message", (e) => {
  document.body.setAttribute("data-overflow", String(e.data.overflow));
  document.body.setAttribute("data-inner-width", String(e.data.width));
});</script></body></html>"""
open(sys.argv[3], "w", encoding="utf-8").write(phone)
PY
measure() {  # PAGE WIDTH HEIGHT ATTRIBUTE
    chromium --headless --no-sandbox --disable-gpu --disable-quic --no-first-run \
        --disable-background-networking --disable-component-update --disable-sync \
        --user-data-dir="$PROFILE/m$2" --hide-scrollbars --window-size="$2,$3" --virtual-time-budget=5000 \
        --allow-file-access-from-files --dump-dom "file://$1" 2>/dev/null | grep -o "$4=\"[0-9]*\"" | head -1 | grep -o '[0-9]*'
}
FIRST=$(measure "$PROBE" 1400 900 data-first-bottom || true)
if [ -z "$FIRST" ] || [ "$FIRST" -gt 900 ]; then
    echo "error: at 1400x900 the first screen does not hold the recommendation and the lag figure (they end at ${FIRST:-?} px)" >&2
    exit 1
fi
OVER=$(measure "$PHONE" 1400 900 data-overflow || true)
NARROW=$(measure "$PHONE" 1400 900 data-inner-width || true)
if [ -z "$OVER" ] || [ "$OVER" -gt 0 ]; then
    echo "error: at ${NARROW:-390} px wide the page scrolls sideways (${OVER:-?} px too wide)" >&2
    exit 1
fi
echo "screenshot: $SHOT ($(stat -c %s "$SHOT") bytes) of $REPORT; first screen ends at $FIRST px of 900; no sideways scrolling at ${NARROW} px"
