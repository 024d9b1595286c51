"""Multi30k's scoring of a translation model in a Seq2SeqTrainer: hf_transformer.metrics' cased sacreBLEU and
chrF, and beside them ``bleu_lc_tok`` (recipes.multi30k.bleu) against the official lowercased Moses-tokenised
references, where the data folder has them. Beam search's length penalty is chosen on validation with the
convention that fits the model (lowercased BLEU for a model that writes lowercase), then test2016 is decoded once.
The training step (recipes.multi30k.train) and the scoring of saved models (recipes.multi30k.evaluate) share it.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Sequence
from pathlib import Path

from hf_transformer.data import places_in_order, read_sentence_lines
from hf_transformer.metrics import BleuMetric, ExtraScores, select_and_score, translation_metrics
from recipes.multi30k.bleu import bleu_lc_tok
from recipes.multi30k.data import (
    MULTI30K_FILES,
    MULTI30K_SPLITS,
    DataArguments,
    ensure_corpus_file,
    load_multi30k_tok_references,
)

logger = logging.getLogger(__name__)


def lowercases(tokenizer) -> bool:
    """Whether the tokenizer lowercases what it encodes (`train_tokenizer(..., lowercase=True)`)."""
    normalizer = getattr(getattr(tokenizer, "backend_tokenizer", None), "normalizer", None)
    return normalizer is not None and normalizer.normalize_str("AÄ") == "aä"


def lc_tok_references(splits, data_args: DataArguments) -> dict[str, list[str]]:
    """The official lowercased Moses-tokenised references of validation and test, where they apply.

    They exist for the full Multi30k splits only: with rows limited (`--max_eval_samples`, ...) the first
    rows are taken from them too; a data folder without `multi30k/tok/` scores cased BLEU alone, with a warning.
    """
    found = {}
    target = data_args.target_lang
    for split in ("validation", "test"):
        rows = [pair[target] for pair in splits[split]["translation"]]
        try:
            found[split] = tokenised_references(rows, split, target, data_args.data_dir)
        except FileNotFoundError as error:
            logger.warning("no lowercased tokenised references, bleu_lc_tok is not computed: %s", error)
            return {}
    return found


def tokenised_references(rows: Sequence[str], split: str, lang: str, data_dir) -> list[str]:
    """The official tokenised reference of each of a split's ``rows`` (its raw ``lang`` sentences, as loaded):
    the line of the tokenised file that stands where the row's raw line stands. ``FileNotFoundError`` where the
    data folder has no tokenised references."""
    lines = load_multi30k_tok_references(split, lang, data_dir)
    raw = read_sentence_lines(ensure_corpus_file(MULTI30K_FILES[f"{MULTI30K_SPLITS[split]}.{lang}"], data_dir))
    if len(lines) != len(raw):
        raise ValueError(f"{split}: {len(lines)} tokenised references for {len(raw)} lines of the raw {lang} file")
    # The rows are the raw file's lines less the pairs dropped as empty: a blank line shifts every later row.
    return [lines[number] for number in places_in_order(rows, raw, f"{split} ({lang} file)")]


def lc_tok_scores(tokenized_references: Sequence[str], lang: str) -> ExtraScores:
    """``BleuMetric``'s extra score ``bleu_lc_tok`` of a split, against its tokenised references in row order."""

    def scores(hypotheses: list[str], positions: list[int]) -> dict[str, float]:
        return {"bleu_lc_tok": bleu_lc_tok(hypotheses, [tokenized_references[i] for i in positions], lang)}

    return scores


def split_metrics(splits, tokenized, tokenizer, data_args: DataArguments) -> tuple[Callable[[str], BleuMetric], bool]:
    """``metric(split)``, a fresh :class:`BleuMetric` for ``validation`` or ``test`` against the split's raw
    references (matched through the labels) and, where present, its lowercased tokenised ones; and whether
    validation has the latter."""
    target = data_args.target_lang
    tokenized_references = lc_tok_references(splits, data_args)
    for split, lines in tokenized_references.items():
        if len(lines) != len(splits[split]):
            raise ValueError(f"{split}: {len(lines)} tokenised references for {len(splits[split])} raw ones")
    extra = {split: lc_tok_scores(lines, target) for split, lines in tokenized_references.items()}
    return translation_metrics(tokenizer, splits, tokenized, target, extra), "validation" in tokenized_references


def score(
    trainer,
    test_dataset,
    metric: Callable[[str], BleuMetric],
    *,
    num_beams: int,
    length_penalties: Sequence[float],
    lowercase: bool,
    has_lc_tok_validation: bool,
) -> tuple[dict, list[str]]:
    """hf_transformer.metrics.select_and_score: the length penalty chosen on validation, test2016 decoded once with
    it and once greedily. A model that writes lowercase is chosen on the lowercased metric: its cased BLEU counts
    every capital as an error. The results say which (``selected_on``) and whether the model lowercases."""
    selection = "bleu_lc_tok" if lowercase and has_lc_tok_validation else "bleu"
    results, test_hypotheses = select_and_score(
        trainer,
        test_dataset,
        metric,
        num_beams=num_beams,
        length_penalties=length_penalties,
        selected_on=selection,
    )
    results["lowercase"] = lowercase
    return results, test_hypotheses


def headline(scores: dict) -> dict:
    """The figures a Multi30k run reports as its own: test2016's BLEU, and its lc-tok BLEU where scored."""
    found = {"bleu": scores["test_bleu"]}
    if "test_bleu_lc_tok" in scores:
        found["bleu_lc_tok"] = scores["test_bleu_lc_tok"]
    return found


def check_output_dir(output_dir: str, **folders: list[str]) -> None:
    """Refuses an ``--output_dir`` that is one of the model folders named by an option (``model_dirs=[...]``), or
    another model's folder: a step's scores go beside the models, never over a training run's or an ensemble's own
    results.json."""
    given = Path(output_dir).resolve()
    for option, named in folders.items():
        if any(Path(folder).resolve() == given for folder in named):
            raise ValueError(
                f"--output_dir {output_dir} is one of the --{option}: its results.json and test predictions are that "
                "run's; give a folder of its own"
            )
    if (given / "config.json").is_file():
        raise ValueError(
            f"--output_dir {output_dir} holds a model (config.json): its results.json and test predictions are that "
            "run's; give a folder of its own"
        )
    if (given / "results.json").is_file():
        raise ValueError(
            f"--output_dir {output_dir} holds an earlier run's results.json: this one would write over it and its "
            "test predictions; give a new folder, or remove that one"
        )


def check_direction(folders, source_lang: str, target_lang: str, role: str = "--model_dirs") -> None:
    """Refuses a folder whose run's ``results.json`` records another direction than ``source_lang`` ->
    ``target_lang`` (a De->En model scored against English sources reads German as nonsense, silently); folders
    without a record are left to the caller."""
    for folder in folders:
        recorded = Path(folder) / "results.json"
        if not recorded.is_file():
            continue
        saved = json.loads(recorded.read_text(encoding="utf-8"))
        direction = (saved.get("source_lang"), saved.get("target_lang"))
        if None not in direction and direction != (source_lang, target_lang):
            raise ValueError(
                f"{role} {folder} translates {direction[0]} -> {direction[1]} (its results.json), not "
                f"{source_lang} -> {target_lang}: give --source_lang and --target_lang of its direction"
            )


def task_fields(data_args: DataArguments) -> dict:
    """The fields that open a Multi30k run's results: its task, data and direction."""
    source, target = data_args.source_lang, data_args.target_lang
    return {
        "task": f"translation_{source}_to_{target}",
        "dataset": "multi30k",
        "split": "test2016",
        "source_lang": source,
        "target_lang": target,
    }
