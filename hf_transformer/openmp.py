"""How torch's OpenMP threads wait between parallel regions: on a busy machine, they sleep instead of spinning.

torch's Linux CPU build runs its intra-op threads on GNU OpenMP (libgomp). A thread that has finished its share of a
parallel region spins before it sleeps, by default for ``GOMP_SPINCOUNT=300000`` turns (some 3 ms). On a quiet
machine the spin saves a wake-up between the many short regions of a training step. On a machine whose cores are
busy with other processes it is what makes training collapse: the spinning thread burns the time slice that its
descheduled partner needs to finish the region, so every region waits for a scheduler slice, step after step, and
one busy process is enough to slow training several times over. Passive waiting (``OMP_WAIT_POLICY=PASSIVE``: sleep
at once) lets the waiting thread give its core away and did better under every measured load than a short spin; on
a quiet machine both cost some speed, so passive waiting is chosen only where other processes are using the cores
when the package is imported (``benchmarks/load.py``; the figures are in ``docs/performance.md``).

libgomp reads its settings once, when torch loads it; setting them later changes nothing in the process. So this
module runs first when the package is imported (``hf_transformer/__init__.py``), and the scripts import the
package before torch. It changes nothing when the user has chosen a waiting policy or a spin count, or when torch
is already loaded (the process keeps the runtime's settings; child processes would then start with a setting the
parent does not have).
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

BUSY_MACHINE_POLICY = "PASSIVE"
"""The ``OMP_WAIT_POLICY`` set on a busy machine: a waiting thread sleeps at once."""

BUSY_CORES = 0.5
"""Other processes' CPU use, in cores, from which the machine counts as busy."""

SAMPLE_SECONDS = 0.1
USER_SETTINGS = ("GOMP_SPINCOUNT", "OMP_WAIT_POLICY")
PROC_STAT = Path("/proc/stat")


def busy_seconds(cores: set[int], proc_stat: Path = PROC_STAT) -> float:
    """CPU seconds all processes have spent on `cores` since boot (idle and I/O wait excluded)."""
    busy = 0
    for line in proc_stat.read_text().splitlines():
        name, *values = line.split()
        if not name.startswith("cpu") or name == "cpu" or int(name[3:]) not in cores:
            continue
        counts = [int(value) for value in values[:8]]  # user nice system idle iowait irq softirq steal
        busy += sum(counts) - counts[3] - counts[4]
    return busy / os.sysconf("SC_CLK_TCK")


def others_busy_cores(sample: float = SAMPLE_SECONDS) -> float | None:
    """The cores' worth of CPU time other processes used on this process's cores over `sample` seconds; None where
    the system does not tell (no /proc/stat)."""
    if not PROC_STAT.is_file() or not hasattr(os, "sched_getaffinity"):
        return None
    cores = os.sched_getaffinity(0)
    started, busy, own = time.monotonic(), busy_seconds(cores), sum(os.times()[:2])
    time.sleep(sample)
    elapsed = time.monotonic() - started
    others = (busy_seconds(cores) - busy) - (sum(os.times()[:2]) - own)
    return max(0.0, others) / elapsed


def wait_passively_when_busy(measure: Callable[[], float | None] = others_busy_cores) -> bool:
    """Set ``OMP_WAIT_POLICY`` for the OpenMP runtime torch is about to load where other processes keep the cores
    busy; True if it was set here."""
    if "torch" in sys.modules or any(name in os.environ for name in USER_SETTINGS):
        return False
    others = measure()
    if others is None or others < BUSY_CORES:
        return False
    os.environ["OMP_WAIT_POLICY"] = BUSY_MACHINE_POLICY
    return True


SET_ON_IMPORT = wait_passively_when_busy()
"""Whether importing the package set ``OMP_WAIT_POLICY`` (False: a quiet machine, the user's setting, or torch was
loaded first)."""
