"""The spellings of specls' own special tokens, the vocabulary contract of the bundled model pair.

Training writes them into the tokenizer (`engine.train.tokenizer`) and the runtime recognizes them
(`engine.models.end_of_text_ids`: a file separator ends a completion). They live here, outside `engine/train/`,
so that the runtime never imports the training code.
"""

from __future__ import annotations

EOS = "<|endoftext|>"
FIM_PREFIX = "<|sp_fim_prefix|>"
FIM_SUFFIX = "<|sp_fim_suffix|>"
FIM_MIDDLE = "<|sp_fim_middle|>"
FILE_SEP = "<|sp_file_sep|>"
SPECIAL_TOKENS = (EOS, FIM_PREFIX, FIM_SUFFIX, FIM_MIDDLE, FILE_SEP)
