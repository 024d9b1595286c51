"""How torch's OpenMP threads wait between parallel regions: on a busy machine, they should sleep instead of spinning.

torch's Linux CPU build runs its intra-op threads on GNU OpenMP (libgomp). A thread that has finished its share of a
parallel region spins before it sleeps, by default for ``GOMP_SPINCOUNT=300000`` turns (some 3 ms). On a quiet
machine the spin saves a wake-up between the many short regions of a training step. On a machine whose cores are
busy with other processes it is what makes training collapse: the spinning thread burns the time slice that its
descheduled partner needs to finish the region, so every region waits for a scheduler slice, step after step, and
one busy process is enough to slow training several times over. Passive waiting (``OMP_WAIT_POLICY=PASSIVE``: sleep
at once) lets the waiting thread give its core away and did better under every measured load than a short spin; on
a quiet machine both cost some speed, so passive waiting is chosen only where other processes are using the cores
(``benchmarks/load.py``; the figures are in ``docs/performance.md``).

libgomp reads its settings once, when torch loads it: a process that has imported torch (as importing this package
does) can only set them for the processes it starts. Importing the package sets nothing. The choice is made where a
job starts, before it starts any process of its own (a torchrun job's ranks would count as each other's load):

- ``python -m hf_transformer.openmp`` prints the policy for a job's processes, ``PASSIVE`` or nothing; the job
  scripts export it (``recipes/common/wait_policy.sh``, one sourced line);
- ``wait_passively_when_busy()`` sets it in ``os.environ``, for the processes a Python launcher starts;
- ``restart_waiting_passively_when_busy()``, the training scripts' first call, runs the program again under it when
  it was started without a waiting setting on a busy machine.

Each changes nothing where the user has chosen a waiting policy or a spin count.
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

SAMPLE_SECONDS = 0.5
USER_SETTINGS = ("GOMP_SPINCOUNT", "OMP_WAIT_POLICY")
PROC_STAT = Path("/proc/stat")
JOB_RANK_VARIABLES = ("LOCAL_RANK", "TORCHELASTIC_RUN_ID")
"""Set in each process of a torchrun or accelerate job: its launcher, not the rank, chooses."""


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


def busy_machine_policy(measure: Callable[[], float | None] = others_busy_cores) -> str | None:
    """``BUSY_MACHINE_POLICY`` where other processes keep the cores busy and the environment holds no waiting setting
    of the user's; None otherwise (a quiet machine keeps libgomp's default, and so does one that cannot tell)."""
    if any(name in os.environ for name in USER_SETTINGS):
        return None
    others = measure()
    return BUSY_MACHINE_POLICY if others is not None and others >= BUSY_CORES else None


def wait_passively_when_busy(measure: Callable[[], float | None] = others_busy_cores) -> bool:
    """Set ``OMP_WAIT_POLICY=PASSIVE`` in ``os.environ`` where other processes keep the cores busy and no waiting
    setting is chosen; True if it was set here.

    It reaches the processes started from here afterwards (a launcher's training processes), and this process's
    own OpenMP runtime only where torch has not been loaded yet."""
    policy = busy_machine_policy(measure)
    if policy is not None:
        os.environ["OMP_WAIT_POLICY"] = policy
    return policy is not None


def restart_waiting_passively_when_busy(
    measure: Callable[[], float | None] = others_busy_cores, execv: Callable[[str, list[str]], object] = os.execv
) -> bool:
    """A program's first call (in its ``if __name__ == "__main__":`` block): where it was started without a waiting
    setting on a busy machine, after torch loaded its OpenMP runtime, run it again from the start with
    ``OMP_WAIT_POLICY=PASSIVE`` (``os.execv``: the same process, arguments and open files). Returns False where it
    keeps running as it is: a setting chosen already (by the user or the job's launcher), a process of a torchrun or
    accelerate job (its launcher chooses), one intra-op thread (no partner to wait for), torch not loaded yet (the
    setting then reaches it without a restart), or a quiet machine."""
    if any(name in os.environ for name in (*USER_SETTINGS, *JOB_RANK_VARIABLES)):
        return False
    torch = sys.modules.get("torch")
    if torch is not None and torch.get_num_threads() <= 1:
        return False
    if not wait_passively_when_busy(measure) or torch is None:
        return False
    print(
        "Other processes keep this machine's cores busy: restarting with OMP_WAIT_POLICY=PASSIVE (torch's OpenMP "
        "threads sleep instead of spinning while they wait; hf_transformer.openmp).",
        file=sys.stderr,
        flush=True,
    )
    sys.stdout.flush()
    execv(sys.executable, [sys.executable, *sys.orig_argv[1:]])
    return True  # only where `execv` returns (a test's stand-in)


def main() -> None:
    """Print the waiting policy for a job's processes (``PASSIVE`` or nothing), and on stderr why."""
    chosen = [f"{name}={os.environ[name]}" for name in USER_SETTINGS if name in os.environ]
    others = None if chosen else others_busy_cores()
    policy = None if chosen else busy_machine_policy(lambda: others)
    if chosen:
        reason = f"kept as set: {' '.join(chosen)}"
    elif others is None:
        reason = "other processes' CPU use unknown here: libgomp's default waiting"
    else:
        waiting = f"OMP_WAIT_POLICY={policy}" if policy else "libgomp's default waiting"
        reason = f"other processes use {others:.2f} of this process's cores: {waiting}"
    print(f"OpenMP waiting: {reason}", file=sys.stderr)
    print(policy or "")


if __name__ == "__main__":
    main()
