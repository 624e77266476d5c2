"""`specls bench draft-length`: the engine's learned draft-length policy against fixed lengths, and
acceptance per syntax context.

Same held-out prompts and cold-cache rules as the throughput benchmark (`bench.throughput`), or with
`warm_prompt` the prompt read first by the server's warm-up, untimed. Every policy
is wrapped in a `RecordingPolicy`, which names each round's syntax context (the prompt's
`lsp_server.context.syntax_context_of`) and keeps the drafted and accepted counts the loop reports to
`observe`. Policies run interleaved per prompt on one loaded pair; greedy outputs must not depend on the
policy, and the report says if one did.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bench.cli_args import add_engine_arguments, lengths, positive, print_paths, results_tag
from bench.metrics import markdown_table, median, write_result_files
from bench.prompts import BenchPrompt, build_prompts
from bench.throughput import MethodRunner, ThroughputConfig, environment
from engine.api import DraftChoice, DraftContext, DraftPolicy, LearningDraftPolicy
from engine.sequences import first_divergence
from lsp_server.context.syntax_context import SyntaxClassifier, identifiers_in, syntax_classifier

if TYPE_CHECKING:
    from engine.drafters.length import DraftAcceptance

FIXED_LENGTHS = (2, 4, 8, 16, 32)


@dataclass
class RoundRecord:
    syntax_context: str
    drafter: str
    max_tokens: int
    drafted: int
    accepted: int


@dataclass
class RecordingPolicy:
    """A `DraftPolicy` that delegates to `inner` and records every round by syntax context."""

    inner: DraftPolicy
    classify: SyntaxClassifier
    rounds: list[RoundRecord] = field(default_factory=list)
    _pending: tuple[str, int] | None = None

    def choose(self, options: Sequence[DraftContext]) -> DraftChoice:
        choice = self.inner.choose(options)
        if options:  # every offer sees the same text before the next token
            self._pending = (self.classify(options[0].text_before), choice.length)
        return choice

    def observe(self, drafter: str, num_drafted: int, num_accepted: int) -> None:
        if isinstance(self.inner, LearningDraftPolicy):
            self.inner.observe(drafter, num_drafted, num_accepted)
        if self._pending is not None:
            context, limit = self._pending
            self.rounds.append(RoundRecord(context, drafter, limit, num_drafted, num_accepted))
            self._pending = None


def acceptance_by_context(rounds: list[RoundRecord]) -> dict[str, dict[str, Any]]:
    """Per drafter and syntax context ("model / indentation"): rounds, drafted, accepted, acceptance
    (accepted / drafted), mean accepted, and how often a draft held for at least 2, 4, 8 and 16 tokens
    (among drafts that long). Rounds that drafted nothing are left out."""
    grouped: dict[str, list[RoundRecord]] = defaultdict(list)
    for record in rounds:
        if record.drafted > 0:
            grouped[f"{record.drafter} / {record.syntax_context}"].append(record)
    table: dict[str, dict[str, Any]] = {}
    for context, records in sorted(
        grouped.items(), key=lambda item: (item[0].split(" / ")[0], -len(item[1]))
    ):
        drafted = sum(r.drafted for r in records)
        accepted = sum(r.accepted for r in records)
        held = {}
        for length in FIXED_LENGTHS:
            eligible = [r for r in records if r.drafted >= length]
            held[str(length)] = (
                sum(r.accepted >= length for r in eligible) / len(eligible) if eligible else None
            )
        table[context] = {
            "rounds": len(records),
            "drafted": drafted,
            "accepted": accepted,
            "acceptance": accepted / drafted,
            "mean_drafted": drafted / len(records),
            "mean_accepted": accepted / len(records),
            "held_at_least": held,
        }
    return table


@dataclass
class DraftLengthConfig:
    prompts: int = 8
    max_new_tokens: int = 128
    drafter: str = "hybrid"  # the server's default
    target: str | None = None
    draft: str | None = None
    device: str = "auto"
    dtype: str = "auto"
    threads: int | None = None
    repeats: int = 1
    stop_at_eos: bool = False
    fixed_lengths: tuple[int, ...] = FIXED_LENGTHS  # fewer makes a slow model's run shorter
    warm_prompt: bool = False  # each call finds its prompt read by the server's warm-up (untimed)
    out: Path = Path("bench/results")
    tag: str = "cpu"


def policy_names(with_draft_model: bool, fixed_lengths: tuple[int, ...] = FIXED_LENGTHS) -> tuple[str, ...]:
    stop = (NO_CONFIDENCE_STOP,) if with_draft_model else ()
    return ("learned", *stop, *(f"fixed-{k}" for k in fixed_lengths))


# The engine's policy with the draft model's confidence stop off: does that stop pay?
NO_CONFIDENCE_STOP = "learned-no-confidence-stop"


@dataclass
class PolicyFactory:
    """Builds each run's policy. "learned" is the engine's, keeping what it learned across prompts as the
    engine keeps it across keystrokes; "fixed-k" drafts k tokens everywhere."""

    learned: DraftAcceptance = field(default_factory=lambda: _new_acceptance())
    learned_without_stop: DraftAcceptance = field(default_factory=lambda: _new_acceptance())

    def make(self, name: str, prompt: BenchPrompt) -> RecordingPolicy:
        from engine.drafters.length import FixedDraftPolicy, LearnedDraftPolicy

        inner: DraftPolicy
        if name == "learned":
            inner = LearnedDraftPolicy(acceptance=self.learned)
        elif name == NO_CONFIDENCE_STOP:
            inner = LearnedDraftPolicy(acceptance=self.learned_without_stop)
        else:
            inner = FixedDraftPolicy(int(name.split("-")[1]))
        ctx = prompt.context
        return RecordingPolicy(inner, syntax_classifier(identifiers_in(ctx.prefix + ctx.suffix)))


def _new_acceptance() -> DraftAcceptance:
    from engine.drafters.length import DraftAcceptance

    return DraftAcceptance()


def run_draft_length(config: DraftLengthConfig, progress: bool = True) -> dict[str, Any]:
    import torch
    from tqdm import tqdm

    from engine.api import CompletionRequest
    from engine.models import load_pair
    from engine.service import LocalEngine

    pair = load_pair(config.target, config.draft, config.device, config.dtype, num_threads=config.threads)
    engine = LocalEngine(pair=pair)
    prompts = build_prompts(engine.info(), engine.count_tokens, config.prompts)
    if not prompts:
        raise RuntimeError("no held-out prompts could be built (is the standard library readable?)")
    runner = MethodRunner(
        engine,
        ThroughputConfig(
            max_new_tokens=config.max_new_tokens,
            stop_at_eos=config.stop_at_eos,
            warm_prompt=config.warm_prompt,
        ),
    )
    names = policy_names(engine.draft_decoder is not None, config.fixed_lengths)
    longest_fixed = f"fixed-{max(config.fixed_lengths)}"
    factory = PolicyFactory()

    def run(name: str, prompt: BenchPrompt, limit: int) -> dict[str, Any]:
        policy = factory.make(name, prompt)
        runner.reset_caches(prompt, limit)  # empty, or with `warm_prompt` holding the prompt
        ctx = prompt.context
        request = CompletionRequest(
            prompt=ctx.prompt,
            max_new_tokens=limit,
            drafter=config.drafter,
            lookup_context=ctx.lookup_snippets,
            suffix=ctx.suffix,
            draft_policy=policy,
            draft_confidence_stop=0.0 if name == NO_CONFIDENCE_STOP else None,
        )
        runner.sync()
        start = time.perf_counter()
        result = engine.complete(request)
        runner.sync()
        wall = time.perf_counter() - start
        return {
            "policy": name,
            "prompt": prompt.name,
            "wall_s": wall,
            "new_tokens": len(result.token_ids),
            "tokens_per_s": len(result.token_ids) / wall,
            "target_forwards": result.stats.target_forwards,
            # The same rounds priced with the costs measured at load: free of timing noise.
            "modeled_steps": sum(
                engine.step_costs.round_cost(r.drafted, r.drafter == "model") for r in policy.rounds
            ),
            "drafted": result.stats.drafted,
            "accepted": result.stats.accepted,
            "token_ids": list(result.token_ids),
            "rounds": policy.rounds,
        }

    for name in names:  # warm-up
        run(name, prompts[0], 8)
    runs: list[dict[str, Any]] = []
    jobs = [(p, r) for p in range(len(prompts)) for r in range(config.repeats)]
    for prompt_index, repeat in tqdm(jobs, desc="draft-length", unit="prompt", disable=not progress):
        shift = (prompt_index + repeat) % len(names)
        for name in names[shift:] + names[:shift]:
            runs.append(run(name, prompts[prompt_index], config.max_new_tokens))
    result = {
        "benchmark": "draft-length",
        "config": {**asdict(config), "out": str(config.out)},
        "environment": environment(engine, torch.get_num_threads()),
        "prompts": [p.name for p in prompts],
        "step_costs": asdict(engine.step_costs),
        "policies": summarize_policies(runs, names),
        "acceptance_by_context": {
            name: acceptance_by_context([r for run in runs if run["policy"] == name for r in run["rounds"]])
            for name in ("learned", longest_fixed)
        },
        "runs": [{k: v for k, v in run.items() if k not in ("token_ids", "rounds")} for run in runs],
    }
    return result


def summarize_policies(runs: list[dict[str, Any]], names: tuple[str, ...]) -> dict[str, Any]:
    """Per policy: tokens/s, target forwards, acceptance; the learned policy against the best fixed length."""
    by_prompt: dict[str, dict[str, list[dict[str, Any]]]] = defaultdict(lambda: defaultdict(list))
    for run in runs:
        by_prompt[run["prompt"]][run["policy"]].append(run)
    summary: dict[str, Any] = {}
    for name in names:
        mine = [run for run in runs if run["policy"] == name]
        drafted = sum(run["drafted"] for run in mine)
        mismatches = [
            prompt
            for prompt, per in by_prompt.items()
            if first_divergence(per["learned"][0]["token_ids"], per[name][0]["token_ids"]) is not None
        ]
        tokens = sum(run["new_tokens"] for run in mine)
        summary[name] = {
            "tokens_per_s_median": median([run["tokens_per_s"] for run in mine]),
            "tokens_per_s_overall": tokens / sum(run["wall_s"] for run in mine),
            "tokens_per_modeled_step": tokens / max(1e-9, sum(run["modeled_steps"] for run in mine)),
            "tokens_per_forward": sum(r["new_tokens"] for r in mine)
            / max(1, sum(r["target_forwards"] for r in mine)),
            "draft_acceptance": sum(run["accepted"] for run in mine) / drafted if drafted else None,
            "drafted_per_token": drafted / max(1, sum(r["new_tokens"] for r in mine)),
            "output_differs_from_learned_on": mismatches,
            # Same drafted and accepted counts on every prompt: the policies chose the same drafts, so any
            # speed difference between them is timing noise.
            "same_drafts_as_learned": all(
                (per[name][0]["drafted"], per[name][0]["accepted"])
                == (per["learned"][0]["drafted"], per["learned"][0]["accepted"])
                for per in by_prompt.values()
            ),
        }
    fixed = [name for name in names if name.startswith("fixed-")]
    for measure in ("tokens_per_s_overall", "tokens_per_modeled_step"):
        best = max(fixed, key=lambda name: summary[name][measure])
        verdict: dict[str, Any] = {"best_fixed": best}
        verdict["learned"] = summary["learned"][measure] / summary[best][measure]
        summary[f"vs_best_fixed_{measure}"] = verdict
    best = summary["vs_best_fixed_tokens_per_s_overall"]["best_fixed"]
    ratios = [
        statistics.mean(r["tokens_per_s"] for r in per["learned"])
        / statistics.mean(r["tokens_per_s"] for r in per[best])
        for per in by_prompt.values()
        # a prompt the model answered with end-of-text at once has no speed to compare
        if statistics.mean(r["tokens_per_s"] for r in per[best]) > 0
    ]
    summary["vs_best_fixed_tokens_per_s_overall"]["learned_median_over_prompts"] = median(ratios)
    if NO_CONFIDENCE_STOP in summary:
        summary["vs_no_confidence_stop"] = {
            measure: summary["learned"][measure] / summary[NO_CONFIDENCE_STOP][measure]
            for measure in ("tokens_per_s_overall", "tokens_per_modeled_step")
        }
    return summary


def write_report(result: dict[str, Any], out: Path, tag: str) -> list[Path]:
    return write_result_files(
        out / f"draft-length-{tag}", result, markdown_report(result), json_default=_plain
    )


def _costs_line(costs: dict[str, Any]) -> str:
    verify = ", ".join(f"k={k}: {v:.2f}" for k, v in zip(costs["widths"], costs["verify"], strict=True))
    return (
        f"Costs the engine measured at load, in target steps (what the learning policies price drafts with): "
        f"verify {verify}; draft step {costs['draft_step']:.3f}.\n\n"
    )


def _plain(value: Any) -> Any:
    return asdict(value) if isinstance(value, RoundRecord) else str(value)


def markdown_report(result: dict[str, Any]) -> str:
    env, config, policies = result["environment"], result["config"], result["policies"]
    measured = policies["vs_best_fixed_tokens_per_s_overall"]
    modeled = policies["vs_best_fixed_tokens_per_modeled_step"]
    rows = [
        [
            name,
            s["tokens_per_s_overall"],
            s["tokens_per_s_median"],
            s["tokens_per_modeled_step"],
            s["tokens_per_forward"],
            s["draft_acceptance"],
            s["drafted_per_token"],
            "yes"
            if not s["output_differs_from_learned_on"]
            else f"NO ({len(s['output_differs_from_learned_on'])})",
            "yes" if s["same_drafts_as_learned"] else "no",
        ]
        for name, s in policies.items()
        if not name.startswith("vs_")
    ]

    def verdict_line(label: str, verdict: dict[str, Any]) -> str:
        return f"- {label}, learned against the best fixed length (`{verdict['best_fixed']}`): {verdict['learned']:.3f}x\n"

    parts = [
        f"# Draft length ({config['tag']})\n\n",
        f"{env['date_utc']}, commit {env['git_commit']}, {env['device']} {env['dtype']}, "
        f"{env['torch_threads']} torch threads; drafter `{config['drafter']}`, {len(result['prompts'])} held-out "
        f"prompts x {config['repeats']} repeats, {config['max_new_tokens']} new tokens"
        f"{'' if config['stop_at_eos'] else ' (EOS ignored)'}"
        f"{'; each prompt read first by the server warm-up, untimed' if config.get('warm_prompt') else ''}"
        ". Every output is checked against the "
        f"learned policy's (greedy fp32: all must match; bf16 may differ at near-ties).\n\n",
        _costs_line(result["step_costs"]),
        markdown_table(
            [
                "policy",
                "tok/s (all runs)",
                "tok/s (median run)",
                "tokens per modeled step",
                "tokens per target forward",
                "draft acceptance",
                "drafted per token",
                "same output",
                "same drafts as learned",
            ],
            rows,
        ),
        "\n",
        verdict_line("Measured tokens/s over all runs", measured),
        f"  (learned per prompt, median: {measured['learned_median_over_prompts']:.3f}x)\n",
        verdict_line(
            "Tokens per modeled step (the rounds priced with the measured costs, no timing noise)", modeled
        ),
    ]
    stop = policies.get("vs_no_confidence_stop")
    if stop is not None:
        parts.append(
            f"- The draft model's confidence stop, learned with it against `{NO_CONFIDENCE_STOP}`: "
            f"{stop['tokens_per_s_overall']:.3f}x measured tokens/s, {stop['tokens_per_modeled_step']:.3f}x "
            "tokens per modeled step (it counts only where the draft model drafts)\n"
        )
    for name, table in result["acceptance_by_context"].items():
        parts.append(f"\n## Acceptance per syntax context, policy `{name}`\n\n")
        parts.append(
            markdown_table(
                [
                    "drafter / context",
                    "rounds",
                    "mean drafted",
                    "mean accepted",
                    "acceptance",
                    "held >=2",
                    "held >=4",
                    "held >=8",
                    "held >=16",
                    "held >=32",
                ],
                [
                    [
                        context,
                        s["rounds"],
                        s["mean_drafted"],
                        s["mean_accepted"],
                        s["acceptance"],
                        *(s["held_at_least"][str(k)] for k in FIXED_LENGTHS),
                    ]
                    for context, s in table.items()
                ],
            )
        )
    return "".join(parts)


# --- `specls bench draft-length` ---

NAME = "draft-length"
HELP = "learned vs fixed draft lengths; acceptance per syntax context"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--prompts", type=positive, default=8, help="held-out prompts (default: 8)")
    parser.add_argument("--max-new-tokens", type=positive, default=128, help="per prompt (default: 128)")
    parser.add_argument("--repeats", type=positive, default=1, help="runs per prompt and policy")
    parser.add_argument(
        "--drafter",
        default="hybrid",
        choices=("model", "lookup", "suffix", "hybrid"),
        help="the drafter every policy sizes (default: hybrid, the server's)",
    )
    parser.add_argument("--stop-at-eos", action="store_true", help="stop at end-of-text (default: ignore)")
    parser.add_argument(
        "--warm-prompt",
        action="store_true",
        help="read each prompt into the target and draft model first, untimed, as the server's idle "
        "warm-up does (default: cold, prefill timed)",
    )
    parser.add_argument(
        "--fixed-lengths",
        type=lengths,
        help="the fixed draft lengths compared, comma-separated (default: 2,4,8,16,32)",
    )
    add_engine_arguments(parser)


def command(args: argparse.Namespace) -> int:
    config = DraftLengthConfig(
        prompts=args.prompts,
        max_new_tokens=args.max_new_tokens,
        drafter=args.drafter,
        target=args.target,
        draft=args.draft,
        device=args.device,
        dtype=args.dtype,
        threads=args.threads,
        repeats=args.repeats,
        stop_at_eos=args.stop_at_eos,
        fixed_lengths=args.fixed_lengths or FIXED_LENGTHS,
        warm_prompt=args.warm_prompt,
        out=args.out,
        tag=results_tag(args),
    )
    result = run_draft_length(config, progress=not args.quiet)
    return print_paths(write_report(result, config.out, config.tag))
