"""Which runtime decodes the target: llama.cpp in process over the model's GGUF, or the torch decoders.

The default ("auto") is the fastest one installed: llama.cpp when llama-cpp-python is installed, the device
is a CPU and a GGUF file lies beside the target's weights with the same vocabulary (bench/results/
decode-speed-cpu.md measures it against the torch decoders and llama-server); otherwise torch, with the lean
static-cache decoder for Llama checkpoints (optionally with int8/int4 weights, `engine.quantize`) and
transformers' forward for everything else. Every fallback says why, for `specls doctor` and `specls info`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from engine.api import QUANTIZATIONS, RUNTIMES, Quantization
from engine.hardware import DRAFT_AUTO_QUANTIZATION as DRAFT_AUTO_QUANTIZATION  # hardware rules live there
from engine.hardware import choose_draft_quantization as _choose_draft_quantization
from engine.hardware import choose_target_quantization, cpu_class
from engine.hardware import cpu_capability as cpu_capability

if TYPE_CHECKING:
    from transformers import PreTrainedModel

    from engine.decoder import CausalDecoder


class RuntimeUnavailable(ValueError):
    """A runtime that was asked for by name cannot run this target; the message says what is missing."""


@dataclass(frozen=True)
class RuntimeChoice:
    runtime: str  # "llama.cpp", "lean" or "transformers"
    weights: str  # what the matmuls read: "fp32", "bf16", "bf16 + int8 weights", or the GGUF file name
    reason: str

    def describe(self) -> str:
        return f"{self.runtime} ({self.weights}): {self.reason}"


def llama_cpp_blocker(device_type: str, gguf: Path | None, installed: bool) -> str | None:
    """Why llama.cpp cannot run this target, or None when it can."""
    if device_type != "cpu":
        return f"the in-process llama.cpp runtime is built for CPU, the device is {device_type}"
    if not installed:
        return "llama-cpp-python is not installed (bash scripts/setup.sh --llama-cpp)"
    if gguf is None:
        return "no .gguf file beside the target's weights"
    return None


def choose_runtime(requested: str, quantization: str, blocker: str | None) -> tuple[str, str]:
    """("llama.cpp" or "torch", why). An explicit request wins or fails with the blocker; quantizing
    torch weights is a torch request."""
    if requested not in RUNTIMES:
        raise RuntimeUnavailable(f"unknown runtime {requested!r}; choose one of {', '.join(RUNTIMES)}")
    if quantization not in QUANTIZATIONS and quantization != "auto":
        raise RuntimeUnavailable(
            f"unknown quantization {quantization!r}; choose one of {', '.join(QUANTIZATIONS)}"
        )
    if requested == "llama.cpp":
        if blocker is not None:
            raise RuntimeUnavailable(f"cannot run llama.cpp: {blocker}")
        return "llama.cpp", "requested"
    if requested == "torch":
        return "torch", "requested"
    if quantization not in ("none", "auto"):
        return "torch", f"{quantization} weights are a torch option"
    if blocker is None:
        return "llama.cpp", "the fastest runtime installed (bench/results/decode-speed-cpu.md)"
    return "torch", blocker


def build_target_decoder(
    model: PreTrainedModel,
    folder: str | None,
    window: int,
    *,
    runtime: str = "auto",
    quantization: str = "none",
    threads: int = 1,
    release: bool = False,
) -> tuple[CausalDecoder, RuntimeChoice]:
    """The target's decoder under the chosen runtime, and the choice with its reason. `release`: the lean
    decoder frees the HF weights it replaces (`LeanLlamaDecoder`), so `model` must not run again."""

    from engine.hf_decoder import HFDecoder
    from engine.lean import TWO_PASS_DOWN_MIN_READ, TWO_PASS_DOWN_TAIL, LeanLlamaDecoder, supports_lean
    from engine.llama_cpp_decoder import find_gguf, llama_cpp_available

    device_type = model.device.type
    gguf = find_gguf(Path(folder)) if folder else None
    blocker = llama_cpp_blocker(device_type, gguf, llama_cpp_available())
    chosen, reason = choose_runtime(runtime, quantization, blocker)
    quantization_reason = ""
    if quantization == "auto" and chosen == "torch":
        quantization, quantization_reason = choose_target_quantization(
            "auto", device_type, _dtype_name(model), model.num_parameters()
        )
    if chosen == "llama.cpp" and gguf is not None:
        from engine.llama_cpp_decoder import LlamaCppDecoder

        decoder = LlamaCppDecoder(gguf, window, threads=threads)
        expected = int(model.get_output_embeddings().weight.shape[0])
        if decoder.vocab_size == expected:
            return decoder, RuntimeChoice("llama.cpp", gguf.name, reason)
        decoder.close()
        if runtime == "llama.cpp":
            raise RuntimeUnavailable(f"{gguf.name} has {decoder.vocab_size} tokens, the target {expected}")
        reason = f"{gguf.name} has {decoder.vocab_size} tokens, the target {expected}"
    dtype = _dtype_name(model)
    if supports_lean(model):
        checked: Quantization = quantization  # type: ignore[assignment]  # validated by choose_runtime
        weights = dtype if quantization == "none" else f"{dtype} + {quantization} weights"
        lean = LeanLlamaDecoder(
            model,
            window,
            checked,
            release=release,
            two_pass_down_tail=TWO_PASS_DOWN_TAIL,
            two_pass_down_min_read=TWO_PASS_DOWN_MIN_READ,
        )
        why = f"{reason}; {quantization_reason}" if quantization_reason else reason
        if device_type == "cpu":
            why = f"{cpu_class()} CPU; {why}"
        return lean, RuntimeChoice("lean", weights, why)
    if quantization not in ("none", "auto") and quantization_reason == "":
        raise RuntimeUnavailable(f"{quantization} weights need a Llama-family target (the lean decoder)")
    return HFDecoder(model, window), RuntimeChoice("transformers", dtype, reason)


def choose_draft_quantization(
    requested: str, device_type: str, capability: str | None = None, params: int | None = None
) -> tuple[Quantization, str]:
    """`engine.hardware.choose_draft_quantization`, with a bad name raised as `RuntimeUnavailable`."""
    try:
        return _choose_draft_quantization(requested, device_type, capability, params)
    except ValueError as error:
        raise RuntimeUnavailable(str(error)) from None


def build_draft_decoder(
    model: PreTrainedModel, window: int, *, quantization: str = "auto", release: bool = False
) -> tuple[CausalDecoder, RuntimeChoice]:
    """The draft model's decoder: the lean one (weights quantized per `choose_draft_quantization`) for
    Llama-family drafts, transformers' forward otherwise."""
    from engine.hf_decoder import HFDecoder
    from engine.lean import LeanLlamaDecoder, supports_lean

    if not supports_lean(model):
        if quantization not in ("auto", "none"):
            raise RuntimeUnavailable(
                f"{quantization} draft weights need a Llama-family draft (the lean decoder)"
            )
        return HFDecoder(model, window), RuntimeChoice("transformers", _dtype_name(model), "not Llama-family")
    chosen, reason = choose_draft_quantization(quantization, model.device.type, params=model.num_parameters())
    dtype = _dtype_name(model)
    weights = dtype if chosen == "none" else f"{dtype} + {chosen} weights"
    # Quantized layers keep their full-precision weights for reading prompts (`engine.quantize.SplitLinear`).
    # A draft's rounding never changes the output, so it takes the faster batched paths (rows_as_steps off).
    decoder = LeanLlamaDecoder(
        model, window, chosen, release=release, dense_for_many=chosen != "none", rows_as_steps=False
    )
    return decoder, RuntimeChoice("lean", weights, reason)


def _dtype_name(model: PreTrainedModel) -> str:
    import torch

    return {torch.bfloat16: "bf16", torch.float32: "fp32"}.get(model.dtype, str(model.dtype))
