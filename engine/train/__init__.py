"""Training of the bundled model pair: tokenizer, FIM target, distilled draft."""
