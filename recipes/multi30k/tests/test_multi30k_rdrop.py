"""R-Drop: the loss of two dropout passes over one batch, and the trainer that computes it."""

import json

import pytest
import torch
import torch.nn.functional as F
from transformers import Seq2SeqTrainer, Seq2SeqTrainingArguments

from hf_transformer import TransformerForConditionalGeneration
from recipes.multi30k import rdrop as rdrop_module
from recipes.multi30k import train as train_step
from recipes.multi30k.rdrop import RDropSeq2SeqTrainer, rdrop_loss
from tests.helpers.models import check_card_describes_folder, tiny_config, trained_with


def _logits_and_labels(batch=3, length=5, vocab=11):
    generator = torch.Generator().manual_seed(0)
    logits = torch.randn(2 * batch, length, vocab, generator=generator)
    labels = torch.randint(0, vocab, (batch, length), generator=generator)
    labels[0, 3:] = -100
    labels[2, 1:] = -100
    return logits, labels


def test_two_equal_passes_give_the_label_smoothed_cross_entropy():
    logits, labels = _logits_and_labels()
    first = logits[:3]
    expected = F.cross_entropy(first.reshape(-1, 11), labels.reshape(-1), ignore_index=-100, label_smoothing=0.1)
    got = rdrop_loss(torch.cat([first, first]), labels, alpha=5.0, label_smoothing=0.1)
    torch.testing.assert_close(got, expected)


def test_the_regulariser_is_alpha_over_four_times_both_kl_divergences_per_target_token():
    logits, labels = _logits_and_labels()
    first, second = F.log_softmax(logits, dim=-1).chunk(2)
    kl_12 = F.kl_div(second, first, log_target=True, reduction="none").sum(-1)  # KL(p1 || p2), (B, T)
    kl_21 = F.kl_div(first, second, log_target=True, reduction="none").sum(-1)
    labelled = labels != -100
    expected_kl = ((kl_12 + kl_21) * labelled).sum() / labelled.sum()
    plain = rdrop_loss(logits, labels, alpha=0.0, label_smoothing=0.1)
    ce_first = F.cross_entropy(logits[:3].reshape(-1, 11), labels.reshape(-1), label_smoothing=0.1)
    ce_second = F.cross_entropy(logits[3:].reshape(-1, 11), labels.reshape(-1), label_smoothing=0.1)
    torch.testing.assert_close(plain, (ce_first + ce_second) / 2)
    torch.testing.assert_close(rdrop_loss(logits, labels, alpha=2.0, label_smoothing=0.1), plain + 0.5 * expected_kl)
    # Trainer's token count of the whole accumulated batch divides the sum instead of this batch's count.
    total = plain * labelled.sum()
    torch.testing.assert_close(
        rdrop_loss(logits, labels, alpha=0.0, label_smoothing=0.1, num_items_in_batch=20), total / 20
    )


def test_wrong_shapes_and_a_negative_weight_are_refused():
    logits, labels = _logits_and_labels()
    with pytest.raises(
        ValueError, match=r"stacked on itself, \(2B, T, V\), with labels \(B, T\); got logits \(3, 5, 11\)"
    ):
        rdrop_loss(logits[:3], labels, alpha=1.0)
    with pytest.raises(ValueError, match="alpha must be >= 0, got -1"):
        rdrop_loss(logits, labels, alpha=-1.0)


@pytest.mark.parametrize("bad", [-1, 11])
def test_labels_outside_the_vocabulary_are_refused(bad):
    # -1 was read as token 0 (the targets are clamped at 0 to gather), 11 failed inside gather.
    logits, labels = _logits_and_labels()
    labels[1, 2] = bad
    with pytest.raises(ValueError, match=r"`labels` must be in \[0, 11\) or -100 \(ignored\)"):
        rdrop_loss(logits, labels, alpha=1.0)
    with pytest.raises(ValueError, match="rdrop_alpha must be >= 0, got -0.5"):
        RDropSeq2SeqTrainer(model=None, rdrop_alpha=-0.5)


def _trainer(cls, dropout, tmp_path, **kwargs):
    torch.manual_seed(0)
    config = tiny_config(dropout=dropout, attention_dropout=dropout, label_smoothing=0.1)
    model = TransformerForConditionalGeneration(config)
    args = Seq2SeqTrainingArguments(output_dir=str(tmp_path), use_cpu=True, report_to="none")
    return cls(model=model, args=args, **kwargs)


def _batch():
    generator = torch.Generator().manual_seed(1)
    input_ids = torch.randint(4, 40, (4, 7), generator=generator)
    labels = torch.randint(4, 40, (4, 6), generator=generator)
    labels[1, 4:] = -100
    return {"input_ids": input_ids, "attention_mask": torch.ones_like(input_ids), "labels": labels}


def test_without_dropout_the_trainer_computes_the_models_own_loss(tmp_path):
    """No dropout: both passes agree, the KL is 0 and the training loss is the model's label-smoothed loss."""
    plain = _trainer(Seq2SeqTrainer, 0.0, tmp_path / "plain")
    rdrop = _trainer(RDropSeq2SeqTrainer, 0.0, tmp_path / "rdrop", rdrop_alpha=5.0)
    plain.model.train(), rdrop.model.train()
    expected = plain.compute_loss(plain.model, _batch())
    torch.testing.assert_close(rdrop.compute_loss(rdrop.model, _batch()), expected)
    torch.testing.assert_close(rdrop.compute_loss(rdrop.model, _batch(), num_items_in_batch=40), expected * 22 / 40)


def test_with_dropout_the_two_passes_differ_and_only_training_runs_them(tmp_path):
    rdrop = _trainer(RDropSeq2SeqTrainer, 0.3, tmp_path, rdrop_alpha=4.0)
    model = rdrop.model.train()
    seen = []
    model.register_forward_hook(
        lambda module, args, kwargs, output: seen.append(kwargs["input_ids"].shape[0]), with_kwargs=True
    )
    torch.manual_seed(3)
    regularised = rdrop.compute_loss(model, _batch())
    rdrop.rdrop_alpha = 1e-12  # still R-Drop's doubled pass, with a negligible KL weight
    torch.manual_seed(3)
    unregularised = rdrop.compute_loss(model, _batch())
    assert seen == [8, 8]  # the batch stacked on itself, twice with the same dropout draws
    assert regularised > unregularised + 1e-3  # the same two passes, plus a positive KL
    rdrop.rdrop_alpha = 0.0
    rdrop.compute_loss(model, _batch())
    assert seen[-1] == 4  # alpha 0: the parent's single pass
    rdrop.rdrop_alpha = 4.0
    model.eval()
    with torch.no_grad():
        evaluated = rdrop.compute_loss(model, _batch())
    assert seen[-1] == 4
    torch.testing.assert_close(evaluated, model(**_batch()).loss)


@pytest.mark.slow
def test_the_training_step_trains_with_rdrop(tmp_path, monkeypatch):
    from test_multi30k_train import TINY_MODEL, write_multi30k

    # Each training step's loss, and what it would be without the KL term (alpha 0, the same two passes).
    steps = []

    def recorded(logits, labels, *, alpha, **options):
        loss = rdrop_loss(logits, labels, alpha=alpha, **options)
        steps.append((alpha, loss.item(), rdrop_loss(logits.detach(), labels, alpha=0.0, **options).item()))
        return loss

    monkeypatch.setattr(rdrop_module, "rdrop_loss", recorded)
    write_multi30k(tmp_path / "data", sizes=(("train", 200), ("val", 8), ("test_2016_flickr", 8)))
    results = train_step.main(
        [
            "--output_dir", str(tmp_path / "model"), "--data_dir", str(tmp_path / "data"), *TINY_MODEL,
            "--max_steps", "4", "--per_device_train_batch_size", "16", "--eval_strategy", "no",
            "--num_beams", "1", "--rdrop_alpha", "3", "--dropout", "0.1", "--logging_steps", "1",
        ]
    )  # fmt: skip
    history = json.loads((tmp_path / "model" / "log_history.json").read_text())
    losses = [row["loss"] for row in history if "loss" in row]
    # Every step's loss was R-Drop's with the weight asked for, and it holds a KL term: dropout made the passes differ.
    assert [alpha for alpha, _, _ in steps] == [3.0] * 4
    assert all(loss > without_kl + 1e-4 for _, loss, without_kl in steps), steps
    assert losses == pytest.approx([loss for _, loss, _ in steps], abs=1e-3)  # the logged loss is that loss
    assert "--rdrop_alpha 3" in results["command"]
    check_card_describes_folder(tmp_path / "model", trained_with(tmp_path / "model") | {"rdrop_alpha": 3.0})
