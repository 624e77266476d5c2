"""A line among the names of a parenthesized `from M import (` block (`context.import_blocks`): the block found
around the cursor, the names the line may still import, and the builder asking the engine to steer it."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from engine.api import BackendInfo
from engine.healing import TokenTexts
from engine.imports import ImportLineConstraint, import_line_fits
from lsp_server.context import build_completion_context
from lsp_server.context.builder import ContextSettings
from lsp_server.context.fim import QWEN_CODER
from lsp_server.context.import_blocks import (
    ImportBlock,
    block_order,
    import_block_at,
    member_type_key,
    names_for_line,
)
from lsp_server.context.workspace import WorkspaceFiles
from lsp_server.documents import DocumentStore

QWEN_TOKENS = (QWEN_CODER.prefix_token, QWEN_CODER.suffix_token, QWEN_CODER.middle_token, QWEN_CODER.file_sep)
QWEN = BackendInfo("fake", "t", None, QWEN_TOKENS, 32768, "cpu")

BLOCK = (
    '"""Spans."""\n\n'
    "from .spans import (  # the public ones\n"
    "    AgentSpanData,\n"
    "    GenerationSpanData,\n"
    "<>\n"
    "    HandoffSpanData, ResponseSpanData as Response,\n"
    "\n"
    "    # the last one\n"
    "    TaskSpanData)\n"
    "\n"
    "x = 1\n"
)


def _at(marked: str) -> ImportBlock | None:
    return import_block_at(marked.replace("<>", ""), marked.index("<>"))


def test_the_block_around_the_cursor_and_its_names_both_ways() -> None:
    assert _at(BLOCK) == ImportBlock(
        ".spans",
        ("AgentSpanData", "GenerationSpanData"),
        ("HandoffSpanData", "ResponseSpanData", "TaskSpanData"),
    )
    indented = BLOCK.replace("<>", "    Gu<>")  # the start of a name typed
    assert _at(indented) is not None
    first = "from agents.tracing import (SpanData,\n    <>\n"  # names on the `from` line; no `)` yet
    assert _at(first) == ImportBlock("agents.tracing", ("SpanData",), ())


def test_no_block_where_the_cursor_is_not_on_a_fresh_line_among_its_names() -> None:
    assert _at(BLOCK.replace("<>", "    Gu<>ard")) is None  # text after the cursor
    assert _at(BLOCK.replace("<>", "    x = <>")) is None  # not a name
    closed = "from .spans import (\n    AgentSpanData,\n)\n<>\n"
    assert _at(closed) is None
    one_line = "from .spans import (AgentSpanData, TaskSpanData)\n<>\n"
    assert _at(one_line) is None
    call = "result = run(\n    first,\n<>\n"
    assert _at(call) is None
    code_between = "from .spans import (\n    A,\nx = f(\n<>\n"
    assert _at(code_between) is None


def test_the_order_a_block_is_sorted_by() -> None:
    ruff = ["LIMIT", "VERSION", "AgentSpan", "handoff", "task"]  # constants, classes, the rest
    assert block_order(ruff) is member_type_key
    case_blind = ["agent", "Handoff", "task"]
    assert block_order(case_blind) is not None and block_order(case_blind) is not member_type_key
    assert block_order(["b", "a", "c"]) is None
    assert block_order(["b", "a"]) is None  # two names tell no order


def test_the_names_a_line_may_still_import() -> None:
    bound = frozenset({"AgentSpanData", "GenerationSpanData", "GuardrailSpanData", "HandoffSpanData", "Zeta"})
    block = ImportBlock(
        ".spans", ("AgentSpanData", "GenerationSpanData"), ("HandoffSpanData", "TaskSpanData")
    )
    # Sorted: between GenerationSpanData and HandoffSpanData, and not listed.
    assert names_for_line(bound, block) == {"GuardrailSpanData"}
    unsorted = ImportBlock(".spans", ("HandoffSpanData", "AgentSpanData"), ("TaskSpanData",))
    assert names_for_line(bound, unsorted) == {"GenerationSpanData", "GuardrailSpanData", "Zeta"}
    at_the_end = ImportBlock(".spans", ("AgentSpanData", "GenerationSpanData", "HandoffSpanData"), ())
    assert names_for_line(bound, at_the_end) == {"Zeta"}


def _project(root: Path) -> Path:
    """pkg/spans.py defines the names; pkg/__init__.py is the file being written."""
    package = root / "pkg"
    package.mkdir()
    (package / "spans.py").write_text(
        "".join(
            f"class {name}:\n    pass\n\n\n"
            for name in ("AgentSpanData", "GuardrailSpanData", "TaskSpanData")
        )
        + "class GenerationSpanData:\n    pass\n\n\nclass HandoffSpanData:\n    pass\n"
    )
    init = package / "__init__.py"
    init.write_text("")
    return init


def _context(path: Path, root: Path, marked: str, settings: ContextSettings | None = None):  # type: ignore[no-untyped-def]
    store = DocumentStore()
    store.workspace = WorkspaceFiles([root])
    store.open(path.as_uri(), "python", 1, marked.replace("<>", ""))
    return build_completion_context(
        store,
        path.as_uri(),
        marked.index("<>"),
        QWEN,
        settings or ContextSettings(),
        lambda text: len(text) // 4 + 1,
    )


def test_the_builder_steers_a_line_of_the_block_to_the_name_that_fits(tmp_path: Path) -> None:
    init = _project(tmp_path)
    marked = (
        "from .spans import (\n    AgentSpanData,\n    GenerationSpanData,\n    <>\n    HandoffSpanData,\n"
        "    TaskSpanData,\n)\n"
    )
    ctx = _context(init, tmp_path, marked)
    names = ctx.import_names
    assert names is not None
    assert names.line_start == "from .spans import (    "
    assert names.modules == {".spans": frozenset({"GuardrailSpanData"})}
    assert import_line_fits(names.line_start + "GuardrailSpanData,", names, ended=True)
    assert not import_line_fits(names.line_start + "TaskSpanData,", names, ended=True)  # listed below
    assert not import_line_fits(names.line_start + "GuardrailSpanDataX,", names, ended=True)
    assert _context(init, tmp_path, marked, ContextSettings(steer_imports=False)).import_names is None
    # A module the workspace does not have is not judged: the line is left to the model.
    elsewhere = marked.replace("from .spans", "from typing")
    assert _context(init, tmp_path, elsewhere).import_names is None


def test_the_engine_constraint_masks_a_name_the_module_lacks_on_such_a_line(tmp_path: Path) -> None:
    init = _project(tmp_path)
    marked = (
        "from .spans import (\n    AgentSpanData,\n    GenerationSpanData,\n<>\n    HandoffSpanData,\n)\n"
    )
    names = _context(init, tmp_path, marked).import_names
    assert names is not None
    texts = ["\n", "    ", " Gu", " Task", "ardrail", "SpanData", ","]
    constraint = ImportLineConstraint(names, TokenTexts(texts), forced_text="\n")
    constraint.advance([0])  # the forced line break
    logits = torch.tensor([[0.0, 0.0, 1.0, 5.0, 0.0, 0.0, 0.0]])  # the model prefers " Task" (listed below)
    steered = constraint.constrain(logits)
    assert int(steered[0].argmax()) == texts.index(" Gu")
    assert steered[0, texts.index(" Task")] == float("-inf")


def test_the_first_word_is_steered_where_its_token_finishes_the_forced_indentation(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Token healing re-spells the line break and indentation, the last space with the word (" Task"): that
    row is the line's first word, so it is steered too; where none of the best tokens begins a name that fits,
    the tokens spelling one do."""
    init = _project(tmp_path)
    marked = (
        "from .spans import (\n    AgentSpanData,\n    GenerationSpanData,\n    <>\n    HandoffSpanData,\n)\n"
    )
    names = _context(init, tmp_path, marked).import_names
    assert names is not None
    texts = ["\n", "   ", " Task", " Gu", "ardrail", "SpanData", ",", " Zeta"]
    constraint = ImportLineConstraint(names, TokenTexts(texts), forced_text="\n    ")
    constraint.advance([0, 1])  # "\n" and three spaces: one space is still owed
    logits = torch.tensor([[0.0, 0.0, 5.0, 1.0, 0.0, 0.0, 0.0, 4.0]])
    steered = constraint.constrain(logits)
    assert int(steered[0].argmax()) == texts.index(" Gu")
    assert steered[0, texts.index(" Task")] == float("-inf")
    # None of the two best (" Task", " Zeta") fits: the tokens that spell the name are what stays.
    monkeypatch.setattr("engine.imports.STEERED_CANDIDATES", 2)
    steered = ImportLineConstraint(names, TokenTexts(texts), forced_text="\n    ")
    steered.advance([0, 1])
    row = steered.constrain(logits)[0]
    assert torch.isfinite(row).tolist() == [text == " Gu" for text in texts]
