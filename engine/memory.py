"""How much memory a process holds: the one reader behind `specls/stats`, the engine's load report and the
benchmarks."""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import sys


def process_memory_mb(field: str = "VmRSS", pid: int | None = None) -> float | None:
    """A memory line of /proc/<pid>/status in MB: "VmRSS" (resident now) or "VmHWM" (peak resident).

    Linux only: None where there is no /proc or no such process or field."""
    try:
        with open(f"/proc/{pid or os.getpid()}/status", encoding="ascii") as status:
            for line in status:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) / 1024  # kB
    except OSError:
        pass
    return None


def peak_resident_mb() -> float | None:
    """This process's peak resident memory (models, caches, everything), where the OS reports it.

    Linux: VmHWM, which is this process's own (getrusage's ru_maxrss carries the parent's peak over fork and
    exec). Elsewhere getrusage, bytes on macOS."""
    peak = process_memory_mb("VmHWM")
    if peak is not None:
        return round(peak, 1)
    try:
        import resource
    except ImportError:  # Windows
        return None
    max_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return round(max_rss / (1024 * 1024) if sys.platform == "darwin" else max_rss / 1024, 1)


def return_freed_memory() -> None:
    """Hand memory freed inside the process back to the OS (glibc's malloc_trim).

    Why: tensors below glibc's (adaptive, up to 32 MB) mmap threshold live on the heap, and freeing them
    leaves the pages resident; after the HF weights are released those pages are a second model copy.
    A no-op where glibc is absent.
    """
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        trim = libc.malloc_trim
    except (OSError, AttributeError):
        return
    trim(0)
