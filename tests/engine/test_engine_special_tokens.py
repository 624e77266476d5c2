"""No special-token text ever reaches a completion: for every FIM family the context builder knows and for chat
markers, a model that emits the family's markers stops at the first one, in the plain and the speculative
loop, and the text holds none of them."""

from __future__ import annotations

import pytest
import torch
from engine_core_support import CODE, hf_greedy, tiny_llama
from transformers import LlamaForCausalLM, PreTrainedTokenizerFast

from engine.api import CompletionRequest
from engine.models import ModelPair, ModelSource
from engine.service import LocalEngine
from engine.train.tokenizer import train_code_tokenizer
from lsp_server.context.fim import CHAT_MARKERS, FIM_FAMILIES, PREFIX_ONLY, FimTemplate, marker_texts

NEW_TOKENS = 24
PROMPT = "def add(a, b):\n"
CHAT = FimTemplate("chat", "", "", "", "prefix-only", None, ("<|im_end|>", "<|im_start|>"))


def family_markers(template: FimTemplate) -> list[str]:
    tokens = [template.prefix_token, template.suffix_token, template.middle_token, template.file_sep]
    return [token for token in dict.fromkeys([*tokens, *template.stop_strings]) if token]


def tokenizer_with(markers: list[str]) -> PreTrainedTokenizerFast:
    """A code tokenizer whose special tokens are one family's markers (and its own end of text)."""
    return PreTrainedTokenizerFast(
        tokenizer_object=train_code_tokenizer(CODE * 20, vocab_size=300),
        eos_token="<|endoftext|>",
        additional_special_tokens=[marker for marker in markers if marker != "<|endoftext|>"],
    )


def model_that_emits(tokenizer: PreTrainedTokenizerFast, marker_ids: list[int]) -> LlamaForCausalLM:
    """A random model whose marker rows copy (and outscore) the rows of tokens it picks a few steps in."""
    model = tiny_llama(seed=5)
    model.resize_token_embeddings(len(tokenizer))
    prompt = tokenizer.encode(PROMPT)
    plain = hf_greedy(model, prompt, NEW_TOKENS)
    with torch.no_grad():
        for marker, step in zip(marker_ids, range(3, NEW_TOKENS, 4), strict=False):
            model.lm_head.weight[marker] = 3.0 * model.lm_head.weight[plain[step]]
    return model


@pytest.mark.parametrize("template", [*FIM_FAMILIES, CHAT], ids=lambda t: t.name)
def test_a_model_that_emits_markers_never_puts_them_in_the_text(template: FimTemplate) -> None:
    torch.set_num_threads(1)
    markers = family_markers(template)
    tokenizer = tokenizer_with(markers)
    marker_ids = [tokenizer.convert_tokens_to_ids(marker) for marker in markers]
    target = model_that_emits(tokenizer, marker_ids)
    source = ModelSource(spec="test", location="in-memory", is_local=True)
    pair = ModelPair(target, target, tokenizer, torch.device("cpu"), torch.float32, source, source)
    engine = LocalEngine(pair=pair)
    assert set(marker_ids) <= engine.eos_ids  # every special token ends a completion

    # Negative control: left to itself, the model does write a marker after some text.
    raw = hf_greedy(target, tokenizer.encode(PROMPT), NEW_TOKENS)
    first = next(index for index, token in enumerate(raw) if token in marker_ids)
    assert first > 0 and any(m in tokenizer.decode(raw, skip_special_tokens=False) for m in markers)

    for drafter in ("none", "hybrid", "model"):
        result = engine.complete(CompletionRequest(PROMPT, max_new_tokens=NEW_TOKENS, drafter=drafter))
        assert result.token_ids == raw[:first], drafter
        assert result.finish_reason == "eos"
        assert result.text and not any(marker in result.text for marker in marker_texts(markers))


def test_marker_texts_cover_every_family_and_the_tokenizer_s_own() -> None:
    texts = marker_texts(("<|custom_marker|>", " "))
    for template in FIM_FAMILIES:
        assert {template.prefix_token, template.suffix_token, template.middle_token} <= set(texts)
    assert set(CHAT_MARKERS) <= set(texts)
    assert "<|custom_marker|>" in texts and " " not in texts  # a blank "special token" is no marker
    assert PREFIX_ONLY.prefix_token not in texts  # the prefix-only template has no tokens at all


def test_a_benchmark_can_ask_for_every_token_past_the_end_of_text() -> None:
    # `ignore_end_of_text` (bench throughput without natural stops): the same work for every method, and
    # still the plain greedy tokens, in the plain and the speculative loop.
    torch.set_num_threads(1)
    tokenizer = tokenizer_with(["<|endoftext|>"])
    end = tokenizer.convert_tokens_to_ids("<|endoftext|>")
    target = model_that_emits(tokenizer, [end])
    source = ModelSource(spec="test", location="in-memory", is_local=True)
    engine = LocalEngine(
        pair=ModelPair(target, target, tokenizer, torch.device("cpu"), torch.float32, source, source)
    )
    raw = hf_greedy(target, tokenizer.encode(PROMPT), NEW_TOKENS)
    assert end in raw  # left to itself, the model ends early
    for drafter in ("none", "hybrid"):
        request = CompletionRequest(
            PROMPT, max_new_tokens=NEW_TOKENS, drafter=drafter, ignore_end_of_text=True
        )
        result = engine.complete(request)
        assert result.token_ids == raw and result.finish_reason == "length", drafter
