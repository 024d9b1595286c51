"""recipes.multi30k.data: Multi30k's line files paired in either direction."""

import os
from pathlib import Path

import pytest

from recipes.common.corpus_files import DATA_DIR_ENV
from recipes.multi30k.data import load_multi30k

# The real corpora: $HF_TRANSFORMER_DATA, else ../shared/data beside the repository.
REAL_DATA_DIR = Path(os.environ.get(DATA_DIR_ENV) or Path(__file__).resolve().parents[4] / "shared" / "data")

MULTI30K = {
    "train": (
        ["Two dogs play.", "A man runs.", "A girl in a red coat.", "People walk in the rain."],
        ["Zwei Hunde spielen.", "Ein Mann \tläuft.", "Ein Mädchen in einem roten Mantel.", "Leute gehen."],
    ),
    "val": (["A cat sleeps."], ["Eine Katze schläft."]),
    "test_2016_flickr": (["A boy jumps.", "Two women talk."], ["Ein Junge springt.", "Zwei Frauen reden."]),
}


def write_multi30k(root: Path) -> Path:
    (root / "multi30k").mkdir(parents=True, exist_ok=True)
    for stem, (english, german) in MULTI30K.items():
        (root / "multi30k" / f"{stem}.en").write_text("\n".join(english) + "\n", "utf-8")
        (root / "multi30k" / f"{stem}.de").write_text("\n".join(german) + "\n", "utf-8")
    return root


def test_multi30k_pairs_lines_and_keeps_a_tab_inside_a_sentence(tmp_path):
    root = write_multi30k(tmp_path / "data")
    multi30k = load_multi30k(root)
    assert {split: len(rows) for split, rows in multi30k.items()} == {"train": 4, "validation": 1, "test": 2}
    assert multi30k["train"][1]["translation"] == {"en": "A man runs.", "de": "Ein Mann \tläuft."}
    assert multi30k["test"][1]["translation"] == {"en": "Two women talk.", "de": "Zwei Frauen reden."}
    reverse = load_multi30k(root, source_lang="de", target_lang="en")
    assert reverse["validation"][0]["translation"] == {"de": "Eine Katze schläft.", "en": "A cat sleeps."}


def test_multi30k_sides_of_different_length_are_an_error(tmp_path):
    root = write_multi30k(tmp_path / "data")
    with (root / "multi30k" / "val.de").open("a", encoding="utf-8") as extra:
        extra.write("Noch ein Satz.\n")
    with pytest.raises(ValueError) as caught:
        load_multi30k(root)
    message = str(caught.value)
    assert "val.en has 1 lines" in message and "val.de has 2" in message


@pytest.mark.slow
@pytest.mark.skipif(
    not (REAL_DATA_DIR / "multi30k" / "train.en").is_file(),
    reason=f"no real corpora in {REAL_DATA_DIR} (set {DATA_DIR_ENV} to a folder with multi30k/)",
)
def test_real_multi30k():
    multi30k = load_multi30k(REAL_DATA_DIR, download=False)
    assert {split: len(rows) for split, rows in multi30k.items()} == {
        "train": 29_000,
        "validation": 1_014,
        "test": 1_000,
    }
    line_7366 = multi30k["train"][7365]["translation"]["de"]
    assert line_7366.startswith('"Zwei männliche') and "\t" in line_7366
