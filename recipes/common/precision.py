"""Which arithmetic a training run on a CPU should use: bfloat16 autocast or float32, measured on the machine.

A CPU that lists AVX512-BF16 or AMX multiplies bfloat16 in hardware, yet whether autocast then trains faster
depends on the CPU and on the model's shape: it trains some models faster on one CPU and slower on another, and
on one CPU it can be faster for one shape and slower for another (benchmarks/results/notes.md). So the job scripts
(recipes/common/precision_args.sh) time a few training steps of a model of the shape they are about to train, in both,
and take bfloat16 only where it is faster beyond the timing's noise:

    python -m recipes.common.precision --task masked-lm --vocab_size 16000 --max_length 64 --batch_size 128 \
        --d_model 128 --num_layers 2 --num_heads 4 --intermediate_size 512

prints ``gpu``, ``cpu_bf16`` or ``float32`` on stdout and what it measured on stderr. Without a GPU and without
the CPU flags nothing is timed: torch's reference bfloat16 kernels are many times slower than float32 there.

``HF_TRANSFORMER_PRECISION`` in the environment overrides the check: ``float32`` (a job on this machine gives what a
CPU whose check picks float32 gives), ``bfloat16`` (autocast, on a GPU or on the CPU, however slow it is there), or
``auto`` (the default: measured as above). Nothing is timed when it is set.

The measured speedup is remembered, per machine: on a CPU where bfloat16 and float32 train a model at about the same
speed, the timing's noise straddles the threshold, and each run of a job would pick either precision, and with it
other weights (benchmarks/results/notes.md). So the first measurement for a CPU, torch version, thread count and model
shape is written to ``~/.cache/hf_transformer/precision.json`` (under ``XDG_CACHE_HOME`` where that is set, or the
file ``HF_TRANSFORMER_PRECISION_FILE`` names), and later runs with the same key take it from there, saying so: the
same command on the same machine trains in the same precision. Remove the file, or its entry, to measure again. A
file that cannot be read or written is reported and measured past, never a reason for a job to stop.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

# torch and the package are imported where a step is timed or the hardware is asked about: a job that sets the
# precision, or names a wrong one, is answered without the seconds their import takes; one whose precision is
# remembered imports torch alone (`package_cpu_module`).
if TYPE_CHECKING:
    import torch

# bfloat16 rounds every product's inputs to 8 bits of mantissa: worth it only for a gain beyond the timing's noise.
LEAST_BFLOAT16_SPEEDUP = 1.05
# Alternated rounds the speedup is the median of. On a small virtual machine one round's ratio strays widely, and a
# median of a few rounds can pick float32 where bfloat16 trains faster (benchmarks/results/notes.md): the choice
# changes the job's time and every weight after it, so it is worth a few more seconds of timing.
SPEEDUP_ROUNDS = 12
# Where bfloat16 is far slower or far faster (every one of the first rounds beyond the threshold by this factor, the
# Intel Xeon without AMX at about half float32's speed), those rounds decide and the rest are not timed.
CLEAR_ROUNDS = 4
CLEAR_MARGIN = 1.25
TASKS = ("masked-lm", "seq2seq")
# The environment variable that overrides the measured choice, and the values it takes.
PRECISION_VARIABLE = "HF_TRANSFORMER_PRECISION"
PRECISION_CHOICES = ("auto", "float32", "bfloat16")
# The environment variable naming the file of remembered measurements (default: remembered_measurements_file()).
MEASUREMENTS_FILE_VARIABLE = "HF_TRANSFORMER_PRECISION_FILE"

__all__ = [
    "CLEAR_MARGIN",
    "CLEAR_ROUNDS",
    "LEAST_BFLOAT16_SPEEDUP",
    "MEASUREMENTS_FILE_VARIABLE",
    "PRECISION_CHOICES",
    "PRECISION_VARIABLE",
    "SPEEDUP_ROUNDS",
    "argument_parser",
    "bfloat16_speedup",
    "choose_precision",
    "probe_model",
    "main",
    "measurement_key",
    "package_cpu_module",
    "remembered_measurements_file",
    "remembered_speedup",
]


def probe_model(
    task: str,
    *,
    vocab_size: int,
    max_length: int,
    batch_size: int,
    d_model: int,
    num_layers: int,
    num_heads: int,
    intermediate_size: int,
    seed: int = 0,
) -> tuple[torch.nn.Module, dict[str, torch.Tensor]]:
    """A freshly initialised model of the given shape (the configuration's default layers: the cost of a step
    depends on the sizes, not on where the layer norms sit) and one batch of random tokens, every row full length."""
    import torch

    from hf_transformer.configuration_transformer import TransformerConfig
    from hf_transformer.modeling_transformer import TransformerForConditionalGeneration, TransformerForMaskedLM

    if task not in TASKS:
        raise ValueError(f"task must be one of {TASKS}, got {task!r}")
    config = TransformerConfig(
        vocab_size=vocab_size,
        max_position_embeddings=max_length,
        d_model=d_model,
        encoder_layers=num_layers,
        decoder_layers=num_layers,
        num_attention_heads=num_heads,
        intermediate_size=intermediate_size,
        dropout=0.1,
    )
    generator = torch.Generator().manual_seed(seed)
    tokens = torch.randint(4, vocab_size, (batch_size, max_length), generator=generator)
    if task == "masked-lm":
        model = TransformerForMaskedLM(config)
        labels = torch.full_like(tokens, -100)
        labels[:, ::7] = tokens[:, ::7]  # about the share a masked-token step scores
        return model, {"input_ids": tokens, "labels": labels}
    model = TransformerForConditionalGeneration(config)
    return model, {"input_ids": tokens, "labels": tokens.roll(1, dims=1)}


def _training_step_seconds(model, batch, optimizer, bfloat16: bool, steps: int) -> float:
    import torch

    started = time.perf_counter()
    for _ in range(steps):
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bfloat16):
            loss = model(**batch).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    return (time.perf_counter() - started) / steps


def bfloat16_speedup(model, batch, rounds: int = SPEEDUP_ROUNDS, steps: int = 2) -> float:
    """float32's seconds per training step (forward, loss, backward, AdamW) over bfloat16 autocast's, on the CPU:
    the median of per-round ratios, the two timed alternately after one untimed step each. Above 1, bfloat16 is
    faster. After ``CLEAR_ROUNDS`` rounds that all lie beyond ``LEAST_BFLOAT16_SPEEDUP`` on one side by
    ``CLEAR_MARGIN`` the remaining rounds are skipped. The model's weights are trained by the steps (they stay
    float32, as autocast keeps them)."""
    import torch

    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    for bfloat16 in (False, True):
        _training_step_seconds(model, batch, optimizer, bfloat16, steps=1)
    ratios = []
    for _ in range(rounds):
        float32 = _training_step_seconds(model, batch, optimizer, False, steps)
        bfloat16 = _training_step_seconds(model, batch, optimizer, True, steps)
        ratios.append(float32 / bfloat16)
        if len(ratios) == CLEAR_ROUNDS and (
            max(ratios) < LEAST_BFLOAT16_SPEEDUP / CLEAR_MARGIN or min(ratios) > LEAST_BFLOAT16_SPEEDUP * CLEAR_MARGIN
        ):
            break
    return statistics.median(ratios)


def package_cpu_module():
    """``hf_transformer.cpu``: the CPU's name and flags, read from /proc/cpuinfo with the standard library alone. Where
    the package is not imported yet its file is run by itself, as the job scripts run ``hf_transformer/openmp.py``:
    importing it through the package would first import the package's models, and transformers with them, seconds
    of every job's start that a remembered precision does not need."""
    if "hf_transformer" in sys.modules:
        from hf_transformer import cpu

        return cpu
    import importlib.util

    package = importlib.util.find_spec("hf_transformer")
    if package is None or package.origin is None:
        raise ImportError("No module named hf_transformer: install the package first")
    spec = importlib.util.spec_from_file_location("hf_transformer_cpu", Path(package.origin).with_name("cpu.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def choose_precision(
    measure_speedup, gpu: bool | None = None, cpu_bf16: bool | None = None, asked: str = "auto"
) -> tuple[str, str]:
    """``("gpu" | "cpu_bf16" | "float32", why)``. ``measure_speedup()`` (bfloat16 over float32) is called only on a
    CPU with hardware bfloat16 and only when ``asked`` is "auto"; "float32" and "bfloat16" are taken as asked.
    ``gpu`` and ``cpu_bf16`` default to this machine's."""
    if asked not in PRECISION_CHOICES:
        raise ValueError(f"{PRECISION_VARIABLE} must be one of {', '.join(PRECISION_CHOICES)}, not {asked!r}")
    if asked == "float32":
        return "float32", f"{PRECISION_VARIABLE}=float32: float32, not timed"
    import torch

    if gpu is None:
        gpu = torch.cuda.is_available()
    if gpu:
        return "gpu", "a GPU: bfloat16 autocast"
    if cpu_bf16 is None:
        cpu_bf16 = bool(package_cpu_module().cpu_computes_bfloat16())
    if asked == "bfloat16":
        kernels = (
            "" if cpu_bf16 else " (this CPU has no bfloat16 arithmetic: torch's reference kernels, many times slower)"
        )
        return "cpu_bf16", f"{PRECISION_VARIABLE}=bfloat16: bfloat16 autocast on the CPU, not timed{kernels}"
    if not cpu_bf16:
        return "float32", "no bfloat16 arithmetic on this CPU (no avx512_bf16 or amx_bf16 flag): float32"
    speedup = measure_speedup()
    choice = "cpu_bf16" if speedup >= LEAST_BFLOAT16_SPEEDUP else "float32"
    words = "bfloat16 autocast" if choice == "cpu_bf16" else "float32"
    return choice, (
        f"bfloat16 autocast trains this model at {speedup:.3f}x float32's steps per second on this CPU "
        f"({torch.get_num_threads()} thread(s); bfloat16 needs at least {LEAST_BFLOAT16_SPEEDUP}x): {words}"
    )


def remembered_measurements_file() -> Path:
    """Where measured speedups are kept: ``HF_TRANSFORMER_PRECISION_FILE``, else ``precision.json`` in the user's
    cache folder (``XDG_CACHE_HOME``, else ``~/.cache``), under ``hf_transformer/``."""
    named = os.environ.get(MEASUREMENTS_FILE_VARIABLE)
    if named:
        return Path(named)
    cache = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(cache) / "hf_transformer" / "precision.json"


# Settings of the environment that change which kernels torch, oneDNN and MKL run on the same CPU (oneDNN without AMX,
# torch held to AVX2): a measurement made under one is not the other's.
KERNEL_VARIABLES = (
    "ATEN_CPU_CAPABILITY",
    "ONEDNN_MAX_CPU_ISA",
    "DNNL_MAX_CPU_ISA",
    "ONEDNN_DEFAULT_FPMATH_MODE",
    "MKL_ENABLE_INSTRUCTIONS",
)


def measurement_key(task: str, shape: dict[str, int]) -> str:
    """What a measured speedup holds for: this CPU (its name, family, model and bfloat16 flags), the torch version,
    the thread count, the kernel settings of the environment that are set (``KERNEL_VARIABLES``) and the model's
    task and shape. Anything else that changes gives a new measurement."""
    import torch

    sizes = " ".join(f"{name}={value}" for name, value in sorted(shape.items()))
    kernels = "".join(f" | {name}={os.environ[name]}" for name in KERNEL_VARIABLES if os.environ.get(name))
    cpu = package_cpu_module().cpu_description()
    return f"{cpu} | torch {torch.__version__} | {torch.get_num_threads()} thread(s){kernels} | {task} {sizes}"


def _read_measurements(path: Path) -> dict:
    try:
        measurements = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        print(f"precision: {path} could not be read ({error}); measuring again", file=sys.stderr)
        return {}
    if not isinstance(measurements, dict):
        print(f"precision: {path} holds no measurements (a JSON object); measuring again", file=sys.stderr)
        return {}
    return measurements


def remembered_speedup(measure_speedup, key: str, path: Path | None = None) -> tuple[float, str]:
    """``(speedup, where it comes from)``: the speedup remembered in ``path`` under ``key``, or else
    ``measure_speedup()``, then written there (beside the other keys' entries, in a whole new file that replaces the
    old one, so that a job reading it at the same moment never sees half a file). An entry that is not a positive
    number is measured again; a file that cannot be written is reported and the measurement used all the same."""
    path = remembered_measurements_file() if path is None else path
    measurements = _read_measurements(path)
    entry = measurements.get(key)
    speedup = entry.get("speedup") if isinstance(entry, dict) else None
    if isinstance(speedup, (int, float)) and not isinstance(speedup, bool) and 0 < speedup < float("inf"):
        when = entry.get("measured", "an earlier run")
        return float(speedup), f"measured on {when}, remembered in {path}"
    speedup = measure_speedup()
    measurements = _read_measurements(path)  # another job may have written its own key meanwhile
    # The speedup as measured, unrounded: a rounded one could fall on the other side of the threshold.
    measured = datetime.datetime.now().isoformat(timespec="seconds")
    measurements[key] = {"speedup": speedup, "measured": measured}
    partial = path.with_name(f"{path.name}.{os.getpid()}.partial")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        partial.write_text(json.dumps(measurements, indent=2, sort_keys=True) + "\n", encoding="utf-8")
        os.replace(partial, path)
    except OSError as error:
        print(f"precision: the measurement could not be remembered in {path} ({error})", file=sys.stderr)
        try:
            partial.unlink(missing_ok=True)
        except OSError:
            pass  # nothing was written, or the folder refuses this too: either way no half file is read
        return speedup, "measured now"
    return speedup, f"measured now, remembered in {path}"


def argument_parser() -> argparse.ArgumentParser:
    """The command line of ``python -m recipes.common.precision``: the task and the shape of the model to time."""
    parser = argparse.ArgumentParser(
        prog="python -m recipes.common.precision",
        description="Print gpu, cpu_bf16 or float32: the arithmetic a training run of this shape should use here.",
    )
    parser.add_argument("--task", choices=TASKS, required=True)
    for name in ("vocab_size", "max_length", "batch_size", "d_model", "num_layers", "num_heads", "intermediate_size"):
        parser.add_argument(f"--{name}", type=int, required=True)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = argument_parser()
    args = vars(parser.parse_args(argv))
    task = args.pop("task")
    too_small = [f"--{name} {value}" for name, value in args.items() if value < 1]
    if too_small:
        parser.error(f"sizes must be positive: {', '.join(too_small)}")

    def time_steps() -> float:
        model, batch = probe_model(task, **args)
        return bfloat16_speedup(model, batch)

    source = []  # where the speedup came from, where one was asked for

    def measure() -> float:
        speedup, where = remembered_speedup(time_steps, measurement_key(task, args))
        source.append(where)
        return speedup

    try:
        choice, why = choose_precision(measure, asked=os.environ.get(PRECISION_VARIABLE) or "auto")
    except ValueError as error:
        parser.error(str(error))
    print(f"precision: {why}" + (f" ({source[0]})" if source else ""), file=sys.stderr)
    print(choice)
    return 0


if __name__ == "__main__":
    sys.exit(main())
