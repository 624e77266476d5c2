#!/usr/bin/env bash
# Everything CI checks, from a fresh clone: set-up, lint, types, the VS Code extension build, and the tests
# (fast layers first, then the end-to-end tests marked slow).
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/setup.sh --dev

.venv/bin/ruff check engine lsp_server tests bench
.venv/bin/ruff format --check engine lsp_server tests bench
.venv/bin/mypy

(cd editor_clients/vscode && npm run lint && npm test && npm run package)
(cd editor_clients/neovim && npm run --silent format:check && luacheck --no-color -q lua tests builtin_client.lua)

.venv/bin/python -m pytest -m "not slow" -q
.venv/bin/python -m pytest -m slow -q
