"""Every hardware choice the engine makes, each in one function that returns the choice and its reason.

The rules, in the order a load applies them (`specls doctor`, `specls serve` and every benchmark call the same
functions, so a figure in bench/results/ ran what a user runs):
- the CPU class: torch's own vector capability (`cpu_capability`), so `ATEN_CPU_CAPABILITY=avx2` lowers it
  for every rule at once, and native bf16 (`native_bf16`) on top of it;
- the dtype (`engine.models.choose_dtype`): bf16 where the CPU computes it natively, fp32 elsewhere;
- the target's and the draft's projections (`choose_target_quantization`, `choose_draft_quantization`):
  W8A8 (`engine.quantize.RowwiseInt8Linear`) on a CPU without native bf16, int4 draft steps on AVX-512,
  the model's dtype elsewhere;
- threads (`configure_threads`);
- the model loaded when none is named (`choose_default_model`), before any of the above, from a calibration
  of this machine on the candidate's own shapes (`engine.calibration`).

One size threshold serves them all: below OVERHEAD_BOUND_PARAMS a decode step is per-call overhead, not
reading weights, so neither bf16, nor quantized weights, nor a second thread make it faster.
"""

from __future__ import annotations

from collections.abc import Collection
from pathlib import Path

from engine.api import QUANTIZATIONS, Quantization
from engine.catalog_entries import CATALOG, DEFAULT_LARGE_MODEL, DEFAULT_MODEL
from engine.costs import FirstLineEstimate

# Measured on the bundled pair (2.9M and 10M parameters): whole-model bf16 slower than fp32 (STACK-NOTES); the
# draft's int4 step 5.2 ms against 1.2 ms in fp32 (`specls bench throughput`'s step-cost timer); plain
# decoding at 105 tok/s with one thread, 17-47 with two beside a busy neighbour. Qwen2.5-Coder-0.5B (494M),
# the smallest model where weights are the cost, gains from each.
OVERHEAD_BOUND_PARAMS = 100_000_000

_BF16_CPU_FLAGS = ("avx512_bf16", "amx_bf16")

# A second thread only adds OpenMP synchronisation to an overhead-bound step, and when anything else runs on
# the other core it stalls every step (bundled pair, 2-core CPU: plain decoding 105 tok/s at 1 thread, 17-47
# tok/s at 2 with a busy neighbour).
SINGLE_THREAD_BELOW_PARAMS = OVERHEAD_BOUND_PARAMS


def default_threads(num_threads: int | None = None, target_params: int | None = None) -> int:
    """The thread count `configure_threads` sets: one for small models (see SINGLE_THREAD_BELOW_PARAMS);
    otherwise up to 8, as scaling stops there."""
    import os

    import torch

    if num_threads is None and target_params is not None and target_params < SINGLE_THREAD_BELOW_PARAMS:
        num_threads = 1
    if num_threads is None:
        num_threads = min(torch.get_num_threads(), os.cpu_count() or 1, 8)
    return max(1, num_threads)


def configure_threads(num_threads: int | None = None, target_params: int | None = None) -> int:
    """Set torch's threads to `default_threads`; returns what torch then uses."""
    import torch

    torch.set_num_threads(default_threads(num_threads, target_params))
    return torch.get_num_threads()


def cpu_capability() -> str:
    """torch's vector ISA on this CPU ("AVX512", "AVX2", "DEFAULT", ...); ATEN_CPU_CAPABILITY lowers it."""
    import torch

    return str(torch.backends.cpu.get_cpu_capability())


def native_bf16(cpuinfo: str | None = None, capability: str | None = None) -> tuple[bool, str]:
    """Whether this CPU computes bf16 natively (AVX512-BF16 or AMX) under torch's capability, and the evidence.

    A lowered capability (AVX2) wins over the flags: torch then runs no AVX-512 kernel, bf16 included. The
    flags come from /proc/cpuinfo (or `cpuinfo`, for tests); where that file does not exist (macOS, Windows)
    torch's own probe answers. Without either instruction set bf16 arithmetic is emulated and slower than fp32.
    """
    if cpuinfo is None:
        capability = capability if capability is not None else cpu_capability()
        if "AVX512" not in capability:
            return False, f"torch runs {capability} kernels on this CPU"
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
        except OSError:
            cpuinfo = None
    if cpuinfo is not None:
        flags: set[str] = set()
        for line in cpuinfo.splitlines():
            if line.startswith("flags"):
                flags.update(line.partition(":")[2].split())
                break
        found = [flag for flag in _BF16_CPU_FLAGS if flag in flags]
        if found:
            return True, f"CPU flags {', '.join(found)}"
        return False, "no avx512_bf16 or amx_bf16 among the CPU flags"
    import torch

    probes = [
        getattr(torch._C._cpu, name, None) for name in ("_is_avx512_bf16_supported", "_is_amx_tile_supported")
    ]
    if any(probe is not None and probe() for probe in probes):
        return True, "torch reports AVX512-BF16 or AMX"
    return False, "torch reports neither AVX512-BF16 nor AMX"


def cpu_class(capability: str | None = None, cpuinfo: str | None = None) -> str:
    """The CPU class every benchmark row names: "AMX/AVX512-BF16", "AVX-512 (no bf16)" or "AVX2-only", with
    "(emulated)" where torch's capability was lowered below what the CPU's flags offer."""
    capability = capability if capability is not None else cpu_capability()
    if "AVX512" in capability:
        return "AMX/AVX512-BF16" if native_bf16(cpuinfo, capability)[0] else "AVX-512 (no bf16)"
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
        except OSError:
            cpuinfo = ""
    lowered = " avx512f" in cpuinfo or " avx512f\n" in cpuinfo
    name = "AVX2-only" if "AVX2" in capability else f"{capability} (no AVX2)"
    return f"{name} (emulated: torch capability lowered on an AVX-512 CPU)" if lowered else name


TARGET_QUANTIZATIONS = ("auto", *QUANTIZATIONS)


def choose_target_quantization(
    requested: str, device_type: str, dtype_name: str, params: int | None
) -> tuple[Quantization, str]:
    """The target's projections and why: an explicit request wins; "auto" is W8A8 on a CPU that runs fp32
    (no native bf16) for a model of at least OVERHEAD_BOUND_PARAMS, and the model's dtype elsewhere."""
    if requested != "auto":
        if requested not in QUANTIZATIONS:
            raise ValueError(
                f"unknown quantization {requested!r}; choose one of {', '.join(TARGET_QUANTIZATIONS)}"
            )
        return requested, "requested"  # checked against QUANTIZATIONS
    if device_type != "cpu":
        return "none", f"{dtype_name} on {device_type}"
    if dtype_name != "fp32":
        return "none", f"{dtype_name} runs natively on this CPU"
    if params is not None and params < OVERHEAD_BOUND_PARAMS:
        return "none", f"a {params / 1e6:.1f}M-parameter model's step is overhead-bound"
    from engine.quantize import rowwise_int8_available

    if not rowwise_int8_available():
        return "none", "this torch build has no fbgemm integer kernels"
    return "w8a8", W8A8_REASON


W8A8_REASON = (
    "fp32 on a CPU: int8 weights and per-row int8 activations (fbgemm) read a quarter of fp32's bytes; "
    "token choices exact to int8 weights, prompts read in one pass"
)

# A draft's precision never changes the output, only how many drafts the target accepts. torch's packed int4
# kernel is fast only with AVX-512 (Qwen2.5-Coder-0.5B's step 45 against 86 ms in bf16 on AMX); without it
# that kernel runs scalar code for fp32 activations, and W8A8 is the fast path.
DRAFT_AUTO_QUANTIZATION: Quantization = "int4"


def choose_draft_quantization(
    requested: str, device_type: str, capability: str | None = None, params: int | None = None
) -> tuple[Quantization, str]:
    """The draft model's projections and why: an explicit request wins; "auto" is DRAFT_AUTO_QUANTIZATION
    on an AVX-512 CPU and W8A8 on others, for a draft of at least OVERHEAD_BOUND_PARAMS parameters (unknown
    size: assumed large); the model's dtype off CPU."""
    if requested != "auto":
        if requested not in QUANTIZATIONS:
            raise ValueError(
                f"unknown draft quantization {requested!r}; choose auto or one of {', '.join(QUANTIZATIONS)}"
            )
        return requested, "requested"  # checked against QUANTIZATIONS
    if device_type != "cpu":
        return "none", f"packed int8/int4 kernels are CPU only, the device is {device_type}"
    if params is not None and params < OVERHEAD_BOUND_PARAMS:
        return "none", f"a {params / 1e6:.1f}M-parameter draft's step is overhead-bound; int4 would slow it"
    capability = capability if capability is not None else cpu_capability()
    if "AVX512" not in capability:
        return (
            "w8a8",
            f"torch's packed int4/int8 kernels run scalar code without AVX-512 (CPU: {capability}); "
            "fbgemm's integer matmul does not",
        )
    return (
        DRAFT_AUTO_QUANTIZATION,
        "a draft's precision changes only acceptance; int4 weights halve its one-token step on AVX-512 "
        "(full-precision weights kept for reading prompts)",
    )


def choose_default_model(
    device_type: str,
    bf16_native: tuple[bool, str],
    pulled: Collection[str],
    estimate: FirstLineEstimate | str | None = None,
) -> tuple[str | None, str]:
    """The catalog model to load when none is named, and why; None: the bundled pair (nothing usable pulled).

    The larger model, drafted by the smaller, wherever its keystroke budget fits: on any CUDA GPU, and on a
    CPU where `estimate` (its first line in a just-opened file, estimated before loading by
    `engine.calibration` from a timing of its own projection shape on this machine, in bf16 where the CPU
    has it natively, else in W8A8) fits FIRST_SUGGESTION_S, and its first line at a line start, the prompt
    cached, fits LINE_START_SUGGESTION_S.
    A string `estimate` says why there is none. Native bf16 alone does not make a CPU fast enough: on the
    2-core AMX Xeon the 1.5B's bf16 step streams 3.1 GB of weights, ~290 ms on one core
    (bench/results/decode-speed-qwen15-pair-bf16-amx-vs-llama-server-cpu.md) and ~140 ms on both while
    nothing else runs, so its first line is estimated at ~1.5-1.9 s even drafted (loaded, it measured 1.44 s
    on an idle machine: at the budget's edge), and at a line start 1.3 s: in a keystroke replay there it
    showed ghost text at 9.5% of the keys, the 0.5B at 53-62%. A CPU without native bf16 runs either model
    in W8A8 (`choose_target_quantization`): on a 2-core Xeon without bf16, with AVX2 kernels, the loaded
    1.5B pair stepped in 112 ms and read 61 prompt tokens/s, a line start's first line ~1.2 s, past the
    budget; a CPU with more cores and memory bandwidth may afford it. Without an estimate, the smaller.
    The server confirms the choice after load with the loaded model's own measured costs
    (`lsp_server.scheduling.budget.first_line_fit`, the same arithmetic).
    """
    large, small = DEFAULT_LARGE_MODEL, DEFAULT_MODEL
    native, evidence = bf16_native
    affords: bool | None  # None: it may, once pulled and calibrated
    if device_type == "cuda":
        affords, why = (
            True,
            "a CUDA GPU (no calibration needed: the 1.5B pair fits its keystroke budget there)",
        )
    elif device_type == "cpu" and native and isinstance(estimate, FirstLineEstimate):
        affords = estimate.fits()
        why = f"on this CPU with native bf16 ({evidence}) the {large} pair's {estimate.detail()}"
    elif device_type == "cpu" and native:
        affords = None if large not in pulled else False
        why = f"a CPU with native bf16 ({evidence}), but the {large}'s keystroke budget was not estimated"
        why += f" ({estimate})" if estimate else ""
    elif device_type == "cpu" and isinstance(estimate, FirstLineEstimate):
        affords = estimate.fits()
        why = f"on this CPU without native bf16 ({evidence}) the {large} pair's W8A8 {estimate.detail()}"
    elif device_type == "cpu":
        # Not suggested for a pull: on the 2-core Xeon (AVX2 kernels) the pair's W8A8 first line took 1.2 s
        # at a line start, past the budget; a calibration says where it fits once the model is pulled.
        affords = False
        why = f"no native bf16 ({evidence}): the {large}'s W8A8 keystroke budget was not estimated"
        why += f" ({estimate})" if estimate else f" (a calibration estimates it where the {large} is pulled)"
    else:
        affords, why = False, f"the {large} was never measured on {device_type}"
    draft = CATALOG[large].draft_model
    if affords and large in pulled:
        drafted = (
            f"drafted by {draft}" if draft in pulled else f"`specls pull {draft}` lets {draft} draft for it"
        )
        return large, f"{why} affords the {large} (better suggestions than the {small}); {drafted}"
    if affords is None:  # a bf16 CPU without the large model: whether it fits is measured once it is pulled
        maybe = f"`specls pull {large}` may give better suggestions: it is the default where a calibration "
        maybe += "finds it fits the keystroke budget"
        if small in pulled:
            return small, f"only the {small} is pulled; on this CPU with native bf16 ({evidence}) {maybe}"
        return None, f"nothing is pulled, so the bundled pair runs: `specls pull {small}`; {maybe}"
    if affords and small in pulled:
        return small, (
            f"{why} affords the {large}, but only the {small} is pulled: `specls pull {large}` would give "
            "better suggestions on this machine"
        )
    if affords:
        return (
            None,
            f"nothing is pulled, so the bundled pair runs; {why} affords the {large}: `specls pull {large}`",
        )
    if small in pulled:
        estimated = native or isinstance(estimate, FirstLineEstimate)
        return small, f"{why}: the {small}" if device_type == "cpu" and estimated else why
    anyway = f" (`--target {large}` runs the pulled {large} anyway)" if large in pulled else ""
    return None, f"the {small} is not pulled, so the bundled pair runs: `specls pull {small}`{anyway}; {why}"
