"""The package's Trainer and its training order: rows grouped by length as transformers groups them, the batches in
random order (hf_transformer.data.shuffled_length_groups, hf_transformer.trainer.LengthGroupedTrainer)."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
import torch
from datasets import Dataset
from torch.utils.data import RandomSampler, SequentialSampler
from transformers import Trainer, TrainingArguments, set_seed
from transformers.trainer_pt_utils import LengthGroupedSampler, get_length_grouped_indices

from hf_transformer import TransformerConfig, TransformerForSequenceClassification
from hf_transformer.data import ShuffledLengthGroupedSampler, shuffled_length_groups
from hf_transformer.trainer import LengthGroupedTrainer
from tests.helpers.launch import load_script


def cut(indices: list[int], size: int) -> list[list[int]]:
    return [indices[start : start + size] for start in range(0, len(indices), size)]


def descending_share(batches: list[list[int]], lengths: list[int]) -> float:
    """The share of neighbouring batches whose longest row is at most the one before's: near 1 for transformers'
    sweep through each sorted mega-batch, near one half for batches in random order."""
    longest = [max(lengths[i] for i in batch) for batch in batches]
    return sum(b <= a for a, b in zip(longest, longest[1:])) / (len(longest) - 1)


_DRAWS = random.Random(0)
LENGTHS = [_DRAWS.randint(1, 60) for _ in range(3000)]  # 3,000 rows: 150 batches of 20


def test_the_batches_are_transformers_length_groups_in_random_order():
    size = 20
    ours = cut(shuffled_length_groups(LENGTHS, size, torch.Generator().manual_seed(5)), size)
    theirs = cut(get_length_grouped_indices(LENGTHS, size, generator=torch.Generator().manual_seed(5)), size)
    assert sorted(i for batch in ours for i in batch) == list(range(len(LENGTHS)))  # every row once
    # The same batches, so as little padding; the one with the longest row first.
    assert sorted(map(sorted, ours)) == sorted(map(sorted, theirs))
    assert ours[0] == theirs[0] and max(LENGTHS[i] for i in ours[0]) == max(LENGTHS)
    assert descending_share(theirs, LENGTHS) > 0.9
    assert descending_share(ours, LENGTHS) < 0.7
    # The same draws give the same order; the sampler draws a new one at each pass.
    assert shuffled_length_groups(LENGTHS, size, torch.Generator().manual_seed(5)) == [i for b in ours for i in b]
    sampler = ShuffledLengthGroupedSampler(size, LENGTHS, torch.Generator().manual_seed(5))
    first, second = list(sampler), list(sampler)
    assert len(sampler) == len(LENGTHS) and first != second and sorted(first) == sorted(second)


def test_a_short_last_batch_stays_last_so_that_a_dataloader_cuts_the_groups_where_they_were_made():
    lengths = LENGTHS[:1013]  # 50 batches of 20 and one of 13
    indices = shuffled_length_groups(lengths, 20, torch.Generator().manual_seed(1))
    theirs = cut(get_length_grouped_indices(lengths, 20, generator=torch.Generator().manual_seed(1)), 20)
    assert len(indices[-13:]) == 13 and sorted(indices[-13:]) == sorted(theirs[-1])
    assert sorted(map(sorted, cut(indices, 20))) == sorted(map(sorted, theirs))
    assert shuffled_length_groups([], 4) == [] and shuffled_length_groups([3, 1], 4) == [0, 1]
    with pytest.raises(ValueError, match="batch_size"):
        ShuffledLengthGroupedSampler(0, lengths)


def tiny_trainer(
    tmp_path, strategy: str, lengths: list[int] = LENGTHS, arguments: dict | None = None, **dataset_columns
) -> LengthGroupedTrainer:
    """A tiny classifier's trainer over rows of ``lengths`` tokens, in batches of 10 rows x 2 accumulated;
    ``arguments``: other `TrainingArguments`."""
    config = TransformerConfig(
        vocab_size=70, d_model=8, n_layer=1, num_attention_heads=2, intermediate_size=16, num_labels=2
    )
    rows = [list(range(3, 3 + length)) for length in lengths]
    dataset = Dataset.from_dict({"input_ids": rows, "labels": [i % 2 for i in range(len(rows))], **dataset_columns})
    arguments = TrainingArguments(
        output_dir=str(tmp_path),
        per_device_train_batch_size=10,
        gradient_accumulation_steps=2,
        train_sampling_strategy=strategy,
        use_cpu=True,
        report_to="none",
        **(arguments or {}),
    )
    model = TransformerForSequenceClassification(config)
    return LengthGroupedTrainer(model=model, args=arguments, train_dataset=dataset, data_collator=padded)


def padded(rows: list[dict]) -> dict[str, torch.Tensor]:
    width = max(len(row["input_ids"]) for row in rows)
    input_ids = torch.tensor([row["input_ids"] + [0] * (width - len(row["input_ids"])) for row in rows])
    return {
        "input_ids": input_ids,
        "attention_mask": input_ids.ne(0),
        "labels": torch.tensor([r["labels"] for r in rows]),
    }


def test_the_trainer_trains_on_length_groups_in_random_order(tmp_path):
    trainer = tiny_trainer(tmp_path, "group_by_length")
    sampler = trainer._get_train_sampler()
    # Grouped for the optimizer's whole step (10 rows x 2 accumulated), the lengths read from the token column.
    assert isinstance(sampler, ShuffledLengthGroupedSampler) and sampler.batch_size == 20
    assert sampler.lengths == LENGTHS
    set_seed(3)
    ours = cut(list(sampler), 20)
    set_seed(3)
    theirs = cut(list(LengthGroupedSampler(20, lengths=LENGTHS)), 20)
    assert sorted(map(sorted, ours)) == sorted(map(sorted, theirs))  # transformers' groups, drawn as it draws them
    assert descending_share(ours, LENGTHS) < 0.7 < 0.9 < descending_share(theirs, LENGTHS)
    # What the training loop reads: every row once, in batches of 10 rows of similar length.
    loader = trainer.get_train_dataloader()
    seen = [row for batch in loader for row in batch["input_ids"].tolist()]
    assert len(seen) == len(LENGTHS)
    padding = sum(row.count(0) for row in seen) / sum(map(len, seen))
    assert padding < 0.05


def test_the_evaluation_batches_are_transformers_own_with_the_lengths_read_from_arrow(tmp_path, monkeypatch):
    trainer = tiny_trainer(tmp_path, "group_by_length")
    dataset = trainer.train_dataset
    ours = trainer._get_eval_sampler(dataset)
    assert isinstance(ours, LengthGroupedSampler) and ours.lengths == LENGTHS
    # transformers' own sampler reads every row to measure it; the package's reads the column from Arrow instead.
    theirs = Trainer._get_eval_sampler(trainer, dataset)

    def row_by_row(rows):
        raise AssertionError("the evaluation rows were read one by one")

    monkeypatch.setattr(Dataset, "__iter__", row_by_row)
    assert list(trainer._get_eval_sampler(dataset)) == list(theirs)  # the same batches, drawn as transformers does
    assert isinstance(tiny_trainer(tmp_path, "random")._get_eval_sampler(dataset), SequentialSampler)


def test_a_length_column_is_used_and_other_strategies_are_transformers_own(tmp_path):
    given = [60 - length for length in LENGTHS]
    grouped = tiny_trainer(tmp_path, "group_by_length", length=given)
    assert grouped._get_train_sampler().lengths == given
    assert grouped._get_eval_sampler(grouped.train_dataset).lengths == given
    assert isinstance(tiny_trainer(tmp_path, "random")._get_train_sampler(), RandomSampler)


@pytest.mark.parametrize("script", ["pretrain_denoising", "train_classifier"])
def test_the_encoder_scripts_train_with_it(script):
    module = load_script(script)
    assert module.LengthGroupedTrainer is LengthGroupedTrainer
    assert "Trainer" not in vars(module)  # no other trainer to construct by mistake


def test_transformers_own_length_groups_are_drawn_as_transformers_draws_them_and_can_resume_a_pass():
    from hf_transformer.trainer import PassOrderSampler

    sampler = PassOrderSampler(LengthGroupedSampler(20, lengths=LENGTHS))
    assert len(sampler) == len(LENGTHS) and sampler.order is None
    set_seed(3)
    drawn = list(sampler)
    set_seed(3)
    assert drawn == list(LengthGroupedSampler(20, lengths=LENGTHS)) == sampler.order  # an uninterrupted run's order
    # A resumed pass takes the kept order whatever the random state, once; the pass after it draws anew.
    sampler.resume_order = list(drawn)
    set_seed(4)
    assert list(sampler) == drawn and sampler.resume_order is None
    assert list(sampler) != drawn
    sampler.resume_order = drawn[:-1]
    with pytest.raises(ValueError, match="does not hold each training row once"):
        list(sampler)


def test_the_translation_scripts_train_with_a_seq2seq_trainer_that_keeps_the_pass_order():
    from hf_transformer.trainer import OrderKeepingSeq2SeqTrainer
    from recipes.multi30k.rdrop import RDropSeq2SeqTrainer

    module = load_script("train_translation")
    assert module.OrderKeepingSeq2SeqTrainer is OrderKeepingSeq2SeqTrainer
    assert "Seq2SeqTrainer" not in vars(module)  # no other trainer to construct by mistake
    assert issubclass(RDropSeq2SeqTrainer, OrderKeepingSeq2SeqTrainer)


def test_a_checkpoint_holds_the_package_s_files_before_the_trainer_state_that_makes_it_resumable(tmp_path, monkeypatch):
    # transformers resumes from a checkpoint by its trainer_state.json, written last: a save cut short just before it
    # must leave no checkpoint that resumes without the run's settings and pass order (which a resumed run checks and
    # trains in).
    from transformers.trainer_callback import TrainerState

    from hf_transformer.trainer import PASS_ORDER_FILE
    from hf_transformer.training import RESUME_SETTINGS_FILE

    saving = dict(max_steps=3, save_strategy="steps", save_steps=2, logging_steps=1)
    trainer = tiny_trainer(tmp_path, "group_by_length", lengths=LENGTHS[:40], arguments=saving)  # two steps a pass
    stale = tmp_path / "checkpoint-2" / PASS_ORDER_FILE  # an earlier run's, in a folder this run saves at a pass's end
    stale.parent.mkdir()
    torch.save(torch.arange(40), stale)
    saved_states = []

    def cut_short(state, path):
        if Path(path).parent.name == "checkpoint-3":
            raise KeyboardInterrupt  # the process killed as it writes the last checkpoint's trainer state
        saved_states.append(path)
        return original(state, path)

    original = TrainerState.save_to_json
    monkeypatch.setattr(TrainerState, "save_to_json", cut_short)
    with pytest.raises(KeyboardInterrupt):
        trainer.train()
    end_of_pass, middle = tmp_path / "checkpoint-2", tmp_path / "checkpoint-3"
    assert [Path(path).parent for path in saved_states] == [end_of_pass]
    settings = json.loads((middle / RESUME_SETTINGS_FILE).read_text())
    assert settings["train_rows"] == 40 and settings["per_device_train_batch_size"] == 10
    assert json.loads((end_of_pass / RESUME_SETTINGS_FILE).read_text()) == settings
    assert not (middle / "trainer_state.json").exists() and (middle / "model.safetensors").is_file()
    # The pass in which step 3 fell, kept for the resumed run; none at the pass's end, the earlier run's removed.
    assert sorted(torch.load(middle / PASS_ORDER_FILE).tolist()) == list(range(40))
    assert not stale.exists()
