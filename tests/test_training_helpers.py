"""Small helpers the training scripts share (hf_transformer.training)."""

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
