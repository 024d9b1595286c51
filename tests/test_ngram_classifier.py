"""The classifier's n-gram score (`classifier_ngram_buckets`): its n-grams, its features, its fit and its folder."""

import random

import pytest
import torch
from transformers import AutoModelForSequenceClassification

from hf_transformer import TransformerForSequenceClassification
from hf_transformer.configuration_transformer import InvalidConfigError
from hf_transformer.modeling_transformer import TokenNgramClassifier, token_ngram_hashes
from hf_transformer.ngram_classifier import (
    canonical_token_ids,
    feature_matrix,
    fit_ngram_classifier,
    ngram_logits,
    padded,
)
from tests.helpers.models import tiny_config

BUCKETS = 4096


def ngram_model(**overrides) -> TransformerForSequenceClassification:
    torch.manual_seed(0)
    config = tiny_config(num_labels=2, classifier_ngram_buckets=BUCKETS, **overrides)
    return TransformerForSequenceClassification(config).eval()


def test_a_sentence_has_the_same_ngrams_however_it_is_padded():
    sentence = torch.tensor([5, 9, 5, 9, 7])
    alone = token_ngram_hashes(sentence[None], torch.ones(1, 5, dtype=torch.bool), order=3, buckets=BUCKETS)
    right = torch.cat([sentence, torch.zeros(3, dtype=torch.long)])[None]
    left = torch.cat([torch.zeros(3, dtype=torch.long), sentence])[None]
    found = []
    for ids in (sentence[None], right, left):
        hashes, exists = token_ngram_hashes(ids, ids != 0, order=3, buckets=BUCKETS)
        found.append(sorted(hashes[exists].tolist()))
    assert found[0] == found[1] == found[2]
    assert len(found[0]) == 5 + 4 + 3 and bool(alone[1].all())
    # The run (5, 9) twice hashes alike, (9, 5) is another run, and the token 5 alone another again.
    unigrams, bigrams = alone[0][0, :5].tolist(), alone[0][0, 5:9].tolist()
    assert bigrams[0] == bigrams[2] and bigrams[0] != bigrams[1] and unigrams[0] == unigrams[2] != bigrams[0]


def test_the_score_is_the_sparse_product_of_the_fitted_features():
    head = TokenNgramClassifier(tiny_config(num_labels=3, classifier_ngram_buckets=BUCKETS))
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        head.weight.normal_(generator=generator)
        head.bias.normal_(generator=generator)
        head.idf.uniform_(0.5, 3.0, generator=generator)
        head.idf[::7] = 0.0  # n-grams too rare to keep
    rows = [[4, 5, 6, 5, 4, 5, 6], [7, 8], [9], [4, 5, 6, 5]]
    ids, real = padded(rows, pad_token_id=0)
    features = feature_matrix(head, ids, real)
    expected = torch.sparse.mm(features, head.weight) + head.bias
    torch.testing.assert_close(head(ids, real), expected, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(ngram_logits(head, rows, pad_token_id=0), expected, rtol=1e-5, atol=1e-5)
    # Each row's kept n-gram occurrences have unit length (a row with none kept: zero).
    values = head.features(ids, real)[1]
    kept = (values != 0).any(1)
    assert kept.sum() >= 3
    torch.testing.assert_close(values.square().sum(1)[kept], torch.ones(int(kept.sum())), rtol=1e-5, atol=1e-5)


class Vocabulary:
    def __init__(self, pieces):
        self.pieces = pieces

    def get_vocab(self):
        return {piece: i for i, piece in enumerate(self.pieces)}


def test_word_initial_pieces_read_as_the_same_piece_inside_a_word():
    vocabulary = Vocabulary(["<pad>", "▁", "▁film", "film", "▁good", "bad"])
    assert canonical_token_ids(vocabulary, 7).tolist() == [0, 1, 3, 3, 4, 5, 6]


def ordered_pairs(count: int, seed: int) -> tuple[list[list[int]], list[int]]:
    """Rows holding tokens 10 and 11 in both classes; the label is their order (10 before 11: class 1), which no
    single token tells."""
    rng = random.Random(seed)
    rows, labels = [], []
    for _ in range(count):
        label = rng.randint(0, 1)
        pair = [10, 11] if label else [11, 10]
        fillers = [rng.randrange(12, 40) for _ in range(rng.randint(1, 5))]
        cut = rng.randint(0, len(fillers))
        rows.append([2, *fillers[:cut], *pair, *fillers[cut:], 3])
        labels.append(label)
    return rows, labels


def test_the_fit_finds_what_only_an_ngram_tells_and_weighs_it_above_a_blind_encoder():
    model = ngram_model()
    train_rows, train_labels = ordered_pairs(400, seed=1)
    validation_rows, validation_labels = ordered_pairs(200, seed=2)
    blind_encoder = torch.randn(200, 2, generator=torch.Generator().manual_seed(3)) * 0.1
    report = fit_ngram_classifier(
        model, Vocabulary([]), train_rows, train_labels, validation_rows, validation_labels, blind_encoder
    )
    assert report["eval_ngram_accuracy"] > 0.95 and report["eval_encoder_accuracy"] < 0.65
    assert report["ngram_logit_scale"] > 10 * report["encoder_logit_scale"]
    # The whole model, raw ids in, now classifies the order.
    ids, real = padded(validation_rows, pad_token_id=0)
    with torch.no_grad():
        predicted = model(input_ids=ids, attention_mask=real).logits.argmax(-1)
    assert (predicted == torch.tensor(validation_labels)).float().mean() > 0.95
    # Tokens seen in fewer than two training rows are dropped: no bucket is kept for them.
    assert 0 < report["ngram_buckets_kept"] < BUCKETS


def test_a_fitted_model_saves_and_loads_whole(tmp_path):
    model = ngram_model()
    rows, labels = ordered_pairs(200, seed=1)
    fit_ngram_classifier(model, Vocabulary([]), rows, labels, rows[:50], labels[:50], torch.zeros(50, 2))
    model.save_pretrained(tmp_path)
    loaded = AutoModelForSequenceClassification.from_pretrained(tmp_path).eval()
    for name in ("weight", "bias", "idf", "canonical_ids"):
        torch.testing.assert_close(getattr(loaded.ngram_classifier, name), getattr(model.ngram_classifier, name))
    ids, real = padded(rows[:8], pad_token_id=0)
    left = torch.stack([torch.roll(row, int((~mask).sum())) for row, mask in zip(ids, real)])  # padding on the left
    with torch.no_grad():
        expected = model(input_ids=ids, attention_mask=real).logits
        torch.testing.assert_close(loaded(input_ids=ids, attention_mask=real).logits, expected)
        torch.testing.assert_close(loaded(input_ids=left, attention_mask=left != 0).logits, expected)


def test_without_input_ids_the_ngram_score_is_refused_by_name():
    model = ngram_model()
    with pytest.raises(ValueError, match="classifier_ngram_buckets.*input_ids"):
        model(inputs_embeds=torch.randn(1, 4, 32))


def test_fitting_a_model_without_the_score_is_refused():
    model = TransformerForSequenceClassification(tiny_config(num_labels=2))
    assert model.ngram_classifier is None
    with pytest.raises(ValueError, match="classifier_ngram_buckets"):
        fit_ngram_classifier(model, Vocabulary([]), [[4]], [0], [[4]], [0], torch.zeros(1, 2))


@pytest.mark.parametrize(
    "settings", [dict(classifier_ngram_buckets=-1), dict(classifier_ngram_buckets=True), dict(classifier_ngram_order=0)]
)
def test_impossible_ngram_settings_name_the_field(settings):
    with pytest.raises(InvalidConfigError, match=next(iter(settings))):
        tiny_config(num_labels=2, **settings)


@pytest.mark.slow
def test_a_fitted_model_exports_to_onnx_with_its_ngram_score(tmp_path):
    import numpy as np
    import onnxruntime

    from hf_transformer.export import to_onnx

    model = ngram_model()
    rows, labels = ordered_pairs(200, seed=1)
    fit_ngram_classifier(model, Vocabulary([]), rows, labels, rows[:50], labels[:50], torch.zeros(50, 2))
    model.save_pretrained(tmp_path / "model")
    session = onnxruntime.InferenceSession(str(to_onnx(tmp_path / "model", tmp_path / "onnx") / "classifier.onnx"))
    for length in range(1, 6):  # shorter and longer than the n-grams
        ids = torch.tensor([[11, 10, 12, 13, 14][:length], [10, 11, 15, 16, 17][:length]])
        with torch.no_grad():
            expected = model(input_ids=ids).logits.numpy()
        feeds = {"input_ids": ids.numpy(), "attention_mask": np.ones(ids.shape, dtype=np.int64)}
        np.testing.assert_allclose(session.run(None, feeds)[0], expected, rtol=1e-4, atol=1e-4)
    assert expected[:, 1].tolist()[0] < expected[:, 1].tolist()[1]  # the order of 10 and 11 is read
