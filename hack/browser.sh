#!/usr/bin/env bash
# Installs Debian's Chromium and ChromeDriver for the dashboard's browser test
# (crates/controller/tests/dashboard_browser.rs) when they are missing: /usr/bin/chromium and
# /usr/bin/chromedriver. System packages, outside the repository; returns at once when present.
set -euo pipefail

log() { printf '[browser %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

if [ -x /usr/bin/chromium ] && [ -x /usr/bin/chromedriver ]; then
  exit 0
fi
SUDO=""
if [ "$(id -u)" != 0 ]; then
  command -v sudo >/dev/null || { log "need root or sudo to apt-get install chromium chromium-driver"; exit 1; }
  SUDO="sudo"
fi
t0=$(date +%s)
log "installing chromium and chromium-driver from Debian's packages"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends chromium chromium-driver >/dev/null
[ -x /usr/bin/chromium ] && [ -x /usr/bin/chromedriver ] || { log "chromium or chromedriver still missing after the install"; exit 1; }
log "installed in $(( $(date +%s) - t0 ))s: $(/usr/bin/chromium --version 2>/dev/null | head -1)"
