"""The `Trainer`s the package's training scripts use: transformers' own, with length-grouped training batches in random
order (`LengthGroupedTrainer`), and whose checkpoints saved in the middle of a pass over length-grouped batches resume
in that pass's order (both, and `OrderKeepingSeq2SeqTrainer`). Kept apart from ``training`` so that importing those
helpers does not import transformers' Trainer."""

from __future__ import annotations

import json
from pathlib import Path

import datasets
import torch
from torch.utils import data as torch_data
from transformers import Seq2SeqTrainer, Trainer
from transformers.trainer_pt_utils import LengthGroupedSampler
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR, get_last_checkpoint

from .data import ResumablePass, ShuffledLengthGroupedSampler, sequence_lengths
from .training import RESUME_SETTINGS_FILE, check_resumed_model, check_resumed_settings, resume_settings

__all__ = ["LengthGroupedTrainer", "OrderKeepingSeq2SeqTrainer", "PASS_ORDER_FILE", "PassOrderSampler"]

# The order of the training rows in the pass a checkpoint was saved in, kept in the checkpoint: a run resumed from it
# goes on in that order.
PASS_ORDER_FILE = "length_grouped_order.pt"


class PassOrderSampler(ResumablePass):
    """Another sampler's rows, able to resume a pass (`hf_transformer.data.ResumablePass`). Wraps transformers'
    `LengthGroupedSampler`, which draws each pass's order from the global random state as the pass starts: a run
    resumed in the middle of a pass draws it before the Trainer restores that state. An uninterrupted run draws
    exactly what the wrapped sampler draws."""

    def __init__(self, sampler: torch_data.Sampler):
        super().__init__()
        self.sampler = sampler

    def __len__(self) -> int:
        return len(self.sampler)

    def draw(self) -> list[int]:
        return [int(index) for index in self.sampler]


class _PassOrderMixin:
    """For a `Trainer` subclass: a checkpoint saved in the middle of a pass over length-grouped batches keeps that
    pass's order (``PASS_ORDER_FILE``), and a run resumed from it goes on in it, so that it trains as it would have
    without the interruption. Other samplers (transformers' random one is seeded per epoch) resume as they do. A run
    resumed with another model or other data settings than the checkpoint's is refused before it trains, each named
    (`hf_transformer.training.check_resumed_model`, `~hf_transformer.training.check_resumed_settings`)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._pass_order_sampler: ResumablePass | None = None
        self._resumed_order: list[int] | None = None
        self._resume_settings: dict | None = None

    def _run_resume_settings(self) -> dict:
        """This run's `hf_transformer.training.resume_settings`, computed once (the digest reads every training row)."""
        if self._resume_settings is None:
            self._resume_settings = resume_settings(self.args, self.train_dataset)
        return self._resume_settings

    def _save_checkpoint(self, model, trial):
        # The package's files go into the checkpoint before transformers' own, whose trainer_state.json comes last:
        # a save cut short leaves no checkpoint that transformers resumes from (it reads that file) without them.
        if self.args.should_save:
            # transformers' folder for it: a hyperparameter search's trial saves in a folder of its own.
            folder = Path(self._get_output_dir(trial=trial)) / f"{PREFIX_CHECKPOINT_DIR}-{self.state.global_step}"
            folder.mkdir(parents=True, exist_ok=True)
            settings = self._run_resume_settings()
            (folder / RESUME_SETTINGS_FILE).write_text(json.dumps(settings, indent=2) + "\n")
            self._save_pass_order(folder)
        super()._save_checkpoint(model, trial)

    def _save_pass_order(self, folder: Path) -> None:
        """Writes the order of the current pass into ``folder`` when the checkpoint falls in the middle of a pass (at
        a pass's end the resumed run begins a new one, drawn as the uninterrupted run draws it); removes an earlier
        run's otherwise, which the resumed run would take for this one's."""
        sampler, epoch, kept = self._pass_order_sampler, self.state.epoch, folder / PASS_ORDER_FILE
        if sampler is None or sampler.order is None or epoch is None or float(epoch).is_integer():
            kept.unlink(missing_ok=True)
            return
        torch.save(torch.tensor(sampler.order, dtype=torch.int64), kept)

    def train(self, resume_from_checkpoint: str | bool | None = None, **kwargs):
        folder = resume_from_checkpoint
        if folder is True:
            folder = get_last_checkpoint(self.args.output_dir)  # as transformers resolves it
        if isinstance(folder, str) and folder and hasattr(self.model, "config"):
            check_resumed_model(self.model.config, folder, type(self.model).__name__)
        if isinstance(folder, str) and folder:
            check_resumed_settings(self._run_resume_settings(), folder)
        saved = Path(folder) / PASS_ORDER_FILE if isinstance(folder, str) and folder else None
        self._resumed_order = torch.load(saved).tolist() if saved is not None and saved.is_file() else None
        return super().train(resume_from_checkpoint=resume_from_checkpoint, **kwargs)

    def _keeping_pass_order(self, sampler):
        """``sampler``, able to resume a pass where it is length-grouped; the resumed order handed to it."""
        if isinstance(sampler, LengthGroupedSampler):
            sampler = PassOrderSampler(sampler)
        if isinstance(sampler, ResumablePass):
            sampler.resume_order, self._resumed_order = self._resumed_order, None
            self._pass_order_sampler = sampler
        return sampler

    def _get_train_sampler(self, train_dataset=None):
        return self._keeping_pass_order(super()._get_train_sampler(train_dataset))


class OrderKeepingSeq2SeqTrainer(_PassOrderMixin, Seq2SeqTrainer):
    """transformers' `Seq2SeqTrainer`, its batches as transformers draws them, except that a checkpoint saved in the
    middle of a pass over length-grouped batches (``train_sampling_strategy="group_by_length"``) keeps that pass's
    order, and a run resumed from it trains as the uninterrupted run did (transformers draws the resumed pass anew,
    before it restores the random state)."""


class LengthGroupedTrainer(_PassOrderMixin, Trainer):
    """transformers' `Trainer`, except for the order of its training batches under
    ``train_sampling_strategy="group_by_length"``: rows of similar length, batched as transformers groups them, with
    the batches in random order (`hf_transformer.data.ShuffledLengthGroupedSampler`) where transformers yields
    each mega-batch's 50 batches from the longest rows to the shortest. The batches hold as little padding as before.
    The rows' lengths are read from Arrow (a ``length_column_name`` column where the dataset has one), not row by
    row, for the training rows and for the evaluation rows alike (transformers batches these by length too, in its own
    order, kept here). Other strategies, and datasets that are not a `datasets.Dataset`, are transformers' own.

    A checkpoint saved in the middle of a pass keeps that pass's order (``PASS_ORDER_FILE``), and a run resumed from
    it goes on in it: the run trains as it would have without the interruption."""

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
        return self._keeping_pass_order(ShuffledLengthGroupedSampler(batch_size, lengths))

    def _get_eval_sampler(self, eval_dataset):
        lengths = self._grouped_lengths(eval_dataset)
        if lengths is None:
            return super()._get_eval_sampler(eval_dataset)
        # transformers' evaluation sampler, seeded as it seeds it, given the lengths it would read row by row.
        seed = self.args.data_seed if self.args.data_seed is not None else self.args.seed
        return LengthGroupedSampler(
            self.args.eval_batch_size, lengths=lengths, generator=torch.Generator().manual_seed(seed)
        )
