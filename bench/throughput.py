"""`specls bench throughput`: speculative decoding against the baseline and against transformers' peers.

Every method runs on the same loaded target, interleaved prompt by prompt (the method order rotates per
prompt) in one process, so machine noise hits all of them alike. Each call starts from an empty KV cache
(prefill included in the timing) and stops at end-of-text as the server does; `--ignore-eos` instead
generates exactly `--max-new-tokens` tokens (a steady-state row, to be labelled as such). Greedy outputs of
all methods are compared token by token with the autoregressive baseline, and every row reports how
repetitive its outputs were (`bench.metrics.repetition_share`): a model that loops makes copying drafters
look fast. With a GGUF for the target (a pulled model) and a llama-server binary, llama.cpp's plain and
n-gram speculative decoding run beside ours on the same prompt ids (`bench.llama_peer`).

Step costs: `c` = one draft step / one target step, measured on the loaded decoders at a real prompt
(a lookup or suffix "step" is its propose time divided by the tokens it proposes); `v(k)` = one target
forward over k + 1 tokens / one target step, which the paper's formula assumes is 1.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bench.cli_args import add_engine_arguments, names, positive, print_paths, results_tag
from bench.llama_peer import LLAMA_METHODS, NEEDS_DRAFT_GGUF, LlamaPeer, find_llama_server, start_peer
from bench.metrics import (
    alpha_from_rounds,
    markdown_table,
    median,
    repetition_share,
    theoretical_speedup,
    write_result_files,
)
from bench.prompts import BenchPrompt, build_prompts
from engine.sequences import first_divergence

if TYPE_CHECKING:
    from engine.api import CompletionRequest, DraftPolicy
    from engine.drafters.base import Drafter
    from engine.models import ModelSource
    from engine.service import LocalEngine

ENGINE_DRAFTERS = ("model", "lookup", "suffix", "hybrid")
PEER_METHODS = ("hf-greedy", "hf-assisted", "hf-prompt-lookup")
METHODS = ("autoregressive", *(f"speculative-{name}" for name in ENGINE_DRAFTERS), *PEER_METHODS)
ALL_METHODS = (*METHODS, *LLAMA_METHODS)
NEEDS_DRAFT_MODEL = ("speculative-model", "hf-assisted", *NEEDS_DRAFT_GGUF)
HF_PROMPT_LOOKUP_TOKENS = 10  # transformers' documented default suggestion


@dataclass
class ThroughputConfig:
    prompts: int = 8
    max_new_tokens: int = 128
    target: str | None = None
    draft: str | None = None
    device: str = "auto"
    dtype: str = "auto"
    runtime: str = "auto"  # engine.runtime: "auto" (the fastest installed), "llama.cpp" or "torch"
    quantization: str = "none"  # torch weights: "none", "int8" or "int4"
    threads: int | None = None
    repeats: int = 1
    methods: tuple[str, ...] = ALL_METHODS  # llama-server rows run only where a GGUF and the binary exist
    draft_policy: str = "learned"  # "learned" (the engine's own) or a fixed length
    stop_at_eos: bool = True
    # Each engine call finds its prompt already read by the server's idle warm-up (`LocalEngine.warm`, target
    # and draft model, untimed), so the time is the decode a user waits for after a pause in typing.
    warm_prompt: bool = False
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

    def phase_seconds(self) -> tuple[float, float] | None:
        """(prefill, decode) seconds where the method reports them: the engine's stats, llama-server's timings."""
        if "prefill_s" in self.stats and "decode_s" in self.stats:
            return float(self.stats["prefill_s"]), float(self.stats["decode_s"])
        if "prompt_ms" in self.stats and "predicted_ms" in self.stats:
            return float(self.stats["prompt_ms"]) / 1000, float(self.stats["predicted_ms"]) / 1000
        return None


def policy_fields(name: str) -> dict[str, Any]:
    """The request fields that choose a draft-length policy: "learned" is the engine's own (it keeps what it
    learns across prompts, as across keystrokes), a number a fixed length."""
    from engine.drafters.length import FixedDraftPolicy

    if name == "learned":
        return {}
    policy: DraftPolicy = FixedDraftPolicy(int(name))
    return {"draft_policy": policy}


class MethodRunner:
    """Runs one method on one prompt from a cold cache and times it."""

    def __init__(
        self, engine: LocalEngine, config: ThroughputConfig, peers: dict[str, LlamaPeer] | None = None
    ) -> None:
        import torch

        self.engine = engine
        self.config = config
        self.torch = torch
        self.peers = peers or {}
        self.pair = engine.pair
        self.eos_ids = engine.eos_ids
        models = [model for model in (self.pair.target, self.pair.draft) if model is not None]
        if not config.stop_at_eos:
            # Every method generates exactly max_new_tokens tokens: same work, comparable outputs (the
            # engine is asked per request, transformers through the models' generation config).
            for model in models:
                model.generation_config.eos_token_id = None
        else:
            eos = sorted(self.eos_ids)
            for model in models:
                model.generation_config.eos_token_id = eos
        pad = self.pair.tokenizer.pad_token_id
        for model in models:
            model.generation_config.pad_token_id = pad if pad is not None else 0

    def prompt_ids(self, prompt: BenchPrompt) -> list[int]:
        from engine.generation import fit_prompt

        ids, _ = fit_prompt(
            self.engine.encode(prompt.context.prompt), self.engine.window, self.config.max_new_tokens
        )
        return ids

    def run(self, method: str, prompt: BenchPrompt, max_new_tokens: int | None = None) -> Run:
        limit = max_new_tokens or self.config.max_new_tokens
        engine_method = method not in PEER_METHODS and method not in LLAMA_METHODS
        if engine_method:
            self.reset_caches(prompt, limit)
        self.sync()
        start = time.perf_counter()
        if method in PEER_METHODS:
            token_ids, stats = self._run_hf(method, prompt, limit)
        elif method in LLAMA_METHODS:
            ids = self.prompt_ids(prompt)
            token_ids, stats = self.peers[method].complete(ids, limit, not self.config.stop_at_eos)
        else:
            token_ids, stats = self._run_engine(method, prompt, limit)
        self.sync()
        wall = time.perf_counter() - start
        if self.config.stop_at_eos:  # transformers and llama-server keep the EOS token; the engine does not
            while token_ids and token_ids[-1] in self.eos_ids:
                token_ids = token_ids[:-1]
        return Run(method, prompt.name, wall, len(token_ids), token_ids, stats)

    def _run_engine(self, method: str, prompt: BenchPrompt, limit: int) -> tuple[list[int], dict[str, Any]]:
        drafter = "none" if method == "autoregressive" else method.removeprefix("speculative-")
        result = self.engine.complete(self._request(prompt, limit, drafter))
        return list(result.token_ids), result.stats.as_dict()

    def _request(self, prompt: BenchPrompt, limit: int, drafter: str) -> CompletionRequest:
        from engine.api import CompletionRequest

        ctx = prompt.context
        return CompletionRequest(
            prompt=ctx.prompt,
            max_new_tokens=limit,
            drafter=drafter,
            lookup_context=ctx.lookup_snippets,
            suffix=ctx.suffix,
            ignore_end_of_text=not self.config.stop_at_eos,
            **policy_fields(self.config.draft_policy),
        )

    def reset_caches(self, prompt: BenchPrompt, limit: int) -> None:
        """Empty caches, so no method profits from what another left behind; with `warm_prompt`, then the
        prompt read into both, untimed, as the server's idle warm-up does."""
        self.engine.reset_caches()
        if self.config.warm_prompt:
            self.engine.warm(self._request(prompt, limit, "hybrid"))

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

    def sync(self) -> None:
        self.engine.synchronize()


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
    """Target step, draft step and verify widths as the engine times them (`engine.costs.measure_step_costs`,
    at this prompt's length), and what the copying drafters take to propose, at a real prompt."""
    from engine.drafters.lookup import PromptLookupDrafter
    from engine.drafters.suffix import SuffixDrafter

    engine = runner.engine
    ids = runner.prompt_ids(prompt)
    draft = engine.draft_decoder
    costs = engine.time_steps(context_tokens=len(ids), repeats=repeats)
    target_step = costs.step_s
    lookup = PromptLookupDrafter([engine.encode(s) for s in prompt.context.lookup_snippets if s])
    suffix = SuffixDrafter(engine.encode(prompt.context.suffix))
    copy_costs: dict[str, float] = {}
    drafters: tuple[tuple[str, Drafter], ...] = (("lookup", lookup), ("suffix", suffix))
    for name, drafter in drafters:
        proposed = max(1, len(drafter.propose(ids, 16).token_ids))
        copy_costs[name] = _timed(partial(drafter.propose, ids, 16), repeats, runner.sync) / proposed
    return {
        "target_step_s": target_step,
        "draft_step_s": costs.draft_step * target_step if draft is not None else None,
        "c": {
            "model": costs.draft_step if draft is not None else None,
            "lookup": copy_costs["lookup"] / target_step,
            "suffix": copy_costs["suffix"] / target_step,
        },
        "verify_cost": {str(k): v for k, v in zip(costs.widths, costs.verify, strict=True)},
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
                if base > 0:  # a prompt the model answered with end-of-text at once has no speed to compare
                    ratios.append(tps / base)
                diff = first_divergence(per_method[reference][0].token_ids, per_method[method][0].token_ids)
                if diff is not None:
                    mismatches.append({"prompt": prompt, "first_difference_at": diff})
        new_tokens = sum(run.new_tokens for run in method_runs)
        wall = sum(run.wall_s for run in method_runs)
        entry: dict[str, Any] = {
            "tokens_per_s_median": median([run.tokens_per_s for run in method_runs]),
            "ratio_to_autoregressive_median": median(ratios),
            "ms_per_token": 1000 * wall / new_tokens if new_tokens else None,
            # Token-weighted: every generated token counts once, however many a prompt produced.
            "repetition": (
                sum(repetition_share(run.token_ids) * run.new_tokens for run in method_runs) / new_tokens
                if new_tokens
                else 0.0
            ),
            "new_tokens": new_tokens,
            "runs": len(method_runs),
            "outputs_identical_to_autoregressive": not mismatches,
            "mismatches": mismatches,
        }
        entry.update(_phases(method_runs))
        entry.update(_acceptance(method, method_runs, step_costs))
        summary[method] = entry
    base_ms = summary.get(reference, {}).get("ms_per_token")
    for entry in summary.values():
        entry["speedup_time_per_token"] = (
            base_ms / entry["ms_per_token"] if base_ms and entry["ms_per_token"] else None
        )
    return summary


def _phases(runs: list[Run]) -> dict[str, Any]:
    """Prompt tokens/s and decode ms per generated token, apart: with long prompts the prefill can dominate
    the wall time, and engines differ there in other ways than in the decode step."""
    phases = [run.phase_seconds() for run in runs]
    if not runs or any(phase is None for phase in phases):
        return {}
    prefill_s = sum(phase[0] for phase in phases if phase is not None)
    decode_s = sum(phase[1] for phase in phases if phase is not None)
    prompt_tokens = sum(int(run.stats.get("prompt_tokens", run.stats.get("prompt_n", 0))) for run in runs)
    new_tokens = sum(run.new_tokens for run in runs)
    return {
        "prefill_tokens_per_s": prompt_tokens / prefill_s if prefill_s > 0 and prompt_tokens else None,
        "decode_ms_per_token": 1000 * decode_s / new_tokens if new_tokens else None,
    }


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

    from engine.hardware import cpu_class
    from engine.models import describe_model
    from lsp_server.typist.client import served_code

    commit = served_code()["commit"] or ""  # the checkout whose code runs here, not the working directory's
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
        "runtime": engine.runtime.describe(),
        "gpu": torch.cuda.get_device_name() if engine.pair.device.type == "cuda" else None,
        "cpu_class": "GPU" if engine.pair.device.type == "cuda" else cpu_class(),
        "dtype_reason": engine.pair.dtype_reason,
        "target": describe_model(engine.pair.target_source),
        "draft": describe_model(engine.pair.draft_source) if engine.pair.draft_source else None,
        "shared_machine": "other jobs shared the CPU; ratios come from methods interleaved in one process",
    }


def run_throughput(config: ThroughputConfig, progress: bool = True) -> dict[str, Any]:
    import torch
    from tqdm import tqdm

    from engine.models import load_pair
    from engine.service import LocalEngine

    pair = load_pair(config.target, config.draft, config.device, config.dtype, num_threads=config.threads)
    engine = LocalEngine(pair=pair, runtime=config.runtime, quantization=config.quantization)
    prompts = build_prompts(engine.info(), engine.count_tokens, config.prompts)
    if not prompts:
        raise RuntimeError("no held-out prompts could be built (is the standard library readable?)")
    methods, skipped = runnable_methods(config, pair.draft is not None)
    peers: dict[str, LlamaPeer] = {}
    try:
        llama_methods = [m for m in methods if m in LLAMA_METHODS]
        peers = start_peers(
            config, llama_methods, min(engine.window, 4096), torch.get_num_threads(), pair.draft_source
        )
        runner = MethodRunner(engine, config, peers)
        for method in methods:  # warm-up: first-call allocations and lazy imports stay out of timings
            runner.run(method, prompts[0], max_new_tokens=8)
        step_costs = measure_step_costs(runner, prompts[len(prompts) // 2])
        runs: list[Run] = []
        jobs = [(p, r) for p in range(len(prompts)) for r in range(config.repeats)]
        for prompt_index, repeat in tqdm(jobs, desc="throughput", unit="prompt", disable=not progress):
            shift = (prompt_index + repeat) % len(methods)
            for method in methods[shift:] + methods[:shift]:
                runs.append(runner.run(method, prompts[prompt_index]))
    finally:
        for peer in peers.values():
            peer.stop()
    summary = summarize(runs, step_costs, methods)
    return {
        "benchmark": "throughput",
        "config": {**asdict(config), "out": str(config.out)},
        "skipped": skipped,
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


def runnable_methods(
    config: ThroughputConfig, has_draft_model: bool
) -> tuple[tuple[str, ...], dict[str, str]]:
    """The configured methods this pair and machine can run, and why each other one is left out."""
    from engine.catalog import CATALOG

    skipped: dict[str, str] = {}
    for method in config.methods:
        if method in NEEDS_DRAFT_MODEL and not has_draft_model:
            skipped[method] = "no draft model shares this target's tokenizer"
        elif method in LLAMA_METHODS and config.target not in CATALOG:
            skipped[method] = "llama-server needs a GGUF of the target: a pulled model (specls pull)"
        elif method in LLAMA_METHODS and find_llama_server() is None:
            skipped[method] = "no llama-server binary (bash scripts/build_llama_server.sh)"
    return tuple(m for m in config.methods if m not in skipped), skipped


def start_peers(
    config: ThroughputConfig,
    methods: list[str],
    window: int,
    threads: int,
    draft_source: ModelSource | None = None,
) -> dict[str, LlamaPeer]:
    """One llama-server per llama method, on the pulled model's GGUF, with the engine's thread count; the
    draft-model method gets the engine's draft, exported to GGUF (f16) beside the logs."""
    if not methods:
        return {}
    import tempfile

    from engine.catalog import gguf_path

    binary = find_llama_server()
    assert binary is not None and config.target is not None  # runnable_methods checked both
    logs = Path(tempfile.mkdtemp(prefix="specls-bench-llama-"))
    draft_gguf = None
    if draft_source is not None and any(method in NEEDS_DRAFT_GGUF for method in methods):
        from engine.gguf_export import export_llama_gguf

        draft_gguf = logs / "draft.gguf"
        export_llama_gguf(Path(draft_source.location), draft_gguf, name="specls-draft", dtype="f16")
    peers: dict[str, LlamaPeer] = {}
    repack = True  # once a server has crashed with repacking, the next ones start without it
    try:
        for method in methods:
            log = logs / f"{method}.log"
            peer = start_peer(
                binary, gguf_path(config.target), method, threads, window, log, draft_gguf, repack
            )
            peers[method], repack = peer, peer.repack
    except RuntimeError:
        for peer in peers.values():
            peer.stop()
        raise
    return peers


GOAL_VS_AUTOREGRESSIVE = 3.0  # speculative vs plain greedy, held-out code, natural stops
GOAL_VS_HF_ASSISTED = 2.0


def goals_met(summary: dict[str, Any]) -> dict[str, Any]:
    """The throughput goals: best speculative method >= 3x autoregressive and >= 2x transformers assisted
    generation (prompt lookup stands in for it when there is no draft model), by time per generated token."""
    speculative = {m: s for m, s in summary.items() if m.startswith("speculative-")}
    if not speculative:
        return {}
    best = max(speculative, key=lambda m: speculative[m]["speedup_time_per_token"] or 0.0)
    ratio = speculative[best]["speedup_time_per_token"]
    result: dict[str, Any] = {
        "best_method": best,
        "vs_autoregressive": ratio,
        "vs_autoregressive_goal": GOAL_VS_AUTOREGRESSIVE,
        "repetition": speculative[best]["repetition"],
    }
    peer = "hf-assisted" if "hf-assisted" in summary else "hf-prompt-lookup"
    assisted = summary.get(peer, {}).get("speedup_time_per_token")
    if assisted and ratio:
        result["hf_peer"] = peer
        result["vs_hf_assisted"] = ratio / assisted
        result["vs_hf_assisted_goal"] = GOAL_VS_HF_ASSISTED
        same_draft = summary.get("speculative-model", {}).get("speedup_time_per_token")
        if same_draft:  # the like-for-like pair: both draft with the same model
            result["model_drafter_vs_hf_assisted"] = same_draft / assisted
    return result


def write_report(result: dict[str, Any], out: Path, tag: str) -> list[Path]:
    return write_result_files(out / f"throughput-{tag}", result, markdown_report(result), plot)


def markdown_report(result: dict[str, Any]) -> str:
    env, config, summary = result["environment"], result["config"], result["summary"]
    rows = []
    foreign = (*PEER_METHODS, *LLAMA_METHODS)
    for method, s in summary.items():
        if method in LLAMA_METHODS:
            same = "not compared (Q4_1 weights)"
        else:
            same = "yes" if s["outputs_identical_to_autoregressive"] else f"NO ({len(s['mismatches'])})"
        rows.append(
            [
                method,
                s.get("ms_per_token"),
                s.get("speedup_time_per_token"),
                # Warm engine calls read no prompt: what their prefill phase timed is a token or two.
                "read by the warm-up"
                if config.get("warm_prompt") and method not in foreign
                else s.get("prefill_tokens_per_s"),
                s.get("decode_ms_per_token"),
                s["ratio_to_autoregressive_median"],
                s["repetition"],
                s.get("mean_draft_length"),
                s.get("mean_accepted_length"),
                s.get("alpha"),
                s.get("c"),
                s.get("theoretical_speedup_measured_verify"),
                same,
            ]
        )
    header = [
        "method",
        "ms / generated token",
        "x autoregressive (time per token)",
        "prefill: prompt tokens / s",
        "decode: ms / generated token",
        "x autoregressive (median of prompts)",
        "repetition",
        "mean k",
        "mean accepted",
        "alpha",
        "c",
        "S theory (measured v)",
        "greedy output = AR",
    ]
    costs = result["step_costs"]
    goals = result.get("goals", {})
    draft = env.get("draft")
    draft_text = (
        f"draft {draft.get('location')} ({draft.get('params')} params)" if draft else "no draft model"
    )
    stops = "natural stops (EOS respected)" if config["stop_at_eos"] else "EOS IGNORED (steady state)"
    lines = [
        f"# Throughput ({result['config']['tag']}): {stops}\n",
        f"{env['date_utc']}, commit {env['git_commit']}, {env['device']} {env['dtype']}"
        f" ({env.get('dtype_reason', '')})"
        f"{' (' + env['gpu'] + ')' if env.get('gpu') else ''}, {env['torch_threads']} torch threads, "
        f"torch {env['torch']}, transformers {env['transformers']}. {env.get('shared_machine', '')}.\n",
        f"Target {env['target'].get('location')} ({env['target'].get('params')} params), {draft_text}. "
        f"{len(result['prompts'])} held-out prompts x {config['repeats']} repeats, up to "
        f"{config['max_new_tokens']} new tokens each, {stops}, draft policy `{config['draft_policy']}`.\n",
        (
            "Warm prompts: before each engine call the server's idle warm-up read the prompt into the "
            "target and the draft model, untimed; engine times are the decode a user waits for after a "
            "pause, the others' still include reading the prompt.\n"
            if config.get("warm_prompt")
            else "Cold prompts: every call starts from empty caches and its time includes reading the "
            "prompt.\n"
        ),
        "Repetition: share of generated tokens inside a 4-gram the same output already generated "
        "(high values mean copying drafters are copying a loop).\n",
        markdown_table(header, rows),
    ]
    if env["dtype"] != "float32" and any(s.get("mismatches") for s in summary.values()):
        lines.append(
            f"\nIn {env['dtype']} a verify over k + 1 positions and a one-token step round differently, so a "
            "speculative output may part from the plain one where the plain run's top-2 logits nearly tie "
            "(docs/precision.md; `python -m bench.decode_speed` reports the margin at each "
            "divergence, `tests/engine/test_precision.py` checks it). In fp32 every output must match.\n"
        )
    if result.get("skipped"):
        lines.append(
            "\nNot run: " + "; ".join(f"{m} ({why})" for m, why in result["skipped"].items()) + ".\n"
        )
    draft_ms = f"{costs['draft_step_s'] * 1000:.2f} ms" if costs.get("draft_step_s") else "none"
    lines.append(
        f"\nStep costs at a {costs['prompt_tokens']}-token prompt: target step "
        f"{costs['target_step_s'] * 1000:.2f} ms, draft step {draft_ms}; verify "
        "cost v(k) in target steps: "
        + ", ".join(f"k={k}: {v:.2f}" for k, v in costs["verify_cost"].items())
        + ".\n",
    )
    if goals:
        lines.append(
            f"\nGoals: best speculative method `{goals['best_method']}` is "
            f"{goals['vs_autoregressive']:.2f}x autoregressive by time per token "
            f"(goal {goals['vs_autoregressive_goal']}x, repetition {goals['repetition']:.2f})"
            + (
                f" and {goals['vs_hf_assisted']:.2f}x transformers `{goals['hf_peer']}` "
                f"(goal {goals['vs_hf_assisted_goal']}x)"
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
    achieved = [summary[m]["speedup_time_per_token"] or 0.0 for m in methods]
    theory = [summary[m].get("theoretical_speedup_measured_verify") for m in methods]
    fig, ax = plt.subplots(figsize=(9, 4.5))
    positions = range(len(methods))
    ax.bar(positions, achieved, color="#4c72b0", label="achieved (time per generated token)")
    for x, method in zip(positions, methods, strict=True):
        ax.text(x, 0.05, f"rep {summary[method]['repetition']:.2f}", ha="center", fontsize=7, color="white")
    for x, value in zip(positions, theory, strict=True):
        if value is not None:
            ax.plot([x - 0.4, x + 0.4], [value, value], color="#dd8452", linewidth=2)
    ax.plot([], [], color="#dd8452", linewidth=2, label="theory, measured alpha, c, v")
    ax.axhline(1.0, color="gray", linewidth=0.8)
    ax.axhline(GOAL_VS_AUTOREGRESSIVE, color="#55a868", linestyle="--", linewidth=1, label="goal 3x")
    ax.set_xticks(list(positions), methods, rotation=25, ha="right")
    ax.set_ylabel("speed-up over autoregressive")
    env = result["environment"]
    ax.set_title(
        f"specls throughput, {env['device']} {env['dtype']}, up to {result['config']['max_new_tokens']} tokens, "
        + ("natural stops" if result["config"]["stop_at_eos"] else "EOS ignored")
    )
    ax.legend(loc="upper right", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# --- `specls bench throughput` ---

NAME = "throughput"
HELP = "tokens/s of every method on held-out prompts"


def _draft_policy(text: str) -> str:
    if text == "learned" or (text.isdigit() and int(text) >= 1):
        return text
    raise argparse.ArgumentTypeError(f"expected learned or a positive integer, got {text!r}")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--prompts", type=positive, default=8, help="held-out prompts (default: 8)")
    parser.add_argument("--max-new-tokens", type=positive, default=128, help="per prompt (default: 128)")
    parser.add_argument("--repeats", type=positive, default=1, help="runs per prompt and method")
    parser.add_argument(
        "--methods",
        help=f"comma-separated subset of: {', '.join(ALL_METHODS)} (default: all that can run)",
    )
    parser.add_argument(
        "--draft-policy",
        type=_draft_policy,
        default="learned",
        help="learned (the engine's own) or a fixed length (default: learned)",
    )
    parser.add_argument(
        "--ignore-eos",
        action="store_true",
        help="generate --max-new-tokens past end-of-text: a steady-state row, not the headline "
        "(default: natural stops)",
    )
    parser.add_argument(
        "--warm-prompt",
        action="store_true",
        help="read each prompt into the target and draft model first, untimed, as the server's idle "
        "warm-up does: time the decode a user waits for after a pause (default: cold, prefill timed)",
    )
    parser.add_argument(
        "--runtime",
        choices=("auto", "llama.cpp", "torch"),
        default="auto",
        help="what decodes the target: auto (default: llama.cpp when installed and a GGUF lies beside the "
        "target, else torch), llama.cpp or torch",
    )
    parser.add_argument(
        "--quantize",
        choices=("none", "int8", "int4"),
        default="none",
        help="torch runtime: int8 or int4 weight-only projections (default: none)",
    )
    add_engine_arguments(parser)


def command(args: argparse.Namespace) -> int:
    methods = ALL_METHODS
    if args.methods:
        methods = names(args.methods)
        unknown = [name for name in methods if name not in ALL_METHODS]
        if unknown:
            print(
                f"specls bench: unknown methods {unknown}; choose from {', '.join(ALL_METHODS)}",
                file=sys.stderr,
            )
            return 2
        if "autoregressive" not in methods:
            methods = ("autoregressive", *methods)  # every ratio is measured against it
    config = ThroughputConfig(
        prompts=args.prompts,
        max_new_tokens=args.max_new_tokens,
        target=args.target,
        draft=args.draft,
        device=args.device,
        dtype=args.dtype,
        runtime=args.runtime,
        quantization=args.quantize,
        threads=args.threads,
        repeats=args.repeats,
        methods=methods,
        draft_policy=args.draft_policy,
        stop_at_eos=not args.ignore_eos,
        warm_prompt=args.warm_prompt,
        out=args.out,
        tag=results_tag(args),
    )
    result = run_throughput(config, progress=not args.quiet)
    return print_paths(write_report(result, config.out, config.tag))
