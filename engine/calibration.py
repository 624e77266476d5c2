"""How fast this machine runs a model it has not loaded yet: a calibration on the model's own shapes.

Loading both default candidates to compare them would cost the start seconds, and a CPU class (native bf16
or not) says nothing of memory bandwidth: a 2-core AMX Xeon streams a 1.5B model's 3.1 GB of bf16 weights
in ~290 ms a step, too slow for the keystroke budget although it computes bf16 natively. So before loading,
`measure_rates` times, in the dtype and with the threads the model would run with (bf16 where the CPU computes
it natively; else W8A8, through the loaded model's own int8 kernel), the model's projections
(`timed_matrices`, from its config.json) at one row (a decode step: streaming weights) and at PROMPT_ROWS rows
(reading a prompt), over enough distinct copies (CALIBRATION_BYTES in all) that no cache holds them, each size
the fastest of a few rounds. That takes well under a second in bf16 and 3-4 s in W8A8 on two cores (the int8
copies are quantized first), and is cached as JSON in the specls cache dir (CALIBRATION_FILE), keyed by the
machine (its CPU and torch's vector ISA), the torch version, the dtype, the threads and the shape;
SPECLS_RECALIBRATE=1 redoes it, and a new torch version drops the old entries. One taken while other work held
the CPU (MIN_CPU_SHARE) stands for that start only.
`engine.costs.estimate_first_line` turns the rates into the first-line time the server would check after load
(`lsp_server.scheduling.budget.first_line_fit`).
"""

from __future__ import annotations

import contextlib
import functools
import json
import math
import os
import platform
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from engine.costs import PROMPT_ROWS, FirstLineEstimate, MachineRates, ModelShape, estimate_first_line
from engine.hardware import cpu_capability, default_threads

CALIBRATION_FILE = "calibration.json"
CALIBRATION_BYTES = 192 * 2**20  # past what this Xeon's caches flatter (one 27 MB matrix: 17 GB/s, 8: 12)
CALIBRATION_ROUNDS = 3  # after one warm-up round; the fastest counts (a neighbour only ever adds time)
RECALIBRATE_ENV = "SPECLS_RECALIBRATE"
# A calibration whose process got less of its threads' CPU time than this shared the machine with other work
# (a build, a benchmark): it stands for this start, whose model has to run beside that work too, but is not
# cached, or the machine would be judged by its busiest minute until SPECLS_RECALIBRATE=1. On the 2-core AMD
# EPYC (AVX2) it read 0.99-1.00 idle and 0.48-0.50 beside a benchmark holding both cores, whose 1.5B W8A8 one-row
# timing came out 17x the idle one (47 ms against 2.8).
MIN_CPU_SHARE = 0.8
# "w8a8": int8 weights with per-row int8 activations, what a CPU without native bf16 runs (`engine.quantize`).
BYTES_PER_PARAM = {"bf16": 2, "fp16": 2, "fp32": 4, "w8a8": 1}
# What a whole W8A8 step costs beyond its projections' timing (attention, norms, the activations' scales): on the
# 2-core Xeon with AVX2 kernels the 1.5B pair's projections timed 97 ms a step, the loaded pair stepped in 112.
# Left out, the estimate would let the pair through where its line comes late; bf16's timing already erred the
# safe way (153 ms estimated, 141 measured on the AMX Xeon).
STEP_BEYOND_PROJECTIONS = {"w8a8": 112 / 97}
Projection = Callable[[Any], Any]  # a tensor in, a tensor out (torch is imported only to calibrate)


def read_shape(folder: Path) -> ModelShape:
    return ModelShape.from_config(json.loads((folder / "config.json").read_text(encoding="utf-8")))


def machine_key() -> str:
    """This machine, as a calibration depends on it: the CPU model, its core count and the OS."""
    model = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace").splitlines():
            if line.startswith("model name"):
                model = line.partition(":")[2].strip()
                break
    except OSError:
        pass
    return f"{platform.system()} {platform.machine()} {model} x{os.cpu_count()}"


def timed_matrices(shape: ModelShape, dtype_name: str) -> list[tuple[int, int]]:
    """The (rows, cols) of the matrices a calibration times: the MLP's largest projection in bf16 or fp16; in
    W8A8 one layer's four projections as the lean decoder fuses them (q/k/v, o, gate/up, down), since each call
    quantizes its input too, a cost the one large matrix hides (timed on it alone, the 1.5B's W8A8 step came
    out 92 ms where the loaded pair stepped in 112 on a 2-core Xeon with AVX2 kernels)."""
    if dtype_name != "w8a8":
        return [(shape.intermediate, shape.hidden)]
    return [
        (shape.hidden + 2 * shape.kv_width, shape.hidden),
        (shape.hidden, shape.hidden),
        (2 * shape.intermediate, shape.hidden),
        (shape.hidden, shape.intermediate),
    ]


def measure_rates(
    shape: ModelShape,
    dtype_name: str = "bf16",
    threads: int = 1,
    *,
    budget_bytes: int = CALIBRATION_BYTES,
    rounds: int = CALIBRATION_ROUNDS,
    clock: Callable[[], float] = time.perf_counter,
    process_clock: Callable[[], float] = time.process_time,
) -> dict[str, Any]:
    """Time one-row and PROMPT_ROWS-row matmuls over copies of `shape`'s `timed_matrices` on the CPU with
    `threads` threads (restored afterwards); the measured numbers, as the cache stores them, with `cpu_share`:
    the CPU time the process got while timing, over what its threads could have had (other work on the
    machine takes the rest)."""
    import torch
    import torch.nn.functional as functional

    from engine.quantize import RowwiseInt8Linear

    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(dtype_name, torch.float32)
    matrices = timed_matrices(shape, dtype_name)
    params = sum(rows * cols for rows, cols in matrices)
    copy_bytes = params * BYTES_PER_PARAM[dtype_name]
    copies = max(2, math.ceil(budget_bytes / copy_bytes))
    started = clock()
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        with torch.inference_mode():
            # (input width, a decode step's call, a prompt read's call) for each matrix of each copy
            projections: list[tuple[int, Projection, Projection]] = []
            for _ in range(copies):
                for rows, cols in matrices:
                    weight = torch.full((rows, cols), 0.01, dtype=dtype)
                    # W8A8: the loaded model's own int8 kernel, two passes a step, one a prompt.
                    if dtype_name == "w8a8":
                        linear = RowwiseInt8Linear(weight)
                        projections.append((cols, linear, linear.read_prompt))
                    else:
                        dense = functools.partial(functional.linear, weight=weight)
                        projections.append((cols, dense, dense))
            fastest = {}
            timing_began, cpu_began = clock(), process_clock()
            for m in (1, PROMPT_ROWS):
                inputs = {cols: torch.full((m, cols), 0.01, dtype=dtype) for _, cols in matrices}
                best = math.inf
                for _ in range(rounds + 1):  # the first round warms kernels up
                    began = clock()
                    for cols, step, prompt in projections:
                        (step if m == 1 else prompt)(inputs[cols])
                    best = min(best, (clock() - began) / copies)
                fastest[m] = max(best, 1e-9)
            wall_spent = clock() - timing_began
            cpu_share = (process_clock() - cpu_began) / max(wall_spent * threads, 1e-9)
            del projections
    finally:
        torch.set_num_threads(previous)
    return {
        "matrices": [list(matrix) for matrix in matrices],
        "copies": copies,
        "dtype": dtype_name,
        "threads": threads,
        "one_row_s": fastest[1],
        "prompt_rows": PROMPT_ROWS,
        "prompt_rows_s": fastest[PROMPT_ROWS],
        "bytes_per_s": copy_bytes / fastest[1],
        "param_tokens_per_s": params * PROMPT_ROWS / fastest[PROMPT_ROWS],
        "cpu_share": round(cpu_share, 3),
        "calibration_s": clock() - started,
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


def calibrated_rates(
    shape: ModelShape,
    cache_file: Path,
    dtype_name: str = "bf16",
    threads: int | None = None,
) -> MachineRates:
    """This machine's rates on `shape` (with `default_threads` for it unless `threads` is given): from
    `cache_file` when it holds them for this machine, torch version, dtype, threads and shape, else measured
    and written there. SPECLS_RECALIBRATE=1 measures again."""
    import torch

    threads = threads if threads is not None else default_threads(None, shape.params)
    # torch's vector ISA is part of the machine: ATEN_CPU_CAPABILITY (and FBGEMM_ENABLE_INSTRUCTIONS with it)
    # changes the kernels on the same CPU.
    key = (
        f"{machine_key()} {cpu_capability()} | {dtype_name} | {threads} threads | "
        f"{shape.hidden}x{shape.intermediate}"
    )
    stored: dict[str, Any] = {}
    with contextlib.suppress(OSError, ValueError):
        stored = json.loads(cache_file.read_text(encoding="utf-8"))
    if not isinstance(stored, dict) or stored.get("torch") != torch.__version__:
        stored = {"torch": torch.__version__, "entries": {}}  # a torch upgrade changes the kernels
    entries = stored.setdefault("entries", {})
    entry = entries.get(key)
    recalibrate = os.environ.get(RECALIBRATE_ENV, "") not in ("", "0")
    if isinstance(entry, dict) and not recalibrate:
        source = f"calibrated {entry.get('measured_at', '?')}, cached in {cache_file}; {RECALIBRATE_ENV}=1 redoes it"
    else:
        entry = measure_rates(shape, dtype_name, threads)
        if entry["cpu_share"] < MIN_CPU_SHARE:
            return _rates(
                entry,
                dtype_name,
                threads,
                f"calibrated now in {entry['calibration_s']:.2f} s while other work held the CPU (this process "
                f"got {entry['cpu_share']:.0%} of its threads' time): not cached, the next start measures again",
            )
        entries[key] = entry
        source = f"calibrated now in {entry['calibration_s']:.2f} s, cached in {cache_file}"
        try:
            cache_file.parent.mkdir(parents=True, exist_ok=True)
            partial = cache_file.with_suffix(f".{os.getpid()}.tmp")
            partial.write_text(json.dumps(stored, indent=1, sort_keys=True) + "\n", encoding="utf-8")
            partial.replace(cache_file)
        except OSError as exc:  # a read-only cache: measure again next time
            source = f"calibrated now in {entry['calibration_s']:.2f} s, not cached ({exc})"
    return _rates(entry, dtype_name, threads, source)


def _rates(entry: dict[str, Any], dtype_name: str, threads: int, source: str) -> MachineRates:
    return MachineRates(
        bytes_per_s=float(entry["bytes_per_s"]) / STEP_BEYOND_PROJECTIONS.get(dtype_name, 1.0),
        param_tokens_per_s=float(entry["param_tokens_per_s"]),
        bytes_per_param=BYTES_PER_PARAM[dtype_name],
        threads=threads,
        source=source,
    )


def estimate_pair(
    target_folder: Path, draft_folder: Path | None, cache_file: Path, dtype_name: str = "bf16"
) -> FirstLineEstimate:
    """The first line of the pulled model in `target_folder`, drafted by the one in `draft_folder` (None: no
    draft), estimated on this machine before loading either (`engine.costs.estimate_first_line`)."""
    target = read_shape(target_folder)
    draft = read_shape(draft_folder) if draft_folder is not None else None
    return estimate_first_line(target, calibrated_rates(target, cache_file, dtype_name), draft)
