"""The measure of reranking's work on torch against CTranslate2 (python -m recipes.multi30k.reranking_engines):
both engines' scores of the same candidates agree before anything is timed, and the record says what was run."""

from __future__ import annotations

import json

import pytest
import torch

from recipes.multi30k import reranking_engines
from tests.helpers.models import SENTENCES, save_random_translator, sentence_tokenizer


def test_the_engines_do_the_same_work_and_the_record_says_how_fast(tmp_path):
    pytest.importorskip("ctranslate2")
    tokenizer = sentence_tokenizer()
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
