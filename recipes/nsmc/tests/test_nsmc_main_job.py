"""scripts/main_job.sh, the NSMC recipe in one command: every command it runs parses with the scripts' own arguments,
and the steps fit together.

The job itself trains on the real corpus for minutes; its steps are tested end to end on generated data in
tests/test_pretrain_denoising.py, tests/test_train_classifier.py, tests/test_predict.py and test_nsmc_prepare.py. This
test catches the job going out of step with them: a renamed or misspelled flag, files written in one place and read
from another, or model sizes that differ between pretraining and fine-tuning.
"""

import re
import shlex
import subprocess
from pathlib import Path

import pytest
from transformers import HfArgumentParser, TrainingArguments

from hf_transformer.encoder_training import EncoderArguments, TextFileArguments
from recipes.nsmc import prepare
from tests.helpers.launch import REPO, job_arrays, job_commands, load_script, precision_choices, precision_probe

MAIN_JOB = REPO / "scripts" / "main_job.sh"
BEST_MODEL = REPO / "recipes" / "nsmc" / "best_model.sh"
VARIABLES = {"data_dir": "DATA", "output_dir": "OUT", "pretrained_dir": "OUT-pretrained", "reviews_dir": "OUT-data"}


def case_arrays(setting: str) -> dict[str, dict[str, list[str]]]:
    """The arrays the main job sets for each value of an environment setting (its ``case ${SETTING:-default} in``
    branches ``value) name=(...) ;;``): value -> {array name: words}."""
    pattern = r"^case \$\{" + setting + r":-\w+\} in\n(.*?)^esac"
    block = re.search(pattern, MAIN_JOB.read_text(), re.M | re.S).group(1)
    branches = re.findall(r"^\s*([\w+-]+)\)(.*?);;", block, re.M)
    return {value: dict(re.findall(r"(\w+)=\((.*?)\)", body)) for value, body in branches if value != "*"}


def job_variables(job: str) -> tuple[dict[str, str], dict[str, list[str]]]:
    """The shell variables and arrays of the main job as it runs alone ("main": its defaults) or as
    recipes/nsmc/best_model.sh runs it ("best": the settings that script gives)."""
    given = dict(re.findall(r"(MAIN_JOB_\w+)=(\S+)", BEST_MODEL.read_text())) if job == "best" else {}
    steps = re.search(r"^pretraining_steps=\$\{MAIN_JOB_PRETRAINING_STEPS:-(\d+)\}$", MAIN_JOB.read_text(), re.M)
    variables = VARIABLES | {"pretraining_steps": given.pop("MAIN_JOB_PRETRAINING_STEPS", steps.group(1))}
    arrays = job_arrays(MAIN_JOB)
    for setting, default in (("MAIN_JOB_SEGMENTER", "none"), ("MAIN_JOB_NGRAM_UNIT", "character")):
        chosen = case_arrays(setting)[given.pop(setting, default)]
        arrays |= {name: shlex.split(words) for name, words in chosen.items()}
    assert not given, f"settings the main job does not read: {given}"
    return variables, arrays


def test_main_job_times_the_precision_of_the_model_it_pretrains():
    variables, arrays = job_variables("main")
    pretraining = job_commands(MAIN_JOB, variables, [], arrays)["pretrain_denoising"]
    parser = HfArgumentParser((EncoderArguments, TrainingArguments))
    model, training = parser.parse_args_into_dataclasses(args=pretraining, return_remaining_strings=True)[:2]
    probe = precision_probe(MAIN_JOB)
    assert probe.task == "masked-lm"
    for size in ("vocab_size", "max_length", "d_model", "num_layers", "num_heads", "intermediate_size"):
        assert getattr(probe, size) == getattr(model, size), size
    assert probe.batch_size == training.per_device_train_batch_size


def prepare_command() -> list[str]:
    """The arguments of the job's ``python -m recipes.nsmc.prepare`` line, its variables filled in."""
    (line,) = re.findall(r"^python -m recipes\.nsmc\.prepare (.*)$", MAIN_JOB.read_text(), re.M)
    return [re.sub(r"\$(\w+)", lambda m: VARIABLES[m.group(1)], word) for word in shlex.split(line)]


@pytest.mark.parametrize("job", ["main", "best"])
@pytest.mark.parametrize("precision", precision_choices())
def test_main_job_commands_parse_and_fit_together(precision, job):
    variables, arrays = job_variables(job)
    commands = job_commands(MAIN_JOB, variables, precision, arrays)
    assert [name for name in commands if name in ("pretrain_denoising", "train_classifier", "predict")] == [
        "pretrain_denoising",
        "train_classifier",
        "predict",
    ]

    pretrain = load_script("pretrain_denoising")
    parser = HfArgumentParser((EncoderArguments, TextFileArguments, pretrain.PretrainingArguments, TrainingArguments))
    pre_model, pre_data, _, pre_training = parser.parse_args_into_dataclasses(args=commands["pretrain_denoising"])

    classifier = load_script("train_classifier")
    parser = HfArgumentParser((EncoderArguments, TextFileArguments, classifier.ClassifierTrainingArguments))
    model, data, training = parser.parse_args_into_dataclasses(args=commands["train_classifier"])

    # Both read the files the recipe's first step writes: the same training and validation reviews, and only the
    # classifier the test reviews.
    written = vars(prepare.argument_parser().parse_args(prepare_command()))
    folder = str(written["output_dir"])
    assert (data.train_file, data.validation_file) == (pre_data.train_file, pre_data.validation_file)
    assert (data.train_file, data.validation_file, data.test_file) == tuple(
        f"{folder}/{split}.jsonl" for split in prepare.SPLITS
    )
    assert pre_data.test_file is None
    assert written["seed"] == 42 and written["data_dir"] == "DATA"
    # The classifier starts from the folder the pretraining writes, with the same encoder sizes.
    assert model.init_from == pre_training.output_dir == "OUT-pretrained"
    for size in ("max_length", "d_model", "num_layers", "num_heads", "intermediate_size"):
        assert getattr(model, size) == getattr(pre_model, size), size
    # Neither step drops anything: the pretraining and the classifier train without dropout.
    assert pre_model.dropout == pre_model.attention_dropout == 0.0
    assert model.dropout == model.attention_dropout == 0.0
    # The model folder holds the mean of the two epochs' weights, scored on the test set.
    assert training.average_checkpoints == training.num_train_epochs == training.save_total_limit == 2
    assert training.save_strategy == "epoch" and not training.load_best_model_at_end
    classifier.check_checkpoint_averaging(training, training.average_checkpoints)
    assert training.output_dir == "OUT" and commands["predict"][0] == "OUT"
    # The tokenizer learns BPE pieces, which the same command learns again byte for byte; the classifier adds its
    # score over character 1- to 4-grams, refitted with the validation reviews once they have scored it. The best
    # model cuts morphemes first, pretrains four times as long and reads the morpheme pieces' n-grams too.
    assert pre_model.tokenizer_model == "bpe"
    assert training.ngram_buckets > 0 and training.ngram_order == 4 and training.ngram_refit_with_validation
    expected = {"main": (None, 4500, "character", None), "best": ("mecab-ko", 18000, "token+character", 3)}[job]
    assert (pre_model.segmenter, pre_training.max_steps, training.ngram_unit, training.ngram_token_order) == expected
    # Both steps take the machine's precision.
    assert pre_training.bf16 == training.bf16 == ("--bf16" in precision)


def test_main_job_sources_the_recipes_precision_check():
    assert job_arrays(MAIN_JOB)["model_args"]  # the shape it times is the shape it trains (test above)
    assert ". recipes/common/precision_args.sh --task masked-lm" in MAIN_JOB.read_text()


@pytest.mark.parametrize("earlier", ["-pretrained/config.json", "/results.json", "/checkpoint-2/"])
def test_main_job_refuses_an_earlier_run_s_folders_before_any_work(tmp_path, earlier):
    output = tmp_path / "nsmc"
    held = Path(f"{output}{earlier}")
    held.parent.mkdir()
    held.mkdir() if earlier.endswith("/") else held.write_text("{}")
    result = subprocess.run(
        ["bash", str(MAIN_JOB), str(tmp_path / "no-data"), str(output)], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 2
    told = f"{held.parent} holds an earlier run: give the job another OUTPUT_DIR (its second argument), or remove it"
    assert result.stderr.strip() == told
    assert not Path(f"{output}-data").exists()  # nothing prepared
