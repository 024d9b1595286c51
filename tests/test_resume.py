"""A run killed with SIGKILL after a checkpoint and resumed ends exactly where an uninterrupted run does.

Dropout is on, so the equality also shows that the random state (dropout masks, data order) comes back
from the checkpoint, and the classifier trains its own tokenizer, so it shows that the resumed run reads
the tokenizer from the checkpoint instead of training a different one.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from safetensors.torch import load_file

from tests.helpers.launch import (
    SCRIPTS,
    logged_losses,
    pair_files,
    review_files,
    run,
    script_env,
    write_multi30k,
    write_reviews,
)

pytestmark = pytest.mark.slow

SAVE_STEPS, MAX_STEPS = 5, 60


def classifier_args(data_dir: Path, output_dir: Path) -> list[str]:
    return [
        str(SCRIPTS / "train_classifier.py"),
        "--output_dir", str(output_dir), *review_files(data_dir),
        "--vocab_size", "120", "--d_model", "64", "--num_layers", "2", "--num_heads", "4",
        "--intermediate_size", "128", "--max_length", "24", "--dropout", "0.1", "--attention_dropout", "0.1",
        "--per_device_train_batch_size", "32", "--learning_rate", "3e-3", "--warmup_steps", "3",
        "--max_steps", str(MAX_STEPS), "--save_strategy", "steps", "--save_steps", str(SAVE_STEPS),
        "--eval_strategy", "no", "--logging_steps", "1", "--max_eval_samples", "16",
        "--dataloader_num_workers", "0", "--report_to", "none", "--disable_tqdm", "true", "--use_cpu", "--seed", "3",
    ]  # fmt: skip


def kill_after_first_checkpoint(command: list[str], output_dir: Path, timeout: float = 120) -> Path:
    """Starts the run, SIGKILLs it once its first checkpoint is complete, and returns that checkpoint."""
    checkpoint = output_dir / f"checkpoint-{SAVE_STEPS}"
    state_file = checkpoint / "trainer_state.json"  # written last
    process = subprocess.Popen(command, env=script_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline and process.poll() is None:
            try:
                json.loads(state_file.read_text())
                break
            except (FileNotFoundError, json.JSONDecodeError):
                time.sleep(0.01)
        process.send_signal(signal.SIGKILL)
        _, stderr = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == -signal.SIGKILL, f"the run ended before it was killed:\n{stderr.decode()[-3000:]}"
    assert not (output_dir / "model.safetensors").exists(), "the run finished before it was killed"
    return checkpoint


def assert_same_run(resumed: Path, uninterrupted: Path) -> float:
    a, b = load_file(resumed / "model.safetensors"), load_file(uninterrupted / "model.safetensors")
    assert a.keys() == b.keys()
    difference = max(float((a[k].double() - b[k].double()).abs().max()) for k in a)
    assert difference <= 1e-6, difference
    losses_resumed, losses_uninterrupted = logged_losses(resumed), logged_losses(uninterrupted)
    assert len(losses_uninterrupted) == MAX_STEPS
    assert losses_resumed == pytest.approx(losses_uninterrupted, abs=1e-6, rel=0)
    return difference


def test_classifier_resumes_after_sigkill(tmp_path):
    data_dir = tmp_path / "data"
    write_reviews(data_dir, 400, seed=1, name="train.jsonl")
    write_reviews(data_dir, 20, seed=2, name="test.jsonl")
    uninterrupted, killed = tmp_path / "uninterrupted", tmp_path / "killed"

    # The killed run trains its tokenizer; unigram training differs from run to run, so the uninterrupted
    # run is given that one, and the resumed run must find it in the checkpoint by itself.
    checkpoint = kill_after_first_checkpoint([sys.executable, *classifier_args(data_dir, killed)], killed)
    run([sys.executable, *classifier_args(data_dir, uninterrupted), "--tokenizer", str(checkpoint)])
    run([sys.executable, *classifier_args(data_dir, killed), "--resume_from_checkpoint", str(checkpoint)])

    difference = assert_same_run(killed, uninterrupted)
    print(f"classifier resume: max abs weight difference {difference:.3g}")


def translation_args(data_dir: Path, output_dir: Path) -> list[str]:
    return [
        str(SCRIPTS / "train_translation.py"),
        "--output_dir", str(output_dir), *pair_files(data_dir),
        "--vocab_size", "60", "--d_model", "64", "--num_layers", "2", "--num_heads", "4", "--intermediate_size", "128",
        "--max_source_length", "16", "--max_target_length", "16", "--dropout", "0.1", "--num_beams", "2",
        "--per_device_train_batch_size", "32", "--learning_rate", "3e-3", "--warmup_steps", "3",
        "--max_steps", str(MAX_STEPS), "--save_strategy", "steps", "--save_steps", str(SAVE_STEPS),
        "--save_total_limit", "100", "--eval_strategy", "no", "--logging_steps", "1",
        "--max_eval_samples", "4", "--max_test_samples", "4",
        "--dataloader_num_workers", "0", "--report_to", "none", "--disable_tqdm", "true", "--use_cpu", "--seed", "3",
    ]  # fmt: skip


def test_translation_resumes_after_sigkill(tmp_path):
    data_dir = tmp_path / "data"
    write_multi30k(data_dir, {"train": 400, "val": 8, "test_2016_flickr": 8})
    uninterrupted, killed = tmp_path / "uninterrupted", tmp_path / "killed"

    checkpoint = kill_after_first_checkpoint([sys.executable, *translation_args(data_dir, killed)], killed)
    run([sys.executable, *translation_args(data_dir, uninterrupted), "--tokenizer", str(checkpoint)])
    run([sys.executable, *translation_args(data_dir, killed), "--resume_from_checkpoint", str(checkpoint)])

    difference = assert_same_run(killed, uninterrupted)
    print(f"translation resume: max abs weight difference {difference:.3g}")
