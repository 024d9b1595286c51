"""Save/load through the Auto classes, safetensors layout, and training with Trainer / Seq2SeqTrainer."""

import json

import pytest
import torch
from datasets import Dataset
from safetensors import safe_open
from transformers import (
    AutoConfig,
    AutoModel,
    AutoModelForSeq2SeqLM,
    AutoModelForSequenceClassification,
    DataCollatorForSeq2Seq,
    Seq2SeqTrainer,
    Seq2SeqTrainingArguments,
    Trainer,
    TrainingArguments,
)

from hf_transformer import (
    TransformerConfig,
    TransformerForConditionalGeneration,
    TransformerForSequenceClassification,
    TransformerModel,
)
from tests.helpers.models import batch_with_padding, tiny_config


def outputs_of(model, source, target):
    model.eval()
    with torch.no_grad():
        if isinstance(model, TransformerForSequenceClassification):
            return [model(input_ids=source).logits]
        out = model(input_ids=source, decoder_input_ids=target, output_hidden_states=True)
        return [
            out.encoder_last_hidden_state,
            out.last_hidden_state if hasattr(out, "last_hidden_state") else out.logits,
        ]


@pytest.mark.parametrize(
    "model_class, auto_class, options",
    [
        (TransformerModel, AutoModel, {}),
        (TransformerForConditionalGeneration, AutoModelForSeq2SeqLM, {}),
        (TransformerForConditionalGeneration, AutoModelForSeq2SeqLM, dict(share_embeddings=False, n_dec_vocab=30)),
        (TransformerForConditionalGeneration, AutoModelForSeq2SeqLM, dict(tie_word_embeddings=False)),
        (
            TransformerForConditionalGeneration,
            AutoModelForSeq2SeqLM,
            dict(layer_norm_position="pre", position_embedding_type="learned", embedding_layer_norm=True),
        ),
        (TransformerForSequenceClassification, AutoModelForSequenceClassification, dict(num_labels=3)),
        (TransformerForSequenceClassification, AutoModelForSequenceClassification, dict(classifier_pooling="decoder")),
    ],
)
def test_save_and_reload_through_the_auto_class_is_bit_identical(tmp_path, model_class, auto_class, options):
    config = tiny_config(**options)
    model = model_class(config)
    source, target = batch_with_padding()
    before = outputs_of(model, source, target)
    model.save_pretrained(tmp_path)
    files = sorted(p.name for p in tmp_path.iterdir())
    assert "model.safetensors" in files and "config.json" in files
    assert not any(name.endswith((".bin", ".pt", ".pkl")) for name in files)
    assert json.loads((tmp_path / "config.json").read_text())["model_type"] == "hf_transformer"

    assert type(AutoConfig.from_pretrained(tmp_path)) is TransformerConfig
    reloaded = auto_class.from_pretrained(tmp_path)
    assert type(reloaded) is model_class
    after = outputs_of(reloaded, source, target)
    for a, b in zip(before, after, strict=True):
        assert torch.equal(a, b)
    state, reloaded_state = model.state_dict(), reloaded.state_dict()
    assert state.keys() == reloaded_state.keys()
    assert all(torch.equal(state[k], reloaded_state[k]) for k in state)


def test_tied_weights_are_stored_once_and_tied_again_on_load(tmp_path, config):
    model = TransformerForConditionalGeneration(config)
    model.save_pretrained(tmp_path)
    with safe_open(str(tmp_path / "model.safetensors"), "pt") as f:
        keys = set(f.keys())
    assert "model.encoder.embeddings.embed_tokens.weight" in keys
    assert "lm_head.weight" not in keys and "model.decoder.embeddings.embed_tokens.weight" not in keys
    assert not any("position_table" in k for k in keys)
    reloaded = AutoModelForSeq2SeqLM.from_pretrained(tmp_path)
    table = reloaded.model.encoder.embeddings.embed_tokens.weight
    assert reloaded.lm_head.weight is table and reloaded.model.decoder.embeddings.embed_tokens.weight is table


def test_seq2seq_checkpoint_loads_into_other_heads(tmp_path, config):
    seq2seq = TransformerForConditionalGeneration(config)
    seq2seq.save_pretrained(tmp_path)
    base = AutoModel.from_pretrained(tmp_path)
    torch.testing.assert_close(
        base.encoder.layers[0].self_attn.q_proj.weight, seq2seq.model.encoder.layers[0].self_attn.q_proj.weight
    )
    classifier = AutoModelForSequenceClassification.from_pretrained(tmp_path, num_labels=2)
    torch.testing.assert_close(
        classifier.model.encoder.layers[1].feed_forward.fc2.weight,
        seq2seq.model.encoder.layers[1].feed_forward.fc2.weight,
    )


def test_generation_after_reload_is_identical(tmp_path, config):
    model = TransformerForConditionalGeneration(config).eval()
    source, _ = batch_with_padding()
    expected = model.generate(source, max_new_tokens=6, num_beams=2)
    model.save_pretrained(tmp_path)
    reloaded = AutoModelForSeq2SeqLM.from_pretrained(tmp_path).eval()
    assert torch.equal(reloaded.generate(source, max_new_tokens=6, num_beams=2), expected)


def copy_task(count: int, seed: int = 0) -> Dataset:
    """Sources of 3-8 random tokens (ids 4..19) ending in EOS; the target is the same sequence."""
    generator = torch.Generator().manual_seed(seed)
    rows = []
    for _ in range(count):
        length = int(torch.randint(3, 9, (1,), generator=generator))
        tokens = torch.randint(4, 20, (length,), generator=generator).tolist() + [3]
        rows.append({"input_ids": tokens, "attention_mask": [1] * len(tokens), "labels": tokens})
    return Dataset.from_list(rows)


class _PadOnlyTokenizer:
    """DataCollatorForSeq2Seq needs a tokenizer only to pad; ids are already made here."""

    pad_token_id = 0
    padding_side = "right"

    def pad(self, features, padding=True, max_length=None, pad_to_multiple_of=None, return_tensors="pt"):
        width = max(len(f["input_ids"]) for f in features)
        batch = {key: [f[key] + [0] * (width - len(f[key])) for f in features] for key in features[0]}
        return {key: torch.tensor(value) for key, value in batch.items()}


@pytest.mark.slow
def test_trainer_learns_a_copy_task(tmp_path):
    config = tiny_config(d_model=64, intermediate_size=128, dropout=0.0)
    model = TransformerForConditionalGeneration(config)
    train, evaluation = copy_task(2048), copy_task(32, seed=1)
    args = Seq2SeqTrainingArguments(
        output_dir=str(tmp_path),
        per_device_train_batch_size=32,
        per_device_eval_batch_size=32,
        learning_rate=2e-3,
        num_train_epochs=4,
        warmup_steps=20,
        logging_steps=16,
        save_strategy="no",
        report_to=[],
        predict_with_generate=True,
        generation_max_length=12,
        generation_num_beams=2,
        disable_tqdm=True,
        use_cpu=True,
        seed=0,
    )
    collator = DataCollatorForSeq2Seq(_PadOnlyTokenizer(), model=model, label_pad_token_id=-100)
    trainer = Seq2SeqTrainer(
        model=model, args=args, train_dataset=train, eval_dataset=evaluation, data_collator=collator
    )
    before = trainer.evaluate(max_length=12)["eval_loss"]
    trainer.train()
    losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    assert losses[-1] < 0.2 * losses[0], losses
    after = trainer.evaluate(max_length=12)["eval_loss"]
    assert after < 0.2 * before

    prediction = trainer.predict(evaluation, max_length=12, num_beams=2)
    generated = torch.as_tensor(prediction.predictions)
    copied = 0
    for row, expected in zip(generated, evaluation["labels"], strict=True):
        tokens = [t for t in row.tolist()[1:] if t not in (0, -100)]
        copied += tokens[: len(expected)] == expected
    assert copied >= 0.75 * len(evaluation), f"only {copied} of {len(evaluation)} sequences copied"


@pytest.mark.slow
def test_trainer_label_smoothing_factor_trains_the_seq2seq_head(tmp_path):
    # Trainer's `label_smoothing_factor` takes `labels` out of the batch and smooths the model's logits itself; the
    # decoder then reads the `decoder_input_ids` DataCollatorForSeq2Seq(model=...) adds. Without them the model
    # says what to do.
    from transformers.trainer_pt_utils import LabelSmoother

    data = copy_task(6)
    model = TransformerForConditionalGeneration(tiny_config())
    args = TrainingArguments(
        output_dir=str(tmp_path), per_device_train_batch_size=6, max_steps=1, learning_rate=0.0,
        label_smoothing_factor=0.1, report_to=[], save_strategy="no", disable_tqdm=True, use_cpu=True,
    )  # fmt: skip
    labels_only = DataCollatorForSeq2Seq(_PadOnlyTokenizer(), label_pad_token_id=-100)  # no model: no decoder inputs
    with pytest.raises(ValueError, match="label_smoothing_factor.*DataCollatorForSeq2Seq"):
        Trainer(model=model, args=args, train_dataset=data, data_collator=labels_only).train()
    collator = DataCollatorForSeq2Seq(_PadOnlyTokenizer(), model=model, label_pad_token_id=-100)
    loss = Trainer(model=model, args=args, train_dataset=data, data_collator=collator).train().training_loss
    batch = collator(list(data))
    with torch.no_grad():
        logits = model.eval()(**{key: value for key, value in batch.items() if key != "labels"}).logits
    assert loss == pytest.approx(LabelSmoother(epsilon=0.1)({"logits": logits}, batch["labels"]).item(), rel=1e-4)


@pytest.mark.slow
def test_gradient_accumulation_gives_the_same_first_update(tmp_path):
    """With num_items_in_batch the loss is normalised over the whole accumulated batch."""
    data = copy_task(16)
    updates = []
    for batch_size, accumulation in ((16, 1), (8, 2)):
        torch.manual_seed(0)
        model = TransformerForConditionalGeneration(tiny_config())
        start = {k: v.clone() for k, v in model.state_dict().items()}
        args = TrainingArguments(
            output_dir=str(tmp_path / str(accumulation)),
            per_device_train_batch_size=batch_size,
            gradient_accumulation_steps=accumulation,
            max_steps=1,
            learning_rate=1e-2,
            report_to=[],
            save_strategy="no",
            disable_tqdm=True,
            use_cpu=True,
            seed=0,
            optim="sgd",
            lr_scheduler_type="constant",
        )
        collator = DataCollatorForSeq2Seq(_PadOnlyTokenizer(), model=model, label_pad_token_id=-100)
        Trainer(model=model, args=args, train_dataset=data, data_collator=collator).train()
        updates.append({k: model.state_dict()[k] - start[k] for k in start})
    for key in updates[0]:
        torch.testing.assert_close(
            updates[0][key], updates[1][key], atol=1e-6, rtol=1e-4, msg=lambda m, key=key: f"{key}: {m}"
        )


@pytest.mark.slow
def test_trainer_trains_the_classifier(tmp_path):
    generator = torch.Generator().manual_seed(0)
    rows = []
    for _ in range(256):
        label = int(torch.randint(0, 2, (1,), generator=generator))
        low, high = (4, 12) if label == 0 else (12, 20)
        tokens = torch.randint(
            low, high, (int(torch.randint(3, 9, (1,), generator=generator)),), generator=generator
        ).tolist()
        rows.append({"input_ids": tokens, "attention_mask": [1] * len(tokens), "labels": label})
    data = Dataset.from_list(rows)
    model = TransformerForSequenceClassification(tiny_config(num_labels=2))

    def collate(features):
        width = max(len(f["input_ids"]) for f in features)
        ids = torch.tensor([f["input_ids"] + [0] * (width - len(f["input_ids"])) for f in features])
        return {
            "input_ids": ids,
            "attention_mask": ids.ne(0).long(),
            "labels": torch.tensor([f["labels"] for f in features]),
        }

    args = TrainingArguments(
        output_dir=str(tmp_path),
        per_device_train_batch_size=32,
        num_train_epochs=3,
        learning_rate=3e-3,
        report_to=[],
        save_strategy="no",
        disable_tqdm=True,
        use_cpu=True,
        logging_steps=5,
    )
    trainer = Trainer(model=model, args=args, train_dataset=data, eval_dataset=data, data_collator=collate)
    trainer.train()
    prediction = trainer.predict(data)
    assert prediction.predictions.shape == (256, 2)  # logits only, no encoder states among the predictions
    accuracy = (prediction.predictions.argmax(-1) == prediction.label_ids).mean()
    assert accuracy > 0.9, accuracy
