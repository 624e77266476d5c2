"""`specls bench throughput`: speculative decoding against the baseline and against transformers' peers.

Every method runs on the same loaded target, interleaved prompt by prompt (the method order rotates per
prompt) in one process, so machine noise hits all of them alike. Each call starts from an empty KV cache
(prefill included in the timing) and, unless `--stop-at-eos`, ignores end-of-text so every method
generates exactly `--max-new-tokens` tokens. Greedy outputs of all methods are compared token by token
with the autoregressive baseline.

Step costs: `c` = one draft step / one target step, measured on the loaded decoders at a real prompt
(a lookup or suffix "step" is its propose time divided by the tokens it proposes); `v(k)` = one target
forward over k + 1 tokens / one target step, which the paper's formula assumes is 1.
"""

from __future__ import annotations

import platform
import statistics
import subprocess
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bench.metrics import (
    alpha_from_rounds,
    first_difference,
    markdown_table,
    median,
    theoretical_speedup,
    write_result_files,
)
from bench.prompts import BenchPrompt, build_prompts

if TYPE_CHECKING:
    from engine.api import DraftLengthPolicy
    from engine.drafters.base import Drafter
    from engine.service import LocalEngine
    from lsp_server.context import SyntaxAcceptance

ENGINE_DRAFTERS = ("model", "lookup", "suffix", "hybrid")
PEER_METHODS = ("hf-greedy", "hf-assisted", "hf-prompt-lookup")
METHODS = ("autoregressive", *(f"speculative-{name}" for name in ENGINE_DRAFTERS), *PEER_METHODS)
VERIFY_WIDTHS = (1, 2, 4, 8, 16)  # draft lengths k at which the k + 1-token verify cost is measured
HF_PROMPT_LOOKUP_TOKENS = 10  # transformers' documented default suggestion


@dataclass
class ThroughputConfig:
    prompts: int = 8
    max_new_tokens: int = 128
    target: str | None = None
    draft: str | None = None
    device: str = "auto"
    threads: int | None = None
    repeats: int = 1
    methods: tuple[str, ...] = METHODS
    draft_policy: str = "syntax"  # "syntax" (what the server uses), "adaptive" (engine default) or an int
    stop_at_eos: bool = False
    out: Path = Path("bench/results")
    tag: str = "cpu"


@dataclass
class Run:
    method: str
    prompt: str
    wall_s: float
    new_tokens: int
    token_ids: list[int]
    stats: dict[str, Any] = field(default_factory=dict)

    @property
    def tokens_per_s(self) -> float:
        return self.new_tokens / self.wall_s if self.wall_s > 0 else float("nan")


def make_policy(name: str, prompt: BenchPrompt, learned: SyntaxAcceptance) -> DraftLengthPolicy | None:
    """None lets the engine use its adaptive default; "syntax" is the server's policy, which keeps what it
    learns across prompts in `learned` (the server keeps it across keystrokes)."""
    from lsp_server.context import FixedDraftPolicy, shared_learning

    if name == "adaptive":
        return None
    if name == "syntax":
        return shared_learning(prompt.context.draft_policy, learned)
    return FixedDraftPolicy(int(name))


class MethodRunner:
    """Runs one method on one prompt from a cold cache and times it."""

    def __init__(self, engine: LocalEngine, config: ThroughputConfig) -> None:
        import torch

        from lsp_server.context import SyntaxAcceptance

        self.engine = engine
        self.config = config
        self.torch = torch
        self.learned = SyntaxAcceptance()  # the syntax policy's acceptance curves, kept across prompts
        self.pair = engine.pair
        self.eos_ids = engine.eos_ids
        if not config.stop_at_eos:
            # Every method generates exactly max_new_tokens tokens: same work, comparable outputs.
            engine.eos_ids = frozenset()
            for model in (self.pair.target, self.pair.draft):
                model.generation_config.eos_token_id = None
        else:
            eos = sorted(self.eos_ids)
            for model in (self.pair.target, self.pair.draft):
                model.generation_config.eos_token_id = eos
        pad = self.pair.tokenizer.pad_token_id
        for model in (self.pair.target, self.pair.draft):
            model.generation_config.pad_token_id = pad if pad is not None else 0

    def prompt_ids(self, prompt: BenchPrompt) -> list[int]:
        from engine.generation import fit_prompt

        ids, _ = fit_prompt(
            self.engine.encode(prompt.context.prompt), self.engine.window, self.config.max_new_tokens
        )
        return ids

    def run(self, method: str, prompt: BenchPrompt, max_new_tokens: int | None = None) -> Run:
        limit = max_new_tokens or self.config.max_new_tokens
        self._sync()
        start = time.perf_counter()
        if method in PEER_METHODS:
            token_ids, stats = self._run_hf(method, prompt, limit)
        else:
            token_ids, stats = self._run_engine(method, prompt, limit)
        self._sync()
        wall = time.perf_counter() - start
        if self.config.stop_at_eos:  # transformers keeps the EOS token; the engine does not
            while token_ids and token_ids[-1] in self.eos_ids:
                token_ids = token_ids[:-1]
        return Run(method, prompt.name, wall, len(token_ids), token_ids, stats)

    def _run_engine(self, method: str, prompt: BenchPrompt, limit: int) -> tuple[list[int], dict[str, Any]]:
        from engine.api import CompletionRequest

        drafter = "none" if method == "autoregressive" else method.removeprefix("speculative-")
        # A cold start for every call: no method profits from a cache another one left behind.
        self.engine.target.crop(0)
        self.engine.draft_decoder.crop(0)
        ctx = prompt.context
        request = CompletionRequest(
            prompt=ctx.prompt,
            max_new_tokens=limit,
            drafter=drafter,
            lookup_context=ctx.lookup_snippets,
            suffix=ctx.suffix,
            draft_policy=make_policy(self.config.draft_policy, prompt, self.learned),
        )
        result = self.engine.complete(request)
        return list(result.token_ids), dict(result.stats)

    def _run_hf(self, method: str, prompt: BenchPrompt, limit: int) -> tuple[list[int], dict[str, Any]]:
        torch = self.torch
        ids = torch.tensor([self.prompt_ids(prompt)], device=self.pair.device)
        kwargs: dict[str, Any] = {}
        if method == "hf-assisted":
            kwargs["assistant_model"] = self.pair.draft
        elif method == "hf-prompt-lookup":
            kwargs["prompt_lookup_num_tokens"] = HF_PROMPT_LOOKUP_TOKENS
        with torch.inference_mode():
            generate: Any = self.pair.target.generate  # transformers' stubs type it loosely
            out = generate(
                ids,
                attention_mask=torch.ones_like(ids),
                max_new_tokens=limit,
                do_sample=False,
                **kwargs,
            )
        return out[0, ids.shape[1] :].tolist(), {}

    def _sync(self) -> None:
        if self.pair.device.type == "cuda":
            self.torch.cuda.synchronize()


def _timed(fn: Callable[[], object], repeats: int, sync: Callable[[], None]) -> float:
    """Median seconds of `repeats` calls (after one warm-up call)."""
    fn()
    samples = []
    for _ in range(repeats):
        sync()
        start = time.perf_counter()
        fn()
        sync()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def measure_step_costs(runner: MethodRunner, prompt: BenchPrompt, repeats: int = 20) -> dict[str, Any]:
    """Target step, draft step, verify widths and copy-drafter propose times at a real prompt."""
    from engine.drafters.lookup import PromptLookupDrafter
    from engine.drafters.suffix import SuffixDrafter
    from engine.generation import sync_cache

    engine = runner.engine
    ids = runner.prompt_ids(prompt)
    target, draft = engine.target, engine.draft_decoder
    with runner.torch.inference_mode():
        for decoder in (target, draft):
            decoder.crop(0)
            sync_cache(decoder, ids)
        base = len(ids) - 1

        def step(decoder: Any, width: int) -> Callable[[], object]:
            def call() -> object:
                logits = decoder.forward(ids[-1:] * width)
                decoder.crop(base)
                return logits

            return call

        target_step = _timed(step(target, 1), repeats, runner._sync)
        draft_step = _timed(step(draft, 1), repeats, runner._sync)
        verify = {k: _timed(step(target, k + 1), repeats, runner._sync) / target_step for k in VERIFY_WIDTHS}
    lookup = PromptLookupDrafter([engine.encode(s) for s in prompt.context.lookup_snippets if s])
    suffix = SuffixDrafter(engine.encode(prompt.context.suffix))
    copy_costs: dict[str, float] = {}
    drafters: tuple[tuple[str, Drafter], ...] = (("lookup", lookup), ("suffix", suffix))
    for name, drafter in drafters:
        proposed = max(1, len(drafter.propose(ids, 16).token_ids))
        copy_costs[name] = _timed(partial(drafter.propose, ids, 16), repeats, runner._sync) / proposed
    return {
        "target_step_s": target_step,
        "draft_step_s": draft_step,
        "c": {
            "model": draft_step / target_step,
            "lookup": copy_costs["lookup"] / target_step,
            "suffix": copy_costs["suffix"] / target_step,
        },
        "verify_cost": {str(k): v for k, v in verify.items()},
        "prompt_tokens": len(ids),
    }


def verify_cost_at(costs: Mapping[str, float], k: float) -> float:
    """v(k) interpolated between the measured widths as the engine does (`StepCosts.verify_cost`); beyond the
    widest measurement, the widest cost (the benchmark does not extrapolate)."""
    from engine.costs import StepCosts

    measured = sorted((int(width), cost) for width, cost in costs.items())
    widths, verify = zip(*measured, strict=True)
    return StepCosts(widths=widths, verify=verify, draft_step=0.0).verify_cost(min(k, widths[-1]))


def summarize(runs: list[Run], step_costs: dict[str, Any], methods: tuple[str, ...]) -> dict[str, Any]:
    """Per method: tokens/s, ratio to autoregressive (median over prompts), acceptance, theory vs achieved."""
    by_prompt: dict[str, dict[str, list[Run]]] = {}
    for run in runs:
        by_prompt.setdefault(run.prompt, {}).setdefault(run.method, []).append(run)
    reference = "autoregressive"
    summary: dict[str, Any] = {}
    for method in methods:
        method_runs = [run for run in runs if run.method == method]
        if not method_runs:
            continue
        ratios, mismatches = [], []
        for prompt, per_method in by_prompt.items():
            if method not in per_method:
                continue
            tps = statistics.mean(run.tokens_per_s for run in per_method[method])
            if reference in per_method:
                base = statistics.mean(run.tokens_per_s for run in per_method[reference])
                ratios.append(tps / base)
                diff = first_difference(per_method[reference][0].token_ids, per_method[method][0].token_ids)
                if diff is not None:
                    mismatches.append({"prompt": prompt, "first_difference_at": diff})
        entry: dict[str, Any] = {
            "tokens_per_s_median": median([run.tokens_per_s for run in method_runs]),
            "ratio_to_autoregressive_median": median(ratios),
            "new_tokens": sum(run.new_tokens for run in method_runs),
            "runs": len(method_runs),
            "outputs_identical_to_autoregressive": not mismatches,
            "mismatches": mismatches,
        }
        entry.update(_acceptance(method, method_runs, step_costs))
        summary[method] = entry
    return summary


def _acceptance(method: str, runs: list[Run], step_costs: dict[str, Any]) -> dict[str, Any]:
    if not method.startswith("speculative-"):
        return {}
    rounds = sum(run.stats.get("target_forwards", 0) for run in runs)
    drafted = sum(run.stats.get("drafted", 0) for run in runs)
    accepted = sum(run.stats.get("accepted", 0) for run in runs)
    new_tokens = sum(run.new_tokens for run in runs)
    if rounds == 0:
        return {}
    per_drafter: dict[str, int] = {}
    for run in runs:
        for name, counts in run.stats.get("per_drafter", {}).items():
            per_drafter[name] = per_drafter.get(name, 0) + counts["drafted"]
    c_by_drafter = step_costs["c"]
    weighted = sum(per_drafter.values())
    # The hybrid's c: each drafter's cost weighted by the tokens it drafted.
    c = (
        sum(c_by_drafter.get(name, 0.0) * count for name, count in per_drafter.items()) / weighted
        if weighted
        else 0.0
    )
    k = drafted / rounds
    tokens_per_round = new_tokens / rounds
    alpha = alpha_from_rounds(tokens_per_round, k)
    v = verify_cost_at(step_costs["verify_cost"], k)
    return {
        "rounds": rounds,
        "mean_draft_length": k,
        "mean_accepted_length": accepted / rounds,
        "tokens_per_round": tokens_per_round,
        "draft_acceptance": accepted / drafted if drafted else None,
        "alpha": alpha,
        "c": c,
        "verify_cost": v,
        "theoretical_speedup": theoretical_speedup(alpha, k, c),
        "theoretical_speedup_measured_verify": theoretical_speedup(alpha, k, c, v),
        "drafted_by": per_drafter,
    }


def environment(engine: LocalEngine, threads: int) -> dict[str, Any]:
    import torch
    import transformers

    from engine.models import describe_model

    try:
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False
        ).stdout.strip()
    except OSError:
        commit = ""
    return {
        "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "git_commit": commit,
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "machine": platform.processor() or platform.machine(),
        "torch_threads": threads,
        "device": str(engine.pair.device),
        "dtype": str(engine.pair.dtype).removeprefix("torch."),
        "gpu": torch.cuda.get_device_name() if engine.pair.device.type == "cuda" else None,
        "target": describe_model(engine.pair.target_source),
        "draft": describe_model(engine.pair.draft_source),
    }


def run_throughput(config: ThroughputConfig, progress: bool = True) -> dict[str, Any]:
    import torch
    from tqdm import tqdm

    from engine.models import load_pair
    from engine.service import LocalEngine

    pair = load_pair(config.target, config.draft, config.device, num_threads=config.threads)
    engine = LocalEngine(pair=pair)
    prompts = build_prompts(engine.info(), engine.count_tokens, config.prompts)
    if not prompts:
        raise RuntimeError("no held-out prompts could be built (is the standard library readable?)")
    runner = MethodRunner(engine, config)
    for method in config.methods:  # warm-up: first-call allocations and lazy imports stay out of timings
        runner.run(method, prompts[0], max_new_tokens=8)
    step_costs = measure_step_costs(runner, prompts[len(prompts) // 2])
    runs: list[Run] = []
    jobs = [(p, r) for p in range(len(prompts)) for r in range(config.repeats)]
    for prompt_index, repeat in tqdm(jobs, desc="throughput", unit="prompt", disable=not progress):
        shift = (prompt_index + repeat) % len(config.methods)
        for method in config.methods[shift:] + config.methods[:shift]:
            runs.append(runner.run(method, prompts[prompt_index]))
    summary = summarize(runs, step_costs, config.methods)
    return {
        "benchmark": "throughput",
        "config": {**asdict(config), "out": str(config.out)},
        "environment": environment(engine, torch.get_num_threads()),
        "prompts": [
            {"name": p.name, "prompt_tokens": len(runner.prompt_ids(p)), "mode": p.context.mode}
            for p in prompts
        ],
        "step_costs": step_costs,
        "summary": summary,
        "runs": [
            {k: v for k, v in asdict(run).items() if k != "token_ids"} | {"tokens_per_s": run.tokens_per_s}
            for run in runs
        ],
        "goals": goals_met(summary),
    }


def goals_met(summary: dict[str, Any]) -> dict[str, Any]:
    """Issue 7's throughput goals: best speculative method >= 2.5x autoregressive and >= 1.5x HF assisted."""
    speculative = {m: s for m, s in summary.items() if m.startswith("speculative-")}
    if not speculative:
        return {}
    best = max(speculative, key=lambda m: speculative[m]["ratio_to_autoregressive_median"] or 0.0)
    ratio = speculative[best]["ratio_to_autoregressive_median"]
    result: dict[str, Any] = {"best_method": best, "vs_autoregressive": ratio, "vs_autoregressive_goal": 2.5}
    assisted = summary.get("hf-assisted", {}).get("ratio_to_autoregressive_median")
    if assisted and ratio:
        result["vs_hf_assisted"] = ratio / assisted
        result["vs_hf_assisted_goal"] = 1.5
        same_draft = summary.get("speculative-model", {}).get("ratio_to_autoregressive_median")
        if same_draft:  # the like-for-like pair: both draft with the same model
            result["model_drafter_vs_hf_assisted"] = same_draft / assisted
    return result


def write_report(result: dict[str, Any], out: Path, tag: str) -> list[Path]:
    return write_result_files(out / f"throughput-{tag}", result, markdown_report(result), plot)


def markdown_report(result: dict[str, Any]) -> str:
    env, config, summary = result["environment"], result["config"], result["summary"]
    rows = []
    for method, s in summary.items():
        rows.append(
            [
                method,
                s["tokens_per_s_median"],
                s["ratio_to_autoregressive_median"],
                s.get("mean_draft_length"),
                s.get("mean_accepted_length"),
                s.get("alpha"),
                s.get("c"),
                s.get("theoretical_speedup"),
                s.get("theoretical_speedup_measured_verify"),
                "yes" if s["outputs_identical_to_autoregressive"] else f"NO ({len(s['mismatches'])})",
            ]
        )
    header = [
        "method",
        "tok/s (median)",
        "x autoregressive (median)",
        "mean k",
        "mean accepted",
        "alpha",
        "c",
        "S theory (v=1)",
        "S theory (measured v)",
        "greedy output = AR",
    ]
    costs = result["step_costs"]
    goals = result.get("goals", {})
    lines = [
        f"# Throughput ({result['config']['tag']})\n",
        f"{env['date_utc']}, commit {env['git_commit']}, {env['device']} {env['dtype']}"
        f"{' (' + env['gpu'] + ')' if env.get('gpu') else ''}, {env['torch_threads']} torch threads, "
        f"torch {env['torch']}, transformers {env['transformers']}.\n",
        f"Target {env['target'].get('location')} ({env['target'].get('params')} params), draft "
        f"{env['draft'].get('location')} ({env['draft'].get('params')} params). "
        f"{len(result['prompts'])} held-out prompts x {config['repeats']} repeats, "
        f"{config['max_new_tokens']} new tokens each"
        f"{'' if config['stop_at_eos'] else ' (EOS ignored)'}, draft policy `{config['draft_policy']}`.\n",
        markdown_table(header, rows),
        f"\nStep costs at a {costs['prompt_tokens']}-token prompt: target step "
        f"{costs['target_step_s'] * 1000:.2f} ms, draft step {costs['draft_step_s'] * 1000:.2f} ms; verify "
        "cost v(k) in target steps: "
        + ", ".join(f"k={k}: {v:.2f}" for k, v in costs["verify_cost"].items())
        + ".\n",
    ]
    if goals:
        lines.append(
            f"\nGoals: best speculative method `{goals['best_method']}` is "
            f"{goals['vs_autoregressive']:.2f}x autoregressive (goal 2.5x)"
            + (
                f" and {goals['vs_hf_assisted']:.2f}x transformers assisted generation (goal 1.5x)"
                if "vs_hf_assisted" in goals
                else ""
            )
            + (
                f"; with the same draft model, speculative-model is {goals['model_drafter_vs_hf_assisted']:.2f}x"
                " transformers assisted generation"
                if "model_drafter_vs_hf_assisted" in goals
                else ""
            )
            + ".\n"
        )
    return "".join(line if line.endswith("\n") else line + "\n" for line in lines)


def plot(result: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    summary = result["summary"]
    methods = list(summary)
    achieved = [summary[m]["ratio_to_autoregressive_median"] or 0.0 for m in methods]
    theory = [summary[m].get("theoretical_speedup_measured_verify") for m in methods]
    fig, ax = plt.subplots(figsize=(9, 4.5))
    positions = range(len(methods))
    ax.bar(positions, achieved, color="#4c72b0", label="achieved (median over prompts)")
    for x, value in zip(positions, theory, strict=True):
        if value is not None:
            ax.plot([x - 0.4, x + 0.4], [value, value], color="#dd8452", linewidth=2)
    ax.plot([], [], color="#dd8452", linewidth=2, label="theory, measured alpha, c, v")
    ax.axhline(1.0, color="gray", linewidth=0.8)
    ax.axhline(2.5, color="#55a868", linestyle="--", linewidth=1, label="goal 2.5x")
    ax.set_xticks(list(positions), methods, rotation=25, ha="right")
    ax.set_ylabel("speed-up over autoregressive")
    env = result["environment"]
    ax.set_title(
        f"specls throughput, {env['device']} {env['dtype']}, {result['config']['max_new_tokens']} tokens"
    )
    ax.legend(loc="upper right", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
