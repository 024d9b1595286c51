"""python -m recipes.multi30k.evaluate_exports on a tiny saved translator and generated Multi30k-format files."""

from __future__ import annotations

import json

import pytest
import torch

from hf_transformer import TransformerForConditionalGeneration
from recipes.multi30k import evaluate_exports
from tests.helpers.launch import WORDS, write_multi30k
from tests.helpers.models import tiny_config

pytestmark = pytest.mark.slow

pytest.importorskip("ctranslate2")
pytest.importorskip("onnxruntime")


def test_engines_match_generate_and_report_bleu_and_sizes(tmp_path):
    from hf_transformer.tokenization import train_tokenizer

    data_dir = tmp_path / "data"
    write_multi30k(data_dir, {"train": 10, "val": 5, "test_2016_flickr": 24})
    tokenizer = train_tokenizer(
        [" ".join(WORDS["en"]), " ".join(WORDS["de"])] * 4, vocab_size=60, model_type="bpe", show_progress=False
    )
    torch.manual_seed(3)
    config = tiny_config(vocab_size=len(tokenizer), n_layer=2, max_position_embeddings=24, init_std=0.5)
    model = TransformerForConditionalGeneration(config)
    model.generation_config.num_beams = 3
    folder = tmp_path / "model"
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)

    output = tmp_path / "report" / "deployment.json"
    report = evaluate_exports.main(
        [str(folder), "--data_dir", str(data_dir), "--source_lang", "en", "--target_lang", "de",
         "--batch_size", "5", "--output", str(output)]
    )  # fmt: skip
    assert json.loads(output.read_text()) == report
    assert "| ctranslate2 |" in output.with_suffix(".md").read_text()
    engines = report["engines"]
    assert report["sentences"] == 24 and report["num_beams"] == 3
    # fp32 engines: the tokens of generate, sentence for sentence.
    assert engines["ctranslate2"]["greedy"]["identical"] == 1.0
    assert engines["ctranslate2"]["beam"]["identical_to_early_stopping"] == 1.0
    assert engines["onnx"]["greedy"]["identical"] == 1.0 and engines["onnx"]["beam"]["identical"] == 1.0
    # int8: smaller weights, whose tokens are mostly float32's (here 0.92 - 0.96 of the greedy sentences and 0.67 -
    # 0.83 of the beam ones; weights rounded wrongly would leave few), and a BLEU computed from their own tokens.
    # ONNX: the graphs of a model this small hold much besides projection weights (0.70 of fp32 here).
    for engine, fp32, ratio in (
        ("ctranslate2_int8", "ctranslate2", 0.6),
        ("onnx_int8", "onnx", 0.8),
        ("torch_int8", "torch", 0.6),
    ):
        assert engines[engine]["weights_bytes"] < ratio * engines[fp32]["weights_bytes"], engine
        assert engines[engine]["greedy"]["identical"] >= 0.75 and engines[engine]["beam"]["identical"] >= 0.5, engine
