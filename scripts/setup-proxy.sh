#!/usr/bin/env bash
# JupyterHub's proxy, configurable-http-proxy, from npm (Debian has no package of it). Skipped when installed.
set -euo pipefail
command -v configurable-http-proxy >/dev/null 2>&1 && exit 0
if ! command -v npm >/dev/null 2>&1; then
  echo "[setup] JupyterHub needs configurable-http-proxy, installed with npm: apt-get install nodejs npm" >&2
  exit 1
fi
echo "[setup] installing configurable-http-proxy with npm"
npm install -g --no-fund --no-audit --loglevel=error configurable-http-proxy@5.3.0
