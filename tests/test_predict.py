"""scripts/predict.py on tiny saved classifier and translator folders built here."""

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from hf_transformer import TransformerForConditionalGeneration, TransformerForSequenceClassification
from tests.helpers.launch import load_script
from tests.helpers.models import tiny_config

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "predict.py"
SENTENCES = ["a man rides a red bike .", "two dogs play in the snow .", "ein mann fährt ein rotes fahrrad ."] * 4


@pytest.fixture(scope="module")
def tokenizer():
    from hf_transformer.tokenization import train_tokenizer

    return train_tokenizer(SENTENCES, vocab_size=80, model_type="bpe", model_max_length=48, show_progress=False)


@pytest.fixture(scope="module")
def classifier_dir(tmp_path_factory, tokenizer):
    torch.manual_seed(0)
    config = tiny_config(
        vocab_size=len(tokenizer),
        num_labels=2,
        id2label={0: "negative", 1: "positive"},
        n_layer=1,
        max_position_embeddings=48,
    )
    config.label2id = {"negative": 0, "positive": 1}
    model = TransformerForSequenceClassification(config)
    with torch.no_grad():  # a classifier that is sure of "positive", whatever the text
        model.classifier.bias.copy_(torch.tensor([-10.0, 10.0]))
    folder = tmp_path_factory.mktemp("classifier")
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def translator_dir(tmp_path_factory, tokenizer):
    torch.manual_seed(0)
    model = TransformerForConditionalGeneration(
        tiny_config(vocab_size=len(tokenizer), n_layer=1, max_position_embeddings=48)
    )
    model.generation_config.num_beams = 2
    model.generation_config.max_length = 9
    folder = tmp_path_factory.mktemp("translator")
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def test_classifier_prints_label_and_probability(classifier_dir, capsys):
    results = load_script("predict").main([str(classifier_dir), "a man rides a red bike .", "two dogs play ."])
    assert [r["label"] for r in results] == ["positive", "positive"]
    for result in results:
        assert result["score"] > 0.99 and sum(result["scores"].values()) == pytest.approx(1.0)
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split("\t") == ["positive", f"{results[0]['score']:.4f}", "a man rides a red bike ."]
    assert len(lines) == 2


def test_classifier_reads_stdin(classifier_dir, capsys, monkeypatch):
    monkeypatch.setattr(sys, "stdin", io.StringIO("first line\n\n  second line  \n"))
    results = load_script("predict").main([str(classifier_dir), "--json"])
    assert [r["text"] for r in results] == ["first line", "", "second line"]  # line for line
    assert results[1] == {"text": "", "label": None, "score": None, "scores": {}}  # nothing to classify
    assert results[0]["label"] == results[2]["label"] == "positive"
    printed = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert printed == results


def test_results_are_written_line_for_line(classifier_dir, tmp_path):
    # A blank line gives a blank line, and a line is split at line ends only: U+2028 and U+0085 inside a text
    # (str.splitlines would split there) stay in it. Line N of the output answers line N of the input.
    source = tmp_path / "in.txt"
    source.write_text("a man rides\u2028a red bike .\n\ntwo dogs\x85play .\n\n", encoding="utf-8")
    load_script("predict").main([str(classifier_dir), "--input", str(source), "--output", str(tmp_path / "out.txt")])
    written = (tmp_path / "out.txt").read_text(encoding="utf-8").split("\n")
    assert len(written) == 5 and written[4] == ""  # four lines, each ended
    assert written[1] == written[3] == ""
    assert written[0].split("\t")[2] == "a man rides\u2028a red bike ."
    assert written[2].split("\t")[2] == "two dogs\x85play ."


def test_translator_matches_generate(translator_dir, tokenizer):
    module = load_script("predict")
    predictor = module.Predictor.from_pretrained(str(translator_dir))
    assert predictor.task == "seq2seq"
    # The saved generation config (max_length 9, counting the start token) bounds the output.
    assert predictor.generation_length() == 8

    texts = SENTENCES[:3]
    model = TransformerForConditionalGeneration.from_pretrained(translator_dir).eval()
    batch = tokenizer(texts, return_tensors="pt", padding=True)
    with torch.no_grad():
        expected = model.generate(**batch, num_beams=2, max_new_tokens=8)
    decoded = [text.strip() for text in tokenizer.batch_decode(expected, skip_special_tokens=True)]
    assert [r["translation"] for r in predictor(texts)] == decoded

    # Batching does not change the outputs; --max_new_tokens shortens them.
    predictor.batch_size = 1
    assert [r["translation"] for r in predictor(texts)] == decoded
    with torch.no_grad():
        two_tokens = model.generate(**batch, num_beams=1, max_new_tokens=2)
    assert two_tokens.shape[1] <= 3  # the start token and two more
    short = module.Predictor.from_pretrained(str(translator_dir), max_new_tokens=2, num_beams=1)
    assert [r["translation"] for r in short(texts)] == [
        text.strip() for text in tokenizer.batch_decode(two_tokens, skip_special_tokens=True)
    ]


def test_ctranslate2_engine_with_a_compute_type(translator_dir, capsys):
    pytest.importorskip("ctranslate2")
    predict, texts = load_script("predict"), SENTENCES[:3]
    torch_results = predict.main([str(translator_dir), *texts, "--num_beams", "1"])
    results = predict.main(
        [str(translator_dir), *texts, "--num_beams", "1", "--engine", "ctranslate2", "--compute_type", "float32"]
    )
    assert [r["translation"] for r in results] == [r["translation"] for r in torch_results]
    assert len(predict.main([str(translator_dir), *texts, "--engine", "ctranslate2", "--compute_type", "int8"])) == 3
    capsys.readouterr()
    with pytest.raises(SystemExit):  # a usage error, in one line
        predict.main([str(translator_dir), *texts, "--compute_type", "int8"])
    assert "compute_type applies to engine='ctranslate2'" in capsys.readouterr().err.strip().splitlines()[-1]


@pytest.mark.slow
def test_translator_from_stdin_in_a_subprocess(translator_dir):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    completed = subprocess.run(
        [sys.executable, str(SCRIPT), str(translator_dir), "--json", "--num_beams", "1"],
        input="a man rides a red bike .\ntwo dogs play in the snow .\n",
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=120,
    )
    assert completed.returncode == 0, completed.stderr
    rows = [json.loads(line) for line in completed.stdout.splitlines()]
    assert [row["text"] for row in rows] == ["a man rides a red bike .", "two dogs play in the snow ."]
    assert all(isinstance(row["translation"], str) for row in rows)


def test_task_of_rejects_an_unknown_head():
    from hf_transformer.folders import CLASSIFICATION, SEQ2SEQ, task_of

    assert task_of(["TransformerForSequenceClassification"]) == CLASSIFICATION
    assert task_of(["TransformerForConditionalGeneration"]) == SEQ2SEQ
    with pytest.raises(ValueError, match="architectures"):
        task_of(["SomethingElse"], is_encoder_decoder=True)


@pytest.mark.parametrize("folder", ["runs/no-such-model", "/no/such/folder", "./missing"])
def test_a_folder_that_does_not_exist_is_named_in_one_line(folder, capsys):
    with pytest.raises(SystemExit) as raised:
        load_script("predict").main([folder, "some text"])
    assert raised.value.code == 2
    error = capsys.readouterr().err.strip().splitlines()
    assert f"error: {folder}: no such model folder" in error[-1], error
    assert "Traceback" not in "\n".join(error)


@pytest.mark.parametrize(
    ("case", "told"),
    [
        ("empty", "not a model folder: it has no config.json (nor adapter_config.json)"),
        ("bad config", "Validation error for field 'd_model': TypeError: Field 'd_model' expected int, got str"),
        ("classifier to ctranslate2", "a classification model: engine='ctranslate2' serves translation (seq2seq)"),
    ],
)
def test_a_folder_that_does_not_load_is_refused_in_one_line(classifier_dir, tmp_path, case, told, capsys):
    folder, extra = tmp_path / "model", []
    folder.mkdir()
    if case == "bad config":
        (folder / "config.json").write_text(json.dumps({"model_type": "hf_transformer", "d_model": "x"}))
    elif case == "classifier to ctranslate2":
        pytest.importorskip("ctranslate2")
        folder, extra = classifier_dir, ["--engine", "ctranslate2"]
    with pytest.raises(SystemExit) as raised:
        load_script("predict").main([str(folder), "some text", *extra])
    assert raised.value.code == 2
    error = capsys.readouterr().err.strip().splitlines()
    assert f"error: {folder}" in error[-1] and told in error[-1], error
    assert "Traceback" not in "\n".join(error)


@pytest.mark.parametrize("option", ["--num_beams", "--max_new_tokens", "--batch_size"])
def test_counts_below_one_are_refused_in_one_line(classifier_dir, option, capsys):
    with pytest.raises(SystemExit) as raised:
        load_script("predict").main([str(classifier_dir), "some text", option, "0"])
    assert raised.value.code == 2
    assert f"error: argument {option}: must be 1 or more, got 0" in capsys.readouterr().err


def test_json_may_follow_the_texts(classifier_dir, capsys):
    results = load_script("predict").main([str(classifier_dir), "two dogs play .", "--json", "a man rides ."])
    assert [r["text"] for r in results] == ["two dogs play .", "a man rides ."]
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [row["text"] for row in rows] == ["two dogs play .", "a man rides ."]


@pytest.mark.parametrize(
    ("device", "engine", "told"),
    [
        ("gpu", "torch", "not a device name torch knows"),
        ("cuda:99", "torch", "not available here: torch sees"),
        ("cuda:99", "ctranslate2", "not available here: CTranslate2 sees"),
    ],
)
def test_a_device_that_cannot_be_used_is_refused_in_one_line(
    classifier_dir, translator_dir, device, engine, told, capsys
):
    if engine == "ctranslate2":
        pytest.importorskip("ctranslate2")
    folder = translator_dir if engine == "ctranslate2" else classifier_dir
    with pytest.raises(SystemExit):
        load_script("predict").main([str(folder), "a dog .", "--device", device, "--engine", engine])
    error = capsys.readouterr().err
    assert f"error: device '{device}' is {told}" in error and "Traceback" not in error


def test_no_command_writes_over_its_input_or_a_saved_model_s_files(classifier_dir, tmp_path, capsys):
    """predict's --output that is its --input, explore_attention's or plot_attention's --output that is a file of the
    model folder: refused in one line before any work, the files as they were."""
    inputs = tmp_path / "reviews.txt"
    inputs.write_text("좋은 영화\n", encoding="utf-8")
    before = {path.name: path.read_bytes() for path in classifier_dir.iterdir() if path.is_file()}
    calls = {
        "predict": [str(classifier_dir), "--input", str(inputs), "--output", str(inputs)],
        "explore_attention": [str(classifier_dir), "좋은 영화", "--output", str(classifier_dir / "config.json")],
        "plot_attention": ["attention", str(classifier_dir), "좋은 영화", "--output", str(classifier_dir / "x.txt")],
    }
    told = {
        "predict": f"--output {inputs} is the file this command reads",
        "explore_attention": "config.json is a file of the saved model in",
        "plot_attention": "x.txt: matplotlib writes no .txt figures",
    }
    for script, argv in calls.items():
        with pytest.raises(SystemExit) as ended:
            load_script(script).main(argv)
        assert ended.value.code == 2
        assert told[script] in capsys.readouterr().err.strip().splitlines()[-1]
    assert inputs.read_text(encoding="utf-8") == "좋은 영화\n"
    assert {path.name: path.read_bytes() for path in classifier_dir.iterdir() if path.is_file()} == before
    latin1 = tmp_path / "latin1.txt"
    latin1.write_bytes("café\n".encode("latin-1"))
    with pytest.raises(SystemExit):
        load_script("predict").main([str(classifier_dir), "--input", str(latin1)])
    assert f"--input {latin1} is not UTF-8 text" in capsys.readouterr().err
    # A figure without a suffix is written as the PNG matplotlib makes of it, and named so.
    plotted = load_script("plot_attention").main(["positions", "--d_model", "8", "--length", "4", "--output",
                                                  str(tmp_path / "table")])  # fmt: skip
    assert plotted["output"] == str(tmp_path / "table.png") and (tmp_path / "table.png").is_file()
    with pytest.raises(SystemExit):
        load_script("plot_attention").main(["positions", "--d_model", "0", "--output", str(tmp_path / "t.png")])
    assert "--d_model 0: give 1 or more" in capsys.readouterr().err
