"""The training scripts under accelerate launch and torchrun: two CPU processes over gloo on 127.0.0.1.

Every run uses sequential sampling and no dropout, so that the two processes of a world-size-2 run see
exactly the rows of one world-size-1 batch, and the logged losses of both can be compared step by step.
"""

from __future__ import annotations

import json
import sys

import pytest
import torch
from accelerate.commands.config.config_args import load_config_from_file
from transformers import AutoModelForSeq2SeqLM, AutoModelForSequenceClassification, AutoTokenizer

from tests.helpers.launch import (
    REPO,
    SCRIPTS,
    accelerate_launch,
    logged_losses,
    pair_files,
    process_reports,
    review_files,
    run,
    torchrun,
    write_multi30k,
    write_reviews,
)

STEPS = 12
# What torch's DistributedDataParallel prints when asked to find unused parameters and there are none (Trainer's
# default); the scripts set ddp_find_unused_parameters=False (hf_transformer.training.no_unused_parameters).
UNUSED_PARAMETERS_WARNING = "find_unused_parameters=True was specified in DDP constructor, but did not find any unused"
CLASSIFIER_MODEL = [
    "--vocab_size", "120", "--d_model", "32", "--num_layers", "1", "--num_heads", "2",
    "--intermediate_size", "64", "--max_length", "16", "--dropout", "0", "--attention_dropout", "0",
]  # fmt: skip
COMMON = [
    "--max_steps", str(STEPS), "--learning_rate", "1e-2", "--warmup_steps", "0", "--logging_steps", "1",
    "--train_sampling_strategy", "sequential", "--save_strategy", "no", "--eval_strategy", "no",
    "--dataloader_num_workers", "0", "--report_to", "none", "--disable_tqdm", "true", "--use_cpu", "--seed", "0",
]  # fmt: skip


@pytest.fixture(scope="module")
def nsmc_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("data")
    write_reviews(root, 520, seed=1, name="train.jsonl")
    write_reviews(root, 20, seed=2, name="test.jsonl")
    return root


# The n-gram score, fitted after the training: the test rows' pass then also scores the encoder alone.
NGRAM_SCORE = ["--ngram_buckets", "4096", "--ngram_order", "2"]


def classifier_args(data_dir, output_dir, per_device_batch: int, *extra: str) -> list[str]:
    return [
        str(SCRIPTS / "train_classifier.py"),
        "--output_dir", str(output_dir), *review_files(data_dir), "--max_eval_samples", "16",
        "--per_device_train_batch_size", str(per_device_batch), *CLASSIFIER_MODEL, *COMMON, *extra,
    ]  # fmt: skip


@pytest.mark.slow
def test_classifier_two_processes_match_one(nsmc_dir, tmp_path):
    two, one = tmp_path / "two", tmp_path / "one"
    # World size 2 through accelerate's torchrun-style launcher; process 0 trains the tokenizer for both.
    done = run(
        accelerate_launch("--config_file", str(REPO / "configs" / "accelerate" / "cpu.yaml"))
        + classifier_args(nsmc_dir, two, 16, *NGRAM_SCORE)
    )
    reports = process_reports(done.stderr + done.stdout)
    assert sorted(reports) == [0, 1], reports
    assert all(world == 2 and steps == STEPS for world, steps, _ in reports.values()), reports
    assert reports[0][2] == reports[1][2], "the processes use different tokenizers"
    assert json.loads((two / "results.json").read_text())["world_size"] == 2
    assert UNUSED_PARAMETERS_WARNING not in done.stderr  # every parameter is used: DDP is told not to search

    losses_two = logged_losses(two)
    assert len(losses_two) == STEPS
    assert sum(losses_two[-3:]) / 3 < 0.85 * losses_two[0], losses_two

    tokenizer = AutoTokenizer.from_pretrained(two)
    model = AutoModelForSequenceClassification.from_pretrained(two).eval()
    batch = tokenizer(["최고의 영화 정말 재미있다"], return_tensors="pt")
    with torch.no_grad():
        assert torch.isfinite(model(**batch).logits).all()

    # The reference run: one process started with plain python (a launcher's single-process behaviour depends on
    # what is installed: `accelerate launch --cpu --num_processes 2` goes through mpirun where MPI is found), with
    # the same tokenizer and a batch of 32 = 2 x 16.
    done = run([sys.executable, *classifier_args(nsmc_dir, one, 32, "--tokenizer", str(two), *NGRAM_SCORE)])
    reports = process_reports(done.stderr + done.stdout)
    assert list(reports) == [0] and reports[0][0] == 1, reports
    losses_one = logged_losses(one)
    print("classifier losses, world size 2:", losses_two, "world size 1:", losses_one)
    # The same rows per optimizer step: the logged loss is the mean over the global batch at any world size.
    assert losses_two[0] == pytest.approx(losses_one[0], abs=1e-5)
    assert losses_two == pytest.approx(losses_one, abs=2e-4)
    # The test rows' one pass gives the encoder's accuracy alone too, its logits gathered from both processes as
    # Trainer gathers the sum's: the same rows scored, so the same accuracy as one process's.
    results_two, results_one = (json.loads((folder / "results.json").read_text()) for folder in (two, one))
    assert results_two["test_samples"] == results_one["test_samples"] == 20
    assert results_two["test_encoder_accuracy"] == pytest.approx(results_one["test_encoder_accuracy"], abs=1 / 20)


@pytest.mark.parametrize("name", ["cpu", "ddp", "fsdp", "deepspeed"])
def test_accelerate_configs_parse(name):
    config = load_config_from_file(str(REPO / "configs" / "accelerate" / f"{name}.yaml"))
    expected = {"cpu": "MULTI_GPU", "ddp": "MULTI_GPU", "fsdp": "FSDP", "deepspeed": "DEEPSPEED"}[name]
    assert config.distributed_type == expected
    assert config.num_processes >= 2 and config.main_process_ip == "127.0.0.1"


TRANSLATION_MODEL = [
    "--vocab_size", "60", "--d_model", "32", "--num_layers", "1", "--num_heads", "2", "--intermediate_size", "64",
    "--max_source_length", "16", "--max_target_length", "16", "--dropout", "0", "--num_beams", "2",
    "--lr_scheduler_type", "constant", "--max_eval_samples", "8", "--max_test_samples", "8",
]  # fmt: skip


@pytest.mark.slow
def test_translation_two_processes_match_one(tmp_path):
    data_dir, two, one = tmp_path / "data", tmp_path / "two", tmp_path / "one"
    write_multi30k(data_dir, {"train": 256, "val": 16, "test_2016_flickr": 16})

    def args(output_dir, per_device_batch, *extra):
        return [
            str(SCRIPTS / "train_translation.py"), "--output_dir", str(output_dir), *pair_files(data_dir),
            "--per_device_train_batch_size", str(per_device_batch), *TRANSLATION_MODEL, *COMMON, *extra,
        ]  # fmt: skip

    done = run(torchrun(2) + args(two, 16))
    reports = process_reports(done.stderr + done.stdout)
    assert sorted(reports) == [0, 1] and {r[:2] for r in reports.values()} == {(2, STEPS)}, reports
    assert reports[0][2] == reports[1][2], "the processes use different tokenizers"
    assert json.loads((two / "results.json").read_text())["world_size"] == 2
    assert UNUSED_PARAMETERS_WARNING not in done.stderr
    losses_two = logged_losses(two)
    assert len(losses_two) == STEPS and losses_two[-1] < 0.8 * losses_two[0], losses_two

    tokenizer = AutoTokenizer.from_pretrained(two)
    model = AutoModelForSeq2SeqLM.from_pretrained(two).eval()
    batch = tokenizer(["a dog runs"], return_tensors="pt")
    assert model.generate(**batch, max_new_tokens=5).shape[0] == 1

    done = run([sys.executable, *args(one, 32, "--tokenizer", str(two))])
    assert process_reports(done.stderr + done.stdout)[0][0] == 1
    losses_one = logged_losses(one)
    print("translation losses, world size 2:", losses_two, "world size 1:", losses_one)
    # Token-weighted: each process divides its summed loss by the token count of the whole global batch
    # (num_items_in_batch gathered over processes), so the logged loss is the global per-token mean.
    assert losses_two[0] == pytest.approx(losses_one[0], abs=1e-5)
    assert losses_two == pytest.approx(losses_one, abs=2e-4)
