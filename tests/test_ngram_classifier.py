"""The classifier's n-gram score (`classifier_ngram_buckets`): its n-grams of tokens or characters, its features,
its fit and its folder."""

import contextlib
import random

import pytest
import torch
from transformers import AutoModelForSequenceClassification

from hf_transformer import TransformerForSequenceClassification, modeling_transformer
from hf_transformer.configuration_transformer import InvalidConfigError
from hf_transformer.modeling_transformer import NgramClassifier, ngram_hashes, token_characters_in_a_row
from hf_transformer.ngram_classifier import (
    canonical_token_ids,
    feature_matrix,
    fit_ngram_classifier,
    logistic_regression,
    ngram_logits,
    ngram_score_left_out,
    padded,
    refit_ngram_classifier,
    token_character_table,
)
from hf_transformer.speed import pack_token_characters
from tests.helpers.models import tiny_config

BUCKETS = 4096


def ngram_model(**overrides) -> TransformerForSequenceClassification:
    torch.manual_seed(0)
    config = tiny_config(num_labels=2, classifier_ngram_buckets=BUCKETS, **overrides)
    return TransformerForSequenceClassification(config).eval()


def test_a_sentence_has_the_same_ngrams_however_it_is_padded():
    sentence = torch.tensor([5, 9, 5, 9, 7])
    alone = ngram_hashes(sentence[None], torch.ones(1, 5, dtype=torch.bool), order=3, buckets=BUCKETS)
    right = torch.cat([sentence, torch.zeros(3, dtype=torch.long)])[None]
    left = torch.cat([torch.zeros(3, dtype=torch.long), sentence])[None]
    found = []
    for ids in (sentence[None], right, left):
        hashes, exists = ngram_hashes(ids, ids != 0, order=3, buckets=BUCKETS)
        found.append(sorted(hashes[exists].tolist()))
    assert found[0] == found[1] == found[2]
    assert len(found[0]) == 5 + 4 + 3 and bool(alone[1].all())
    # The run (5, 9) twice hashes alike, (9, 5) is another run, and the token 5 alone another again.
    unigrams, bigrams = alone[0][0, :5].tolist(), alone[0][0, 5:9].tolist()
    assert bigrams[0] == bigrams[2] and bigrams[0] != bigrams[1] and unigrams[0] == unigrams[2] != bigrams[0]


UNITS = ["token", "character", "token+character"]


@pytest.mark.parametrize("unit", UNITS)
def test_the_score_is_the_sparse_product_of_the_fitted_features(unit):
    config = tiny_config(num_labels=3, classifier_ngram_buckets=BUCKETS, classifier_ngram_unit=unit)
    head = NgramClassifier(config)
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        if unit != "token":  # token i reads as i % 3 + 1 characters
            for i in range(config.vocab_size):
                head.token_characters[i, : i % 3 + 1] = torch.arange(i % 3 + 1) + 0xAC00 + i
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
    # Each row's kept n-gram occurrences of each kind (tokens, characters) have unit length (none kept: zero).
    values = head.features(ids, real)[1]
    kinds = head.ngrams(ids, real)
    assert len(kinds) == (2 if unit == "token+character" else 1)
    for kind in values.split([hashes.shape[1] for hashes, _ in kinds], dim=1):
        kept = (kind != 0).any(1)
        assert kept.sum() >= 3
        torch.testing.assert_close(kind.square().sum(1)[kept], torch.ones(int(kept.sum())), rtol=1e-5, atol=1e-5)


def test_a_run_of_tokens_and_a_run_of_characters_with_the_same_numbers_hash_apart():
    config = tiny_config(
        num_labels=2,
        classifier_ngram_buckets=BUCKETS,
        classifier_ngram_unit="token+character",
        classifier_ngram_order=3,  # the characters'
        classifier_ngram_token_order=2,
    )
    head = NgramClassifier(config)
    with torch.no_grad():  # token i reads as the one character U+i: the two kinds of runs have the same numbers
        head.token_characters[:, 0] = torch.arange(config.vocab_size)
    ids = torch.tensor([[4, 5, 6, 7, 8, 9]])
    (tokens, token_is_real, _, _), (characters, character_is_real, _, _) = head.units(ids, ids != 0)
    assert characters[character_is_real].tolist() == ids[0].tolist() and token_is_real.all()
    (token_runs, token_run_exists), (character_runs, character_run_exists) = head.ngrams(ids, ids != 0)
    token_buckets = set(token_runs[token_run_exists].tolist())
    character_buckets = set(character_runs[character_run_exists].tolist())
    assert len(token_buckets) == 6 + 5 and len(character_buckets) == 6 + 5 + 4  # runs of 1-2 tokens, 1-3 characters
    assert not token_buckets & character_buckets


@pytest.mark.parametrize("num_labels", [2, 3])
def test_the_logistic_regression_reaches_the_penalised_minimum_with_unused_columns_at_zero(num_labels):
    # Against the objective written plainly (softmax over every label, every column, autograd), minimised to
    # convergence: the fit optimises only the used columns, and with two labels only the labels' difference.
    generator = torch.Generator().manual_seed(0)
    count, width, inverse_l2 = 300, 40, 2.0
    dense = torch.rand(count, width, generator=generator) * (torch.rand(count, width, generator=generator) < 0.15)
    dense[:, [3, 17, 29]] = 0.0  # columns no row uses
    labels = torch.randint(0, num_labels, (count,), generator=generator)
    dense[torch.arange(count), labels] += 0.5  # something to learn
    features = dense.to_sparse()
    weight, bias = logistic_regression(features, labels, num_labels, inverse_l2, max_iter=500)
    assert weight.shape == (width, num_labels) and bias.shape == (num_labels,)
    assert not weight[[3, 17, 29]].any()

    def objective(w, b):
        return torch.nn.functional.cross_entropy(dense @ w + b, labels) + w.square().sum() / (2 * inverse_l2 * count)

    reference_weight = torch.zeros(width, num_labels, requires_grad=True)
    reference_bias = torch.zeros(num_labels, requires_grad=True)
    optimizer = torch.optim.LBFGS(
        [reference_weight, reference_bias], max_iter=2000, tolerance_grad=1e-9, line_search_fn="strong_wolfe"
    )

    def closure():
        optimizer.zero_grad()
        loss = objective(reference_weight, reference_bias)
        loss.backward()
        return loss

    optimizer.step(closure)
    with torch.no_grad():
        torch.testing.assert_close(
            objective(weight, bias), objective(reference_weight, reference_bias), atol=1e-6, rtol=0
        )
        # The minimum is unique up to a shift of the bias shared by every label (the softmax ignores it).
        torch.testing.assert_close(weight, reference_weight, atol=1e-3, rtol=0)
        torch.testing.assert_close(bias - bias.mean(), reference_bias - reference_bias.mean(), atol=1e-3, rtol=0)


@pytest.mark.parametrize("num_labels", [2, 3])
def test_the_logistic_regression_started_at_its_minimum_stays_there(num_labels):
    # A start is read in the fit's own terms (with two labels: their difference); one step from the minimum found
    # from zero must not leave it.
    generator = torch.Generator().manual_seed(1)
    dense = torch.rand(200, 30, generator=generator) * (torch.rand(200, 30, generator=generator) < 0.2)
    labels = torch.randint(0, num_labels, (200,), generator=generator)
    dense[torch.arange(200), labels] += 0.5
    features = dense.to_sparse()
    weight, bias = logistic_regression(features, labels, num_labels, 2.0, max_iter=500)
    again, again_bias = logistic_regression(features, labels, num_labels, 2.0, max_iter=1, start=(weight, bias))
    torch.testing.assert_close(again, weight, atol=1e-4, rtol=0)
    torch.testing.assert_close(again_bias - again_bias.mean(), bias - bias.mean(), atol=1e-4, rtol=0)


class Vocabulary:
    """What the fit reads of a tokenizer: its pieces, which are special, and the unknown token."""

    def __init__(self, pieces, special=("<pad>", "<unk>", "<s>", "</s>")):
        self.pieces = pieces
        self.all_special_tokens = [piece for piece in special if piece in pieces]
        self.unk_token = "<unk>"

    def get_vocab(self):
        return {piece: i for i, piece in enumerate(self.pieces)}

    def ids(self, pieces):
        return [self.pieces.index(piece) for piece in pieces]


CHARACTERS = Vocabulary(["<pad>", "<unk>", "<s>", "</s>", "▁ab", "▁a", "b", "bc", "c", "cd", "▁cd", "▁", "x" * 20])


def test_rows_of_token_ids_pad_on_the_right_from_a_list_or_a_datasets_column():
    from datasets import Dataset

    rows = [[5, 6, 7], [], [8], [9, 10, 11, 12]]
    expected = torch.tensor([[5, 6, 7, 0], [0, 0, 0, 0], [8, 0, 0, 0], [9, 10, 11, 12]])
    for given in (rows, Dataset.from_dict({"input_ids": rows})["input_ids"]):
        ids, real = padded(given, pad_token_id=0)
        assert torch.equal(ids, expected)
        assert torch.equal(real, torch.tensor([[1, 1, 1, 0], [0, 0, 0, 0], [1, 0, 0, 0], [1, 1, 1, 1]]).bool())
    ids, real = padded([[4, 2], [3]], pad_token_id=1)
    assert torch.equal(ids, torch.tensor([[4, 2], [3, 1]])) and real.tolist() == [[True, True], [True, False]]


def test_a_tokens_characters_are_its_text_without_the_word_start_mark():
    table = token_character_table(CHARACTERS, 14)
    text = ["".join(map(chr, row[row != 0].tolist())) for row in table]
    assert text[:4] == ["", "\ufffd", "", ""]  # special tokens read as nothing, the unknown token as U+FFFD
    assert text[4:12] == ["ab", "a", "b", "bc", "c", "cd", "cd", ""]
    assert text[12] == "x" * 16 and text[13] == ""  # a long piece is cut; ids past the vocabulary read as nothing


def test_characters_run_across_tokens_and_words_whatever_the_cut_and_the_padding():
    table = token_character_table(CHARACTERS, 13)
    cuts = [["<s>", "▁ab", "c", "▁cd", "</s>"], ["<s>", "▁a", "bc", "▁", "cd", "</s>"]]
    found = []
    for pieces in cuts:
        ids = torch.tensor(CHARACTERS.ids(pieces))
        for padding in ("none", "right", "left"):
            row = {"none": ids, "right": torch.cat([ids, torch.zeros(3, dtype=torch.long)]),
                   "left": torch.cat([torch.zeros(3, dtype=torch.long), ids])}[padding]  # fmt: skip
            characters, real = token_characters_in_a_row(row[None], row[None] != 0, table)
            found.append("".join(map(chr, characters[real].tolist())))
            assert not real[0, real.sum() :].any()  # the characters come first in the row
    assert found == ["abccd"] * 6


def test_the_packing_as_wide_as_the_characters_equals_the_plain_one():
    """speed.pack_token_characters gives the plain packing's columns up to the batch's longest row of characters
    (the plain one has only empty ones after them): tokens of no characters, padding on either side, rows without a
    character, and tables whose rows have an empty slot before a character (the plain packing skips it)."""
    generator = torch.Generator().manual_seed(0)
    widths = set()
    for case in range(200):
        vocab_size, slots = (
            int(torch.randint(low, high, (1,), generator=generator)) for low, high in ((3, 40), (1, 6))
        )
        table = torch.randint(1, 0xD7A4, (vocab_size, slots), generator=generator)
        table *= torch.arange(slots) < torch.randint(0, slots + 1, (vocab_size, 1), generator=generator)
        if case % 3 == 0:
            table *= torch.rand(vocab_size, slots, generator=generator) > 0.3
        batch, length = (int(torch.randint(1, high, (1,), generator=generator)) for high in (6, 10))
        ids = torch.randint(0, vocab_size, (batch, length), generator=generator)
        real = torch.rand(batch, length, generator=generator) > 0.3
        plain, plain_real = token_characters_in_a_row(ids, real, table)
        packed, packed_real = pack_token_characters(ids, real, table, token_characters_in_a_row)
        width = packed.shape[1]
        widths.add(width == max(int(plain_real.sum(1).max()), 1))
        assert torch.equal(packed, plain[:, :width]) and torch.equal(packed_real, plain_real[:, :width]), case
        assert not plain_real[:, width:].any(), case
    assert widths == {True}  # as wide as the longest row's characters, not the tokens' slots


def test_a_classifier_scores_the_same_with_either_packing(monkeypatch):
    model = ngram_model(classifier_ngram_unit="token+character")
    with torch.no_grad():
        model.ngram_classifier.weight.normal_()
        model.ngram_classifier.idf.uniform_(0.5, 2.0)
        model.ngram_classifier.token_characters.copy_(token_character_table(CHARACTERS, model.config.vocab_size))
    ids = torch.tensor(
        [CHARACTERS.ids(["<s>", "▁ab", "c", "▁cd", "</s>"]), CHARACTERS.ids(["<s>", "▁a", "</s>", "<pad>", "<pad>"])]
    )
    mask = ids != CHARACTERS.ids(["<pad>"])[0]
    fast = model(input_ids=ids, attention_mask=mask).logits
    monkeypatch.setattr(
        modeling_transformer, "pack_token_characters", lambda ids, real, table, plain: plain(ids, real, table)
    )
    torch.testing.assert_close(fast, model(input_ids=ids, attention_mask=mask).logits)


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


def train_a_few_steps(model, rows, labels, *, left_out: bool, autocast: bool) -> list[torch.dtype]:
    """Four AdamW steps of 16 rows, the n-gram score frozen (as `train_classifier.py` trains), left out or not."""
    model.train().ngram_classifier.requires_grad_(False)
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    ids, real = padded(rows, pad_token_id=0)
    dtypes = []
    with ngram_score_left_out(model) if left_out else contextlib.nullcontext():
        for start in range(0, 64, 16):
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
                batch = slice(start, start + 16)
                output = model(input_ids=ids[batch], attention_mask=real[batch], labels=torch.tensor(labels[batch]))
            output.loss.backward()
            optimizer.step()
            optimizer.zero_grad()
            dtypes.append(output.logits.dtype)
    return dtypes


@pytest.mark.parametrize("autocast", [False, True], ids=["float32", "bfloat16-autocast"])
@pytest.mark.parametrize("unit", ["token", "character"])
def test_the_unfitted_score_left_out_trains_the_same_weights_bit_for_bit_without_computing_it(unit, autocast):
    rows, labels = ordered_pairs(64, seed=5)
    plain = ngram_model(classifier_ngram_unit=unit)
    plain_dtypes = train_a_few_steps(plain, rows, labels, left_out=False, autocast=autocast)
    left_out = ngram_model(classifier_ngram_unit=unit)
    with pytest.MonkeyPatch.context() as patch:  # the left-out score is never computed
        patch.setattr(NgramClassifier, "forward", lambda *args: pytest.fail("the left-out score was computed"))
        left_out_dtypes = train_a_few_steps(left_out, rows, labels, left_out=True, autocast=autocast)
    assert left_out_dtypes == plain_dtypes == [torch.float32] * 4  # the sum's dtype, under autocast too
    trained, reference = left_out.state_dict(), plain.state_dict()
    assert not torch.equal(reference["classifier.weight"], ngram_model().state_dict()["classifier.weight"])
    assert trained.keys() == reference.keys()
    for name, tensor in reference.items():
        assert torch.equal(trained[name], tensor), name
    assert not left_out.ngram_classifier.left_out  # back in the forward after the block


def test_a_fitted_or_trainable_score_is_not_left_out_nor_fitted_while_left_out():
    model = ngram_model()
    with pytest.raises(ValueError, match="require gradients"):
        with ngram_score_left_out(model):
            pass
    model.ngram_classifier.requires_grad_(False)
    train_rows, train_labels = ordered_pairs(100, seed=1)
    validation_rows, validation_labels = ordered_pairs(50, seed=2)
    arguments = (Vocabulary([]), train_rows, train_labels, validation_rows, validation_labels, torch.zeros(50, 2))
    with ngram_score_left_out(model), pytest.raises(ValueError, match="left out of the forward"):
        fit_ngram_classifier(model, *arguments)
    assert not model.ngram_classifier.left_out
    fit_ngram_classifier(model, *arguments)
    with pytest.raises(ValueError, match="fitted"):
        with ngram_score_left_out(model):
            pass
    ids, real = padded(validation_rows, pad_token_id=0)
    with torch.no_grad():  # the fitted score is in the forward: it tells the order, which the encoder cannot
        predicted = model.eval()(input_ids=ids, attention_mask=real).logits.argmax(-1)
    assert (predicted == torch.tensor(validation_labels)).float().mean() > 0.9


def crossing_pairs(count: int, seed: int) -> tuple[list[list[int]], list[int]]:
    """Rows cut into pieces in two ways, "▁ab" "c" or "▁a" "bc", between words "▁cd"; the label is whether the text
    has "cd" right after "abc" (class 1) or before it, which neither a piece nor the cut tells, only a run of
    characters across a word boundary ("ccd" or "dab")."""
    rng = random.Random(seed)
    rows, labels = [], []
    for _ in range(count):
        label = rng.randint(0, 1)
        abc = rng.choice([["▁ab", "c"], ["▁a", "bc"]])
        rows.append([2, *CHARACTERS.ids(abc + ["▁cd"] if label else ["▁cd"] + abc), 3])
        labels.append(label)
    return rows, labels


def test_a_character_score_reads_runs_across_words_and_not_how_the_text_was_cut():
    model = ngram_model(classifier_ngram_unit="character", classifier_ngram_order=3)
    train_rows, train_labels = crossing_pairs(300, seed=1)
    validation_rows, validation_labels = crossing_pairs(100, seed=2)
    blind_encoder = torch.randn(100, 2, generator=torch.Generator().manual_seed(3)) * 0.1
    report = fit_ngram_classifier(
        model, CHARACTERS, train_rows, train_labels, validation_rows, validation_labels, blind_encoder
    )
    assert report["eval_ngram_accuracy"] == 1.0 and report["ngram_logit_scale"] > report["encoder_logit_scale"]
    ids, real = padded(validation_rows, pad_token_id=0)
    with torch.no_grad():
        predicted = model(input_ids=ids, attention_mask=real).logits.argmax(-1)
    assert predicted.tolist() == validation_labels
    head = model.ngram_classifier
    ids, real = padded([CHARACTERS.ids(cut) for cut in (["▁ab", "c", "▁cd"], ["▁a", "bc", "▁cd"])], pad_token_id=0)
    with torch.no_grad():
        scores = head(ids, real)
    torch.testing.assert_close(scores[0], scores[1])  # the same text cut two ways scores the same
    assert scores[0, 1] > scores[0, 0]


def cut_pairs(count: int, seed: int) -> tuple[list[list[int]], list[int]]:
    """One text, "abc cd", cut two ways: "▁ab" "c" "▁cd" (class 1) or "▁a" "bc" "▁cd" (class 0). Only the tokens tell
    (as only a morpheme tokenizer's cut tells which reading a text has)."""
    rng = random.Random(seed)
    labels = [rng.randint(0, 1) for _ in range(count)]
    cuts = {1: ["▁ab", "c", "▁cd"], 0: ["▁a", "bc", "▁cd"]}
    return [[2, *CHARACTERS.ids(cuts[label]), 3] for label in labels], labels


@pytest.mark.parametrize("unit", ["character", "token+character"])
def test_a_token_and_character_score_reads_the_cut_which_characters_alone_cannot(unit):
    model = ngram_model(classifier_ngram_unit=unit, classifier_ngram_order=3)
    train_rows, train_labels = cut_pairs(300, seed=1)
    validation_rows, validation_labels = cut_pairs(100, seed=2)
    blind_encoder = torch.randn(100, 2, generator=torch.Generator().manual_seed(3)) * 0.1
    report = fit_ngram_classifier(
        model, CHARACTERS, train_rows, train_labels, validation_rows, validation_labels, blind_encoder
    )
    if unit == "character":  # one text, one score: the larger class
        assert report["eval_ngram_accuracy"] == max(validation_labels.count(0), validation_labels.count(1)) / 100
    else:
        assert report["eval_ngram_accuracy"] == 1.0 and report["ngram_logit_scale"] > report["encoder_logit_scale"]


def tables(unit: str) -> list[str]:
    """The tables a score of that unit reads tokens through."""
    return {"token": ["canonical_ids"], "character": ["token_characters"]}.get(
        unit, ["canonical_ids", "token_characters"]
    )


@pytest.mark.parametrize("unit", UNITS)
def test_a_fitted_model_saves_and_loads_whole(tmp_path, unit):
    model = ngram_model(classifier_ngram_unit=unit)
    rows, labels = crossing_pairs(200, seed=1) if unit != "token" else ordered_pairs(200, seed=1)
    fit_ngram_classifier(model, CHARACTERS, rows, labels, rows[:50], labels[:50], torch.zeros(50, 2))
    model.save_pretrained(tmp_path)
    loaded = AutoModelForSequenceClassification.from_pretrained(tmp_path).eval()
    assert loaded.config.classifier_ngram_unit == unit
    assert all(getattr(model.ngram_classifier, table).any() for table in tables(unit))
    for name in ("weight", "bias", "idf", *tables(unit)):
        torch.testing.assert_close(getattr(loaded.ngram_classifier, name), getattr(model.ngram_classifier, name))
    ids, real = padded(rows[:8], pad_token_id=0)
    left = torch.stack([torch.roll(row, int((~mask).sum())) for row, mask in zip(ids, real)])  # padding on the left
    with torch.no_grad():
        expected = model(input_ids=ids, attention_mask=real).logits
        torch.testing.assert_close(loaded(input_ids=ids, attention_mask=real).logits, expected)
        torch.testing.assert_close(loaded(input_ids=left, attention_mask=left != 0).logits, expected)


@pytest.mark.parametrize("unit", UNITS)
def test_resizing_the_vocabulary_resizes_the_tables_the_score_reads_tokens_through(tmp_path, unit, caplog):
    model = ngram_model(classifier_ngram_unit=unit)
    rows, labels = crossing_pairs(200, seed=1) if unit != "token" else ordered_pairs(200, seed=1)
    fit_ngram_classifier(model, CHARACTERS, rows, labels, rows[:50], labels[:50], torch.zeros(50, 2))
    befores = {table: getattr(model.ngram_classifier, table).clone() for table in tables(unit)}
    size = model.config.vocab_size
    ids, real = padded(rows[:8], pad_token_id=0)
    with torch.no_grad():
        expected = model.ngram_classifier(ids, real)
    with caplog.at_level("WARNING"):
        model.resize_token_embeddings(size + 5)
    assert "5 new tokens" in caplog.text
    for table, before in befores.items():
        grown = getattr(model.ngram_classifier, table)
        assert grown.shape[0] == size + 5 and torch.equal(grown[:size], before)
        new_rows = grown[size:]
        assert not new_rows.any() if table == "token_characters" else new_rows.tolist() == list(range(size, size + 5))
    with torch.no_grad():
        torch.testing.assert_close(model.ngram_classifier(ids, real), expected)  # the kept tokens read as before
        new_token = torch.cat([ids, torch.full((8, 1), size + 4)], 1)
        model(input_ids=new_token, attention_mask=torch.cat([real, torch.ones(8, 1, dtype=torch.bool)], 1))
    model.save_pretrained(tmp_path)
    loaded = AutoModelForSequenceClassification.from_pretrained(tmp_path)
    assert loaded.config.vocab_size == size + 5
    for table in tables(unit):
        torch.testing.assert_close(getattr(loaded.ngram_classifier, table), getattr(model.ngram_classifier, table))
    model.resize_token_embeddings(size - 3)  # shrinking drops the last rows
    for table, before in befores.items():
        kept = before[: size - 3]
        if table == "canonical_ids":  # a piece read as one that is gone reads as itself
            kept = torch.where(kept < size - 3, kept, torch.arange(size - 3))
        assert torch.equal(getattr(model.ngram_classifier, table), kept)


def test_a_refit_keeps_the_ngrams_and_the_weight_and_reaches_the_minimum_on_all_the_rows():
    model = ngram_model(classifier_ngram_unit="character", classifier_ngram_order=3)
    train_rows, train_labels = crossing_pairs(200, seed=1)
    more_rows, more_labels = crossing_pairs(100, seed=2)
    more_rows += [[2, *CHARACTERS.ids(["▁a", "b", "▁cd"]), 3]] * 2  # n-grams the training rows do not have
    more_labels += [0, 0]
    report = fit_ngram_classifier(
        model, CHARACTERS, train_rows, train_labels, more_rows, more_labels, torch.zeros(len(more_rows), 2)
    )
    head = model.ngram_classifier
    idf, table, first = head.idf.clone(), head.token_characters.clone(), head.weight.clone()
    scale = report["ngram_logit_scale"]
    rows, labels = train_rows + more_rows, train_labels + more_labels
    refit_ngram_classifier(model, rows, labels, ngram_logit_scale=scale, max_iter=500)
    assert torch.equal(head.idf, idf) and torch.equal(head.token_characters, table)  # what the first fit chose
    assert not torch.allclose(head.weight, first)
    # The same minimum as a fit from zero on all the rows' features (the first fit's n-grams), times the weight.
    features = feature_matrix(head, *padded(rows, pad_token_id=0))
    weight, bias = logistic_regression(features, torch.tensor(labels), 2, 4.0, max_iter=500)
    torch.testing.assert_close(head.weight, weight * scale, atol=1e-3 * scale, rtol=0)
    torch.testing.assert_close(head.bias, bias * scale, atol=1e-3 * scale, rtol=0)


def test_a_refit_without_a_fit_or_a_weight_is_refused():
    model = ngram_model()
    with pytest.raises(ValueError, match="fit_ngram_classifier"):
        refit_ngram_classifier(model, [[4, 5]], [0], ngram_logit_scale=1.0)
    rows, labels = ordered_pairs(100, seed=1)
    fit_ngram_classifier(model, Vocabulary([]), rows, labels, rows[:20], labels[:20], torch.zeros(20, 2))
    with pytest.raises(ValueError, match="ngram_logit_scale"):
        refit_ngram_classifier(model, rows, labels, ngram_logit_scale=0.0)


def test_without_input_ids_the_ngram_score_is_refused_by_name():
    model = ngram_model()
    with pytest.raises(ValueError, match="classifier_ngram_buckets.*input_ids"):
        model(inputs_embeds=torch.randn(1, 4, 32))


def test_a_bucket_count_that_is_not_a_power_of_two_is_warned_of(caplog):
    # 3 x 1,000,003 = 3,000,000 + 9: with 3,000,000 buckets the character pairs (a, b) and (a + 3, b - 9) share one.
    pairs = torch.tensor([[0xAC00, 0xAC20], [0xAC03, 0xAC17]])
    real = torch.ones_like(pairs, dtype=torch.bool)

    def bigrams(buckets):
        return ngram_hashes(pairs, real, order=2, buckets=buckets)[0][:, 2].tolist()

    assert len(set(bigrams(3_000_000))) == 1 and len(set(bigrams(2**22))) == 2
    rows, labels = ordered_pairs(100, seed=1)
    with caplog.at_level("WARNING", logger="hf_transformer.ngram_classifier"):
        fit_ngram_classifier(ngram_model(), Vocabulary([]), rows, labels, rows[:20], labels[:20], torch.zeros(20, 2))
    assert "power of two" not in caplog.text
    with caplog.at_level("WARNING", logger="hf_transformer.ngram_classifier"):
        model = TransformerForSequenceClassification(tiny_config(num_labels=2, classifier_ngram_buckets=3000))
        fit_ngram_classifier(model, Vocabulary([]), rows, labels, rows[:20], labels[:20], torch.zeros(20, 2))
    assert "3000 buckets is not a power of two" in caplog.text


def test_rows_labels_and_settings_a_fit_cannot_take_are_refused_by_name():
    rows, labels = ordered_pairs(40, seed=1)
    logits = torch.zeros(10, 2)
    regression = TransformerForSequenceClassification(tiny_config(num_labels=1, classifier_ngram_buckets=BUCKETS))

    def fit(model=None, train=(rows, labels), validation=(rows[:10], labels[:10]), encoder=logits, **options):
        model = model or ngram_model()
        return fit_ngram_classifier(model, Vocabulary([]), *train, *validation, encoder, **options)

    refused = [
        (
            dict(train=(rows, [label * 2 for label in labels])),
            "training: labels must be class ids 0 .. 1 .*got \\[2\\]",
        ),
        (dict(validation=(rows[:10], [-1] * 10)), "validation: labels must be class ids 0 .. 1"),
        (dict(train=(rows, labels[:-1])), "training: 40 rows but \\(39,\\) labels"),
        (dict(validation=([], []), encoder=torch.zeros(0, 2)), "needs validation rows; none were given"),
        (dict(encoder=torch.zeros(9, 2)), "encoder_validation_logits must be .* \\(10, 2\\), got \\(9, 2\\)"),
        (dict(inverse_l2=0), "inverse_l2 .* must be a positive number, got 0"),
        (dict(inverse_l2=-1.0), "inverse_l2 .* must be a positive number, got -1.0"),
        (dict(model=regression), "single-label classification, not 1 label \\(regression\\)"),
    ]
    for options, message in refused:
        with pytest.raises(ValueError, match=message):
            fit(**options)
    model = ngram_model()
    report = fit(model)
    with pytest.raises(ValueError, match="refitting: labels must be class ids"):
        refit_ngram_classifier(model, rows, [2] * len(rows), ngram_logit_scale=1.0)
    with pytest.raises(ValueError, match="inverse_l2 .* must be a positive number"):
        refit_ngram_classifier(model, rows, labels, ngram_logit_scale=1.0, inverse_l2=0.0)
    assert report["ngram_buckets_kept"] > 0  # the rows and settings refused above, given right, fit


def test_a_half_precision_model_scores_long_rows_as_the_float32_model_does():
    # The features are each row's idf values over their norm: the sum of squares of a long row's idf values
    # passes float16's largest number (65504), which made every feature, and the score, 0.
    model = ngram_model(classifier_ngram_unit="character", classifier_ngram_order=3)
    head = model.ngram_classifier
    with torch.no_grad():
        head.token_characters.copy_(token_character_table(CHARACTERS, head.token_characters.shape[0]))
        head.idf.uniform_(6.0, 12.0, generator=torch.Generator().manual_seed(0))
        head.weight.normal_(0.0, 1.0, generator=torch.Generator().manual_seed(1))
    row = [2, *CHARACTERS.ids(["▁ab", "cd", "▁a", "b"] * 50), 3]
    ids, real = padded([row], pad_token_id=0)
    with torch.no_grad():
        expected = head(ids, real)
        half = head.to(torch.float16)(ids, real)
    assert half.dtype == torch.float16 and expected.abs().max() > 0.5
    torch.testing.assert_close(half.float(), expected, atol=2e-2, rtol=2e-2)


def test_fitting_a_model_without_the_score_is_refused():
    model = TransformerForSequenceClassification(tiny_config(num_labels=2))
    assert model.ngram_classifier is None
    with pytest.raises(ValueError, match="classifier_ngram_buckets"):
        fit_ngram_classifier(model, Vocabulary([]), [[4]], [0], [[4]], [0], torch.zeros(1, 2))


@pytest.mark.parametrize(
    "settings",
    [
        dict(classifier_ngram_buckets=-1),
        dict(classifier_ngram_buckets=True),
        dict(classifier_ngram_order=0),
        dict(classifier_ngram_unit="characters"),
        dict(classifier_ngram_token_order=3),  # a token score has one order
        dict(classifier_ngram_token_order=3, classifier_ngram_unit="character"),
        dict(classifier_ngram_token_order=0, classifier_ngram_unit="token+character"),
    ],
)
def test_impossible_ngram_settings_name_the_field(settings):
    with pytest.raises(InvalidConfigError, match=next(iter(settings))):
        tiny_config(num_labels=2, **settings)


@pytest.mark.slow
@pytest.mark.parametrize("unit", UNITS)
def test_a_fitted_model_exports_to_onnx_with_its_ngram_score(tmp_path, unit):
    import numpy as np
    import onnxruntime

    from hf_transformer.export import to_onnx

    model = ngram_model(classifier_ngram_unit=unit)
    rows, labels = ordered_pairs(200, seed=1)
    pieces = [f"▁{i}" if i % 2 else f"{i}" for i in range(4, 40)]
    vocabulary = Vocabulary(["<pad>", "<unk>", "<s>", "</s>", *pieces])  # token i reads as str(i)
    fit_ngram_classifier(model, vocabulary, rows, labels, rows[:50], labels[:50], torch.zeros(50, 2))
    model.save_pretrained(tmp_path / "model")
    session = onnxruntime.InferenceSession(str(to_onnx(tmp_path / "model", tmp_path / "onnx") / "classifier.onnx"))
    for length in range(1, 6):  # shorter and longer than the n-grams
        ids = torch.tensor([[11, 10, 12, 13, 14][:length], [10, 11, 15, 16, 17][:length]])
        with torch.no_grad():
            expected = model(input_ids=ids).logits.numpy()
        feeds = {"input_ids": ids.numpy(), "attention_mask": np.ones(ids.shape, dtype=np.int64)}
        np.testing.assert_allclose(session.run(None, feeds)[0], expected, rtol=1e-4, atol=1e-4)
    assert expected[:, 1].tolist()[0] < expected[:, 1].tolist()[1]  # the order of 10 and 11 is read


@pytest.mark.skipif(not torch.cuda.is_available(), reason="a model on a GPU needs one")
def test_a_model_on_a_gpu_fits_and_refits_its_score_as_on_the_cpu():
    rows, labels = ordered_pairs(200, seed=1)
    reports, weights = [], []
    for device in ("cpu", "cuda"):
        model = ngram_model().to(device)
        report = fit_ngram_classifier(model, Vocabulary([]), rows, labels, rows[:50], labels[:50], torch.zeros(50, 2))
        refit_ngram_classifier(model, rows, labels, ngram_logit_scale=report["ngram_logit_scale"])
        assert model.ngram_classifier.weight.device.type == device  # moved back where the model is
        reports.append(report)
        weights.append(model.ngram_classifier.weight.detach().cpu())
    assert reports[0]["ngram_buckets_kept"] == reports[1]["ngram_buckets_kept"]
    torch.testing.assert_close(weights[1], weights[0])
