"""scripts/plot_attention.py: attention heatmaps of tiny saved models and the position table."""

import logging
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from matplotlib import image as mpimg

from hf_transformer import TransformerForConditionalGeneration, TransformerForSequenceClassification
from hf_transformer.modeling_transformer import sinusoid_table
from tests.helpers.launch import load_script
from tests.helpers.models import tiny_config

pytestmark = pytest.mark.slow

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "plot_attention.py"
ENGLISH = ["a man rides a red bike .", "two dogs play in the snow .", "ein mann fährt ein rotes fahrrad ."] * 3
KOREAN = ["정말 재미있는 영화였어요", "시간이 아깝다", "배우 연기가 훌륭하다"] * 3


def train_small_tokenizer(texts):
    from hf_transformer.tokenization import train_tokenizer

    return train_tokenizer(texts, vocab_size=80, model_type="bpe", model_max_length=32, show_progress=False)


@pytest.fixture(scope="module")
def translator_dir(tmp_path_factory):
    tokenizer = train_small_tokenizer(ENGLISH)
    torch.manual_seed(0)
    config = tiny_config(vocab_size=len(tokenizer), max_position_embeddings=32, n_layer=2, num_attention_heads=2)
    folder = tmp_path_factory.mktemp("translator")
    model = TransformerForConditionalGeneration(config)
    model.generation_config.max_length = 8
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def korean_classifier_dir(tmp_path_factory):
    tokenizer = train_small_tokenizer(KOREAN)
    torch.manual_seed(0)
    config = tiny_config(
        vocab_size=len(tokenizer), max_position_embeddings=32, n_layer=1, num_attention_heads=2, num_labels=2
    )
    folder = tmp_path_factory.mktemp("classifier")
    TransformerForSequenceClassification(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def assert_real_png(path: Path, size: tuple[int, int]):
    pixels = mpimg.imread(path)
    assert pixels.shape[1] == size[0] and pixels.shape[0] == size[1]
    assert pixels[..., :3].std() > 0.05  # not a blank canvas


def test_seq2seq_attention_panels_and_tokens(translator_dir, tmp_path):
    module = load_script("plot_attention")
    output = tmp_path / "attention.png"
    sentence, target = "a man rides a red bike .", "ein mann fährt ein rotes fahrrad ."
    result = module.main(["attention", str(translator_dir), sentence, "--target", target, "--output", str(output)])
    assert result["panels"] == 3 * 2 * 2  # (encoder, decoder, cross) x 2 layers x 2 heads
    assert_real_png(output, result["size"])

    model, tokenizer, task = module.load_model(str(translator_dir))
    assert task == "seq2seq"
    maps = module.attention_maps(model, tokenizer, sentence, target, task=task)
    source_ids = tokenizer(sentence)["input_ids"]
    labels = tokenizer(text_target=target)["input_ids"]
    assert maps["source_tokens"] == tokenizer.convert_ids_to_tokens(source_ids)
    # The decoder reads the start token and the target with its [EOS], as the attention explorer shows it.
    assert maps["target_tokens"] == ["[BOS]", *tokenizer.convert_ids_to_tokens(labels)]
    source_len, target_len = len(source_ids), len(labels) + 1
    assert [m.shape for m in maps["encoder"]] == [(2, source_len, source_len)] * 2
    assert [m.shape for m in maps["decoder"]] == [(2, target_len, target_len)] * 2
    assert [m.shape for m in maps["cross"]] == [(2, target_len, source_len)] * 2
    for kind in ("encoder", "decoder", "cross"):
        np.testing.assert_allclose(maps[kind][0].sum(-1), 1.0, atol=1e-5)  # probabilities over keys
    assert np.allclose(np.triu(maps["decoder"][1][0], k=1), 0.0)  # no query sees a later token

    figure, panels = module.plot_attention_maps(maps, kinds=["cross"])
    assert len(panels) == 2 * 2
    assert [t.get_text() for t in panels[0].get_xticklabels()] == maps["source_tokens"]
    assert [t.get_text() for t in panels[0].get_yticklabels()] == maps["target_tokens"]
    np.testing.assert_allclose(panels[3].get_images()[0].get_array(), maps["cross"][1][1])


def test_seq2seq_attention_without_target_uses_the_generated_translation(translator_dir, tmp_path):
    module = load_script("plot_attention")
    output = tmp_path / "cross.png"
    result = module.main(
        ["attention", str(translator_dir), "two dogs play .", "--kinds", "cross", "--output", str(output)]
    )
    assert result["panels"] == 2 * 2
    assert_real_png(output, result["size"])
    model, tokenizer, task = module.load_model(str(translator_dir))
    maps = module.attention_maps(model, tokenizer, "two dogs play .", task=task)
    assert maps["target_tokens"][0] == "[BOS]" and len(maps["target_tokens"]) <= 8  # the saved max_length


def test_a_text_longer_than_the_model_reads_is_cut_for_a_classifier_and_refused_for_a_translator(
    translator_dir, korean_classifier_dir, tmp_path, capsys
):
    # Both folders' tokenizers read at most 32 tokens (model_max_length), as their position tables do.
    module = load_script("plot_attention")
    model, tokenizer, task = module.load_model(str(korean_classifier_dir))
    long_review = " ".join(KOREAN * 6)
    assert len(tokenizer(long_review)["input_ids"]) > 32
    maps = module.attention_maps(model, tokenizer, long_review, task=task)
    expected = tokenizer(long_review, truncation=True, max_length=32)["input_ids"]
    assert maps["source_tokens"] == tokenizer.convert_ids_to_tokens(expected)
    assert [m.shape for m in maps["encoder"]] == [(2, 32, 32)]

    long_sentence = " ".join(ENGLISH * 2)
    refused = [
        (str(translator_dir), long_sentence, [], "this model reads at most 32"),
        (str(korean_classifier_dir), "시간이 아깝다", ["--target", "x"], "target applies to a seq2seq model"),
        (str(korean_classifier_dir), "시간이 아깝다", ["--kinds", "cross"], "none of the attention kinds"),
        (str(tmp_path / "missing"), "a man .", [], "missing"),
    ]
    for folder, text, options, message in refused:
        output = tmp_path / "refused.png"
        with pytest.raises(SystemExit) as stopped:
            module.main(["attention", folder, text, *options, "--output", str(output)])
        assert stopped.value.code == 2
        error = capsys.readouterr().err
        assert message in error and "Traceback" not in error
        assert not output.exists()


def test_classifier_attention_with_hangul(korean_classifier_dir, tmp_path, caplog):
    module = load_script("plot_attention")
    output = tmp_path / "korean.png"
    with caplog.at_level(logging.WARNING, logger="plot_attention"):
        result = module.main(
            ["attention", str(korean_classifier_dir), "정말 재미있는 영화였어요", "--output", str(output)]
        )
    assert result["panels"] == 1 * 2  # encoder only: 1 layer x 2 heads
    assert_real_png(output, result["size"])
    if result["font"] is None:  # no CJK font installed: boxes instead of Hangul, and one warning saying so
        assert "no glyph" in caplog.text


def test_positions_draws_the_sinusoid_table(tmp_path):
    module = load_script("plot_attention")
    output = tmp_path / "pe.png"
    result = module.main(["positions", "--d_model", "128", "--length", "64", "--output", str(output)])
    assert result["panels"] == 1 and result["size"] == (800, 500)
    assert_real_png(output, result["size"])

    figure, (axes,) = module.plot_positions(d_model=16, length=10)
    drawn = np.asarray(axes.collections[0].get_array()).reshape(10, 16)
    np.testing.assert_allclose(drawn, sinusoid_table(10, 16).numpy())
    assert axes.get_xlabel() == "Depth" and axes.get_ylabel() == "Position"


def test_the_script_imports_only_the_library_and_matplotlib_when_drawing():
    # Loading it loads neither matplotlib (until a figure is drawn) nor the recipes: a general tool of the package.
    probe = (
        "import importlib.util, sys; "
        f"spec = importlib.util.spec_from_file_location('plot_attention', {str(SCRIPT)!r}); "
        "module = importlib.util.module_from_spec(spec); spec.loader.exec_module(module); "
        "print(sorted({name.split('.')[0] for name in sys.modules} & {'matplotlib', 'recipes'}))"
    )
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True)
    assert result.stdout.strip() == "[]"
    assert not re.search(r"^\s*(from|import) recipes\b", SCRIPT.read_text(), re.M)  # not even a lazy one
