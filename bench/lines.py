"""Suggestions at the start of a line: the commonest moment for one, right after Enter.

Positions: in any folder the user names, then in held-out code (the files `bench.prompts.held_out_files`
holds out of training), code lines spread evenly through each file. The cursor goes after the line's indentation,
the rest of the line is removed, and the rest of the file stays as the suffix. Each position runs through
the server's own pieces: `build_completion_context` (prompt, token healing, stop rules), `engine_request`
with default `ServerSettings`, the local engine, and `finalize_completion`.

Scored per suggestion:
- non-empty: anything to insert;
- indented right (of the non-empty): `indentation_ok`, no doubled indentation, the file's tabs or spaces;
- marker text: any FIM, chat or end-of-text marker in the engine's text or the suggestion (must be 0);
- exact next line: the suggestion's first line equals the removed code (both stripped);
- edit similarity: `difflib.SequenceMatcher` ratio of the two (1 is identical);
- degeneration guard: the repetition stop rule cut the suggestion.
"""

from __future__ import annotations

import difflib
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from bench.metrics import code_cell, markdown_table, median, model_name, percent, write_result_files
from bench.prompts import held_out_files

# Goals on a real model (issue: suggestions at line starts).
GOALS = {"non_empty": 0.95, "indentation_ok": 1.0, "marker_text": 0.0, "exact_first_line": 0.30}
MIN_LINES = 20  # shorter files give too little context
SKIPPED_PREFIXES = ("#", "@")  # comment and decorator lines: not what a new line after Enter usually holds


@dataclass(frozen=True)
class LinePosition:
    name: str  # "<relative path>:<line>" (1-based)
    document: str  # the file with the cursor line's code removed
    offset: int  # the cursor: after the line's indentation
    removed: str  # the code that was on the line


@dataclass
class LinesConfig:
    models: tuple[tuple[str | None, str | None], ...] = ((None, None),)  # (target, draft); None: bundled
    positions: int = 60
    per_file: int = 2
    folders: tuple[Path, ...] = ()
    device: str = "cpu"
    dtype: str = "auto"
    threads: int | None = None
    out: Path = Path("bench/results")
    tag: str = "cpu"
    prompt_shape: str = "auto"  # "fim" or "prefix-only" force a shape (ContextSettings.prompt_shape)
    stdlib: bool = True  # also the held-out standard-library files (the bundled pair's held-out set)


@dataclass
class Outcome:
    position: str
    removed: str
    suggestion: str
    non_empty: bool
    indentation_ok: bool
    marker_text: bool
    exact_first_line: bool
    edit_similarity: float
    guard_fired: bool
    forced_prefix: str
    finish_reason: str
    new_tokens: int
    wall_s: float
    rules_fired: list[str] = field(default_factory=list)


def line_positions(files: Sequence[tuple[str, str]], count: int, per_file: int = 2) -> list[LinePosition]:
    """Up to `count` positions, at most `per_file` per file, at code lines spread evenly through each file
    (files in the order given)."""
    positions: list[LinePosition] = []
    for relative, text in files:
        lines = text.split("\n")
        if len(lines) < MIN_LINES:
            continue
        code = [
            i
            for i, line in enumerate(lines)
            if line.strip() and not line.strip().startswith(SKIPPED_PREFIXES)
        ]
        picks = sorted({code[int(len(code) * (k + 0.5) / per_file)] for k in range(per_file)}) if code else []
        for index in picks:
            if len(positions) >= count:
                return positions
            line = lines[index]
            indent = line[: len(line) - len(line.lstrip(" \t"))]
            start = sum(len(earlier) + 1 for earlier in lines[:index])
            offset = start + len(indent)
            document = text[:offset] + text[start + len(line) :]
            positions.append(LinePosition(f"{relative}:{index + 1}", document, offset, line[len(indent) :]))
    return positions


def first_line(text: str) -> str:
    return text.split("\n", 1)[0].strip()


def edit_similarity(a: str, b: str) -> float:
    return difflib.SequenceMatcher(None, a, b, autojunk=False).ratio()


def files_to_score(folders: Sequence[Path], stdlib: bool = True) -> list[tuple[str, str]]:
    """Every .py file of each named folder (path order), then the held-out standard library files."""
    files = []
    for folder in folders:
        for path in sorted(folder.rglob("*.py")):
            text = path.read_bytes().decode("utf-8", errors="replace")
            files.append((f"{folder.name}/{path.relative_to(folder).as_posix()}", text))
    return [*files, *(held_out_files() if stdlib else [])]


@dataclass(frozen=True)
class Served:
    context: Any  # lsp_server.context.CompletionContext
    result: Any  # engine.api.CompletionResult
    text: str  # what the editor would insert
    wall_s: float


def server_settings(prompt_shape: str = "auto") -> Any:
    """The server's default settings, with the prompt shape a benchmark compares."""
    import dataclasses

    from lsp_server.config import ServerSettings

    defaults = ServerSettings()
    return dataclasses.replace(
        defaults, context=dataclasses.replace(defaults.context, prompt_shape=prompt_shape)
    )


def suggest(engine: Any, info: Any, settings: Any, uri: str, document: str, offset: int) -> Served | None:
    """One suggestion as `specls serve` makes it: the context builder, the engine, the final trim. None where
    the server would not suggest (the cursor's syntax says so)."""
    from lsp_server.context import build_completion_context, finalize_completion
    from lsp_server.documents import DocumentStore
    from lsp_server.engine_request import engine_request

    store = DocumentStore()
    store.open(uri, "python", 1, document)
    ctx = build_completion_context(store, uri, offset, info, settings.context, engine.count_tokens)
    if ctx.mode == "none" or ctx.stop_rules is None:
        return None
    # The engine learns draft lengths across positions, as it does across keystrokes in the server.
    request = engine_request(ctx, settings, previous_completion="")
    started = time.perf_counter()
    result = engine.complete(request)
    wall = time.perf_counter() - started
    return Served(ctx, result, finalize_completion(result.text, ctx), wall)


def score_model(
    target: str | None, draft: str | None, positions: Sequence[LinePosition], config: LinesConfig
) -> dict[str, Any]:
    """Run every position through the server's context builder, the engine and the final trim."""
    from engine.models import describe_model, load_pair
    from engine.service import LocalEngine
    from lsp_server.context.fim import marker_texts
    from lsp_server.context.indentation import indentation_ok

    pair = load_pair(target, draft, config.device, config.dtype, num_threads=config.threads)
    engine = LocalEngine(pair=pair)
    info = engine.info()
    settings = server_settings(config.prompt_shape)
    markers = marker_texts(info.special_tokens)
    outcomes: list[Outcome] = []
    for position in positions:
        uri = f"file:///held-out/{position.name.rsplit(':', 1)[0]}"
        served = suggest(engine, info, settings, uri, position.document, position.offset)
        if served is None:
            continue
        ctx, result, suggestion, wall = served.context, served.result, served.text, served.wall_s
        assert ctx.stop_rules is not None
        line_before = ctx.stop_rules.line_before
        guess = first_line(suggestion)
        outcomes.append(
            Outcome(
                position=position.name,
                removed=position.removed,
                suggestion=suggestion,
                non_empty=bool(suggestion.strip()),
                indentation_ok=indentation_ok(suggestion, line_before, ctx.indent_style),
                marker_text=any(marker in result.text or marker in suggestion for marker in markers),
                exact_first_line=guess == position.removed.strip(),
                edit_similarity=edit_similarity(guess, position.removed.strip()),
                guard_fired="repetition" in ctx.stop_rules.fired,
                forced_prefix=ctx.forced_prefix,
                finish_reason=result.finish_reason,
                new_tokens=result.stats.new_tokens,
                wall_s=wall,
                rules_fired=sorted(ctx.stop_rules.fired),
            )
        )
    return {
        "target": describe_model(pair.target_source),
        "draft": describe_model(pair.draft_source) if pair.draft_source is not None else None,
        "dtype": str(pair.dtype).removeprefix("torch."),
        "prompt": settings.context.prompt_shape
        if settings.context.prompt_shape != "auto"
        else info.prompt_shape,
        "template": _template_name(info, settings.context.prompt_shape),
        "summary": summarize(outcomes),
        "outcomes": [asdict(outcome) for outcome in outcomes],
    }


def _template_name(info: Any, shape: str) -> str:
    from lsp_server.context.builder import choose_template

    return choose_template(info, shape).name


def summarize(outcomes: Sequence[Outcome]) -> dict[str, Any]:
    total = len(outcomes)
    non_empty = [o for o in outcomes if o.non_empty]

    def share(items: Sequence[Outcome], flag: str) -> float | None:
        return sum(bool(getattr(o, flag)) for o in items) / len(items) if items else None

    return {
        "positions": total,
        "non_empty": share(outcomes, "non_empty"),
        "indentation_ok": share(non_empty, "indentation_ok"),
        "marker_text": share(outcomes, "marker_text"),
        "exact_first_line": share(outcomes, "exact_first_line"),
        "edit_similarity": sum(o.edit_similarity for o in outcomes) / total if total else None,
        "guard_fired": share(outcomes, "guard_fired"),
        "healed": share(outcomes, "forced_prefix"),
        "median_wall_s": median([o.wall_s for o in outcomes]),
        "median_new_tokens": median([float(o.new_tokens) for o in outcomes]),
    }


def run_lines(config: LinesConfig) -> dict[str, Any]:
    files = files_to_score(config.folders, config.stdlib)
    positions = line_positions(files, config.positions, config.per_file)
    if not positions:
        raise RuntimeError("no line-start positions found (is the standard library readable?)")
    models = [score_model(target, draft, positions, config) for target, draft in config.models]
    return {"config": _plain(asdict(config)), "goals": GOALS, "models": models}


def _plain(value: Any) -> Any:
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, dict):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(item) for item in value]
    return value


def markdown_report(result: dict[str, Any]) -> str:
    config = result["config"]
    header = [
        "model",
        "positions",
        "non-empty",
        "indented right",
        "marker text",
        "exact next line",
        "edit similarity",
        "guard fired",
        "healed",
        "median s",
    ]
    rows = []
    for model in result["models"]:
        s = model["summary"]
        rows.append(
            [
                f"{model_name(model)} ({model['dtype']}, {model.get('template', '?')})",
                s["positions"],
                percent(s["non_empty"]),
                percent(s["indentation_ok"]),
                percent(s["marker_text"]),
                percent(s["exact_first_line"]),
                s["edit_similarity"],
                percent(s["guard_fired"]),
                percent(s["healed"]),
                s["median_wall_s"],
            ]
        )
    goals = result["goals"]
    lines = [
        "# Line starts\n\n",
        f"{config['positions']} positions at most ({config['per_file']} per held-out file), cursor after the "
        "indentation, the rest of the line removed, the rest of the file as the suffix; default server "
        f"settings, device {config['device']}. Command: `specls bench lines`.\n\n",
        markdown_table(header, rows),
        f"\nGoals on a real model: non-empty >= {percent(goals['non_empty'])}, indented right "
        f"{percent(goals['indentation_ok'])}, marker text {percent(goals['marker_text'])}, exact next line "
        f">= {percent(goals['exact_first_line'])}. Indentation is scored over the non-empty suggestions; "
        "edit similarity is difflib's ratio of the first suggested line and the true line.\n",
    ]
    for model in result["models"]:
        lines.append(f"\n## {model_name(model)}: first positions\n\n")
        sample = [
            [o["position"], code_cell(o["removed"]), code_cell(o["suggestion"].split("\n", 1)[0])]
            for o in model["outcomes"][:12]
        ]
        lines.append(markdown_table(["position", "true line", "suggested first line"], sample))
    return "".join(lines)


def plot(result: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    measures = [
        ("non_empty", "non-empty"),
        ("indentation_ok", "indented right"),
        ("exact_first_line", "exact next line"),
        ("edit_similarity", "edit similarity"),
        ("guard_fired", "guard fired"),
        ("marker_text", "marker text"),
    ]
    fig, ax = plt.subplots(figsize=(9, 4.5))
    width = 0.8 / max(1, len(result["models"]))
    for index, model in enumerate(result["models"]):
        values = [model["summary"][key] or 0.0 for key, _ in measures]
        xs = [x + index * width for x in range(len(measures))]
        ax.bar(xs, values, width=width, label=model_name(model))
    for x, key in enumerate(("non_empty", "indentation_ok", "exact_first_line")):
        goal = result["goals"][key]
        ax.plot([x - 0.1, x + 0.8], [goal, goal], color="black", linestyle="--", linewidth=1)
    ax.plot([], [], color="black", linestyle="--", linewidth=1, label="goal (real model)")
    ax.set_xticks([x + 0.4 - width / 2 for x in range(len(measures))], [label for _, label in measures])
    ax.set_ylim(0, 1.05)
    ax.set_ylabel("share of positions (similarity: mean)")
    ax.set_title(f"specls at line starts, {result['config']['positions']} held-out positions")
    ax.legend(loc="upper right", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_report(result: dict[str, Any], out: Path, tag: str) -> list[Path]:
    return write_result_files(out / f"lines-{tag}", result, markdown_report(result), plot)
