"""recipes/common/precision_args.sh, sourced by the job scripts: the machine's precision, measured, and a failing check
stops the job."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from hf_transformer.cpu import cpu_computes_bfloat16
from recipes.common.precision import LEAST_BFLOAT16_SPEEDUP, PRECISION_VARIABLE
from tests.helpers.launch import PRECISION_ARGS, precision_choices

TINY_SHAPE = (
    "--task masked-lm --vocab_size 64 --max_length 8 --batch_size 4 --d_model 16 --num_layers 1 --num_heads 2 "
    "--intermediate_size 32"
)


def source_precision_args(
    path_dir: str, arguments: str = TINY_SHAPE, precision: str | None = None
) -> subprocess.CompletedProcess:
    """Sources recipes/common/precision_args.sh as the job scripts do (under `set -euo pipefail`, with a model shape)
    with `python` found first in ``path_dir`` and HF_TRANSFORMER_PRECISION set to ``precision`` (None: unset), and
    prints the array it set."""
    script = f'set -euo pipefail; . "{PRECISION_ARGS}" {arguments}; echo "[${{precision_args[*]:-}}]"'
    env = {key: value for key, value in os.environ.items() if key != PRECISION_VARIABLE}
    env["PATH"] = f"{path_dir}{os.pathsep}{os.environ['PATH']}"
    if precision is not None:
        env[PRECISION_VARIABLE] = precision
    return subprocess.run(["bash", "-c", script], env=env, capture_output=True, text=True, timeout=120)


def _this_python(folder: Path) -> str:
    python = folder / "python"  # the interpreter running the tests (its environment: hf_transformer importable)
    python.write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')
    python.chmod(0o755)
    return str(folder)


@pytest.mark.slow
def test_precision_args_follow_this_machine_and_say_why(tmp_path):
    done = source_precision_args(_this_python(tmp_path))
    assert done.returncode == 0, done.stderr
    if torch.cuda.is_available():
        assert done.stdout.strip() == "[--bf16 true]"
    elif not cpu_computes_bfloat16():
        assert done.stdout.strip() == "[]"
        assert "no bfloat16 arithmetic on this CPU" in done.stderr
    else:
        # Timed: the choice is the one the printed speed-up calls for.
        speedup = float(re.search(r"at ([0-9.]+)x float32's steps per second", done.stderr).group(1))
        expected = "[--bf16 true --use_cpu true]" if speedup >= LEAST_BFLOAT16_SPEEDUP else "[]"
        assert done.stdout.strip() == expected, done.stderr


def test_the_environment_sets_the_precision_without_timing(tmp_path):
    python = _this_python(tmp_path)
    done = source_precision_args(python, precision="float32")
    assert done.returncode == 0 and done.stdout.strip() == "[]", done.stderr
    assert f"{PRECISION_VARIABLE}=float32" in done.stderr
    done = source_precision_args(python, precision="bfloat16")
    bfloat16 = "[--bf16 true]" if torch.cuda.is_available() else "[--bf16 true --use_cpu true]"
    assert done.returncode == 0 and done.stdout.strip() == bfloat16, done.stderr
    done = source_precision_args(python, precision="half")  # a typo stops the job instead of timing or guessing
    assert done.returncode != 0 and f"{PRECISION_VARIABLE} must be one of" in done.stderr
    assert "[" not in done.stdout


def test_a_set_precision_is_answered_without_importing_torch():
    # The job pays for torch's and the package's import only where it times steps or asks the hardware.
    probe = (
        "import sys; from recipes.common import precision; code = precision.main(sys.argv[1:]); "
        "assert 'torch' not in sys.modules and 'hf_transformer' not in sys.modules, 'imported'; sys.exit(code)"
    )
    env = os.environ | {PRECISION_VARIABLE: "float32"}
    done = subprocess.run([sys.executable, "-c", probe, *TINY_SHAPE.split()], env=env, capture_output=True, text=True)
    assert done.returncode == 0 and done.stdout.strip() == "float32", done.stderr


def test_precision_args_stop_the_job_when_the_check_fails(tmp_path):
    # A python that cannot run the check must not leave the job silently in float32 on a bfloat16 machine.
    broken = tmp_path / "python"
    broken.write_text("#!/bin/sh\necho 'no module named hf_transformer' >&2\nexit 1\n")
    broken.chmod(0o755)
    done = source_precision_args(str(tmp_path))
    assert done.returncode != 0
    assert "no module named hf_transformer" in done.stderr
    assert "[" not in done.stdout


@pytest.mark.slow
def test_precision_args_without_a_model_shape_stop_the_job(tmp_path):
    # Sourced without arguments, a script's own arguments would reach the check: it must name what is missing.
    done = source_precision_args(_this_python(tmp_path), arguments="")
    assert done.returncode != 0
    assert "the following arguments are required: --task" in done.stderr
    assert "[" not in done.stdout


def test_precision_choices_are_float32_and_bfloat16():
    # The job scripts' bfloat16 switch: empty (float32) where the hardware has no bfloat16 arithmetic.
    choices = [param.values[0] for param in precision_choices()]
    assert choices == [[], ["--bf16", "true"], ["--bf16", "true", "--use_cpu", "true"]]
