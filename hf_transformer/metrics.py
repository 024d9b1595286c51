"""Translation scores as the field reports them.

Two conventions are in use for Multi30k, and a figure means little without its convention:

- `bleu`: sacreBLEU's default, cased and detokenised (13a tokenisation inside BLEU), against the raw
  reference lines. The stricter, modern convention; comparable across papers that use sacreBLEU.
- `bleu_lc_tok`: BLEU on lowercased, punctuation-normalised, Moses-tokenised text against the official
  `data/task1/tok/*.lc.norm.tok.*` references of the Multi30k release, the way most Multi30k papers
  (multeval, `multi-bleu.perl`) score. The output is brought to that form with `sacremoses` exactly as the
  references were made: lowercase, `MosesPunctNormalizer`, then `MosesTokenizer` with its default escaping.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence
from functools import lru_cache

__all__ = ["moses_lc_tok", "bleu", "bleu_lc_tok", "chrf", "paired_bootstrap", "require_scorers"]

# The optional packages the scores need; the `train` extra installs them.
SCORERS = ("sacrebleu", "sacremoses")


def require_scorers() -> None:
    """Raises at once, naming the install, when a package the scores need is missing: a training script would
    otherwise find out at its first evaluation, after an epoch or more of training."""
    missing = [name for name in SCORERS if importlib.util.find_spec(name) is None]
    if missing:
        raise ImportError(
            f"BLEU scoring needs {' and '.join(missing)}: pip install 'hf_transformer[train]' (or {' '.join(missing)})"
        )


@lru_cache(maxsize=4)
def _moses(lang: str):
    try:
        from sacremoses import MosesPunctNormalizer, MosesTokenizer
    except ImportError as error:  # an optional dependency: the `train` extra installs it
        raise ImportError(
            "lowercased tokenised BLEU needs sacremoses: pip install 'hf_transformer[train]' (or sacremoses)"
        ) from error
    return MosesPunctNormalizer(lang=lang), MosesTokenizer(lang=lang)


def moses_lc_tok(lines: Sequence[str], lang: str) -> list[str]:
    """Lines lowercased, punctuation-normalised and Moses-tokenised (the Multi30k `lc.norm.tok` form)."""
    normalizer, tokenizer = _moses(lang)
    # Moses' normaliser ran on lines that still ended in a newline: its rule moving a period before a closing
    # quote (`tea."` -> `tea".`, not English) needs a character after the quote, so the newline is kept here too.
    return [
        tokenizer.tokenize(normalizer.normalize(line.lower() + "\n").strip(), return_str=True, escape=True)
        for line in lines
    ]


def _check_lengths(hypotheses: Sequence[str], references: Sequence[str]) -> None:
    if len(hypotheses) != len(references):
        raise ValueError(f"{len(hypotheses)} hypotheses but {len(references)} references")


def bleu(hypotheses: Sequence[str], references: Sequence[str]) -> float:
    """sacreBLEU's default: cased, detokenised text, 13a tokenisation."""
    import sacrebleu

    _check_lengths(hypotheses, references)
    return sacrebleu.corpus_bleu(list(hypotheses), [list(references)]).score


def chrf(hypotheses: Sequence[str], references: Sequence[str]) -> float:
    import sacrebleu

    _check_lengths(hypotheses, references)
    return sacrebleu.corpus_chrf(list(hypotheses), [list(references)]).score


def bleu_lc_tok(hypotheses: Sequence[str], tokenized_references: Sequence[str], lang: str) -> float:
    """BLEU of detokenised `hypotheses` against references already in the `lc.norm.tok` form.

    The hypotheses go through `moses_lc_tok`; BLEU is then computed on the tokens as they are
    (`tokenize="none"`), as `multi-bleu.perl` and multeval do.
    """
    import sacrebleu

    _check_lengths(hypotheses, tokenized_references)
    return sacrebleu.corpus_bleu(
        moses_lc_tok(hypotheses, lang), [list(tokenized_references)], tokenize="none", force=True
    ).score


def paired_bootstrap(
    systems: dict[str, Sequence[str]],
    references: Sequence[str],
    *,
    lc_tok_lang: str | None = None,
    samples: int = 1000,
) -> list[dict]:
    """Paired bootstrap resampling (Koehn, 2004) of corpus BLEU, as sacreBLEU's ``--paired-bs`` runs it.

    ``systems`` maps a name to its detokenised output, line by line; the first is the baseline. The same ``samples``
    resamplings of the sentences (sacreBLEU's fixed seed, ``SACREBLEU_SEED``) score every system, which gives each its
    mean and 95% confidence interval, and each other system the p-value of its difference from the baseline (the
    chance of a difference at least as large if the two systems were alike). With ``lc_tok_lang`` the outputs are
    brought to the lc.norm.tok form first and ``references`` are the official tokenised ones (`bleu_lc_tok`); else
    cased detokenised BLEU against the raw ``references`` (`bleu`).

    Returns one record per system, baseline first: ``name``, ``score``, ``mean``, ``ci`` (the half-width of the 95%
    interval) and ``p_value`` (None for the baseline).
    """
    from sacrebleu.metrics import BLEU
    from sacrebleu.significance import PairedTest

    if len(systems) < 2:
        raise ValueError(f"paired_bootstrap compares a baseline with at least one system; got {len(systems)}")
    if samples < 1:
        raise ValueError(f"samples is the number of bootstrap resamplings, at least 1; got {samples}")
    for name, hypotheses in systems.items():
        if len(hypotheses) != len(references):
            raise ValueError(f"{name}: {len(hypotheses)} lines but {len(references)} references")
    if lc_tok_lang is not None:
        named = [(name, moses_lc_tok(hypotheses, lc_tok_lang)) for name, hypotheses in systems.items()]
        metric = BLEU(tokenize="none", force=True)
    else:
        named = [(name, list(hypotheses)) for name, hypotheses in systems.items()]
        metric = BLEU()
    test = PairedTest(named, {"bleu": metric}, [list(references)], test_type="bs", n_samples=samples, n_jobs=1)
    _, scores = test()
    (key,) = [key for key in scores if key != "System"]
    return [
        {"name": name, "score": result.score, "mean": result.mean, "ci": result.ci, "p_value": result.p_value}
        for name, result in zip(scores["System"], scores[key], strict=True)
    ]
