"""What is shown (`lsp_server.context.gate`, stop rules 7-9): no chat artifacts from the Instruct models, no
suggestion that repeats its neighbours, and no first line the model was unsure of.

The chat cases are the habits of Qwen2.5-Coder-0.5B/1.5B Instruct seen in this project (a ``` fence closing
a file, an announcement before code, an explanation after it), each run through the server's own context
builder and stop check the way the engine runs it (growing text, first cut wins) and `finalize_completion`."""

from __future__ import annotations

import math

import pytest

from engine.api import BackendInfo, ConfidenceReader
from engine.tokens import SPECIAL_TOKENS
from lsp_server.context import (
    CompletionContext,
    ContextSettings,
    build_completion_context,
    finalize_completion,
)
from lsp_server.context.gate import (
    chat_artifact,
    first_line_confidence,
    first_line_span,
    first_line_token_probs,
    is_prose_line,
    repeats_neighbour,
)
from lsp_server.context.stops import SyntaxStopRules
from lsp_server.documents import DocumentStore

CURSOR = "█"
INFO = BackendInfo("fake", "target", None, SPECIAL_TOKENS, 4096, "cpu")


def _context(
    marked: str, language: str = "python", info: BackendInfo = INFO, **settings: object
) -> CompletionContext:
    offset = marked.index(CURSOR)
    store = DocumentStore()
    uri = f"file:///w/a.{'py' if language == 'python' else 'js'}"
    store.open(uri, language, 1, marked.replace(CURSOR, ""))
    return build_completion_context(
        store,
        uri,
        offset,
        info,
        ContextSettings(**settings),  # type: ignore[arg-type]
        lambda text: len(text) // 3 + 1,
    )


def _served(ctx: CompletionContext, generated: str) -> str:
    """The growing text through the stop check (first cut wins), then the final trim: what the editor shows."""
    text = generated
    for end in range(1, len(generated) + 1):
        cut = ctx.stop_check(generated[:end])
        if cut is not None:
            text = generated[:cut]
            break
    return finalize_completion(text, ctx)


END_OF_FILE = "import os\n\n\ndef main():\n    print(os.getcwd())\n\n\n█"
IN_BODY = "def area(r):\n    █\n\n\nprint(area(2))\n"

# (file with the cursor, what an Instruct model wrote there, what may be shown)
INSTRUCT_HABITS = [
    # the demo's only suggestion: a fence closing the "answer" at the end of a Python file
    (END_OF_FILE, "```", ""),
    (END_OF_FILE, "```\n", ""),
    (END_OF_FILE, 'if __name__ == "__main__":\n    main()\n```', 'if __name__ == "__main__":\n    main()'),
    (
        END_OF_FILE,
        'if __name__ == "__main__":\n    main()\n```\n\nThis script prints the cwd.',
        'if __name__ == "__main__":\n    main()',
    ),
    # an announcement, then a fenced block
    (END_OF_FILE, "Here is the completed code:\n```python\nmain()\n```", ""),
    (END_OF_FILE, "Here's the updated code with a main guard:\n\nmain()", ""),
    (END_OF_FILE, "Sure, here is the code:\n```python\nmain()\n```", ""),
    (END_OF_FILE, "```python\nmain()\n```", ""),
    # code, then an explanation (at column 0, where the block rule cannot end it)
    (END_OF_FILE, "main()\n\nExplanation:\n1. The function prints the cwd.", "main()"),
    (END_OF_FILE, "main()\n\n**Explanation:**\n- The call", "main()"),
    (END_OF_FILE, "main()\n\nThis script prints the working directory.", "main()"),
    (END_OF_FILE, "main()\n\nIn this code, we call main.", "main()"),
    (END_OF_FILE, "main()\n\nThe code above calls main.", "main()"),
    (END_OF_FILE, "main()\n\nI hope this helps!", "main()"),
    (END_OF_FILE, "main()\n\nNote: run it from the project folder.", "main()"),
    (END_OF_FILE, "main()\nReturns nothing, prints the folder.", "main()"),
    # ... and inside a function body, at the body's indentation, or glued to the code
    (IN_BODY, "return 3.14159 * r ** 2\n    This returns the area.", "return 3.14159 * r ** 2"),
    (IN_BODY, "return 3.14159 * r ** 2```", "return 3.14159 * r ** 2"),
]


@pytest.mark.parametrize(("marked", "generated", "shown"), INSTRUCT_HABITS)
def test_the_instruct_models_chat_is_never_shown(marked: str, generated: str, shown: str) -> None:
    ctx = _context(marked)
    assert _served(ctx, generated) == shown
    assert "```" not in _served(ctx, generated)
    assert finalize_completion(generated, ctx) == shown  # the final trim alone agrees
    if shown != generated.rstrip():
        assert "chat" in ctx.stop_rules.fired  # type: ignore[union-attr]


# Code that looks a little like prose, and prose where it belongs: all shown as written.
KEPT = [
    (IN_BODY, "return Sure(r) if r else None"),
    (IN_BODY, "Explanation = r * 2\n    return Explanation"),
    (IN_BODY, 'Note: str = "radius"\n    return r'),
    (IN_BODY, "return [Item for item in r.items]"),
    (IN_BODY, "x = '```'\n    return x"),  # a fence in a string
    (IN_BODY, "# ``` in a comment\n    return x"),
    (IN_BODY, "if Foo is not None:\n        return 1"),
    (IN_BODY, "def f(*args, **kwargs):\n        return g(**kwargs, **extra)"),
    # a docstring the completion opens: prose and a Markdown fence are its business
    (IN_BODY, '"""The area of a circle.\n\n    ```python\n    area(2)\n    ```\n    """'),
]


@pytest.mark.parametrize(("marked", "generated"), KEPT)
def test_code_and_docstrings_are_not_mistaken_for_chat(marked: str, generated: str) -> None:
    ctx = _context(marked)
    assert _served(ctx, generated) == generated
    assert "chat" not in ctx.stop_rules.fired  # type: ignore[union-attr]


def test_inside_a_docstring_or_comment_prose_is_the_point() -> None:
    in_docstring = 'def area(r):\n    """█\n    return r\n'
    ctx = _context(in_docstring)
    assert ctx.mode == "single-line"
    assert _served(ctx, "This function returns the area.") == "This function returns the area."
    in_comment = "def area(r):\n    # █\n    return r\n"
    ctx = _context(in_comment)
    assert _served(ctx, "Here is the formula we use.") == "Here is the formula we use."


@pytest.mark.parametrize(
    ("line", "prose"),
    [
        ("Here is the code:", True),
        ("```python", True),
        ("Certainly! Here's a function", True),
        ("Returns the sum of a and b.", True),
        ("Explanation:", True),
        ("**Output**", True),
        ("2. The second step", True),
        ("Sure()", False),
        ("Here.x = 1", False),
        ("Foo is not None", False),
        ("String name;", False),  # Java
        ("Name string", False),  # a Go struct field
        ("The x", False),
        ("**kwargs", False),
        ("", False),
    ],
)
def test_prose_lines(line: str, prose: bool) -> None:
    assert is_prose_line(line) is prose


def test_chat_artifact_positions() -> None:
    assert chat_artifact("x = 1\n```") == 6
    assert chat_artifact("x = 1```") == 5
    assert chat_artifact("x = 1") is None
    assert chat_artifact("Explanation", final=False) is None  # may still become `Explanation = ...`
    assert chat_artifact("Explanation\n", final=False) == 0
    assert chat_artifact("x = 1\n  ``", final=False) is None
    assert chat_artifact("x = 1\n  ```", final=False) == 6
    assert chat_artifact('s = """\nHere is text\n"""\nHere is chat') == len('s = """\nHere is text\n"""\n')
    assert chat_artifact("more words here.\nHere is chat", literal="comment") == len("more words here.\n")
    assert chat_artifact('text."""\nThis is chat.', literal="docstring") == len('text."""\n')


def test_a_suggestion_that_repeats_the_next_line_or_the_rest_of_the_line_is_dropped() -> None:
    # the first line, read with the code before the cursor, is the next non-empty line
    ctx = _context("def f(x):\n    y = █\n\n    y = x + 1\n    return y\n")
    assert _served(ctx, "x + 1") == ""
    assert "repeat" in ctx.stop_rules.fired  # type: ignore[union-attr]
    assert _served(_context("def f(x):\n    y = █\n\n    y = x + 1\n    return y\n"), "x + 2") == "x + 2"
    # just the text after the cursor
    assert repeats_neighbour("total)", "f(", "total)", "") is True
    assert repeats_neighbour("x + 1", "    y = ", "", "y = x + 1") is True
    assert repeats_neighbour("x + 2", "    y = ", "", "y = x + 1") is False
    assert repeats_neighbour("   ", "", "", "") is False


def test_first_line_confidence_is_the_probability_of_the_first_non_blank_line() -> None:
    text = "\n    return a + b\n    pass"
    # tokens: "\n", "    return", " a", " +", " b", "\n", "    pass"
    pieces = ["\n", "    return", " a", " +", " b", "\n", "    pass"]
    ends = [sum(len(p) for p in pieces[: i + 1]) for i in range(len(pieces))]
    probs = [0.01, 0.9, 0.8, 0.95, 0.7, 0.02, 0.03]
    assert first_line_span(text) == (1, len("\n    return a + b"))
    # neither the leading line break nor what follows the line counts (single-line mode cuts the break away)
    line = 0.9 * 0.8 * 0.95 * 0.7
    assert first_line_confidence(text, probs, ends) == pytest.approx(line)
    assert first_line_confidence("\n    return a + b", probs[:5], ends[:5]) == pytest.approx(line)
    # it only falls as the line streams: a gate may drop a line as soon as it is below its threshold
    assert first_line_confidence("\n    return a", probs[:3], ends[:3]) == pytest.approx(0.9 * 0.8)
    assert first_line_confidence("", [], []) is None
    assert first_line_confidence(text, [math.nan] * 7, ends) is None
    # a forced prefix's own tokens end at 0 and count for nothing
    assert first_line_confidence("urn x", [0.001, 0.6], [0, 5]) == pytest.approx(0.6)
    # the line's own probabilities, in order, for a bench to fit other gates on
    assert first_line_token_probs(text, probs, ends) == pytest.approx([0.9, 0.8, 0.95, 0.7])
    assert first_line_token_probs(text, [0.01, 0.9, math.nan, 0.95, 0.7], ends[:5]) == pytest.approx(
        [0.9, 0.95, 0.7]
    )
    assert first_line_token_probs("  \n", [0.5], [3]) == []


def test_the_confidence_gate_drops_an_unsure_first_line_while_it_streams() -> None:
    ctx = _context(IN_BODY, min_first_line_probability=0.3)
    rules = ctx.stop_rules
    assert isinstance(rules, SyntaxStopRules) and isinstance(rules, ConfidenceReader)
    assert rules.min_first_line_probability == 0.3
    # sure so far: nothing cut
    rules.read_token_probs([0.9, 0.8], [6, 8])
    assert rules("return r") is None
    # the line's probability below the threshold: everything goes, before the line is even finished
    rules.read_token_probs([0.9, 0.8, 0.1], [6, 8, 10])
    assert rules("return r *") == 0
    assert "confidence" in rules.fired
    # no token below it, but the line as a whole (0.6 ** 3 = 0.216) is
    unsure = _context(IN_BODY, min_first_line_probability=0.3).stop_rules
    assert unsure is not None
    unsure.read_token_probs([0.6, 0.6], [6, 8])
    assert unsure("return r") is None
    unsure.read_token_probs([0.6, 0.6, 0.6], [6, 8, 10])
    assert unsure("return r *") == 0
    # off (the threshold 0) or unknown (no probabilities): shown
    off = _context(IN_BODY).stop_rules
    assert off is not None
    off.read_token_probs([0.9, 0.8, 0.1], [6, 8, 10])
    assert off("return r *") is None
    assert _context(IN_BODY, min_first_line_probability=0.3).stop_check("return r *") is None


def test_the_gate_is_the_models_measured_threshold_unless_the_user_sets_one() -> None:
    from dataclasses import replace

    from engine.catalog import CATALOG

    calibrated = replace(INFO, first_line_gate=0.1)  # what a pulled Qwen2.5-Coder model reports
    assert ContextSettings().min_first_line_probability is None  # the model's, by default

    def threshold(info: BackendInfo, **settings: object) -> float:
        rules = _context(IN_BODY, info=info, **settings).stop_rules
        assert rules is not None
        return rules.min_first_line_probability

    assert threshold(calibrated) == 0.1
    assert threshold(INFO) == 0.0  # a model nobody calibrated is not gated
    assert threshold(calibrated, min_first_line_probability=0.0) == 0.0  # the user turned it off
    assert threshold(INFO, min_first_line_probability=0.6) == 0.6  # or chose another
    gated = _context(IN_BODY, info=calibrated).stop_rules
    assert isinstance(gated, SyntaxStopRules)
    gated.read_token_probs([0.9, 0.8, 0.1], [6, 8, 10])
    assert gated("return r *") == 0  # the default gate drops an unsure line
    # Measured for the Qwen2.5-Coder models only, each its own (the 1.5B is surer of its lines); the bundled
    # pair and SmolLM2 were never calibrated.
    assert {name: entry.first_line_gate for name, entry in CATALOG.items()} == {
        "smollm2-135m": 0.0,
        "qwen2.5-coder-0.5b": 0.1,
        "qwen2.5-coder-1.5b": 0.2,
    }
    # The lines below ahead of the file's text: measured to lift the 1.5B's lines, not the 0.5B's.
    assert {name: entry.lines_below_tokens for name, entry in CATALOG.items()} == {
        "smollm2-135m": 0,
        "qwen2.5-coder-0.5b": 0,
        "qwen2.5-coder-1.5b": 320,
    }
