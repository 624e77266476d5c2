"""bench/gpu.sh, checked where there is no GPU: it is valid bash, and the benchmark flags it passes (the real
pair, bf16, CUDA) parse with `specls bench throughput`'s own parser."""

from __future__ import annotations

import argparse
import re
import shlex
import subprocess
from pathlib import Path

from lsp_server.app.commands import bench

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "gpu.sh"


def test_the_script_is_valid_bash() -> None:
    subprocess.run(["bash", "-n", str(SCRIPT)], check=True)


def test_its_benchmark_flags_parse_and_name_the_real_pair_in_bf16_on_cuda() -> None:
    text = SCRIPT.read_text()
    call = re.search(r'lsp_server\.app\.cli bench throughput \\\n(.*?)\n\s*"\$@"', text, re.S)
    assert call is not None, "the benchmark call moved; update this test"
    words = shlex.split(call.group(1).replace("\\\n", " ").replace("\\", " "))
    # Shell defaults as the script would expand them with nothing set.
    expanded = [re.sub(r"\$\{\w+:-([^}]*)\}", r"\1", word) for word in words]
    parser = argparse.ArgumentParser()
    bench.add_arguments(parser)
    args = parser.parse_args(["throughput", *expanded])
    assert (args.device, args.dtype) == ("cuda", "bf16")
    assert (args.target, args.draft) == ("qwen2.5-coder-1.5b", "qwen2.5-coder-0.5b")
