"""Translation scores with sacreBLEU, as the field reports them.

`bleu` is sacreBLEU's default: cased and detokenised text (13a tokenisation inside BLEU) against the raw reference
lines, comparable across papers that use sacreBLEU. `chrf` is character n-gram F-score. `paired_bootstrap` tells
whether two systems' difference on one test set is beyond chance. A convention of one corpus (say, BLEU on
lowercased tokenised text) brings hypotheses and references to its form first and scores with ``tokenize="none"``.
sacreBLEU is optional (the `train` extra): it is imported when a score is computed.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence

__all__ = ["bleu", "chrf", "paired_bootstrap", "require_scorers"]

# The optional package the scores need; the `train` extra installs it.
SCORERS = ("sacrebleu",)


def require_scorers(scorers: Sequence[str] = SCORERS) -> None:
    """Raises at once, naming the install, when a package the scores need is missing (``scorers``: module names): a
    training script would otherwise find out at its first evaluation, after an epoch or more of training."""
    missing = [name for name in scorers if importlib.util.find_spec(name) is None]
    if missing:
        raise ImportError(
            f"BLEU scoring needs {' and '.join(missing)}: pip install 'hf_transformer[train]' (or {' '.join(missing)})"
        )


def _check_lengths(hypotheses: Sequence[str], references: Sequence[str]) -> None:
    if len(hypotheses) != len(references):
        raise ValueError(f"{len(hypotheses)} hypotheses but {len(references)} references")


def bleu(hypotheses: Sequence[str], references: Sequence[str], *, tokenize: str | None = None) -> float:
    """sacreBLEU's default: cased, detokenised text, 13a tokenisation; ``tokenize="none"`` scores text already
    tokenised (both sides brought to one form beforehand), as ``multi-bleu.perl`` does."""
    import sacrebleu

    _check_lengths(hypotheses, references)
    if tokenize is None:
        return sacrebleu.corpus_bleu(list(hypotheses), [list(references)]).score
    return sacrebleu.corpus_bleu(list(hypotheses), [list(references)], tokenize=tokenize, force=True).score


def chrf(hypotheses: Sequence[str], references: Sequence[str]) -> float:
    import sacrebleu

    _check_lengths(hypotheses, references)
    return sacrebleu.corpus_chrf(list(hypotheses), [list(references)]).score


def paired_bootstrap(
    systems: dict[str, Sequence[str]],
    references: Sequence[str],
    *,
    tokenize: str | None = None,
    samples: int = 1000,
) -> list[dict]:
    """Paired bootstrap resampling (Koehn, 2004) of corpus BLEU, as sacreBLEU's ``--paired-bs`` runs it.

    ``systems`` maps a name to its detokenised output, line by line; the first is the baseline. The same ``samples``
    resamplings of the sentences (sacreBLEU's fixed seed, ``SACREBLEU_SEED``) score every system, which gives each its
    mean and 95% confidence interval, and each other system the p-value of its difference from the baseline (the
    chance of a difference at least as large if the two systems were alike). BLEU is :func:`bleu`'s: sacreBLEU's
    default, or with ``tokenize="none"`` on outputs and references already brought to one tokenised form.

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
    named = [(name, list(hypotheses)) for name, hypotheses in systems.items()]
    metric = BLEU() if tokenize is None else BLEU(tokenize=tokenize, force=True)
    test = PairedTest(named, {"bleu": metric}, [list(references)], test_type="bs", n_samples=samples, n_jobs=1)
    _, scores = test()
    (key,) = [key for key in scores if key != "System"]
    return [
        {"name": name, "score": result.score, "mean": result.mean, "ci": result.ci, "p_value": result.p_value}
        for name, result in zip(scores["System"], scores[key], strict=True)
    ]
