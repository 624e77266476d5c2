#!/usr/bin/env bash
# Install code-server (VS Code 1.100.3 served to a browser) for the VS Code end-to-end tests, into
# ${SPECLS_CACHE_DIR:-~/.cache/specls}/code-server-4.100.3. Prints the path of the code-server executable.
# A second run finds it there and returns at once.
#
# 4.100.3 is the newest code-server that runs on node 20. Its install has three traps, each handled below:
# node-gyp needs Kerberos headers (libkrb5-dev, from scripts/setup.sh --dev), node-gyp must build against
# the installed node's headers instead of downloading them, and @vscode/ripgrep's postinstall downloads rg
# from a host that may be unreachable, so its download cache is filled with the system's rg first.
set -euo pipefail

VERSION=4.100.3
CACHE="${SPECLS_CACHE_DIR:-$HOME/.cache/specls}"
DEST="$CACHE/code-server-$VERSION"
BIN="$DEST/node_modules/.bin/code-server"

if [[ -x "$BIN" ]]; then
    echo "$BIN"
    exit 0
fi

command -v node >/dev/null 2>&1 || { echo "node 20 + npm are required for code-server" >&2; exit 1; }
RG="$(command -v rg || true)"
[[ -n "$RG" ]] || { echo "ripgrep is required (apt-get install ripgrep)" >&2; exit 1; }

# @vscode/ripgrep 1.15.11 looks in os.tmpdir()/vscode-ripgrep-cache-1.15.11 before it downloads.
RG_CACHE="${TMPDIR:-/tmp}/vscode-ripgrep-cache-1.15.11"
RG_ARCHIVE="$RG_CACHE/ripgrep-v13.0.0-10-x86_64-unknown-linux-musl.tar.gz"
if [[ ! -f "$RG_ARCHIVE" ]]; then
    mkdir -p "$RG_CACHE"
    STAGE="$(mktemp -d)"
    cp "$RG" "$STAGE/rg"
    tar -C "$STAGE" -czf "$RG_ARCHIVE" rg
    rm -rf "$STAGE"
fi

# Install into a staging folder and move it into place at the end, so that an interrupted install is not
# mistaken for a finished one.
STAGING="$DEST.partial"
rm -rf "$STAGING"
mkdir -p "$STAGING"
NODE_PREFIX="$(dirname "$(dirname "$(readlink -f "$(command -v node)")")")"
(
    cd "$STAGING"
    echo '{"name": "specls-code-server", "private": true}' >package.json
    npm_config_yes=true npm_config_nodedir="$NODE_PREFIX" \
        npm install --unsafe-perm --no-audit --no-fund --loglevel=error "code-server@$VERSION" >&2
)
rm -rf "$DEST"
mv "$STAGING" "$DEST"
echo "$BIN"
