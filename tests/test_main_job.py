"""scripts/main_job.sh: every command it runs parses with the scripts' own arguments, and the steps fit together.

The job itself trains on the real corpus for minutes; its steps are tested end to end on generated data in
test_pretrain_denoising.py, test_train_classifier.py and test_predict.py. This test catches the job going
out of step with them: a renamed or misspelled flag, or model sizes that differ between pretraining and
fine-tuning.
"""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from launch_utils import job_commands, load_script, precision_choices, precision_probe
from transformers import HfArgumentParser, TrainingArguments

from hf_transformer.precision import LEAST_BFLOAT16_SPEEDUP
from hf_transformer.recipes import NsmcDataArguments, NsmcModelArguments
from hf_transformer.training import cpu_computes_bfloat16

MAIN_JOB = Path(__file__).resolve().parents[1] / "scripts" / "main_job.sh"
PRECISION_ARGS = MAIN_JOB.parent / "precision_args.sh"


TINY_SHAPE = (
    "--task masked-lm --vocab_size 64 --max_length 8 --batch_size 4 --d_model 16 --num_layers 1 --num_heads 2 "
    "--intermediate_size 32"
)


def source_precision_args(path_dir: str, arguments: str = TINY_SHAPE) -> subprocess.CompletedProcess:
    """Sources scripts/precision_args.sh as the job scripts do (under `set -euo pipefail`, with a model shape) with
    `python` found first in ``path_dir``, and prints the array it set."""
    script = f'set -euo pipefail; . "{PRECISION_ARGS}" {arguments}; echo "[${{precision_args[*]:-}}]"'
    env = {**os.environ, "PATH": f"{path_dir}{os.pathsep}{os.environ['PATH']}"}
    return subprocess.run(["bash", "-c", script], env=env, capture_output=True, text=True, timeout=120)


def _this_python(folder: Path) -> str:
    python = folder / "python"  # the interpreter running the tests (its environment: hf_transformer importable)
    python.write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')
    python.chmod(0o755)
    return str(folder)


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


def test_precision_args_stop_the_job_when_the_check_fails(tmp_path):
    # A python that cannot run the check must not leave the job silently in float32 on a bfloat16 machine.
    broken = tmp_path / "python"
    broken.write_text("#!/bin/sh\necho 'no module named hf_transformer' >&2\nexit 1\n")
    broken.chmod(0o755)
    done = source_precision_args(str(tmp_path))
    assert done.returncode != 0
    assert "no module named hf_transformer" in done.stderr
    assert "[" not in done.stdout


def test_precision_args_without_a_model_shape_stop_the_job(tmp_path):
    # Sourced without arguments, a script's own arguments would reach the check: it must name what is missing.
    done = source_precision_args(_this_python(tmp_path), arguments="")
    assert done.returncode != 0
    assert "the following arguments are required: --task" in done.stderr
    assert "[" not in done.stdout


def test_main_job_times_the_precision_of_the_model_it_pretrains():
    variables = {"data_dir": "DATA", "output_dir": "OUT", "pretrained_dir": "OUT-pretrained"}
    pretraining = job_commands(MAIN_JOB, variables, [])["pretrain_denoising"]
    parser = HfArgumentParser((NsmcModelArguments, TrainingArguments))
    model, training = parser.parse_args_into_dataclasses(args=pretraining, return_remaining_strings=True)[:2]
    probe = precision_probe(MAIN_JOB)
    assert probe.task == "masked-lm"
    for size in ("vocab_size", "max_length", "d_model", "num_layers", "num_heads", "intermediate_size"):
        assert getattr(probe, size) == getattr(model, size), size
    assert probe.batch_size == training.per_device_train_batch_size


def test_precision_choices_are_float32_and_bfloat16():
    # The job scripts' bfloat16 switch: empty (float32) where the hardware has no bfloat16 arithmetic.
    choices = [param.values[0] for param in precision_choices()]
    assert choices == [[], ["--bf16", "true"], ["--bf16", "true", "--use_cpu", "true"]]


@pytest.mark.parametrize("precision", precision_choices())
def test_main_job_commands_parse_and_fit_together(precision):
    variables = {"data_dir": "DATA", "output_dir": "OUT", "pretrained_dir": "OUT-pretrained"}
    commands = job_commands(MAIN_JOB, variables, precision)
    assert list(commands) == ["pretrain_denoising", "train_classifier", "predict"]

    pretrain = load_script("pretrain_denoising")
    parser = HfArgumentParser((NsmcModelArguments, NsmcDataArguments, pretrain.PretrainingArguments, TrainingArguments))
    pre_model, pre_data, _, pre_training = parser.parse_args_into_dataclasses(args=commands["pretrain_denoising"])

    classifier = load_script("train_classifier")
    parser = HfArgumentParser((NsmcModelArguments, NsmcDataArguments, classifier.ClassifierTrainingArguments))
    model, data, training = parser.parse_args_into_dataclasses(args=commands["train_classifier"])

    # The classifier starts from the folder the pretraining writes, with the same encoder sizes.
    assert model.init_from == pre_training.output_dir == "OUT-pretrained"
    for size in ("max_length", "d_model", "num_layers", "num_heads", "intermediate_size"):
        assert getattr(model, size) == getattr(pre_model, size), size
    # Pretraining runs without dropout; the classifier keeps its dropout.
    assert pre_model.dropout == pre_model.attention_dropout == 0.0
    assert model.dropout == model.attention_dropout == 0.1
    # Pretraining reads only the training split the classifier trains on: same data, same carving.
    assert (data.data_dir, data.validation_size) == (pre_data.data_dir, pre_data.validation_size)
    assert data.seed_of_split(training) == pre_data.seed_of_split(pre_training)
    # The model folder holds the mean of the two epochs' weights, scored on the test set.
    assert training.average_checkpoints == training.num_train_epochs == training.save_total_limit == 2
    assert training.save_strategy == "epoch" and not training.load_best_model_at_end
    classifier.check_checkpoint_averaging(training, training.average_checkpoints)
    assert training.output_dir == "OUT" and commands["predict"][0] == "OUT"
    # Both steps take the machine's precision.
    assert pre_training.bf16 == training.bf16 == ("--bf16" in precision)
