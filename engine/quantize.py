"""Quantized projections for the lean decoder: weight-only int8 per output channel and int4 in groups of 32
input features (gpt-fast style), and W8A8 (`RowwiseInt8Linear`: int8 weights and activations, for CPUs
without native bf16).

Why: one decode step of a small model reads every weight once, so it is bound by memory bandwidth and
per-call overhead; int8 halves the bytes of bf16, int4 quarters them. Activations stay in the model's dtype.
On CPU the matmuls run torch's packed kernels (`_weight_int8pack_mm`, `_weight_int4pack_mm_for_cpu`); on
other devices the weights are dequantized per call, which is correct but saves memory only. Unquantized bf16
weights on CPU are reordered once for oneDNN (`PrepackedBf16Linear`). A draft model may keep both
(`SplitLinear`): quantized weights for its one-token steps, full precision for reading the prompt.
"""

from __future__ import annotations

import threading
import warnings
from typing import Protocol

import torch
import torch.nn.functional as F

from engine.api import QUANTIZATIONS
from engine.api import Quantization as Quantization  # re-exported: the lean decoder names it from here

INT4_GROUP = 32  # input features sharing one int4 scale and zero point
_INT4_INNER_K_TILES = 2  # packing parameter of the int4 kernels (the CPU one ignores it)


class Linear(Protocol):
    """y = x @ W.T + b for x of shape [..., in_features]."""

    def __call__(self, x: torch.Tensor) -> torch.Tensor: ...


def read_prompt(linear: Linear, x: torch.Tensor) -> torch.Tensor:
    """The projection as used to read a prompt (no token is chosen from it): a linear with a faster, rougher
    path for that (`RowwiseInt8Linear.read_prompt`) takes it; every other computes as always."""
    fast = getattr(linear, "read_prompt", None)
    return fast(x) if fast is not None else linear(x)


class DenseLinear:
    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None = None) -> None:
        self.weight, self.bias = weight, bias

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x, self.weight, self.bias)


class PrepackedBf16Linear:
    """bf16 weights reordered once into oneDNN's blocked layout, as torch.compile's CPU freezing does.

    Why: `F.linear` on a bf16 CPU weight runs the same oneDNN kernel but reorders the weight on every call;
    reordering once makes a decode-step projection about 1.5-2x faster, with the same result.
    """

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None = None) -> None:
        self.packed = torch.ops.mkldnn._reorder_linear_weight(weight, 1)
        self.bias = bias
        self.out_features = weight.shape[0]

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        flat = torch.ops.mkldnn._linear_pointwise(
            x.reshape(-1, x.shape[-1]), self.packed, self.bias, "none", [], ""
        )
        y: torch.Tensor = flat.view(*x.shape[:-1], self.out_features)
        return y


class Int8Linear:
    """Symmetric int8 weights with one scale per output channel."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None = None) -> None:
        self.int8, scales = quantize_int8(weight)
        self.scales = scales.to(weight.dtype)
        self.bias = bias
        self.out_features = weight.shape[0]
        self.packed_kernel = weight.device.type == "cpu"

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        if self.packed_kernel:
            flat = torch._weight_int8pack_mm(x.reshape(-1, x.shape[-1]), self.int8, self.scales)
            y: torch.Tensor = flat.view(*x.shape[:-1], self.out_features)
        else:
            y = F.linear(x, self.int8.to(x.dtype)) * self.scales
        return y if self.bias is None else y + self.bias


class Int4Linear:
    """Asymmetric int4 weights in groups of INT4_GROUP input features; CPU only (torch's packed kernel)."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None = None) -> None:
        if not int4_fits(weight):
            raise ValueError(
                f"int4 needs a CPU weight with in_features divisible by {INT4_GROUP} and out_features by "
                f"{_INT4_OUT_MULTIPLE}: {tuple(weight.shape)}"
            )
        codes, scales_and_zeros = quantize_int4(weight)
        self.packed = torch.ops.aten._convert_weight_to_int4pack_for_cpu(codes, _INT4_INNER_K_TILES)
        self.scales_and_zeros = scales_and_zeros.to(weight.dtype)
        self.bias = bias
        self.out_features = weight.shape[0]

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        flat = torch.ops.aten._weight_int4pack_mm_for_cpu(
            x.reshape(-1, x.shape[-1]), self.packed, INT4_GROUP, self.scales_and_zeros
        )
        y: torch.Tensor = flat.view(*x.shape[:-1], self.out_features)
        return y if self.bias is None else y + self.bias


# Activation codes of the W8A8 kernel: 7 bits, so that no pair of u8 x s8 products can saturate the 16-bit
# sums of AVX2's vpmaddubsw (127 * 128 * 2 < 32767): the same integers on every x86 CPU, VNNI or not.
_ACTIVATION_LOW, _ACTIVATION_HIGH = -64.0, 63.0


class RowwiseInt8Linear:
    """W8A8: int8 weights per output channel, activations quantized to int8 per row, integer matmul in fbgemm.

    Why: on a CPU without native bf16 (AVX2 only) torch's packed weight-only kernels run scalar code for fp32
    activations, slower than fp32 itself, while fbgemm's integer GEMM reads a quarter of fp32's bytes.
    fbgemm quantizes its input with ONE scale per call, so the rows of a verify would change each other's
    rounding and a verify would no longer compute what a one-token step computes. Here each row is scaled
    to integers on its own, and two constant columns (-64 and 63, against zero weights) pin the kernel's
    own scale to exactly 1 and its zero point to 64, so it quantizes nothing further. Integer sums are
    exact, so every row's result is bit for bit what it would be alone: a verify's projections equal its steps'.

    A call that chooses tokens (`__call__`) quantizes the first pass's rounding error again, as extra rows
    of the same matmul (the weights are read once): activation error falls from ~1% to ~0.01%, and
    Qwen2.5-Coder-0.5B's greedy tokens agree with int8-weight fp32 ones as often as without activation
    quantization (506 of 512 on this project's files, measured when the second pass took its own row maximum;
    its scale is now the first's / 126, which bounds the same error). Reading a prompt (`read_prompt`) takes one pass: twice
    as fast where the integer matmul is compute-bound, at the price of rougher keys and values (the lean
    decoder reads a prompt's last tokens in both passes where one pass errs most: `engine.lean`).
    """

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None = None) -> None:
        codes, scales = quantize_int8(weight)
        out_features, in_features = codes.shape
        padded = torch.cat([codes, codes.new_zeros(out_features, 2)], dim=1)
        with warnings.catch_warnings():  # torch's quantized tensors warn that torchao will replace them
            warnings.simplefilter("ignore")
            quantized = torch._make_per_channel_quantized_tensor(
                padded, scales.double(), torch.zeros(out_features, dtype=torch.long), 0
            )
            self.packed = torch.ops.quantized.linear_prepack(quantized, None)
        self.pins = torch.tensor([_ACTIVATION_LOW, _ACTIVATION_HIGH])
        self.bias = None if bias is None else bias.float()
        self.in_features, self.out_features = in_features, out_features

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        flat, rows = self._rows(x)
        scales, scaled = _row_scales(flat)
        codes = self._codes(2 * rows)
        first = torch.round(scaled, out=codes[:rows, : self.in_features])
        # The first pass errs by at most half a step, so the second pass's scale is the first's / 126: its
        # codes fill [-63, 63] as the first pass's do, and no second maximum is needed.
        torch.round(scaled.sub_(first).mul_(_RESIDUAL_STEPS), out=codes[rows:, : self.in_features])
        products = self._matmul(codes)
        y = torch.add(products[:rows], products[rows:], alpha=1 / _RESIDUAL_STEPS).mul_(scales)
        return self._finish(y, x)

    def read_prompt(self, x: torch.Tensor) -> torch.Tensor:
        flat, rows = self._rows(x)
        scales, scaled = _row_scales(flat)
        codes = self._codes(rows)
        torch.round(scaled, out=codes[:, : self.in_features])
        return self._finish(self._matmul(codes).mul_(scales), x)

    def _rows(self, x: torch.Tensor) -> tuple[torch.Tensor, int]:
        flat = x.reshape(-1, self.in_features)
        return (flat if flat.dtype == torch.float32 else flat.float()), flat.shape[0]

    def _codes(self, rows: int) -> torch.Tensor:
        return _code_buffer(rows, self.in_features, self.pins)

    def _matmul(self, codes: torch.Tensor) -> torch.Tensor:
        products: torch.Tensor = torch.ops.quantized.linear_dynamic(codes, self.packed, True)
        return products

    def _finish(self, y: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        if self.bias is not None:
            y = y.add_(self.bias)
        return y.view(*x.shape[:-1], self.out_features).to(x.dtype)


_RESIDUAL_STEPS = 126.0  # second-pass codes per first-pass step
# Code buffers are kept for the shapes a decode loop repeats (steps and verifies of up to 16 drafts, both
# passes), per thread and per input width, so every projection of a width shares one: a few MB in all.
_BUFFERED_ROWS = 34
_buffers = threading.local()


def _code_buffer(rows: int, in_features: int, pins: torch.Tensor) -> torch.Tensor:
    """A [rows, in_features + 2] buffer whose last two columns hold the pins."""
    kept: dict[tuple[int, int], torch.Tensor] = getattr(_buffers, "by_shape", None) or {}
    _buffers.by_shape = kept
    codes = kept.get((rows, in_features))
    if codes is None:
        codes = torch.empty(rows, in_features + 2)
        codes[:, in_features:] = pins
        if rows <= _BUFFERED_ROWS:
            kept[(rows, in_features)] = codes
    return codes


def _row_scales(rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """One scale per row, and the rows in units of it: within [-63, 63], so rounding needs no clamp."""
    # abs().amax(), not vector_norm(ord=inf): the same values, 5-14x faster on AVX2 for the 128 x 896-4,864
    # rows of a prompt piece, where the inf-norm took 7% of a prompt's reading.
    scales = rows.abs().amax(dim=-1, keepdim=True).clamp_(min=1e-30)
    scales = scales.div_(_ACTIVATION_HIGH)
    return scales, rows / scales


def rowwise_int8_available() -> bool:
    """fbgemm's dynamic linear is in this torch build (x86 CPUs)."""
    return "fbgemm" in torch.backends.quantized.supported_engines


# Up to this many rows the quantized kernels beat bf16 prepacked for oneDNN; from there on they lose, and a
# prompt read through them is 6x slower. Measured on Qwen2.5-Coder-0.5B, one thread, AMX, 1,000 cached
# positions, ms per forward of 1 / 2 / 3 / 4 tokens: bf16 86 / 91 / 93 / 94, int4 45 / 52 / 63 / 77,
# int8 69 / 82 / 96 / 104; prompt tokens/s bf16 644, int4 107, int8 104.
QUANTIZED_MAX_ROWS = 4


class SplitLinear:
    """Quantized weights for inputs of a few rows (decode steps), full precision for more (prompt reading).

    Why: a draft model spends its time in one-token steps, which read every weight and are bound by memory,
    so low-bit weights make them up to 2x faster; but it must also read the prompt, where the packed
    low-bit kernels are 6x slower than bf16. Holding both costs the quantized copy's memory (a quarter or
    half of the bf16 weights); the two disagree in rounding only, which a draft may (it changes acceptance,
    never the output).
    """

    def __init__(self, few_rows: Linear, many_rows: Linear, max_few_rows: int = QUANTIZED_MAX_ROWS) -> None:
        self.few_rows, self.many_rows, self.max_few_rows = few_rows, many_rows, max_few_rows

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        rows = x.numel() // x.shape[-1]
        return self.few_rows(x) if rows <= self.max_few_rows else self.many_rows(x)


def quantize_int8(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Codes in [-127, 127] and float32 scales with weight ~= codes * scales[:, None]."""
    w = weight.float()
    scales = (w.abs().amax(dim=1) / 127).clamp(min=1e-10)
    codes = torch.round(w / scales[:, None]).clamp(-127, 127).to(torch.int8)
    return codes, scales


def quantize_int4(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Codes in [0, 15] (int32, [out, in]) and [in / group, out, 2] scales and zeros in float32.

    The kernel dequantizes (code - 8) * scale + zero, so zero = group min + 8 * scale.
    """
    out_features, in_features = weight.shape
    groups = weight.float().reshape(out_features, in_features // INT4_GROUP, INT4_GROUP)
    low, high = groups.amin(dim=-1), groups.amax(dim=-1)
    scales = ((high - low) / 15).clamp(min=1e-10)
    codes = torch.round((groups - low[..., None]) / scales[..., None]).clamp(0, 15)
    zeros = low + 8 * scales
    scales_and_zeros = torch.stack([scales, zeros], dim=-1).transpose(0, 1).contiguous()
    return codes.to(torch.int32).reshape(out_features, in_features), scales_and_zeros


_INT4_OUT_MULTIPLE = 16  # the CPU packing works in blocks of 16 output features


def int4_fits(weight: torch.Tensor) -> bool:
    out_features, in_features = weight.shape
    return (
        weight.device.type == "cpu"
        and in_features % INT4_GROUP == 0
        and out_features % _INT4_OUT_MULTIPLE == 0
    )


def make_linear(
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    quantization: Quantization,
    *,
    dense_for_many: bool = False,
) -> Linear:
    """The projection in `quantization` (int4 falls back to int8 where its packing does not fit the shape);
    with `dense_for_many` a quantized one keeps the full-precision weights too, for inputs of more than
    QUANTIZED_MAX_ROWS rows (`SplitLinear`)."""
    if quantization == "none":
        return _dense_linear(weight, bias)
    if quantization == "w8a8":  # reads prompts in its own fast pass: no full-precision copy needed
        return RowwiseInt8Linear(weight, bias)
    # A projection whose shape the int4 packing cannot take (an odd vocabulary) gets int8 instead.
    int4 = quantization == "int4" and int4_fits(weight)
    quantized: Linear = Int4Linear(weight, bias) if int4 else Int8Linear(weight, bias)
    return SplitLinear(quantized, _dense_linear(weight, bias)) if dense_for_many else quantized


def _dense_linear(weight: torch.Tensor, bias: torch.Tensor | None) -> Linear:
    if prepacked_bf16_fits(weight):
        return PrepackedBf16Linear(weight, bias)
    return DenseLinear(weight, bias)


def prepacked_bf16_fits(weight: torch.Tensor) -> bool:
    """A bf16 CPU weight on a torch whose oneDNN computes bf16 natively (AVX512-BF16 or AMX)."""
    if (
        weight.device.type != "cpu"
        or weight.dtype != torch.bfloat16
        or not torch.backends.mkldnn.is_available()
    ):
        return False
    supported = getattr(torch.ops.mkldnn, "_is_mkldnn_bf16_supported", None)
    return bool(supported is not None and supported())


def check_quantization(quantization: str, device: torch.device) -> Quantization:
    """The validated name; int4 is refused off CPU (no packed kernel there in this torch)."""
    if quantization not in QUANTIZATIONS:
        raise ValueError(f"unknown quantization {quantization!r}; choose one of {', '.join(QUANTIZATIONS)}")
    if quantization in ("int4", "w8a8") and device.type != "cpu":
        raise ValueError(f"{quantization} weights run on CPU only; use int8 or none on this device")
    return quantization
