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
- degeneration guard: the repetition stop rule cut the suggestion;
- first-line confidence: the probability the model gave the suggestion's first line (its tokens' product)
  (`lsp_server.context.gate.first_line_confidence`, the server's gate, stop rule 9).
Each line start is also named by its kind (`prose_lines`): prose (a docstring, or a line inside a string that
spans lines) or code, and the exact next line is given for each: prose written for this project is the
hardest line to foresee, and projects hold different shares of it.

The gate (`minFirstLineProbability`) is off while the positions run, so every suggestion and its confidence
is seen; it is applied afterwards, which is what the server does while it generates (a suggestion whose first
line holds a token below the threshold is not shown). Scored with and without it, over all positions:
- shown: a non-empty suggestion the gate lets through;
- precision: exact among shown; recall: shown and exact among all positions (= exact next line with the gate);
- characters saved: the true line's length for each shown exact line (per shown suggestion, per position).
Calibration (`fit_threshold`): the files alternate between a fitting half and an evaluation half; the
threshold is fit on the first to maximise characters saved per shown suggestion while keeping at least
KEEP_SAVED of the characters the ungated suggestions save there, and reported on the second.
"""

from __future__ import annotations

import argparse
import difflib
import io
import os
import sys
import time
import tokenize
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from bench.cli_args import add_scoring_arguments, non_negative, positive, print_paths, scoring_fields
from bench.metrics import (
    code_cell,
    markdown_table,
    median,
    model_name,
    percent,
    precision_name,
    write_result_files,
)
from bench.prompts import held_out_files

# Goals on a real model (issue: suggestions at line starts).
GOALS = {"non_empty": 0.95, "indentation_ok": 1.0, "marker_text": 0.0, "exact_first_line": 0.30}
MIN_LINES = 20  # shorter files give too little context
SKIPPED_PREFIXES = ("#", "@")  # comment and decorator lines: not what a new line after Enter usually holds
IMPORT_PREFIXES = ("from ", "import ")  # --import-lines: the line starts where import steering applies
CODE, PROSE = "code", "prose"  # a line start's kind (`prose_lines`)
# Upper bounds (characters of the true line, stripped) of the length bands the exact next line is split by:
# one long line right but for a word scores as wrong, so a set of long lines scores low whatever the model.
LENGTH_BANDS: tuple[tuple[int | None, str], ...] = ((30, "up to 30"), (50, "31-50"), (None, "over 50"))


@dataclass(frozen=True)
class LinePosition:
    name: str  # "<relative path>:<line>" (1-based)
    document: str  # the file with the cursor line's code removed
    offset: int  # the cursor: after the line's indentation
    removed: str  # the code that was on the line
    kind: str = CODE  # CODE or PROSE (`prose_lines`)


@dataclass
class LinesConfig:
    models: tuple[tuple[str | None, str | None], ...] = ((None, None),)  # (target, draft); None: bundled
    positions: int = 60
    per_file: int = 2
    folders: tuple[Path, ...] = ()
    device: str = "cpu"
    dtype: str = "auto"
    quantization: str = "auto"  # the target's projections, as `specls serve --quantize` takes them
    threads: int | None = None
    out: Path = Path("bench/results")
    tag: str = "cpu"
    prompt_shape: str = "auto"  # "fim" or "prefix-only" force a shape (ContextSettings.prompt_shape)
    stdlib: bool = True  # also the held-out standard-library files (the bundled pair's held-out set)
    # Stop each suggestion at its first line (maxLines 1): exact next line and the gate read only that line, and
    # it is the same line the full suggestion starts with; "non-empty" and "indented right" then see only it.
    first_line_only: bool = False
    # Each --folder's parent is the workspace folder a client names (`context.workspace`): the server reads
    # where the project defines the names at a line among the imports from there. This also reads what each
    # file imports (the `importedFiles` setting); off, of the project only the file itself is open.
    imported_files: bool = False
    # Server settings by their names (`contextTokens`, `suffixTokens`), applied as a client's are; empty: the
    # server's defaults.
    setting_overrides: dict[str, Any] = field(default_factory=dict)
    # Only line starts at import lines (`from`/`import` at a line's start): where import steering applies.
    import_lines: bool = False
    # Of the line starts chosen, only those among the names of a parenthesized `from M import (` or the strings
    # of `__all__` (`context.import_blocks`), where those lines are steered: the same positions as a full run's.
    name_lists: bool = False


KEEP_SAVED = 0.8  # the calibrated gate may give up at most a fifth of the characters saved without it


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
    first_line_confidence: float | None = None  # the first line's probability, the gate's (None: unknown)
    # Every known token probability of the first line, in order: other gates can be fit from a run's JSON.
    first_line_token_probs: list[float] = field(default_factory=list)
    kind: str = CODE  # the line's kind, CODE or PROSE (`prose_lines`)


def line_positions(
    files: Sequence[tuple[str, str]], count: int, per_file: int = 2, import_lines: bool = False
) -> list[LinePosition]:
    """Up to `count` positions, at most `per_file` per file, at code lines (`import_lines`: import lines) spread
    evenly through each file; when there are more, `count` of them spread evenly over all the files (in the
    order given)."""
    every = _all_line_positions(files, per_file, import_lines)
    if len(every) <= count:
        return every
    return [every[(index * len(every)) // count] for index in range(count)]


def _all_line_positions(
    files: Sequence[tuple[str, str]], per_file: int, import_lines: bool = False
) -> list[LinePosition]:
    positions: list[LinePosition] = []
    for relative, text in files:
        lines = text.split("\n")
        if len(lines) < MIN_LINES:
            continue
        prose = prose_lines(text)
        code = [
            i
            for i, line in enumerate(lines)
            if line.strip()
            and not line.strip().startswith(SKIPPED_PREFIXES)
            and (not import_lines or line.startswith(IMPORT_PREFIXES))
        ]
        picks = sorted({code[int(len(code) * (k + 0.5) / per_file)] for k in range(per_file)}) if code else []
        for index in picks:
            line = lines[index]
            indent = line[: len(line) - len(line.lstrip(" \t"))]
            start = sum(len(earlier) + 1 for earlier in lines[:index])
            offset = start + len(indent)
            document = text[:offset] + text[start + len(line) :]
            kind = PROSE if index in prose else CODE
            positions.append(
                LinePosition(f"{relative}:{index + 1}", document, offset, line[len(indent) :], kind)
            )
    return positions


def prose_lines(text: str) -> set[int]:
    """The lines (0-based) of Python source that start in prose: a string standing as a statement of its own
    (a docstring) from its first line, and the later lines of any string that spans lines (its text). Source
    Python cannot tokenize has none."""
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(text).readline))
    except (tokenize.TokenError, SyntaxError):
        return set()
    prose: set[int] = set()
    starts_statement = True
    for index, token in enumerate(tokens):
        if token.type == tokenize.STRING:
            first, last = token.start[0] - 1, token.end[0] - 1
            following = next((t for t in tokens[index + 1 :] if t.type != tokenize.COMMENT), None)
            if (
                starts_statement
                and following is not None
                and following.type in (tokenize.NEWLINE, tokenize.ENDMARKER)
            ):
                prose.add(first)
            prose.update(range(first + 1, last + 1))
        if token.type not in (tokenize.NL, tokenize.COMMENT):
            starts_statement = token.type in (tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT)
    return prose


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


def server_settings(
    prompt_shape: str = "auto", max_lines: int | None = None, overrides: Mapping[str, Any] | None = None
) -> Any:
    """The server's default settings, with the prompt shape a benchmark compares (and fewer lines), and any
    `overrides` (camelCase settings) applied the way a client's are; a value the server would reject raises
    ValueError."""
    import dataclasses

    from lsp_server.config import ServerSettings, apply_settings

    chosen, report = apply_settings(dict(overrides or {}), ServerSettings())
    if report.invalid or report.unknown:
        raise ValueError("; ".join(report.invalid + report.unknown))
    # The confidence gate is scored afterwards (`gate_scores`), so it must not hide any suggestion here.
    context = dataclasses.replace(
        chosen.context,
        prompt_shape=prompt_shape,
        min_first_line_probability=0.0,
        max_lines=max_lines or chosen.context.max_lines,
    )
    return dataclasses.replace(chosen, context=context)


def describe_prompt_size(model: Mapping[str, Any]) -> str:
    """How many tokens the prompts could hold, and how many of them after the cursor, for the model's table
    row ("" for what a report written before they were recorded lacks)."""
    sizes = [
        ("prompt", model.get("prompt_tokens")),
        ("suffix", model.get("suffix_tokens")),
        ("lines below ahead", model.get("lines_below_tokens")),
    ]
    said = [f"{name} {tokens}" for name, tokens in sizes if tokens is not None]
    return f", {', '.join(said)} tokens" if said else ""


def default_gate_threshold(info: Any) -> float:
    """The gate the server applies to this model with default settings (the model's measured one)."""
    from lsp_server.config import ServerSettings
    from lsp_server.context.builder import gate_threshold

    return gate_threshold(info, ServerSettings().context.min_first_line_probability)


def suggest(
    engine: Any, info: Any, settings: Any, uri: str, document: str, offset: int, workspace: Any = None
) -> Served | None:
    """One suggestion as `specls serve` makes it: the context builder, the engine, the final trim. None where
    the server would not suggest (the cursor's syntax says so). `workspace`: a `WorkspaceFiles` to read
    imported files from, as the server does for its client's workspace folders."""
    from lsp_server.context import build_completion_context, finalize_completion
    from lsp_server.documents import DocumentStore
    from lsp_server.engine_request import engine_request

    store = DocumentStore()
    store.workspace = workspace
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
    from lsp_server.context.builder import affordable_suffix_tokens, full_prompt_tokens, lines_below_tokens
    from lsp_server.context.fim import marker_texts
    from lsp_server.context.gate import first_line_confidence, first_line_token_probs
    from lsp_server.context.indentation import indentation_ok
    from lsp_server.context.workspace import WorkspaceFiles

    pair = load_pair(target, draft, config.device, config.dtype, num_threads=config.threads)
    engine = LocalEngine(pair=pair, quantization=config.quantization)
    info = engine.info()
    settings = server_settings(
        config.prompt_shape,
        max_lines=1 if config.first_line_only else None,
        overrides=config.setting_overrides,
    )
    prompt_tokens = full_prompt_tokens(info, settings.context.max_prompt_tokens)
    suffix_tokens = affordable_suffix_tokens(info, settings.context.max_suffix_tokens)
    markers = marker_texts(info.special_tokens)
    outcomes: list[Outcome] = []
    roots = sorted({folder.resolve().parent for folder in config.folders})
    workspace = WorkspaceFiles(roots) if roots else None
    for position in positions:
        relative = position.name.rsplit(":", 1)[0]
        on_disk = [root / relative for root in roots if (root / relative).is_file()]
        uri = on_disk[0].as_uri() if on_disk else f"file:///held-out/{relative}"
        served = suggest(engine, info, settings, uri, position.document, position.offset, workspace)
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
                first_line_confidence=first_line_confidence(
                    result.text, result.token_probs, result.token_ends
                ),
                first_line_token_probs=[
                    float(f"{prob:.4g}")
                    for prob in first_line_token_probs(result.text, result.token_probs, result.token_ends)
                ],
                kind=position.kind,
            )
        )
    return {
        "target": describe_model(pair.target_source),
        "draft": describe_model(pair.draft_source) if pair.draft_source is not None else None,
        "dtype": str(pair.dtype).removeprefix("torch."),
        "runtime": engine.runtime.describe(),
        "weights": engine.runtime.weights,  # what the matmuls read: "fp32 + w8a8 weights", "bf16", ...
        "prompt": settings.context.prompt_shape
        if settings.context.prompt_shape != "auto"
        else info.prompt_shape,
        "template": _template_name(info, settings.context.prompt_shape),
        "prompt_tokens": prompt_tokens,
        "suffix_tokens": suffix_tokens,
        # Up to this many, and a quarter of the prompt, in templates with a file separator.
        "lines_below_tokens": lines_below_tokens(
            info, settings.context.lines_below_tokens, suffix_tokens, prompt_tokens
        ),
        "summary": summarize(outcomes),
        "gate": gate_report(outcomes, default_gate_threshold(info)),
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
        "by_kind": {
            kind: {
                "positions": len(items),
                "exact": sum(o.exact_first_line for o in items),
                "exact_first_line": share(items, "exact_first_line"),
            }
            for kind in (CODE, PROSE)
            if (items := [o for o in outcomes if o.kind == kind])
        },
        "by_length": {
            band: {
                "positions": len(items),
                "exact": sum(o.exact_first_line for o in items),
                "exact_first_line": share(items, "exact_first_line"),
            }
            for _, band in LENGTH_BANDS
            if (items := [o for o in outcomes if length_band(o.removed) == band])
        },
    }


def length_band(true_line: str) -> str:
    """The band of LENGTH_BANDS the true line's length (stripped) falls in."""
    length = len(true_line.strip())
    return next(name for bound, name in LENGTH_BANDS if bound is None or length <= bound)


def _shown(outcome: Outcome, threshold: float) -> bool:
    confidence = outcome.first_line_confidence
    return outcome.non_empty and (threshold <= 0 or confidence is None or confidence >= threshold)


def gate_scores(outcomes: Sequence[Outcome], threshold: float) -> dict[str, Any]:
    """What the gate at `threshold` shows (0: no gate): shown, precision, recall, characters saved."""
    shown = [o for o in outcomes if _shown(o, threshold)]
    hits = [o for o in shown if o.exact_first_line]
    saved = sum(len(o.removed.strip()) for o in hits)
    return {
        "threshold": threshold,
        "positions": len(outcomes),
        "shown": len(shown),
        "shown_exact": len(hits),
        "precision": len(hits) / len(shown) if shown else None,
        "recall": len(hits) / len(outcomes) if outcomes else None,
        "chars_saved": saved,
        "chars_per_shown": saved / len(shown) if shown else None,
        "chars_per_position": saved / len(outcomes) if outcomes else None,
    }


def fit_threshold(outcomes: Sequence[Outcome], keep: float = KEEP_SAVED) -> float:
    """The threshold with the most characters saved per shown suggestion among those that keep at least
    `keep` of the characters saved without a gate (the lowest such threshold on a tie); 0 when none helps."""
    ungated = gate_scores(outcomes, 0.0)
    candidates = sorted({o.first_line_confidence for o in outcomes if o.first_line_confidence is not None})
    best, best_value = 0.0, ungated["chars_per_shown"] or 0.0
    for threshold in candidates:
        scores = gate_scores(outcomes, threshold)
        value = scores["chars_per_shown"]
        if value is None or scores["chars_saved"] < keep * ungated["chars_saved"]:
            continue
        if value > best_value:
            best, best_value = threshold, value
    return best


def split_by_file(outcomes: Sequence[Outcome]) -> tuple[list[Outcome], list[Outcome]]:
    """(fitting half, evaluation half): the files in their order, alternately; a file's positions stay
    together, so the threshold is judged on files it was not fit on."""
    files: dict[str, int] = {}
    halves: tuple[list[Outcome], list[Outcome]] = ([], [])
    for outcome in outcomes:
        index = files.setdefault(outcome.position.rsplit(":", 1)[0], len(files))
        halves[index % 2].append(outcome)
    return halves


GATE_CURVE = (0.0, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.4, 0.5, 0.6, 0.7)


def gate_report(outcomes: Sequence[Outcome], default_threshold: float) -> dict[str, Any]:
    fit_on, evaluated_on = split_by_file(outcomes)
    fitted = fit_threshold(fit_on)
    return {
        "default_threshold": default_threshold,
        "all": {
            "without": gate_scores(outcomes, 0.0),
            "with_default": gate_scores(outcomes, default_threshold),
        },
        "calibration": {
            "keep_saved": KEEP_SAVED,
            "fit_positions": len(fit_on),
            "fitted_threshold": fitted,
            "fit": {"without": gate_scores(fit_on, 0.0), "with_fitted": gate_scores(fit_on, fitted)},
            "evaluation": {
                "without": gate_scores(evaluated_on, 0.0),
                "with_fitted": gate_scores(evaluated_on, fitted),
                "with_default": gate_scores(evaluated_on, default_threshold),
            },
            "evaluation_curve": [gate_scores(evaluated_on, t) for t in GATE_CURVE],
        },
    }


def describe_cpu() -> str:
    """The CPU class the numbers were measured on: model name and the matrix extensions torch can use."""
    import platform

    name, flags = platform.processor() or platform.machine(), set()
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines():
            if line.startswith("model name") and ":" in line:
                name = line.split(":", 1)[1].strip()
            elif line.startswith("flags") and ":" in line:
                flags = set(line.split(":", 1)[1].split())
    except OSError:
        pass
    extensions = [
        flag for flag in ("amx_bf16", "amx_tile", "avx512_bf16", "avx512f", "avx2") if flag in flags
    ]
    capability = ""
    try:
        import torch

        capability = f"; torch CPU capability {torch.backends.cpu.get_cpu_capability()}"
    except ImportError:
        pass
    return f"{name} ({', '.join(extensions) or 'no AVX2'}){capability}; {os.cpu_count()} logical CPUs"


def describe_settings(config: dict[str, Any]) -> str:
    """The server settings the positions ran with, as the report states them."""
    changed = [f"{name} {value}" for name, value in config.get("setting_overrides", {}).items()]
    return f"default server settings but {', '.join(changed)}" if changed else "default server settings"


def describe_code(config: LinesConfig) -> str:
    parts = (
        [f"the .py files under {', '.join(str(folder) for folder in config.folders)}"]
        if config.folders
        else []
    )
    if config.stdlib:
        parts.append("held-out standard-library files (pretrained models saw the standard library)")
    if config.folders:
        parts.append("each folder's parent as the client's workspace folder")
    if config.imported_files:
        parts.append("each file's imports read from its project on disk")
    if config.import_lines:
        parts.append("line starts at import lines only")
    if config.name_lists:
        parts.append(
            "of the line starts chosen, those among an import block's names or `__all__`'s strings only"
        )
    return "; ".join(parts)


def in_name_list(position: LinePosition) -> bool:
    """Whether the line start is among the names of a parenthesized import or the strings of `__all__`."""
    from lsp_server.context.import_blocks import export_list_at, import_block_at

    at = (position.document, position.offset)
    return import_block_at(*at) is not None or export_list_at(*at) is not None


def run_lines(config: LinesConfig) -> dict[str, Any]:
    files = files_to_score(config.folders, config.stdlib)
    positions = line_positions(files, config.positions, config.per_file, config.import_lines)
    if config.name_lists:
        positions = [position for position in positions if in_name_list(position)]
    if not positions:
        raise RuntimeError("no line-start positions found (is the standard library readable?)")
    models = [score_model(target, draft, positions, config) for target, draft in config.models]
    return {
        "config": _plain(asdict(config)),
        "machine": describe_cpu(),
        "code": describe_code(config),
        "goals": GOALS,
        "models": models,
    }


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
                f"{model_name(model)} ({precision_name(model)}, {model.get('template', '?')}"
                f"{describe_prompt_size(model)})",
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
        "indentation, the rest of the line removed, the rest of the file as the suffix; "
        f"{describe_settings(config)}, device {config['device']}. Command: `specls bench lines`"
        f"{' --first-line (each suggestion stops after its first line)' if config.get('first_line_only') else ''}.\n\n",
        f"Machine: {result.get('machine', 'not recorded')}. Code: {result.get('code', 'not recorded')}.\n\n",
        markdown_table(header, rows),
        f"\nGoals on a real model: non-empty >= {percent(goals['non_empty'])}, indented right "
        f"{percent(goals['indentation_ok'])}, marker text {percent(goals['marker_text'])}, exact next line "
        f">= {percent(goals['exact_first_line'])}. Indentation is scored over the non-empty suggestions; "
        "edit similarity is difflib's ratio of the first suggested line and the true line.\n",
    ]
    lines.extend(kinds_markdown(model) for model in result["models"] if model["summary"].get("by_kind"))
    lines.extend(lengths_markdown(model) for model in result["models"] if model["summary"].get("by_length"))
    for model in result["models"]:
        if "gate" in model:
            lines.append(gate_markdown(model_name(model), model["gate"]))
    for model in result["models"]:
        lines.append(f"\n## {model_name(model)}: first positions\n\n")
        sample = [
            [o["position"], code_cell(o["removed"]), code_cell(o["suggestion"].split("\n", 1)[0])]
            for o in model["outcomes"][:12]
        ]
        lines.append(markdown_table(["position", "true line", "suggested first line"], sample))
    return "".join(lines)


def kinds_markdown(model: dict[str, Any]) -> str:
    """One sentence: the exact next line at code and at prose line starts."""
    parts = [
        f"{kind} {scores['exact']} of {scores['positions']} ({percent(scores['exact_first_line'])})"
        for kind, scores in model["summary"]["by_kind"].items()
    ]
    return (
        f"\n{model_name(model)}, exact next line by the line's kind (prose: a docstring, or a line inside a "
        f"string that spans lines): {'; '.join(parts)}.\n"
    )


def lengths_markdown(model: dict[str, Any]) -> str:
    """One sentence: the exact next line by the true line's length."""
    parts = [
        f"{band} characters {scores['exact']} of {scores['positions']} ({percent(scores['exact_first_line'])})"
        for band, scores in model["summary"]["by_length"].items()
    ]
    return f"\n{model_name(model)}, exact next line by the true line's length: {'; '.join(parts)}.\n"


def gate_markdown(name: str, gate: dict[str, Any]) -> str:
    """The gate's table: precision and recall side by side, without and with it."""
    calibration = gate["calibration"]
    evaluation = calibration["evaluation"]

    def row(label: str, scores: dict[str, Any]) -> list[object]:
        return [
            label,
            scores["threshold"],
            scores["positions"],
            scores["shown"],
            percent(scores["precision"]),
            percent(scores["recall"]),
            scores["chars_per_shown"],
            scores["chars_per_position"],
        ]

    header = [
        "positions, gate",
        "threshold",
        "positions",
        "shown",
        "precision (exact among shown)",
        "recall (shown and exact among all)",
        "chars saved per shown",
        "chars saved per position",
    ]
    rows = [
        row("all, no gate", gate["all"]["without"]),
        row("all, default threshold", gate["all"]["with_default"]),
        row("fitting half, no gate", calibration["fit"]["without"]),
        row("fitting half, fitted threshold", calibration["fit"]["with_fitted"]),
        row("evaluation half, no gate", evaluation["without"]),
        row("evaluation half, fitted threshold", evaluation["with_fitted"]),
        row("evaluation half, default threshold", evaluation["with_default"]),
    ]
    curve = [row("evaluation half", scores) for scores in calibration["evaluation_curve"]]
    return "".join(
        [
            f"\n## {name}: the confidence gate (the first line's probability)\n\n",
            f"Threshold fit on {calibration['fit_positions']} positions (alternate files) to maximise characters "
            f"saved per shown suggestion, keeping >= {percent(calibration['keep_saved'])} of the characters saved "
            f"without a gate: {calibration['fitted_threshold']:.3g}; the server's default: "
            f"{gate['default_threshold']:.3g}. Recall is the exact next line with the gate.\n\n",
            markdown_table(header, rows),
            "\nThe evaluation half at other thresholds:\n\n",
            markdown_table(header, curve),
        ]
    )


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


# --- `specls bench lines` ---

NAME = "lines"
HELP = "suggestions at line starts in held-out code: non-empty, indented, exact"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--positions", type=positive, default=60, help="line starts in all (default: 60)")
    parser.add_argument("--per-file", type=positive, default=2, help="line starts per file (default: 2)")
    parser.add_argument(
        "--folder",
        dest="folders",
        type=Path,
        action="append",
        default=[],
        help="also score the .py files of this folder (repeatable)",
    )
    add_scoring_arguments(parser)
    parser.add_argument(
        "--no-stdlib",
        action="store_true",
        help="score only the --folder files, not the held-out standard library (which pretrained models saw)",
    )
    parser.add_argument(
        "--imported-files",
        action="store_true",
        help="read the files each --folder file imports from disk (its parent as the workspace folder), "
        "as the server does for a client's workspace",
    )
    parser.add_argument(
        "--no-import-definitions",
        action="store_true",
        help="leave the workspace's definitions out of the prompt at lines among the imports (the server's "
        "importDefinitions false)",
    )
    parser.add_argument(
        "--no-steer-imports",
        action="store_true",
        help="let the model name modules and names the workspace lacks on `from` lines among the imports (the "
        "server's steerImports false)",
    )
    parser.add_argument(
        "--context-tokens",
        type=positive,
        help="the prompt budget (the server's contextTokens; default: what this machine reads in time, as the "
        "server chooses)",
    )
    parser.add_argument(
        "--suffix-tokens",
        type=non_negative,
        help="at most this many tokens after the cursor (the server's suffixTokens; default: what this "
        "machine re-reads in time, as the server chooses)",
    )
    parser.add_argument(
        "--lines-below-tokens",
        type=non_negative,
        help="at most this many tokens of the lines below the cursor ahead of the file's text (the server's "
        "linesBelowTokens; default: the model's measured number, 320 for the Qwen2.5-Coder 1.5B, else 0)",
    )
    parser.add_argument(
        "--import-lines",
        action="store_true",
        help="only line starts at import lines (`from`/`import` at a line's start), where import steering "
        "applies",
    )
    parser.add_argument(
        "--name-lists",
        action="store_true",
        help="of the line starts chosen, only those among the names of a parenthesized `from M import (` or the "
        "strings of `__all__`, where those lines are steered",
    )
    parser.add_argument(
        "--first-line",
        action="store_true",
        help="stop each suggestion after its first line (all that exact next line and the gate read; faster)",
    )


def command(args: argparse.Namespace) -> int:
    missing = [str(folder) for folder in args.folders if not folder.is_dir()]
    if missing:
        print(f"specls bench: no such folder: {', '.join(missing)}", file=sys.stderr)
        return 2
    scoring = scoring_fields(args)
    if scoring is None:
        return 2
    named = (
        ("contextTokens", args.context_tokens),
        ("suffixTokens", args.suffix_tokens),
        ("linesBelowTokens", args.lines_below_tokens),
        ("importedFiles", True if args.imported_files else None),
        ("importDefinitions", False if args.no_import_definitions else None),
        ("steerImports", False if args.no_steer_imports else None),
    )
    overrides = {name: value for name, value in named if value is not None}
    try:
        server_settings(overrides=overrides)  # the server's own checks, before any model loads
    except ValueError as exc:
        print(f"specls bench lines: {exc}", file=sys.stderr)
        return 2
    config = LinesConfig(
        positions=args.positions,
        per_file=args.per_file,
        folders=tuple(args.folders),
        prompt_shape=(args.prompt_shapes or ["auto"])[0],
        stdlib=not args.no_stdlib,
        first_line_only=args.first_line,
        imported_files=args.imported_files,
        import_lines=args.import_lines,
        name_lists=args.name_lists,
        setting_overrides=overrides,
        **scoring,
    )
    return print_paths(write_report(run_lines(config), config.out, config.tag))
