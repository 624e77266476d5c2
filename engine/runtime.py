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
    if quantization not in QUANTIZATIONS:
        raise RuntimeUnavailable(
            f"unknown quantization {quantization!r}; choose one of {', '.join(QUANTIZATIONS)}"
        )
    if requested == "llama.cpp":
        if blocker is not None:
            raise RuntimeUnavailable(f"cannot run llama.cpp: {blocker}")
        return "llama.cpp", "requested"
    if requested == "torch":
        return "torch", "requested"
    if quantization != "none":
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
    from engine.lean import LeanLlamaDecoder, supports_lean
    from engine.llama_cpp_decoder import find_gguf, llama_cpp_available

    device_type = model.device.type
    gguf = find_gguf(Path(folder)) if folder else None
    blocker = llama_cpp_blocker(device_type, gguf, llama_cpp_available())
    chosen, reason = choose_runtime(runtime, quantization, blocker)
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
        lean = LeanLlamaDecoder(model, window, checked, release=release)
        return lean, RuntimeChoice("lean", weights, reason)
    if quantization != "none":
        raise RuntimeUnavailable(f"{quantization} weights need a Llama-family target (the lean decoder)")
    return HFDecoder(model, window), RuntimeChoice("transformers", dtype, reason)


# The draft model's precision never changes the output, only how many drafts the target accepts, so where
# torch's packed int8 kernel is fast the draft runs with int8 weights: its step is bound by reading its
# weights, and int8 halves bf16's bytes. That kernel is fast only with AVX-512: on an AVX-512/AMX CPU it ran
# SmolLM2-135M's step matmuls in 6.2 ms against 15 (bf16) and 17 (fp32) (STACK-NOTES); on an AVX2-only CPU
# one 9728x896 projection took 9.0 ms int8, 20 ms int4, 3.3 ms fp32 for one token, and 10-20x fp32's time
# for 5-64 tokens (bench/results/decode-speed-qwen*.md), so there the draft keeps the model's dtype.
DRAFT_AUTO_QUANTIZATION: Quantization = "int4"


def cpu_capability() -> str:
    """torch's vector ISA on this CPU ("AVX512", "AVX2", "DEFAULT", ...)."""
    import torch

    return str(torch.backends.cpu.get_cpu_capability())


# Below this size a draft's step is bound by per-call overhead, not by reading its weights, and the packed
# int4 kernel's own overhead dominates: the bundled 2.9M-parameter draft's step, as the engine's step-cost
# timer priced it in `specls bench throughput`, took 5.2 ms with int4 weights against 1.2 ms in fp32, while
# Qwen2.5-Coder-0.5B's halved (45 against 86 ms in bf16).
DRAFT_QUANTIZE_MIN_PARAMS = 100_000_000


def choose_draft_quantization(
    requested: str, device_type: str, capability: str | None = None, params: int | None = None
) -> tuple[Quantization, str]:
    """The draft model's weight quantization and why: an explicit request wins; "auto" is
    DRAFT_AUTO_QUANTIZATION on an AVX-512 CPU (where the packed kernel is fast) for a draft of at least
    DRAFT_QUANTIZE_MIN_PARAMS parameters (unknown size: assumed large), and none elsewhere."""
    if requested != "auto":
        if requested not in QUANTIZATIONS:
            raise RuntimeUnavailable(
                f"unknown draft quantization {requested!r}; choose auto or one of {', '.join(QUANTIZATIONS)}"
            )
        return requested, "requested"
    if device_type != "cpu":
        return "none", f"packed int8/int4 kernels are CPU only, the device is {device_type}"
    if params is not None and params < DRAFT_QUANTIZE_MIN_PARAMS:
        return "none", f"a {params / 1e6:.1f}M-parameter draft's step is overhead-bound; int4 would slow it"
    capability = capability if capability is not None else cpu_capability()
    if "AVX512" not in capability:
        return (
            "none",
            f"torch's packed int4/int8 kernels are slower than full precision without AVX-512 (CPU: {capability})",
        )
    return (
        DRAFT_AUTO_QUANTIZATION,
        "a draft's precision changes only acceptance; int4 weights halve its one-token step on AVX-512 "
        "(full-precision weights kept for reading prompts)",
    )


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
    decoder = LeanLlamaDecoder(model, window, chosen, release=release, dense_for_many=chosen != "none")
    return decoder, RuntimeChoice("lean", weights, reason)


def _dtype_name(model: PreTrainedModel) -> str:
    import torch

    return {torch.bfloat16: "bf16", torch.float32: "fp32"}.get(model.dtype, str(model.dtype))
