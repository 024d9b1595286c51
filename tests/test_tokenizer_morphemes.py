"""Tokenizers that cut Korean text into MeCab-ko morphemes first (`segmenter="mecab-ko"`): the cut, offsets and
round trips, saving and loading (with the package, with remote code only, without the analyzer), pickling for
`datasets`, and repeatable training."""

from __future__ import annotations

import ast
import copy
import json
import os
import pickle
import subprocess
import sys
import textwrap
import unicodedata
from pathlib import Path

import pytest
from transformers import AutoTokenizer

import hf_transformer
from hf_transformer.tokenization import train_tokenizer
from hf_transformer.tokenization.morphemes import MISSING_ANALYZER, MorphemeSplitter, MorphemeTokenizerFast

pytest.importorskip("mecab", reason="the morphemes extra (python-mecab-ko) is not installed")

os.environ.setdefault("HF_HUB_OFFLINE", "1")

REVIEWS = [
    "이런 영화는 처음이다",
    "배우들 연기는 좋았는데 스토리가 너무 지루했다",
    "시간이 아까운 최악의 영화였던가...",
    "다시 보고 싶은 인생 영화",
    "정말 재미있고 감동적인 영화였어요!!",
    "ㅋㅋㅋ 진짜 웃겨요 ^^ 강추합니다",
    "스토리도 연기도 별로였다. 1점도 아깝다",
    "감독의 다음 영화가 기대된다",
]
REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def tokenizer() -> MorphemeTokenizerFast:
    return train_tokenizer(REVIEWS * 10, vocab_size=300, model_type="bpe", segmenter="mecab-ko", show_progress=False)


def test_pieces_never_cross_a_morpheme_and_mark_word_starts(tokenizer):
    assert isinstance(tokenizer, MorphemeTokenizerFast)
    text = "영화였던가 지루했다"
    spans = MorphemeSplitter().spans(text)
    assert [text[start:end] for start, end in spans][:3] == ["영화", "였", "던가"]
    ends = {end for _, end in spans}
    encoding = tokenizer(text, return_offsets_mapping=True)
    pieces = encoding.tokens()[:-1]  # [EOS] last
    offsets = encoding["offset_mapping"][:-1]
    # Every morpheme boundary is a piece boundary, and "▁" marks exactly the pieces that begin a word.
    assert ends <= {end for _, end in offsets}
    word_starts = [start == 0 or text[start] == " " for start, _ in offsets]
    assert [piece.startswith("▁") for piece in pieces] == word_starts
    assert sum(word_starts) == 2
    assert tokenizer.decode(encoding["input_ids"], skip_special_tokens=True) == text


@pytest.mark.parametrize("lead", ["  ", "\t", "\n", "\u3000"])
def test_spaces_before_a_text_leave_its_first_word_a_word(tokenizer, lead):
    # The normalizer strips them; the first morpheme then no longer stood at the text's first character and lost its
    # word-start mark ("▁이런" read "이", "런"), so a review pasted with a leading space was cut otherwise.
    for text in REVIEWS:
        assert tokenizer(lead + text)["input_ids"] == tokenizer(text)["input_ids"], (lead, text)
    assert tokenizer("  이런 영화는").tokens()[0].startswith("▁")


@pytest.mark.parametrize("text", REVIEWS)
def test_decode_gives_the_text_back(tokenizer, text):
    # The normalizer's NFKC form: compatibility jamo such as "ㅋ" become their conjoining forms.
    decoded = tokenizer.decode(tokenizer(text)["input_ids"], skip_special_tokens=True)
    assert decoded == unicodedata.normalize("NFKC", text)


def test_saved_folder_reloads_the_morpheme_step(tokenizer, tmp_path):
    tokenizer.save_pretrained(tmp_path)
    saved = json.loads((tmp_path / "tokenizer_config.json").read_text())
    assert saved["tokenizer_class"] == "MorphemeTokenizerFast"
    assert saved["auto_map"]["AutoTokenizer"][1] == "morphemes.MorphemeTokenizerFast"
    assert (tmp_path / "morphemes.py").is_file()
    reloaded = AutoTokenizer.from_pretrained(tmp_path)
    assert type(reloaded) is MorphemeTokenizerFast
    for text in REVIEWS:
        assert reloaded(text)["input_ids"] == tokenizer(text)["input_ids"]
    # The saving left the live tokenizer whole.
    assert tokenizer("영화였던가").tokens() == reloaded("영화였던가").tokens()


@pytest.mark.parametrize("clone", ["pickle", "deepcopy"])
def test_pickled_and_copied_tokenizers_keep_the_morpheme_step(tokenizer, clone):
    other = pickle.loads(pickle.dumps(tokenizer)) if clone == "pickle" else copy.deepcopy(tokenizer)
    for text in REVIEWS:
        assert other(text)["input_ids"] == tokenizer(text)["input_ids"]


def test_datasets_map_fingerprints_and_tokenizes_with_it(tokenizer):
    datasets = pytest.importorskip("datasets")
    rows = datasets.Dataset.from_dict({"text": REVIEWS})
    mapped = rows.map(lambda batch: tokenizer(batch["text"]), batched=True)
    assert mapped["input_ids"] == [tokenizer(text)["input_ids"] for text in REVIEWS]


@pytest.mark.slow
def test_a_tokenized_data_file_is_cached_by_the_tokenizer_s_content_across_processes(tokenizer, tmp_path):
    """datasets hashes a tokenizer in a map's function by its attributes and cannot pickle the morpheme step: a random
    fingerprint each time, a new cache file each run. Through `TokenizerByContent` the same tokenizer and file give
    the same cache file in another process, another tokenizer another one, and the ids are the tokenizer's."""
    from hf_transformer.data import load_local_dataset, tokenize_classification

    path = tmp_path / "reviews.jsonl"
    path.write_text("".join(json.dumps({"text": text}, ensure_ascii=False) + "\n" for text in REVIEWS))
    tokenizer.save_pretrained(tmp_path / "tokenizer")
    code = f"""
        import json
        from transformers import AutoTokenizer
        import hf_transformer
        from hf_transformer.data import load_local_dataset, tokenize_classification
        tokenizer = AutoTokenizer.from_pretrained({str(tmp_path / "tokenizer")!r})
        rows = load_local_dataset({str(path)!r}, text_column="text", cache_dir={str(tmp_path / "cache")!r})["train"]
        print(json.dumps(tokenize_classification(rows, tokenizer, max_length=16).cache_files))
    """
    other_process = json.loads(_run(code, tmp_path).stdout.strip().splitlines()[-1])
    rows = load_local_dataset(path, text_column="text", cache_dir=tmp_path / "cache")["train"]
    loaded = AutoTokenizer.from_pretrained(tmp_path / "tokenizer")
    tokenized = tokenize_classification(rows, loaded, max_length=16)
    assert tokenized.cache_files == other_process and len(other_process) == 1
    assert tokenized[:]["input_ids"] == [loaded(text, truncation=True, max_length=16)["input_ids"] for text in REVIEWS]
    for other in (train_tokenizer(REVIEWS * 10, vocab_size=200, model_type="bpe", segmenter="mecab-ko"), loaded):
        max_length = 16 if other is not loaded else 8
        assert tokenize_classification(rows, other, max_length=max_length).cache_files != other_process


def _run(code: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HOME": str(cwd / "hf-home")}
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], cwd=cwd, env=env, capture_output=True, text=True, timeout=300
    )


@pytest.mark.slow
def test_loads_with_remote_code_where_the_package_is_absent(tokenizer, tmp_path):
    folder = tmp_path / "folder"
    tokenizer.save_pretrained(folder)
    expected = [tokenizer(text)["input_ids"] for text in REVIEWS]
    result = _run(
        f"""
        import json, sys
        sys.modules["hf_transformer"] = None  # as where the package is not installed
        from transformers import AutoTokenizer
        try:
            AutoTokenizer.from_pretrained({str(folder)!r})
        except ValueError as error:
            print("REFUSED", "trust_remote_code" in str(error))
        loaded = AutoTokenizer.from_pretrained({str(folder)!r}, trust_remote_code=True)
        print(type(loaded).__name__, json.dumps([loaded(t)["input_ids"] for t in {REVIEWS!r}]))
        """,
        tmp_path,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    refused, loaded = result.stdout.strip().splitlines()[-2:]
    assert refused.endswith("REFUSED True")  # after transformers' prompt, which has no one to answer it here
    name, ids = loaded.split(" ", 1)
    assert name == "MorphemeTokenizerFast" and json.loads(ids) == expected


@pytest.mark.slow
def test_without_the_analyzer_loading_says_what_to_install(tokenizer, tmp_path):
    tokenizer.save_pretrained(tmp_path / "folder")
    result = _run(
        f"""
        import sys
        sys.modules["mecab"] = None  # as where python-mecab-ko is not installed
        import hf_transformer  # the package itself imports without it
        from transformers import AutoTokenizer
        AutoTokenizer.from_pretrained({str(tmp_path / "folder")!r})
        """,
        tmp_path,
    )
    assert result.returncode != 0
    assert result.stderr.strip().splitlines()[-1] == f"ImportError: {MISSING_ANALYZER}"


# Each command that loads a folder, run where python-mecab-ko is not installed ({out}: a new folder for its output).
COMMANDS = {
    "predict": ["scripts/predict.py", "{folder}", "좋다"],
    "explore_attention": ["scripts/explore_attention.py", "{folder}", "좋다", "--output", "{out}/page.html"],
    "plot_attention": ["scripts/plot_attention.py", "attention", "{folder}", "좋다", "--output", "{out}/plot.png"],
    "push_to_hub": ["scripts/push_to_hub.py", "{folder}", "--repo_id", "your-name/model", "--dry-run", "{out}/up"],
    "app": ["-m", "hf_transformer.app", "{folder}"],
}
WITHOUT_MECAB = """
import runpy, sys
sys.modules["mecab"] = None  # as where python-mecab-ko is not installed
if sys.argv[1] == "-m":
    sys.argv = sys.argv[2:]
    runpy.run_module(sys.argv[0], run_name="__main__", alter_sys=True)
else:
    sys.argv = sys.argv[1:]
    runpy.run_path(sys.argv[0], run_name="__main__")
"""


@pytest.mark.slow
@pytest.mark.parametrize("command", COMMANDS)
def test_without_the_analyzer_each_command_says_what_to_install_in_one_line(classifier_folder, tmp_path, command):
    out = tmp_path / "out"
    out.mkdir()
    argv = [arg.format(folder=classifier_folder, out=out) for arg in COMMANDS[command]]
    result = subprocess.run(
        [sys.executable, "-c", WITHOUT_MECAB, *argv], cwd=REPO, capture_output=True, text=True, timeout=300,
        env={**os.environ, "HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf-home")},
    )  # fmt: skip
    assert result.returncode != 0
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    assert result.stderr.strip().splitlines()[-1].endswith(f"{classifier_folder}: {MISSING_ANALYZER}")
    assert not any(out.iterdir())  # nothing written


def test_unknown_segmenter_is_refused():
    with pytest.raises(ValueError, match="segmenter must be one of"):
        train_tokenizer(REVIEWS, vocab_size=100, segmenter="mecab")


TRAIN_AND_HASH = """
    import hashlib, json, sys, tempfile
    from hf_transformer.tokenization import train_tokenizer
    texts = json.loads(sys.argv[1])
    for segmenter in ("mecab-ko", None):
        tokenizer = train_tokenizer(texts, vocab_size=150, model_type="bpe", segmenter=segmenter,
                                    model_max_length=64, show_progress=False)
        folder = tempfile.mkdtemp()
        tokenizer.save_pretrained(folder)
        print(segmenter, len(tokenizer), hashlib.sha256(open(folder + "/tokenizer.json", "rb").read()).hexdigest())
"""


@pytest.mark.slow
def test_training_twice_writes_the_same_tokenizer_file():
    """The main job's tokenizer settings (BPE, with and without morphemes), trained in two fresh processes: string
    hashing differs between processes, and a trainer that gathers its texts in a hash map shows it here (Unigram's
    does: its files differ run to run). The corpus holds more pieces than the vocabulary keeps (183 and 216 against
    150), so the cut falls among merges of equal count (each review comes 40 times), where an order taken from a
    hash map would show, as it does at the job's 16,000."""
    corpus = [f"{review} {index}" for index, review in enumerate(REVIEWS * 40)]
    runs = []
    for seed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        result = subprocess.run(
            [sys.executable, "-c", textwrap.dedent(TRAIN_AND_HASH), json.dumps(corpus)],
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert result.returncode == 0, result.stderr[-2000:]
        runs.append(result.stdout.strip().splitlines()[-2:])
    assert [line.split()[:2] for line in runs[0]] == [["mecab-ko", "150"], ["None", "150"]]  # the limit binds
    assert runs[0] == runs[1]


def test_the_copied_module_imports_nothing_of_the_package():
    """save_pretrained copies morphemes.py alone into the folder, so it must import only installed packages."""
    tree = ast.parse((Path(hf_transformer.__file__).parent / "tokenization" / "morphemes.py").read_text())
    imported = [node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)]
    imported += [alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names]
    assert imported and not [name for name in imported if name.startswith("hf_transformer") or not name]
    assert all(node.level == 0 for node in ast.walk(tree) if isinstance(node, ast.ImportFrom))


def test_training_fingerprint_reads_the_saved_form(tokenizer, tmp_path):
    """The training scripts log a hash of the tokenizer (equal in every process of a run); `tokenizers` cannot
    write out the morpheme step, so the hash is of what tokenizer.json holds, equal for a reloaded copy."""
    from hf_transformer.training import tokenizer_fingerprint

    tokenizer.save_pretrained(tmp_path)
    assert tokenizer_fingerprint(tokenizer) == tokenizer_fingerprint(AutoTokenizer.from_pretrained(tmp_path))


LABELS = [0, 0, 0, 1, 1, 1, 0, 1]  # REVIEWS' sentiment: negative 0, positive 1


@pytest.fixture(scope="module")
def classifier_folder(tokenizer, tmp_path_factory) -> Path:
    """A tiny classifier trained briefly on REVIEWS with the morpheme tokenizer, saved with it (the tokenizer's
    `model_max_length` the position table, as the encoder scripts save it)."""
    import torch

    from hf_transformer import TransformerConfig, TransformerForSequenceClassification

    torch.manual_seed(0)
    config = TransformerConfig(
        vocab_size=len(tokenizer), d_model=32, n_layer=1, num_attention_heads=2, intermediate_size=64,
        max_position_embeddings=12, dropout=0.0, pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id, num_labels=2,
        id2label={0: "negative", 1: "positive"}, label2id={"negative": 0, "positive": 1},
    )  # fmt: skip
    model = TransformerForSequenceClassification(config)
    batch = tokenizer(REVIEWS, padding=True, truncation=True, max_length=12, return_tensors="pt")
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    for _ in range(30):
        model(**batch, labels=torch.tensor(LABELS)).loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    folder = tmp_path_factory.mktemp("morpheme-classifier")
    model.eval().save_pretrained(folder)
    saved = copy.deepcopy(tokenizer)
    saved.model_max_length = config.max_position_embeddings
    saved.save_pretrained(folder)
    return folder


@pytest.mark.slow
def test_every_entry_point_takes_raw_text_and_gives_the_same_predictions(classifier_folder):
    """Raw reviews, some longer than the model's 12 positions, through AutoTokenizer, the pipeline, the Predictor,
    scripts/predict.py and the demo app: the same pieces and the same labels and scores."""
    from transformers import pipeline

    from hf_transformer import Predictor
    from hf_transformer.app import Demo

    reviews = REVIEWS + ["배우들 연기는 좋았는데 스토리가 너무 지루했다 " * 3]
    predictor = Predictor.from_pretrained(classifier_folder)
    assert type(predictor.tokenizer) is MorphemeTokenizerFast
    expected = predictor.classify(reviews)
    labels = [result["label"] for result in expected]
    assert len(set(labels)) == 2, "one label for every review: this test could not tell entry points apart"

    reloaded = AutoTokenizer.from_pretrained(classifier_folder)
    assert [reloaded(text)["input_ids"] for text in reviews] == [
        predictor.tokenizer(text)["input_ids"] for text in reviews
    ]
    classify = pipeline("text-classification", model=str(classifier_folder))
    # transformers' tokenizers cut a text only when asked, in the pipeline's call as in their own; without it the
    # model names the setting rather than read a part the caller did not choose.
    with pytest.raises(ValueError, match=r"exceeds the position table of 12 positions .*`truncation=True`"):
        classify(reviews[-1])
    piped = classify(reviews, truncation=True)
    assert [result["label"] for result in piped] == labels
    assert [result["score"] for result in piped] == pytest.approx([result["score"] for result in expected], abs=1e-5)
    demo = Demo(classifier_folder)
    for text, result in zip(reviews, expected):
        assert demo.classify(text) == pytest.approx(result["scores"], abs=1e-5)

    script = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "predict.py"), str(classifier_folder), "--json", *reviews],
        env={**os.environ, "HF_HUB_OFFLINE": "1"}, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert script.returncode == 0, script.stderr[-2000:]
    printed = [json.loads(line) for line in script.stdout.splitlines() if line.startswith("{")]
    assert [line["label"] for line in printed] == labels


def test_the_card_and_the_space_of_a_morpheme_folder_name_mecab_ko(classifier_folder, tmp_path):
    from hf_transformer import hub

    card = hub.model_card(classifier_folder)
    assert "`python-mecab-ko`" in card and "alone:" not in card and "| segmenter | mecab-ko |" in card
    space = hub.write_space(classifier_folder, tmp_path / "space")
    requirements = (space / "requirements.txt").read_text().splitlines()
    assert any(line.startswith("python-mecab-ko") for line in requirements) and any("gradio" in r for r in requirements)
    assert not any(line.startswith("python-mecab-ko") for line in hub.space_requirements())  # a folder without it
