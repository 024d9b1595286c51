"""scripts/pretrain_denoising.py end to end on generated reviews in local files, and train_classifier.py --init_from."""

import json
import shutil

import pytest
import torch
from safetensors.torch import load_file
from transformers import AutoModelForMaskedLM

from hf_transformer import TransformerForMaskedLM
from hf_transformer.data import masked_token_collator
from hf_transformer.encoder_training import EncoderArguments, encoder_config
from hf_transformer.saved_folder import read_folder
from tests.helpers.launch import load_script, review_files, write_reviews
from tests.helpers.models import check_card_describes_folder, trained_with

MODEL = ["--d_model", "32", "--num_layers", "1", "--num_heads", "2", "--intermediate_size", "64", "--max_length", "32"]
QUIET = ["--report_to", "none", "--disable_tqdm", "true", "--use_cpu", "--seed", "0"]


@pytest.fixture(scope="module")
def pretrained(tmp_path_factory):
    root = tmp_path_factory.mktemp("pretrain")
    data_dir, output_dir = root / "data", root / "mlm"
    write_reviews(data_dir, 400, seed=1, name="train.jsonl", empty_rows=1)
    write_reviews(data_dir, 60, seed=2, name="test.jsonl")
    results = load_script("pretrain_denoising").main(
        ["--output_dir", str(output_dir), *review_files(data_dir), "--vocab_size", "200", *MODEL]
        + ["--num_train_epochs", "6", "--per_device_train_batch_size", "32", "--learning_rate", "3e-3"]
        + ["--mlm_probability", "0.3", "--eval_strategy", "epoch", "--save_strategy", "no", *QUIET]
    )
    return data_dir, output_dir, results


@pytest.mark.slow
def test_pretraining_learns_and_saves_an_encoder(pretrained):
    _, output_dir, results = pretrained
    assert results["task"] == "masked_lm_pretraining" and results["train_samples"] == 360  # 400 less 40 held out
    # 10 phrases of two-word reviews: far below the loss of a uniform guess over the vocabulary
    assert results["eval_loss"] < 0.6 * torch.log(torch.tensor(200.0)).item()
    assert 0.0 < results["eval_masked_accuracy"] <= 1.0
    assert results["wall_seconds"] > 0 and results["command"].startswith("pretrain_denoising.py --output_dir")
    assert json.loads((output_dir / "results.json").read_text())["eval_loss"] == results["eval_loss"]
    history = json.loads((output_dir / "log_history.json").read_text())
    assert [e for e in history if "eval_loss" in e]
    weights = load_file(str(output_dir / "model.safetensors"))
    assert any(name.startswith("model.encoder.layers.0.") for name in weights)
    assert (output_dir / "tokenizer.json").is_file()
    assert type(AutoModelForMaskedLM.from_pretrained(output_dir)) is TransformerForMaskedLM
    card = check_card_describes_folder(output_dir, trained_with(output_dir) | {"mlm_probability": 0.3})
    assert "pipeline_tag: fill-mask" in card and f"{results['eval_masked_accuracy']:.4f}" in card
    assert "on 360 training texts of train.jsonl with a tokenizer trained on those texts" in card
    assert "| learning_rate | 0.003 |" in card and "| epochs | 6.0 |" in card and "| dropout | 0.1 |" in card


@pytest.mark.slow
def test_a_folder_of_the_earlier_script_head_loads_as_the_package_head(pretrained, tmp_path):
    # Folders written before the head joined the package name `TransformerForMaskedTokens`, with the same weights.
    _, output_dir, _ = pretrained
    folder = tmp_path / "earlier"
    shutil.copytree(output_dir, folder)
    config = json.loads((folder / "config.json").read_text())
    config["architectures"] = ["TransformerForMaskedTokens"]
    config.pop("auto_map", None)
    (folder / "config.json").write_text(json.dumps(config))
    model = AutoModelForMaskedLM.from_pretrained(folder)
    saved = load_file(str(folder / "model.safetensors"))
    assert saved.keys() == model.state_dict().keys()
    for name, tensor in model.state_dict().items():
        assert torch.equal(tensor, saved[name]), name
    assert read_folder(folder).head == "TransformerForMaskedLM"


@pytest.mark.slow
def test_classifier_starts_from_the_pretrained_encoder(pretrained, tmp_path):
    data_dir, pretrained_dir, _ = pretrained
    train_classifier = load_script("train_classifier")
    results = train_classifier.main(
        ["--output_dir", str(tmp_path / "model"), *review_files(data_dir), "--init_from", str(pretrained_dir)]
        + [
            "--freeze_embeddings",
            "--split_seed",
            "0",
            *MODEL,
            "--num_train_epochs",
            "6",
            "--per_device_train_batch_size",
            "32",
            "--learning_rate",
            "3e-3",
        ]
        + ["--eval_strategy", "epoch", "--save_strategy", "no", *QUIET]
    )
    assert results["init_from"] == str(pretrained_dir) and results["task"] == "text_classification"
    assert results["test_accuracy"] >= 0.85  # 60 generated reviews; with a frozen token table
    # The card: fine-tuned from the pretraining folder (its base model), with that folder's tokenizer and sizes.
    run = trained_with(tmp_path / "model") | {"freeze_embeddings": True}
    card = check_card_describes_folder(tmp_path / "model", run, base_model=str(pretrained_dir))
    assert f"Trained from the pretrained encoder of {pretrained_dir} (base model) on 360 training rows" in card
    assert "| vocab_size | 8000 |" not in card and "| tokenizer |" in card

    # The classifier's encoder is exactly the pretrained one before fine-tuning, and uses its tokenizer.
    from transformers import AutoTokenizer

    from hf_transformer import TransformerForSequenceClassification

    tokenizer = AutoTokenizer.from_pretrained(pretrained_dir)
    args = EncoderArguments(d_model=32, num_layers=1, num_heads=2, intermediate_size=64, max_length=32)
    model = TransformerForSequenceClassification(encoder_config(args, tokenizer, ["0", "1"]))
    assert train_classifier.load_encoder_weights(model, pretrained_dir) > 0
    saved = load_file(str(pretrained_dir / "model.safetensors"))
    for name, tensor in model.state_dict().items():
        if name.startswith("model.encoder."):
            assert torch.equal(tensor, saved[name]), name
    saved_classifier = AutoTokenizer.from_pretrained(tmp_path / "model")
    assert saved_classifier.get_vocab() == tokenizer.get_vocab()
    # --freeze_embeddings: the trained classifier still holds the pretrained token table
    trained = load_file(str(tmp_path / "model" / "model.safetensors"))
    table = "model.encoder.embeddings.embed_tokens.weight"
    assert torch.equal(trained[table], saved[table])
    assert not torch.equal(
        trained["model.encoder.layers.0.feed_forward.fc1.weight"],
        saved["model.encoder.layers.0.feed_forward.fc1.weight"],
    )


@pytest.mark.slow
def test_pretraining_continues_from_an_earlier_folder(pretrained, tmp_path):
    data_dir, pretrained_dir, first = pretrained
    script = load_script("pretrain_denoising")
    results = script.main(
        ["--output_dir", str(tmp_path / "more"), *review_files(data_dir), "--init_from", str(pretrained_dir)]
        + [*MODEL, "--num_train_epochs", "1", "--per_device_train_batch_size", "32", "--learning_rate", "1e-3"]
        + ["--mlm_probability", "0.3", "--eval_strategy", "no", "--save_strategy", "no", *QUIET[:-1], "1"]
        + ["--split_seed", "0"]
    )
    assert results["init_from"] == str(pretrained_dir)
    assert results["eval_loss"] < 0.6 * torch.log(torch.tensor(200.0)).item()
    assert results["train_samples"] == first["train_samples"]  # the same carved training split

    wider = [*MODEL[:1], "48", *MODEL[2:]]
    with pytest.raises(ValueError, match="not a pretraining folder of these sizes"):
        script.main(
            ["--output_dir", str(tmp_path / "wider"), *review_files(data_dir), "--init_from", str(pretrained_dir)]
            + [*wider, "--max_steps", "1", "--split_seed", "0", *QUIET]
        )


@pytest.mark.slow
def test_init_from_fails_loudly_on_another_architecture(pretrained, tmp_path):
    _, pretrained_dir, _ = pretrained
    train_classifier = load_script("train_classifier")
    from transformers import AutoTokenizer

    from hf_transformer import TransformerForSequenceClassification

    tokenizer = AutoTokenizer.from_pretrained(pretrained_dir)
    wider = EncoderArguments(d_model=48, num_layers=1, num_heads=2, intermediate_size=64, max_length=32)
    model = TransformerForSequenceClassification(encoder_config(wider, tokenizer, ["0", "1"]))
    with pytest.raises(ValueError, match="shapes differ"):
        train_classifier.load_encoder_weights(model, pretrained_dir)
    deeper = EncoderArguments(d_model=32, num_layers=2, num_heads=2, intermediate_size=64, max_length=32)
    model = TransformerForSequenceClassification(encoder_config(deeper, tokenizer, ["0", "1"]))
    with pytest.raises(ValueError, match="other settings \\(encoder_layers 1 there, 2 here\\)"):
        train_classifier.load_encoder_weights(model, pretrained_dir)
    # Without the folder's config.json, its tensors alone tell the missing layer.
    (tmp_path / "weights").mkdir()
    (tmp_path / "weights" / "model.safetensors").write_bytes((pretrained_dir / "model.safetensors").read_bytes())
    with pytest.raises(ValueError, match="not in model.safetensors"):
        train_classifier.load_encoder_weights(model, tmp_path / "weights")
    with pytest.raises(FileNotFoundError):
        train_classifier.load_encoder_weights(model, tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("setting", "told"),
    [
        ({"num_heads": 4}, "num_attention_heads 2 there, 4 here"),
        ({"layer_norm_position": "post"}, "layer_norm_position 'pre' there, 'post' here; embedding_layer_norm True"),
        ({"position_embedding_type": "sinusoidal"}, "position_embedding_type 'learned' there, 'sinusoidal' here"),
    ],
)
def test_init_from_refuses_weights_of_the_same_shapes_trained_with_another_layout(pretrained, tmp_path, setting, told):
    """Tensors of the same names and shapes that compute otherwise: refused by the folder's config, naming the
    setting, in the classifier and in a continued pretraining alike."""
    _, pretrained_dir, _ = pretrained
    from transformers import AutoTokenizer

    from hf_transformer import TransformerForMaskedLM, TransformerForSequenceClassification

    tokenizer = AutoTokenizer.from_pretrained(pretrained_dir)
    sizes = dict(d_model=32, num_layers=1, num_heads=2, intermediate_size=64, max_length=32)
    same = TransformerForSequenceClassification(encoder_config(EncoderArguments(**sizes), tokenizer, ["0", "1"]))
    assert load_script("train_classifier").load_encoder_weights(same, pretrained_dir) > 0
    config = encoder_config(EncoderArguments(**sizes | setting), tokenizer, ["0", "1"])
    with pytest.raises(ValueError, match=f"--init_from .*: its encoder was trained with other settings \\({told}"):
        load_script("train_classifier").load_encoder_weights(
            TransformerForSequenceClassification(config), pretrained_dir
        )
    with pytest.raises(ValueError, match=told):
        load_script("pretrain_denoising").continue_from(TransformerForMaskedLM(config), pretrained_dir)


@pytest.mark.parametrize("share", ["0", "1.5"])
def test_a_share_of_tokens_that_predicts_none_or_too_many_is_refused_before_reading(tmp_path, share):
    # The training file does not exist: a refusal after reading it would be a FileNotFoundError.
    with pytest.raises(ValueError, match=f"--mlm_probability .* got {share}"):
        load_script("pretrain_denoising").main(
            ["--output_dir", str(tmp_path), "--train_file", str(tmp_path / "absent.jsonl"), *MODEL, *QUIET]
            + ["--mlm_probability", share]
        )
    with pytest.raises(ValueError, match="mlm_probability is the share"):
        masked_token_collator(None, mlm_probability=float(share))  # refused before the tokenizer is read


@pytest.mark.parametrize("vocab_size", [50, 3000])  # 3000: several chunks of fused logits
def test_fused_training_head_gives_the_loss_and_gradients_of_the_plain_head(vocab_size):
    from tests.helpers.models import tiny_config

    model = TransformerForMaskedLM(tiny_config(vocab_size=vocab_size, dropout=0.0))
    with torch.no_grad():
        model.output_bias.normal_()  # a bias of zeros would hide a missing bias gradient
    input_ids = torch.randint(5, vocab_size, (6, 9))
    labels = torch.where(torch.rand(6, 9) < 0.4, input_ids, -100)
    labels[0, 0] = input_ids[0, 0]  # at least one predicted token

    def loss_and_grads(train: bool):
        model.zero_grad()
        model.train(train)
        output = model(input_ids=input_ids, attention_mask=torch.ones_like(input_ids), labels=labels)
        assert (output.logits is None) == train  # the fused training head keeps no logits
        output.loss.backward()
        return output.loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters()}

    fused_loss, fused_grads = loss_and_grads(train=True)
    plain_loss, plain_grads = loss_and_grads(train=False)  # dropout is 0: the same function
    torch.testing.assert_close(fused_loss, plain_loss, rtol=1e-5, atol=1e-6)
    assert plain_grads["output_bias"].abs().sum() > 0
    for name, grad in plain_grads.items():
        torch.testing.assert_close(fused_grads[name], grad, rtol=1e-4, atol=1e-6, msg=name)


def test_rows_of_one_token_or_none_are_left_out_in_order():
    from datasets import Dataset

    without_short_rows = load_script("pretrain_denoising").without_short_rows
    part = Dataset.from_dict({"input_ids": [[5, 6, 3], [3], [], [7, 3]], "attention_mask": [[1] * 3, [1], [], [1] * 2]})
    kept = without_short_rows(part)
    assert kept["input_ids"][:] == [[5, 6, 3], [7, 3]]
    assert kept._indices is None  # written out: batches read without an index mapping
    complete = part.select([0, 3]).flatten_indices()
    assert without_short_rows(complete) is complete  # nothing to drop: the split as it is


def test_the_classifier_holds_out_the_rows_pretraining_held_out_when_some_rows_have_no_label(tmp_path):
    # Pretraining reads the texts alone and keeps a row without a label; the classifier drops it. Carved apart, the
    # two splits differed from that row on, and the classifier was validated on rows pretraining had trained on.
    from hf_transformer.encoder_training import TextFileArguments

    rows = [{"text": f"review number {i}", "label": ["negative", "positive"][i % 2]} for i in range(60)]
    rows[5]["label"] = ""
    (tmp_path / "train.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    arguments = TextFileArguments(train_file=str(tmp_path / "train.jsonl"), validation_size=0.2)
    pretraining, classifier = arguments.splits(0, labels=False), arguments.splits(0)
    assert len(classifier["train"]) + len(classifier["validation"]) == 59
    assert set(classifier["validation"]["text"]) <= set(pretraining["validation"]["text"])
    assert set(classifier["train"]["text"]) <= set(pretraining["train"]["text"])
    # Every row labelled: the carve is the one it always was.
    (tmp_path / "all.jsonl").write_text("".join(json.dumps(row | {"label": "positive"}) + "\n" for row in rows))
    labelled = TextFileArguments(train_file=str(tmp_path / "all.jsonl"), validation_size=0.2)
    assert labelled.splits(0)["validation"]["text"] == labelled.splits(0, labels=False)["validation"]["text"]
