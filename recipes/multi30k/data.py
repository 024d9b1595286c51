"""Multi30k task 1: English and German image descriptions, line-aligned; test2016 is ``test_2016_flickr``.

``<data_dir>/multi30k/{train,val,test_2016_flickr}.{en,de}`` (raw text) and ``<data_dir>/multi30k/tok/`` (the
official lowercased, normalised, Moses-tokenised references), found or fetched by recipes.common.corpus_files.
``DataArguments`` are the recipe steps' command-line arguments for them (the folder, the direction, row limits).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from datasets import DatasetDict

from hf_transformer.data import first_rows, load_parallel_text, read_sentence_lines
from hf_transformer.training import SplitLimits
from recipes.common.corpus_files import CorpusFile, ensure_corpus_file

_MULTI30K_URL = (
    "https://raw.githubusercontent.com/multi30k/dataset/a3d2e0d26b56f3846f66a952536ffed4e401d05a/"
    "data/task1/raw/{name}.gz"
)
_MULTI30K_TOK_URL = (
    "https://raw.githubusercontent.com/multi30k/dataset/a3d2e0d26b56f3846f66a952536ffed4e401d05a/data/task1/tok/{name}"
)
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
# against (recipes.multi30k.bleu.bleu_lc_tok), for the validation and test2016 splits.
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


def load_multi30k(
    data_dir: str | os.PathLike | None = None,
    *,
    source_lang: str = "en",
    target_lang: str = "de",
    download: bool | None = None,
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
    return load_parallel_text(paths[source_lang], paths[target_lang], source_lang, target_lang)


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


@dataclass
class DataArguments(SplitLimits):
    """The recipe steps' data arguments (through ``HfArgumentParser``): where Multi30k is, and the direction."""

    data_dir: str | None = field(
        default=None, metadata={"help": "folder holding multi30k/ (else $HF_TRANSFORMER_DATA, else ./data)"}
    )
    source_lang: str = field(default="en", metadata={"help": "en or de"})
    target_lang: str = field(default="de", metadata={"help": "de or en"})

    def splits(self) -> DatasetDict:
        """Multi30k's train, validation and test2016 pairs of this direction, each cut to its --max_*_samples."""
        pairs = load_multi30k(self.data_dir, source_lang=self.source_lang, target_lang=self.target_lang)
        return first_rows(pairs, self.split_limits())

    def evaluation_splits(self) -> DatasetDict:
        """Validation and test2016 only, for the steps that score a trained model."""
        splits = self.splits()
        splits.pop("train", None)
        return splits
