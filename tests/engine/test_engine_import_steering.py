"""Import-line steering in both decode loops: it changes what a model writes on a `from` line, only to names the
workspace has, and greedy speculative output stays token-identical to the steered plain loop for every drafter."""

from __future__ import annotations

import re

import pytest
import torch
from engine_core_support import decode, local_engine, tiny_llama

from engine.api import CompletionRequest, CompletionResult, ImportNames
from engine.imports import STEERED_CANDIDATES, import_line_fits

PROMPT = "import os\nimport sys\nfrom .models import"
NEW_TOKENS = 16


@pytest.fixture(autouse=True)
def _one_thread() -> None:
    torch.set_num_threads(1)


def names_below_the_top(engine: object, model: torch.nn.Module, prompt: str) -> frozenset[str]:
    """Words the model ranks 3rd to 12th after `prompt` (as " word" tokens): names it would not write first,
    so steering to them must change its line."""
    ids = engine.encode(prompt)  # type: ignore[attr-defined]
    with torch.inference_mode():
        logits = model(torch.tensor([ids])).logits[0, -1]
    ranked = torch.topk(logits, STEERED_CANDIDATES).indices.tolist()
    words = [decode([token]) for token in ranked[2:12]]
    found = frozenset(word.strip() for word in words if word.startswith(" ") and word.strip().isidentifier())
    assert found, "no word among the model's 3rd to 12th tokens: pick another seed"
    return found


def steered(prompt: str, names: frozenset[str]) -> ImportNames:
    line_start = prompt.rsplit("\n", 1)[-1]
    return ImportNames(line_start, {".models": names, ".": frozenset({"models"})}, relative_depth=1)


def copying_the_unsteered(free: CompletionResult, drafter: str, names: ImportNames) -> CompletionRequest:
    """A steered request whose copying drafters (prompt lookup, the previous suggestion) hold the unsteered
    output `free`, so their drafts break the steered line."""
    return CompletionRequest(
        PROMPT,
        max_new_tokens=NEW_TOKENS,
        drafter=drafter,
        import_names=names,
        lookup_context=(PROMPT + decode(free.token_ids),),
        previous_completion=free.text,
    )


def test_steering_changes_the_line_to_a_name_the_workspace_has() -> None:
    target = tiny_llama(seed=71)
    engine = local_engine(target, tiny_llama(seed=72))
    names = names_below_the_top(engine, target, PROMPT)
    free = engine.complete(CompletionRequest(PROMPT, max_new_tokens=NEW_TOKENS, drafter="none"))
    got = engine.complete(
        CompletionRequest(
            PROMPT, max_new_tokens=NEW_TOKENS, drafter="none", import_names=steered(PROMPT, names)
        )
    )
    assert got.token_ids != free.token_ids
    assert got.stats.steered_import_rows >= 1 and free.stats.steered_import_rows == 0
    line = PROMPT.rsplit("\n", 1)[-1] + got.text.split("\n")[0]
    assert import_line_fits(line, steered(PROMPT, names), ended="\n" in got.text), line
    assert got.text.split()[0].strip(",()") in names


def test_a_line_that_is_not_an_import_is_left_as_the_model_writes_it() -> None:
    target = tiny_llama(seed=73)
    engine = local_engine(target, tiny_llama(seed=74))
    prompt = "import os\nx ="
    names = ImportNames("x =", {".models": frozenset({"nothing_here"})})
    free = engine.complete(CompletionRequest(prompt, max_new_tokens=NEW_TOKENS, drafter="none"))
    got = engine.complete(
        CompletionRequest(prompt, max_new_tokens=NEW_TOKENS, drafter="none", import_names=names)
    )
    assert got.token_ids == free.token_ids
    assert got.stats.steered_import_rows == 0


@pytest.mark.parametrize("drafter", ["model", "lookup", "stale", "hybrid"])
def test_greedy_speculation_with_steering_is_identical_to_the_steered_baseline(drafter: str) -> None:
    target = tiny_llama(seed=71)
    changed = 0
    for draft in (target, tiny_llama(seed=72)):  # a perfect draft model and a poor one
        engine = local_engine(target, draft)
        names = steered(PROMPT, names_below_the_top(engine, target, PROMPT))
        free = engine.complete(CompletionRequest(PROMPT, max_new_tokens=NEW_TOKENS, drafter="none"))
        want = engine.complete(
            CompletionRequest(PROMPT, max_new_tokens=NEW_TOKENS, drafter="none", import_names=names)
        )
        # The drafters copy the unsteered line: their drafts break the line and must be rejected.
        got = engine.complete(copying_the_unsteered(free, drafter, names))
        assert got.token_ids == want.token_ids, (drafter, draft is target)
        assert got.text == want.text
        changed += want.token_ids != free.token_ids
    assert changed == 2


def test_greedy_speculation_with_steering_and_a_forced_prefix_is_identical_to_the_baseline() -> None:
    """Token healing spells the line break and the `from` typed at a line start; steering starts after it."""
    target = tiny_llama(seed=75)
    engine = local_engine(target, target)
    prompt = "import os\nimport sys"
    names = ImportNames("from .", {".models": frozenset({"os", "sys"}), ".": frozenset({"models"})})
    for drafter in ("none", "hybrid", "model"):
        result = engine.complete(
            CompletionRequest(
                prompt,
                max_new_tokens=NEW_TOKENS,
                drafter=drafter,
                forced_prefix="\nfrom .",
                import_names=names,
            )
        )
        if drafter == "none":
            want = result
            line = "from ." + want.text.split("\n")[0]
            assert import_line_fits(line, names, ended="\n" in want.text), line
        assert result.token_ids == want.token_ids, drafter


def test_sampled_lines_name_what_the_workspace_has_in_both_loops() -> None:
    """A sampled token is drawn among the checked tokens that fit; where none of them fits (a random model
    soon writes noise) the row stands, so only the name the line starts with is certain."""
    target = tiny_llama(seed=71)
    engine = local_engine(target, tiny_llama(seed=72))
    names = steered(PROMPT, names_below_the_top(engine, target, PROMPT))
    for drafter in ("none", "hybrid"):
        for seed in range(6):
            request = CompletionRequest(
                PROMPT,
                max_new_tokens=NEW_TOKENS,
                temperature=1.0,
                seed=seed,
                drafter=drafter,
                import_names=names,
            )
            text = engine.complete(request).text
            first_name = re.match(r"[ \t]*(\w*)", text)
            assert first_name is not None and first_name[1] in names.modules[".models"], (drafter, seed, text)


@pytest.mark.parametrize("drafter", ["none", "model", "lookup", "hybrid"])
def test_the_missing_import_is_written_first_and_speculation_stays_identical(drafter: str) -> None:
    """Of the names the workspace has, the one the file uses without importing it is steered to first."""
    target = tiny_llama(seed=71)
    engine = local_engine(target, tiny_llama(seed=72))
    exists = names_below_the_top(engine, target, PROMPT)
    missing = sorted(exists)[-1]
    names = ImportNames(
        PROMPT.rsplit("\n", 1)[-1],
        {".models": exists, ".": frozenset({"models"})},
        relative_depth=1,
        wanted={".models": frozenset({missing})},
    )
    plain = engine.complete(
        CompletionRequest(PROMPT, max_new_tokens=NEW_TOKENS, drafter="none", import_names=names)
    )
    assert plain.text.split()[0].strip(",()") == missing
    free = engine.complete(CompletionRequest(PROMPT, max_new_tokens=NEW_TOKENS, drafter="none"))
    assert engine.complete(copying_the_unsteered(free, drafter, names)).token_ids == plain.token_ids


@pytest.mark.parametrize("drafter", ["none", "model", "lookup", "hybrid"])
def test_a_standard_module_the_file_uses_whole_is_imported_and_speculation_stays_identical(
    drafter: str,
) -> None:
    """An `import` line goes to the module the file uses whole without importing it (`wanted_modules`)."""
    prompt = "import json\nimport"
    target = tiny_llama(seed=71)
    engine = local_engine(target, tiny_llama(seed=72))
    missing = sorted(names_below_the_top(engine, target, prompt))[-1]
    names = ImportNames("import", {}, relative_depth=1, wanted_modules=frozenset({missing}))
    plain = engine.complete(
        CompletionRequest(prompt, max_new_tokens=NEW_TOKENS, drafter="none", import_names=names)
    )
    assert re.split(r"[\s,]", plain.text.lstrip())[0] == missing
    free = engine.complete(CompletionRequest(prompt, max_new_tokens=NEW_TOKENS, drafter="none"))
    assert re.split(r"[\s,]", free.text.lstrip())[0] != missing  # the model alone writes another
    request = CompletionRequest(
        prompt,
        max_new_tokens=NEW_TOKENS,
        drafter=drafter,
        import_names=names,
        lookup_context=(prompt + decode(free.token_ids),),
        previous_completion=free.text,
    )
    assert engine.complete(request).token_ids == plain.token_ids
