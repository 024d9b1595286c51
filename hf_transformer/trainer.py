"""The `Trainer` the package's training scripts use: transformers' own, with length-grouped training batches in random
order. Kept apart from ``training`` so that importing those helpers does not import transformers' Trainer."""

from __future__ import annotations

import datasets
import torch
from transformers import Trainer
from transformers.trainer_pt_utils import LengthGroupedSampler

from .data import ShuffledLengthGroupedSampler, sequence_lengths

__all__ = ["LengthGroupedTrainer"]


class LengthGroupedTrainer(Trainer):
    """transformers' `Trainer`, except for the order of its training batches under
    ``train_sampling_strategy="group_by_length"``: rows of similar length, batched as transformers groups them, with
    the batches in random order (`hf_transformer.data.ShuffledLengthGroupedSampler`) where transformers yields
    each mega-batch's 50 batches from the longest rows to the shortest. The batches hold as little padding as before.
    The rows' lengths are read from Arrow (a ``length_column_name`` column where the dataset has one), not row by
    row, for the training rows and for the evaluation rows alike (transformers batches these by length too, in its own
    order, kept here). Other strategies, and datasets that are not a `datasets.Dataset`, are transformers' own."""

    def _grouped_lengths(self, dataset) -> list[int] | None:
        """The rows' lengths to group ``dataset`` by, or None where transformers' own sampler is to be used."""
        if self.args.train_sampling_strategy != "group_by_length" or not isinstance(dataset, datasets.Dataset):
            return None
        if self.args.length_column_name in dataset.column_names:
            return dataset[self.args.length_column_name]
        names = getattr(self.processing_class, "model_input_names", None) or ["input_ids"]
        return sequence_lengths(dataset, (names[0],))

    def _get_train_sampler(self, train_dataset=None):
        lengths = self._grouped_lengths(self.train_dataset if train_dataset is None else train_dataset)
        if lengths is None:
            return super()._get_train_sampler(train_dataset)
        batch_size = self.args.train_batch_size * self.args.gradient_accumulation_steps
        return ShuffledLengthGroupedSampler(batch_size, lengths)

    def _get_eval_sampler(self, eval_dataset):
        lengths = self._grouped_lengths(eval_dataset)
        if lengths is None:
            return super()._get_eval_sampler(eval_dataset)
        # transformers' evaluation sampler, seeded as it seeds it, given the lengths it would read row by row.
        seed = self.args.data_seed if self.args.data_seed is not None else self.args.seed
        return LengthGroupedSampler(
            self.args.eval_batch_size, lengths=lengths, generator=torch.Generator().manual_seed(seed)
        )
