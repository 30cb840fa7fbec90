#!/usr/bin/env bash
# MathJax 3 for the course's website (make docs), from its npm package: the site serves it itself, so its formulas
# render with no network. Puts the package's es5/ folder in build/mathjax/mathjax/ (website/conf.py's static path).
# Skipped when that version is there. Usage: scripts/setup-mathjax.sh [FOLDER]   (default build/mathjax)
set -euo pipefail
VERSION=3.2.2
DEST="${1:-$(cd "$(dirname "$0")/.." && pwd)/build/mathjax}"
grep -qs "\"version\": \"$VERSION\"" "$DEST/mathjax/package.json" && [ -f "$DEST/mathjax/tex-mml-chtml.js" ] && exit 0
# npm: Debian's package, unless the installed Node.js brings its own (as in setup-proxy.sh)
command -v npm >/dev/null 2>&1 || bash "$(dirname "$0")/setup-system.sh" npm
echo "[setup] fetching MathJax $VERSION with npm, for the website"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
(cd "$tmp" && npm pack --silent --no-fund --no-audit "mathjax@$VERSION" >/dev/null)
tar -xzf "$tmp/mathjax-$VERSION.tgz" -C "$tmp" package/es5 package/package.json
es5="$tmp/package/es5"
# The one bundle the site loads and what it loads on demand (TeX extensions, fonts, menu, accessibility); the
# other bundles, the SVG output and latest.js (which loads MathJax from a CDN) are left out
rm -rf "$es5"/latest.js "$es5"/node-main.js "$es5"/mml-*.js "$es5"/tex-chtml*.js "$es5"/tex-svg*.js \
  "$es5"/tex-mml-svg.js "$es5"/output/svg "$es5"/output/svg.js
mv "$tmp/package/package.json" "$es5/package.json"  # its version, read above
rm -rf "$DEST"
mkdir -p "$DEST"
mv "$es5" "$DEST/mathjax"
