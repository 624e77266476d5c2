"""Tiny random models, a small tokenizer and a scripted drafter for the engine-core tests (A1)."""

from __future__ import annotations

import functools
from collections.abc import Iterable, Sequence
from pathlib import Path

import torch
from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

from engine.api import NO_DRAFT, DraftChoice, DraftContext
from engine.drafters.base import Draft, DraftPlan
from engine.models import ModelPair, ModelSource
from engine.precision import NEAR_TIE_MARGIN, greedy_divergence
from engine.service import LocalEngine
from engine.train.tokenizer import tokenizer_config, train_code_tokenizer

VOCAB = 400
WINDOW = 256
CODE = [
    "def add(a, b):\n    return a + b\n\n",
    "for i in range(10):\n    print(i, i * i)\n",
    "class Point:\n    def __init__(self, x, y):\n        self.x = x\n        self.y = y\n",
    "import os\nimport sys\n\nif __name__ == '__main__':\n    sys.exit(main())\n",
]


@functools.cache
def tokenizer() -> PreTrainedTokenizerFast:
    raw = train_code_tokenizer(CODE * 20, vocab_size=VOCAB)
    config = tokenizer_config(WINDOW)
    return PreTrainedTokenizerFast(
        tokenizer_object=raw,
        bos_token=config["bos_token"],
        eos_token=config["eos_token"],
        pad_token=config["pad_token"],
        additional_special_tokens=config["additional_special_tokens"],
    )


def vocab() -> int:
    """Model vocabularies match the trained tokenizer, so every generated id decodes to text."""
    return len(tokenizer())


def _quiet(model: torch.nn.Module) -> torch.nn.Module:
    # No EOS, so generate() and our loops both run to max_new_tokens.
    model.generation_config.eos_token_id = None
    model.generation_config.pad_token_id = 0
    return model.eval().requires_grad_(False)


def tiny_llama(seed: int = 0, layers: int = 2, tied: bool = False, hidden: int = 64) -> LlamaForCausalLM:
    """Random Llama with a large init std: logits spread wide, so greedy choices have no near-ties."""
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=vocab(),
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=WINDOW,
        rope_parameters={"rope_type": "default", "rope_theta": 5000.0},
        initializer_range=0.3,
        tie_word_embeddings=tied,
    )
    return _quiet(LlamaForCausalLM(config))


def tiny_gpt2(seed: int = 0, layers: int = 2) -> GPT2LMHeadModel:
    torch.manual_seed(seed)
    config = GPT2Config(
        vocab_size=vocab(),
        n_embd=64,
        n_layer=layers,
        n_head=4,
        n_positions=WINDOW,
        initializer_range=0.3,
        bos_token_id=0,
        eos_token_id=0,
    )
    return _quiet(GPT2LMHeadModel(config))


def prompt_ids(length: int, seed: int = 1) -> list[int]:
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(5, vocab(), (length,), generator=generator).tolist()


def hf_greedy(
    model: torch.nn.Module, ids: list[int], max_new_tokens: int, stop_at: Iterable[int] = ()
) -> list[int]:
    """transformers' greedy continuation, cut before the first id in `stop_at` (the engine's EOS ids)."""
    with torch.inference_mode():
        out = model.generate(
            torch.tensor([ids]),
            attention_mask=torch.ones(1, len(ids), dtype=torch.long),
            max_new_tokens=max_new_tokens,
            do_sample=False,
            eos_token_id=None,
            pad_token_id=0,
        )
    generated: list[int] = out[0, len(ids) :].tolist()
    stops = set(stop_at)
    for index, token in enumerate(generated):
        if token in stops:
            return generated[:index]
    return generated


class ScriptedDrafter:
    """Proposes the known right continuation, corrupted at every `corrupt_every`-th drafted token.

    Exercises every accept length deterministically, with no drafter logic under test.
    """

    name = "scripted"

    def __init__(self, prompt: list[int], continuation: list[int], corrupt_every: int = 3) -> None:
        self.reference = [*prompt, *continuation]
        self.corrupt_every = corrupt_every
        self.calls = 0
        self.observed: list[tuple[int, int]] = []

    def plans(self, context_ids: list[int]) -> list[DraftPlan]:
        return [DraftPlan(self.name, copy_found=True)]

    def propose(self, context_ids: list[int], max_tokens: int, plan: DraftPlan | None = None) -> Draft:
        self.calls += 1
        start = len(context_ids)
        tokens = list(self.reference[start : start + max_tokens])
        if self.corrupt_every and len(tokens) > self.calls % self.corrupt_every:
            position = self.calls % self.corrupt_every
            tokens[position] = (tokens[position] + 1) % vocab()
        return Draft(token_ids=tokens, draft_probs=None, drafter=self.name)

    def observe(self, context_ids: list[int], num_accepted: int, num_drafted: int) -> None:
        self.observed.append((num_accepted, num_drafted))


class FixedLength:
    def __init__(self, k: int) -> None:
        self.k = k

    def choose(self, options: Sequence[DraftContext]) -> DraftChoice:
        return DraftChoice(0, self.k) if options else NO_DRAFT


def save_pair(
    folder: Path, target: torch.nn.Module, draft: torch.nn.Module, tok: PreTrainedTokenizerFast
) -> None:
    for name, model in (("target", target), ("draft", draft)):
        model.save_pretrained(folder / name)
        tok.save_pretrained(folder / name)


def decode(ids: list[int]) -> str:
    return tokenizer().decode(ids)


def local_engine(target: torch.nn.Module, draft: torch.nn.Module) -> LocalEngine:
    """A LocalEngine over in-memory models, on CPU in float32."""
    source = ModelSource(spec="test", location="in-memory", is_local=True)
    pair = ModelPair(target, draft, tokenizer(), torch.device("cpu"), torch.float32, source, source)
    return LocalEngine(pair=pair)


def assert_parts_only_at_a_near_tie(
    plain_ids: list[int], speculative_ids: list[int], margins: list[float]
) -> None:
    """Speculative output may leave plain output only where the plain run's top-2 logits were within
    NEAR_TIE_MARGIN (`margins[i]`: the margin that chose plain token i)."""
    divergence = greedy_divergence(plain_ids, speculative_ids, margins)
    if divergence is not None:
        assert divergence.margin <= NEAR_TIE_MARGIN, (
            f"speculative output left plain output at token {divergence.position} where the plain "
            f"run's top-2 margin was {divergence.margin:.3f} > {NEAR_TIE_MARGIN}"
        )
