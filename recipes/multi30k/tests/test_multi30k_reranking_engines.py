"""The measure of reranking's work on torch against CTranslate2 (python -m recipes.multi30k.reranking_engines):
both engines' scores of the same candidates agree before anything is timed, and the record says what was run."""

from __future__ import annotations

import json

import pytest
import torch

from recipes.multi30k import reranking_engines
from tests.helpers.models import save_random_translator

WORDS = "a man woman dog cat rides runs sits on the red big small bike grass snow in with two".split()
SENTENCES = [" ".join(WORDS[(i * 7 + j * 3) % len(WORDS)] for j in range(2 + i % 9)) + " ." for i in range(24)]


def test_the_engines_do_the_same_work_and_the_record_says_how_fast(tmp_path):
    pytest.importorskip("ctranslate2")
    from hf_transformer.tokenization import train_tokenizer

    tokenizer = train_tokenizer(SENTENCES, vocab_size=90, model_type="bpe", model_max_length=256, show_progress=False)
    forward = save_random_translator(tmp_path / "forward", tokenizer, max_position_embeddings=16, max_new_tokens=6)
    channel = save_random_translator(tmp_path / "channel", tokenizer, max_position_embeddings=16, max_new_tokens=6)
    sources = tmp_path / "train.en"
    sources.write_text("\n".join(SENTENCES[:4]) + "\n", encoding="utf-8")
    output = tmp_path / "records" / "reranking-engines.json"
    argv = ["--forward", str(forward), "--channel", str(channel), "--sources", str(sources), "--sentences", "3"]
    argv += ["--num_candidates", "2", "--rounds", "1", "--threads", "1", "--output", str(output)]
    threads = torch.get_num_threads()
    try:
        results = reranking_engines.main(argv)
    finally:
        torch.set_num_threads(threads)
    assert results["largest_score_difference"] <= 1e-2 and results["sentences"] == 3
    assert results["candidates"]["torch"] == results["candidates"]["ctranslate2"] > 0
    assert set(results["seconds"]) == {"torch", "ctranslate2"} and all(len(v) == 1 for v in results["seconds"].values())
    assert results["command"].startswith("python -m recipes.multi30k.reranking_engines --forward")
    assert json.loads(output.read_text()) == results
    assert "| CTranslate2 |" in output.with_suffix(".md").read_text()
