"""hf_transformer.metrics: sacreBLEU's BLEU and chrF, paired bootstrap resampling, and BLEU inside a Seq2SeqTrainer
(each generated row scored against its own reference line, whatever order the Trainer returns rows in)."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch
from transformers.trainer_utils import EvalPrediction

from hf_transformer.metrics import (
    BleuMetric,
    ReferenceIndex,
    bleu,
    chrf,
    generated_lengths,
    paired_bootstrap,
    require_scorers,
    select_and_score,
)

WORDS = ["a", "dog", "cat", "man", "woman", "runs", "sits", "on", "the", "grass", "red", "ball", "big", "small"]


def test_bleu_is_sacrebleu_s_default_and_tokenize_none_scores_tokens_as_they_are():
    hypotheses = ["A Dog runs on the grass.", "Two MEN, sitting."]
    assert bleu(hypotheses, hypotheses) == pytest.approx(100.0)
    assert bleu(hypotheses, ["a dog runs on the grass.", "two men, sitting."]) < 60  # cased
    # Already tokenised text: 13a would split "grass." but tokenize="none" keeps it one token.
    tokens, text = ["a dog runs on the grass ."], ["a dog runs on the grass."]
    assert bleu(tokens, text) == pytest.approx(100.0)
    assert bleu(tokens, text, tokenize="none") < 100.0
    assert chrf(text, text) == pytest.approx(100.0) and chrf(["a cat sits"], text) < 50
    with pytest.raises(ValueError, match="2 hypotheses but 1 references"):
        bleu(hypotheses, hypotheses[:1])


def test_a_missing_scorer_is_named_with_its_install():
    require_scorers()  # sacreBLEU is installed here
    with pytest.raises(
        ImportError, match="needs a_scorer_that_is_not_installed: pip install 'hf_transformer\\[train\\]'"
    ):
        require_scorers(("sacrebleu", "a_scorer_that_is_not_installed"))


def _sentences(count: int, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 7))) for _ in range(count)]


def _bootstrap_systems(references: list[str]) -> dict[str, list[str]]:
    """A baseline that drops each sentence's last word, the references themselves (clearly better), and the
    baseline with one sentence mended (alike but for chance)."""
    baseline = [" ".join(line.split()[:-1]) for line in references]
    return {
        "baseline": baseline,
        "references": list(references),
        "one sentence mended": [references[0], *baseline[1:]],
    }


@pytest.mark.parametrize("tokenize", [None, "none"])
def test_paired_bootstrap_scores_as_bleu_and_tells_a_real_difference_from_chance(tokenize):
    references = _sentences(300)
    systems = _bootstrap_systems(references)
    records = paired_bootstrap(systems, references, tokenize=tokenize, samples=300)
    expected = [bleu(lines, references, tokenize=tokenize) for lines in systems.values()]
    assert [record["name"] for record in records] == list(systems)
    assert [record["score"] for record in records] == pytest.approx(expected)
    assert records[1]["score"] == pytest.approx(100.0)
    baseline, better, alike = records
    assert baseline["p_value"] is None and baseline["ci"] > 0
    assert baseline["mean"] == pytest.approx(baseline["score"], abs=baseline["ci"])
    assert better["p_value"] < 0.01 and alike["p_value"] > 0.05


def test_paired_bootstrap_refuses_what_it_cannot_compare():
    with pytest.raises(ValueError, match="references: 2 lines but 3 references"):
        paired_bootstrap({"baseline": ["a", "b", "c"], "references": ["a", "b"]}, ["a", "b", "c"])
    with pytest.raises(ValueError, match="at least one system; got 1"):
        paired_bootstrap({"baseline": ["a"]}, ["a"])
    with pytest.raises(ValueError, match="at least 1; got 0"):
        paired_bootstrap({"baseline": ["a"], "other": ["b"]}, ["a"], samples=0)


class _Tokenizer:
    """Word-level stand-in: id = index in `words` + 7, ids 0-6 special (0 pad, 3 eos)."""

    pad_token_id = 0
    eos_token_id = 3

    def __init__(self, words):
        self.words = words

    def batch_decode(self, rows, skip_special_tokens=True):
        return [" ".join(self.words[i - 7] for i in row if i >= 7) for row in rows]


def _padded(rows, width=8):
    """Token rows padded with -100 to one width, as the Trainer hands predictions and labels to the metric."""
    return np.array([row + [-100] * (width - len(row)) for row in rows])


def test_bleu_metric_scores_against_the_right_references():
    words = ["a", "b", "c", "d", "e", "f", "g", "h"]
    tokenizer = _Tokenizer(words)
    references = ["a b c d", "e f g h", "b a d c", "h g f e"]
    label_rows = [[words.index(w) + 7 for w in ref.split()] + [3] for ref in references]
    index = ReferenceIndex(label_rows, references)
    metric = BleuMetric(tokenizer, index)

    generated = [[2, *row] for row in label_rows]  # a perfect model, with the start token in front
    perfect = metric(EvalPrediction(predictions=_padded(generated), label_ids=_padded(label_rows)))
    assert perfect["bleu"] == pytest.approx(100.0)

    # Rows returned in reverse order (as length-grouped evaluation does) still score 100 and are put back.
    reversed_rows = EvalPrediction(predictions=_padded(generated[::-1]), label_ids=_padded(label_rows[::-1]))
    assert metric(reversed_rows)["bleu"] == pytest.approx(100.0)
    assert metric.in_dataset_order() == references

    # Scoring by position instead would pair each hypothesis with another sentence's reference.
    import sacrebleu

    assert sacrebleu.corpus_bleu(references[::-1], [references]).score < 50

    # A prediction whose labels are not in the split is an error, not a silent misalignment.
    with pytest.raises(ValueError, match="match no row of this split"):
        metric(EvalPrediction(predictions=_padded([[2, 7, 3]]), label_ids=_padded([[7, 3]])))


def test_generated_length_stops_at_the_first_end_of_sequence_token():
    # Beam search fills finished rows with end-of-sequence tokens (3); the Trainer pads batches with -100.
    rows = np.array([[2, 8, 9, 3, 3, 3], [2, 8, 9, 10, 11, 3], [2, 8, 3, -100, -100, -100], [2, 8, 9, 10, 11, 12]])
    assert generated_lengths(rows, pad_token_id=0, eos_token_id=3).tolist() == [4, 6, 3, 6]
    metric = BleuMetric(_Tokenizer(["a", "b", "c", "d", "e", "f"]))
    scores = metric(EvalPrediction(predictions=rows, label_ids=rows[:, 1:]))
    assert scores["gen_len"] == pytest.approx((4 + 6 + 3 + 6) / 4)


def test_rows_of_one_target_keep_their_own_hypotheses_where_the_prediction_carries_its_sources():
    # Two rows share a target; evaluated in length order (reversed here), each hypothesis must go back to its row.
    label_rows, input_rows = [[7, 8, 3], [7, 8, 3], [9, 3]], [[5, 3], [5, 6, 6, 6, 3], [6, 3]]
    index = ReferenceIndex(label_rows, ["a b", "a b", "c"], input_rows)
    order = [1, 2, 0]
    prediction = EvalPrediction(
        predictions=_padded([[2, 10 + row, 3] for row in order]),
        label_ids=_padded([label_rows[row] for row in order]),
        inputs=_padded([input_rows[row] for row in order]),
    )
    assert index.positions(prediction.label_ids, 0, prediction.inputs) == order
    assert index.positions(prediction.label_ids, 0) == [0, 2, 1]  # by the target alone: rows 0 and 1 swapped
    words = ["a", "b", "c", "d", "e", "f", "g", "h"]
    metric = BleuMetric(_Tokenizer(words), index)
    metric(prediction)
    assert metric.in_dataset_order() == _Tokenizer(words).batch_decode([[10], [11], [12]])


def test_reference_index_takes_duplicate_rows_in_turn():
    index = ReferenceIndex([[5, 3], [6, 3], [5, 3]], ["x", "y", "x "])
    assert index.positions(np.array([[5, 3], [5, 3], [6, 3]]), pad_token_id=0) == [0, 2, 1]
    # Beyond a key's rows, a row is a repeat (None): a multi-process evaluation pads its last batches with them.
    assert index.positions(np.array([[6, 3], [5, 3], [6, 3], [5, 3], [5, 3]]), pad_token_id=0) == [1, 0, None, 2, None]


def test_bleu_metric_scores_each_row_once_when_evaluation_repeats_rows():
    # Two processes decode 3 + 3 rows of a 4-row split: the sampler repeats the first two rows (the longest, when
    # grouped by length). A repeated bad hypothesis must not count twice, and the output keeps 4 lines.
    words = ["a", "b", "c", "d", "e", "f", "g", "h"]
    references = ["a b c d e f", "e f g h", "b a d c", "h g f e"]
    label_rows = [[words.index(w) + 7 for w in ref.split()] + [3] for ref in references]
    metric = BleuMetric(_Tokenizer(words), ReferenceIndex(label_rows, references))
    hypotheses = [[2, *[words.index(w) + 7 for w in text.split()], 3] for text in ["h h h h", *references[1:]]]
    order = [0, 1, 2, 3, 0, 1]

    once = metric(EvalPrediction(predictions=_padded(hypotheses), label_ids=_padded(label_rows)))
    repeated = metric(
        EvalPrediction(
            predictions=_padded([hypotheses[i] for i in order]), label_ids=_padded([label_rows[i] for i in order])
        )
    )
    assert repeated == pytest.approx(once)
    assert metric.in_dataset_order() == ["h h h h", *references[1:]]


def test_bleu_metric_adds_the_extra_scores_of_each_row_s_own_line():
    words = ["a", "b", "c", "d", "e", "f", "g", "h"]
    references = ["a b c d", "e f g h", "b a d c"]
    label_rows = [[words.index(w) + 7 for w in ref.split()] + [3] for ref in references]
    seen = []

    def row_numbers(hypotheses, positions):
        seen.append((hypotheses, positions))
        return {"rows": float(sum(positions))}

    metric = BleuMetric(_Tokenizer(words), ReferenceIndex(label_rows, references), extra_scores=row_numbers)
    order = [2, 0, 1]
    generated = [[2, *label_rows[i]] for i in order]
    scores = metric(EvalPrediction(predictions=_padded(generated), label_ids=_padded([label_rows[i] for i in order])))
    assert list(scores) == ["bleu", "chrf", "rows", "gen_len"] and scores["rows"] == 3.0
    assert seen == [([references[i] for i in order], order)]


class _ScriptedTrainer:
    """A stand-in Seq2SeqTrainer: validation BLEU by length penalty from ``validation``; each call recorded with the
    split its compute_metrics scores."""

    def __init__(self, validation: dict[float, float]):
        from types import SimpleNamespace

        self.validation = validation
        self.model = SimpleNamespace(generation_config=SimpleNamespace(length_penalty=1.0))
        self.calls = []

    def evaluate(self, metric_key_prefix, num_beams, length_penalty=None):
        self.calls.append((self.compute_metrics.split, metric_key_prefix, num_beams, length_penalty))
        score = self.validation[length_penalty] if num_beams > 1 else 1.0
        return {f"{metric_key_prefix}_bleu": score, f"{metric_key_prefix}_chrf": 100 - score}

    def predict(self, dataset, metric_key_prefix, num_beams, length_penalty=None):
        from types import SimpleNamespace

        self.calls.append((self.compute_metrics.split, metric_key_prefix, num_beams, length_penalty))
        self.compute_metrics.last_hypotheses = [f"{metric_key_prefix} second", f"{metric_key_prefix} first"]
        self.compute_metrics.last_positions = [1, 0]
        return SimpleNamespace(metrics={f"{metric_key_prefix}_bleu": 2.0 if num_beams > 1 else 1.5})


def _split_metric(split: str) -> BleuMetric:
    metric = BleuMetric(tokenizer=None)
    metric.split = split
    return metric


@pytest.mark.parametrize("selected_on, chosen", [("bleu", 1.4), ("chrf", 0.6)])
def test_select_and_score_chooses_the_length_penalty_on_validation_then_decodes_test_with_it(selected_on, chosen):
    trainer = _ScriptedTrainer({0.6: 20.0, 1.0: 25.0, 1.4: 30.0})
    results, hypotheses = select_and_score(
        trainer,
        ["test rows"],
        _split_metric,
        num_beams=5,
        length_penalties=[0.6, 1.0, 1.4, 1.0],
        selected_on=selected_on,
    )
    # Each penalty once on validation; test once with the choice and once greedily; validation once greedily.
    assert trainer.calls == [
        ("validation", "eval", 5, 0.6),
        ("validation", "eval", 5, 1.0),
        ("validation", "eval", 5, 1.4),
        ("test", "test", 5, chosen),
        ("validation", "eval_greedy", 1, None),
        ("test", "test_greedy", 1, None),
    ]
    assert results["length_penalty"] == chosen == trainer.model.generation_config.length_penalty
    assert results["selected_on"] == f"eval_{selected_on}"
    by_penalty = results[f"eval_{selected_on}_by_length_penalty"]
    assert list(by_penalty) == ["0.6", "1.0", "1.4"] and results[f"eval_{selected_on}"] == by_penalty[str(chosen)]
    assert results["test_bleu"] == 2.0 and results["test_greedy_bleu"] == 1.5 and results["eval_greedy_bleu"] == 1.0
    assert hypotheses == ["test first", "test second"]  # the beam search's, in the test set's order


def test_select_and_score_without_a_test_set_scores_validation_alone():
    trainer = _ScriptedTrainer({1.0: 25.0})
    results, hypotheses = select_and_score(trainer, None, _split_metric, num_beams=3, length_penalties=[1.0])
    assert hypotheses is None and not any(key.startswith("test") for key in results)
    assert "eval_bleu_by_length_penalty" not in results and results["length_penalty"] == 1.0
    assert [call[:2] for call in trainer.calls] == [("validation", "eval"), ("validation", "eval_greedy")]


@pytest.mark.slow
def test_select_and_score_gives_each_test_row_its_own_translation_when_targets_repeat(tmp_path):
    # Evaluated in length order (group_by_length), rows of one target used to swap translations in the output file.
    from datasets import Dataset
    from transformers import AutoModelForSeq2SeqLM, Seq2SeqTrainer, Seq2SeqTrainingArguments

    from hf_transformer.data import seq2seq_collator
    from hf_transformer.metrics import select_and_score, translation_metrics
    from tests.helpers.models import save_random_translator, sentence_tokenizer

    tokenizer = sentence_tokenizer()
    folder = save_random_translator(tmp_path / "model", tokenizer, max_position_embeddings=32, max_new_tokens=6)
    model = AutoModelForSeq2SeqLM.from_pretrained(folder).eval()
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():  # far from the initialisation: the translations depend on the source
        for parameter in model.parameters():
            if parameter.dim() > 1:
                parameter.normal_(0.0, 1.0, generator=generator)
    sources = ["a dog .", "a man rides a red bike near the house .", "two dogs play .", "the snow and the house ."]
    targets = ["x y", "x y", "z", "z"]
    tokenized = Dataset.from_dict(dict(tokenizer(sources, text_target=targets)))
    pairs = Dataset.from_dict({"translation": [{"en": s, "de": t} for s, t in zip(sources, targets)]})
    arguments = Seq2SeqTrainingArguments(
        output_dir=str(tmp_path / "run"), predict_with_generate=True, per_device_eval_batch_size=1,
        train_sampling_strategy="group_by_length", report_to="none", use_cpu=True,
    )  # fmt: skip
    trainer = Seq2SeqTrainer(
        model=model, args=arguments, eval_dataset=tokenized, data_collator=seq2seq_collator(tokenizer, model)
    )
    metric = translation_metrics(
        tokenizer, {"validation": pairs, "test": pairs}, {"validation": tokenized, "test": tokenized}, "de"
    )
    _, hypotheses = select_and_score(trainer, tokenized, metric, num_beams=1, length_penalties=[1.0])
    own = [
        tokenizer.decode(
            model.generate(**tokenizer([source], return_tensors="pt"), num_beams=1)[0], skip_special_tokens=True
        )
        for source in sources
    ]
    own = [text.strip() for text in own]
    assert own[0] != own[1] and own[2] != own[3]  # the rows of one target translate differently
    assert hypotheses == own
