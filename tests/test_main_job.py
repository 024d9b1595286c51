"""scripts/main_job.sh: every command it runs parses with the scripts' own arguments, and the steps fit together.

The job itself trains on the real corpus for minutes; its steps are tested end to end on generated data in
test_pretrain_denoising.py, test_train_classifier.py and test_predict.py. This test catches the job going
out of step with them: a renamed or misspelled flag, or model sizes that differ between pretraining and
fine-tuning.
"""

import re
import shlex
from pathlib import Path

from launch_utils import load_script
from transformers import HfArgumentParser, TrainingArguments

from hf_transformer.recipes import NsmcDataArguments, NsmcModelArguments

MAIN_JOB = Path(__file__).resolve().parents[1] / "scripts" / "main_job.sh"


def _commands() -> dict[str, list[str]]:
    """script name -> its arguments, with the job's shell variables filled in."""
    text = MAIN_JOB.read_text().replace("\\\n", " ")
    arrays = {name: shlex.split(value) for name, value in re.findall(r"^(\w+)=\((.*)\)$", text, re.M)}
    variables = {"data_dir": "DATA", "output_dir": "OUT", "pretrained_dir": "OUT-pretrained"}
    commands = {}
    for line in text.splitlines():
        match = re.match(r"\s*python scripts/(\w+)\.py (.*)", line)
        if not match:
            continue
        words = []
        for word in shlex.split(match.group(2), comments=True):
            array = re.fullmatch(r"\$\{(\w+)\[@\]\}", word)
            if array:
                words += arrays[array.group(1)]
            else:
                words.append(re.sub(r"\$(\w+)", lambda m: variables[m.group(1)], word))
        commands[match.group(1)] = words
    return commands


def test_main_job_commands_parse_and_fit_together():
    commands = _commands()
    assert list(commands) == ["pretrain_denoising", "train_classifier", "predict"]

    pretrain = load_script("pretrain_denoising")
    parser = HfArgumentParser((NsmcModelArguments, NsmcDataArguments, pretrain.PretrainingArguments, TrainingArguments))
    pre_model, pre_data, _, pre_training = parser.parse_args_into_dataclasses(args=commands["pretrain_denoising"])

    parser = HfArgumentParser((NsmcModelArguments, NsmcDataArguments, TrainingArguments))
    model, data, training = parser.parse_args_into_dataclasses(args=commands["train_classifier"])

    # The classifier starts from the folder the pretraining writes, with the same encoder sizes.
    assert model.init_from == pre_training.output_dir == "OUT-pretrained"
    for size in ("max_length", "d_model", "num_layers", "num_heads", "intermediate_size"):
        assert getattr(model, size) == getattr(pre_model, size), size
    # Pretraining reads only the training split the classifier trains on: same data, same carving.
    assert (data.data_dir, data.validation_size) == (pre_data.data_dir, pre_data.validation_size)
    assert data.seed_of_split(training) == pre_data.seed_of_split(pre_training)
    # The model folder holds the best validation checkpoint, scored on the test set.
    assert training.load_best_model_at_end and training.metric_for_best_model == "accuracy"
    assert training.output_dir == "OUT" and commands["predict"][0] == "OUT"
