"""Data pipelines: local CSV / TSV / JSON(L) files and line-aligned text files as `datasets`, tokenized and batched.

Classification data has `text` and `label` columns; translation data one `translation` column
`{source_lang: ..., target_lang: ...}`, as transformers' translation examples read it. Rows with an empty text or
side are dropped and counted in a log line, never silently. This module does not import the model code, so it
works on its own.
"""

from __future__ import annotations

import copy
import hashlib
import logging
import os
from collections.abc import Callable, Mapping, Sequence
from itertools import chain
from pathlib import Path
from typing import Any

import datasets
import numpy as np
import torch
from datasets import ClassLabel, Dataset, DatasetDict, Features, Translation, Value
from tokenizers import models as tokenizer_models
from torch.utils import data as torch_data
from transformers import (
    BatchEncoding,
    DataCollatorForLanguageModeling,
    DataCollatorWithPadding,
    PreTrainedTokenizerFast,
)

logger = logging.getLogger(__name__)

IGNORE_INDEX = -100  # label id that the cross-entropy loss skips; label padding uses it


# --------------------------------------------------------------------------------------------------
# Loading


def drop_rows(dataset: Dataset, keep: Callable[[dict[str, list]], list[bool]], what: str, where: str) -> Dataset:
    """Filter rows and say how many went: data is never dropped silently."""
    before = len(dataset)
    kept = dataset.filter(keep, batched=True, desc=f"dropping {what}")
    dropped = before - len(kept)
    if dropped:
        logger.warning("%s: dropped %d of %d rows with %s", where, dropped, before, what)
    return kept


def has_text(*columns: str) -> Callable[[dict[str, list]], list[bool]]:
    """A `drop_rows` test keeping the rows whose `columns` all hold some non-blank text."""

    def keep(batch: dict[str, list]) -> list[bool]:
        return [
            all(value is not None and str(value).strip() for value in values)
            for values in zip(*(batch[column] for column in columns))
        ]

    return keep


class MissingColumnError(KeyError, ValueError):
    """A dataset or data file without a column the caller named: a ``KeyError`` (a column looked up), and a
    ``ValueError`` (a refusal of the input, one line from a command; ``hf_transformer.commands``)."""

    def __str__(self) -> str:  # the message as written, not KeyError's quoted repr of it
        return str(self.args[0]) if self.args else ""


def not_utf8(path: str | os.PathLike, error: UnicodeDecodeError) -> str:
    """The message for a text file that is not UTF-8 (a Korean file saved as cp949 / EUC-KR, say)."""
    return (
        f"{path} is not UTF-8 text ({error.reason}): save it as UTF-8, e.g. "
        f"`iconv -f cp949 -t utf-8 {path} > utf8-{Path(path).name}` for a Korean file in cp949"
    )


def _unreadable(files: Mapping[str, list[str]], error: Exception) -> str:
    """What a data file that datasets could not read has wrong: the first file that is not UTF-8, else the parser's
    complaint (a broken JSON line, a row of too many fields), with the files read."""
    for path in chain.from_iterable(files.values()):
        with open(path, encoding="utf-8") as stream:
            try:
                while stream.read(1 << 24):
                    pass
            except UnicodeDecodeError as not_text:
                return not_utf8(path, not_text)
    for path in chain.from_iterable(files.values()):
        if str(path).endswith((".json", ".jsonl")) and (broken := _broken_json_line(path)):
            return broken
    cause = error.__cause__ or error.__context__ or error
    reason = (str(cause).strip().splitlines() or [type(cause).__name__])[0]
    return f"cannot read {', '.join(chain.from_iterable(files.values()))}: {reason}"


def _broken_json_line(path) -> str | None:
    """The first line of a JSON Lines file that is not JSON, named with the file ("FILE, line N: ..."); None for a
    file that reads (as JSON Lines, or as one JSON document)."""
    import json

    text = Path(path).read_text(encoding="utf-8")
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            json.loads(line)
        except json.JSONDecodeError as error:
            try:
                json.loads(text)  # one JSON document over several lines
            except json.JSONDecodeError:
                return f"cannot read {path}, line {number}: not JSON ({error.msg}, column {error.colno})"
            return None
    return None


def read_sentence_lines(path: str | os.PathLike) -> list[str]:
    """A file of one sentence per line (a corpus side, a system's output), split at "\n" only (a "\r\n" ending is
    one line end): a U+2028, a lone "\r" or another separator `str.splitlines` or universal newlines split at stays
    inside its sentence, so that the two sides of a parallel corpus stay aligned line for line."""
    if Path(path).is_dir():
        raise ValueError(f"{path} is a folder; give a file of one sentence per line")
    with open(path, encoding="utf-8", newline="") as stream:  # newline="": no "\r" read as a line end
        try:
            text = stream.read()
        except UnicodeDecodeError as error:
            raise ValueError(not_utf8(path, error)) from error
    return [line.removesuffix("\r") for line in text.removesuffix("\n").split("\n")] if text else []


def load_parallel_text(
    source_files: Mapping[str, str | os.PathLike],
    target_files: Mapping[str, str | os.PathLike],
    source_lang: str,
    target_lang: str,
) -> DatasetDict:
    """Line-aligned text files (one sentence per line, read by `read_sentence_lines`) as a `DatasetDict` with a
    `translation` column.

    `source_files` and `target_files` map a split name to a file; both must name the same splits.
    """
    if set(source_files) != set(target_files):
        raise ValueError(f"source splits {sorted(source_files)} and target splits {sorted(target_files)} differ")
    for path in [*source_files.values(), *target_files.values()]:
        if not Path(path).is_file():
            raise FileNotFoundError(f"parallel text file not found: {path}")
    return _pair_line_files(
        {k: str(v) for k, v in source_files.items()},
        {k: str(v) for k, v in target_files.items()},
        source_lang,
        target_lang,
    )


def _pair_line_files(
    source_paths: dict[str, str], target_paths: dict[str, str], source_lang: str, target_lang: str
) -> DatasetDict:
    # Each side's lines as `read_sentence_lines` reads them: split at "\n" only, so a literal tab inside a sentence
    # (train.de line 7366) stays text, and a lone "\r" inside one does not shift every later pair (datasets' text
    # loader reads with universal newlines).
    def sides(paths: dict[str, str]) -> DatasetDict:
        return DatasetDict(
            {split: Dataset.from_dict({"text": read_sentence_lines(path)}) for split, path in paths.items()}
        )

    sources, targets = sides(source_paths), sides(target_paths)
    features = Features({"translation": Translation(languages=[source_lang, target_lang])})

    def to_translation(batch: dict[str, list]) -> dict[str, list]:
        return {
            "translation": [
                {source_lang: source, target_lang: target} for source, target in zip(batch["source"], batch["target"])
            ]
        }

    paired = {}
    for split in source_paths:
        source, target = sources[split], targets[split]
        if len(source) != len(target):
            raise ValueError(
                f"{split}: {source_paths[split]} has {len(source)} lines but {target_paths[split]} has "
                f"{len(target)}; the two sides must be line-aligned"
            )
        both = datasets.concatenate_datasets(
            [source.rename_column("text", "source"), target.rename_column("text", "target")], axis=1
        )
        both = drop_rows(both, has_text("source", "target"), "an empty side", f"{split} ({source_paths[split]})")
        paired[split] = both.map(
            to_translation,
            batched=True,
            remove_columns=["source", "target"],
            features=features,
            desc="pairing lines",
        )
    return DatasetDict(paired)


_FORMATS = {
    ".csv": ("csv", {}),
    ".tsv": ("csv", {"delimiter": "\t"}),
    ".json": ("json", {}),
    ".jsonl": ("json", {}),
}


def first_rows(splits: DatasetDict, limits: dict[str, int | None]) -> DatasetDict:
    """Each split cut to its first ``limits[split]`` rows (``None``: all), for quick runs and smoke tests."""
    return DatasetDict(
        {
            name: split.select(range(min(limits[name], len(split)))) if limits.get(name) is not None else split
            for name, split in splits.items()
        }
    )


def load_local_dataset(
    data_files: str | os.PathLike | Sequence[str | os.PathLike] | Mapping[str, Any],
    *,
    text_column: str | None = None,
    label_column: str | None = None,
    source_column: str | None = None,
    target_column: str | None = None,
    cache_dir: str | os.PathLike | None = None,
) -> DatasetDict:
    """A local CSV / TSV / JSON / JSONL dataset for classification or for sequence-to-sequence.

    Classification: give `text_column` and `label_column`; the result has `text` and `label` columns,
    string labels become a `ClassLabel` with the same ids in every split. Text alone (pretraining): give
    `text_column` only; the result has a `text` column. Seq2seq: give `source_column` and `target_column`; the
    result has a `translation` column keyed by those two names.
    `data_files` is a path, a list of paths (one `train` split) or a dict {split: path(s)}.
    Rows with an empty text, label or side are dropped and counted in a log line.
    """
    classification = label_column is not None
    seq2seq = source_column is not None or target_column is not None
    if (
        seq2seq == (text_column is not None)
        or (seq2seq and None in (source_column, target_column))
        or (classification and text_column is None)
    ):
        raise ValueError(
            "give either text_column (and label_column, for classification) or source_column and target_column "
            "(seq2seq)"
        )
    if (seq2seq and source_column == target_column) or (classification and label_column == text_column):
        named = (
            (source_column, "source_column", "target_column")
            if seq2seq
            else (text_column, "text_column", "label_column")
        )
        raise ValueError(f"{named[1]} and {named[2]} name one column, {named[0]!r}: give two different columns")
    files = data_files if isinstance(data_files, Mapping) else {"train": data_files}
    files = {
        split: [str(p) for p in ([paths] if isinstance(paths, (str, os.PathLike)) else paths)]
        for split, paths in files.items()
    }
    suffixes = {Path(p).suffix.lower() for paths in files.values() for p in paths}
    if len(suffixes) != 1 or not suffixes <= set(_FORMATS):
        raise ValueError(f"data files must all be one of {sorted(_FORMATS)}; got suffixes {sorted(suffixes)}")
    missing = [p for paths in files.values() for p in paths if not Path(p).is_file()]
    if missing:
        raise FileNotFoundError(f"data file(s) not found: {missing}")
    builder, options = _FORMATS[suffixes.pop()]
    if builder == "csv":
        options = {**options, "keep_default_na": False}  # "NA" is text; empty cells become "" and are dropped
    empty = [p for paths in files.values() for p in paths if Path(p).stat().st_size == 0]
    if empty:
        raise ValueError(f"data file(s) with nothing in them: {empty}")
    try:
        raw = datasets.load_dataset(builder, data_files=files, cache_dir=cache_dir, **options)
    except datasets.exceptions.DatasetGenerationError as error:  # datasets' wrapper of its reader's complaint
        raise ValueError(_unreadable(files, error)) from error

    wanted = [source_column, target_column] if seq2seq else [c for c in (text_column, label_column) if c is not None]
    for split, dataset in raw.items():
        absent = [column for column in wanted if column not in dataset.column_names]
        if absent:
            columns = dataset.column_names
            raise MissingColumnError(f"{files[split]} has no column(s) {absent}; its columns are {columns}")

    result = {}
    for split, dataset in raw.items():
        where = f"{split} ({', '.join(files[split])})"
        dataset = drop_rows(dataset, has_text(*wanted), "an empty or missing value", where)
        if not len(dataset):
            raise ValueError(f"{where}: no row with a value in each of the columns {wanted}")
        if not seq2seq:
            dataset = dataset.select_columns(wanted).rename_columns(
                {old: new for old, new in zip(wanted, ["text", "label"]) if old != new}
            )
        else:
            features = Features({"translation": Translation(languages=[source_column, target_column])})
            dataset = dataset.map(
                lambda batch: {
                    "translation": [
                        {source_column: s, target_column: t} for s, t in zip(batch[source_column], batch[target_column])
                    ]
                },
                batched=True,
                remove_columns=dataset.column_names,
                features=features,
                desc="pairing columns",
            )
        result[split] = dataset
    dataset_dict = DatasetDict(result)
    if classification:
        dataset_dict = _encode_labels(dataset_dict)
    return dataset_dict


def _encode_labels(dataset_dict: DatasetDict) -> DatasetDict:
    """String labels become one ClassLabel shared by all splits (per-split encoding could disagree). Integer labels
    are class ids: together they must be 0, 1, ... with none missing, or the model would have classes no row has."""
    label_types = {}
    for split, dataset in dataset_dict.items():
        dtype = getattr(dataset.features["label"], "dtype", None)
        if dtype is None:  # datasets' Json feature: the column mixes JSON types
            raise ValueError(
                f'the {split} rows\' labels mix kinds of values (such as 1 and "1"); write every label as a '
                "name (a string) or every label as a class id (an integer)"
            )
        label_types[split] = dtype
    labels = {split: set(dataset.unique("label")) for split, dataset in dataset_dict.items()}
    if "train" in labels:
        taught = labels["train"]
        for split, found in labels.items():
            unknown = sorted(found - taught, key=str)
            if unknown:  # a typo ("Positive", "negativ") would become a class of its own, scored but never learnt
                raise ValueError(
                    f"the {split} rows have labels no training row has: {_some(unknown)} (the training rows' labels: "
                    f"{_some(sorted(taught, key=str))})"
                )
    if set(label_types.values()) <= {"int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"}:
        ids = sorted(set().union(*labels.values()))
        if ids and ids != list(range(ids[-1] + 1)):
            missing = sorted(set(range(max(ids[-1] + 1, 0))) - set(ids))
            raise ValueError(
                f"integer labels are class ids 0, 1, ...; these rows have {_some(ids)}"
                + (f", none has {_some(missing)}" if missing else "")
                + ". Number the classes from 0, or write the labels as names (strings)."
            )
        return dataset_dict
    names = sorted({str(label) for found in labels.values() for label in found})
    dataset_dict = dataset_dict.cast_column("label", Value("string"))
    return dataset_dict.cast_column("label", ClassLabel(names=names))


def _some(values: list) -> str:
    """The first few of sorted values, for a message."""
    return ", ".join(map(str, values[:6])) + (", ..." if len(values) > 6 else "")


# --------------------------------------------------------------------------------------------------
# Tokenizing and batching


def resolve_max_length(tokenizer, max_length: int | None) -> int:
    """`max_length`, else the tokenizer's `model_max_length`; an error when neither is a real limit."""
    if max_length is None:
        max_length = getattr(tokenizer, "model_max_length", None)
        if max_length is None or max_length > 1_000_000:  # transformers' "no limit" sentinel is 1e30
            raise ValueError("pass max_length: the tokenizer has no model_max_length to truncate to")
    if max_length < 2:
        raise ValueError(f"max_length must leave room for a token and [EOS], not {max_length}")
    return int(max_length)


class TokenizerByContent:
    """A tokenizer held for a ``Dataset.map`` function, pickled as its class and saved state.

    ``datasets`` fingerprints a map by pickling its function, and pickles a tokenizer it meets there by its
    attributes, its own ``__getstate__`` bypassed: a tokenizer whose backend runs a step written in Python (the
    MeCab-ko cut of ``MorphemeTokenizerFast``) cannot be pickled so, and the map gets a random fingerprint, never
    reused, each run writing its result to the cache again. Held in this, the tokenizer is pickled from its saved
    form, so a map's fingerprint follows the tokenizer's content (and the function's code and other settings, as
    ``datasets`` hashes them), and the map's worker processes rebuild it from that form."""

    __slots__ = ("tokenizer",)

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer

    def __reduce__(self):
        return _rebuilt_tokenizer_holder, (type(self.tokenizer), _saved_state(self.tokenizer))


def _saved_state(tokenizer) -> dict:
    """What pickling ``tokenizer`` keeps (its ``__getstate__``, the morpheme tokenizer's saved backend), with the
    backend's truncation and padding left out (each call sets its own, which would change the fingerprint) and no
    per-call caches."""
    from tokenizers import Tokenizer

    state = dict(tokenizer.__getstate__())
    backend = state.get("_tokenizer")
    if isinstance(backend, Tokenizer):
        backend = Tokenizer.from_str(backend.to_str())
        backend.no_truncation()
        backend.no_padding()
        state["_tokenizer"] = backend
    for name in ("cache", "deprecation_warnings"):
        if isinstance(state.get(name), dict):
            state[name] = {}
    return state


def _rebuilt_tokenizer_holder(cls, state: dict) -> TokenizerByContent:
    tokenizer = cls.__new__(cls)
    if hasattr(tokenizer, "__setstate__"):
        tokenizer.__setstate__(state)
    else:
        tokenizer.__dict__.update(state)
    return TokenizerByContent(tokenizer)


def tokenize_classification(
    dataset: Dataset | DatasetDict,
    tokenizer,
    *,
    max_length: int | None = None,
    text_column: str = "text",
    label_column: str = "label",
    num_proc: int | None = None,
) -> Dataset | DatasetDict:
    """`input_ids` and `attention_mask` (truncated to `max_length`, unpadded) and the label column.

    Batched `Dataset.map`, cached by `datasets` for file-backed data. Padding happens per batch in
    the collator (`classification_collator`). A dataset without `label_column` (unlabelled text) works too.
    """
    if isinstance(dataset, DatasetDict):
        return DatasetDict(
            {
                split: tokenize_classification(
                    part,
                    tokenizer,
                    max_length=max_length,
                    text_column=text_column,
                    label_column=label_column,
                    num_proc=num_proc,
                )
                for split, part in dataset.items()
            }
        )
    max_length = resolve_max_length(tokenizer, max_length)
    if text_column not in dataset.column_names:
        raise MissingColumnError(f"the dataset has no column {text_column!r}; its columns are {dataset.column_names}")
    has_label = label_column in dataset.column_names
    held = TokenizerByContent(tokenizer)  # the map's fingerprint follows the tokenizer's content

    def encode(batch: dict[str, list]) -> dict[str, list]:
        encoded = held.tokenizer(batch[text_column], truncation=True, max_length=max_length)
        if has_label:
            # Passed through rather than kept: datasets casts a kept column of a filtered or split
            # dataset one row at a time, which made tokenizing a 150,000-row dataset 3x slower.
            encoded[label_column] = batch[label_column]
        return encoded

    tokenized = dataset.map(
        encode, batched=True, remove_columns=dataset.column_names, num_proc=num_proc, desc="tokenizing"
    )
    if has_label and tokenized.features[label_column] != dataset.features[label_column]:
        tokenized = tokenized.cast_column(label_column, dataset.features[label_column])  # keeps the ClassLabel
    return tokenized


def tokenize_translation(
    dataset: Dataset | DatasetDict,
    tokenizer,
    *,
    source_lang: str,
    target_lang: str,
    max_source_length: int | None = None,
    max_target_length: int | None = None,
    num_proc: int | None = None,
) -> Dataset | DatasetDict:
    """`input_ids`, `attention_mask` from the source side and `labels` from the target side.

    Both end with `[EOS]`; the target goes through `text_target=`. The decoder inputs come from the
    labels (shifted right behind `decoder_start_token_id`) in the model or the collator.
    """
    if isinstance(dataset, DatasetDict):
        return DatasetDict(
            {
                split: tokenize_translation(
                    part,
                    tokenizer,
                    source_lang=source_lang,
                    target_lang=target_lang,
                    max_source_length=max_source_length,
                    max_target_length=max_target_length,
                    num_proc=num_proc,
                )
                for split, part in dataset.items()
            }
        )
    max_source_length = resolve_max_length(tokenizer, max_source_length)
    max_target_length = resolve_max_length(tokenizer, max_target_length)
    _check_languages(dataset, source_lang, target_lang)
    held = TokenizerByContent(tokenizer)  # the map's fingerprint follows the tokenizer's content

    def encode(batch: dict[str, list]) -> dict[str, list]:
        pairs = batch["translation"]
        sources, targets = [pair[source_lang] for pair in pairs], [pair[target_lang] for pair in pairs]
        return _encode_pairs(held.tokenizer, sources, targets, max_source_length, max_target_length)

    return dataset.map(encode, batched=True, remove_columns=dataset.column_names, num_proc=num_proc, desc="tokenizing")


class SubwordSampledTranslation(torch_data.Dataset):
    """Training pairs tokenized anew each time a row is drawn, with BPE-dropout (Provilkov et al., 2020).

    Each merge of the BPE tokenizer is skipped with probability `dropout` at every encoding, so one
    sentence is seen under many segmentations over the epochs: a regulariser for small corpora. The rows
    have the keys `tokenize_translation` writes (`input_ids`, `attention_mask`, `labels`), for the same
    collator. The given tokenizer is left deterministic (a copy samples), so the saved one segments as
    usual at inference. The sampling draws from the tokenizers library's own random source, so a run
    with dropout is not repeatable bit for bit.
    """

    def __init__(
        self,
        dataset: Dataset,
        tokenizer,
        *,
        source_lang: str,
        target_lang: str,
        dropout: float,
        max_source_length: int | None = None,
        max_target_length: int | None = None,
    ):
        if not 0.0 < dropout < 1.0:
            raise ValueError(f"subword dropout is a probability in (0, 1), not {dropout}")
        backend = getattr(tokenizer, "backend_tokenizer", None)
        if backend is None or not isinstance(backend.model, tokenizer_models.BPE):
            kind = type(backend.model).__name__ if backend is not None else f"a slow {type(tokenizer).__name__}"
            raise ValueError(f"subword dropout needs a fast BPE tokenizer (merges to skip); this one is {kind}")
        _check_languages(dataset, source_lang, target_lang)
        pairs = dataset["translation"]
        self.sources = [pair[source_lang] for pair in pairs]
        self.targets = [pair[target_lang] for pair in pairs]
        self.max_source_length = resolve_max_length(tokenizer, max_source_length)
        self.max_target_length = resolve_max_length(tokenizer, max_target_length)
        self.dropout = dropout
        self.tokenizer = copy.deepcopy(tokenizer)
        self.tokenizer.backend_tokenizer.model.dropout = dropout

    def __len__(self) -> int:
        return len(self.sources)

    def rows_digest(self) -> str:
        """A sha256 of what the rows are drawn from (the pairs, the dropout, the lengths they are cut to), for
        `hf_transformer.training.resume_settings`: the sampled token ids differ at every draw."""
        digest = hashlib.sha256(repr((self.dropout, self.max_source_length, self.max_target_length)).encode())
        for side in (self.sources, self.targets):
            digest.update("\0".join(side).encode() + b"\1")
        return digest.hexdigest()

    def __getitem__(self, index: int) -> dict[str, list[int]]:
        return dict(
            _encode_pairs(
                self.tokenizer,
                self.sources[index],
                self.targets[index],
                self.max_source_length,
                self.max_target_length,
            )
        )


class BidirectionalTranslation(torch_data.Dataset):
    """The pairs of one corpus in both directions, for bidirectional training (BiT, Ding et al., 2021).

    While `mixing` is on, each epoch draws every row i as that pair source -> target or, with probability 1/2,
    target -> source (the second dataset holds the same rows with the sides swapped); switched off, every draw is
    source -> target. One model then first learns both directions of a shared vocabulary, which aligns the two
    languages' pieces, and is tuned on its own direction after: `hf_transformer.training.BidirectionalEpochs`
    switches it off after the first epochs and tells it the `epoch`. An epoch stays one draw per pair, so the
    training costs the steps it did. Which rows an epoch reverses follows from `seed` and the epoch alone, not from
    a random state that reading advances: a run resumed from a checkpoint in the middle of an epoch, a DataLoader
    worker, and a sampler that reads the rows' lengths first all see the directions the uninterrupted run trained.
    """

    def __init__(self, forward: torch_data.Dataset, backward: torch_data.Dataset, *, seed: int = 0):
        if len(forward) != len(backward):
            raise ValueError(
                f"the two directions must hold the same pairs: {len(forward)} rows forward, {len(backward)} backward"
            )
        if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
            raise ValueError(f"seed must be an integer of 0 or more, got {seed!r}")
        self.forward = forward
        self.backward = backward
        self.seed = seed
        self.mixing = True
        self.epoch = 0
        self._reversed: tuple[int, np.ndarray] | None = None  # (epoch, the rows that epoch draws target -> source)

    def __len__(self) -> int:
        return len(self.forward)

    def reversed_rows(self) -> np.ndarray:
        """Booleans, one per row: which rows the current `epoch` draws target -> source while mixing."""
        if self._reversed is None or self._reversed[0] != self.epoch:
            draws = np.random.default_rng([self.seed, self.epoch]).random(len(self))
            self._reversed = (self.epoch, draws < 0.5)
        return self._reversed[1]

    def __getitem__(self, index: int) -> dict[str, list[int]]:
        if self.mixing and self.reversed_rows()[index]:
            return dict(self.backward[index])
        return dict(self.forward[index])


def _encode_pairs(tokenizer, sources, targets, max_source_length: int, max_target_length: int):
    """Sources as `input_ids` / `attention_mask`, targets (through `text_target=`) as `labels`, each truncated;
    one pair (strings) or a batch (lists of strings)."""
    encoded = tokenizer(sources, truncation=True, max_length=max_source_length)
    encoded["labels"] = tokenizer(text_target=targets, truncation=True, max_length=max_target_length)["input_ids"]
    return encoded


def _check_languages(dataset: Dataset, source_lang: str, target_lang: str) -> None:
    """A clear error when the dataset has no `translation` column holding both languages."""
    if "translation" not in dataset.column_names:
        raise MissingColumnError(f"the dataset has no 'translation' column; its columns are {dataset.column_names}")
    languages = dataset.features["translation"]
    languages = getattr(languages, "languages", None) or list(languages)
    absent = [lang for lang in (source_lang, target_lang) if lang not in languages]
    if absent:
        raise MissingColumnError(f"the translation column has no language(s) {absent}; it has {list(languages)}")


# Padding a batch: `tokenizer.pad`'s result, built in torch. `tokenizer.pad` walks every row and value in Python and
# took half of a masked-token training batch's collation; `pad_token_rows` gives the same tensors for the rows a
# tokenizer writes (lists of ids, an int label), and leaves anything else to `tokenizer.pad`.
_TOKEN_COLUMNS = ("input_ids", "attention_mask", "token_type_ids", "special_tokens_mask")
_LABEL_COLUMNS = ("label", "label_ids")


def pad_token_rows(tokenizer, rows: Sequence[Mapping[str, Any]], *, pad_to_multiple_of: int | None = None):
    """`tokenizer.pad(rows, return_tensors="pt")` (padding to the longest row, on the tokenizer's side) as a
    `BatchEncoding` of int64 tensors, or None where the rows hold what this does not pad itself: columns other than
    the tokenizer's (`_TOKEN_COLUMNS`) and an int label, values that are not lists of ints, rows that differ in
    their columns or a row whose columns differ in length. Padding values are `tokenizer.pad`'s: the pad id, 0 in
    `attention_mask` (made from the lengths where the rows have none and the tokenizer's inputs name it), the
    tokenizer's pad type id, 1 in `special_tokens_mask`."""
    if not rows or not all(isinstance(row, Mapping) for row in rows):
        return None
    columns = list(rows[0])
    if (
        "input_ids" not in columns
        or any(column not in _TOKEN_COLUMNS + _LABEL_COLUMNS for column in columns)
        or any(len(row) != len(columns) or any(column not in row for column in columns) for row in rows)
        or tokenizer.pad_token_id is None
        or tokenizer.padding_side not in ("right", "left")
    ):
        return None
    sequences = [column for column in columns if column in _TOKEN_COLUMNS]
    if not all(type(rows[0][column]) is list for column in sequences):
        return None
    lengths = torch.tensor([len(row["input_ids"]) for row in rows])
    longest = int(lengths.max())
    if pad_to_multiple_of:
        longest = -(-longest // pad_to_multiple_of) * pad_to_multiple_of
    positions = torch.arange(longest)
    if tokenizer.padding_side == "right":
        real = positions < lengths[:, None]  # (B, S)
    else:
        real = positions >= (longest - lengths)[:, None]
    padding_values = {
        "input_ids": tokenizer.pad_token_id,
        "attention_mask": 0,
        "token_type_ids": tokenizer.pad_token_type_id,
        "special_tokens_mask": 1,
    }
    batch = {}
    for column in sequences:
        if any(len(row[column]) != len(row["input_ids"]) for row in rows):
            return None
        values = list(chain.from_iterable(row[column] for row in rows))
        if not all(type(value) is int for value in values):
            return None
        padded = torch.full((len(rows), longest), padding_values[column], dtype=torch.long)
        padded[real] = torch.tensor(values, dtype=torch.long)
        batch[column] = padded
    if "attention_mask" not in batch and "attention_mask" in tokenizer.model_input_names:
        batch["attention_mask"] = real.long()
    for column in columns:
        if column in _LABEL_COLUMNS:
            labels = [row[column] for row in rows]
            if not all(type(label) is int for label in labels):
                return None
            batch[column] = torch.tensor(labels)
    return BatchEncoding(batch)


class ClassificationCollator(DataCollatorWithPadding):
    """`DataCollatorWithPadding` padding through `pad_token_rows` where it can; `label` becomes `labels`."""

    def __call__(self, features: list[dict[str, Any]]) -> dict[str, Any]:
        batch = None
        if self.padding in (True, "longest") and self.max_length is None and self.return_tensors == "pt":
            batch = pad_token_rows(self.tokenizer, features, pad_to_multiple_of=self.pad_to_multiple_of)
        if batch is None:
            return super().__call__(features)
        for column in _LABEL_COLUMNS:
            if column in batch:
                batch["labels"] = batch.pop(column)
        return batch


def classification_collator(tokenizer, *, pad_to_multiple_of: int | None = None) -> ClassificationCollator:
    """Pads each batch to its longest row; `label` becomes `labels`."""
    return ClassificationCollator(tokenizer, pad_to_multiple_of=pad_to_multiple_of, return_tensors="pt")


def special_token_positions(tokenizer, input_ids: torch.Tensor) -> torch.Tensor:
    """(B, S) bool: which ids are special tokens, as `tokenizer.get_special_tokens_mask(row,
    already_has_special_tokens=True)` says row by row; for a `tokenizers`-backed tokenizer, which answers by
    membership in `all_special_ids`, in one `torch.isin`."""
    if type(tokenizer).get_special_tokens_mask is PreTrainedTokenizerFast.get_special_tokens_mask:
        return torch.isin(input_ids, torch.tensor(tokenizer.all_special_ids, dtype=input_ids.dtype))
    rows = [tokenizer.get_special_tokens_mask(row, already_has_special_tokens=True) for row in input_ids.tolist()]
    return torch.tensor(rows, dtype=torch.bool)


class MaskedTokenCollator(DataCollatorForLanguageModeling):
    """Masked-token batches (`DataCollatorForLanguageModeling`: of each row's non-special tokens, a share
    ``mlm_probability`` chosen; of those 80% become the mask token, 10% a random token, 10% stay; `labels` holds
    them, -100 elsewhere), padded by `pad_token_rows` and the special tokens found by `special_token_positions`
    where they can: the batch, and the random numbers drawn for it, are transformers' own."""

    def torch_call(self, examples):
        batch = None
        if self.mlm and self.seed is None and not self.whole_word_mask:
            batch = pad_token_rows(self.tokenizer, examples, pad_to_multiple_of=self.pad_to_multiple_of)
        if batch is None:
            return super().torch_call(examples)
        special = batch.pop("special_tokens_mask", None)
        if special is None:
            special = special_token_positions(self.tokenizer, batch["input_ids"])
        batch["input_ids"], batch["labels"] = self.torch_mask_tokens(batch["input_ids"], special_tokens_mask=special)
        return batch


def masked_token_collator(
    tokenizer, *, mlm_probability: float = 0.15, pad_to_multiple_of: int | None = None
) -> MaskedTokenCollator:
    """Batches for masked-token training (`MaskedTokenCollator`)."""
    if not 0.0 < mlm_probability <= 1.0:  # 0 would predict no token: a training with zero loss that learns nothing
        raise ValueError(f"mlm_probability is the share of tokens to predict, in (0, 1]; got {mlm_probability}")
    return MaskedTokenCollator(tokenizer, mlm_probability=mlm_probability, pad_to_multiple_of=pad_to_multiple_of)


def seq2seq_collator(tokenizer, model=None, *, pad_to_multiple_of: int | None = None):
    """Pads inputs with the pad id and labels with -100 (`DataCollatorForSeq2Seq`).

    With a `model` that has `prepare_decoder_input_ids_from_labels`, the batch also gets
    `decoder_input_ids`; without one the model derives them from `labels` itself.
    """
    from transformers import DataCollatorForSeq2Seq

    return DataCollatorForSeq2Seq(
        tokenizer,
        model=model,
        label_pad_token_id=IGNORE_INDEX,
        pad_to_multiple_of=pad_to_multiple_of,
        return_tensors="pt",
    )


def sequence_lengths(dataset: Dataset, columns: Sequence[str] = ("input_ids", "labels")) -> list[int]:
    """Per row, the longest of the given token columns (read from Arrow, not row by row)."""
    import pyarrow.compute as pc

    present = [column for column in columns if column in dataset.column_names]
    if not present:
        raise MissingColumnError(f"the dataset has none of the columns {list(columns)}; tokenize it first")
    table = dataset.with_format("arrow")[:]
    lengths = [pc.list_value_length(table.column(column)) for column in present]
    longest = lengths[0]
    for other in lengths[1:]:
        longest = pc.max_element_wise(longest, other)
    return longest.to_pylist()


def rows_by_length(dataset: Dataset, columns: Sequence[str] = ("input_ids", "labels")) -> list[int]:
    """The rows' indices ordered by `sequence_lengths` (ties in the dataset's order)."""
    lengths = sequence_lengths(dataset, columns)
    return sorted(range(len(lengths)), key=lengths.__getitem__)


def sorted_by_length(dataset: Dataset, column: str = "input_ids") -> Dataset:
    """The rows ordered by the length of ``column`` (ties in their order), written out as a table of their own. Batches
    read in order then hold rows of about one length and little padding: for evaluation, whose metrics do not depend
    on the rows' order (transformers' `Trainer` evaluates in the dataset's order, padding each batch to its longest
    row)."""
    return dataset.select(rows_by_length(dataset, (column,))).flatten_indices()


def shuffled_length_groups(
    lengths: Sequence[int], batch_size: int, generator: torch.Generator | None = None
) -> list[int]:
    """Row indices whose every `batch_size` consecutive ones are rows of similar length, the batches in random order.

    The batches are those of transformers' length grouping (`get_length_grouped_indices`: the rows shuffled, cut
    into mega-batches of up to 50 batches, each sorted by length), but not their order: transformers yields each
    mega-batch's batches longest first, so a training run sweeps from long rows to short ones every 50 steps, and
    the optimizer's running averages follow the cycle (a batch of short rows holds few predicted tokens and a large
    gradient). The batch with the longest row stays first, so that memory problems show at once, and a short last
    batch stays last, so that a `DataLoader` cutting the indices into batches of `batch_size` cuts them where they
    were grouped. The draws come from ``generator`` (else torch's global generator, which `set_seed` seeds)."""
    from transformers.trainer_pt_utils import get_length_grouped_indices

    if not len(lengths):
        return []
    indices = get_length_grouped_indices(lengths, batch_size, generator=generator)
    batches = [indices[start : start + batch_size] for start in range(0, len(indices), batch_size)]
    tail = [batches.pop()] if len(batches) > 1 and len(batches[-1]) < batch_size else []
    order = torch.randperm(len(batches) - 1, generator=generator).tolist()
    batches = batches[:1] + [batches[1 + position] for position in order] + tail
    return [index for batch in batches for index in batch]


def places_in_order(items: Sequence, within: Sequence, what: str) -> list[int]:
    """The place in ``within`` of each of ``items``, which are ``within``'s entries in their order less some dropped
    ones (rows of a file less those dropped as empty): each is the first equal entry after the one before's.
    ``ValueError`` naming ``what`` where an item is not found so."""
    places, place = [], 0
    for index, item in enumerate(items):
        while place < len(within) and within[place] != item:
            place += 1
        if place == len(within):
            raise ValueError(f"{what}: row {index} ({str(item)[:40]!r}) is not among its rows in order")
        places.append(place)
        place += 1
    return places


class ResumablePass(torch_data.Sampler):
    """A training sampler whose last pass's order is readable (``order``) and whose next pass can be given
    (``resume_order``, taken once, then new orders are drawn again by ``draw``): a run resumed in the middle of a pass
    goes on in the order that pass began with (`hf_transformer.trainer` keeps it in its checkpoints), where a new
    order, drawn from the random state before the Trainer restores it, would train some rows twice and others not at
    all."""

    def __init__(self):
        self.order: list[int] | None = None
        self.resume_order: list[int] | None = None

    def draw(self) -> list[int]:
        """A new pass's order."""
        raise NotImplementedError

    def __iter__(self):
        if self.resume_order is not None:
            if sorted(self.resume_order) != list(range(len(self))):
                raise ValueError("the resumed pass's order does not hold each training row once: other rows?")
            self.order, self.resume_order = self.resume_order, None
        else:
            self.order = self.draw()
        return iter(self.order)


class ShuffledLengthGroupedSampler(ResumablePass):
    """Training rows in length groups whose batches come in random order (`shuffled_length_groups`); a new order at
    every pass, which a resumed run can give instead (`ResumablePass`). ``lengths``: each row's length in tokens
    (`sequence_lengths`)."""

    def __init__(self, batch_size: int, lengths: Sequence[int], generator: torch.Generator | None = None):
        if batch_size < 1:
            raise ValueError(f"batch_size must be at least 1, not {batch_size}")
        super().__init__()
        self.batch_size, self.lengths, self.generator = batch_size, list(lengths), generator

    def __len__(self) -> int:
        return len(self.lengths)

    def draw(self) -> list[int]:
        return shuffled_length_groups(self.lengths, self.batch_size, self.generator)


def length_grouped_dataloader(
    dataset: Dataset, collator, batch_size: int, *, shuffle: bool = True, seed: int = 0, **dataloader_kwargs
):
    """A `DataLoader` whose batches hold rows of similar length, so little of each batch is padding.

    Training (`shuffle=True`) uses `ShuffledLengthGroupedSampler`: random mega-batches sorted by length inside,
    their batches in random order, the longest batch first so memory problems show at once. Evaluation
    (`shuffle=False`) sorts all rows by length. With the package's `LengthGroupedTrainer`, set
    `TrainingArguments(train_sampling_strategy="group_by_length")` instead.
    """
    from torch.utils.data import DataLoader

    if shuffle:
        generator = torch.Generator().manual_seed(seed)
        sampler = ShuffledLengthGroupedSampler(batch_size, sequence_lengths(dataset), generator=generator)
    else:
        sampler = rows_by_length(dataset)
    return DataLoader(dataset, batch_size=batch_size, sampler=sampler, collate_fn=collator, **dataloader_kwargs)


__all__ = [
    "IGNORE_INDEX",
    "drop_rows",
    "has_text",
    "read_sentence_lines",
    "load_parallel_text",
    "load_local_dataset",
    "MissingColumnError",
    "first_rows",
    "resolve_max_length",
    "tokenize_classification",
    "tokenize_translation",
    "TokenizerByContent",
    "SubwordSampledTranslation",
    "BidirectionalTranslation",
    "pad_token_rows",
    "ClassificationCollator",
    "classification_collator",
    "special_token_positions",
    "MaskedTokenCollator",
    "masked_token_collator",
    "seq2seq_collator",
    "sequence_lengths",
    "rows_by_length",
    "sorted_by_length",
    "shuffled_length_groups",
    "places_in_order",
    "ResumablePass",
    "ShuffledLengthGroupedSampler",
    "length_grouped_dataloader",
]
