"""The CPU this process runs on, as Linux's /proc/cpuinfo describes it.

Which arithmetic a CPU does in hardware decides a training's precision (``cpu_computes_bfloat16``) and the kernels
CTranslate2 is asked for (``hf_transformer.export.ctranslate2_export``); run records and benchmark reports name the
CPU beside each figure (``cpu_description``), since the same job's times differ between CPU kinds. Each function
takes the text of /proc/cpuinfo (read when None), so that other CPUs can be described in tests.
"""

from __future__ import annotations

import os
import platform
from pathlib import Path

# The flags of hardware bfloat16 products (recipes/common/precision_args.sh asks cpu_computes_bfloat16 too).
BFLOAT16_CPU_FLAGS = ("avx512_bf16", "amx_bf16")
# The flags a one-line description names: what decides the speed of float32 and bfloat16 products.
DESCRIBED_FLAGS = ("avx512f", "avx512_bf16", "amx_bf16")


def cpu_fields(cpuinfo: str | None = None) -> dict[str, str] | None:
    """The first processor's fields of /proc/cpuinfo (``cpuinfo``: its text), names and values stripped; None
    where there is none (not Linux)."""
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text()
        except OSError:
            return None
    pairs = (line.split(":", 1) for line in cpuinfo.split("\n\n")[0].splitlines() if ":" in line)
    return {name.strip(): value.strip() for name, value in pairs}


def cpu_flags(cpuinfo: str | None = None) -> set[str] | None:
    """The first processor's flags; None where /proc/cpuinfo cannot be read."""
    fields = cpu_fields(cpuinfo)
    return None if fields is None else set(fields.get("flags", "").split())


def cpu_computes_bfloat16(cpuinfo: str | None = None) -> bool | None:
    """Whether the CPU multiplies in bfloat16 in hardware (AVX512-BF16 or AMX); None where that cannot be read."""
    flags = cpu_flags(cpuinfo)
    return None if flags is None else any(flag in flags for flag in BFLOAT16_CPU_FLAGS)


def cpu_description(cpuinfo: str | None = None) -> str:
    """One line for a record: the CPU's name, its family and model numbers, how many CPUs this machine has and
    which of AVX-512, AVX512-BF16 and AMX it has, e.g. "AMD EPYC (family 26 model 2, 2 CPUs; avx512f, avx512_bf16)".
    The family and model tell apart CPUs that a virtual machine names alike (an AMD EPYC of the Zen 3, 4 or 5
    generation)."""
    fields = cpu_fields(cpuinfo) or {}
    name = fields.get("model name") or platform.processor() or platform.machine() or "unknown CPU"
    flags = set(fields.get("flags", "").split())
    arithmetic = [flag for flag in DESCRIBED_FLAGS if flag in flags] or ["no AVX-512"]
    numbers = f"family {fields['cpu family']} model {fields['model']}, " if "cpu family" in fields else ""
    return f"{name} ({numbers}{os.cpu_count()} CPUs; {', '.join(arithmetic)})"
