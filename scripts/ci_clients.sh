#!/usr/bin/env bash
# Install and check the editor clients, as CI does:
#   - Neovim (Debian's 0.7.2 is enough) for the plugin's Lua unit spec and headless end-to-end tests;
#   - the VS Code extension: npm ci, lint (tsc strict + eslint), unit tests, .vsix package;
#   - the vscode-jsonrpc client session and the Neovim e2e tests against `specls serve`.
# Usage: scripts/ci_clients.sh   (PYTHON=/path/to/python to pick the interpreter; default .venv/bin/python)
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON="${PYTHON:-.venv/bin/python}"
[ -x "$PYTHON" ] || PYTHON=python3

if ! command -v nvim >/dev/null 2>&1; then
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -q
  $SUDO apt-get install -y -q neovim
fi
command -v node >/dev/null 2>&1 || { echo "node 20 + npm are required (actions/setup-node)" >&2; exit 1; }
echo "nvim: $(nvim --version | head -1)   node: $(node --version)   npm: $(npm --version)"

(
  cd editor_clients/vscode
  npm ci --no-audit --no-fund
  npm run lint
  npm test
  npm run package
  ls -l specls.vsix
)

"$PYTHON" -m pytest -q -p no:cacheprovider \
  tests/e2e/test_neovim_lua_units.py \
  tests/e2e/test_vscode_jsonrpc_client.py \
  tests/e2e/test_neovim_e2e.py
