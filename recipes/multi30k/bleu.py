"""Multi30k's two BLEU conventions, and a figure means little without its convention:

- ``bleu`` (:func:`hf_transformer.metrics.bleu`): sacreBLEU's default, cased and detokenised (13a tokenisation
  inside BLEU), against the raw reference lines. The stricter, modern convention.
- ``bleu_lc_tok``: BLEU on lowercased, punctuation-normalised, Moses-tokenised text against the official
  ``data/task1/tok/*.lc.norm.tok.*`` references of the Multi30k release, the way most Multi30k papers (multeval,
  ``multi-bleu.perl``) score. The output is brought to that form with ``sacremoses`` exactly as the references were
  made: lowercase, ``MosesPunctNormalizer``, then ``MosesTokenizer`` with its default escaping.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache

from hf_transformer.metrics import bleu, paired_bootstrap, require_scorers

__all__ = ["SCORERS", "bleu_lc_tok", "moses_lc_tok", "paired_bootstrap_lc_tok", "require_scorers"]

# What the two conventions need: sacreBLEU for both, sacremoses for the tokenised one (the `train` extra).
SCORERS = ("sacrebleu", "sacremoses")


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


def bleu_lc_tok(hypotheses: Sequence[str], tokenized_references: Sequence[str], lang: str) -> float:
    """BLEU of detokenised ``hypotheses`` against references already in the ``lc.norm.tok`` form.

    The hypotheses go through :func:`moses_lc_tok`; BLEU is then computed on the tokens as they are
    (``tokenize="none"``), as ``multi-bleu.perl`` and multeval do.
    """
    return bleu(moses_lc_tok(hypotheses, lang), tokenized_references, tokenize="none")


def paired_bootstrap_lc_tok(
    systems: dict[str, Sequence[str]], tokenized_references: Sequence[str], lang: str, *, samples: int = 1000
) -> list[dict]:
    """:func:`hf_transformer.metrics.paired_bootstrap` in the lc-tok convention: every system's output brought to
    the ``lc.norm.tok`` form, against the official tokenised references."""
    tokenized = {name: moses_lc_tok(hypotheses, lang) for name, hypotheses in systems.items()}
    return paired_bootstrap(tokenized, tokenized_references, tokenize="none", samples=samples)
