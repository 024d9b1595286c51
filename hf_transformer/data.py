"""Data pipelines: NSMC, Multi30k and local CSV / TSV / JSON(L) files as `datasets`, tokenized and batched.

Where the corpora live: the `data_dir` argument, else the environment variable `HF_TRANSFORMER_DATA`,
else `./data`. The expected layout is `<data_dir>/nsmc/ratings_{train,test}.txt` and
`<data_dir>/multi30k/{train,val,test_2016_flickr}.{en,de}`. A missing file is downloaded from its public
source (pinned commit, sha256 checked) unless downloads are off (`download=False`, or `HF_DATASETS_OFFLINE`
/ `HF_HUB_OFFLINE` set); then the error names the path and what belongs there.

This module does not import the model code, so it works on its own.
"""

from __future__ import annotations

import copy
import gzip
import hashlib
import logging
import os
import shutil
import tempfile
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import datasets
import torch
from datasets import ClassLabel, Dataset, DatasetDict, Features, Translation, Value
from tokenizers import models as tokenizer_models
from torch.utils import data as torch_data

logger = logging.getLogger(__name__)

DATA_DIR_ENV = "HF_TRANSFORMER_DATA"
DEFAULT_DATA_DIR = "data"
NSMC_LABEL_NAMES = ("negative", "positive")
IGNORE_INDEX = -100  # label id that the cross-entropy loss skips; label padding uses it
_OFFLINE_ENV = ("HF_DATASETS_OFFLINE", "HF_HUB_OFFLINE")
_NSMC_URL = "https://raw.githubusercontent.com/e9t/nsmc/cc0670e872d4ac27bfe36c87456783004b39ef6c/{name}"
_MULTI30K_URL = (
    "https://raw.githubusercontent.com/multi30k/dataset/a3d2e0d26b56f3846f66a952536ffed4e401d05a/"
    "data/task1/raw/{name}.gz"
)
_MULTI30K_TOK_URL = (
    "https://raw.githubusercontent.com/multi30k/dataset/a3d2e0d26b56f3846f66a952536ffed4e401d05a/data/task1/tok/{name}"
)


class DataFileNotFoundError(FileNotFoundError):
    """A corpus file is missing and could not be downloaded."""


@dataclass(frozen=True)
class CorpusFile:
    """One file of a public corpus: where it goes under the data directory and where it comes from."""

    relative_path: str
    description: str
    url: str
    sha256: str
    gzipped: bool = False


NSMC_FILES: dict[str, CorpusFile] = {
    "train": CorpusFile(
        "nsmc/ratings_train.txt",
        "NSMC training reviews (150,000 rows; tab-separated id, document, label; from github.com/e9t/nsmc)",
        _NSMC_URL.format(name="ratings_train.txt"),
        "e03b7d14e9e41be8d464a28057cd25d7396c53e67aa7fd5f7e552c59b0ee2940",
    ),
    "test": CorpusFile(
        "nsmc/ratings_test.txt",
        "NSMC test reviews (50,000 rows; tab-separated id, document, label; from github.com/e9t/nsmc)",
        _NSMC_URL.format(name="ratings_test.txt"),
        "8ac9f64052f11dbf6ae0acb5e038f03d90a76f0eda7820cfb3a92d02edfcebda",
    ),
}

# Split name in the DatasetDict -> file stem in the Multi30k release.
MULTI30K_SPLITS: dict[str, str] = {"train": "train", "validation": "val", "test": "test_2016_flickr"}
_MULTI30K_SHA256 = {
    "train.en": "460a15fbd157e34a7a9957ee388c1ca247fe47af3ef25fb50442af6c274e0fc6",
    "train.de": "2c2b73fd2b548fbcde3a875e0a78d6ee94d498bfdee6bd3eae3945779e9ddf72",
    "val.en": "1f2a23d992769b5b3d209b0a10dd0b77c08cceb1f20dfb97ed0aafa49d107227",
    "val.de": "660e09eb7e1da2f856ea13ee5ad3cf6d36b3d5b0b733c857e94c5747a3dfc660",
    "test_2016_flickr.en": "399a4382932c1aadd3ceb9bef1008d388a64c76d4ae4e9d4728c6f4301cac182",
    "test_2016_flickr.de": "4be6b5b3236b79c25475c6bb829800a7ce559e9ba7a1f6c2394fe4d40be46d16",
}
_LANGUAGE_NAMES = {"en": "English", "de": "German"}
MULTI30K_FILES: dict[str, CorpusFile] = {
    name: CorpusFile(
        f"multi30k/{name}",
        f"Multi30k task 1 raw {_LANGUAGE_NAMES[name.rsplit('.', 1)[1]]} sentences, one per line, "
        "line-aligned with the other language (from github.com/multi30k/dataset, data/task1/raw)",
        _MULTI30K_URL.format(name=name),
        sha256,
        gzipped=True,
    )
    for name, sha256 in _MULTI30K_SHA256.items()
}
# The official lowercased, punctuation-normalised, Moses-tokenised references most Multi30k papers score
# against (hf_transformer.metrics.bleu_lc_tok), for the validation and test2016 splits.
_MULTI30K_TOK_SHA256 = {
    "val.lc.norm.tok.en": "46573ce391ae227f1c72f873392436a20ef18e0a6d518098cfbd70b77c8572ec",
    "val.lc.norm.tok.de": "97232bd273eceb7207f689527386a97e4be2616b18ada47576bdaf96c8ae1f00",
    "test_2016_flickr.lc.norm.tok.en": "5b7f32627cf99eced828311b955dae9800bb52bc8b91cf8b6526829e605b29d2",
    "test_2016_flickr.lc.norm.tok.de": "c6a33d39d48f9f510de147651316cd9d918e09ad0219df734a2f16b6baccacc4",
}
MULTI30K_TOK_FILES: dict[str, CorpusFile] = {
    name: CorpusFile(
        f"multi30k/tok/{name}",
        f"Multi30k task 1 {_LANGUAGE_NAMES[name.rsplit('.', 1)[1]]} references, lowercased, normalised and "
        "Moses-tokenised, one per line (from github.com/multi30k/dataset, data/task1/tok)",
        _MULTI30K_TOK_URL.format(name=name),
        sha256,
    )
    for name, sha256 in _MULTI30K_TOK_SHA256.items()
}


# --------------------------------------------------------------------------------------------------
# Locating and fetching files


def resolve_data_dir(data_dir: str | os.PathLike | None = None) -> Path:
    """The data directory: the argument, else `$HF_TRANSFORMER_DATA`, else `./data`."""
    if data_dir is not None:
        return Path(data_dir)
    return Path(os.environ.get(DATA_DIR_ENV) or DEFAULT_DATA_DIR)


def downloads_allowed(download: bool | None = None) -> bool:
    """`download` when given; otherwise yes unless `HF_DATASETS_OFFLINE` or `HF_HUB_OFFLINE` is set."""
    if download is not None:
        return download
    return not any(os.environ.get(name, "").upper() in {"1", "ON", "YES", "TRUE"} for name in _OFFLINE_ENV)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def download_file(
    url: str,
    destination: str | os.PathLike,
    *,
    sha256: str | None = None,
    gzipped: bool = False,
    timeout: float = 60.0,
) -> Path:
    """Fetch `url` to `destination` (gunzipped when `gzipped`), checking the sha256 of the result.

    The file appears only when complete and verified, so an interrupted download leaves nothing behind.
    """
    destination = Path(destination)
    destination.parent.mkdir(parents=True, exist_ok=True)
    handle, partial_name = tempfile.mkstemp(dir=destination.parent, prefix=f".{destination.name}.", suffix=".part")
    partial = Path(partial_name)
    try:
        with os.fdopen(handle, "wb") as out, urllib.request.urlopen(url, timeout=timeout) as response:
            source = gzip.GzipFile(fileobj=response) if gzipped else response
            shutil.copyfileobj(source, out)
        if sha256 is not None:
            actual = _sha256(partial)
            if actual != sha256:
                raise ValueError(f"{url} gave a file with sha256 {actual}, expected {sha256}")
        partial.replace(destination)
    finally:
        partial.unlink(missing_ok=True)
    return destination


def ensure_corpus_file(
    spec: CorpusFile, data_dir: str | os.PathLike | None = None, *, download: bool | None = None
) -> Path:
    """The path of a corpus file, downloading it first when it is missing and downloads are allowed."""
    root = resolve_data_dir(data_dir)
    path = root / spec.relative_path
    if path.is_file():
        return path
    if downloads_allowed(download):
        logger.warning("%s is missing; downloading it from %s", path, spec.url)
        try:
            return download_file(spec.url, path, sha256=spec.sha256, gzipped=spec.gzipped)
        except (OSError, ValueError, EOFError, urllib.error.URLError) as error:
            reason = f"downloading it from {spec.url} failed: {error}"
    else:
        reason = "downloads are off (download=False, or HF_DATASETS_OFFLINE / HF_HUB_OFFLINE is set)"
    gz_note = " (the source file is gzipped: gunzip it)" if spec.gzipped else ""
    raise DataFileNotFoundError(
        f"{path} not found, and {reason}.\n"
        f"It should hold: {spec.description}.\n"
        f"Get it from {spec.url}{gz_note} and put it at {path}, or point the data directory elsewhere "
        f"(the data_dir / --data-dir argument or the {DATA_DIR_ENV} environment variable; "
        f"now {root.resolve()})."
    )


# --------------------------------------------------------------------------------------------------
# Loading


def _drop_rows(dataset: Dataset, keep: Callable[[dict[str, list]], list[bool]], what: str, where: str) -> Dataset:
    """Filter rows and say how many went: data is never dropped silently."""
    before = len(dataset)
    kept = dataset.filter(keep, batched=True, desc=f"dropping {what}")
    dropped = before - len(kept)
    if dropped:
        logger.warning("%s: dropped %d of %d rows with %s", where, dropped, before, what)
    return kept


def _has_text(*columns: str) -> Callable[[dict[str, list]], list[bool]]:
    def keep(batch: dict[str, list]) -> list[bool]:
        return [
            all(value is not None and str(value).strip() for value in values)
            for values in zip(*(batch[column] for column in columns))
        ]

    return keep


def _undo_second_csv_quoting(text: str) -> str:
    """NSMC wrote every document that has a `"` through two rounds of CSV quoting; the reader undoes one.

    What is left is `"..."` with every inner quote doubled; that is decoded once more. (Decoded this way
    the longest document is 142 characters, within Naver's limit; read raw it would be 158.)
    """
    inner = text[1:-1]
    if len(text) >= 2 and text[0] == '"' and text[-1] == '"' and '"' not in inner.replace('""', ""):
        return inner.replace('""', '"')
    return text


def load_nsmc(
    data_dir: str | os.PathLike | None = None,
    *,
    validation_size: float | int = 0.1,
    seed: int = 42,
    download: bool | None = None,
    cache_dir: str | os.PathLike | None = None,
) -> DatasetDict:
    """NSMC as a `DatasetDict` with `train`, `validation` and `test` splits; columns `id`, `text`, `label`.

    `label` is a `ClassLabel` (0 negative, 1 positive). CSV quoting is decoded, rows with an empty
    document are dropped and counted in a log line. `validation` is carved out of the training file
    (fixed `seed`), so the test file is never used for model selection.
    """
    paths = {split: str(ensure_corpus_file(spec, data_dir, download=download)) for split, spec in NSMC_FILES.items()}
    # keep_default_na=False: a review reading "NA" or "null" is text, not a missing value.
    raw = datasets.load_dataset(
        "csv",
        data_files=paths,
        delimiter="\t",
        keep_default_na=False,
        cache_dir=cache_dir,
        features=Features({"id": Value("string"), "document": Value("string"), "label": Value("int64")}),
    )
    features = Features(
        {"id": Value("string"), "text": Value("string"), "label": ClassLabel(names=list(NSMC_LABEL_NAMES))}
    )

    def decode(batch: dict[str, list]) -> dict[str, list]:
        return {
            "id": batch["id"],
            "text": [_undo_second_csv_quoting(text) for text in batch["document"]],
            "label": batch["label"],
        }

    splits = {}
    for split, dataset in raw.items():
        dataset = _drop_rows(dataset, _has_text("document"), "an empty document", Path(paths[split]).name)
        # Every column is returned and rewritten: columns carried over from a filtered table would be
        # cast one row at a time by datasets, several times slower.
        splits[split] = dataset.map(
            decode,
            batched=True,
            remove_columns=dataset.column_names,
            features=features,
            desc="decoding quotes",
        )
    carved = splits["train"].train_test_split(test_size=validation_size, seed=seed)
    return DatasetDict(train=carved["train"], validation=carved["test"], test=splits["test"])


def load_multi30k(
    data_dir: str | os.PathLike | None = None,
    *,
    source_lang: str = "en",
    target_lang: str = "de",
    download: bool | None = None,
    cache_dir: str | os.PathLike | None = None,
) -> DatasetDict:
    """Multi30k task 1 (raw text) as `train` / `validation` / `test` (test_2016_flickr) splits.

    Each row has a `translation` column `{source_lang: ..., target_lang: ...}`. Lines are paired by
    position; sides of different lengths are an error naming both files and counts.
    """
    languages = {source_lang, target_lang}
    if len(languages) != 2 or not languages <= set(_LANGUAGE_NAMES):
        raise ValueError(f"Multi30k has 'en' and 'de'; got source_lang={source_lang!r}, target_lang={target_lang!r}")
    paths = {
        lang: {
            split: str(ensure_corpus_file(MULTI30K_FILES[f"{stem}.{lang}"], data_dir, download=download))
            for split, stem in MULTI30K_SPLITS.items()
        }
        for lang in (source_lang, target_lang)
    }
    return _pair_line_files(paths[source_lang], paths[target_lang], source_lang, target_lang, cache_dir=cache_dir)


def load_multi30k_tok_references(
    split: str, lang: str, data_dir: str | os.PathLike | None = None, *, download: bool | None = None
) -> list[str]:
    """The official lowercased, normalised, Moses-tokenised reference lines of a Multi30k split.

    `split` is `validation` or `test` (test_2016_flickr); the lines are in the split's order, one per "\n" (as the
    sentence files are read: a U+2028 or other separator `str.splitlines` splits at stays inside its sentence).
    """
    if split not in ("validation", "test"):
        raise ValueError(f"Multi30k has tokenised references for 'validation' and 'test', not {split!r}")
    if lang not in _LANGUAGE_NAMES:
        raise ValueError(f"Multi30k has 'en' and 'de', not {lang!r}")
    spec = MULTI30K_TOK_FILES[f"{MULTI30K_SPLITS[split]}.lc.norm.tok.{lang}"]
    return read_sentence_lines(ensure_corpus_file(spec, data_dir, download=download))


def read_sentence_lines(path: str | os.PathLike) -> list[str]:
    """A file of one sentence per line (a corpus side, a system's output), split at "\n" only, as the sentence files
    are read: a U+2028 or other separator `str.splitlines` splits at stays inside its sentence."""
    text = Path(path).read_text(encoding="utf-8")
    return text.removesuffix("\n").split("\n") if text else []


def load_parallel_text(
    source_files: Mapping[str, str | os.PathLike],
    target_files: Mapping[str, str | os.PathLike],
    source_lang: str,
    target_lang: str,
    *,
    cache_dir: str | os.PathLike | None = None,
) -> DatasetDict:
    """Line-aligned text files (one sentence per line) as a `DatasetDict` with a `translation` column.

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
        cache_dir=cache_dir,
    )


def _pair_line_files(
    source_paths: dict[str, str],
    target_paths: dict[str, str],
    source_lang: str,
    target_lang: str,
    *,
    cache_dir: str | os.PathLike | None,
) -> DatasetDict:
    # The text loader splits on "\n" only, so a literal tab inside a sentence (train.de line 7366) stays text.
    sources = datasets.load_dataset("text", data_files=source_paths, cache_dir=cache_dir)
    targets = datasets.load_dataset("text", data_files=target_paths, cache_dir=cache_dir)
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
        both = _drop_rows(both, _has_text("source", "target"), "an empty side", f"{split} ({source_paths[split]})")
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
    string labels become a `ClassLabel` with the same ids in every split. Seq2seq: give `source_column`
    and `target_column`; the result has a `translation` column keyed by those two names.
    `data_files` is a path, a list of paths (one `train` split) or a dict {split: path(s)}.
    Rows with an empty text, label or side are dropped and counted in a log line.
    """
    classification = text_column is not None or label_column is not None
    seq2seq = source_column is not None or target_column is not None
    if (
        classification == seq2seq
        or (classification and None in (text_column, label_column))
        or (seq2seq and None in (source_column, target_column))
    ):
        raise ValueError(
            "give either text_column and label_column (classification) or source_column and target_column (seq2seq)"
        )
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
    raw = datasets.load_dataset(builder, data_files=files, cache_dir=cache_dir, **options)

    wanted = [text_column, label_column] if classification else [source_column, target_column]
    for split, dataset in raw.items():
        absent = [column for column in wanted if column not in dataset.column_names]
        if absent:
            raise KeyError(f"{files[split]} has no column(s) {absent}; its columns are {dataset.column_names}")

    result = {}
    for split, dataset in raw.items():
        where = f"{split} ({', '.join(files[split])})"
        dataset = _drop_rows(dataset, _has_text(*wanted), "an empty or missing value", where)
        if classification:
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
    """String labels become one ClassLabel shared by all splits (per-split encoding could disagree)."""
    label_types = {dataset.features["label"].dtype for dataset in dataset_dict.values()}
    if label_types <= {"int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"}:
        return dataset_dict
    names = sorted({str(label) for dataset in dataset_dict.values() for label in dataset.unique("label")})
    dataset_dict = dataset_dict.cast_column("label", Value("string"))
    return dataset_dict.cast_column("label", ClassLabel(names=names))


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
        raise KeyError(f"the dataset has no column {text_column!r}; its columns are {dataset.column_names}")
    has_label = label_column in dataset.column_names

    def encode(batch: dict[str, list]) -> dict[str, list]:
        encoded = tokenizer(batch[text_column], truncation=True, max_length=max_length)
        if has_label:
            # Passed through rather than kept: datasets casts a kept column of a filtered or split
            # dataset one row at a time, which made tokenizing NSMC 3x slower.
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

    def encode(batch: dict[str, list]) -> dict[str, list]:
        pairs = batch["translation"]
        sources, targets = [pair[source_lang] for pair in pairs], [pair[target_lang] for pair in pairs]
        return _encode_pairs(tokenizer, sources, targets, max_source_length, max_target_length)

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
        self.tokenizer = copy.deepcopy(tokenizer)
        self.tokenizer.backend_tokenizer.model.dropout = dropout

    def __len__(self) -> int:
        return len(self.sources)

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

    While `mixing` is on, each draw of row i is that pair source -> target or, with probability 1/2, target ->
    source (the second dataset holds the same rows with the sides swapped); switched off, every draw is source ->
    target. One model then first learns both directions of a shared vocabulary, which aligns the two languages'
    pieces, and is tuned on its own direction after: `hf_transformer.training.BidirectionalEpochs` switches it off
    after the first epochs. An epoch stays one draw per pair, so the training costs the steps it did. The direction
    is drawn from torch's random source (seeded by the Trainer; each DataLoader worker has its own stream).
    """

    def __init__(self, forward: torch_data.Dataset, backward: torch_data.Dataset):
        if len(forward) != len(backward):
            raise ValueError(
                f"the two directions must hold the same pairs: {len(forward)} rows forward, {len(backward)} backward"
            )
        self.forward = forward
        self.backward = backward
        self.mixing = True

    def __len__(self) -> int:
        return len(self.forward)

    def __getitem__(self, index: int) -> dict[str, list[int]]:
        if self.mixing and torch.rand(()).item() < 0.5:
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
        raise KeyError(f"the dataset has no 'translation' column; its columns are {dataset.column_names}")
    languages = dataset.features["translation"]
    languages = getattr(languages, "languages", None) or list(languages)
    absent = [lang for lang in (source_lang, target_lang) if lang not in languages]
    if absent:
        raise KeyError(f"the translation column has no language(s) {absent}; it has {list(languages)}")


def classification_collator(tokenizer, *, pad_to_multiple_of: int | None = None):
    """Pads each batch to its longest row (`DataCollatorWithPadding`); `label` becomes `labels`."""
    from transformers import DataCollatorWithPadding

    return DataCollatorWithPadding(tokenizer, pad_to_multiple_of=pad_to_multiple_of, return_tensors="pt")


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
        raise KeyError(f"the dataset has none of the columns {list(columns)}; tokenize it first")
    table = dataset.with_format("arrow")[:]
    lengths = [pc.list_value_length(table.column(column)) for column in present]
    longest = lengths[0]
    for other in lengths[1:]:
        longest = pc.max_element_wise(longest, other)
    return longest.to_pylist()


def length_grouped_dataloader(
    dataset: Dataset, collator, batch_size: int, *, shuffle: bool = True, seed: int = 0, **dataloader_kwargs
):
    """A `DataLoader` whose batches hold rows of similar length, so little of each batch is padding.

    Training (`shuffle=True`) uses transformers' `LengthGroupedSampler`: random mega-batches, sorted
    by length inside, the longest batch first so memory problems show at once. Evaluation
    (`shuffle=False`) sorts all rows by length. With the `Trainer`, set
    `TrainingArguments(train_sampling_strategy="group_by_length")` instead.
    """
    import torch
    from torch.utils.data import DataLoader
    from transformers.trainer_pt_utils import LengthGroupedSampler

    lengths = sequence_lengths(dataset)
    if shuffle:
        generator = torch.Generator().manual_seed(seed)
        sampler = LengthGroupedSampler(batch_size, lengths=lengths, generator=generator)
    else:
        sampler = sorted(range(len(lengths)), key=lengths.__getitem__)
    return DataLoader(dataset, batch_size=batch_size, sampler=sampler, collate_fn=collator, **dataloader_kwargs)


__all__ = [
    "DATA_DIR_ENV",
    "DataFileNotFoundError",
    "CorpusFile",
    "NSMC_FILES",
    "MULTI30K_FILES",
    "MULTI30K_TOK_FILES",
    "resolve_data_dir",
    "downloads_allowed",
    "download_file",
    "ensure_corpus_file",
    "load_nsmc",
    "load_multi30k",
    "load_multi30k_tok_references",
    "read_sentence_lines",
    "load_parallel_text",
    "load_local_dataset",
    "first_rows",
    "resolve_max_length",
    "tokenize_classification",
    "tokenize_translation",
    "SubwordSampledTranslation",
    "BidirectionalTranslation",
    "classification_collator",
    "seq2seq_collator",
    "sequence_lengths",
    "length_grouped_dataloader",
]
