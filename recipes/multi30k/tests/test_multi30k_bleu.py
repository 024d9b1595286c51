"""Multi30k's BLEU conventions (recipes.multi30k.bleu): lowercased Moses-tokenised BLEU against the official
`lc.norm.tok` references beside cased detokenised sacreBLEU, its paired bootstrap, and the comparison of output files
(python -m recipes.multi30k.compare)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hf_transformer.metrics import bleu, paired_bootstrap
from recipes.multi30k import compare
from recipes.multi30k.bleu import bleu_lc_tok, moses_lc_tok, paired_bootstrap_lc_tok
from recipes.multi30k.data import load_multi30k_tok_references
from tests.helpers.launch import write_multi30k

SHARED_DATA = Path(__file__).resolve().parents[4] / "shared" / "data"


@pytest.mark.slow
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


@pytest.mark.slow
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


def _bootstrap_systems(references: list[str]) -> dict[str, list[str]]:
    """A baseline that drops each sentence's last word, the references themselves (clearly better), and the
    baseline with one sentence mended (alike but for chance)."""
    baseline = [" ".join(line.split()[:-1]) for line in references]
    return {
        "baseline": baseline,
        "references": list(references),
        "one sentence mended": [references[0], *baseline[1:]],
    }


@pytest.mark.slow
def test_paired_bootstrap_scores_both_conventions_and_tells_a_real_difference_from_chance(tmp_path):
    write_multi30k(tmp_path, {"test_2016_flickr": 300})
    references = (tmp_path / "multi30k" / "test_2016_flickr.en").read_text(encoding="utf-8").splitlines()
    systems = _bootstrap_systems(references)
    for lc_tok in (False, True):
        if lc_tok:  # cased differently from the references: lc-tok BLEU does not see it
            systems = {name: [line.upper() for line in lines] for name, lines in systems.items()}
            records = paired_bootstrap_lc_tok(systems, moses_lc_tok(references, "en"), "en", samples=300)
            expected = [bleu_lc_tok(lines, moses_lc_tok(references, "en"), "en") for lines in systems.values()]
        else:
            records = paired_bootstrap(systems, references, samples=300)  # the library's, for comparison
            expected = [bleu(lines, references) for lines in systems.values()]
        assert [record["name"] for record in records] == list(systems)
        assert [record["score"] for record in records] == pytest.approx(expected)
        assert records[1]["score"] == pytest.approx(100.0)
        baseline, better, alike = records
        assert baseline["p_value"] is None and baseline["ci"] > 0
        assert baseline["mean"] == pytest.approx(baseline["score"], abs=baseline["ci"])
        assert better["p_value"] < 0.01 and alike["p_value"] > 0.05


def test_compare_scores_output_files_both_ways(tmp_path):
    write_multi30k(tmp_path, {"test_2016_flickr": 200})
    references = (tmp_path / "multi30k" / "test_2016_flickr.de").read_text(encoding="utf-8").splitlines()
    (tmp_path / "multi30k" / "tok").mkdir()
    tok = tmp_path / "multi30k" / "tok" / "test_2016_flickr.lc.norm.tok.de"
    tok.write_text("\n".join(moses_lc_tok(references, "de")) + "\n", encoding="utf-8")
    files = []
    for name, lines in _bootstrap_systems(references).items():
        files.append(tmp_path / f"{name.replace(' ', '-')}.de")
        files[-1].write_text("\n".join(lines) + "\n", encoding="utf-8")
    output = tmp_path / "out" / "compare.json"
    arguments = [*map(str, files), "--data_dir", str(tmp_path), "--target_lang", "de", "--samples", "200"]
    figures = compare.main([*arguments, "--output", str(output)])
    assert json.loads(output.read_text()) == figures
    for metric in ("bleu", "bleu_lc_tok"):
        assert [record["name"] for record in figures[metric]] == list(map(str, files))
        assert figures[metric][1]["score"] == pytest.approx(100.0) and figures[metric][1]["p_value"] < 0.01
    # An output of another length is named; nothing is written.
    files[1].write_text("\n".join(references[:-1]) + "\n", encoding="utf-8")
    with pytest.raises(SystemExit, match=f"{files[1]}: 199 lines but 200 references"):
        compare.main([*arguments, "--output", str(tmp_path / "none.json")])
    assert not (tmp_path / "none.json").exists()
    # A folder given as an output, or as the file to write, or the figures written over an output: named, before
    # any resampling.
    with pytest.raises(SystemExit, match=f"{tmp_path / 'out'} is a folder; give a file of one sentence per line"):
        compare.main([str(tmp_path / "out"), *arguments])
    with pytest.raises(ValueError, match="--output .*out is a folder; give the file to write"):
        compare.main([*arguments, "--output", str(tmp_path / "out")])
    with pytest.raises(ValueError, match="--output .* is the file this command reads"):
        compare.main([*arguments, "--output", str(files[0])])


def test_a_blank_line_dropped_from_a_split_leaves_each_row_its_own_tokenised_reference(tmp_path):
    # The loader drops a pair with an empty side; the tokenised file keeps a line per raw line, so the rows after
    # the blank must be scored against the lines where their raw lines stand, not the next row's.
    from recipes.multi30k.data import DataArguments
    from recipes.multi30k.scoring import lc_tok_references

    write_multi30k(tmp_path, {"train": 20, "val": 6, "test_2016_flickr": 6})
    folder = tmp_path / "multi30k"
    german = (folder / "test_2016_flickr.de").read_text(encoding="utf-8").removesuffix("\n").split("\n")
    german[2] = ""
    (folder / "test_2016_flickr.de").write_text("\n".join(german) + "\n", encoding="utf-8")
    (folder / "tok").mkdir()
    for stem in ("val", "test_2016_flickr"):
        for lang in ("en", "de"):
            raw = (folder / f"{stem}.{lang}").read_text(encoding="utf-8").removesuffix("\n").split("\n")
            lines = "\n".join(moses_lc_tok(raw, lang)) + "\n"
            (folder / "tok" / f"{stem}.lc.norm.tok.{lang}").write_text(lines, encoding="utf-8")
    arguments = DataArguments(data_dir=str(tmp_path), source_lang="en", target_lang="de")
    splits = arguments.splits()
    rows = [pair["de"] for pair in splits["test"]["translation"]]
    assert len(rows) == 5  # the blank pair dropped
    references = lc_tok_references(splits, arguments)["test"]
    assert references == moses_lc_tok(rows, "de")
    assert bleu_lc_tok(rows, references, "de") == pytest.approx(100.0)
