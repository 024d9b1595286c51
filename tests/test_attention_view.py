"""hf_transformer.attention_view and scripts/explore_attention.py: the attention data of tiny saved models, the
self-contained page, and bad input (no browser here: tests/test_attention_view_browser.py drives the page)."""

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from hf_transformer import (
    TransformerForConditionalGeneration,
    TransformerForMaskedLM,
    TransformerForSequenceClassification,
)
from hf_transformer.attention_view import attention_data, attention_page
from tests.helpers.launch import load_script
from tests.helpers.models import tiny_config

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "explore_attention.py"
TEXTS = ["a man rides a red bike .", "two dogs play in the snow .", "ein mann fährt ein rotes fahrrad ."] * 3
SENTENCE, TARGET = "a man rides a red bike .", "ein mann fährt ein rotes fahrrad ."
TRICKY = 'a <b>man</b> & "dogs" </script> 정말'


def small_tokenizer():
    from hf_transformer.tokenization import train_tokenizer

    return train_tokenizer(TEXTS, vocab_size=80, model_type="bpe", model_max_length=32, show_progress=False)


def save(model, tokenizer, folder: Path) -> Path:
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    """Saved seq2seq, classifier (mean and decoder pooling) and masked-LM folders sharing one tokenizer."""
    tokenizer = small_tokenizer()
    root = tmp_path_factory.mktemp("attention-view")
    settings = dict(vocab_size=len(tokenizer), max_position_embeddings=32, num_attention_heads=2)
    torch.manual_seed(0)
    translator = TransformerForConditionalGeneration(tiny_config(**settings, encoder_layers=2, decoder_layers=3))
    translator.generation_config.max_length = 8
    torch.manual_seed(1)
    classifier = TransformerForSequenceClassification(tiny_config(**settings, n_layer=1, num_labels=2))
    torch.manual_seed(2)
    decoder_pooling = TransformerForSequenceClassification(
        tiny_config(**settings, n_layer=1, num_labels=2, classifier_pooling="decoder")
    )
    torch.manual_seed(3)
    masked_lm = TransformerForMaskedLM(tiny_config(**settings, n_layer=2))
    return {
        "tokenizer": tokenizer,
        "seq2seq": save(translator, tokenizer, root / "seq2seq"),
        "classifier": save(classifier, tokenizer, root / "classifier"),
        "decoder-pooling": save(decoder_pooling, tokenizer, root / "decoder-pooling"),
        "masked-lm": save(masked_lm, tokenizer, root / "masked-lm"),
    }


def assert_weights_equal(listed, attentions):
    """Nested lists [layer][head][query][key] against the model's tuple of (1, H, Q, K), to the 4-decimal rounding."""
    assert len(listed) == len(attentions)
    for layer, expected in zip(listed, attentions):
        torch.testing.assert_close(torch.tensor(layer), expected[0].float(), atol=6e-5, rtol=0)


def test_seq2seq_with_a_target_equals_the_models_attentions(folders):
    tokenizer = folders["tokenizer"]
    data = attention_data(folders["seq2seq"], SENTENCE, target=TARGET)
    assert data["task"] == "seq2seq"
    source_ids = tokenizer(SENTENCE)["input_ids"]
    labels = tokenizer(text_target=TARGET)["input_ids"]
    assert data["source_tokens"] == tokenizer.convert_ids_to_tokens(source_ids)
    assert data["target_tokens"] == ["[BOS]", *tokenizer.convert_ids_to_tokens(labels)]  # start token first

    model = TransformerForConditionalGeneration.from_pretrained(folders["seq2seq"]).eval()
    with torch.no_grad():
        output = model(
            input_ids=torch.tensor([source_ids]),
            decoder_input_ids=torch.tensor([[model.config.decoder_start_token_id, *labels]]),
            output_attentions=True,
        )
    assert_weights_equal(data["attention"]["encoder"], output.encoder_attentions)
    assert_weights_equal(data["attention"]["decoder"], output.decoder_attentions)
    assert_weights_equal(data["attention"]["cross"], output.cross_attentions)

    S, T = len(data["source_tokens"]), len(data["target_tokens"])
    assert data["layers"] == {"encoder": 2, "decoder": 3, "cross": 3} and data["heads"] == 2
    assert [len(data["attention"]["encoder"][0]), len(data["attention"]["encoder"][0][0])] == [2, S]
    assert {len(row) for layer in data["attention"]["encoder"] for head in layer for row in head} == {S}
    assert {len(head) for layer in data["attention"]["cross"] for head in layer} == {T}
    assert {len(row) for layer in data["attention"]["cross"] for head in layer for row in head} == {S}
    masks = data["masks"]
    assert masks["source_padding"] == [False] * S and masks["target_padding"] == [False] * T  # one sentence
    assert masks["look_ahead"] == [[key > query for key in range(T)] for query in range(T)]  # upper triangle
    for head in data["attention"]["decoder"][0]:  # what the mask hides gets no weight
        assert all(head[q][k] == 0.0 for q in range(T) for k in range(T) if masks["look_ahead"][q][k])
    json.dumps(data)  # JSON-ready


def test_seq2seq_without_a_target_reads_its_own_greedy_or_beam_output(folders):
    model = TransformerForConditionalGeneration.from_pretrained(folders["seq2seq"]).eval()
    tokenizer = folders["tokenizer"]
    source = tokenizer(SENTENCE, return_tensors="pt")
    for beams in (1, 3):
        data = attention_data(folders["seq2seq"], SENTENCE, num_beams=beams)
        expected = model.generate(**source, num_beams=beams, do_sample=False, max_new_tokens=7)[0].tolist()
        assert data["target_tokens"] == tokenizer.convert_ids_to_tokens(expected)
        assert data["target_tokens"][0] == "[BOS]" and len(data["target_tokens"]) <= 8  # the saved max_length
        assert len(data["attention"]["cross"][0][0]) == len(data["target_tokens"])
    short = attention_data(folders["seq2seq"], SENTENCE, max_new_tokens=2)
    assert len(short["target_tokens"]) <= 3


def test_a_loaded_model_and_its_tokenizer_work_as_the_folder_does(folders):
    model = TransformerForConditionalGeneration.from_pretrained(folders["seq2seq"]).train()
    data = attention_data(model, SENTENCE, tokenizer=folders["tokenizer"], target=TARGET)
    assert data == {**attention_data(folders["seq2seq"], SENTENCE, target=TARGET), "model": data["model"]}
    assert model.training  # put back as it was
    with pytest.raises(ValueError, match="tokenizer"):
        attention_data(model, SENTENCE)


def test_an_output_that_fills_the_decoder_s_table_is_shown_whole_as_the_predictor_gives_it(folders):
    from hf_transformer import Predictor

    tokenizer = folders["tokenizer"]
    torch.manual_seed(0)  # random weights of a wide spread: the output runs to the limit without an end token
    config = tiny_config(vocab_size=len(tokenizer), max_position_embeddings=12, num_attention_heads=2, init_std=0.3)
    model = TransformerForConditionalGeneration(config).eval()
    translation = Predictor(model, tokenizer, "seq2seq").translate([SENTENCE[:20]])[0]
    data = attention_data(model, SENTENCE[:20], tokenizer=tokenizer)
    assert data["prediction"]["translation"] == translation
    generated = model.generate(**tokenizer([SENTENCE[:20]], return_tensors="pt"), max_new_tokens=12, num_beams=1)
    assert generated.shape[1] == 13  # the start token and the 12 new tokens the table allows
    assert len(data["target_tokens"]) == 12  # the last is never read back: the pass reads the first 12
    twelve = " ".join(["a"] * 11)  # 11 tokens and the end token: as many as the decoder predicts
    assert len(tokenizer(text_target=twelve)["input_ids"]) == 12
    assert len(attention_data(model, SENTENCE[:20], tokenizer=tokenizer, target=twelve)["target_tokens"]) == 12


def test_a_tokenizer_reading_fewer_tokens_than_the_table_limits_the_text_as_the_predictor_does(folders):
    import copy

    from hf_transformer import Predictor

    tokenizer = copy.deepcopy(folders["tokenizer"])
    tokenizer.model_max_length = 6  # the table holds 32
    long_text = "a man rides a red bike in the snow ."
    assert len(tokenizer(long_text)["input_ids"]) > 6
    classifier = TransformerForSequenceClassification.from_pretrained(folders["classifier"])
    data = attention_data(classifier, long_text, tokenizer=tokenizer)
    predictor = Predictor(classifier.eval(), tokenizer, "classification")
    expected = predictor.classify([long_text])[0]
    assert len(data["source_tokens"]) == 6 and data["prediction"]["label"] == expected["label"]
    assert data["prediction"]["score"] == pytest.approx(expected["score"], abs=1e-4)
    translator = TransformerForConditionalGeneration.from_pretrained(folders["seq2seq"])
    with pytest.raises(ValueError, match=r"tokens long; this model reads at most 6$"):
        attention_data(translator, long_text, tokenizer=tokenizer)


@pytest.mark.parametrize("name", ["classifier", "masked-lm"])
def test_encoder_only_folders_have_encoder_self_attention(folders, name):
    tokenizer = folders["tokenizer"]
    data = attention_data(folders[name], TRICKY)
    assert data["task"] == {"classifier": "classification", "masked-lm": "masked-lm"}[name]
    assert set(data["attention"]) == {"encoder"} and data["target_tokens"] == []
    source_ids = tokenizer(TRICKY)["input_ids"]
    assert data["source_tokens"] == tokenizer.convert_ids_to_tokens(source_ids)
    auto = TransformerForSequenceClassification if name == "classifier" else TransformerForMaskedLM
    model = auto.from_pretrained(folders[name]).eval()
    with torch.no_grad():
        output = model(input_ids=torch.tensor([source_ids]), output_attentions=True)
    assert_weights_equal(data["attention"]["encoder"], output.attentions)
    if name == "classifier":
        assert data["prediction"]["label"] in model.config.id2label.values()


def test_a_decoder_pooling_classifier_has_all_three_kinds(folders):
    data = attention_data(folders["decoder-pooling"], SENTENCE)
    assert set(data["attention"]) == {"encoder", "decoder", "cross"}
    assert data["target_tokens"] == ["[BOS]"]  # the decoder reads one start token
    S = len(data["source_tokens"])
    assert [len(data["attention"]["cross"][0][0]), len(data["attention"]["cross"][0][0][0])] == [1, S]
    assert data["masks"]["look_ahead"] == [[False]]


def test_padding_is_masked_and_gets_no_weight(folders):
    data = attention_data(folders["classifier"], "a man", pad_to=10)
    real = len(folders["tokenizer"]("a man")["input_ids"])
    assert data["masks"]["source_padding"] == [False] * real + [True] * (10 - real)
    assert data["source_tokens"][real:] == ["[PAD]"] * (10 - real)
    assert all(row[k] == 0.0 for head in data["attention"]["encoder"][0] for row in head for k in range(real, 10))


def test_the_page_is_self_contained_and_escapes_text(folders):
    page = attention_page(folders["seq2seq"], TRICKY, target=TARGET)
    assert page.startswith("<!DOCTYPE html>") and page.rstrip().endswith("</html>")
    assert "http://" not in page and "https://" not in page and "//cdn" not in page
    assert not re.search(r"<script[^>]*\bsrc\s*=", page, re.I)
    assert not re.search(r"<link\b", page, re.I)
    assert not re.search(r"\b(src|href)\s*=", page, re.I)  # nothing loaded, nothing linked
    assert page.count("<script") == 2 and page.count("</script>") == 2  # the text's </script> is escaped
    assert "<b>man</b>" not in page
    embedded = re.search(r'<script type="application/json" id="attention-data">(.*?)</script>', page, re.S)
    data = json.loads(embedded.group(1))
    assert data["text"] == TRICKY and "정말" in page  # Korean kept as it is
    assert data == json.loads(json.dumps(attention_data(folders["seq2seq"], TRICKY, target=TARGET)))
    for name in ('id="kind"', 'id="layer"', 'id="head"', 'id="all-heads"', 'id="one-head"', 'id="grid"'):
        assert name in page


@pytest.mark.parametrize(
    ("call", "error", "message"),
    [
        (lambda f: attention_data(f["seq2seq"], ""), ValueError, "text is empty"),
        (lambda f: attention_data(f["seq2seq"], "   "), ValueError, "text is empty"),
        (lambda f: attention_data(f["seq2seq"], "a man " * 40), ValueError, "at most 32"),
        (lambda f: attention_data(f["seq2seq"], "a", target="a man " * 40), ValueError, "predicts at most 32"),
        (lambda f: attention_data(f["seq2seq"], "a", target=""), ValueError, "target is empty"),
        (lambda f: attention_data(f["classifier"], "a", target="b"), ValueError, "seq2seq"),
        (lambda f: attention_data(f["seq2seq"], "a", num_beams=0), ValueError, "num_beams"),
        (lambda f: attention_data(f["seq2seq"].parent / "nowhere", "a"), FileNotFoundError, "nowhere"),
        (lambda f: attention_data(f["seq2seq"].parent, "a"), ValueError, "not a model folder.*config.json"),
    ],
)
def test_bad_input_raises_one_clear_line(folders, call, error, message):
    with pytest.raises(error, match=message) as caught:
        call(folders)
    assert "\n" not in str(caught.value)


def test_the_page_is_package_data_filled_in_by_the_module():
    # The page is a file of the package (read through importlib.resources, as an installed package reads it) and
    # setup.cfg installs it; the module only fills in the title and the data.
    import configparser
    from importlib import resources

    from hf_transformer import attention_view

    page = resources.files("hf_transformer").joinpath(attention_view.PAGE_FILE).read_text(encoding="utf-8")
    assert page == attention_view.page_template()
    assert page.startswith("<!DOCTYPE html>") and page.count("__TITLE__") == 1 and page.count("__DATA__") == 1
    setup = configparser.ConfigParser()
    setup.read(Path(__file__).resolve().parents[1] / "setup.cfg")
    patterns = setup["options.package_data"]["hf_transformer"].split()
    assert any(Path(attention_view.PAGE_FILE).match(pattern) for pattern in patterns), patterns
    source = Path(attention_view.__file__).read_text(encoding="utf-8")
    assert not re.search(r"<(html|head|body|style)\b", source)  # no page held in a string


def test_a_headless_folder_is_refused_in_one_line(tmp_path):
    from hf_transformer import TransformerModel
    from hf_transformer.folders import FolderTaskError

    TransformerModel(tiny_config()).save_pretrained(tmp_path / "base")
    with pytest.raises(FolderTaskError, match="TransformerModel, a model without a head: the attention view serves"):
        attention_data(tmp_path / "base", "a man")


def test_a_folder_of_another_model_type_is_refused(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "bert"}))
    with pytest.raises(ValueError, match=re.escape(f"{tmp_path} holds a 'bert' model, not one of hf_transformer")):
        attention_data(tmp_path, "a man")


def test_the_command_writes_the_page(folders, tmp_path, capsys):
    output = tmp_path / "pages" / "attention.html"
    args = [str(folders["seq2seq"]), SENTENCE, "--target", TARGET, "--output", str(output)]
    assert load_script("explore_attention").main(args) == output
    assert f"wrote {output}" in capsys.readouterr().out
    page = output.read_text(encoding="utf-8")
    assert "<!DOCTYPE html>" in page and json.dumps(TARGET, ensure_ascii=False) in page


@pytest.mark.slow
@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["{missing}", "a man"], "No folder at {missing}"),
        (["{folder}", ""], "the text is empty"),
        (["{folder}", "a", "--num_beams", "0"], "num_beams must be an integer of at least 1"),
        (["{unweighted}", "a man"], "model.safetensors"),  # a config without weights: transformers' OSError
        (["{classifier}", "a man", "--num_beams", "4"], "num_beams applies to a seq2seq model"),  # was ignored
    ],
)
def test_the_command_refuses_bad_input_in_one_line(folders, tmp_path, args, message):
    unweighted = tmp_path / "unweighted"
    unweighted.mkdir()
    for name in ("config.json", "tokenizer.json", "tokenizer_config.json"):
        (unweighted / name).write_bytes((folders["seq2seq"] / name).read_bytes())
    names = {"missing": str(tmp_path / "missing"), "folder": str(folders["seq2seq"]), "unweighted": str(unweighted)}
    names["classifier"] = str(folders["classifier"])
    argv = [arg.format(**names) for arg in args] + ["--output", str(tmp_path / "page.html")]
    completed = subprocess.run([sys.executable, str(SCRIPT), *argv], capture_output=True, text=True)
    assert completed.returncode == 2
    assert "Traceback" not in completed.stderr
    last = completed.stderr.strip().splitlines()[-1]
    assert last.startswith("explore_attention.py: error: ") and message.format(**names) in last
    assert not (tmp_path / "page.html").exists()
