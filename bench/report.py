"""The results tables of README.md and docs/performance.md, generated from `bench/results/*.json`.

Every JSON a benchmark writes is one answer to a question (which model, which benchmark, which setup). The
tables keep the latest answer per question, one table per CPU class, each row naming its load (the 1-minute
load average the run recorded, or "not recorded"). A run that does not record its CPU class gets the class
its own fields or file name imply (an `amx` tag, bf16 on a CPU, `amx_bf16` among recorded flags, a CUDA
device); where nothing implies one, it goes under "CPU class not recorded". Nothing else is inferred.

`specls bench report` rewrites the tables between the markers in both files; `--check` only says whether they
drifted (tests/unit/test_bench_report.py holds them to the JSONs).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
README = ROOT / "README.md"
TARGETS = (README, ROOT / "docs" / "performance.md")
BEGIN, END = "<!-- results:begin (specls bench report) -->", "<!-- results:end -->"
CLASSES = ("AVX2-only", "AVX2-only (emulated)", "AMX/AVX512-BF16", "GPU", "CPU class not recorded")
# Comparison baselines (the old code's run beside the new one): history, not an answer.
BASELINE = re.compile(r"-old-")


@dataclass(frozen=True)
class Row:
    cpu_class: str
    question: str
    answer: str
    load: str
    date: str
    file: str


def cpu_class_of(result: dict[str, Any], stem: str) -> str:
    env = result.get("environment") or {}
    recorded = result.get("cpu_class") or env.get("cpu_class")
    if recorded:
        if str(recorded).startswith("AVX2"):  # an emulated class is its own table: never mistaken for real
            return "AVX2-only (emulated)" if "emulated" in str(recorded) else "AVX2-only"
        return str(recorded)
    if env.get("device", "").startswith("cuda") or "cuda" in stem:
        return "GPU"
    flags = json.dumps(result.get("machine", ""))
    bf16_on_cpu = env.get("device") == "cpu" and env.get("dtype") == "bfloat16"
    if "amx" in stem or "amx_bf16" in flags or "avx512_bf16" in flags or bf16_on_cpu:
        return "AMX/AVX512-BF16"
    if "avx2" in stem.lower():
        return "AVX2-only"
    return "CPU class not recorded"


def load_of(result: dict[str, Any]) -> str:
    machine = result.get("machine_load") or {}
    if isinstance(machine, dict) and machine.get("loadavg_1_5_15"):
        return f"load {machine['loadavg_1_5_15'][0]:.1f} on {machine.get('cpus', '?')} CPUs"
    average = result.get("load_average")
    if isinstance(average, dict) and "end" in average:
        return f"load {average['start']:.1f}-{average['end']:.1f} on {average.get('cpus', '?')} CPUs"
    return "not recorded"


def date_of(result: dict[str, Any]) -> str:
    date = result.get("date_utc") or (result.get("environment") or {}).get("date_utc") or ""
    return str(date)[:16].replace("T", " ")


def model_of(result: dict[str, Any]) -> str:
    target = (result.get("environment") or {}).get("target") or (result.get("config") or {}).get("target")
    if isinstance(target, dict):
        target = target.get("spec") or target.get("location")
    if not target:
        status = ((result.get("server_info") or {}).get("last_status") or {}).get("model")
        target = status or "bundled"
    return Path(str(target)).name if "/" in str(target) else str(target)


# This project's top-level folders: code written after the catalog models were trained.
PROJECT_FOLDERS = ("engine", "lsp_server", "bench", "tests", "editor_clients")


def typed_files(files: Iterable[str]) -> str:
    """The files a typist replay was given, as its question names them: this project's own, or others (a
    replay of other code must not replace the answer for this project's)."""
    files = list(files)
    if all(Path(name).parts[0] in PROJECT_FOLDERS for name in files):
        return f"{len(files)} of this project's files"
    common = os.path.commonpath([str(Path(name).parent) for name in files])
    named = common not in ("", ".") and not Path(common).is_absolute()  # no machine's own paths
    return f"{len(files)} given files" + (f" under {common}/" if named else "")


def _percent(value: float) -> str:
    return f"{100 * value:.1f}%"


def answer_of(kind: str, result: dict[str, Any]) -> tuple[str, str] | None:
    """(question, answer) for the benchmarks the tables summarise; None for the others."""
    summary, config = result.get("summary") or {}, result.get("config") or {}
    model = model_of(result)
    if kind == "throughput":
        speculative = {m: s for m, s in summary.items() if m.startswith("speculative-")}
        if not speculative:
            return None
        best = max(speculative, key=lambda m: speculative[m]["ratio_to_autoregressive_median"])
        dtype = (result.get("environment") or {}).get("dtype", "")
        warm = "prompt warmed" if config.get("warm_prompt") else "cold, prefill timed"
        ratio = speculative[best]["ratio_to_autoregressive_median"]
        return (
            f"throughput, {model} {dtype}, {warm}",
            f"{best} {ratio:.2f}x plain ({speculative[best]['tokens_per_s_median']:.0f} tok/s)",
        )
    if kind == "decode-speed":
        ratios = {
            k: v["ratio_to_best_llama_server"]
            for k, v in summary.items()
            if "ratio_to_best_llama_server" in v
        }
        engines = ", ".join(config.get("engines", ())) or "every engine"
        if not ratios:
            return _engines_against_each_other(result, model, engines)
        best = max(ratios, key=lambda k: ratios[k])
        return (
            f"decode speed vs llama-server, {model} ({engines})",
            f"{best}: {ratios[best]:.2f}x llama-server's best",
        )
    if kind == "keystrokes":
        if summary.get("ghost_on_screen") is None:
            return None
        latency = summary.get("suggestion_latency_ms") or {}
        cancel = (summary.get("server") or {}).get("cancel_to_idle_ms") or {}
        files = config.get("files") or ()
        typed = typed_files(files) if files else f"{config.get('count', '?')} held-out files"
        typed += "".join(f", {key} {value}" for key, value in sorted((config.get("settings") or {}).items()))
        # Another seed types the same files at another cadence: a repeat, kept beside the first run.
        typed += f", seed {config['seed']}" if config.get("seed") else ""
        cancel_p95 = f", cancel to idle p95 {cancel['p95']:.0f} ms" if cancel.get("p95") is not None else ""
        return (
            f"typist replay, {model} ({config.get('backend', 'local')}), {typed}",
            f"ghost text at {_percent(summary['ghost_on_screen'])} of keys, "
            f"{_percent(summary.get('chars_saved') or 0.0)} of characters saved, suggestion p50 / p95 "
            f"{latency.get('p50') or 0:.0f} / {latency.get('p95') or 0:.0f} ms{cancel_p95}",
        )
    if kind == "demo":
        return (
            f"specls demo, {model}",
            f"ghost text at {_percent(result['ghost_on_screen'])} of {result['keystrokes']} key presses "
            f"({_percent(result['ghost_right'])} right), {_percent(result['typed_ahead_hit_rate'])} of suggestions "
            "typed next",
        )
    if kind == "draft-length":
        policies = result.get("policies") or {}
        fixed = [p["tokens_per_modeled_step"] for name, p in policies.items() if name.startswith("fixed-")]
        if "learned" not in policies or not fixed:
            return None
        ratio = policies["learned"]["tokens_per_modeled_step"] / max(fixed)
        drafter = config.get("drafter", "?")
        return (
            f"draft length, {model}, drafter {drafter}",
            f"learned {ratio:.3f}x the best fixed length (modeled)",
        )
    return None


def _engines_against_each_other(result: dict[str, Any], model: str, engines: str) -> tuple[str, str] | None:
    """A decode-speed run without llama-server: the fastest method as a multiple of the first engine's plain
    decoding, and each engine's step and verify of 8."""
    summary, steps = result.get("summary") or {}, result.get("step_profile") or {}
    names = [name for name in (result.get("config") or {}).get("engines", ()) if name in steps]
    baseline = summary.get(f"{names[0]} plain") if names else None
    if not baseline or not baseline.get("tokens_per_s_median"):
        return None
    best = max(summary, key=lambda method: summary[method]["tokens_per_s_median"])
    ratio = summary[best]["tokens_per_s_median"] / baseline["tokens_per_s_median"]
    per_engine = "; ".join(
        f"{name} step {steps[name]['step_ms']:.0f} ms, verify of 8 {steps[name]['verify_cost'].get('8', 0):.2f} steps"
        for name in names
    )
    return f"decode speed, {model} ({engines})", f"{best}: {ratio:.2f}x {names[0]} plain; {per_engine}"


def rows(results: Path = RESULTS) -> list[Row]:
    """The latest answer per (CPU class, question)."""
    latest: dict[tuple[str, str], Row] = {}
    for path in sorted(results.glob("*.json")):
        if BASELINE.search(path.stem):
            continue
        result = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(result, dict):
            continue
        found = answer_of(str(result.get("benchmark", "")), result)
        if found is None:
            continue
        question, answer = found
        row = Row(
            cpu_class_of(result, path.stem), question, answer, load_of(result), date_of(result), path.name
        )
        key = (row.cpu_class, question)
        if key not in latest or row.date > latest[key].date:
            latest[key] = row
    return sorted(latest.values(), key=lambda row: (row.question, row.date))


# The README keeps what a user asks first (what a typist gets, on which CPU); docs/performance.md has every row.
HEADLINE_QUESTIONS = ("typist replay, qwen", "specls demo", "decode speed")


def headline(row: Row) -> bool:
    return row.question.startswith(HEADLINE_QUESTIONS) and row.cpu_class != "CPU class not recorded"


def tables(all_rows: Iterable[Row]) -> str:
    all_rows = list(all_rows)
    parts = [
        "Generated by `specls bench report` from `bench/results/*.json`: the latest result per question.\n"
    ]
    for cpu_class in CLASSES:
        chosen = [row for row in all_rows if row.cpu_class == cpu_class]
        if not chosen:
            continue
        parts += [
            f"\n**{cpu_class}**\n",
            "| question | result | CPU class | load | date (UTC) | file |",
            "|---|---|---|---|---|---|",
        ]
        parts += [
            f"| {r.question} | {r.answer} | {r.cpu_class} | {r.load} | {r.date} | [{r.file}](bench/results/{r.file}) |"
            for r in chosen
        ]
    return "\n".join(parts) + "\n"


def rewritten(text: str, generated: str, *, link_prefix: str) -> str:
    """`text` with the part between the markers replaced; links made relative to the file's folder."""
    start, end = text.index(BEGIN) + len(BEGIN), text.index(END)
    return text[:start] + "\n" + generated.replace("](bench/", f"]({link_prefix}bench/") + text[end:]


def update(check: bool, results: Path = RESULTS) -> list[Path]:
    """Rewrite (or, with `check`, only compare) the tables; returns the files that differ."""
    every_row = rows(results)
    drifted = []
    for target in TARGETS:
        text = target.read_text(encoding="utf-8")
        prefix = "../" * (len(target.relative_to(ROOT).parts) - 1)
        chosen = every_row if target != README else [row for row in every_row if headline(row)]
        new = rewritten(text, tables(chosen), link_prefix=prefix)
        if new != text:
            drifted.append(target)
            if not check:
                target.write_text(new, encoding="utf-8")
    return drifted


# --- `specls bench report` ---

NAME = "report"
HELP = "rewrite the results tables of README.md and docs/performance.md from bench/results/*.json"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--check", action="store_true", help="only say whether the tables drifted (exit 1)")


def command(args: argparse.Namespace) -> int:
    drifted = update(check=args.check)
    for path in drifted:
        print(f"{path.relative_to(ROOT)}: {'drifted' if args.check else 'rewritten'}", file=sys.stderr)
    return 1 if args.check and drifted else 0
