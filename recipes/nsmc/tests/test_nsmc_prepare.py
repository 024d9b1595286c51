"""recipes.nsmc.prepare: NSMC's splits written as the general scripts read them, nothing lost or moved."""

import json

from hf_transformer.encoder_training import TextFileArguments
from recipes.nsmc import prepare
from recipes.nsmc.data import load_nsmc
from tests.helpers.launch import write_nsmc


def test_prepared_files_hold_the_recipe_splits_row_for_row(tmp_path):
    data_dir, out = tmp_path / "data", tmp_path / "reviews"
    write_nsmc(data_dir, 200, seed=1, name="ratings_train.txt", empty_rows=2)
    write_nsmc(data_dir, 30, seed=2, name="ratings_test.txt")
    counts = prepare.main(["--data_dir", str(data_dir), "--output_dir", str(out), "--seed", "7"])
    assert counts == {"train": 180, "validation": 20, "test": 30}  # 200 reviews, the two empty ones dropped

    expected = load_nsmc(data_dir, validation_size=0.1, seed=7)
    files = {f"{split}_file": str(out / f"{split}.jsonl") for split in ("train", "validation", "test")}
    read = TextFileArguments(**files).splits(seed=0)  # the general scripts' reading; no carving with given files
    for split in prepare.SPLITS:
        assert read[split]["text"][:] == expected[split]["text"][:], split
        assert read[split]["label"][:] == expected[split]["label"][:], split
    assert read["train"].features["label"].names == ["negative", "positive"]
    first = json.loads((out / "train.jsonl").read_text(encoding="utf-8").splitlines()[0])
    assert set(first) == {"id", "text", "label"} and first["id"] == expected["train"][0]["id"]


def test_the_validation_size_is_a_share_or_a_count_and_anything_else_is_refused_in_one_line(tmp_path, capsys):
    import pytest

    data_dir = tmp_path / "data"
    write_nsmc(data_dir, 60, seed=1, name="ratings_train.txt")
    write_nsmc(data_dir, 10, seed=2, name="ratings_test.txt")
    arguments = ["--data_dir", str(data_dir), "--output_dir", str(tmp_path / "reviews")]
    assert prepare.main([*arguments, "--validation_size", "15"])["validation"] == 15
    assert prepare.main([*arguments, "--validation_size", "0.25"])["validation"] == 15
    for given in ("0", "1.5", "-2", "some"):
        with pytest.raises(SystemExit):
            prepare.main([*arguments, "--validation_size", given])
        assert "neither a share in (0, 1) nor a count of reviews" in capsys.readouterr().err
