"""specls benchmarks: throughput against peers, learned draft lengths, keystroke latency through the server.

Run them with `specls bench throughput|draft-length|keystrokes` (see bench/README.md); each writes JSON, a
markdown table and a PNG plot under bench/results/.
"""
