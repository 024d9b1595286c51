"""Translation scores with sacreBLEU, as the field reports them, and the same scores inside a Seq2SeqTrainer.

`bleu` is sacreBLEU's default: cased and detokenised text (13a tokenisation inside BLEU) against the raw reference
lines, comparable across papers that use sacreBLEU. `chrf` is character n-gram F-score. `paired_bootstrap` tells
whether two systems' difference on one test set is beyond chance. A convention of one corpus (say, BLEU on
lowercased tokenised text) brings hypotheses and references to its form first and scores with ``tokenize="none"``.
sacreBLEU is optional (the `train` extra): it is imported when a score is computed.

In a `Seq2SeqTrainer` (``predict_with_generate``), `BleuMetric` is the ``compute_metrics`` that scores generated
text against a split's raw reference lines (`ReferenceIndex` finds each row's line, whatever order the Trainer
returns rows in), and `select_and_score` chooses beam search's length penalty on the validation set, then decodes
the test set once with it and once greedily.
"""

from __future__ import annotations

import importlib.util
import logging
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence

import numpy as np

from .data import IGNORE_INDEX

__all__ = [
    "bleu",
    "chrf",
    "paired_bootstrap",
    "require_scorers",
    "ReferenceIndex",
    "BleuMetric",
    "decode_generated",
    "generated_lengths",
    "translation_metrics",
    "select_and_score",
]

logger = logging.getLogger(__name__)

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


# --------------------------------------------------------------------------------------------------
# BLEU inside a Seq2SeqTrainer


class ReferenceIndex:
    """Finds the raw reference line of each prediction row from its `label_ids` (and its `inputs`, where the
    prediction has them).

    `Trainer.predict` may return rows in another order than the dataset's (the evaluation sampler
    groups by length when `train_sampling_strategy="group_by_length"`), so the rows are matched by their
    token ids, never by position: by source and target where ``input_rows`` are given and the prediction carries
    its inputs (`include_for_metrics=["inputs"]`, which :func:`select_and_score` sets), so that two rows with one
    target and different sources keep their own hypotheses; else by the target alone. Rows with identical ids take
    the dataset's rows in turn; a row beyond them is a repeat: a multi-process evaluation pads the last batches with
    rows already given, so that every process decodes as many, and each dataset row must be scored once.
    """

    def __init__(
        self,
        label_rows: Sequence[Sequence[int]],
        references: Sequence[str],
        input_rows: Sequence[Sequence[int]] | None = None,
    ):
        if len(label_rows) != len(references):
            raise ValueError(f"{len(label_rows)} label rows but {len(references)} references")
        if input_rows is not None and len(input_rows) != len(label_rows):
            raise ValueError(f"{len(input_rows)} input rows but {len(label_rows)} label rows")
        self.references = list(references)
        self._by_target: dict[tuple, list[int]] = defaultdict(list)
        self._by_pair: dict[tuple, list[int]] | None = None if input_rows is None else defaultdict(list)
        for index, row in enumerate(label_rows):
            target = tuple(int(t) for t in row)
            self._by_target[target].append(index)
            if input_rows is not None:
                self._by_pair[(tuple(int(t) for t in input_rows[index]), target)].append(index)

    def positions(self, label_ids: np.ndarray, pad_token_id: int, inputs: np.ndarray | None = None) -> list[int | None]:
        """The dataset row of each prediction row, None for a repeat; an error when a row is not in the dataset."""

        def ids(row) -> tuple[int, ...]:
            return tuple(int(t) for t in row if t != IGNORE_INDEX and t != pad_token_id)

        by_pair = self._by_pair is not None and inputs is not None
        rows = self._by_pair if by_pair else self._by_target
        taken: dict[tuple, int] = defaultdict(int)
        positions = []
        for index, row in enumerate(np.asarray(label_ids)):
            key = (ids(np.asarray(inputs)[index]), ids(row)) if by_pair else ids(row)
            candidates = rows.get(key)
            if not candidates:
                raise ValueError(f"a prediction row's ids {list(ids(row))[:12]}... match no row of this split")
            positions.append(candidates[taken[key]] if taken[key] < len(candidates) else None)
            taken[key] += 1
        return positions


def decode_generated(tokenizer, token_ids: np.ndarray) -> list[str]:
    """Generated ids (padded with -100 across batches by the Trainer) as detokenized text."""
    token_ids = np.where(np.asarray(token_ids) == IGNORE_INDEX, tokenizer.pad_token_id, token_ids)
    return [text.strip() for text in tokenizer.batch_decode(token_ids, skip_special_tokens=True)]


def generated_lengths(token_ids: np.ndarray, pad_token_id: int, eos_token_id: int | None) -> np.ndarray:
    """Tokens per generated row up to its first end-of-sequence token (included).

    Beam search fills a finished hypothesis with end-of-sequence tokens up to the batch's longest, and the
    Trainer pads across batches with -100: neither is part of the translation.
    """
    token_ids = np.asarray(token_ids)
    if token_ids.ndim != 2 or token_ids.shape[1] == 0:
        return np.zeros(len(token_ids), dtype=np.int64)
    real = (token_ids != IGNORE_INDEX) & (token_ids != pad_token_id)
    if eos_token_id is not None:
        is_eos = token_ids == eos_token_id
        after_first_eos = (np.cumsum(is_eos, axis=1) - is_eos) > 0
        real &= ~after_first_eos
    return real.sum(-1)


# More scores of one split's hypotheses: (detokenised hypotheses, the dataset row of each) -> {name: score}.
ExtraScores = Callable[[list[str], list[int]], dict[str, float]]


class BleuMetric:
    """`compute_metrics` for Seq2SeqTrainer: sacreBLEU and chrF of generated text against raw references.

    With a `ReferenceIndex` the references are the split's own lines (matched through `label_ids`);
    without one they are the decoded labels (tokenizer-normalised text, for data without raw lines).
    `extra_scores` adds scores of a convention of its own (say, BLEU against references tokenised another way),
    given the hypotheses and the split row of each. `gen_len` is the mean generated length in tokens.
    """

    def __init__(self, tokenizer, references: ReferenceIndex | None = None, extra_scores: ExtraScores | None = None):
        self.tokenizer = tokenizer
        self.index = references
        self.extra_scores = extra_scores
        self.last_hypotheses: list[str] = []
        self.last_positions: list[int] = []

    def __call__(self, prediction) -> dict[str, float]:
        hypotheses = decode_generated(self.tokenizer, prediction.predictions)
        lengths = generated_lengths(prediction.predictions, self.tokenizer.pad_token_id, self.tokenizer.eos_token_id)
        if self.index is not None:
            inputs = getattr(prediction, "inputs", None)
            positions = self.index.positions(prediction.label_ids, self.tokenizer.pad_token_id, inputs)
            scored = [row for row, position in enumerate(positions) if position is not None]  # repeats left out
            hypotheses, lengths = [hypotheses[row] for row in scored], lengths[scored]
            positions = [positions[row] for row in scored]
            references = [self.index.references[i] for i in positions]
        else:
            positions = list(range(len(hypotheses)))
            references = decode_generated(self.tokenizer, prediction.label_ids)
        self.last_hypotheses, self.last_positions = hypotheses, positions
        scores = {"bleu": bleu(hypotheses, references), "chrf": chrf(hypotheses, references)}
        if self.extra_scores is not None:
            scores.update(self.extra_scores(hypotheses, positions))
        scores["gen_len"] = float(np.mean(lengths)) if len(lengths) else 0.0
        return scores

    def in_dataset_order(self) -> list[str]:
        """The hypotheses of the last call, reordered to the split's row order."""
        ordered = [""] * len(self.last_positions)
        for hypothesis, position in zip(self.last_hypotheses, self.last_positions):
            ordered[position] = hypothesis
        return ordered


def translation_metrics(
    tokenizer,
    splits: Mapping,
    tokenized: Mapping,
    target_lang: str,
    extra_scores: Mapping[str, ExtraScores] | None = None,
) -> Callable[[str], BleuMetric]:
    """``metric(split)``: a fresh :class:`BleuMetric` for ``"validation"`` or ``"test"`` (where ``splits`` has it)
    against the split's raw ``target_lang`` lines (of its ``translation`` column), matched to the rows of
    ``tokenized[split]`` through their labels; ``extra_scores[split]`` adds that split's own scores."""
    references = {
        split: ReferenceIndex(
            tokenized[split]["labels"],
            [pair[target_lang] for pair in splits[split]["translation"]],
            tokenized[split]["input_ids"],
        )
        for split in ("validation", "test")
        if split in splits
    }

    def metric(split: str) -> BleuMetric:
        return BleuMetric(tokenizer, references[split], (extra_scores or {}).get(split))

    return metric


def select_and_score(
    trainer,
    test_dataset,
    metric: Callable[[str], BleuMetric],
    *,
    num_beams: int,
    length_penalties: Sequence[float],
    selected_on: str = "bleu",
) -> tuple[dict, list[str] | None]:
    """Beam search's length penalty chosen on the validation set (the trainer's eval dataset), then the test set
    decoded once with it and once greedily: the scores, and the beam search's test hypotheses in the test set's
    order (None without a ``test_dataset``; only validation is scored then).

    ``trainer`` is a ``Seq2SeqTrainer``; ``metric(split)`` gives a fresh :class:`BleuMetric` for ``"validation"``
    or ``"test"`` (:func:`translation_metrics`). The penalty with the highest validation ``selected_on`` score
    (one of the metric's names) is chosen and becomes the model's generation default. The results hold each
    split's scores (``eval_*``, ``test_*``, ``eval_greedy_*``, ``test_greedy_*``), ``length_penalty``,
    ``selected_on`` and, with several penalties, ``eval_<selected_on>_by_length_penalty``.
    """
    penalties = list(dict.fromkeys(length_penalties))
    # The predictions carry their sources, so that each is put back on its own row (ReferenceIndex).
    args = getattr(trainer, "args", None)
    if args is not None and "inputs" not in (args.include_for_metrics or []):
        args.include_for_metrics = [*(args.include_for_metrics or []), "inputs"]
    trainer.compute_metrics = metric("validation")
    by_penalty = {}
    for penalty in penalties:
        by_penalty[penalty] = trainer.evaluate(metric_key_prefix="eval", num_beams=num_beams, length_penalty=penalty)
        logger.info(
            "length penalty %s: validation %s %.2f", penalty, selected_on, by_penalty[penalty][f"eval_{selected_on}"]
        )
    length_penalty = max(penalties, key=lambda penalty: by_penalty[penalty][f"eval_{selected_on}"])
    results = dict(by_penalty[length_penalty])
    if len(penalties) > 1:
        results[f"eval_{selected_on}_by_length_penalty"] = {
            str(penalty): scores[f"eval_{selected_on}"] for penalty, scores in by_penalty.items()
        }
    results["length_penalty"] = length_penalty
    results["selected_on"] = f"eval_{selected_on}"
    trainer.model.generation_config.length_penalty = length_penalty

    test_hypotheses = None
    test_metric = metric("test") if test_dataset is not None else None
    if test_metric is not None:
        trainer.compute_metrics = test_metric
        beam = {"length_penalty": length_penalty} if num_beams > 1 else {}
        results.update(trainer.predict(test_dataset, metric_key_prefix="test", num_beams=num_beams, **beam).metrics)
        test_hypotheses = test_metric.in_dataset_order()
    trainer.compute_metrics = metric("validation")
    results.update(trainer.evaluate(metric_key_prefix="eval_greedy", num_beams=1))
    if test_metric is not None:
        trainer.compute_metrics = test_metric
        results.update(trainer.predict(test_dataset, metric_key_prefix="test_greedy", num_beams=1).metrics)
    return results, test_hypotheses
