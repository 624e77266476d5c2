"""specls engine: tokens and tensors. Never imports pygls."""
