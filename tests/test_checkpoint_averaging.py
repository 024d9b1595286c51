"""Averaging the weights of the last checkpoints of a run (hf_transformer.training.average_checkpoints)."""

import pytest
import torch

from hf_transformer import TransformerForConditionalGeneration, TransformerForSequenceClassification
from hf_transformer.training import average_checkpoints, last_checkpoints
from tests.helpers.models import tiny_config


def _saved_models(tmp_path, count, config):
    models, folders = [], []
    for step in range(1, count + 1):
        torch.manual_seed(step)
        model = TransformerForConditionalGeneration(config)
        folder = tmp_path / f"checkpoint-{step * 10}"
        model.save_pretrained(folder)
        models.append(model)
        folders.append(folder)
    return models, folders


def test_average_of_checkpoints_is_the_mean_of_every_weight(tmp_path):
    config = tiny_config(share_embeddings=True, tie_word_embeddings=True)
    models, folders = _saved_models(tmp_path, 3, config)
    target = TransformerForConditionalGeneration(config)
    average_checkpoints(target, folders)

    for name, parameter in target.named_parameters():
        expected = sum(dict(model.named_parameters())[name] for model in models) / 3
        torch.testing.assert_close(parameter, expected, rtol=0, atol=1e-7, msg=name)
    # The shared token table stays one tensor: encoder, decoder and output projection read the average.
    assert target.get_output_embeddings().weight.data_ptr() == target.get_input_embeddings().weight.data_ptr()
    assert not torch.equal(target.get_input_embeddings().weight, models[-1].get_input_embeddings().weight)


def test_one_checkpoint_loads_unchanged(tmp_path):
    config = tiny_config()
    models, folders = _saved_models(tmp_path, 1, config)
    target = TransformerForConditionalGeneration(config)
    average_checkpoints(target, folders)
    for (name, mine), theirs in zip(target.state_dict().items(), models[0].state_dict().values()):
        assert torch.equal(mine, theirs), name


def test_last_checkpoints_sorts_by_step_not_by_name(tmp_path):
    for step in (9, 100, 20, 1000):
        (tmp_path / f"checkpoint-{step}").mkdir()
    (tmp_path / "checkpoint-notes").mkdir()
    assert [p.name for p in last_checkpoints(tmp_path, 2)] == ["checkpoint-100", "checkpoint-1000"]
    with pytest.raises(ValueError, match="needs 5 checkpoint folders .* found 4"):
        last_checkpoints(tmp_path, 5)


def test_checkpoints_of_another_model_are_refused(tmp_path):
    config = tiny_config()
    _, folders = _saved_models(tmp_path, 1, config)
    other = tmp_path / "checkpoint-99"
    TransformerForSequenceClassification(tiny_config(num_labels=3)).save_pretrained(other)
    with pytest.raises(ValueError, match="other weights"):
        average_checkpoints(TransformerForConditionalGeneration(config), [folders[0], other])
    with pytest.raises(ValueError, match="do not fit the model"):
        average_checkpoints(TransformerForSequenceClassification(tiny_config(num_labels=3)), folders)
    with pytest.raises(FileNotFoundError, match="no model.safetensors"):
        average_checkpoints(TransformerForConditionalGeneration(config), [tmp_path / "missing"])


def test_only_this_runs_checkpoints_are_averaged_not_an_earlier_runs_left_in_the_folder(tmp_path):
    import os
    import time

    started = time.time()
    for step, age in ((6, 3600), (8, 3600), (2, 0), (4, 0)):  # an earlier run's 6 and 8, an hour old; this run's 2, 4
        state = tmp_path / f"checkpoint-{step}" / "trainer_state.json"
        state.parent.mkdir()
        state.write_text("{}")
        os.utime(state, (started - age, started - age))
    assert [p.name for p in last_checkpoints(tmp_path, 2)] == ["checkpoint-6", "checkpoint-8"]  # by step alone
    assert [p.name for p in last_checkpoints(tmp_path, 2, written_since=started - 60)] == [
        "checkpoint-2",
        "checkpoint-4",
    ]
    with pytest.raises(ValueError, match=r"found 2 \(checkpoint-6, checkpoint-8 of an earlier run left there\)"):
        last_checkpoints(tmp_path, 3, written_since=started - 60)


def test_averaging_is_refused_before_training_where_an_earlier_runs_checkpoints_could_rotate_this_runs_away(tmp_path):
    # transformers keeps the --save_total_limit checkpoints of the highest steps: an earlier, longer run's
    # checkpoint-6 and checkpoint-8 would make it delete this run's 2 and 4 as they are saved.
    from transformers import TrainingArguments

    from hf_transformer.training import check_checkpoint_averaging

    for step in (6, 8):
        (tmp_path / f"checkpoint-{step}").mkdir()
    settings = dict(output_dir=str(tmp_path), save_strategy="epoch", num_train_epochs=2, report_to="none")
    with pytest.raises(ValueError, match=r"holds checkpoints of an earlier run \(checkpoint-6, checkpoint-8\)"):
        check_checkpoint_averaging(TrainingArguments(**settings, save_total_limit=2), 2)
    check_checkpoint_averaging(TrainingArguments(**settings, save_total_limit=2, resume_from_checkpoint="x"), 2)
    check_checkpoint_averaging(TrainingArguments(**settings), 2)  # no rotation: this run's are told apart by time
