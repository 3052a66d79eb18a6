"""Facts about the machine rnnlab runs on, each in one place: the processor's name (quoted beside every
speed and compute figure), the cores this process may use, and rnnlab's cache folder (downloaded data,
per-machine measurements)."""

from __future__ import annotations

import os
import platform
from pathlib import Path


def processor_name() -> str:
    """The processor's model name, as ``lscpu`` prints it, for the pages that quote speeds and compute."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def cpu_cores() -> int:
    """The cores this process may run on (its CPU affinity where the system has one)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def cache_dir() -> Path:
    """``$RNNLAB_CACHE_DIR``, default ``~/.cache/rnnlab``."""
    return Path(os.environ.get("RNNLAB_CACHE_DIR") or Path.home() / ".cache" / "rnnlab")
