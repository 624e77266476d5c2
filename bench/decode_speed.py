"""Decode speed of every local engine on one real model, side by side in one process, against llama-server.

Engines: the lean torch decoder in fp32, bf16, with int8 / int4 weights (bf16 activations) and in W8A8 (int8
weights and per-row int8 activations, fp32 elsewhere: the engine for CPUs without native bf16), and llama.cpp
in process over the model's GGUF (when llama-cpp-python is installed). For each engine:

- where a step goes: one decode step, and the matmuls of that step alone (the same projections on an input
  of the same shape), the rest being norms, rope, attention, copies and Python;
- what a verify costs: a forward over k + 1 positions, in plain steps (`engine.costs.measure_step_costs`);
- quantization error on held-out code: cross-entropy, and top-1 agreement with the fp32 model;
- tokens/s of plain greedy decoding and of speculative greedy decoding with the n-gram lookup drafter (draft
  lengths from the engine's learned policy, priced by the engine's own verify costs), on
  held-out prompts, stopping at EOS (a natural stop) or `max_new_tokens`; every call starts from an empty
  cache and is timed with its prefill. Methods and engines take turns prompt by prompt;
- where speculative output leaves plain output, the plain run's top-2 logit margin there
  (`engine.precision`): below fp32 a divergence must be a near-tie.

With `--draft FOLDER` (a draft model of the same tokenizer, e.g. Qwen2.5-Coder 0.5B for 1.5B), each target
engine also decodes speculatively with that draft model, once per draft weight precision (bf16, int8, int4:
the draft's precision changes only acceptance), and llama-server adds its `--model-draft` configuration.
Prompt reading (prefill) is timed at fixed lengths (`--prefill-lengths`), and the memory of loading the
target (and pair) the way the server does is measured in a fresh process (`bench.load_memory`).

llama-server rows run the same GGUF on the same prompt token ids over HTTP (`/completion`, greedy,
`cache_prompt: false`), one configuration at a time, with its resident set size.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bench.cli_args import add_output_arguments, lengths, names, positive, print_paths, results_tag
from bench.metrics import markdown_table, median, repetition_share, write_result_files
from bench.prompts import build_prompts, held_out_files
from engine.costs import StepCosts
from engine.memory import process_memory_mb

if TYPE_CHECKING:
    import torch

    from engine.decoder import CausalDecoder

LEAN_ENGINES = ("lean-fp32", "lean-bf16", "lean-int8", "lean-int4", "lean-w8a8")
# Plain fp32 computes a verify's rows as steps would (`LeanLlamaDecoder.rows_as_steps`); this engine runs the
# batched kernels instead, to show what exactness costs. Not lossless. (W8A8 runs batched attention anyway.)
BATCHED = "-batched"
BATCHED_ENGINES = ("lean-fp32" + BATCHED,)
# W8A8 reads a long prompt in one pass but its last TWO_PASS_DOWN_TAIL tokens in both passes in the MLP's down
# projection; these engines read every prompt in one pass, or all of it in both there, to show what the tail
# costs and what the whole would. Not the default.
ONE_PASS, TWO_PASS_DOWN = "-one-pass", "-two-pass-down"
PROMPT_PASS_ENGINES = ("lean-w8a8" + ONE_PASS, "lean-w8a8" + TWO_PASS_DOWN)
ENGINES = (*LEAN_ENGINES, "llama.cpp")
KNOWN_ENGINES = (*ENGINES, *BATCHED_ENGINES, *PROMPT_PASS_ENGINES)
METHODS = ("plain", "speculative-lookup")
LOSS_WINDOWS = 2  # held-out windows of LOSS_WINDOW tokens for the quantization error
LOSS_WINDOW = 256


@dataclass
class DecodeSpeedConfig:
    target: str  # a Hugging Face folder with the model's GGUF beside its weights
    prompts: int = 8
    max_new_tokens: int = 64
    threads: int = 1
    engines: tuple[str, ...] = ENGINES
    llama_server: bool = True
    window: int = 2048
    draft: str | None = None  # a draft model folder: adds speculative-draft-<precision> methods
    draft_quantizations: tuple[str, ...] = ("none", "int8", "int4")
    prefill_lengths: tuple[int, ...] = (500, 1000, 2000)
    out: Path = field(default_factory=lambda: Path("bench/results"))
    tag: str = "cpu"


@dataclass
class Run:
    engine: str
    method: str
    prompt: str
    new_tokens: int
    wall_s: float
    finish: str
    token_ids: list[int]
    target_forwards: int = 0
    margins: list[float] = field(default_factory=list)

    @property
    def tokens_per_s(self) -> float:
        return self.new_tokens / self.wall_s if self.wall_s > 0 else 0.0


# --- engines -------------------------------------------------------------------------------------------


class Engines:
    """Loads each engine once through the engine's own assembly (`engine.runtime`), each at the precision its
    name asks for; `decoders[name]` is a `CausalDecoder`, `matmuls[name]` times its matmuls. The draft model
    runs in the dtype the engine picks for this target (`engine.models.choose_dtype`), one decoder per weight
    precision, each built as the server builds a draft (`build_draft_decoder`)."""

    def __init__(
        self,
        folder: Path,
        names: tuple[str, ...],
        window: int,
        threads: int,
        draft: Path | None = None,
        draft_quantizations: tuple[str, ...] = (),
    ) -> None:
        import torch
        from transformers import AutoModelForCausalLM

        from engine.models import choose_dtype, cpu_bf16_support, torch_dtype
        from engine.runtime import build_draft_decoder, build_target_decoder

        self.decoders: dict[str, CausalDecoder] = {}
        self.matmuls: dict[str, Callable[[int], None]] = {}
        self.rss_added_mb: dict[str, float] = {}
        models: dict[torch.dtype, Any] = {}

        def model_in(dtype: torch.dtype) -> Any:
            if dtype not in models:
                models[dtype] = AutoModelForCausalLM.from_pretrained(folder, dtype=dtype).eval()
            return models[dtype]

        for name in names:
            before = process_memory_mb() or 0.0
            precision = name.removeprefix("lean-")
            for variant in (BATCHED, ONE_PASS, TWO_PASS_DOWN):
                precision = precision.removesuffix(variant)
            # W8A8 is the engine for CPUs without native bf16: its activations are fp32 there. llama.cpp reads
            # its GGUF; the model only checks the vocabulary.
            fp32 = precision in ("fp32", "w8a8") or name == "llama.cpp"
            model = model_in(torch.float32 if fp32 else torch.bfloat16)
            runtime = "llama.cpp" if name == "llama.cpp" else "torch"
            quantization = precision if precision in ("int8", "int4", "w8a8") else "none"
            decoder, _ = build_target_decoder(
                model, str(folder), window, runtime=runtime, quantization=quantization, threads=threads
            )
            if name.endswith(BATCHED):
                decoder.rows_as_steps = False  # type: ignore[attr-defined]
            if name.endswith(ONE_PASS):
                decoder.two_pass_down_tail = 0  # type: ignore[attr-defined]
            if name.endswith(TWO_PASS_DOWN):
                decoder.two_pass_down_tail = window  # type: ignore[attr-defined]
                decoder.two_pass_down_min_read = 0  # type: ignore[attr-defined]
            self.decoders[name] = decoder
            if runtime == "torch":
                self.matmuls[name] = _matmul_runner(decoder)
            self.rss_added_mb[name] = (process_memory_mb() or 0.0) - before
        params = next(iter(models.values())).num_parameters() if models else None
        models.clear()

        self.drafts: dict[str, CausalDecoder] = {}
        if draft is not None:
            dtype_name, _ = choose_dtype("auto", "cpu", params, cpu_bf16_support())
            draft_model = AutoModelForCausalLM.from_pretrained(draft, dtype=torch_dtype(dtype_name)).eval()
            for quantization in draft_quantizations:
                label = dtype_name if quantization == "none" else quantization
                self.drafts[label], _ = build_draft_decoder(draft_model, window, quantization=quantization)


def _matmul_runner(decoder: Any) -> Callable[[int], None]:
    """Runs every projection of one forward over `count` positions on a zero input of the right shape."""
    import torch

    def run(count: int) -> None:
        with torch.inference_mode():
            hidden = torch.zeros(count, decoder.hidden_size, dtype=decoder.dtype)
            merged = torch.zeros(count, decoder.num_heads * decoder.head_dim, dtype=decoder.dtype)
            inner = torch.zeros(count, decoder.intermediate_size, dtype=decoder.dtype)
            for layer in decoder.layers:
                layer.qkv(hidden)
                layer.o(merged)
                layer.gate_up(hidden)
                layer.down(inner)
            decoder.lm_head(hidden)

    return run


def fastest_ms(fn: Callable[[], object], repeats: int = 8) -> float:
    fn()
    best = float("inf")
    for _ in range(repeats):
        started = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - started)
    return best * 1000


def step_profile(
    decoder: CausalDecoder, matmuls: Callable[[int], None] | None, context: int
) -> tuple[dict[str, Any], StepCosts]:
    """A plain step at `context` cached tokens and the verify costs, timed as the engine times them at load
    (`engine.costs.measure_step_costs`), and the step's matmuls alone (lean engines)."""
    costs = step_costs_of(decoder, None, context)
    profile: dict[str, Any] = {
        "step_ms": costs.step_s * 1000,
        "verify_cost": dict(zip(costs.widths, costs.verify, strict=True)),
    }
    if matmuls is not None:
        profile["matmul_ms"] = fastest_ms(lambda: matmuls(1))
        profile["other_ms"] = profile["step_ms"] - profile["matmul_ms"]
    return profile, costs


def step_costs_of(decoder: CausalDecoder, draft: CausalDecoder | None, context: int) -> StepCosts:
    """Timed as the engine times its decoders at load (`engine.costs.time_decoders`)."""
    from engine.costs import time_decoders

    return time_decoders(decoder, draft, context_tokens=context, repeats=5)


def prefill_tokens(count: int) -> list[int]:
    """The prompt every prefill timing reads, in process and in llama-server alike."""
    return [(7 * i + 3) % 251 + 100 for i in range(count)]


def prefill_speed(decoder: CausalDecoder, lengths: tuple[int, ...]) -> dict[int, float]:
    """Prompt tokens/s reading `length` tokens into an empty cache (the fastest of two after a warm-up)."""
    tokens = prefill_tokens(max(lengths, default=0))
    prefill = getattr(decoder, "prefill", decoder.forward)
    speeds: dict[int, float] = {}
    decoder.crop(0)
    prefill(tokens[:64])  # warm-up
    for length in lengths:
        if length > decoder.max_length:
            continue
        best = float("inf")
        for _ in range(2):
            decoder.crop(0)
            started = time.perf_counter()
            prefill(tokens[:length])
            best = min(best, time.perf_counter() - started)
        speeds[length] = length / best
    decoder.crop(0)
    return speeds


def draft_step_ms(draft: CausalDecoder, context: int) -> float:
    """One draft step at `context` cached tokens, timed as the engine times a decoder's plain step."""
    return step_costs_of(draft, None, context).step_s * 1000


def quantization_error(decoders: dict[str, CausalDecoder], windows: list[list[int]]) -> dict[str, Any]:
    """Held-out cross-entropy of each engine, and its top-1 agreement with the first engine (fp32)."""
    import torch
    import torch.nn.functional as F

    reference: list[torch.Tensor] = []
    result: dict[str, Any] = {}
    for name, decoder in decoders.items():
        losses, agree, total = [], 0, 0
        for index, window in enumerate(windows):
            decoder.crop(0)
            logits = decoder.forward(window)[:-1].float()
            decoder.crop(0)
            losses.append(float(F.cross_entropy(logits, torch.tensor(window[1:]))))
            top1 = logits.argmax(-1)
            if len(reference) < len(windows):
                reference.append(top1)
            agree += int((top1 == reference[index]).sum())
            total += len(top1)
        result[name] = {"held_out_loss": statistics.fmean(losses), "top1_agreement": agree / total}
    return result


def held_out_windows(encode: Callable[[str], list[int]], count: int, size: int) -> list[list[int]]:
    windows: list[list[int]] = []
    for _, text in reversed(held_out_files()):  # the prompts take the first files; take the last ones
        ids = encode(text)
        if len(ids) >= size:
            windows.append(ids[:size])
        if len(windows) == count:
            break
    return windows


# --- generation ----------------------------------------------------------------------------------------


def generate(
    decoder: CausalDecoder,
    method: str,
    prompt_ids: list[int],
    settings: Any,
    decode: Callable[[list[int]], str],
    step_costs: StepCosts,
    policy: Any,
    draft: CausalDecoder | None = None,
) -> tuple[Any, list[float]]:
    from engine.autoregressive import autoregressive_generate
    from engine.drafters.lookup import PromptLookupDrafter
    from engine.precision import MarginRecorder
    from engine.speculative import speculative_generate

    decoder.crop(0)
    if method == "plain":
        recorder = MarginRecorder(decoder)
        result = autoregressive_generate(recorder, prompt_ids, settings, decode=decode)
        return result, recorder.margins
    drafter: Any = PromptLookupDrafter(stop_ids=settings.eos_ids)
    if draft is not None:
        from engine.drafters.model import ModelDrafter

        draft.crop(0)
        drafter = ModelDrafter(draft)
    result = speculative_generate(
        decoder, drafter, prompt_ids, settings, policy, decode=decode, step_costs=step_costs
    )
    return result, []


def server_prefill_speed(peer: Any, lengths: tuple[int, ...], window: int) -> dict[int, float]:
    """llama-server's own prompt tokens/s (`timings.prompt_per_second`) reading `length` tokens with an empty
    cache, the fastest of two: the same prompt as `prefill_speed`."""
    tokens = prefill_tokens(max(lengths, default=0))
    speeds: dict[int, float] = {}
    for length in lengths:
        if length >= window:
            continue
        timings = [peer.complete(tokens[:length], 1, ignore_eos=True)[1] for _ in range(2)]
        speeds[length] = max(float(t.get("prompt_per_second", 0.0)) for t in timings)
    return speeds


def run_llama_server(
    gguf: Path,
    prompts: list[tuple[str, list[int]]],
    config: DecodeSpeedConfig,
    eos: frozenset[int],
    draft_gguf: Path | None = None,
) -> tuple[list[Run], dict[str, float], dict[str, dict[int, float]]]:
    """Every llama-server configuration in turn on the same prompt ids; the runs, each server's RSS, and the
    plain server's prompt reading speed at each of `config.prefill_lengths` (by its row label)."""
    from bench.llama_peer import LLAMA_METHODS, NEEDS_DRAFT_GGUF, find_llama_server, start_peer

    binary = find_llama_server()
    if binary is None or not binary.exists():
        return [], {}, {}
    runs: list[Run] = []
    rss: dict[str, float] = {}
    prefill: dict[str, dict[int, float]] = {}
    methods = [m for m in LLAMA_METHODS if m not in NEEDS_DRAFT_GGUF or draft_gguf is not None]
    config.out.mkdir(parents=True, exist_ok=True)  # the servers' logs go beside the results
    repack = True  # once a server has crashed with repacking, the next ones start without it
    for method in methods:
        log = config.out / f".{method}.log"
        with_draft = draft_gguf if method in NEEDS_DRAFT_GGUF else None
        peer = start_peer(binary, gguf, method, config.threads, config.window, log, with_draft, repack)
        repack = peer.repack
        label = method if peer.repack else f"{method} --no-repack"  # the rows say when it crashed with it
        try:
            peer.complete(prompts[0][1], 8, ignore_eos=False)  # warm-up
            if method == "llama-server":
                prefill[label] = server_prefill_speed(peer, config.prefill_lengths, config.window)
            for prompt_name, ids in prompts:
                started = time.perf_counter()
                tokens, _ = peer.complete(ids, config.max_new_tokens, ignore_eos=False)
                wall = time.perf_counter() - started
                finish = "eos" if tokens and tokens[-1] in eos else "length"
                runs.append(Run(label, "server", prompt_name, len(tokens), wall, finish, tokens))
            rss[label] = process_memory_mb(pid=peer.process.pid) or float("nan")
        finally:
            peer.stop()
    return runs, rss, prefill


# --- the benchmark -------------------------------------------------------------------------------------


def run_decode_speed(config: DecodeSpeedConfig, progress: bool = True) -> dict[str, Any]:
    import torch
    from transformers import AutoTokenizer

    from engine.api import BackendInfo
    from engine.drafters.length import DraftAcceptance, LearnedDraftPolicy
    from engine.generation import DecodeSettings
    from engine.llama_cpp_decoder import find_gguf, llama_cpp_available
    from engine.models import end_of_text_ids
    from engine.precision import NEAR_TIE_MARGIN, greedy_divergence

    torch.set_num_threads(config.threads)
    folder = Path(config.target).expanduser()
    names = tuple(n for n in config.engines if n != "llama.cpp" or llama_cpp_available())
    tokenizer = AutoTokenizer.from_pretrained(folder)

    def encode(text: str) -> list[int]:
        return list(tokenizer.encode(text, add_special_tokens=False))

    def decode(ids: list[int]) -> str:
        return str(tokenizer.decode(ids, skip_special_tokens=False))

    info = BackendInfo(
        name="local",
        target=str(folder),
        draft=None,
        special_tokens=tuple(tokenizer.all_special_tokens),
        context_length=config.window,
        device="cpu",
    )
    bench_prompts = build_prompts(info, lambda t: len(encode(t)), config.prompts)
    prompts = [(p.name, encode(p.context.prompt)) for p in bench_prompts]
    if not prompts:
        raise RuntimeError("no held-out prompts could be built (is the standard library readable?)")
    draft_folder = Path(config.draft).expanduser() if config.draft else None
    engines = Engines(folder, names, config.window, config.threads, draft_folder, config.draft_quantizations)
    eos = end_of_text_ids(tokenizer)
    settings = DecodeSettings(max_new_tokens=config.max_new_tokens, eos_ids=eos)
    context = int(statistics.median(len(ids) for _, ids in prompts))
    profiles: dict[str, dict[str, Any]] = {}
    step_costs: dict[str, StepCosts] = {}
    for name, decoder in engines.decoders.items():
        profiles[name], step_costs[name] = step_profile(decoder, engines.matmuls.get(name), context)
        profiles[name]["prefill_tokens_per_s"] = prefill_speed(decoder, config.prefill_lengths)
    draft_ms = {label: draft_step_ms(draft, context) for label, draft in engines.drafts.items()}
    for label, ms in draft_ms.items():
        profiles[f"draft {label}"] = {"step_ms": ms, "verify_cost": {}}
    errors = quantization_error(engines.decoders, held_out_windows(encode, LOSS_WINDOWS, LOSS_WINDOW))
    methods = (*METHODS, *(f"speculative-draft-{label}" for label in engines.drafts))

    def costs_for(engine: str, method: str) -> StepCosts:
        """The engine's verify costs, with the draft's own step priced in units of this target's step."""
        label = method.removeprefix("speculative-draft-")
        if label not in draft_ms:
            return step_costs[engine]
        return replace(step_costs[engine], draft_step=draft_ms[label] / profiles[engine]["step_ms"])

    def draft_of(method: str) -> CausalDecoder | None:
        return engines.drafts.get(method.removeprefix("speculative-draft-"))

    # The engine's draft-length policy, sized by each engine's own verify costs, learning per engine.
    learned = {(name, method): DraftAcceptance() for name in engines.decoders for method in methods}
    jobs = [(engine, method) for engine in engines.decoders for method in methods]
    for engine, method in jobs:  # warm-up
        policy = LearnedDraftPolicy()
        warm = prompts[0][1][-64:]
        generate(
            engines.decoders[engine],
            method,
            warm,
            settings,
            decode,
            costs_for(engine, method),
            policy,
            draft_of(method),
        )
    runs: list[Run] = []
    for index, (prompt_name, ids) in enumerate(prompts):
        shift = index % len(jobs)
        for engine, method in jobs[shift:] + jobs[:shift]:
            policy = LearnedDraftPolicy(acceptance=learned[(engine, method)])
            result, margins = generate(
                engines.decoders[engine],
                method,
                ids,
                settings,
                decode,
                costs_for(engine, method),
                policy,
                draft_of(method),
            )
            runs.append(
                Run(
                    engine,
                    method,
                    prompt_name,
                    result.stats.new_tokens,
                    result.stats.wall_s,
                    result.finish_reason,
                    result.token_ids,
                    result.stats.target_forwards,
                    margins,
                )
            )
        if progress:
            print(f"decode-speed: prompt {index + 1}/{len(prompts)} done", flush=True)
    server_rss: dict[str, float] = {}
    server_prefill: dict[str, dict[int, float]] = {}
    gguf = find_gguf(folder)
    draft_gguf = find_gguf(draft_folder) if draft_folder is not None else None
    if config.llama_server and gguf is not None:
        server_runs, server_rss, server_prefill = run_llama_server(gguf, prompts, config, eos, draft_gguf)
        runs.extend(server_runs)
    from bench.load_memory import measure_in_subprocess

    load_memory = {"target": measure_in_subprocess(folder, None, config.window, config.threads)}
    if draft_folder is not None:
        load_memory["target + draft"] = measure_in_subprocess(
            folder, draft_folder, config.window, config.threads
        )

    summary = summarize(runs, NEAR_TIE_MARGIN, greedy_divergence)
    return {
        "benchmark": "decode-speed",
        "config": {**asdict(config), "out": str(config.out)},
        "environment": environment(config.threads, folder),
        "prompts": [{"name": name, "prompt_tokens": len(ids)} for name, ids in prompts],
        "step_profile": profiles,
        "llama_server_prefill_tokens_per_s": server_prefill,
        "quantization_error": errors,
        "rss_mb": {**{f"in process: {k}": v for k, v in engines.rss_added_mb.items()}, **server_rss},
        "load_memory": load_memory,
        "machine_load": machine_load(),
        "summary": summary,
        "runs": [asdict(run) | {"tokens_per_s": run.tokens_per_s} for run in runs],
    }


def machine_load() -> dict[str, Any]:
    """What else ran: the load averages and the busiest other processes, at the end of the run."""
    load = os.getloadavg()
    ps = subprocess.run(
        ["ps", "-eo", "pcpu,args", "--sort=-pcpu", "--no-headers"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout.splitlines()
    busy = [line.strip()[:160] for line in ps if line.strip() and float(line.split()[0]) >= 10][:6]
    return {"loadavg_1_5_15": list(load), "cpus": os.cpu_count(), "busy_processes": busy}


def summarize(runs: list[Run], near_tie: float, divergence: Callable[..., Any]) -> dict[str, Any]:
    rows = sorted(
        {(run.engine, run.method) for run in runs}, key=lambda r: (r[0].startswith("llama-server"), r)
    )
    plain = {(run.engine, run.prompt): run for run in runs if run.method == "plain"}
    best_server = _best_server(runs)
    summary: dict[str, Any] = {}
    for engine, method in rows:
        mine = [run for run in runs if run.engine == engine and run.method == method]
        speeds = [run.tokens_per_s for run in mine]
        entry: dict[str, Any] = {
            "tokens_per_s_median": median(speeds),
            "tokens_per_s_total": sum(r.new_tokens for r in mine) / sum(r.wall_s for r in mine),
            "new_tokens_mean": statistics.fmean(r.new_tokens for r in mine),
            "stopped_at_eos": sum(r.finish == "eos" for r in mine),
            "repetition_mean": statistics.fmean(repetition_share(r.token_ids) for r in mine),
        }
        if best_server is not None:
            entry["ratio_to_best_llama_server"] = (entry["tokens_per_s_total"] or 0) / best_server[1]
        if method.startswith("speculative"):
            entry["tokens_per_forward"] = sum(r.new_tokens for r in mine) / max(
                1, sum(r.target_forwards for r in mine)
            )
            diverged = []
            for run in mine:
                reference = plain[(engine, run.prompt)]
                found = divergence(reference.token_ids, run.token_ids, reference.margins)
                if found is not None:
                    diverged.append(
                        {"prompt": run.prompt, "position": found.position, "margin": found.margin}
                    )
            entry["diverged_prompts"] = len(diverged)
            entry["divergences"] = diverged
            entry["all_divergences_near_ties"] = all(d["margin"] <= near_tie for d in diverged)
        summary[f"{engine} {method}".replace(" server", "")] = entry
    if best_server is not None:
        summary["best_llama_server"] = {"config": best_server[0], "tokens_per_s_total": best_server[1]}
    return summary


def _best_server(runs: list[Run]) -> tuple[str, float] | None:
    totals: dict[str, list[Run]] = {}
    for run in runs:
        if run.method == "server":
            totals.setdefault(run.engine, []).append(run)
    if not totals:
        return None
    speeds = {name: sum(r.new_tokens for r in rs) / sum(r.wall_s for r in rs) for name, rs in totals.items()}
    best = max(speeds, key=lambda name: speeds[name])
    return best, speeds[best]


def environment(threads: int, folder: Path) -> dict[str, Any]:
    import torch

    from engine.hardware import cpu_class
    from lsp_server.typist.client import served_code

    commit = served_code()["commit"] or ""  # the checkout whose code runs here, not the working directory's
    return {
        "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "git_commit": commit,
        "python": platform.python_version(),
        "torch": torch.__version__,
        "machine": platform.processor() or platform.machine(),
        "cpu_class": cpu_class(),
        "threads": threads,
        "target": str(folder),
    }


# --- report --------------------------------------------------------------------------------------------


def write_report(result: dict[str, Any], out: Path, tag: str) -> list[Path]:
    return write_result_files(out / f"decode-speed-{tag}", result, markdown_report(result), plot)


def markdown_report(result: dict[str, Any]) -> str:
    env, config, summary = result["environment"], result["config"], result["summary"]
    profiles, errors = result["step_profile"], result["quantization_error"]
    profile_rows = []
    for name, p in profiles.items():
        verify = p["verify_cost"]
        profile_rows.append(
            [
                name,
                p["step_ms"],
                p.get("matmul_ms"),
                p.get("other_ms"),
                *(verify.get(k, verify.get(str(k))) for k in (1, 4, 8, 16)),
                errors.get(name, {}).get("held_out_loss"),  # a draft's row has no loss of its own
                errors.get(name, {}).get("top1_agreement"),
            ]
        )
    speed_rows = []
    for name, s in summary.items():
        if name == "best_llama_server":
            continue
        near = s.get("all_divergences_near_ties")
        speed_rows.append(
            [
                name,
                s["tokens_per_s_total"],
                s["tokens_per_s_median"],
                s.get("ratio_to_best_llama_server"),
                s.get("tokens_per_forward"),
                _divergence_cell(s, near) if "diverged_prompts" in s else None,
                s["new_tokens_mean"],
                s["stopped_at_eos"],
                s["repetition_mean"],
            ]
        )
    prefill_rows = [
        [
            name,
            *(
                p.get("prefill_tokens_per_s", {}).get(n, p.get("prefill_tokens_per_s", {}).get(str(n)))
                for n in config["prefill_lengths"]
            ),
        ]
        for name, p in profiles.items()
        if p.get("prefill_tokens_per_s")
    ]
    server_prefill = result.get("llama_server_prefill_tokens_per_s", {})
    for label, speeds in server_prefill.items():
        by_length = _by_length(speeds)
        prefill_rows.append(
            [f"{label} (its own timings)", *(by_length.get(n) for n in config["prefill_lengths"])]
        )
    best = summary.get("best_llama_server")
    lines = [
        f"# Decode speed ({config['tag']})\n",
        f"{env['date_utc']}, commit {env['git_commit']}, {env['machine']}, {env['threads']} thread(s), "
        f"torch {env['torch']}. Target {env['target']}; {len(result['prompts'])} held-out prompts "
        f"(median {statistics.median(p['prompt_tokens'] for p in result['prompts']):.0f} tokens), greedy, "
        f"at most {config['max_new_tokens']} new tokens, stopping at EOS; every call starts from an empty cache "
        "and is timed with its prefill. Produced by `specls bench decode-speed`.\n",
        "\n## Where a step goes, what a verify costs, what quantization loses\n",
        "Step times are the fastest of the engine's own timer (`engine.costs.measure_step_costs`) at the median prompt length (at most half the window), matmul times the fastest of 8; verify cost v(k) is a forward "
        "over k + 1 positions in plain steps. Loss: cross-entropy (nats) on "
        f"{LOSS_WINDOWS} held-out windows of {LOSS_WINDOW} tokens; agreement: teacher-forced top-1 equal to the "
        "first engine's.\n\n",
        markdown_table(
            [
                "engine",
                "step ms",
                "matmuls ms",
                "rest ms",
                "v(1)",
                "v(4)",
                "v(8)",
                "v(16)",
                "loss",
                "top-1 agree",
            ],
            profile_rows,
        ),
        "\n## Prompt reading (prefill), tokens/s, into an empty cache\n\n",
        markdown_table(["engine", *(f"{n} tokens" for n in config["prefill_lengths"])], prefill_rows),
        *_prefill_ratio_lines(profiles, server_prefill, config["prefill_lengths"]),
        "\n## Tokens/s\n\n",
        markdown_table(
            [
                "engine, method",
                "tok/s (all tokens / all time)",
                "tok/s (median prompt)",
                "x best llama-server",
                "tokens per forward",
                "prompts where speculative left plain",
                "mean new tokens",
                "stopped at EOS",
                "tokens inside a repeated 4-gram",
            ],
            speed_rows,
        ),
    ]
    if best:
        lines.append(
            f"\nBest llama-server configuration: `{best['config']}`, {best['tokens_per_s_total']:.1f} tok/s.\n"
        )
    if result["rss_mb"]:
        lines.append(
            "\nMemory (MB): "
            + ", ".join(f"{name} {mb:.0f}" for name, mb in result["rss_mb"].items())
            + " (in process: resident set added by loading that engine; llama-server: the server's whole RSS).\n"
        )
    for label, memory in result.get("load_memory", {}).items():
        lines.append(
            f"\nLoading the {label} as the server does (fresh process, `bench.load_memory`): {_memory_line(memory)}\n"
        )
    load = result.get("machine_load")
    if load:
        lines.append(
            f"\nMachine load at the end of the run: load average {', '.join(f'{x:.1f}' for x in load['loadavg_1_5_15'])} "
            f"on {load['cpus']} CPUs; busy processes: {'; '.join(load['busy_processes']) or 'none'}.\n"
        )
    return "".join(line if line.endswith("\n") else line + "\n" for line in lines)


def _prefill_ratio_lines(
    profiles: dict[str, Any], server_prefill: dict[str, Any], lengths: list[int]
) -> list[str]:
    """Each in-process engine's prompt reading as a multiple of llama-server's, at each length."""
    if not server_prefill:
        return []
    label, speeds = next(iter(server_prefill.items()))
    server = _by_length(speeds)
    cells = []
    for name, p in profiles.items():
        ours = _by_length(p.get("prefill_tokens_per_s") or {})
        ratios = [f"{ours[n] / server[n]:.1f}x" for n in lengths if n in ours and server.get(n)]
        if ratios:
            cells.append(f"{name} {' / '.join(ratios)}")
    return [
        f"\nAs a multiple of `{label}` ({', '.join(str(n) for n in lengths)} tokens): {'; '.join(cells)}.\n"
    ]


def _by_length(speeds: dict[Any, float]) -> dict[int, float]:
    """Speeds keyed by prompt length, whether the keys came from the run (int) or from JSON (str)."""
    return {int(n): v for n, v in speeds.items()}


def _memory_line(memory: dict[str, Any]) -> str:
    if "error" in memory:
        return f"failed ({memory['error']})"
    weights = memory["weights_mb"]
    return (
        f"weights as held {weights:.0f} MB, KV cache {memory['kv_cache_mb']:.0f} MB; resident added by loading "
        f"{memory['rss_added_mb']:.0f} MB ({memory['rss_added_mb'] / weights:.2f}x the weights), peak added "
        f"{memory['peak_added_mb']:.0f} MB ({memory['peak_added_mb'] / weights:.2f}x); process total "
        f"{memory['rss_mb']:.0f} MB resident, {memory['peak_mb']:.0f} MB peak"
    )


def _divergence_cell(entry: dict[str, Any], all_near_ties: bool) -> str:
    if not entry["diverged_prompts"]:
        return "0"
    margins = ", ".join(f"{d['margin']:.2f} at token {d['position']}" for d in entry["divergences"])
    verdict = "all near-ties" if all_near_ties else "NOT all near-ties"
    return f"{entry['diverged_prompts']}: top-2 margin {margins} ({verdict})"


def plot(result: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    summary = {k: v for k, v in result["summary"].items() if k != "best_llama_server"}
    names = list(summary)
    speeds = [summary[n]["tokens_per_s_total"] for n in names]
    colors = ["#dd8452" if n.startswith("llama-server") else "#4c72b0" for n in names]
    fig, ax = plt.subplots(figsize=(10, 4.8))
    ax.barh(range(len(names)), speeds, color=colors)
    ax.set_yticks(range(len(names)), names, fontsize=8)
    ax.invert_yaxis()
    best = result["summary"].get("best_llama_server")
    if best:
        ax.axvline(best["tokens_per_s_total"], color="#dd8452", linestyle="--", linewidth=1)
        ax.axvline(
            1.5 * best["tokens_per_s_total"], color="#55a868", linestyle="--", linewidth=1, label="goal 1.5x"
        )
        ax.legend(loc="lower right", fontsize=8)
    ax.set_xlabel("tokens/s (greedy, held-out prompts, prefill included)")
    env = result["environment"]
    ax.set_title(f"specls decode speed, {env['threads']} thread(s): local engines vs llama-server")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# --- `specls bench decode-speed` ---

NAME = "decode-speed"
HELP = "one real model on every local runtime side by side, against llama-server"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--target",
        required=True,
        help="a pulled catalog name or a Hugging Face folder with its GGUF beside it",
    )
    parser.add_argument("--prompts", type=positive, default=8, help="held-out prompts (default: 8)")
    parser.add_argument("--max-new-tokens", type=positive, default=64, help="per prompt (default: 64)")
    parser.add_argument("--threads", type=positive, default=1, help="torch CPU threads (default: 1)")
    parser.add_argument(
        "--engines", type=names, default=ENGINES, help=f"comma-separated subset of {', '.join(KNOWN_ENGINES)}"
    )
    parser.add_argument("--no-llama-server", action="store_true", help="no llama-server rows")
    parser.add_argument("--draft", help="draft model folder (same tokenizer): adds model-drafted methods")
    parser.add_argument(
        "--draft-quantizations", type=names, default=("none", "int8", "int4"), help="draft weight precisions"
    )
    parser.add_argument(
        "--prefill-lengths", type=lengths, default=(500, 1000, 2000), help="prompt lengths timed for prefill"
    )
    parser.add_argument("--window", type=positive, default=2048, help="KV cache positions (default: 2048)")
    add_output_arguments(parser, quiet=False)


def command(args: argparse.Namespace) -> int:
    unknown = [name for name in args.engines if name not in KNOWN_ENGINES]
    if unknown:
        print(
            f"specls bench: unknown engines {unknown}; choose from {', '.join(KNOWN_ENGINES)}",
            file=sys.stderr,
        )
        return 2
    from engine.models import ModelLoadError, resolve_model_path

    try:  # a catalog name is its pulled folder; nothing here downloads
        source = resolve_model_path(args.target)
    except ModelLoadError as exc:
        print(f"specls bench: {exc}", file=sys.stderr)
        return 2
    if not source.is_local:
        print(
            f"specls bench: --target {args.target!r} is not a local folder or a pulled model", file=sys.stderr
        )
        return 2
    config = DecodeSpeedConfig(
        target=source.location,
        prompts=args.prompts,
        max_new_tokens=args.max_new_tokens,
        threads=args.threads,
        engines=args.engines,
        llama_server=not args.no_llama_server,
        window=args.window,
        draft=args.draft,
        draft_quantizations=args.draft_quantizations,
        prefill_lengths=args.prefill_lengths,
        out=args.out,
        tag=results_tag(args),
    )
    return print_paths(write_report(run_decode_speed(config), config.out, config.tag))
