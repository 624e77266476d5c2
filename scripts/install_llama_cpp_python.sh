#!/usr/bin/env bash
# Install llama-cpp-python into .venv, compiled from its sdist (PyPI is the only registry reachable here, and
# it carries no wheels), for the in-process llama.cpp runtime (engine/llama_cpp_decoder.py).
#
#   bash scripts/install_llama_cpp_python.sh     # compiles llama.cpp (13 CPU-minutes measured);
#                                                # a re-run finds it installed and does nothing
#   JOBS=4 bash scripts/install_llama_cpp_python.sh
#
# The same version and offline flags as scripts/build_llama_server.sh; only the shared libraries the Python
# bindings load are built (no server, tools, tests, examples or multimodal library).
set -euo pipefail
cd "$(dirname "$0")/.."

LLAMA_CPP_PYTHON_VERSION=0.3.36 # keep equal to scripts/build_llama_server.sh
JOBS="${JOBS:-2}"

if .venv/bin/python -c "import llama_cpp, sys; sys.exit(llama_cpp.__version__ != '$LLAMA_CPP_PYTHON_VERSION')" 2>/dev/null; then
    exit 0
fi
echo "building llama-cpp-python==$LLAMA_CPP_PYTHON_VERSION from source with $JOBS jobs (nice 10)" >&2
CMAKE_BUILD_PARALLEL_LEVEL="$JOBS" \
    CMAKE_ARGS="-DLLAVA_BUILD=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_TOOLS=OFF" \
    nice -n 10 .venv/bin/python -m pip install --quiet --disable-pip-version-check \
    "llama-cpp-python==$LLAMA_CPP_PYTHON_VERSION"
