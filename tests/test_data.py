"""`hf_transformer.data`: locating and fetching corpora, loading NSMC / Multi30k / local files,
tokenizing, collating and length-grouped batching."""

import gzip
import hashlib
import io
import json
import logging
import os
import urllib.error
from pathlib import Path

import pytest
import torch

from hf_transformer import data
from hf_transformer.data import (
    DATA_DIR_ENV,
    DataFileNotFoundError,
    SubwordSampledTranslation,
    classification_collator,
    ensure_corpus_file,
    length_grouped_dataloader,
    load_local_dataset,
    load_multi30k,
    load_nsmc,
    load_parallel_text,
    resolve_data_dir,
    resolve_max_length,
    seq2seq_collator,
    tokenize_classification,
    tokenize_translation,
)
from hf_transformer.tokenization import train_tokenizer

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

# The real corpora: $HF_TRANSFORMER_DATA, else ../shared/data beside the repository.
REAL_DATA_DIR = Path(os.environ.get(DATA_DIR_ENV) or Path(__file__).resolve().parents[2] / "shared" / "data")

NSMC_HEADER = "id\tdocument\tlabel\n"
# Rows written the way the real files are: a document with a quote went through two rounds of CSV quoting.
NSMC_TRAIN_ROWS = [
    "1\t아 더빙.. 진짜 짜증나네요 목소리\t0",
    "2\t흠...포스터보고 초딩영화줄....오버연기조차 가볍지 않구나\t1",
    '3\t"""영화 끝나갈때쯤에 멍하다가 다보고나면 한마디 나올거임 """"ㅈ같다."""""""\t0',
    "4\t\t1",  # empty document
    "5\tNA\t1",  # a review that reads "NA" is text, not a missing value
    "6\t너무재밓었다그래서보는것을추천한다\t0",
    "7\t   \t0",  # only spaces: as empty as it gets
] + [f"{100 + i}\t재미있는 영화 {i}번째 리뷰\t{i % 2}" for i in range(33)]
NSMC_TEST_ROWS = ["900\t굳 ㅋ\t1", "901\t\t0", "902\t별로였다\t0"]


def write_nsmc(root: Path) -> Path:
    (root / "nsmc").mkdir(parents=True, exist_ok=True)
    (root / "nsmc" / "ratings_train.txt").write_text(NSMC_HEADER + "\n".join(NSMC_TRAIN_ROWS) + "\n", "utf-8")
    (root / "nsmc" / "ratings_test.txt").write_text(NSMC_HEADER + "\n".join(NSMC_TEST_ROWS) + "\n", "utf-8")
    return root


MULTI30K = {
    "train": (
        ["Two dogs play.", "A man runs.", "A girl in a red coat.", "People walk in the rain."],
        ["Zwei Hunde spielen.", "Ein Mann \tläuft.", "Ein Mädchen in einem roten Mantel.", "Leute gehen."],
    ),
    "val": (["A cat sleeps."], ["Eine Katze schläft."]),
    "test_2016_flickr": (["A boy jumps.", "Two women talk."], ["Ein Junge springt.", "Zwei Frauen reden."]),
}


def write_multi30k(root: Path) -> Path:
    (root / "multi30k").mkdir(parents=True, exist_ok=True)
    for stem, (english, german) in MULTI30K.items():
        (root / "multi30k" / f"{stem}.en").write_text("\n".join(english) + "\n", "utf-8")
        (root / "multi30k" / f"{stem}.de").write_text("\n".join(german) + "\n", "utf-8")
    return root


@pytest.fixture(scope="module")
def tokenizer():
    texts = [row.split("\t")[1] for row in NSMC_TRAIN_ROWS] + [
        sentence for english, german in MULTI30K.values() for sentence in english + german
    ]
    return train_tokenizer(texts * 10, vocab_size=200, model_max_length=64, show_progress=False)


# --------------------------------------------------------------------------------------------------
# Where the data lives


def test_data_dir_comes_from_argument_then_environment_then_default(monkeypatch, tmp_path):
    monkeypatch.setenv(DATA_DIR_ENV, str(tmp_path / "from-env"))
    assert resolve_data_dir(tmp_path / "given") == tmp_path / "given"
    assert resolve_data_dir() == tmp_path / "from-env"
    monkeypatch.delenv(DATA_DIR_ENV)
    assert resolve_data_dir() == Path("data")


def test_missing_corpus_offline_names_path_and_contents(tmp_path):
    with pytest.raises(DataFileNotFoundError) as caught:
        load_nsmc(tmp_path, download=False)
    message = str(caught.value)
    assert str(tmp_path / "nsmc" / "ratings_train.txt") in message
    assert "tab-separated id, document, label" in message
    assert "github.com/e9t/nsmc" in message and DATA_DIR_ENV in message
    assert not (tmp_path / "nsmc" / "ratings_train.txt").exists()


def test_offline_environment_turns_downloads_off(monkeypatch, tmp_path):
    def must_not_download(*args, **kwargs):
        raise AssertionError("downloaded while HF_DATASETS_OFFLINE is set")

    monkeypatch.setattr(data.urllib.request, "urlopen", must_not_download)
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    with pytest.raises(DataFileNotFoundError, match="downloads are off"):
        load_multi30k(tmp_path)


def test_failed_download_says_why_and_where_the_file_goes(monkeypatch, tmp_path):
    def no_network(url, timeout):
        raise urllib.error.URLError("no route to host")

    monkeypatch.setattr(data.urllib.request, "urlopen", no_network)
    with pytest.raises(DataFileNotFoundError) as caught:
        load_multi30k(tmp_path, download=True)
    message = str(caught.value)
    assert "no route to host" in message
    assert str(tmp_path / "multi30k" / "train.en") in message and "gunzip" in message
    assert list((tmp_path / "multi30k").iterdir()) == []  # no partial file left behind


def test_download_gunzips_and_checks_the_sha256(monkeypatch, tmp_path):
    content = b"A man runs.\nTwo dogs play.\n"
    spec = data.CorpusFile(
        "multi30k/x.en",
        "test lines",
        "https://example.invalid/x.en.gz",
        hashlib.sha256(content).hexdigest(),
        gzipped=True,
    )
    monkeypatch.setattr(data.urllib.request, "urlopen", lambda url, timeout: io.BytesIO(gzip.compress(content)))
    path = ensure_corpus_file(spec, tmp_path, download=True)
    assert path.read_bytes() == content

    corrupted = data.CorpusFile(spec.relative_path.replace("x", "y"), "test lines", spec.url, "0" * 64, True)
    with pytest.raises(DataFileNotFoundError, match="sha256"):
        ensure_corpus_file(corrupted, tmp_path, download=True)
    assert not (tmp_path / "multi30k" / "y.en").exists()


# --------------------------------------------------------------------------------------------------
# NSMC


def test_nsmc_decodes_quotes_drops_and_counts_empty_rows(tmp_path, caplog):
    root = write_nsmc(tmp_path / "data")
    with caplog.at_level(logging.WARNING, logger="hf_transformer.data"):
        nsmc = load_nsmc(root, validation_size=0.25, cache_dir=tmp_path / "cache")
    assert "ratings_train.txt: dropped 2 of 40 rows with an empty document" in caplog.text
    assert "ratings_test.txt: dropped 1 of 3 rows with an empty document" in caplog.text

    assert set(nsmc) == {"train", "validation", "test"}
    assert (len(nsmc["train"]), len(nsmc["validation"]), len(nsmc["test"])) == (28, 10, 2)
    everything = {row["id"]: row for split in ("train", "validation") for row in nsmc[split]}
    assert len(everything) == 38  # the two parts do not overlap
    assert everything["3"]["text"] == '영화 끝나갈때쯤에 멍하다가 다보고나면 한마디 나올거임 "ㅈ같다."'
    assert everything["5"]["text"] == "NA"
    assert "4" not in everything and "7" not in everything
    assert nsmc["train"].features["label"].names == ["negative", "positive"]
    assert [row["id"] for row in nsmc["test"]] == ["900", "902"]


def test_nsmc_validation_split_is_fixed_by_the_seed(tmp_path):
    root = write_nsmc(tmp_path / "data")
    first = load_nsmc(root, validation_size=0.25, seed=7, cache_dir=tmp_path / "cache")
    again = load_nsmc(root, validation_size=0.25, seed=7, cache_dir=tmp_path / "cache")
    other = load_nsmc(root, validation_size=0.25, seed=8, cache_dir=tmp_path / "cache")
    assert first["validation"]["id"][:] == again["validation"]["id"][:]
    assert sorted(first["validation"]["id"][:]) != sorted(other["validation"]["id"][:])


# --------------------------------------------------------------------------------------------------
# Multi30k and parallel text


def test_multi30k_pairs_lines_and_keeps_a_tab_inside_a_sentence(tmp_path):
    root = write_multi30k(tmp_path / "data")
    multi30k = load_multi30k(root, cache_dir=tmp_path / "cache")
    assert {split: len(rows) for split, rows in multi30k.items()} == {"train": 4, "validation": 1, "test": 2}
    assert multi30k["train"][1]["translation"] == {"en": "A man runs.", "de": "Ein Mann \tläuft."}
    assert multi30k["test"][1]["translation"] == {"en": "Two women talk.", "de": "Zwei Frauen reden."}
    reverse = load_multi30k(root, source_lang="de", target_lang="en", cache_dir=tmp_path / "cache")
    assert reverse["validation"][0]["translation"] == {"de": "Eine Katze schläft.", "en": "A cat sleeps."}


def test_multi30k_sides_of_different_length_are_an_error(tmp_path):
    root = write_multi30k(tmp_path / "data")
    with (root / "multi30k" / "val.de").open("a", encoding="utf-8") as extra:
        extra.write("Noch ein Satz.\n")
    with pytest.raises(ValueError) as caught:
        load_multi30k(root, cache_dir=tmp_path / "cache")
    message = str(caught.value)
    assert "val.en has 1 lines" in message and "val.de has 2" in message


def test_parallel_text_files(tmp_path):
    (tmp_path / "a.ko").write_text("겨울은 추워요.\n감기 조심하세요.\n", "utf-8")
    (tmp_path / "a.en").write_text("Winter is cold.\nMind the cold.\n", "utf-8")
    pairs = load_parallel_text(
        {"train": tmp_path / "a.ko"}, {"train": tmp_path / "a.en"}, "ko", "en", cache_dir=tmp_path / "cache"
    )
    assert pairs["train"][1]["translation"] == {"ko": "감기 조심하세요.", "en": "Mind the cold."}
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


# --------------------------------------------------------------------------------------------------
# Tokenizing, collating, batching


def test_classification_pipeline_pads_each_batch_to_its_longest_row(tokenizer, tmp_path):
    nsmc = load_nsmc(write_nsmc(tmp_path / "data"), validation_size=0.25, cache_dir=tmp_path / "cache")
    tokenized = tokenize_classification(nsmc, tokenizer, max_length=12)
    assert sorted(tokenized["train"].column_names) == ["attention_mask", "input_ids", "label"]
    assert tokenized["train"].features["label"] == nsmc["train"].features["label"]
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


def test_translation_pipeline_pads_labels_with_minus_100(tokenizer, tmp_path):
    multi30k = load_multi30k(write_multi30k(tmp_path / "data"), cache_dir=tmp_path / "cache")
    german = [pair["de"] for pair in multi30k["train"]["translation"]]
    full_lengths = [len(tokenizer(text_target=text)["input_ids"]) for text in german]
    limit = max(full_lengths) - 1  # only the longest target is cut
    tokenized = tokenize_translation(
        multi30k, tokenizer, source_lang="en", target_lang="de", max_source_length=16, max_target_length=limit
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
    texts = [sentence for english, german in MULTI30K.values() for sentence in english + german]
    return train_tokenizer(texts * 10, vocab_size=150, model_type="bpe", model_max_length=64, show_progress=False)


def test_subword_dropout_samples_new_segmentations_of_the_same_text(bpe_tokenizer, tmp_path):
    multi30k = load_multi30k(write_multi30k(tmp_path / "data"), cache_dir=tmp_path / "cache")
    train = multi30k["train"]
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


def test_subword_dropout_truncates_like_the_fixed_tokenization(bpe_tokenizer, tmp_path):
    multi30k = load_multi30k(write_multi30k(tmp_path / "data"), cache_dir=tmp_path / "cache")
    sampled = SubwordSampledTranslation(
        multi30k["train"],
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
    train = load_multi30k(write_multi30k(tmp_path / "data"), cache_dir=tmp_path / "cache")["train"]
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

    multi30k = load_multi30k(write_multi30k(tmp_path / "data"), cache_dir=tmp_path / "cache")
    tokenized = tokenize_translation(multi30k["train"], tokenizer, source_lang="en", target_lang="de")
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


# --------------------------------------------------------------------------------------------------
# The real corpora


@pytest.mark.skipif(
    not (REAL_DATA_DIR / "nsmc" / "ratings_train.txt").is_file(),
    reason=f"no real corpora in {REAL_DATA_DIR} (set {DATA_DIR_ENV} to a folder with nsmc/ and multi30k/)",
)
def test_real_nsmc_and_multi30k(tmp_path, caplog):
    with caplog.at_level(logging.WARNING, logger="hf_transformer.data"):
        nsmc = load_nsmc(REAL_DATA_DIR, download=False, cache_dir=tmp_path)
    # The README's counts: 150,000 / 50,000 rows, of which 5 / 3 have an empty document.
    assert "dropped 5 of 150000 rows" in caplog.text and "dropped 3 of 50000 rows" in caplog.text
    assert len(nsmc["train"]) + len(nsmc["validation"]) == 149_995
    assert len(nsmc["validation"]) == 15_000 and len(nsmc["test"]) == 49_997
    documents = nsmc["train"]["text"][:] + nsmc["validation"]["text"][:]
    # Quotes decoded twice: no review is longer than Naver's limit allows (142 characters in this file).
    assert max(map(len, documents)) == 142
    assert sum('"' in text for text in documents) == 623

    multi30k = load_multi30k(REAL_DATA_DIR, download=False, cache_dir=tmp_path)
    assert {split: len(rows) for split, rows in multi30k.items()} == {
        "train": 29_000,
        "validation": 1_014,
        "test": 1_000,
    }
    line_7366 = multi30k["train"][7365]["translation"]["de"]
    assert line_7366.startswith('"Zwei männliche') and "\t" in line_7366


def test_first_rows_cuts_only_the_splits_given():
    from datasets import Dataset, DatasetDict

    from hf_transformer.data import first_rows
    from hf_transformer.training import SplitLimits

    splits = DatasetDict({name: Dataset.from_dict({"x": list(range(10))}) for name in ("train", "validation", "test")})
    cut = first_rows(splits, SplitLimits(max_train_samples=3, max_test_samples=50).split_limits())
    assert cut["train"]["x"] == [0, 1, 2]
    assert len(cut["validation"]) == 10 and len(cut["test"]) == 10
