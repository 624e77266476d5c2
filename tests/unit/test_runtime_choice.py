"""The runtime rule: llama.cpp when it can run the target, torch otherwise, and always a reason."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.runtime import RuntimeUnavailable, choose_runtime, llama_cpp_blocker

GGUF = Path("model.gguf")


def test_blockers_name_what_is_missing() -> None:
    assert llama_cpp_blocker("cpu", GGUF, installed=True) is None
    assert "not installed" in (llama_cpp_blocker("cpu", GGUF, installed=False) or "")
    assert "no .gguf" in (llama_cpp_blocker("cpu", None, installed=True) or "")
    assert "cuda" in (llama_cpp_blocker("cuda", GGUF, installed=True) or "")


def test_auto_prefers_llama_cpp_and_falls_back_with_the_blocker_as_reason() -> None:
    assert choose_runtime("auto", "none", None)[0] == "llama.cpp"
    assert choose_runtime("auto", "none", "no .gguf file beside the target's weights") == (
        "torch",
        "no .gguf file beside the target's weights",
    )
    # Quantized torch weights are a torch request even where llama.cpp could run.
    assert choose_runtime("auto", "int8", None) == ("torch", "int8 weights are a torch option")


def test_explicit_requests_win_or_fail_clearly() -> None:
    assert choose_runtime("torch", "none", None) == ("torch", "requested")
    assert choose_runtime("llama.cpp", "none", None) == ("llama.cpp", "requested")
    with pytest.raises(RuntimeUnavailable, match="cannot run llama.cpp: llama-cpp-python is not installed"):
        choose_runtime("llama.cpp", "none", "llama-cpp-python is not installed")
    with pytest.raises(RuntimeUnavailable, match="unknown runtime"):
        choose_runtime("onnx", "none", None)
    with pytest.raises(RuntimeUnavailable, match="unknown quantization"):
        choose_runtime("auto", "int2", None)
