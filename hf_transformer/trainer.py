"""The `Trainer` the package's training scripts use: transformers' own, with length-grouped training batches in random
order. Kept apart from ``training`` so that importing those helpers does not import transformers' Trainer."""

from __future__ import annotations

from pathlib import Path

import datasets
import torch
from transformers import Trainer, TrainerCallback
from transformers.trainer_pt_utils import LengthGroupedSampler
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR, get_last_checkpoint

from .data import ShuffledLengthGroupedSampler, sequence_lengths

__all__ = ["LengthGroupedTrainer", "PASS_ORDER_FILE"]

# The order of the training rows in the pass a checkpoint was saved in, kept in the checkpoint: a run resumed from it
# goes on in that order.
PASS_ORDER_FILE = "length_grouped_order.pt"


class _KeepPassOrder(TrainerCallback):
    """Saves the sampler's order of the current pass into each checkpoint saved in the middle of a pass (at a pass's
    end the resumed run begins a new one, drawn as the uninterrupted run draws it)."""

    def __init__(self, trainer: LengthGroupedTrainer):
        self.trainer = trainer

    def on_save(self, args, state, control, **kwargs):
        sampler = self.trainer._length_grouped_sampler
        if sampler is None or sampler.order is None or not state.is_world_process_zero:
            return
        if state.epoch is None or float(state.epoch).is_integer():
            return
        folder = Path(args.output_dir) / f"{PREFIX_CHECKPOINT_DIR}-{state.global_step}"
        if folder.is_dir():
            torch.save(torch.tensor(sampler.order, dtype=torch.int64), folder / PASS_ORDER_FILE)


class LengthGroupedTrainer(Trainer):
    """transformers' `Trainer`, except for the order of its training batches under
    ``train_sampling_strategy="group_by_length"``: rows of similar length, batched as transformers groups them, with
    the batches in random order (`hf_transformer.data.ShuffledLengthGroupedSampler`) where transformers yields
    each mega-batch's 50 batches from the longest rows to the shortest. The batches hold as little padding as before.
    The rows' lengths are read from Arrow (a ``length_column_name`` column where the dataset has one), not row by
    row, for the training rows and for the evaluation rows alike (transformers batches these by length too, in its own
    order, kept here). Other strategies, and datasets that are not a `datasets.Dataset`, are transformers' own.

    A checkpoint saved in the middle of a pass keeps that pass's order (``PASS_ORDER_FILE``), and a run resumed from
    it goes on in it: the run trains as it would have without the interruption."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._length_grouped_sampler: ShuffledLengthGroupedSampler | None = None
        self._resumed_order: list[int] | None = None
        self.add_callback(_KeepPassOrder(self))

    def train(self, resume_from_checkpoint: str | bool | None = None, **kwargs):
        folder = resume_from_checkpoint
        if folder is True:
            folder = get_last_checkpoint(self.args.output_dir)  # as transformers resolves it
        saved = Path(folder) / PASS_ORDER_FILE if isinstance(folder, str) and folder else None
        self._resumed_order = torch.load(saved).tolist() if saved is not None and saved.is_file() else None
        return super().train(resume_from_checkpoint=resume_from_checkpoint, **kwargs)

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
        sampler = ShuffledLengthGroupedSampler(batch_size, lengths)
        sampler.resume_order, self._resumed_order = self._resumed_order, None
        self._length_grouped_sampler = sampler
        return sampler

    def _get_eval_sampler(self, eval_dataset):
        lengths = self._grouped_lengths(eval_dataset)
        if lengths is None:
            return super()._get_eval_sampler(eval_dataset)
        # transformers' evaluation sampler, seeded as it seeds it, given the lengths it would read row by row.
        seed = self.args.data_seed if self.args.data_seed is not None else self.args.seed
        return LengthGroupedSampler(
            self.args.eval_batch_size, lengths=lengths, generator=torch.Generator().manual_seed(seed)
        )
