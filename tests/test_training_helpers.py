"""Small helpers the training scripts share (hf_transformer.training)."""

import subprocess
import sys

import pytest
import torch
from transformers import TrainingArguments

from hf_transformer.training import pin_memory_only_with_accelerator


@pytest.mark.parametrize("accelerator", [False, True])
def test_pin_memory_stays_on_only_with_an_accelerator(tmp_path, monkeypatch, accelerator):
    monkeypatch.setattr(torch.accelerator, "is_available", lambda: accelerator)
    args = TrainingArguments(output_dir=str(tmp_path), report_to="none")
    assert args.dataloader_pin_memory  # the Trainer's default
    pin_memory_only_with_accelerator(args)
    assert args.dataloader_pin_memory is accelerator


def test_pin_memory_left_off_when_asked_off(tmp_path, monkeypatch):
    monkeypatch.setattr(torch.accelerator, "is_available", lambda: True)
    args = TrainingArguments(output_dir=str(tmp_path), report_to="none", dataloader_pin_memory=False)
    pin_memory_only_with_accelerator(args)
    assert args.dataloader_pin_memory is False


# Allocates, fills and frees a 64 MB tensor (above glibc's largest mmap threshold) 30 times, and prints the mean
# page faults of the last 20: by default each one maps fresh pages (about 16,000 faults); with keep_freed_memory
# the heap holds the block after a few rounds and it is reused.
_FAULTS_PER_ALLOCATION = """
import resource, sys, torch
from hf_transformer.training import keep_freed_memory
applied = keep_freed_memory() if sys.argv[1] == "keep" else None
faults = []
for _ in range(30):
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    block = torch.ones(16 * 2**20)
    del block
    faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
print(applied, sum(faults[10:]) / 20)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's allocator and page-fault counts")
def test_keep_freed_memory_stops_each_allocation_from_faulting_in_fresh_pages():
    def faults(mode: str) -> tuple[str, float]:
        result = subprocess.run(
            [sys.executable, "-c", _FAULTS_PER_ALLOCATION, mode], capture_output=True, text=True, check=True
        )
        applied, count = result.stdout.split()
        return applied, float(count)

    default_applied, default_faults = faults("default")
    kept_applied, kept_faults = faults("keep")
    assert default_applied == "None" and kept_applied == "True"
    assert default_faults > 10_000  # 64 MB of 4 kB pages, mapped anew each time
    assert kept_faults < default_faults / 100
