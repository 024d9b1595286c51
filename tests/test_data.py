"""`hf_transformer.data`: loading local files and parallel text, tokenizing, collating and length-grouped batching."""

import json
import logging
from pathlib import Path

import pytest
import torch

from hf_transformer.data import (
    SubwordSampledTranslation,
    classification_collator,
    length_grouped_dataloader,
    load_local_dataset,
    load_parallel_text,
    masked_token_collator,
    pad_token_rows,
    resolve_max_length,
    seq2seq_collator,
    sorted_by_length,
    tokenize_classification,
    tokenize_translation,
)
from hf_transformer.tokenization import train_tokenizer

# Reviews as a tab-separated file: a quoted document, an empty one, one of spaces, "NA" (text, not a missing value).
REVIEW_ROWS = [
    "아 더빙.. 진짜 짜증나네요 목소리\t0",
    "흠...포스터보고 초딩영화줄....오버연기조차 가볍지 않구나\t1",
    "영화 끝나갈때쯤에 멍하다가 다보고나면 한마디 나올거임 ㅈ같다. 정말 길고 긴 리뷰의 끝\t0",
    "\t1",
    "NA\t1",
    "너무재밓었다그래서보는것을추천한다\t0",
    "   \t0",
] + [f"재미있는 영화 {i}번째 리뷰\t{i % 2}" for i in range(33)]

# Line-aligned sentence pairs; a tab inside a German sentence stays text.
PAIRS = {
    "train": (
        ["Two dogs play.", "A man runs.", "A girl in a red coat.", "People walk in the rain."],
        ["Zwei Hunde spielen.", "Ein Mann \tläuft.", "Ein Mädchen in einem roten Mantel.", "Leute gehen."],
    ),
    "validation": (["A cat sleeps."], ["Eine Katze schläft."]),
    "test": (["A boy jumps.", "Two women talk."], ["Ein Junge springt.", "Zwei Frauen reden."]),
}


def load_reviews(tmp_path: Path):
    """REVIEW_ROWS as a classification dataset (train: all of them, validation: the last ten)."""
    (tmp_path / "reviews.tsv").write_text("text\tlabel\n" + "\n".join(REVIEW_ROWS) + "\n", "utf-8")
    (tmp_path / "held_out.tsv").write_text("text\tlabel\n" + "\n".join(REVIEW_ROWS[-10:]) + "\n", "utf-8")
    files = {"train": tmp_path / "reviews.tsv", "validation": tmp_path / "held_out.tsv"}
    return load_local_dataset(files, text_column="text", label_column="label", cache_dir=tmp_path / "cache")


def load_pairs(tmp_path: Path):
    """PAIRS as a translation dataset, English -> German."""
    files = {}
    for split, (english, german) in PAIRS.items():
        for lang, lines in (("en", english), ("de", german)):
            files.setdefault(lang, {})[split] = tmp_path / f"{split}.{lang}"
            files[lang][split].write_text("\n".join(lines) + "\n", "utf-8")
    return load_parallel_text(files["en"], files["de"], "en", "de")


@pytest.fixture(scope="module")
def tokenizer():
    texts = [row.split("\t")[0] for row in REVIEW_ROWS] + [
        sentence for english, german in PAIRS.values() for sentence in english + german
    ]
    return train_tokenizer(texts * 10, vocab_size=200, model_max_length=64, show_progress=False)


# --------------------------------------------------------------------------------------------------
# Parallel text


def test_parallel_text_files(tmp_path):
    (tmp_path / "a.ko").write_text("겨울은 추워요.\n감기 조심하세요.\n", "utf-8")
    (tmp_path / "a.en").write_text("Winter is cold.\nMind the cold.\n", "utf-8")
    pairs = load_parallel_text({"train": tmp_path / "a.ko"}, {"train": tmp_path / "a.en"}, "ko", "en")
    assert pairs["train"][1]["translation"] == {"ko": "감기 조심하세요.", "en": "Mind the cold."}
    # A lone "\r" inside a sentence on each side (so the line counts still agree) must not shift the pairs between
    # them; "\r\n" ends a line. Universal newlines would pair "fish" with "zwei" and "two" with "fisch".
    (tmp_path / "b.en").write_bytes(b"one\rfish\ntwo\r\nthree\n")
    (tmp_path / "b.de").write_bytes(b"eins\nzwei\rfisch\ndrei\n")
    pairs = load_parallel_text({"train": tmp_path / "b.en"}, {"train": tmp_path / "b.de"}, "en", "de")
    assert pairs["train"]["translation"][:] == [
        {"en": "one\rfish", "de": "eins"},
        {"en": "two", "de": "zwei\rfisch"},
        {"en": "three", "de": "drei"},
    ]
    with pytest.raises(ValueError, match="splits"):
        load_parallel_text({"train": tmp_path / "a.ko"}, {"test": tmp_path / "a.en"}, "ko", "en")


# --------------------------------------------------------------------------------------------------
# Local files


def test_local_csv_with_string_labels_shares_one_label_map(tmp_path, caplog):
    (tmp_path / "train.csv").write_text('review,stars\ngood film,pos\n"bad, boring",neg\n,pos\nfine,pos\n', "utf-8")
    (tmp_path / "test.csv").write_text("review,stars\nawful,neg\n", "utf-8")
    with caplog.at_level(logging.WARNING, logger="hf_transformer.data"):
        loaded = load_local_dataset(
            {"train": tmp_path / "train.csv", "test": tmp_path / "test.csv"},
            text_column="review",
            label_column="stars",
            cache_dir=tmp_path / "cache",
        )
    assert "dropped 1 of 4 rows" in caplog.text
    assert loaded["train"].column_names == ["text", "label"]
    assert loaded["train"]["text"][:] == ["good film", "bad, boring", "fine"]
    names = loaded["train"].features["label"].names
    assert names == loaded["test"].features["label"].names == ["neg", "pos"]
    assert loaded["test"][0]["label"] == names.index("neg")  # the test split alone would have called neg 0 too
    assert loaded["train"]["label"][:] == [1, 0, 1]


def test_local_tsv_and_jsonl(tmp_path):
    (tmp_path / "d.tsv").write_text("text\tlabel\nhello, world\t1\nbye\t0\n", "utf-8")
    tsv = load_local_dataset(tmp_path / "d.tsv", text_column="text", label_column="label", cache_dir=tmp_path / "cache")
    assert tsv["train"][0] == {"text": "hello, world", "label": 1}

    rows = [{"ko": "겨울은 추워요.", "en": "Winter is cold."}, {"ko": None, "en": "lost"}]
    (tmp_path / "p.jsonl").write_text("\n".join(json.dumps(row, ensure_ascii=False) for row in rows), "utf-8")
    pairs = load_local_dataset(
        tmp_path / "p.jsonl", source_column="ko", target_column="en", cache_dir=tmp_path / "cache"
    )
    assert pairs["train"]["translation"][:] == [{"ko": "겨울은 추워요.", "en": "Winter is cold."}]


def test_local_file_errors_name_the_problem(tmp_path):
    (tmp_path / "d.csv").write_text("sentence,label\nhi,1\n", "utf-8")
    with pytest.raises(KeyError, match=r"no column\(s\) \['text'\].*'sentence'"):
        load_local_dataset(tmp_path / "d.csv", text_column="text", label_column="label", cache_dir=tmp_path)
    with pytest.raises(ValueError, match="either"):
        load_local_dataset(tmp_path / "d.csv", text_column="sentence", source_column="label")
    with pytest.raises(ValueError, match="suffixes"):
        load_local_dataset(tmp_path / "d.parquet", text_column="a", label_column="b")
    with pytest.raises(FileNotFoundError, match="missing.csv"):
        load_local_dataset(tmp_path / "missing.csv", text_column="a", label_column="b")
    with pytest.raises(ValueError, match="source_column and target_column name one column, 'sentence'"):
        load_local_dataset(tmp_path / "d.csv", source_column="sentence", target_column="sentence")
    with pytest.raises(ValueError, match="text_column and label_column name one column"):
        load_local_dataset(tmp_path / "d.csv", text_column="sentence", label_column="sentence")
    (tmp_path / "empty.csv").write_text("", "utf-8")
    with pytest.raises(ValueError, match=r"nothing in them: \[.*empty.csv"):
        load_local_dataset(tmp_path / "empty.csv", text_column="sentence", label_column="label", cache_dir=tmp_path)
    (tmp_path / "blank.csv").write_text("sentence,label\n,1\n  ,0\n", "utf-8")
    with pytest.raises(ValueError, match=r"train \(.*blank.csv\): no row with a value"):
        load_local_dataset(tmp_path / "blank.csv", text_column="sentence", label_column="label", cache_dir=tmp_path)


@pytest.mark.parametrize(
    ("labels", "message"),
    [
        ([1, 2, 2, 1], "these rows have 1, 2, none has 0"),
        ([-1, 1, 1], "these rows have -1, 1, none has 0"),
        ([1, "0", 1], r"labels mix kinds of values"),
    ],
)
def test_integer_labels_must_be_class_ids_from_0(tmp_path, labels, message):
    # Labels 1 and 2 would make a three-class model whose class 0 no row has.
    rows = [{"text": f"review {i}", "label": label} for i, label in enumerate(labels)]
    (tmp_path / "d.jsonl").write_text("\n".join(json.dumps(row) for row in rows), "utf-8")
    with pytest.raises(ValueError, match=message):
        load_local_dataset(tmp_path / "d.jsonl", text_column="text", label_column="label", cache_dir=tmp_path)


@pytest.mark.parametrize(
    ("test_labels", "message"),
    [
        (["negative", "Positive", "negativ"], r"the test rows have labels no training row has: Positive, negativ "),
        ([0, 1, 2], r"the test rows have labels no training row has: 2 \(the training rows' labels: 0, 1\)"),
    ],
)
def test_a_label_no_training_row_has_is_refused(tmp_path, test_labels, message):
    # A typo in the test file would be a class of its own: a 4-class model, scored with an F1 over classes it never saw.
    names = isinstance(test_labels[0], str)
    train = ["negative", "positive"] * 2 if names else [0, 1] * 2
    files = {}
    for split, labels in (("train", train), ("test", test_labels)):
        rows = [{"text": f"review {i}", "label": label} for i, label in enumerate(labels)]
        (tmp_path / f"{split}.jsonl").write_text("\n".join(json.dumps(row) for row in rows), "utf-8")
        files[split] = str(tmp_path / f"{split}.jsonl")
    with pytest.raises(ValueError, match=message):
        load_local_dataset(files, text_column="text", label_column="label", cache_dir=tmp_path)
    files["test"] = files["train"]
    loaded = load_local_dataset(files, text_column="text", label_column="label", cache_dir=tmp_path)
    assert loaded["test"]["label"] == loaded["train"]["label"]


# --------------------------------------------------------------------------------------------------
# Tokenizing, collating, batching


def test_classification_pipeline_pads_each_batch_to_its_longest_row(tokenizer, tmp_path):
    reviews = load_reviews(tmp_path)
    tokenized = tokenize_classification(reviews, tokenizer, max_length=12)
    assert sorted(tokenized["train"].column_names) == ["attention_mask", "input_ids", "label"]
    assert tokenized["train"].features["label"] == reviews["train"].features["label"]
    lengths = [len(ids) for ids in tokenized["train"]["input_ids"]]
    assert max(lengths) == 12  # the long review is truncated ...
    assert all(ids[-1] == tokenizer.eos_token_id for ids in tokenized["train"]["input_ids"])  # ... keeping [EOS]

    collate = classification_collator(tokenizer)
    rows = [tokenized["train"][i] for i in range(4)]
    batch = collate(rows)
    longest = max(len(row["input_ids"]) for row in rows)
    assert batch["input_ids"].shape == batch["attention_mask"].shape == (4, longest)
    assert batch["labels"].tolist() == [row["label"] for row in rows]
    for i, row in enumerate(rows):
        length = len(row["input_ids"])
        assert batch["input_ids"][i, :length].tolist() == row["input_ids"]
        assert batch["input_ids"][i, length:].eq(tokenizer.pad_token_id).all()
        assert batch["attention_mask"][i].sum() == length


def collated_rows(tokenizer, texts, **columns):
    """Tokenizer rows as a dataset holds them: lists of ids (a special token inside some), and any extra columns."""
    encoded = tokenizer(texts, truncation=True, max_length=64)
    rows = [{name: values[i] for name, values in encoded.items()} for i in range(len(texts))]
    for name, values in columns.items():
        for row, value in zip(rows, values, strict=True):
            row[name] = value
    return rows


def assert_same_batch(ours, theirs):
    assert list(ours) == list(theirs)
    for name in theirs:
        assert ours[name].dtype == theirs[name].dtype, name
        assert torch.equal(ours[name], theirs[name]), name


def refuse_tokenizer_pad(tokenizer, monkeypatch):
    def refused(*args, **kwargs):
        raise AssertionError("tokenizer.pad called")

    monkeypatch.setattr(tokenizer, "pad", refused)


BATCH_TEXTS = [
    "재미있는 영화",
    "아 더빙.. 진짜 짜증나네요 목소리 [MASK] 정말",
    "흠",
    "Two dogs play. A man runs in the rain.",
]


@pytest.mark.parametrize("padding_side", ["right", "left"])
@pytest.mark.parametrize("pad_to_multiple_of", [None, 8])
def test_masked_token_collator_makes_transformers_batches_with_the_same_draws(
    tokenizer, monkeypatch, padding_side, pad_to_multiple_of
):
    from transformers import DataCollatorForLanguageModeling

    monkeypatch.setattr(tokenizer, "padding_side", padding_side)
    rows = collated_rows(tokenizer, BATCH_TEXTS * 8)
    assert any(tokenizer.mask_token_id in row["input_ids"] for row in rows)  # a special token inside a row
    reference = DataCollatorForLanguageModeling(tokenizer, mlm_probability=0.4, pad_to_multiple_of=pad_to_multiple_of)
    expected = {}
    for seed in range(3):
        torch.manual_seed(seed)
        expected[seed] = reference(rows)
    collate = masked_token_collator(tokenizer, mlm_probability=0.4, pad_to_multiple_of=pad_to_multiple_of)
    refuse_tokenizer_pad(tokenizer, monkeypatch)
    for seed in range(3):
        torch.manual_seed(seed)
        batch = collate(rows)
        assert_same_batch(batch, expected[seed])
        assert (batch["labels"] != -100).any() and not (batch["labels"][batch["attention_mask"] == 0] != -100).any()


def test_masked_token_collator_reads_a_special_tokens_mask_column(tokenizer, monkeypatch):
    from transformers import DataCollatorForLanguageModeling

    encoded = tokenizer(BATCH_TEXTS, return_special_tokens_mask=True)
    rows = [{name: values[i] for name, values in encoded.items()} for i in range(len(BATCH_TEXTS))]
    rows[1]["special_tokens_mask"] = [1] * len(rows[1]["input_ids"])  # a row with nothing to mask
    torch.manual_seed(0)
    expected = DataCollatorForLanguageModeling(tokenizer, mlm_probability=0.5)(rows)
    refuse_tokenizer_pad(tokenizer, monkeypatch)
    torch.manual_seed(0)
    batch = masked_token_collator(tokenizer, mlm_probability=0.5)(rows)
    assert_same_batch(batch, expected)
    assert (batch["labels"][1] == -100).all()


@pytest.mark.parametrize("padding_side", ["right", "left"])
def test_classification_collator_pads_as_tokenizer_pad_does(tokenizer, monkeypatch, padding_side):
    from transformers import DataCollatorWithPadding

    monkeypatch.setattr(tokenizer, "padding_side", padding_side)
    labelled = collated_rows(tokenizer, BATCH_TEXTS, label=[0, 1, 1, 0])
    typed = collated_rows(tokenizer, BATCH_TEXTS, token_type_ids=[[1] * len(r["input_ids"]) for r in labelled])
    bare = [{"input_ids": row["input_ids"], "label_ids": 1} for row in labelled]  # no attention_mask: made
    cases = [(labelled, None), (labelled, 8), (typed, None), (bare, None)]
    expected = [DataCollatorWithPadding(tokenizer, pad_to_multiple_of=m)(rows) for rows, m in cases]
    refuse_tokenizer_pad(tokenizer, monkeypatch)
    for (rows, multiple), reference in zip(cases, expected, strict=True):
        assert_same_batch(classification_collator(tokenizer, pad_to_multiple_of=multiple)(rows), reference)


def test_rows_the_fast_padding_does_not_cover_go_to_tokenizer_pad(tokenizer):
    from transformers import DataCollatorWithPadding

    rows = collated_rows(tokenizer, BATCH_TEXTS, label=[0.5, 1.0, 0.0, 0.25])  # regression targets
    assert pad_token_rows(tokenizer, rows) is None
    assert_same_batch(classification_collator(tokenizer)(rows), DataCollatorWithPadding(tokenizer)(rows))
    assert classification_collator(tokenizer)(rows)["labels"].dtype == torch.float32
    assert pad_token_rows(tokenizer, collated_rows(tokenizer, BATCH_TEXTS, text=BATCH_TEXTS)) is None
    uneven = collated_rows(tokenizer, BATCH_TEXTS)
    uneven[2]["attention_mask"] = uneven[2]["attention_mask"] + [1]
    assert pad_token_rows(tokenizer, uneven) is None
    uneven[3]["attention_mask"] = uneven[3]["attention_mask"][:-1]  # the two rows' total length as it was
    assert pad_token_rows(tokenizer, uneven) is None
    assert pad_token_rows(tokenizer, [{"input_ids": torch.tensor([5, 6])}]) is None


def test_rows_sorted_by_length_keep_their_labels_and_ties_their_order(tokenizer):
    from datasets import Dataset

    texts = ["영화 " * (1 + (i * 7) % 5) + str(i) for i in range(30)]
    dataset = tokenize_classification(Dataset.from_dict({"text": texts, "label": list(range(30))}), tokenizer)
    dataset = dataset.select(range(29, -1, -1))  # an index mapping, as a filtered or split dataset has
    ordered = sorted_by_length(dataset)
    lengths = [len(ids) for ids in ordered["input_ids"]]
    assert lengths == sorted(lengths) and lengths[0] < lengths[-1]
    assert sorted(ordered["label"]) == list(range(30))
    for row in ordered:  # each row keeps its own label, and rows of one length keep the dataset's order
        assert row["input_ids"] == dataset[29 - row["label"]]["input_ids"]
    for shorter, longer in zip(ordered, ordered.select(range(1, 30))):
        if len(shorter["input_ids"]) == len(longer["input_ids"]):
            assert shorter["label"] > longer["label"]
    assert ordered._indices is None  # written out: batches read without an index mapping


def test_translation_pipeline_pads_labels_with_minus_100(tokenizer, tmp_path):
    pairs = load_pairs(tmp_path)
    german = [pair["de"] for pair in pairs["train"]["translation"]]
    full_lengths = [len(tokenizer(text_target=text)["input_ids"]) for text in german]
    limit = max(full_lengths) - 1  # only the longest target is cut
    tokenized = tokenize_translation(
        pairs, tokenizer, source_lang="en", target_lang="de", max_source_length=16, max_target_length=limit
    )
    assert sorted(tokenized["train"].column_names) == ["attention_mask", "input_ids", "labels"]
    rows = [tokenized["train"][i] for i in range(4)]
    assert [len(row["labels"]) for row in rows] == [min(length, limit) for length in full_lengths]
    assert all(row["labels"][-1] == tokenizer.eos_token_id for row in rows)
    assert rows[0]["input_ids"] == tokenizer("Two dogs play.")["input_ids"]

    batch = seq2seq_collator(tokenizer)(rows)
    longest_source = max(len(row["input_ids"]) for row in rows)
    longest_target = max(len(row["labels"]) for row in rows)
    assert batch["input_ids"].shape == (4, longest_source)
    assert batch["labels"].shape == (4, longest_target)
    for i, row in enumerate(rows):
        assert batch["labels"][i, len(row["labels"]) :].eq(-100).all()
        assert batch["labels"][i, : len(row["labels"])].tolist() == row["labels"]
        assert batch["input_ids"][i, len(row["input_ids"]) :].eq(tokenizer.pad_token_id).all()
    assert (batch["labels"] == -100).any()  # the rows differ in length, so some padding is there


@pytest.fixture(scope="module")
def bpe_tokenizer():
    texts = [sentence for english, german in PAIRS.values() for sentence in english + german]
    return train_tokenizer(texts * 10, vocab_size=150, model_type="bpe", model_max_length=64, show_progress=False)


def test_subword_dropout_samples_new_segmentations_of_the_same_text(bpe_tokenizer, tmp_path):
    pairs = load_pairs(tmp_path)
    train = pairs["train"]
    fixed = tokenize_translation(train, bpe_tokenizer, source_lang="en", target_lang="de")
    sampled = SubwordSampledTranslation(train, bpe_tokenizer, source_lang="en", target_lang="de", dropout=0.5)
    assert len(sampled) == len(fixed)
    for i, pair in enumerate(train["translation"]):
        draws = [sampled[i] for _ in range(20)]
        assert all(sorted(row) == ["attention_mask", "input_ids", "labels"] for row in draws)
        # Another segmentation of the same text: it decodes back to the same sentence and still ends with [EOS].
        assert len({tuple(row["input_ids"]) for row in draws}) > 1
        assert len({tuple(row["labels"]) for row in draws}) > 1
        source_text = bpe_tokenizer.decode(fixed[i]["input_ids"], skip_special_tokens=True)
        target_text = bpe_tokenizer.decode(fixed[i]["labels"], skip_special_tokens=True)
        assert source_text == pair["en"]
        for row in draws:
            assert bpe_tokenizer.decode(row["input_ids"], skip_special_tokens=True) == source_text
            assert bpe_tokenizer.decode(row["labels"], skip_special_tokens=True) == target_text
            assert row["labels"][-1] == row["input_ids"][-1] == bpe_tokenizer.eos_token_id
            assert row["attention_mask"] == [1] * len(row["input_ids"])
            # Skipped merges only split tokens: never fewer than the deterministic segmentation.
            assert len(row["input_ids"]) >= len(fixed[i]["input_ids"])
    # The caller's tokenizer (the one saved with the model) stays deterministic.
    assert bpe_tokenizer.backend_tokenizer.model.dropout is None
    assert [bpe_tokenizer(pair["en"])["input_ids"] for pair in train["translation"]] == fixed["input_ids"]


def test_subword_dropout_rows_have_a_digest_of_what_they_are_sampled_from(bpe_tokenizer, tmp_path):
    # A checkpoint keeps it (hf_transformer.training.resume_settings): the sampled ids differ at every draw, so a run
    # resumed with another dropout or other pairs is told apart by what the rows are drawn from.
    from hf_transformer.training import rows_digest

    train = load_pairs(tmp_path)["train"]

    def sampled(dataset=train, dropout=0.2, **lengths):
        return SubwordSampledTranslation(
            dataset, bpe_tokenizer, source_lang="en", target_lang="de", dropout=dropout, **lengths
        )

    first = rows_digest(sampled())
    assert isinstance(first, str) and len(first) == 64 and rows_digest(sampled()) == first
    others = [
        sampled(dropout=0.1),
        sampled(max_source_length=5),
        sampled(train.select(range(len(train) - 1))),
        sampled(train.select(list(reversed(range(len(train)))))),
        SubwordSampledTranslation(train, bpe_tokenizer, source_lang="de", target_lang="en", dropout=0.2),
    ]
    assert len({first, *map(rows_digest, others)}) == 1 + len(others)


def test_subword_dropout_truncates_like_the_fixed_tokenization(bpe_tokenizer, tmp_path):
    pairs = load_pairs(tmp_path)
    sampled = SubwordSampledTranslation(
        pairs["train"],
        bpe_tokenizer,
        source_lang="de",
        target_lang="en",
        dropout=0.9,
        max_source_length=5,
        max_target_length=4,
    )
    for i in range(len(sampled)):
        row = sampled[i]
        assert len(row["input_ids"]) == 5 and len(row["labels"]) == 4  # heavy dropout makes every row longer
        assert row["labels"][-1] == bpe_tokenizer.eos_token_id


def test_subword_dropout_refuses_what_it_cannot_do(tokenizer, bpe_tokenizer, tmp_path):
    train = load_pairs(tmp_path)["train"]
    with pytest.raises(ValueError, match="needs a fast BPE tokenizer.*Unigram"):
        SubwordSampledTranslation(train, tokenizer, source_lang="en", target_lang="de", dropout=0.1)
    with pytest.raises(ValueError, match="needs a fast BPE tokenizer.*a slow object"):
        SubwordSampledTranslation(train, object(), source_lang="en", target_lang="de", dropout=0.1)
    for dropout in (0.0, 1.0, -0.1):
        with pytest.raises(ValueError, match="probability in \\(0, 1\\)"):
            SubwordSampledTranslation(train, bpe_tokenizer, source_lang="en", target_lang="de", dropout=dropout)
    with pytest.raises(KeyError, match="no language\\(s\\) \\['fr'\\]"):
        SubwordSampledTranslation(train, bpe_tokenizer, source_lang="en", target_lang="fr", dropout=0.1)


def test_seq2seq_collator_with_the_model_builds_decoder_inputs(tokenizer, tmp_path):
    from hf_transformer import TransformerConfig, TransformerForConditionalGeneration

    pairs = load_pairs(tmp_path)
    tokenized = tokenize_translation(pairs["train"], tokenizer, source_lang="en", target_lang="de")
    config = TransformerConfig(
        vocab_size=len(tokenizer),
        d_model=16,
        n_layer=1,
        num_attention_heads=2,
        intermediate_size=32,
        max_position_embeddings=64,
    )
    model = TransformerForConditionalGeneration(config)
    batch = seq2seq_collator(tokenizer, model)([tokenized[i] for i in range(4)])
    labels, decoder_inputs = batch["labels"], batch["decoder_input_ids"]
    assert decoder_inputs[:, 0].eq(tokenizer.bos_token_id).all()
    expected = labels[:, :-1].masked_fill(labels[:, :-1] == -100, tokenizer.pad_token_id)
    assert torch.equal(decoder_inputs[:, 1:], expected)
    assert model(**batch).loss.isfinite()


def test_max_length_defaults_to_the_tokenizer_limit(tokenizer):
    assert resolve_max_length(tokenizer, None) == 64
    assert resolve_max_length(tokenizer, 10) == 10
    unlimited = type("Unlimited", (), {"model_max_length": int(1e30)})()
    with pytest.raises(ValueError, match="max_length"):
        resolve_max_length(unlimited, None)


def test_length_grouped_batches_hold_similar_lengths(tokenizer):
    from datasets import Dataset

    # 900 rows: LengthGroupedSampler sorts within mega-batches of at most 50 batches or a quarter of the data.
    texts = [" ".join(["재미있는 영화"] * (1 + i % 9)) for i in range(900)]
    dataset = tokenize_classification(
        Dataset.from_dict({"text": texts, "label": [i % 2 for i in range(900)]}), tokenizer
    )
    collate = classification_collator(tokenizer)

    def padding_share(loader) -> float:
        seen, padded, total = [], 0, 0
        for batch in loader:
            seen += batch["input_ids"].tolist()
            padded += int((batch["attention_mask"] == 0).sum())
            total += batch["attention_mask"].numel()
        assert len(seen) == 900
        return padded / total

    grouped = length_grouped_dataloader(dataset, collate, batch_size=10, seed=1)
    ungrouped = torch.utils.data.DataLoader(
        dataset, batch_size=10, shuffle=True, collate_fn=collate, generator=torch.Generator().manual_seed(1)
    )
    assert padding_share(grouped) < padding_share(ungrouped) / 4
    ordered = length_grouped_dataloader(dataset, collate, batch_size=10, shuffle=False)
    assert padding_share(ordered) == 0.0  # 100 rows of each of 9 lengths: sorted batches need no padding
    every_label = sorted(label for batch in grouped for label in batch["labels"].tolist())
    assert every_label == sorted(i % 2 for i in range(900))


def test_first_rows_cuts_only_the_splits_given():
    from datasets import Dataset, DatasetDict

    from hf_transformer.data import first_rows
    from hf_transformer.training import SplitLimits

    splits = DatasetDict({name: Dataset.from_dict({"x": list(range(10))}) for name in ("train", "validation", "test")})
    cut = first_rows(splits, SplitLimits(max_train_samples=3, max_test_samples=50).split_limits())
    assert cut["train"]["x"] == [0, 1, 2]
    assert len(cut["validation"]) == 10 and len(cut["test"]) == 10
