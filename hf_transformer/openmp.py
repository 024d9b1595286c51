"""How torch's OpenMP threads wait between parallel regions: spin briefly, then sleep.

torch's Linux CPU build runs its intra-op threads on GNU OpenMP (libgomp). A thread that has finished its share of a
parallel region spins before it sleeps, by default for ``GOMP_SPINCOUNT=300000`` turns (some 3 ms). On a quiet
machine the spin saves a wake-up between the many short regions of a training step. On a machine whose cores are
busy with other processes it is what makes training collapse: the spinning thread burns the time slice that its
descheduled partner needs to finish the region, so every region waits for a scheduler slice, step after step.
A short spin (:data:`SPIN_COUNT` turns, some 10 microseconds) still bridges the gaps of a quiet step and lets a
waiting thread give its core away when its partner is not running (``benchmarks/load.py``; the figures are in
``docs/performance.md``). ``OMP_WAIT_POLICY=PASSIVE`` (no spin at all) is as robust under load but slows a quiet
machine.

libgomp reads its settings once, when torch loads it; setting them later changes nothing in the process. So this
module runs first when the package is imported (``hf_transformer/__init__.py``), and the scripts import the
package before torch. It changes nothing when the user has chosen a waiting policy or a spin count, or when torch
is already loaded (the process keeps the runtime's settings; child processes would then start with a setting the
parent does not have).
"""

from __future__ import annotations

import os
import sys

SPIN_COUNT = 1000
"""libgomp's spin turns before a waiting thread sleeps (its default is 300,000)."""

USER_SETTINGS = ("GOMP_SPINCOUNT", "OMP_WAIT_POLICY")


def wait_briefly_before_sleeping() -> bool:
    """Set ``GOMP_SPINCOUNT`` for the OpenMP runtime torch is about to load; True if it was set here."""
    if "torch" in sys.modules or any(name in os.environ for name in USER_SETTINGS):
        return False
    os.environ["GOMP_SPINCOUNT"] = str(SPIN_COUNT)
    return True


SET_ON_IMPORT = wait_briefly_before_sleeping()
"""Whether importing the package set ``GOMP_SPINCOUNT`` (False: the user's setting, or torch was loaded first)."""
