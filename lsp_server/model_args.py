"""The flags that name a model and its precision, shared by serve, generate, demo, info and every benchmark
(`bench/`), which is why they live beside the server rather than in the app: both import them."""

from __future__ import annotations

import argparse

TARGET_HELP = (
    "target model: a pulled name (qwen2.5-coder-0.5b, see `specls pull`), a local Hugging Face folder or a hub "
    "id (default: serve and demo take the default model when it is pulled, see docs/models.md; else bundled)"
)
DRAFT_HELP = (
    "draft model: a local folder or hub id, or 'none' for the copying drafters only "
    "(default: bundled for the bundled target, none for a pulled model)"
)
DTYPE_HELP = (
    "fp32 or bf16; auto (default) picks bf16 on a CPU with native bf16 and a target of 100M+ parameters"
)


def add_model_arguments(
    parser: argparse.ArgumentParser | argparse._ArgumentGroup, *, dtype_default: str | None = "auto"
) -> None:
    """--target, --draft and --dtype. `dtype_default=None` leaves --dtype unset so settings can decide."""
    parser.add_argument("--target", help=TARGET_HELP)
    parser.add_argument("--draft", help=DRAFT_HELP)
    parser.add_argument("--dtype", choices=("auto", "fp32", "bf16"), default=dtype_default, help=DTYPE_HELP)
