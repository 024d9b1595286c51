"""The `Trainer` the package's training scripts use: transformers' own, with length-grouped training batches in random
order. Kept apart from ``training`` so that importing those helpers does not import transformers' Trainer."""

from __future__ import annotations

import datasets
from transformers import Trainer

from .data import ShuffledLengthGroupedSampler, sequence_lengths

__all__ = ["LengthGroupedTrainer"]


class LengthGroupedTrainer(Trainer):
    """transformers' `Trainer`, except for the order of its training batches under
    ``train_sampling_strategy="group_by_length"``: rows of similar length, batched as transformers groups them, with
    the batches in random order (`hf_transformer.data.ShuffledLengthGroupedSampler`) where transformers yields
    each mega-batch's 50 batches from the longest rows to the shortest. The batches hold as little padding as before.
    The rows' lengths are read from Arrow (a ``length_column_name`` column where the dataset has one), not row by
    row. Other strategies, and datasets that are not a `datasets.Dataset`, are transformers' own."""

    def _get_train_sampler(self, train_dataset=None):
        dataset = self.train_dataset if train_dataset is None else train_dataset
        if self.args.train_sampling_strategy != "group_by_length" or not isinstance(dataset, datasets.Dataset):
            return super()._get_train_sampler(train_dataset)
        if self.args.length_column_name in dataset.column_names:
            lengths = dataset[self.args.length_column_name]
        else:
            names = getattr(self.processing_class, "model_input_names", None) or ["input_ids"]
            lengths = sequence_lengths(dataset, (names[0],))
        batch_size = self.args.train_batch_size * self.args.gradient_accumulation_steps
        return ShuffledLengthGroupedSampler(batch_size, lengths)
