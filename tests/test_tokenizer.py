"""`hf_transformer.tokenization`: training, special ids, round trips, reloading, SentencePiece import, CLI,
and the top-level name `tokenizer` left to the unrelated PyPI package."""

import ast
import configparser
import importlib.metadata
import io
import json
import logging
import os
import subprocess
import sys
import unicodedata
from pathlib import Path

import pytest
from tokenizers import Tokenizer
from transformers import AutoTokenizer, PreTrainedTokenizerFast

import hf_transformer
from hf_transformer.tokenization import EOS_TOKEN, SPECIAL_TOKENS, import_sentencepiece, train_tokenizer
from hf_transformer.tokenization.cli import main as cli_main

os.environ.setdefault("HF_HUB_OFFLINE", "1")

KOREAN = [
    "겨울은 추워요.",
    "여름은 더워요.",
    "감기 조심하세요.",
    "겨울에는 눈이 와요.",
    "영화가 정말 재미있어요!",
    "이 영화는 지루했어요...",
    "배우들의 연기가 좋았어요.",
    "다시 보고 싶은 영화입니다.",
    "ㅋㅋㅋ 진짜 웃겨요 ^^",
]
OTHER = [
    "A man in a blue shirt is standing on a ladder.",
    "Ein Mann in einem blauen Hemd steht auf einer Leiter.",
    "Two dogs are playing in the snow.",
    "Zwei Hunde spielen im Schnee.",
    "Das Mädchen läuft über die Straße.",
    "영화 title은 Parasite였어요 (2019)",
    "최고의 영화 😀👍 강추!",
    "Mixed 한국어 and English 문장 with emoji 🎬",
]
# Every sentence 20 times: the Unigram trainer needs repeated substrings to keep pieces like "▁겨울".
CORPUS = (KOREAN + OTHER) * 20
VOCAB_SIZE = 300


def visible_form(text: str) -> str:
    """What decoding gives back: NFKC, single spaces, no leading or trailing space (SentencePiece's rule)."""
    return " ".join(unicodedata.normalize("NFKC", text).split())


def same_pieces(first, second) -> bool:
    """Same vocabulary and same segmentation. Ids are not compared: the Unigram trainer numbers pieces
    of equal score in a different order on each run."""
    return set(first.get_vocab()) == set(second.get_vocab()) and all(
        first.tokenize(text) == second.tokenize(text) for text in KOREAN + OTHER
    )


@pytest.fixture(scope="module")
def tokenizer() -> PreTrainedTokenizerFast:
    return train_tokenizer(CORPUS, vocab_size=VOCAB_SIZE, show_progress=False)


def test_special_tokens_have_fixed_ids(tokenizer):
    assert [tokenizer.convert_tokens_to_ids(token) for token in SPECIAL_TOKENS] == list(range(7))
    assert tokenizer.pad_token_id == 0
    assert tokenizer.unk_token_id == 1
    assert tokenizer.bos_token_id == 2
    assert tokenizer.eos_token_id == 3
    assert (tokenizer.sep_token_id, tokenizer.cls_token_id, tokenizer.mask_token_id) == (4, 5, 6)
    assert 7 < len(tokenizer) <= VOCAB_SIZE


def test_pieces_follow_sentencepiece_style(tokenizer):
    pieces = tokenizer.tokenize("겨울은 추워요.")
    assert pieces[0] == "▁겨울"
    assert pieces[-1] == "."  # punctuation is cut off the word, as SentencePiece splits at a script change
    assert "".join(pieces) == "▁겨울은▁추워요."
    # every word starts with the metaspace; the pieces inside it do not
    assert [piece for piece in pieces if piece.startswith("▁")] == [
        "▁겨울",
        pieces[pieces.index("▁겨울") + 2],
    ]


def test_eos_closes_source_and_target_without_bos(tokenizer):
    encoded = tokenizer("겨울은 추워요.", text_target="Zwei Hunde spielen im Schnee.")
    assert encoded["input_ids"][-1] == tokenizer.eos_token_id
    assert encoded["labels"][-1] == tokenizer.eos_token_id
    assert tokenizer.bos_token_id not in encoded["input_ids"] + encoded["labels"]
    assert encoded["input_ids"].count(tokenizer.eos_token_id) == 1
    assert set(encoded) == {"input_ids", "attention_mask", "labels"}


def test_pair_is_joined_with_sep(tokenizer):
    first, second = tokenizer("여름은 더워요.")["input_ids"], tokenizer("감기 조심하세요.")["input_ids"]
    pair = tokenizer("여름은 더워요.", "감기 조심하세요.")["input_ids"]
    assert pair == first[:-1] + [tokenizer.sep_token_id] + second


@pytest.mark.parametrize(
    "text",
    KOREAN
    + OTHER
    + [
        "",
        "   ",
        "  겨울은   추워요  ",  # extra spaces collapse
        "겨울은\t추워요\n감기",  # tabs and newlines are spaces
        "Ａ ２０１９！",  # NFKC folds full-width forms
        "영화 Two dogs 😀 Schnee!",
        "정말 재미있어요 ! 최고 .",  # a space before punctuation stays (no clean-up of spaces on decode)
    ],
)
def test_decode_round_trip(tokenizer, text):
    ids = tokenizer(text)["input_ids"]
    assert tokenizer.unk_token_id not in ids or not visible_form(text)
    assert tokenizer.decode(ids, skip_special_tokens=True) == visible_form(text)


def test_empty_string_is_only_eos(tokenizer):
    assert tokenizer("")["input_ids"] == [tokenizer.eos_token_id]
    assert tokenizer.decode(tokenizer("")["input_ids"], skip_special_tokens=True) == ""


def test_unseen_characters_become_unk(tokenizer):
    ids = tokenizer("겨울 鬱 ✈")["input_ids"]
    assert ids.count(tokenizer.unk_token_id) == 2


def test_truncation_keeps_eos_and_padding_uses_pad_id(tokenizer):
    long_text = " ".join(KOREAN)
    truncated = tokenizer(long_text, truncation=True, max_length=6)["input_ids"]
    assert len(truncated) == 6 and truncated[-1] == tokenizer.eos_token_id
    batch = tokenizer(["겨울", "겨울은 추워요. 여름은 더워요."], padding=True)
    short_ids, long_ids = batch["input_ids"]
    assert len(short_ids) == len(long_ids)
    padded = len(long_ids) - sum(batch["attention_mask"][0])
    assert padded > 0 and short_ids[-padded:] == [0] * padded  # right padding with [PAD] = 0


def test_model_max_length_is_the_default_truncation(tokenizer):
    assert tokenizer.model_max_length == 256
    short = train_tokenizer(CORPUS, vocab_size=VOCAB_SIZE, model_max_length=5, show_progress=False)
    assert len(short(" ".join(KOREAN), truncation=True)["input_ids"]) == 5


def test_autotokenizer_reloads_with_special_tokens(tokenizer, tmp_path):
    tokenizer.save_pretrained(tmp_path)
    reloaded = AutoTokenizer.from_pretrained(tmp_path)
    assert reloaded.is_fast
    assert reloaded.special_tokens_map == tokenizer.special_tokens_map
    assert reloaded.model_max_length == tokenizer.model_max_length
    for text in KOREAN + OTHER + [""]:
        assert reloaded(text)["input_ids"] == tokenizer(text)["input_ids"]
    assert reloaded("a", text_target="b")["labels"][-1] == 3


def test_model_folder_with_tokenizer_is_complete(tokenizer, tmp_path):
    """A model folder holds config, weights and tokenizer; the Auto classes load each from the one path."""
    from transformers import AutoConfig

    from hf_transformer import TransformerConfig

    config = TransformerConfig(
        vocab_size=len(tokenizer),
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    config.save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    reloaded_config = AutoConfig.from_pretrained(tmp_path)
    reloaded = AutoTokenizer.from_pretrained(tmp_path)
    assert reloaded_config.pad_token_id == reloaded.pad_token_id == 0
    assert reloaded_config.eos_token_id == reloaded.eos_token_id == 3
    assert reloaded("겨울은 추워요.")["input_ids"] == tokenizer("겨울은 추워요.")["input_ids"]


def test_training_from_files_matches_training_from_strings(tokenizer, tmp_path):
    path = tmp_path / "corpus.txt"
    path.write_text("\n".join(CORPUS) + "\n", encoding="utf-8")
    from_path = train_tokenizer(path, vocab_size=VOCAB_SIZE, show_progress=False)
    from_list = train_tokenizer([str(path)], vocab_size=VOCAB_SIZE, show_progress=False)
    assert same_pieces(from_path, tokenizer) and same_pieces(from_list, tokenizer)


def test_training_from_a_dataset_column_and_a_generator(tokenizer):
    from datasets import Dataset

    dataset = Dataset.from_dict({"review": CORPUS, "label": [0] * len(CORPUS)})
    from_dataset = train_tokenizer(dataset, vocab_size=VOCAB_SIZE, text_column="review", show_progress=False)
    from_generator = train_tokenizer((text for text in CORPUS), vocab_size=VOCAB_SIZE, show_progress=False)
    assert same_pieces(from_dataset, tokenizer) and same_pieces(from_generator, tokenizer)
    with pytest.raises(KeyError, match="review"):
        train_tokenizer(dataset, vocab_size=VOCAB_SIZE, text_column="text", show_progress=False)


def test_unigram_training_gives_the_same_pieces_the_same_ids_every_time(tokenizer):
    # The trainer numbers the pieces by score in an order that changes between trainings (on this corpus some 70 of
    # the 300 pieces move); numbered by their text after the special tokens, the same pieces keep their ids.
    again = train_tokenizer(CORPUS, vocab_size=VOCAB_SIZE, show_progress=False)
    assert again.get_vocab() == tokenizer.get_vocab()
    pieces = [tokenizer.convert_ids_to_tokens(index) for index in range(len(tokenizer))]
    assert pieces[:7] == list(SPECIAL_TOKENS) and pieces[7:] == sorted(pieces[7:])
    for text in KOREAN + OTHER:
        assert again(text)["input_ids"] == tokenizer(text)["input_ids"]
    # Only the numbering moved: the pieces and their scores cut every text as the trainer's own order does.
    state = json.loads(tokenizer.backend_tokenizer.to_str())
    scored = dict(map(tuple, state["model"]["vocab"]))
    state["model"]["vocab"].sort(key=lambda entry: -entry[1] if entry[0] not in SPECIAL_TOKENS else float("-inf"))
    by_score = Tokenizer.from_str(json.dumps(state))
    assert dict(map(tuple, json.loads(by_score.to_str())["model"]["vocab"])) == scored
    for text in KOREAN + OTHER:
        assert by_score.encode(text).tokens == tokenizer.tokenize(text) + [EOS_TOKEN]


def test_bpe_option():
    bpe = train_tokenizer(CORPUS, vocab_size=VOCAB_SIZE, model_type="bpe", show_progress=False)
    assert [bpe.convert_tokens_to_ids(token) for token in SPECIAL_TOKENS] == list(range(7))
    assert type(bpe.backend_tokenizer.model).__name__ == "BPE"
    for text in KOREAN + OTHER:
        assert bpe.decode(bpe(text)["input_ids"], skip_special_tokens=True) == visible_form(text)


def test_lowercase_option_folds_case_everywhere_and_survives_reloading(tmp_path):
    lower = train_tokenizer(CORPUS, vocab_size=VOCAB_SIZE, lowercase=True, show_progress=False)
    # No capital reaches the vocabulary (the special tokens aside), and a text encodes as its lowercase form does.
    pieces = set(lower.get_vocab()) - set(SPECIAL_TOKENS)
    assert any(char.isalpha() for piece in pieces for char in piece)
    assert not any(char.isupper() for piece in pieces for char in piece)
    for text in OTHER:
        assert lower(text)["input_ids"] == lower(text.lower())["input_ids"]
        assert lower.decode(lower(text)["input_ids"], skip_special_tokens=True) == visible_form(text).lower()
    lower.save_pretrained(tmp_path)
    reloaded = AutoTokenizer.from_pretrained(tmp_path)
    assert reloaded("Ein MANN.")["input_ids"] == lower("ein mann.")["input_ids"]
    # The default keeps case.
    cased = train_tokenizer(CORPUS, vocab_size=VOCAB_SIZE, show_progress=False)
    assert cased("Ein MANN.")["input_ids"] != cased("ein mann.")["input_ids"]


def test_fewer_pieces_than_asked_is_logged(caplog):
    with caplog.at_level(logging.WARNING, logger="hf_transformer.tokenization.train"):
        small = train_tokenizer(KOREAN, vocab_size=5000, show_progress=False)
    assert len(small) < 5000
    assert "fewer than the 5000 asked for" in caplog.text


@pytest.mark.parametrize(
    "arguments, error, message",
    [
        ({"texts_or_files": CORPUS, "vocab_size": 7}, ValueError, "above the 7 special tokens"),
        ({"texts_or_files": CORPUS, "model_type": "wordpiece"}, ValueError, "model_type"),
        ({"texts_or_files": CORPUS, "shrinking_factor": 1.5}, ValueError, "shrinking_factor"),
        ({"texts_or_files": CORPUS, "model_max_length": 0}, ValueError, "model_max_length .* at least 2, not 0"),
        ({"texts_or_files": CORPUS, "model_max_length": -5}, ValueError, "model_max_length .* at least 2, not -5"),
        ({"texts_or_files": [], "vocab_size": 100}, ValueError, "empty"),
        ({"texts_or_files": ["", " "], "vocab_size": 100}, ValueError, "empty"),
        ({"texts_or_files": ["text", 3], "vocab_size": 100}, TypeError, "item 1 is a int"),
        ({"texts_or_files": "/no/such/corpus.txt"}, FileNotFoundError, "/no/such/corpus.txt"),
    ],
)
def test_bad_input_is_named(arguments, error, message):
    with pytest.raises(error, match=message):
        train_tokenizer(show_progress=False, **arguments)


def test_what_the_trainer_cannot_do_is_named_with_what_to_change(tmp_path, caplog):
    # The `tokenizers` trainer raises bare Exceptions: "not large enough to contain all chars", "did not contain
    # valid UTF-8" (naming no file).
    with pytest.raises(ValueError, match="vocab_size 20 cannot hold every distinct character"):
        train_tokenizer(KOREAN, vocab_size=20, model_type="unigram", show_progress=False)
    good, korean_ansi = tmp_path / "good.txt", tmp_path / "cp949.txt"
    good.write_text("겨울은 추워요.\n", encoding="utf-8")
    korean_ansi.write_bytes("겨울은 추워요.\n".encode("cp949"))
    with pytest.raises(ValueError, match=r"cp949.txt is not UTF-8 text"):
        train_tokenizer([str(good), str(korean_ansi)], vocab_size=100, show_progress=False)
    with caplog.at_level(logging.WARNING, logger="hf_transformer.tokenization.train"):
        larger = train_tokenizer(KOREAN, vocab_size=20, model_type="bpe", show_progress=False)
    assert len(larger) > 20 and "more (every character of the text is a piece) than the 20 asked for" in caplog.text


def test_missing_file_in_a_list_of_files_is_named(tmp_path):
    present = tmp_path / "present.txt"
    present.write_text("겨울은 추워요.\n", encoding="utf-8")
    with pytest.raises(FileNotFoundError, match="absent.txt"):
        train_tokenizer([present, tmp_path / "absent.txt"], vocab_size=100, show_progress=False)


# --------------------------------------------------------------------------------------------------
# SentencePiece import


@pytest.fixture(scope="module")
def sentencepiece_model(tmp_path_factory):
    """A SentencePiece model made like the seeds' kowiki.model: [PAD] 0 .. [EOS] 3, [SEP] [CLS] [MASK]."""
    spm = pytest.importorskip("sentencepiece", reason="the optional sentencepiece package is not installed")
    pytest.importorskip("google.protobuf", reason="the optional protobuf package is not installed")
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(CORPUS),
        model_writer=model,
        vocab_size=120,
        model_type="unigram",
        pad_id=0, pad_piece="[PAD]", unk_id=1, unk_piece="[UNK]",
        bos_id=2, bos_piece="[BOS]", eos_id=3, eos_piece="[EOS]",
        user_defined_symbols=["[SEP]", "[CLS]", "[MASK]"],
        minloglevel=2,
    )  # fmt: skip
    path = tmp_path_factory.mktemp("spm") / "kowiki-like.model"
    path.write_bytes(model.getvalue())
    return path, spm.SentencePieceProcessor(model_file=str(path))


def test_imported_sentencepiece_gives_the_same_ids(sentencepiece_model, tmp_path):
    path, processor = sentencepiece_model
    imported = import_sentencepiece(path, save_directory=tmp_path)
    assert len(imported) == processor.get_piece_size() == 120
    assert [imported.convert_tokens_to_ids(token) for token in SPECIAL_TOKENS] == list(range(7))
    assert (imported.pad_token_id, imported.unk_token_id, imported.bos_token_id, imported.eos_token_id) == (
        0, 1, 2, 3,
    )  # fmt: skip
    reloaded = AutoTokenizer.from_pretrained(tmp_path)
    for text in KOREAN + OTHER:
        expected = processor.encode(text) + [3]
        assert imported(text)["input_ids"] == expected, text
        assert reloaded(text)["input_ids"] == expected, text
        assert imported.tokenize(text) == processor.encode_as_pieces(text)
        assert imported.decode(expected, skip_special_tokens=True) == processor.decode(expected[:-1])


def test_cli_imports_a_sentencepiece_model(sentencepiece_model, tmp_path):
    path, processor = sentencepiece_model
    assert cli_main(["-q", "import-sentencepiece", str(path), "--output", str(tmp_path)]) == 0
    reloaded = AutoTokenizer.from_pretrained(tmp_path)
    assert reloaded("겨울은 추워요.")["input_ids"] == processor.encode("겨울은 추워요.") + [3]


def test_sentencepiece_import_without_the_package_says_what_to_install(monkeypatch, tmp_path):
    path = tmp_path / "any.model"
    path.write_bytes(b"not read")
    monkeypatch.setitem(sys.modules, "sentencepiece", None)  # makes `import sentencepiece` fail
    with pytest.raises(ImportError, match=r"sentencepiece.*pip install"):
        import_sentencepiece(path)


def test_sentencepiece_import_rejects_a_file_that_is_not_a_model(tmp_path):
    pytest.importorskip("sentencepiece", reason="the optional sentencepiece package is not installed")
    pytest.importorskip("google.protobuf", reason="the optional protobuf package is not installed")
    path = tmp_path / "broken.model"
    path.write_bytes(b"\xff\x00 definitely not a protobuf")
    with pytest.raises(ValueError, match="broken.model"):
        import_sentencepiece(path)
    with pytest.raises(FileNotFoundError, match="missing.model"):
        import_sentencepiece(tmp_path / "missing.model")


# --------------------------------------------------------------------------------------------------
# Command line


def test_cli_trains_saves_and_encodes(tmp_path, capsys):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(CORPUS) + "\n", encoding="utf-8")
    output = tmp_path / "vocab"
    assert cli_main(["-q", "train", str(corpus), "--vocab-size", str(VOCAB_SIZE), "--output", str(output)]) == 0
    config = json.loads((output / "tokenizer_config.json").read_text(encoding="utf-8"))
    assert config["pad_token"] == "[PAD]" and config["eos_token"] == "[EOS]"
    assert cli_main(["-q", "encode", str(output), "겨울은 추워요."]) == 0
    printed = capsys.readouterr().out
    assert "▁겨울 / 은" in printed and "[EOS]" in printed
    lower = tmp_path / "lower"
    assert cli_main(["-q", "train", str(corpus), "--vocab-size", str(VOCAB_SIZE), "-o", str(lower), "--lowercase"]) == 0
    assert AutoTokenizer.from_pretrained(lower).backend_tokenizer.normalizer.normalize_str("Zwei") == "zwei"


def test_cli_trains_on_a_csv_column(tmp_path):
    table = tmp_path / "reviews.csv"
    table.write_text("review,label\n" + "".join(f'"{text}",1\n' for text in CORPUS), encoding="utf-8")
    output = tmp_path / "vocab"
    assert (
        cli_main(["-q", "train", str(table), "--text-column", "review", "--vocab-size", "300", "-o", str(output)]) == 0
    )
    assert AutoTokenizer.from_pretrained(output).tokenize("겨울은 추워요.")[0] == "▁겨울"


def test_cli_reports_missing_input(tmp_path, capsys):
    with pytest.raises(SystemExit, match="not found"):
        cli_main(["-q", "train", str(tmp_path / "nothing.txt"), "--output", str(tmp_path / "out")])
    with pytest.raises(SystemExit, match="--text-column"):
        table = tmp_path / "t.csv"
        table.write_text("a,b\nx,y\n", encoding="utf-8")
        cli_main(["-q", "train", str(table), "--output", str(tmp_path / "out")])
    assert cli_main(["-q", "encode", str(tmp_path / "no-tokenizer"), "a text"]) == 1
    assert capsys.readouterr().err.strip() == f"error: no tokenizer folder at {tmp_path / 'no-tokenizer'}"
    (tmp_path / "empty").mkdir()  # transformers' answer was to install sentencepiece or tiktoken
    assert cli_main(["-q", "encode", str(tmp_path / "empty"), "a text"]) == 1
    assert (
        capsys.readouterr().err.strip()
        == f"error: {tmp_path / 'empty'} holds no tokenizer (tokenizer.json or tokenizer_config.json)"
    )
    # One line, not a traceback: a column of numbers, and a vocabulary too small for the text's characters.
    numbers = tmp_path / "n.jsonl"
    numbers.write_text('{"text": 3}\n{"text": 4}\n', encoding="utf-8")
    assert cli_main(["-q", "train", str(numbers), "--text-column", "text", "-o", str(tmp_path / "out")]) == 1
    assert capsys.readouterr().err.splitlines()[-1].startswith("error: training item 0 is a int")
    corpus = tmp_path / "c.txt"
    corpus.write_text("\n".join(KOREAN) + "\n", encoding="utf-8")
    assert cli_main(["-q", "train", str(corpus), "--vocab-size", "20", "-o", str(tmp_path / "out")]) == 1
    assert capsys.readouterr().err.splitlines()[-1].startswith("error: vocab_size 20 cannot hold every distinct")
    # A column named for a plain-text file is refused rather than ignored.
    with pytest.raises(SystemExit, match="--text-column names a column of CSV/TSV/JSON files; .*c.txt is plain text"):
        cli_main(["-q", "train", str(corpus), "--text-column", "review", "-o", str(tmp_path / "out")])


def test_a_file_where_the_tokenizer_folder_would_go_is_refused_before_the_training(tmp_path, capsys, monkeypatch):
    import hf_transformer.tokenization.train as training

    def no_training(*args, **kwargs):
        raise AssertionError("the vocabulary was trained before the folder was checked")

    monkeypatch.setattr(training, "build_trainer", no_training)
    corpus = tmp_path / "c.txt"
    corpus.write_text("\n".join(CORPUS) + "\n", encoding="utf-8")
    taken = tmp_path / "taken"
    taken.write_text("keep", encoding="utf-8")
    assert cli_main(["-q", "train", str(corpus), "--vocab-size", str(VOCAB_SIZE), "-o", str(taken)]) == 1
    assert capsys.readouterr().err.strip() == f"error: {taken} is a file: give the folder to save the tokenizer to"
    assert taken.read_text(encoding="utf-8") == "keep"
    with pytest.raises(NotADirectoryError, match="is a file"):
        train_tokenizer(CORPUS, vocab_size=VOCAB_SIZE, save_directory=taken)
    model = tmp_path / "model"  # a saved model's folder: its tokenizer is the one its weights were trained with
    model.mkdir()
    (model / "config.json").write_text("{}", encoding="utf-8")
    assert cli_main(["-q", "train", str(corpus), "--vocab-size", str(VOCAB_SIZE), "-o", str(model)]) == 1
    assert "holds a saved model (config.json): a new tokenizer there would replace" in capsys.readouterr().err
    assert [path.name for path in model.iterdir()] == ["config.json"]


@pytest.mark.parametrize("length", ["0", "-5"])
def test_sentencepiece_import_takes_the_lengths_training_takes(sentencepiece_model, tmp_path, capsys, length):
    path, _ = sentencepiece_model
    output = tmp_path / "imported"
    assert cli_main(["-q", "import-sentencepiece", str(path), "-o", str(output), "--model-max-length", length]) == 1
    assert capsys.readouterr().err.strip() == f"error: model_max_length must be an integer of at least 2, not {length}"
    assert not output.exists()
    taken = tmp_path / "taken"
    taken.write_text("keep", encoding="utf-8")
    assert cli_main(["-q", "import-sentencepiece", str(path), "-o", str(taken)]) == 1
    assert "is a file" in capsys.readouterr().err and taken.read_text(encoding="utf-8") == "keep"


# --------------------------------------------------------------------------------------------------
# Packaging: `tokenizer` is also an unrelated PyPI package (tokenizer 3.x). The library lives in
# hf_transformer.tokenization; the top-level tokenizer/ folder is a repository-only shim, never installed.

ROOT = Path(__file__).resolve().parents[1]


def _claims_tokenizer(names) -> list[str]:
    return [name for name in names if name == "tokenizer" or name.startswith("tokenizer.")]


def test_distribution_does_not_claim_the_top_level_name_tokenizer():
    config = configparser.ConfigParser()
    config.read(ROOT / "setup.cfg", encoding="utf-8")
    include = config["options.packages.find"]["include"].split()
    assert include and not _claims_tokenizer(include), include
    entry_point = config["options.entry_points"]["console_scripts"]
    assert "hf-transformer-tokenizer = hf_transformer.tokenization.cli:main" in entry_point
    assert not _claims_tokenizer(line.split("=")[-1].strip() for line in entry_point.splitlines())

    # What the installed distribution says (stale after editing setup.cfg: `pip install -e .` again).
    try:
        distribution = importlib.metadata.distribution("hf_transformer")
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("hf_transformer is not installed (pip install -e .): only setup.cfg was checked")
    top_level = (distribution.read_text("top_level.txt") or "").split()
    assert top_level == ["hf_transformer"], top_level
    assert "hf_transformer" not in importlib.metadata.packages_distributions().get("tokenizer", [])
    scripts = {entry.name: entry.value for entry in distribution.entry_points if entry.group == "console_scripts"}
    assert scripts.get("hf-transformer-tokenizer") == "hf_transformer.tokenization.cli:main", scripts


@pytest.mark.slow
def test_no_code_imports_the_top_level_tokenizer_shim():
    """Only the shim itself may import `tokenizer`: installed code would get the PyPI package instead."""
    offenders = []
    for folder in ("hf_transformer", "scripts", "tests", "benchmarks"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
                if isinstance(node, ast.Import):
                    names = [alias.name for alias in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0:
                    names = [node.module or ""]
                else:
                    continue
                offenders += [f"{path.relative_to(ROOT)}:{node.lineno}" for _ in _claims_tokenizer(names)]
    assert not offenders, offenders


def _python(*arguments: str, cwd: Path, pythonpath: list[str] | None = None) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    if pythonpath is not None:
        env["PYTHONPATH"] = os.pathsep.join(pythonpath)
    return subprocess.run([sys.executable, *arguments], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


@pytest.mark.slow
def test_python_m_tokenizer_from_the_repository_root_runs_the_shim():
    result = _python("-m", "tokenizer", "--help", cwd=ROOT)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("usage: python -m tokenizer ") and "import-sentencepiece" in result.stdout


@pytest.mark.slow
def test_works_beside_the_registry_tokenizer_package(tmp_path):
    """A stand-in for PyPI's `tokenizer` comes first on sys.path, outside the repository: `import tokenizer`
    gives it, and hf_transformer.tokenization and `python -m hf_transformer.tokenization` still work."""
    fake = tmp_path / "site" / "tokenizer"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text('MARKER = "registry"\n', encoding="utf-8")
    # runpy.run_module(..., run_name="__main__", alter_sys=True) is what `python -m hf_transformer.tokenization` does.
    check = (
        "import runpy, sys\n"
        "import tokenizer\n"
        "assert tokenizer.MARKER == 'registry', tokenizer.__file__\n"
        "from hf_transformer.tokenization import EOS_TOKEN, SPECIAL_TOKENS, import_sentencepiece, train_tokenizer\n"
        "import hf_transformer.tokenization.cli\n"
        "assert sys.modules['tokenizer'] is tokenizer\n"
        "sys.argv = ['-m', '--help']\n"
        "runpy.run_module('hf_transformer.tokenization', run_name='__main__', alter_sys=True)\n"
    )
    # hf_transformer's folder goes last, for a checkout that is not pip-installed: the stand-in still comes first.
    package_parent = str(Path(hf_transformer.__file__).resolve().parents[1])
    result = _python("-c", check, cwd=tmp_path, pythonpath=[str(fake.parent), package_parent])
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("usage: python -m hf_transformer.tokenization ") and "train" in result.stdout
