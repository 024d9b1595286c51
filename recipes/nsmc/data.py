"""NSMC, the Naver sentiment movie corpus: Korean movie reviews labelled negative or positive.

``<data_dir>/nsmc/ratings_{train,test}.txt``: tab-separated ``id``, ``document``, ``label``, 150,000 training and
50,000 test reviews (recipes.common.corpus_files finds or fetches them).
"""

from __future__ import annotations

import os
from pathlib import Path

import datasets
from datasets import ClassLabel, DatasetDict, Features, Value

from hf_transformer.data import drop_rows, has_text
from recipes.common.corpus_files import CorpusFile, ensure_corpus_file

NSMC_LABEL_NAMES = ("negative", "positive")
_NSMC_URL = "https://raw.githubusercontent.com/e9t/nsmc/cc0670e872d4ac27bfe36c87456783004b39ef6c/{name}"

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
        dataset = drop_rows(dataset, has_text("document"), "an empty document", Path(paths[split]).name)
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
