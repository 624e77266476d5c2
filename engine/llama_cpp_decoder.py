"""A `CausalDecoder` over a GGUF file, run in process by llama.cpp through llama-cpp-python's low-level API.

Why: llama.cpp's quantized CPU kernels decode a small model several times faster than torch's eager ops, and
in process there is no HTTP between the speculative loop and the model. Every specls drafter, token healing,
cancellation and the stop rules then run on those kernels.

Contract, as for the lean decoder: the KV cache holds one sequence (id 0) at positions 0..n-1 for the cached
tokens; `forward` appends a batch and returns logits for every position in it; `crop(n)` removes the cache
cells at positions n and beyond (`llama_memory_seq_rm`), so a rejected draft leaves nothing behind.

llama-cpp-python is optional (`scripts/setup.sh --llama-cpp` builds it); importing this module without it
raises ImportError, and `llama_cpp_available` says whether it is installed.
"""

from __future__ import annotations

import contextlib
import ctypes
import importlib.util
from pathlib import Path
from typing import Any

import numpy as np
import torch

PREFILL_CHUNK = 512  # tokens per llama_decode call; also the size of the preallocated batch


def llama_cpp_available() -> bool:
    return importlib.util.find_spec("llama_cpp") is not None


def find_gguf(folder: Path) -> Path | None:
    """The GGUF file beside a Hugging Face folder (the one `specls pull` stores), or None."""
    candidates = sorted(folder.glob("*.gguf")) if folder.is_dir() else []
    return candidates[0] if candidates else None


_backend_ready = False
_silent_log: Any = None  # the ctypes callback must outlive every call into llama.cpp


def _init_backend(lib: Any) -> None:
    global _backend_ready, _silent_log
    if _backend_ready:
        return

    @lib.llama_log_callback  # type: ignore[untyped-decorator]  # a ctypes callback type
    def silent(level: int, text: bytes, user_data: ctypes.c_void_p) -> None:
        return None

    _silent_log = silent
    lib.llama_log_set(_silent_log, ctypes.c_void_p())
    lib.llama_backend_init()
    _backend_ready = True


class LlamaCppDecoder:
    """`CausalDecoder` over a GGUF model; one sequence, `max_length` positions, `threads` CPU threads."""

    def __init__(self, gguf_path: str | Path, max_length: int | None = None, threads: int = 1) -> None:
        import llama_cpp as lib

        _init_backend(lib)
        self._lib = lib
        self.path = Path(gguf_path)
        if not self.path.is_file():
            raise FileNotFoundError(f"GGUF file {self.path} does not exist")
        model_params = lib.llama_model_default_params()
        self._model = lib.llama_model_load_from_file(str(self.path).encode(), model_params)
        if not self._model:
            raise ValueError(f"llama.cpp could not load {self.path}")
        vocab = lib.llama_model_get_vocab(self._model)
        self.vocab_size = int(lib.llama_vocab_n_tokens(vocab))
        trained = int(lib.llama_model_n_ctx_train(self._model))
        self.max_length = min(max_length, trained) if max_length else trained
        self.threads = threads
        context_params = lib.llama_context_default_params()
        context_params.n_ctx = self.max_length
        context_params.n_batch = PREFILL_CHUNK
        context_params.n_ubatch = PREFILL_CHUNK
        context_params.n_seq_max = 1
        context_params.n_threads = threads
        context_params.n_threads_batch = threads
        context_params.no_perf = True
        self._context = lib.llama_init_from_model(self._model, context_params)
        if not self._context:
            lib.llama_model_free(self._model)
            raise ValueError(f"llama.cpp could not create a context of {self.max_length} positions")
        self._memory = lib.llama_get_memory(self._context)
        self._batch = lib.llama_batch_init(PREFILL_CHUNK, 0, 1)
        self._tokens: list[int] = []
        self.device = torch.device("cpu")

    @property
    def cached_tokens(self) -> list[int]:
        return list(self._tokens)

    def crop(self, length: int) -> None:
        length = max(0, length)
        if length < len(self._tokens):
            self._lib.llama_memory_seq_rm(self._memory, 0, length, -1)
            del self._tokens[length:]

    def forward(self, token_ids: list[int]) -> torch.Tensor:
        if len(token_ids) > PREFILL_CHUNK:
            self.prefill(token_ids[:-PREFILL_CHUNK])
            token_ids = token_ids[-PREFILL_CHUNK:]
        return self._decode(token_ids, logits=True)

    def prefill(self, token_ids: list[int]) -> None:
        """Append tokens whose logits nobody needs (the prompt), in chunks of PREFILL_CHUNK."""
        for start in range(0, len(token_ids), PREFILL_CHUNK):
            self._decode(token_ids[start : start + PREFILL_CHUNK], logits=False)

    def _decode(self, token_ids: list[int], logits: bool) -> torch.Tensor:
        count = len(token_ids)
        start = len(self._tokens)
        if count == 0:
            return torch.empty(0, self.vocab_size)
        if start + count > self.max_length:
            raise ValueError(
                f"cache holds {self.max_length} positions; {start} cached + {count} new do not fit"
            )
        batch = self._batch
        for i, token in enumerate(token_ids):
            if not 0 <= token < self.vocab_size:
                raise ValueError(f"token id {token} is outside the vocabulary of {self.vocab_size}")
            batch.token[i] = token
            batch.pos[i] = start + i
            batch.n_seq_id[i] = 1
            batch.seq_id[i][0] = 0
            batch.logits[i] = 1 if logits or i == count - 1 else 0
        batch.n_tokens = count
        status = self._lib.llama_decode(self._context, batch)
        if status != 0:
            # The failed batch may have written some cells: drop them so the cache matches `_tokens`.
            self._lib.llama_memory_seq_rm(self._memory, 0, start, -1)
            raise RuntimeError(f"llama_decode failed with status {status}")
        self._tokens.extend(token_ids)
        if not logits:
            return torch.empty(0, self.vocab_size)
        rows = np.ctypeslib.as_array(
            self._lib.llama_get_logits(self._context), shape=(count, self.vocab_size)
        )
        return torch.from_numpy(rows.copy())

    def close(self) -> None:
        """Free the batch, context and model; the decoder is unusable afterwards."""
        if self._context:
            self._lib.llama_batch_free(self._batch)
            self._lib.llama_free(self._context)
            self._lib.llama_model_free(self._model)
            self._context = None
            self._model = None

    def __del__(self) -> None:
        with contextlib.suppress(Exception):  # at interpreter exit the library may be unloaded first
            self.close()
