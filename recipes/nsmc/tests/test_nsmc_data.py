"""recipes.nsmc.data: NSMC's reviews decoded, empty rows dropped and counted, the validation split carved by a seed."""

import logging
import os
from pathlib import Path

import pytest

from recipes.common.corpus_files import DATA_DIR_ENV
from recipes.nsmc.data import load_nsmc

# The real corpora: $HF_TRANSFORMER_DATA, else ../shared/data beside the repository.
REAL_DATA_DIR = Path(os.environ.get(DATA_DIR_ENV) or Path(__file__).resolve().parents[4] / "shared" / "data")

NSMC_HEADER = "id\tdocument\tlabel\n"
# Rows written the way the real files are: a document with a quote went through two rounds of CSV quoting.
NSMC_TRAIN_ROWS = [
    "1\t아 더빙.. 진짜 짜증나네요 목소리\t0",
    "2\t흠...포스터보고 초딩영화줄....오버연기조차 가볍지 않구나\t1",
    '3\t"""영화 끝나갈때쯤에 멍하다가 다보고나면 한마디 나올거임 """"ㅈ같다."""""""\t0',
    "4\t\t1",  # empty document
    "5\tNA\t1",  # a review that reads "NA" is text, not a missing value
    "6\t너무재밓었다그래서보는것을추천한다\t0",
    "7\t   \t0",  # only spaces: as empty as it gets
] + [f"{100 + i}\t재미있는 영화 {i}번째 리뷰\t{i % 2}" for i in range(33)]
NSMC_TEST_ROWS = ["900\t굳 ㅋ\t1", "901\t\t0", "902\t별로였다\t0"]


def write_nsmc(root: Path) -> Path:
    (root / "nsmc").mkdir(parents=True, exist_ok=True)
    (root / "nsmc" / "ratings_train.txt").write_text(NSMC_HEADER + "\n".join(NSMC_TRAIN_ROWS) + "\n", "utf-8")
    (root / "nsmc" / "ratings_test.txt").write_text(NSMC_HEADER + "\n".join(NSMC_TEST_ROWS) + "\n", "utf-8")
    return root


def test_nsmc_decodes_quotes_drops_and_counts_empty_rows(tmp_path, caplog):
    root = write_nsmc(tmp_path / "data")
    with caplog.at_level(logging.WARNING, logger="hf_transformer.data"):
        nsmc = load_nsmc(root, validation_size=0.25, cache_dir=tmp_path / "cache")
    assert "ratings_train.txt: dropped 2 of 40 rows with an empty document" in caplog.text
    assert "ratings_test.txt: dropped 1 of 3 rows with an empty document" in caplog.text

    assert set(nsmc) == {"train", "validation", "test"}
    assert (len(nsmc["train"]), len(nsmc["validation"]), len(nsmc["test"])) == (28, 10, 2)
    everything = {row["id"]: row for split in ("train", "validation") for row in nsmc[split]}
    assert len(everything) == 38  # the two parts do not overlap
    assert everything["3"]["text"] == '영화 끝나갈때쯤에 멍하다가 다보고나면 한마디 나올거임 "ㅈ같다."'
    assert everything["5"]["text"] == "NA"
    assert "4" not in everything and "7" not in everything
    assert nsmc["train"].features["label"].names == ["negative", "positive"]
    assert [row["id"] for row in nsmc["test"]] == ["900", "902"]


def test_nsmc_validation_split_is_fixed_by_the_seed(tmp_path):
    root = write_nsmc(tmp_path / "data")
    first = load_nsmc(root, validation_size=0.25, seed=7, cache_dir=tmp_path / "cache")
    again = load_nsmc(root, validation_size=0.25, seed=7, cache_dir=tmp_path / "cache")
    other = load_nsmc(root, validation_size=0.25, seed=8, cache_dir=tmp_path / "cache")
    assert first["validation"]["id"][:] == again["validation"]["id"][:]
    assert sorted(first["validation"]["id"][:]) != sorted(other["validation"]["id"][:])


@pytest.mark.slow
@pytest.mark.skipif(
    not (REAL_DATA_DIR / "nsmc" / "ratings_train.txt").is_file(),
    reason=f"no real corpora in {REAL_DATA_DIR} (set {DATA_DIR_ENV} to a folder with nsmc/)",
)
def test_real_nsmc(tmp_path, caplog):
    with caplog.at_level(logging.WARNING, logger="hf_transformer.data"):
        nsmc = load_nsmc(REAL_DATA_DIR, download=False, cache_dir=tmp_path)
    # The README's counts: 150,000 / 50,000 rows, of which 5 / 3 have an empty document.
    assert "dropped 5 of 150000 rows" in caplog.text and "dropped 3 of 50000 rows" in caplog.text
    assert len(nsmc["train"]) + len(nsmc["validation"]) == 149_995
    assert len(nsmc["validation"]) == 15_000 and len(nsmc["test"]) == 49_997
    documents = nsmc["train"]["text"][:] + nsmc["validation"]["text"][:]
    # Quotes decoded twice: no review is longer than Naver's limit allows (142 characters in this file).
    assert max(map(len, documents)) == 142
    assert sum('"' in text for text in documents) == 623
