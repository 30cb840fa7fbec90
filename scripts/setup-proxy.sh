#!/usr/bin/env bash
# JupyterHub's proxy, configurable-http-proxy, from npm (Debian has no package of it). Skipped when installed.
set -euo pipefail
command -v configurable-http-proxy >/dev/null 2>&1 && exit 0
# npm: Debian's package, unless the installed Node.js brings its own (NodeSource's does, and conflicts with it).
command -v npm >/dev/null 2>&1 || bash "$(dirname "$0")/setup-system.sh" npm
echo "[setup] installing configurable-http-proxy with npm"
npm install -g --no-fund --no-audit --loglevel=error configurable-http-proxy@5.3.0
