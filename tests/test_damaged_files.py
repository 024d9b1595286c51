"""Damaged model folders raise a clear error from `from_pretrained`; no weight is silently left random.

`load` is the checked loader of `hf_transformer.checkpoint`, as the models' `from_pretrained` hook calls it.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file
from transformers import AutoModelForSeq2SeqLM, PreTrainedModel

from hf_transformer import TransformerForConditionalGeneration, TransformerForSequenceClassification, TransformerModel
from hf_transformer.checkpoint import CheckpointError, checked_from_pretrained
from tests.helpers.models import tiny_config


def load(cls, folder, **kwargs):
    return checked_from_pretrained(PreTrainedModel.from_pretrained.__func__.__get__(cls), cls, folder, **kwargs)


@pytest.fixture(scope="module")
def saved(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("good")
    torch.manual_seed(0)
    TransformerForConditionalGeneration(tiny_config()).save_pretrained(folder)
    return folder


@pytest.fixture
def damaged(saved, tmp_path) -> Path:
    folder = tmp_path / "damaged"
    shutil.copytree(saved, folder)
    return folder


def edit_weights(folder: Path, edit) -> None:
    weights = load_file(folder / "model.safetensors")
    edit(weights)
    save_file(weights, folder / "model.safetensors", metadata={"format": "pt"})


def edit_config(folder: Path, edit) -> None:
    config = json.loads((folder / "config.json").read_text())
    edit(config)
    (folder / "config.json").write_text(json.dumps(config))


def test_an_intact_folder_loads_identically(saved):
    model, info = load(TransformerForConditionalGeneration, saved, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"]
    reference = load_file(saved / "model.safetensors")
    state = model.state_dict()
    assert all(torch.equal(state[key], tensor) for key, tensor in reference.items())


@pytest.mark.parametrize("cut", ["empty", "half", "last_bytes"])
def test_truncated_weights_raise(damaged, cut):
    path = damaged / "model.safetensors"
    data = path.read_bytes()
    path.write_bytes({"empty": b"", "half": data[: len(data) // 2], "last_bytes": data[:-7]}[cut])
    with pytest.raises(CheckpointError, match="damaged .truncated or corrupted."):
        load(TransformerForConditionalGeneration, damaged)


def test_corrupted_header_raises(damaged):
    path = damaged / "model.safetensors"
    data = bytearray(path.read_bytes())
    data[12:40] = b"\xfe" * 28
    path.write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match="cannot be read"):
        load(TransformerForConditionalGeneration, damaged)


def test_overwritten_tensor_data_raises(damaged):
    # Bytes 0xff in a float32 tensor read as NaN; safetensors has no checksum, so the values are what is checked.
    path = damaged / "model.safetensors"
    data = bytearray(path.read_bytes())
    data[-2000:-1000] = b"\xff" * 1000
    path.write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match="NaN or infinite"):
        load(TransformerForConditionalGeneration, damaged)


@pytest.mark.parametrize(
    "field, value, message",
    [
        ("d_model", "32", "(?s)field 'd_model'.*expected int, got str"),
        ("encoder_layers", 2.0, "(?s)field 'encoder_layers'.*expected int, got float"),
        ("share_embeddings", "yes", "(?s)field 'share_embeddings'.*expected bool, got str"),
        ("dropout", [0.1], "(?s)field 'dropout'.*doesn't match any type"),
        ("layer_norm_position", None, "(?s)field 'layer_norm_position'.*expected one of \\('post', 'pre'\\)"),
    ],
)
def test_config_with_wrong_types_raises(damaged, field, value, message):
    edit_config(damaged, lambda config: config.__setitem__(field, value))
    with pytest.raises(ValueError, match=message):
        load(TransformerForConditionalGeneration, damaged)


def test_config_that_is_not_json_raises(damaged):
    (damaged / "config.json").write_text('{"d_model": 32, ')
    with pytest.raises(OSError, match="not a valid JSON file"):
        load(TransformerForConditionalGeneration, damaged)


@pytest.mark.parametrize(
    "missing, error, message",
    [
        # The default d_model (256) gives other shapes: transformers raises on mismatched sizes.
        ("d_model", RuntimeError, "ignore_mismatched_sizes"),
        # The default number of layers (6) leaves four decoder layers without weights.
        ("decoder_layers", CheckpointError, "weights missing from the checkpoint.*decoder.layers.2"),
        # The default vocabulary (8007) contradicts the decoder vocabulary that is still given.
        ("vocab_size", ValueError, "share_embeddings=True. needs one vocabulary"),
    ],
)
def test_config_with_missing_fields_raises(damaged, missing, error, message):
    edit_config(damaged, lambda config: config.pop(missing))
    with pytest.raises(error, match=message):
        load(TransformerForConditionalGeneration, damaged)


def test_config_with_fewer_layers_than_the_checkpoint_raises(damaged):
    edit_config(damaged, lambda config: config.__setitem__("decoder_layers", 1))
    with pytest.raises(CheckpointError, match="no place for: model.decoder.layers.1"):
        load(TransformerForConditionalGeneration, damaged)


def test_checkpoint_with_a_missing_tensor_raises(damaged):
    edit_weights(damaged, lambda weights: weights.pop("model.encoder.layers.0.feed_forward.fc1.weight"))
    with pytest.raises(CheckpointError, match="missing from the checkpoint.*encoder.layers.0.feed_forward.fc1.weight"):
        load(TransformerForConditionalGeneration, damaged)


def test_checkpoint_with_renamed_tensors_raises(damaged):
    edit_weights(damaged, lambda weights: [weights.__setitem__("old." + k, weights.pop(k)) for k in list(weights)])
    with pytest.raises(CheckpointError, match="missing from the checkpoint"):
        load(TransformerForConditionalGeneration, damaged)


def test_checkpoint_whose_shapes_differ_from_the_config_raises(damaged):
    wrong = torch.zeros(8, 32)
    edit_weights(damaged, lambda weights: weights.__setitem__("model.encoder.layers.1.feed_forward.fc1.weight", wrong))
    with pytest.raises(RuntimeError, match="ignore_mismatched_sizes"):
        load(TransformerForConditionalGeneration, damaged)


def test_another_architecture_may_start_from_a_checkpoint(saved):
    # A classifier fine-tuned from a translation model: a new head and an unused decoder, by design.
    classifier = load(TransformerForSequenceClassification, saved)
    encoder = load(TransformerModel, saved).encoder.state_dict()
    assert all(torch.equal(encoder[k], v) for k, v in classifier.model.encoder.state_dict().items())


def test_the_auto_classes_use_the_checks(damaged):
    edit_weights(damaged, lambda weights: weights.pop("model.encoder.layers.0.feed_forward.fc1.weight"))
    with pytest.raises(CheckpointError):
        AutoModelForSeq2SeqLM.from_pretrained(damaged)
