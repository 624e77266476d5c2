"""HumanEval infilling (Bavarian et al. 2022): a public score of suggestions, through the server's own pieces.

Data: `bench/data/humaneval-infilling/` (MIT, see its README). Each task is a HumanEval function with a hole
of whole lines. The editor situation is the one after Enter: the hole's first line is open with its
indentation typed, the cursor after it, the rest of the function below. Each suggestion comes from
`bench.lines.suggest`: `build_completion_context` (prompt shape, stop rules, token healing), the local engine
and `finalize_completion`, with the server's default settings.

Scored per task:
- pass@1 (greedy): `prompt + indentation + suggestion + suffix + test + check(entry_point)` runs in a fresh
  Python process (`-I`, empty environment, a temporary folder) with a time limit, a memory limit and the
  socket module disabled; it passes when it exits 0;
- exact match: the suggestion's lines equal the hole's lines (stripped), the first line only for the
  single-line set;
- non-empty, and median time per suggestion.

Sets: `single-line` (1,033 tasks; one line of a body, what an editor asks at a line start) and
`multi-line` (5,815); a fixed, evenly spread sample of `--tasks` of them.

    specls bench infill --target qwen2.5-coder-0.5b --tasks 120
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from bench.cli_args import add_scoring_arguments, positive, print_paths, scoring_fields
from bench.lines import describe_cpu, server_settings, suggest
from bench.metrics import (
    code_cell,
    markdown_table,
    median,
    model_name,
    percent,
    precision_name,
    write_result_files,
)

DATA_DIR = Path(__file__).resolve().parent / "data" / "humaneval-infilling"
SETS = {
    "single-line": "HumanEval-SingleLineInfilling.jsonl.gz",
    "multi-line": "HumanEval-MultiLineInfilling.jsonl.gz",
}
TIME_LIMIT_S = 10.0
MEMORY_LIMIT_BYTES = 1 << 30
# Run before the task's code: the tests need no network, so a program that reaches for it fails.
NO_NETWORK = (
    "import socket as _socket\n"
    "def _refuse(*args, **kwargs):\n"
    "    raise OSError('network access is disabled in specls bench infill')\n"
    "_socket.socket = _socket.create_connection = _socket.getaddrinfo = _refuse\n"
)


@dataclass(frozen=True)
class InfillTask:
    task_id: str
    entry_point: str
    prompt: str
    suffix: str
    canonical_solution: str
    test: str

    @property
    def indentation(self) -> str:
        """What the editor has typed on the hole's first line before the cursor (auto-indent after Enter)."""
        first = self.canonical_solution.split("\n", 1)[0]
        return first[: len(first) - len(first.lstrip(" \t"))]

    def document(self) -> tuple[str, int]:
        """The file as the editor holds it with the hole emptied, and the cursor offset."""
        cursor = len(self.prompt) + len(self.indentation)
        return self.prompt + self.indentation + "\n" + self.suffix, cursor

    def program(self, suggestion: str) -> str:
        body = self.indentation + suggestion
        return f"{self.prompt}{body}\n{self.suffix}\n{self.test}\ncheck({self.entry_point})\n"


@dataclass
class InfillConfig:
    models: tuple[tuple[str | None, str | None], ...] = ((None, None),)
    task_set: str = "single-line"
    tasks: int = 120
    prompt_shapes: tuple[str, ...] = ("auto",)
    device: str = "cpu"
    dtype: str = "auto"
    quantization: str = "auto"  # the target's projections, as `specls serve --quantize` takes them
    threads: int | None = None
    out: Path = Path("bench/results")
    tag: str = "cpu"


@dataclass
class InfillOutcome:
    task_id: str
    suggestion: str
    passed: bool
    exact: bool
    non_empty: bool
    wall_s: float
    failure: str = ""  # the last line of the test run's error output
    rules_fired: list[str] = field(default_factory=list)


def load_tasks(task_set: str, data_dir: Path = DATA_DIR) -> list[InfillTask]:
    if task_set not in SETS:
        raise ValueError(f"unknown set {task_set!r}; choose one of {', '.join(SETS)}")
    with gzip.open(data_dir / SETS[task_set], "rt", encoding="utf-8") as handle:
        rows = [json.loads(line) for line in handle if line.strip()]
    fields = InfillTask.__dataclass_fields__
    return [InfillTask(**{key: row[key] for key in fields}) for row in rows]


def spread_sample(tasks: Sequence[InfillTask], count: int) -> list[InfillTask]:
    """`count` tasks evenly spread over the file (all of them when there are fewer): the same every run."""
    if count >= len(tasks):
        return list(tasks)
    return [tasks[(index * len(tasks)) // count] for index in range(count)]


def exact_match(suggestion: str, hole: str, single_line: bool) -> bool:
    ours = [line.strip() for line in suggestion.rstrip("\n").split("\n")]
    truth = [line.strip() for line in hole.rstrip("\n").split("\n")]
    return ours[:1] == truth[:1] if single_line else ours == truth


def _limit_resources() -> None:  # runs in the child before exec
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT_BYTES, MEMORY_LIMIT_BYTES))
    cpu = int(TIME_LIMIT_S) + 1
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu))


def run_tests(program: str, time_limit_s: float = TIME_LIMIT_S) -> tuple[bool, str]:
    """(passed, why not): the program in a fresh, isolated interpreter with time, memory and network limits."""
    with tempfile.TemporaryDirectory(prefix="specls-infill-") as folder:
        path = Path(folder) / "task.py"
        path.write_text(NO_NETWORK + program, encoding="utf-8")
        try:
            completed = subprocess.run(
                [sys.executable, "-I", str(path)],
                cwd=folder,
                env={"PATH": os.environ.get("PATH", "")},
                capture_output=True,
                text=True,
                timeout=time_limit_s,
                preexec_fn=_limit_resources,
                check=False,
            )
        except subprocess.TimeoutExpired:
            return False, f"timed out after {time_limit_s:.0f} s"
    if completed.returncode == 0:
        return True, ""
    errors = completed.stderr.strip().splitlines()
    return False, errors[-1][:200] if errors else f"exit code {completed.returncode}"


def score_model(
    target: str | None,
    draft: str | None,
    tasks: Sequence[InfillTask],
    prompt_shape: str,
    config: InfillConfig,
) -> dict[str, Any]:
    from engine.models import describe_model, load_pair
    from engine.service import LocalEngine
    from lsp_server.context.builder import choose_template

    pair = load_pair(target, draft, config.device, config.dtype, num_threads=config.threads)
    engine = LocalEngine(pair=pair, quantization=config.quantization)
    info = engine.info()
    single = config.task_set == "single-line"
    # The single-line set scores the first line only, so the suggestion stops there (the same first line).
    settings = server_settings(prompt_shape, max_lines=1 if single else None)
    outcomes: list[InfillOutcome] = []
    for task in tasks:
        document, cursor = task.document()
        uri = f"file:///humaneval/{task.task_id.replace('/', '_')}.py"
        started = time.perf_counter()
        served = suggest(engine, info, settings, uri, document, cursor)
        text = "" if served is None else served.text
        if single:
            text = text.split("\n", 1)[0]
        passed, failure = run_tests(task.program(text))
        outcomes.append(
            InfillOutcome(
                task_id=task.task_id,
                suggestion=text,
                passed=passed,
                exact=exact_match(text, task.canonical_solution, single),
                non_empty=bool(text.strip()),
                wall_s=served.wall_s if served is not None else time.perf_counter() - started,
                failure=failure,
                rules_fired=sorted(served.context.stop_rules.fired) if served is not None else [],
            )
        )
    total = len(outcomes)
    return {
        "target": describe_model(pair.target_source),
        "draft": describe_model(pair.draft_source) if pair.draft_source is not None else None,
        "dtype": str(pair.dtype).removeprefix("torch."),
        "runtime": engine.runtime.describe(),
        "weights": engine.runtime.weights,  # what the matmuls read: "fp32 + w8a8 weights", "bf16", ...
        "template": choose_template(info, prompt_shape).name,
        "prompt_shape": prompt_shape if prompt_shape != "auto" else info.prompt_shape,
        "summary": {
            "tasks": total,
            "pass_at_1": sum(o.passed for o in outcomes) / total if total else None,
            "exact_match": sum(o.exact for o in outcomes) / total if total else None,
            "non_empty": sum(o.non_empty for o in outcomes) / total if total else None,
            "median_wall_s": median([o.wall_s for o in outcomes]),
        },
        "outcomes": [asdict(outcome) for outcome in outcomes],
    }


def run_infill(config: InfillConfig) -> dict[str, Any]:
    tasks = spread_sample(load_tasks(config.task_set), config.tasks)
    models = [
        score_model(target, draft, tasks, shape, config)
        for target, draft in config.models
        for shape in config.prompt_shapes
    ]
    plain_config = {
        key: str(value) if isinstance(value, Path) else value for key, value in asdict(config).items()
    }
    return {"config": plain_config, "machine": describe_cpu(), "models": models}


def model_label(model: dict[str, Any]) -> str:
    return f"{model_name(model)} ({precision_name(model)}, {model['template']})"


def markdown_report(result: dict[str, Any]) -> str:
    config = result["config"]
    rows = [
        [
            model_label(model),
            model["summary"]["tasks"],
            _percent(model["summary"]["pass_at_1"]),
            _percent(model["summary"]["exact_match"]),
            _percent(model["summary"]["non_empty"]),
            model["summary"]["median_wall_s"],
        ]
        for model in result["models"]
    ]
    header = ["model (dtype, prompt)", "tasks", "pass@1", "exact match", "non-empty", "median s"]
    lines = [
        f"# HumanEval infilling, {config['task_set']}\n\n",
        f"{config['tasks']} tasks at most, evenly spread over the set; greedy; the cursor after the hole's "
        "indentation; default server settings (context builder, stop rules, token healing); pass@1 runs "
        "each task's tests in an isolated Python process. Command: `specls bench infill`.\n\n",
        f"Machine: {result.get('machine', 'not recorded')}. Code: HumanEval (public since 2021: the models "
        "may have seen these functions).\n\n",
        markdown_table(header, rows),
    ]
    for model in result["models"]:
        lines.append(f"\n## {model_label(model)}: first tasks\n\n")
        sample = [
            [o["task_id"], "pass" if o["passed"] else "fail", code_cell(o["suggestion"].split("\n", 1)[0])]
            for o in model["outcomes"][:8]
        ]
        lines.append(markdown_table(["task", "tests", "suggested first line"], sample))
    return "".join(lines)


def _percent(value: float | None) -> str:
    return percent(value, decimals=1)


def write_report(result: dict[str, Any], out: Path, tag: str) -> list[Path]:
    name = f"infill-{result['config']['task_set']}-{tag}"
    return write_result_files(out / name, result, markdown_report(result), None)


# --- `specls bench infill` ---

NAME = "infill"
HELP = "HumanEval infilling: pass@1 and exact match, through the server"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--set", dest="task_set", choices=("single-line", "multi-line"), default="single-line"
    )
    parser.add_argument("--tasks", type=positive, default=120, help="tasks, evenly spread (default: 120)")
    add_scoring_arguments(parser)


def command(args: argparse.Namespace) -> int:
    scoring = scoring_fields(args)
    if scoring is None:
        return 2
    config = InfillConfig(
        task_set=args.task_set,
        tasks=args.tasks,
        prompt_shapes=tuple(args.prompt_shapes or ["auto"]),
        **scoring,
    )
    return print_paths(write_report(run_infill(config), config.out, config.tag))
