"""The server reports its own peak memory in `specls/stats`."""

from __future__ import annotations

import subprocess
import sys

# In a fresh interpreter: the peak of a long test run is already high, so 64 MB more might not raise it.
PROBE = """
from engine.memory import peak_resident_mb
before = peak_resident_mb()
ballast = bytearray(64 * 1024 * 1024)
ballast[::4096] = b"\\x01" * len(ballast[::4096])  # touch every page so it is resident
print(before, peak_resident_mb())
"""


def test_peak_rss_grows_with_what_the_process_holds() -> None:
    output = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, check=True).stdout
    before, after = (float(value) for value in output.split())
    assert before > 1
    assert after >= before + 32
