#!/usr/bin/env bash
# Build llama.cpp's `llama-server` from the sources inside the llama-cpp-python sdist (PyPI is the
# only registry reachable here) and cache the binary so later runs on this machine reuse it.
#
#   scripts/build_llama_server.sh            # prints the path of the cached binary
#   SPECLS_CACHE_DIR=/some/dir scripts/...   # cache elsewhere (default ~/.cache/specls)
#   JOBS=4 scripts/...                       # parallel compile jobs (default 2)
#
# Only the llama-server target is built; the flags below keep the build offline (no curl, no
# OpenSSL, no prebuilt web UI download) and skip tests and examples. About 4-6 minutes on 2 cores.
set -euo pipefail

LLAMA_CPP_PYTHON_VERSION=0.3.36 # vendors a llama.cpp with --spec-type and --spec-draft-n-max
CACHE_DIR="${SPECLS_CACHE_DIR:-$HOME/.cache/specls}"
INSTALL_DIR="$CACHE_DIR/llama-server-$LLAMA_CPP_PYTHON_VERSION"
BINARY="$INSTALL_DIR/llama-server"
LINK="$CACHE_DIR/bin/llama-server" # stable path the tests look for
JOBS="${JOBS:-2}"
PYTHON="${PYTHON:-python3}"

link_binary() {
    mkdir -p "$(dirname "$LINK")"
    ln -sfn "$BINARY" "$LINK"
    echo "$LINK"
}

if [[ -x "$BINARY" ]] && "$BINARY" --version >/dev/null 2>&1; then
    link_binary
    exit 0
fi

WORK_DIR="$(mktemp -d "${TMPDIR:-/tmp}/specls-llama-build.XXXXXX")"
trap 'rm -rf "$WORK_DIR"' EXIT

echo "downloading llama-cpp-python==$LLAMA_CPP_PYTHON_VERSION sdist" >&2
"$PYTHON" -m pip download --quiet --no-binary :all: --no-deps \
    -d "$WORK_DIR" "llama-cpp-python==$LLAMA_CPP_PYTHON_VERSION" >&2
tar -xzf "$WORK_DIR"/llama_cpp_python-"$LLAMA_CPP_PYTHON_VERSION".tar.gz -C "$WORK_DIR"
SOURCE_DIR="$WORK_DIR/llama_cpp_python-$LLAMA_CPP_PYTHON_VERSION/vendor/llama.cpp"

GENERATOR=()
if command -v ninja >/dev/null 2>&1; then GENERATOR=(-G Ninja); fi

echo "configuring llama.cpp in $WORK_DIR/build" >&2
cmake -S "$SOURCE_DIR" -B "$WORK_DIR/build" "${GENERATOR[@]}" \
    -DCMAKE_BUILD_TYPE=Release \
    -DBUILD_SHARED_LIBS=OFF \
    -DLLAMA_CURL=OFF \
    -DLLAMA_OPENSSL=OFF \
    -DLLAMA_USE_PREBUILT_UI=OFF \
    -DLLAMA_BUILD_TESTS=OFF \
    -DLLAMA_BUILD_EXAMPLES=OFF >&2

echo "building llama-server with $JOBS jobs (nice 19)" >&2
nice -n 19 cmake --build "$WORK_DIR/build" --target llama-server -j "$JOBS" >&2

mkdir -p "$INSTALL_DIR"
cp "$WORK_DIR/build/bin/llama-server" "$BINARY.tmp"
mv "$BINARY.tmp" "$BINARY" # atomic: a half-copied binary never looks cached
link_binary
