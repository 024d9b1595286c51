"""scripts/train_multi30k.sh: the command it runs parses with train_translation.py's own arguments and is the recipe
docs/results.md reports; the script refuses a direction it has no data for.

The recipe itself trains for over an hour on the real corpus; train_translation.py is tested end to end on generated
data in test_train_translation.py. This test catches the job going out of step with it.
"""

import subprocess
from pathlib import Path

import pytest
from launch_utils import job_commands, load_script, precision_choices
from transformers import HfArgumentParser

JOB = Path(__file__).resolve().parents[1] / "scripts" / "train_multi30k.sh"


@pytest.mark.parametrize("precision", precision_choices())
def test_multi30k_job_parses_as_the_recipe(precision):
    variables = {"data_dir": "DATA", "output_dir": "OUT", "source_lang": "de", "target_lang": "en"}
    commands = job_commands(JOB, variables, precision)
    assert list(commands) == ["train_translation"]
    script = load_script("train_translation")
    parser = HfArgumentParser((script.ModelArguments, script.DataArguments, script.TranslationTrainingArguments))
    model, data, training = parser.parse_args_into_dataclasses(args=commands["train_translation"])

    assert (data.data_dir, data.source_lang, data.target_lang, training.output_dir) == ("DATA", "de", "en", "OUT")
    assert training.bf16 == ("--bf16" in precision)
    # The scored weights are the mean of checkpoints the run keeps, one per epoch.
    assert training.save_strategy == "epoch"
    assert training.save_total_limit >= training.average_checkpoints > 1
    assert training.average_checkpoints < training.num_train_epochs
    # Beam 5 with the length penalty chosen on validation among several.
    assert model.num_beams == 5 and len(model.length_penalty) > 1
    assert (model.d_model, model.num_layers, model.vocab_size) == (256, 3, 8000)


@pytest.mark.parametrize("languages", [["en", "fr"], ["en", "en"], ["de"]])
def test_multi30k_job_refuses_other_directions(languages, tmp_path):
    result = subprocess.run(["bash", str(JOB), *languages, str(tmp_path)], capture_output=True, text=True, timeout=60)
    assert result.returncode != 0
    assert "usage: bash scripts/train_multi30k.sh" in result.stderr
    assert not any(tmp_path.iterdir())  # nothing was started
