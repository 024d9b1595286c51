"""scripts/train_multi30k.sh: the command it runs parses with train_translation.py's own arguments and is the recipe
docs/results.md reports; the script refuses a direction it has no data for.

The recipe itself trains for over an hour on the real corpus; train_translation.py is tested end to end on generated
data in test_train_translation.py. This test catches the job going out of step with it.
"""

import functools
import json
import shlex
import subprocess
from pathlib import Path

import pytest
from launch_utils import job_commands, load_script, precision_choices
from transformers import HfArgumentParser

REPO = Path(__file__).resolve().parents[1]
JOB = REPO / "scripts" / "train_multi30k.sh"
# The runs docs/results.md reports for the recipe, one per direction.
REPORTED = {("en", "de"): "m30k-en-de-v6", ("de", "en"): "m30k-de-en-v5"}


@functools.cache
def _parser() -> HfArgumentParser:
    script = load_script("train_translation")
    return HfArgumentParser((script.ModelArguments, script.DataArguments, script.TranslationTrainingArguments))


def _parse(arguments: list[str]):
    return _parser().parse_args_into_dataclasses(args=arguments)


@pytest.mark.parametrize("precision", precision_choices())
def test_multi30k_job_parses_as_the_recipe(precision):
    variables = {"data_dir": "DATA", "output_dir": "OUT", "source_lang": "de", "target_lang": "en"}
    commands = job_commands(JOB, variables, precision)
    assert list(commands) == ["train_translation"]
    model, data, training = _parse(commands["train_translation"])

    assert (data.data_dir, data.source_lang, data.target_lang, training.output_dir) == ("DATA", "de", "en", "OUT")
    assert training.bf16 == ("--bf16" in precision)
    # The scored weights are the mean of checkpoints the run keeps, one per epoch.
    assert training.save_strategy == "epoch"
    assert training.save_total_limit >= training.average_checkpoints > 1
    assert training.average_checkpoints < training.num_train_epochs
    # Beam 5 with the length penalty chosen on validation among several.
    assert model.num_beams == 5 and len(model.length_penalty) > 1
    assert (model.d_model, model.num_layers, model.vocab_size) == (256, 3, 8000)


@pytest.mark.parametrize("direction", list(REPORTED))
def test_multi30k_job_is_the_reported_recipe(direction):
    # The settings that make the recipe are those of the run docs/results.md reports for it (the reported command
    # saved and evaluated every N steps where the job says every epoch: the same checkpoints at batch 64).
    source, target = direction
    records = json.loads((REPO / "docs" / "results.json").read_text())
    command = next(r["command"] for r in records if r["run"] == REPORTED[direction])
    reported = _parse(shlex.split(command)[2:])
    variables = {"data_dir": "DATA", "output_dir": "OUT", "source_lang": source, "target_lang": target}
    job = _parse(job_commands(JOB, variables, ["--bf16", "true", "--use_cpu", "true"])["train_translation"])
    assert job[0] == reported[0]  # tokenizer, model sizes, dropouts, beams, length penalties
    assert (job[1].source_lang, job[1].target_lang) == (reported[1].source_lang, reported[1].target_lang)
    for name in (
        "num_train_epochs",
        "per_device_train_batch_size",
        "learning_rate",
        "warmup_steps",
        "lr_scheduler_type",
        "average_checkpoints",
        "save_total_limit",
        "train_sampling_strategy",
        "bf16",
        "seed",
    ):
        assert getattr(job[2], name) == getattr(reported[2], name), name


@pytest.mark.parametrize("languages", [["en", "fr"], ["en", "en"], ["de"]])
def test_multi30k_job_refuses_other_directions(languages, tmp_path):
    result = subprocess.run(["bash", str(JOB), *languages, str(tmp_path)], capture_output=True, text=True, timeout=60)
    assert result.returncode != 0
    assert "usage: bash scripts/train_multi30k.sh" in result.stderr
    assert not any(tmp_path.iterdir())  # nothing was started
