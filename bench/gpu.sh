#!/usr/bin/env bash
# The throughput benchmark on CUDA in bf16 on the real pair (Qwen2.5-Coder-1.5B drafted by 0.5B), in one
# command of under 10 minutes, with no downloads.
#
#   bench/gpu.sh --fetch-wheels   # HERE, once: download the two packages the GPU image lacks into .whl/
#                                 # (tree-sitter and its Python grammar, for the server's prompt builder)
#   bench/gpu.sh                  # ON THE GPU MACHINE, from the repository root (carry .whl):
#                                 # installs .whl/*.whl into /tmp/site if present, then runs the benchmark
#
# The GPU image already has torch, transformers, tokenizers, safetensors, tqdm and matplotlib. Results go
# to bench/results/throughput-cuda.{json,md,png}, and also to $OUT when that is set (the device tool's
# folder that comes back). Knobs: PROMPTS (16), MAX_NEW_TOKENS (128), REPEATS (2), TIME_LIMIT_S (540),
# TARGET (qwen2.5-coder-1.5b) and DRAFT (qwen2.5-coder-0.5b): pulled names, or folders. The GPU machine reaches
# no network, so the pulled folders must be there already (SPECLS_CACHE_DIR pointing at a copy of
# ~/.cache/specls/models); TARGET=bundled DRAFT=bundled runs the bundled pair, which the checkout carries.
set -euo pipefail
cd "$(dirname "$0")/.."

if [[ "${1:-}" == "--fetch-wheels" ]]; then
    grep -qx '/.whl/' .git/info/exclude 2>/dev/null || echo '/.whl/' >> .git/info/exclude
    for spec in tree-sitter==0.26.1 tree-sitter-python==0.25.0; do
        python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
            --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
            -d .whl "$spec"
    done
    ls -l .whl
    exit 0
fi

PYTHON="${PYTHON:-python3}"
if compgen -G ".whl/*.whl" > /dev/null; then
    "$PYTHON" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
    export PYTHONPATH="/tmp/site${PYTHONPATH:+:$PYTHONPATH}"
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1

"$PYTHON" - <<'EOF'
import torch
assert torch.cuda.is_available(), "no CUDA device visible"
print("torch", torch.__version__, "on", torch.cuda.get_device_name())
import tree_sitter, tree_sitter_python, transformers  # noqa: E401,F401 - fail early, with the name
print("transformers", transformers.__version__)
EOF

timeout "${TIME_LIMIT_S:-540}" "$PYTHON" -m lsp_server.app.cli bench throughput \
    --device cuda --dtype bf16 --tag cuda \
    --target "${TARGET:-qwen2.5-coder-1.5b}" --draft "${DRAFT:-qwen2.5-coder-0.5b}" \
    --prompts "${PROMPTS:-16}" --max-new-tokens "${MAX_NEW_TOKENS:-128}" --repeats "${REPEATS:-2}" --quiet \
    "$@"

if [[ -n "${OUT:-}" ]]; then
    cp bench/results/throughput-cuda.* "$OUT"/
fi
cat bench/results/throughput-cuda.md
