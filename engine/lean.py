"""A lean Llama decoder: the weights of a Hugging Face `LlamaForCausalLM` (or `Qwen2ForCausalLM`, the same
block with q/k/v biases), run by a few plain tensor ops.

Why: at the bundled sizes the HF forward is dominated by per-call Python overhead. This path
keeps one preallocated key/value tensor per layer, written by position (gpt-fast style), so a rollback is
just forgetting positions: rejected slots are overwritten by the next forward. Attention is SDPA for a
prompt chunk and two grouped fp32 matmuls for a decode step or a small verify (`_attend_few`); in plain fp32
a verify's rows are computed one by one, as steps (`rows_as_steps`: the exact reference).
q/k/v and gate/up projections are fused into one matmul each; every projection, the vocabulary one included,
may hold int8 or int4 weights (`engine.quantize`); with `dense_for_many` (a draft model) the layers keep
the full-precision weights too, for reading prompts.

With `release=True` the decoder frees each Hugging Face weight it has replaced as it goes, so the process
holds one copy of the model (peak: that copy plus one layer or the vocabulary projection being repacked);
the HF module is left without layers and must not run again. That needs weights that are tensors of their
own, not views of one mapped file (`engine.models` reads local checkpoints that way).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
import torch.nn.functional as F

from engine.memory import return_freed_memory
from engine.quantize import Linear, Quantization, check_quantization, make_linear, read_prompt

if TYPE_CHECKING:
    from transformers import PreTrainedModel

# Prompt tokens per forward: bounds the attention mask and scores for long prompts. Measured on
# Qwen2.5-Coder-0.5B bf16 (AMX, one thread), prompt tokens/s at 1,000 / 2,000 tokens: pieces of 128 read
# 612 / 549, 256: 686 / 667, 512: 655 / 627, 1,024: 640 / 582.
PREFILL_CHUNK = 256
# Up to this many queries attention runs as grouped fp32 matmuls: torch's CPU SDPA for one bf16 query measured
# 4-8 ms a layer at 1,000-2,000 cached positions (0.5B shapes, one thread) against 0.6-1.3 ms this way, and
# bf16 batched matmuls on CPU are slower still (no oneDNN path). From ~8 queries on SDPA is as fast or faster.
FEW_QUERIES = 8
# An interruptible prefill (a request that may be cancelled, a warm-up) goes in pieces of this many tokens
# and checks between layers: a cancel waits for one layer of one piece, and nothing computed is lost (a
# piece stopped part-way keeps its hidden states, and the next prefill of the same tokens goes on from there).
INTERRUPTIBLE_CHUNK = 128
# W8A8 reads prompts in one 7-bit pass (`RowwiseInt8Linear.read_prompt`); in the MLP's down projection, whose
# input (the SwiGLU product) has rows led by a few large channels, that errs ~10% of the output against 1-7%
# elsewhere. A target reading at least TWO_PASS_DOWN_MIN_READ prompt tokens at once (a file opened, a jump, a
# paste) reads the last TWO_PASS_DOWN_TAIL of them in both passes there: the tokens nearest the cursor (a FIM
# prompt ends with the suffix and the cursor's line). With the tail on every read, 475 line starts (the 0.5B,
# AVX2 emulated) had 173 exact first lines against one pass's 164 (the whole prompt in two passes: 171, at
# ~1.25x the time), but the keystroke loop's re-reads are that short, and an AVX2 typist lost ghost text
# (37-50% of keys against 49-56%): shorter reads stay in one pass, and the line starts still gave 173.
# docs/precision.md.
TWO_PASS_DOWN_TAIL = 128
TWO_PASS_DOWN_MIN_READ = 256
# In fp32 (the exact reference) a forward that chooses tokens runs its projections on blocks of exactly this
# many rows, zero-padded: measured on an AMD EPYC (Zen 4), an fp32 matmul of 1-3 rows (5-7 and 9-11 on two
# threads) rounds differently from the same rows in a larger one, while every row of a fixed shape rounds
# alike wherever it sits. An fp32 step then costs ~1.8x (Qwen2.5-Coder-0.5B, 2 threads, AVX2 emulated).
EXACT_ROWS = 8


@dataclass
class _Partial:
    """A prefill piece stopped after `layers` layers: its tokens (which start right after the cached ones),
    and their hidden states after those layers. The cache holds their keys and values for those layers."""

    tokens: list[int]
    layers: int
    hidden: torch.Tensor


class _Stopped(Exception):
    def __init__(self, partial: _Partial) -> None:
        super().__init__("prefill stopped part-way")
        self.partial = partial


LEAN_MODEL_TYPES = ("llama", "qwen2")  # the same block; qwen2 adds q/k/v biases, fused with the weights


def supports_lean(model: PreTrainedModel) -> bool:
    """Llama-family checkpoints (Llama, Qwen2) with plain RoPE scaling, SiLU MLP and no sliding window."""
    config = model.config
    if getattr(config, "model_type", None) not in LEAN_MODEL_TYPES:
        return False
    if getattr(config, "use_sliding_window", False):
        return False
    rope = getattr(config, "rope_parameters", None) or {}
    return (
        rope.get("rope_type", "default") in ("default", "linear", "llama3")
        and getattr(config, "hidden_act", "silu") == "silu"
        and not getattr(config, "mlp_bias", False)
    )


def _fused_weight(projections: list[Any]) -> torch.Tensor:
    """The projections' weights stacked into one matrix, which the Hugging Face modules then view: the HF
    forward (a reference in tests, the fallback path) keeps working and the weights are held once, not twice
    (the fp32 pair of Qwen2.5-Coder 1.5B + 0.5B would otherwise need ~14 GB)."""
    fused = torch.cat([projection.weight for projection in projections])
    start = 0
    for projection in projections:
        rows = projection.weight.shape[0]
        projection.weight.data = fused[start : start + rows]
        start += rows
    return fused


class _Layer:
    def __init__(self, hf_layer: Any, quantization: Quantization, dense_for_many: bool) -> None:
        attn = hf_layer.self_attn
        mlp = hf_layer.mlp
        self.input_norm = hf_layer.input_layernorm.weight
        self.post_norm = hf_layer.post_attention_layernorm.weight
        qkv_weight = _fused_weight([attn.q_proj, attn.k_proj, attn.v_proj])
        biases = [attn.q_proj.bias, attn.k_proj.bias, attn.v_proj.bias]
        qkv_bias = torch.cat(biases) if all(b is not None for b in biases) else None
        self.qkv = make_linear(qkv_weight, qkv_bias, quantization, dense_for_many=dense_for_many)
        self.o = make_linear(
            attn.o_proj.weight, attn.o_proj.bias, quantization, dense_for_many=dense_for_many
        )
        gate_up_weight = _fused_weight([mlp.gate_proj, mlp.up_proj])
        self.gate_up = make_linear(gate_up_weight, None, quantization, dense_for_many=dense_for_many)
        self.down = make_linear(mlp.down_proj.weight, None, quantization, dense_for_many=dense_for_many)


class LeanLlamaDecoder:
    """`CausalDecoder` over a Llama checkpoint with a static cache of `max_length` positions."""

    def __init__(
        self,
        model: PreTrainedModel,
        max_length: int | None = None,
        quantization: Quantization = "none",
        *,
        release: bool = False,
        dense_for_many: bool = False,
        rows_as_steps: bool | None = None,
        two_pass_down_tail: int = 0,
        two_pass_down_min_read: int = 0,
    ) -> None:
        if not supports_lean(model):
            raise ValueError(
                f"the lean decoder supports Llama and Qwen2 checkpoints, not {model.config.model_type!r}"
            )
        config = model.config
        context = int(config.max_position_embeddings)
        self.max_length = min(max_length, context) if max_length else context
        self.vocab_size = int(model.get_output_embeddings().weight.shape[0])
        self.num_heads = int(config.num_attention_heads)
        self.num_kv_heads = int(getattr(config, "num_key_value_heads", None) or self.num_heads)
        self.head_dim = int(getattr(config, "head_dim", None) or config.hidden_size // self.num_heads)
        self.eps = float(config.rms_norm_eps)
        self.hidden_size = int(config.hidden_size)
        self.intermediate_size = int(config.intermediate_size)
        weight: torch.Tensor = model.get_input_embeddings().weight  # type: ignore[assignment]
        self.device, self.dtype = weight.device, weight.dtype
        self.quantization = check_quantization(quantization, self.device)
        # fp32 promises that a verify's rows are what one-token steps compute: by default it pads its
        # projections and attends row by row (`_project_rows`, `_attend_rows`). W8A8's projections are exact
        # per row anyway; its attention stays batched (exact rows cost a verify of 8 16% more there), so it
        # parts from plain output only at near-ties, as bf16 does.
        exact = self.dtype == torch.float32 and self.quantization == "none"
        self.rows_as_steps = exact if rows_as_steps is None else rows_as_steps
        # The last `two_pass_down_tail` tokens of a prompt read of at least `two_pass_down_min_read` take both
        # W8A8 passes in the down projection (TWO_PASS_DOWN_TAIL); a draft's rounding never changes the output,
        # so it keeps 0.
        self.two_pass_down_tail = two_pass_down_tail
        self.two_pass_down_min_read = two_pass_down_min_read
        with torch.inference_mode():
            inner: Any = model.model
            self.embed = inner.embed_tokens.weight
            self.layers = []
            for index in range(len(inner.layers)):
                self.layers.append(_Layer(inner.layers[index], self.quantization, dense_for_many))
                if release:  # the HF layer's weights now live (fused, repacked) in the lean layer
                    inner.layers[index] = torch.nn.Identity()
                    # Layer-sized tensors sit below glibc's mmap threshold: hand their pages back now, or
                    # the freed originals of every layer add up until the end of the load (1.9x peak).
                    return_freed_memory()
            self.final_norm = inner.norm.weight
            output: Any = model.get_output_embeddings()
            # The vocabulary projection is the largest matmul of a small model: quantized like the rest
            # (the embedding lookup keeps the full-precision table). It runs only where logits are read,
            # a few rows at a time, so it needs no full-precision copy for prompts.
            self.lm_head = make_linear(output.weight, None, self.quantization)
            if release and output.weight is not self.embed:  # a tied table stays: the lookup reads it
                output.weight = torch.nn.Parameter(output.weight.new_empty(0), requires_grad=False)
            if release:
                return_freed_memory()
            # HF's rotary module already applies rope_theta and any scaling type; tabulate it once, shaped
            # [max_length, 1, head_dim] to broadcast over heads. rotate_half(x) * sin equals
            # swap_halves(x) * signed_sin with the first half of sin negated, bit for bit (negation is exact).
            positions = torch.arange(self.max_length, device=self.device)
            cos, sin = inner.rotary_emb(weight[:1][None], positions[None])
            half = self.head_dim // 2
            self.cos = cos[0, :, None].to(self.dtype)
            self.signed_sin = torch.cat((-sin[0, :, :half], sin[0, :, half:]), dim=-1)[:, None].to(self.dtype)
            self.positions = positions
            shape = (len(self.layers), self.num_kv_heads, self.max_length, self.head_dim)
            self.keys = torch.zeros(shape, device=self.device, dtype=self.dtype)
            self.values = torch.zeros(shape, device=self.device, dtype=self.dtype)
        self._tokens: list[int] = []
        self._partial: _Partial | None = None

    def with_own_cache(self) -> LeanLlamaDecoder:
        """A decoder over the same weights with a cache of its own (empty), so a second prompt can be read
        without evicting this one's (`engine.service.LocalEngine.warm_aside`)."""
        other = copy.copy(self)
        # Uninitialised: attention reads only positions a forward wrote, and the pages become resident only as
        # they are written (a prompt of 1,500 tokens, not the whole window).
        other.keys, other.values = torch.empty_like(self.keys), torch.empty_like(self.values)
        other._tokens, other._partial = [], None
        return other

    @property
    def cached_tokens(self) -> list[int]:
        return list(self._tokens)

    def crop(self, length: int) -> None:
        # Positions past `length` stay in the tensors and are overwritten by the next forward.
        if length < len(self._tokens):
            self._partial = None  # it continued the tokens cropped away
        del self._tokens[max(0, length) :]

    def forward(self, token_ids: list[int]) -> torch.Tensor:
        return self._run(token_ids, logits=True)

    def forward_unless(self, token_ids: list[int], should_stop: Callable[[], bool]) -> torch.Tensor | None:
        """`forward`, checking `should_stop()` before every layer; None once it is true. A stopped forward
        leaves the cached tokens as they were: the keys and values it wrote lie past them, to be overwritten."""
        try:
            return self._run(token_ids, logits=True, should_stop=should_stop)
        except _Stopped:
            return None

    def prefill(self, token_ids: list[int]) -> None:
        """Append tokens whose logits nobody needs (the prompt): skips the vocabulary projection."""
        tail_start = self._tail_start(len(token_ids))
        done = 0
        while done < len(token_ids):
            end = _piece_end(done, PREFILL_CHUNK, tail_start)
            self._run(token_ids[done:end], logits=False, two_pass_down=done >= tail_start)
            done = end

    def prefill_interruptibly(self, token_ids: list[int], should_stop: Callable[[], bool]) -> int:
        """Prefill in pieces until `should_stop()`, checked before every layer. A piece stopped part-way
        is kept as a `_Partial`; a later prefill whose tokens start the same way resumes it from the layer
        where it stopped (a start of it suffices: attention is causal). Returns the tokens now cached."""
        tail_start = self._tail_start(len(token_ids))
        done = 0
        while done < len(token_ids):
            piece = token_ids[done : _piece_end(done, INTERRUPTIBLE_CHUNK, tail_start)]
            resume = self._resumable(piece)
            if resume is not None:  # its first layers keep the passes the stopped read gave them
                piece = resume.tokens
            try:
                self._run(
                    piece,
                    logits=False,
                    should_stop=should_stop,
                    resume=resume,
                    two_pass_down=done >= tail_start,
                )
            except _Stopped as stopped:
                self._partial = stopped.partial
                break
            done += len(piece)
        return done

    def _tail_start(self, count: int) -> int:
        """Where the tail read in two passes starts among `count` prompt tokens read at once (W8A8 only)."""
        if self.quantization != "w8a8" or count < self.two_pass_down_min_read:
            return count
        return max(0, count - self.two_pass_down_tail)

    def _resumable(self, piece: list[int]) -> _Partial | None:
        """The stopped piece's work that `piece` can reuse: its longest common start."""
        partial = self._partial
        if partial is None:
            return None
        shared = 0
        for mine, theirs in zip(partial.tokens, piece, strict=False):
            if mine != theirs:
                break
            shared += 1
        if shared == 0:
            return None
        return _Partial(partial.tokens[:shared], partial.layers, partial.hidden[:shared])

    @torch.inference_mode()
    def _run(
        self,
        token_ids: list[int],
        logits: bool,
        should_stop: Callable[[], bool] | None = None,
        resume: _Partial | None = None,
        two_pass_down: bool = False,
    ) -> torch.Tensor:
        self._partial = None  # this call writes where a stopped piece left its work
        count = len(token_ids)
        start = len(self._tokens)
        end = start + count
        if count == 0:
            return torch.empty(0, self.vocab_size)
        if end > self.max_length:
            raise ValueError(
                f"cache holds {self.max_length} positions; {start} cached + {count} new do not fit"
            )
        if resume is not None:
            first_layer, hidden = resume.layers, resume.hidden
        else:
            first_layer, hidden = 0, F.embedding(torch.tensor(token_ids, device=self.device), self.embed)
        cos, signed_sin = self.cos[start:end], self.signed_sin[start:end]
        rows_as_steps = logits and self.rows_as_steps  # each row attends alone: no mask
        mask = float_mask = None
        if count > 1 and not rows_as_steps:  # query i sits at position start + i and sees keys 0..start + i
            # Additive, built once: SDPA would turn a boolean mask into this in every layer.
            hidden_keys = self.positions[:end] > self.positions[start:end, None]
            float_mask = torch.zeros(hidden_keys.shape, device=self.device)
            float_mask.masked_fill_(hidden_keys, float("-inf"))
            mask = float_mask.to(self.dtype)
        # Reading a prompt chooses no token: projections may take their faster path (W8A8's single pass).
        project: Callable[[Linear, torch.Tensor], torch.Tensor] = _choose_tokens if logits else read_prompt
        if rows_as_steps and self.quantization == "none":  # quantized rows take their own kernels' shapes
            project = _project_rows
        # A prompt's tail may read the down projection as a token choice would (TWO_PASS_DOWN_TAIL).
        project_down = _choose_tokens if two_pass_down else project
        heads, kv_heads, head_dim = self.num_heads, self.num_kv_heads, self.head_dim
        rotated_width = (heads + kv_heads) * head_dim  # q and k columns of the fused projection
        norm_shape, eps = (self.hidden_size,), self.eps
        for index, (keys, values, layer) in enumerate(zip(self.keys, self.values, self.layers, strict=True)):
            if index < first_layer:
                continue
            if should_stop is not None and should_stop():
                raise _Stopped(_Partial(token_ids, index, hidden))
            qkv = project(layer.qkv, F.rms_norm(hidden, norm_shape, layer.input_norm, eps))
            # q and k heads take their rotary embedding together: one rope over [count, heads + kv_heads].
            qk = _rope(qkv[:, :rotated_width].view(count, heads + kv_heads, head_dim), cos, signed_sin)
            keys[:, start:end] = qk[:, heads:].transpose(0, 1)
            values[:, start:end] = qkv[:, rotated_width:].view(count, kv_heads, head_dim).transpose(0, 1)
            if rows_as_steps:
                attended = _attend_rows(qk[:, :heads], keys, values, start)
            elif count <= FEW_QUERIES:
                attended = _attend_few(qk[:, :heads], keys[:, :end], values[:, :end], float_mask)
            else:
                attended = F.scaled_dot_product_attention(
                    qk[:, :heads].transpose(0, 1)[None],
                    keys[None, :, :end],
                    values[None, :, :end],
                    attn_mask=mask,
                    enable_gqa=True,
                )[0].transpose(0, 1)
            hidden = hidden + project(layer.o, attended.reshape(count, heads * head_dim))
            gate, up = project(layer.gate_up, F.rms_norm(hidden, norm_shape, layer.post_norm, eps)).chunk(
                2, dim=-1
            )
            hidden = hidden + project_down(layer.down, F.silu(gate) * up)
        self._tokens.extend(token_ids)
        if not logits:
            return hidden.new_empty(0)
        hidden = F.rms_norm(hidden, norm_shape, self.final_norm, eps)
        return project(self.lm_head, hidden).float()


def _piece_end(done: int, chunk: int, tail_start: int) -> int:
    """The end of the prompt piece read from `done`: at most `chunk` tokens, and none across the tail's start."""
    end = done + chunk
    return min(end, tail_start) if done < tail_start else end


def _choose_tokens(linear: Linear, x: torch.Tensor) -> torch.Tensor:
    return linear(x)


def _project_rows(linear: Linear, x: torch.Tensor) -> torch.Tensor:
    """`linear(x)` on blocks of `EXACT_ROWS` rows, the last zero-padded: the same matmul shape for a step and
    for every block of a verify, so each row rounds as a step's would."""
    count = x.shape[0]
    padded = x.new_zeros(-(-count // EXACT_ROWS) * EXACT_ROWS, *x.shape[1:])
    padded[:count] = x
    blocks = [linear(block) for block in padded.split(EXACT_ROWS)]
    return torch.cat(blocks)[:count]


def _attend_rows(queries: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, start: int) -> torch.Tensor:
    """Causal attention of queries at positions start, start + 1, ..., each computed alone over the keys it
    sees, exactly as a one-token step at that position computes it. Batched attention rounds a row
    differently with the batch's shape (measured on an AMD EPYC), so an exact verify pays one small
    attention per row: ~0.1-0.2 ms a layer for Qwen2.5-Coder-0.5B at 1,000-2,000 cached positions."""
    rows = [
        _attend_few(queries[row : row + 1], keys[:, : start + row + 1], values[:, : start + row + 1], None)
        for row in range(queries.shape[0])
    ]
    return rows[0] if len(rows) == 1 else torch.cat(rows)


def _attend_few(
    queries: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, mask: torch.Tensor | None
) -> torch.Tensor:
    """Causal attention of a few queries [count, heads, head_dim] over keys and values [kv_heads, end,
    head_dim] as two matmuls per key/value head, in fp32; returns [count, heads, head_dim] in the input dtype.

    Each key/value head serves its group of query heads (head h reads kv head h // group, as HF's repeat_kv
    does), so the group's queries stack into one matrix and no key is copied per head. `mask` is the additive
    causal mask [count, end] (None for one query, which sees every cached key).
    """
    count, heads, head_dim = queries.shape
    kv_heads, end, _ = keys.shape
    group = heads // kv_heads
    scaled = queries.float() * head_dim**-0.5
    stacked = (
        scaled.view(count, kv_heads, group, head_dim).permute(1, 2, 0, 3).reshape(kv_heads, -1, head_dim)
    )
    scores = torch.matmul(stacked, keys.float().transpose(1, 2))  # [kv_heads, group * count, end]
    if mask is not None:
        scores = (scores.view(kv_heads, group, count, end) + mask).view(kv_heads, group * count, end)
    attended = torch.matmul(torch.softmax(scores, dim=-1), values.float())
    return (
        attended.view(kv_heads, group, count, head_dim)
        .permute(2, 0, 1, 3)
        .reshape(count, heads, head_dim)
        .to(queries.dtype)
    )


def _rope(x: torch.Tensor, cos: torch.Tensor, signed_sin: torch.Tensor) -> torch.Tensor:
    """Rotary embedding in HF's half-split layout, x * cos + rotate_half(x) * sin, as three ops."""
    count, heads, head_dim = x.shape
    swapped = x.view(count, heads, 2, head_dim // 2).flip(2).view(count, heads, head_dim)
    return torch.addcmul(x * cos, swapped, signed_sin)
