"""recipes.nsmc.pipeline_accuracy: a classifier folder's test accuracy through the text-classification pipeline, set
beside the one its run recorded."""

import json
import re

import pytest
import torch

from hf_transformer import Predictor, TransformerConfig, TransformerForSequenceClassification
from hf_transformer.tokenization import train_tokenizer
from recipes.nsmc import pipeline_accuracy

REVIEWS = [
    ("정말 재미있고 감동적인 영화였어요", "positive"),
    ("시간이 아까운 최악의 영화", "negative"),
    ("배우들 연기는 좋았는데 스토리가 너무 지루했다", "negative"),
    ("다시 보고 싶은 인생 영화", "positive"),
    ("별로였다 1점도 아깝다", "negative"),
    ("감독의 다음 영화가 기대된다", "positive"),
]


def make_folder(tmp_path, blind=False, names=("negative", "positive")):
    # BPE, whose training is repeatable (Unigram's piece ids move between processes), so the model is the same in every
    # run; and a classifier with weights of unit scale, so that no review's two labels come near a tie (TIE).
    tokenizer = train_tokenizer(
        [text for text, _ in REVIEWS] * 5, vocab_size=120, model_type="bpe", min_frequency=1, show_progress=False
    )
    tokenizer.model_max_length = 16
    torch.manual_seed(0)
    config = TransformerConfig(
        vocab_size=len(tokenizer), d_model=16, n_layer=1, num_attention_heads=2, intermediate_size=32,
        max_position_embeddings=16, pad_token_id=tokenizer.pad_token_id, num_labels=2,
        id2label=dict(enumerate(names)), label2id={name: i for i, name in enumerate(names)},
    )  # fmt: skip
    folder = tmp_path / "classifier"
    model = TransformerForSequenceClassification(config).eval()
    if blind:  # the same logits for both labels: every review a tie
        torch.nn.init.zeros_(model.classifier.weight)
        torch.nn.init.zeros_(model.classifier.bias)
    else:
        torch.nn.init.normal_(model.classifier.weight, std=1.0)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    test_file = tmp_path / "test.jsonl"
    # The labels as the test file holds them: the class names, or (names "0" and "1") the class ids as integers.
    rows = [(t, y if names[0] == "negative" else int(y == "positive")) for t, y in REVIEWS]
    test_file.write_text("".join(json.dumps({"text": t, "label": y}, ensure_ascii=False) + "\n" for t, y in rows))
    predicted = [result["label"] for result in Predictor.from_pretrained(folder).classify([t for t, _ in REVIEWS])]
    accuracy = sum(p == str(y) for p, (_, y) in zip(predicted, rows)) / len(REVIEWS)
    return folder, test_file, accuracy


def test_pipeline_accuracy_is_set_beside_the_recorded_one(tmp_path, capsys):
    folder, test_file, accuracy = make_folder(tmp_path)
    (folder / "results.json").write_text(json.dumps({"test_accuracy": accuracy}))
    assert pipeline_accuracy.main([str(folder), str(test_file)]) == 0
    written = json.loads((folder / "pipeline_accuracy.json").read_text())
    assert written["accuracy"] == written["recorded_accuracy"] == accuracy and written["reviews"] == len(REVIEWS)
    assert "0 review(s) apart" in capsys.readouterr().out

    (folder / "results.json").write_text(json.dumps({"test_accuracy": accuracy + 2 / len(REVIEWS)}))
    assert pipeline_accuracy.main([str(folder), str(test_file)]) == 1
    written = json.loads((folder / "pipeline_accuracy.json").read_text())
    assert written["reviews_apart"] == 2 and written["ties"] == 0


def test_reviews_apart_on_ties_are_rounding_not_a_disagreement(tmp_path, capsys):
    folder, test_file, accuracy = make_folder(tmp_path, blind=True)
    (folder / "results.json").write_text(json.dumps({"test_accuracy": accuracy + 2 / len(REVIEWS)}))
    assert pipeline_accuracy.main([str(folder), str(test_file)]) == 0
    written = json.loads((folder / "pipeline_accuracy.json").read_text())
    assert written["reviews_apart"] == 2 and written["ties"] == len(REVIEWS)
    assert "2 review(s) apart, 6 tie(s)" in capsys.readouterr().out


def test_integer_labels_are_read_as_the_folder_names_them_and_a_run_without_test_rows_is_refused(tmp_path, capsys):
    folder, test_file, accuracy = make_folder(tmp_path, names=("0", "1"))  # a run trained on labels 0 and 1
    assert accuracy > 0
    (folder / "results.json").write_text(json.dumps({"test_accuracy": accuracy}))
    assert pipeline_accuracy.main([str(folder), str(test_file)]) == 0
    assert json.loads((folder / "pipeline_accuracy.json").read_text())["accuracy"] == accuracy
    (folder / "results.json").write_text(json.dumps({"eval_accuracy": accuracy}))
    with pytest.raises(SystemExit):
        pipeline_accuracy.main([str(folder), str(test_file)])
    assert "holds no test_accuracy: the run was trained without --test_file" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("rows", "told"),
    [
        ([{"text": "좋다", "label": 1}], r"labels 1 are not the model's \(negative, positive\)"),
        ([{"review": "좋다", "label": "positive"}], "each line must hold a review's text and label"),
        ([], "no reviews in it"),
        ("id\tdocument\tlabel\n1\t좋다\t1\n", "not JSON lines"),
        (None, "test.jsonl: no such file"),
    ],
)
def test_a_test_file_the_folder_cannot_be_scored_on_is_refused_in_one_line_before_scoring(tmp_path, capsys, rows, told):
    # Labels 0/1 against a model of negative/positive would score every review wrong: accuracy 0, silently.
    folder, test_file, accuracy = make_folder(tmp_path)
    (folder / "results.json").write_text(json.dumps({"test_accuracy": accuracy}))
    if rows is None:
        test_file.unlink()
    else:
        text = rows if isinstance(rows, str) else "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)
        test_file.write_text(text)
    with pytest.raises(SystemExit) as raised:
        pipeline_accuracy.main([str(folder), str(test_file)])
    assert raised.value.code == 2
    error = capsys.readouterr().err.strip().splitlines()
    assert re.search(told, error[-1]) and "Traceback" not in "\n".join(error), error
    assert not (folder / "pipeline_accuracy.json").exists()
