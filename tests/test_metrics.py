"""The two BLEU conventions of hf_transformer.metrics: cased detokenised sacreBLEU, and lowercased Moses-tokenised
BLEU against Multi30k's official `lc.norm.tok` references."""

from __future__ import annotations

from pathlib import Path

import pytest

from hf_transformer.data import load_multi30k_tok_references
from hf_transformer.metrics import bleu, bleu_lc_tok, moses_lc_tok

SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"


def test_moses_lc_tok_lowercases_normalises_tokenises_and_escapes():
    assert moses_lc_tok(['A man says "Hi, there!"'], "en") == ["a man says &quot; hi , there ! &quot;"]
    assert moses_lc_tok(["Der Hund's Ball."], "de") == ["der hund &apos; s ball ."]
    # German quotes are normalised, and a period inside the closing quote moves out of it (Moses' rule for
    # languages other than English), also at the end of a line.
    assert moses_lc_tok(["Er sagt: „Komm.“"], "de") == ["er sagt : &quot; komm &quot; ."]
    assert moses_lc_tok(['He says "come."'], "en") == ["he says &quot; come . &quot;"]


def test_bleu_lc_tok_ignores_case_and_tokenisation_but_bleu_does_not():
    hypotheses = ["A Dog runs on the grass.", "Two MEN, sitting."]
    tokenized = ["a dog runs on the grass .", "two men , sitting ."]
    assert bleu_lc_tok(hypotheses, tokenized, "en") == pytest.approx(100.0)
    assert bleu(hypotheses, ["a dog runs on the grass.", "two men, sitting."]) < 60
    with pytest.raises(ValueError, match="2 hypotheses but 1 references"):
        bleu_lc_tok(hypotheses, tokenized[:1], "en")


@pytest.mark.skipif(not (SHARED_DATA / "multi30k" / "tok").is_dir(), reason="the shared Multi30k corpus is absent")
@pytest.mark.parametrize("split, stem", [("validation", "val"), ("test", "test_2016_flickr")])
@pytest.mark.parametrize("lang", ["en", "de"])
def test_raw_references_become_the_official_tokenised_ones(split, stem, lang):
    raw = (SHARED_DATA / "multi30k" / f"{stem}.{lang}").read_text(encoding="utf-8").splitlines()
    official = load_multi30k_tok_references(split, lang, SHARED_DATA, download=False)
    assert len(official) == len(raw) >= 1000
    assert moses_lc_tok(raw, lang) == official
    assert bleu_lc_tok(raw, official, lang) == pytest.approx(100.0)


def test_tokenised_references_exist_for_validation_and_test_only(tmp_path):
    with pytest.raises(ValueError, match="'validation' and 'test', not 'train'"):
        load_multi30k_tok_references("train", "en", tmp_path, download=False)
    with pytest.raises(FileNotFoundError, match="lc.norm.tok.de"):
        load_multi30k_tok_references("test", "de", tmp_path, download=False)


def test_tokenised_references_are_read_one_per_newline(tmp_path):
    # A separator str.splitlines splits at (U+2028, U+0085) is text inside a sentence, as in the sentence files.
    folder = tmp_path / "multi30k" / "tok"
    folder.mkdir(parents=True)
    (folder / "test_2016_flickr.lc.norm.tok.de").write_text("ein hund\u2028läuft .\nzwei\x85 männer .\n", "utf-8")
    lines = load_multi30k_tok_references("test", "de", tmp_path, download=False)
    assert lines == ["ein hund\u2028läuft .", "zwei\x85 männer ."]
