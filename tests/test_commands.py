"""The commands' refusals: one line and exit status 2 (hf_transformer.commands), what is not a refusal with its
traceback; and each training command ends so on what a user got wrong, before reading data where it can."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch
from transformers import HfArgumentParser, TrainingArguments

from hf_transformer.commands import ArgumentsError, parse_arguments, run_command
from hf_transformer.data import MissingColumnError, load_local_dataset
from hf_transformer.training import check_validation_size
from tests.helpers.launch import REPO, SCRIPTS, script_env, write_reviews


def test_a_refusal_of_the_package_ends_in_one_line_with_status_2(capsys):
    with pytest.raises(SystemExit) as ended:
        run_command(lambda: check_validation_size(1.5), prog="train")
    assert ended.value.code == 2
    assert capsys.readouterr().err == (
        "train: error: --validation_size is the share of the training rows held out, between 0 and 1; got 1.5\n"
    )


def test_what_is_not_a_refusal_keeps_its_traceback(capsys):
    # A ValueError raised inside another library (json here; torch or datasets at run time) is a bug or an
    # unforeseen case, and a KeyError in the package's own code is a bug: both propagate.
    with pytest.raises(json.JSONDecodeError):
        run_command(lambda: json.loads("{"), prog="train")
    with pytest.raises(KeyError):
        run_command(lambda: {}["absent"], prog="train")
    assert capsys.readouterr().err == ""


def test_a_value_the_arguments_refuse_is_a_refusal_wherever_the_check_lives(tmp_path, capsys):
    parser = HfArgumentParser(TrainingArguments)
    argv = ["--output_dir", str(tmp_path), "--load_best_model_at_end", "--eval_strategy", "epoch"]
    argv += ["--save_strategy", "steps"]
    with pytest.raises(ArgumentsError, match="--load_best_model_at_end requires the save and eval strategy to match"):
        parse_arguments(parser, argv)
    with pytest.raises(SystemExit) as ended:
        run_command(lambda: parse_arguments(parser, argv), prog="train")
    assert ended.value.code == 2
    assert capsys.readouterr().err.startswith("train: error: --load_best_model_at_end requires")


def test_a_missing_column_is_a_key_error_and_a_refusal(tmp_path, capsys):
    path = tmp_path / "rows.csv"
    path.write_text("text,lbl\na,1\n", encoding="utf-8")
    with pytest.raises(MissingColumnError) as raised:
        load_local_dataset({"train": str(path)}, text_column="text", label_column="label")
    assert isinstance(raised.value, KeyError) and isinstance(raised.value, ValueError)
    assert str(raised.value) == f"['{path}'] has no column(s) ['label']; its columns are ['text', 'lbl']"
    with pytest.raises(SystemExit):
        run_command(lambda: load_local_dataset({"train": str(path)}, text_column="text", label_column="label"))
    assert capsys.readouterr().err.endswith("has no column(s) ['label']; its columns are ['text', 'lbl']\n")


@pytest.mark.parametrize(
    ("name", "content", "message"),
    [
        (
            "reviews.csv",
            "text,label\n좋은 영화,1\n".encode("cp949"),
            r"reviews.csv is not UTF-8.*iconv -f cp949",
        ),
        (
            "reviews.jsonl",
            b'{"text": "a", "label": 1}\n{"text": "b", label: 2}\n',
            r"cannot read \S*reviews.jsonl, line 2: not JSON \(Expecting property name enclosed in double quotes, "
            r"column 15\)$",
        ),
        ("reviews.tsv", b"text\tlabel\na\t1\nb\t2\t3\n", r"cannot read .*Expected 2 fields in line 3, saw 3"),
    ],
)
def test_a_data_file_datasets_cannot_read_is_named_with_what_is_wrong(tmp_path, name, content, message):
    path = tmp_path / name
    path.write_bytes(content)
    good = tmp_path / f"good{path.suffix}"
    good.write_text(
        {".csv": "text,label\na,1\n", ".jsonl": '{"text": "a", "label": 1}\n', ".tsv": "text\tlabel\na\t1\n"}[
            path.suffix
        ]
    )
    with pytest.raises(ValueError, match=message):
        load_local_dataset({"train": str(path)}, text_column="text", label_column="label")
    if path.suffix == ".jsonl":  # beside a file that reads, only the broken one is named
        with pytest.raises(ValueError, match=message) as raised:
            load_local_dataset({"train": str(good), "test": str(path)}, text_column="text", label_column="label")
        assert str(good) not in str(raised.value)


def test_a_text_file_that_is_not_utf8_is_named(tmp_path):
    from hf_transformer.data import read_sentence_lines

    path = tmp_path / "train.de"
    path.write_bytes("Ein Hund läuft\n".encode("latin-1"))
    with pytest.raises(ValueError, match=r"train.de is not UTF-8 text"):
        read_sentence_lines(path)


TINY = ["--vocab_size", "60", "--d_model", "16", "--num_layers", "1", "--num_heads", "2", "--intermediate_size", "32"]


@pytest.mark.slow
def test_each_command_ends_a_refusal_in_one_line(tmp_path):
    """Each command run as a user runs it: the last line of standard error is the refusal, no traceback, status 2,
    nothing written."""
    reviews = write_reviews(tmp_path / "data", 40, seed=0, name="train.jsonl")
    pairs = tmp_path / "pairs.jsonl"
    pairs.write_text('{"source": "a dog", "target": "ein hund"}\n', encoding="utf-8")
    cp949 = tmp_path / "reviews.csv"
    cp949.write_bytes("text,label\n좋은 영화,1\n".encode("cp949"))
    (tmp_path / "empty_tokenizer").mkdir()
    config = tmp_path / "config.json"
    config.write_text('{"d_model": 32, "n_heads": 2}')
    state_dict = tmp_path / "weights.pt"
    torch.save({"weight": torch.zeros(2)}, state_dict)
    out = tmp_path / "out"
    training = ["--report_to", "none"]
    commands = {
        "train_classifier": (
            [str(SCRIPTS / "train_classifier.py"), "--train_file", str(cp949), *TINY, *training, "--output_dir",
             str(out)],
            "train_classifier.py: error: " + str(cp949) + " is not UTF-8 text",
        ),
        "pretrain_denoising": (
            [str(SCRIPTS / "pretrain_denoising.py"), "--train_file", str(reviews), "--validation_size", "1.5", *TINY,
             *training, "--output_dir", str(out)],
            "pretrain_denoising.py: error: --validation_size is the share of the training rows held out",
        ),
        "train_translation": (
            [str(SCRIPTS / "train_translation.py"), "--train_file", str(pairs), *TINY, "--num_heads", "3", *training,
             "--output_dir", str(out)],
            "train_translation.py: error: TransformerConfig: `d_model` (16) must be divisible",
        ),
        "recipes.multi30k.train": (
            ["-m", "recipes.multi30k.train", "--data_dir", str(tmp_path), "--learning_rate", "-1", *training,
             "--output_dir", str(out)],
            "train.py: error: impossible training numbers: --learning_rate -1.0 (at least 0)",
        ),
        "train_classifier --tokenizer": (
            [str(SCRIPTS / "train_classifier.py"), "--train_file", str(reviews), "--tokenizer",
             str(tmp_path / "empty_tokenizer"), *TINY, *training, "--output_dir", str(out)],
            "holds no tokenizer (tokenizer.json or tokenizer_config.json)",
        ),
        "recipes.nsmc.prepare": (
            ["-m", "recipes.nsmc.prepare", "--data_dir", str(tmp_path / "no-data"), "--output_dir", str(out)],
            "the HF_TRANSFORMER_DATA environment variable; now",
        ),
        "convert_checkpoint": (
            [str(SCRIPTS / "convert_checkpoint.py"), "--from", "seed", str(state_dict), str(config), str(out)],
            "unknown keys ['d_model', 'n_heads']",
        ),
    }  # fmt: skip
    running = {
        name: subprocess.Popen(
            [sys.executable, *argv],
            cwd=REPO,
            env=script_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for name, (argv, _) in commands.items()
    }
    for name, process in running.items():
        _, err = process.communicate(timeout=300)
        lines = err.strip().splitlines()
        assert process.returncode == 2, (name, err[-2000:])
        assert "Traceback" not in err, (name, err[-2000:])
        assert commands[name][1] in lines[-1], (name, lines[-1])
    assert not out.exists()
    assert not (tmp_path / "no-data").exists()
