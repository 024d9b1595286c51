"""Text classification with Trainer on your own files: tokenizer -> datasets -> TransformerForSequenceClassification.

    python scripts/train_classifier.py --output_dir runs/reviews \
        --train_file train.jsonl --validation_file validation.jsonl --test_file test.jsonl \
        --num_train_epochs 2 --per_device_train_batch_size 64 --learning_rate 1e-3

The files are CSV, TSV, JSON or JSONL with a text and a label column (`--text_column`, `--label_column`; string
labels become class names). Without `--validation_file`, `--validation_size` of the training rows are held out
(seeded by `--split_seed`, default `--seed`). Every `TrainingArguments` option works (arguments go through
`HfArgumentParser`). The script trains a SentencePiece-style vocabulary on the training text (or loads one with
`--tokenizer`; a resumed run reads it from the checkpoint, and in a multi-process run process 0 trains it for all),
evaluates accuracy and F1 on the validation rows each epoch, keeps the best checkpoint (`--load_best_model_at_end`)
or the mean of the last N (`--average_checkpoints N`), scores that once on the test rows, and saves a complete model
folder: safetensors weights, config, tokenizer, `results.json` and a model card (README.md, by
`hf_transformer.hub.model_card`). The encoder's arguments and configuration are `hf_transformer.encoder_training`'s
`EncoderArguments`, shared with `scripts/pretrain_denoising.py`, whose folder `--init_from` starts the encoder from.
"""

from __future__ import annotations

import logging
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import numpy as np
import torch
from transformers import EvalPrediction, HfArgumentParser, TrainingArguments, set_seed

from hf_transformer import TransformerConfig, TransformerForSequenceClassification
from hf_transformer.commands import parse_arguments, run_command
from hf_transformer.data import classification_collator, rows_by_length, sorted_by_length, tokenize_classification
from hf_transformer.encoder_training import (
    EncoderArguments,
    TextFileArguments,
    cap_model_max_length,
    check_same_encoder_layout,
    encoder_config,
    train_encoder_tokenizer,
)
from hf_transformer.hub import CardText
from hf_transformer.ngram_classifier import fit_ngram_classifier, ngram_score_left_out, refit_ngram_classifier
from hf_transformer.openmp import restart_waiting_passively_when_busy
from hf_transformer.trainer import LengthGroupedTrainer
from hf_transformer.training import (
    AVERAGE_CHECKPOINTS_HELP,
    average_this_runs_checkpoints,
    check_checkpoint_averaging,
    check_new_run,
    end_process_group,
    given_tokenizer,
    one_tokenizer,
    process_report,
    save_run,
    score_in_float32,
    set_up_training_process,
    train_metrics,
    training_settings,
)

logger = logging.getLogger("train_classifier")


@dataclass
class ClassifierTrainingArguments(TrainingArguments):
    average_checkpoints: int = field(default=1, metadata={"help": AVERAGE_CHECKPOINTS_HELP})
    ngram_buckets: int = field(
        default=0,
        metadata={
            "help": "Add to the classifier a linear score over the input's n-grams, hashed into this many buckets "
            "(a power of two, e.g. 4194304), fitted after the encoder's training and weighed beside it on the "
            "validation rows (hf_transformer.ngram_classifier); 0: the encoder alone."
        },
    )
    ngram_unit: Literal["character", "token", "token+character"] = field(
        default="character",
        metadata={
            "help": "What the n-gram score's n-grams are runs of: the characters of the text without its spaces, "
            "across the tokenizer's cuts, the tokens (word-initial pieces read as inner ones), or both in one table "
            "(for a tokenizer that cuts morphemes, e.g. --segmenter mecab-ko)."
        },
    )
    ngram_order: int = field(
        default=4, metadata={"help": "The n-gram score's longest n-gram (characters or tokens; 3 suits tokens)."}
    )
    ngram_token_order: int | None = field(
        default=None,
        metadata={
            "help": "With --ngram_unit token+character: the longest token n-gram (--ngram_order is then the "
            "characters'; 3 suits tokens); default --ngram_order."
        },
    )
    ngram_inverse_l2: float = field(
        default=4.0, metadata={"help": "The n-gram score's inverse L2 regularisation (scikit-learn's C)."}
    )
    ngram_refit_with_validation: bool = field(
        default=False,
        metadata={
            "help": "Once the validation rows have weighed the n-gram score beside the encoder and have been scored, "
            "fit the score's regression once more on the training and validation rows together (its n-grams and "
            "weight kept), before the test rows are scored and the folder saved. The validation figures are those "
            "of the fit on the training rows alone, the only ones held out."
        },
    )


def accuracy_and_f1(prediction) -> dict[str, float]:
    """Accuracy, and F1: of class 1 with two classes, else the mean over the classes (macro). Scored against
    `prediction.label_ids`: rows may come back in another order than the dataset's."""
    predicted = np.asarray(prediction.predictions).argmax(-1)
    labels = np.asarray(prediction.label_ids)
    classes = [1] if prediction.predictions.shape[-1] == 2 else range(prediction.predictions.shape[-1])
    f1s = []
    for label in classes:
        true_positive = float(((predicted == label) & (labels == label)).sum())
        precision = true_positive / max(float((predicted == label).sum()), 1.0)
        recall = true_positive / max(float((labels == label).sum()), 1.0)
        f1s.append(2 * precision * recall / max(precision + recall, 1e-12))
    return {"accuracy": float((predicted == labels).mean()), "f1": float(np.mean(f1s))}


ENCODER_PREFIX = "model.encoder."


def load_encoder_weights(model: TransformerForSequenceClassification, folder: str | Path) -> int:
    """Copy every encoder tensor of ``model`` from ``folder/model.safetensors``; returns how many were copied.

    Raises ``FileNotFoundError`` without weights and ``ValueError`` when any encoder tensor of ``model`` is
    missing from the file or has another shape (another vocabulary, width or depth): a partial load would
    quietly leave random weights behind.
    """
    from safetensors.torch import load_file

    path = Path(folder) / "model.safetensors"
    if not path.is_file():
        raise FileNotFoundError(f"--init_from {folder}: no model.safetensors there")
    check_same_encoder_layout(model.config, folder)
    saved = load_file(str(path))
    own = {name: tensor for name, tensor in model.state_dict().items() if name.startswith(ENCODER_PREFIX)}
    missing = sorted(name for name in own if name not in saved)
    if missing:
        raise ValueError(
            f"--init_from {folder}: {len(missing)} of the classifier's {len(own)} encoder tensors are not in "
            f"{path.name} (first: {missing[:3]}); it holds {sorted(saved)[:3]}..."
        )
    mismatched = [
        f"{n}: {tuple(saved[n].shape)} vs {tuple(t.shape)}" for n, t in own.items() if saved[n].shape != t.shape
    ]
    if mismatched:
        raise ValueError(f"--init_from {folder}: shapes differ from the classifier's: {mismatched[:3]}")
    unexpected = model.load_state_dict({name: saved[name] for name in own}, strict=False).unexpected_keys
    assert not unexpected, unexpected
    return len(own)


def card_text(model_args: EncoderArguments, data_args: TextFileArguments, results: dict, settings: dict) -> CardText:
    """What the model card says of this run (hf_transformer.hub.model_card, the card it gets on the Hub too): the
    rows it trained on and was scored on, counted, where its encoder and tokenizer came from, and ``settings``
    (hf_transformer.training.training_settings); the model's own settings the card reads from the folder."""
    init_from = model_args.init_from
    start = f"from the pretrained encoder of {init_from} (base model)" if init_from else "from scratch"
    data = data_args.dataset_name or Path(data_args.train_file).name
    tokenizer = model_args.tokenizer or init_from
    tokenizer = f"the tokenizer of {tokenizer}" if tokenizer else "a tokenizer trained on those rows"
    validation = f"{results['eval_samples']:,} validation rows"
    validation += " (its validation file)" if data_args.validation_file else " held out from its training file"
    test = f" and {results['test_samples']:,} test rows" if "test_samples" in results else ""
    frozen = " (its token table kept fixed)" if model_args.freeze_embeddings else ""
    folders = results.get("averaged_checkpoints")
    averaged = (
        f" Its weights are the mean of the last {len(folders)} checkpoints ({', '.join(folders)})." if folders else ""
    )
    refit = ""
    if "ngram_refit_samples" in results:
        refit = (
            f" After the validation scores, its n-gram score was fitted once more on the training and validation "
            f"rows together ({results['ngram_refit_samples']:,} rows); the test rows were scored with that."
        )
    return CardText(
        title=f"Transformer text classifier ({data})" if data_args.dataset_name else "Transformer text classifier",
        training=f"Trained {start} on {results['train_samples']:,} training rows of {data} with {tokenizer}{frozen}; "
        f"scored on {validation}{test}.{averaged}{refit}",
        language=data_args.language,
        tags=["text-classification", *([data_args.dataset_name] if data_args.dataset_name else [])],
        datasets=[data_args.dataset_name] if data_args.dataset_name else [],
        metrics=["accuracy", "f1"],
        metric_columns={"accuracy": "accuracy", "f1": "F1"},
        result_rows=count_rows(results, "rows"),
        settings=settings | {"freeze_embeddings": True if model_args.freeze_embeddings else None},
        base_model=init_from,
    )


def count_rows(results: dict, what: str) -> dict[str, str]:
    """The card's table rows: each split with the number of its rows scored."""
    rows = {"eval": f"validation ({results['eval_samples']:,} {what})"}
    if "test_samples" in results:
        rows["test"] = f"test ({results['test_samples']:,} {what})"
    return rows


def load_encoder_and_data(model_args, data_args, training_args):
    """The rows, the run's tokenizer and their tokenized form."""
    # A given tokenizer loads before the rows are read: a wrong name or folder fails at once.
    tokenizer = given_tokenizer(training_args, model_args.tokenizer or model_args.init_from)
    splits = data_args.splits(training_args.seed)
    logger.info("rows: %s", {split: len(rows) for split, rows in splits.items()})

    def train_new_tokenizer():
        return train_encoder_tokenizer(model_args, splits["train"]["text"])

    if tokenizer is None:
        tokenizer = one_tokenizer(training_args, train_new_tokenizer)
    tokenizer = cap_model_max_length(tokenizer, model_args.max_length)
    return splits, tokenizer, tokenize_classification(splits, tokenizer, max_length=model_args.max_length)


def label_names(splits) -> list[str]:
    """Class names in id order: the ClassLabel's, else the integer labels as text."""
    feature = splits["train"].features["label"]
    if hasattr(feature, "names"):
        return list(feature.names)
    count = max(max(split.unique("label")) for split in splits.values()) + 1
    return [str(i) for i in range(count)]


def ngram_settings(training_args) -> dict:
    """The config's n-gram score settings from the script's arguments."""
    return {
        "classifier_ngram_buckets": training_args.ngram_buckets,
        "classifier_ngram_order": training_args.ngram_order,
        "classifier_ngram_unit": training_args.ngram_unit,
        "classifier_ngram_token_order": training_args.ngram_token_order,
    }


def build_model(model_args, tokenizer, names, training_args) -> TransformerForSequenceClassification:
    """The classifier, its encoder from --init_from where given, its token table frozen where asked; the n-gram
    score, where asked, is there from the start but left out of the training (fitted afterwards, in `score`)."""
    config = encoder_config(model_args, tokenizer, names)
    for name, value in ngram_settings(training_args).items():
        setattr(config, name, value)
    config.validate()
    model = TransformerForSequenceClassification(config)
    if model.ngram_classifier is not None:
        model.ngram_classifier.requires_grad_(False)
    if model_args.init_from and not training_args.resume_from_checkpoint:
        loaded = load_encoder_weights(model, model_args.init_from)
        logger.info("encoder initialised from %s: %d tensors", model_args.init_from, loaded)
    if model_args.freeze_embeddings:
        model.get_input_embeddings().weight.requires_grad_(False)
        logger.info("token table frozen: %s parameters", f"{model.get_input_embeddings().weight.numel():,}")
    logger.info("model: %s parameters", f"{model.num_parameters():,}")
    return model


@torch.no_grad()
def logits_in_order(trainer, dataset) -> torch.Tensor:
    """(N, L): the model's logits for ``dataset``'s rows in its order (the n-gram fit pairs each row's logits with its
    tokens), computed in batches of rows of about one length, in the precision Trainer evaluates in (float32 once
    `score_in_float32` has run)."""
    model = trainer.model.eval()
    order = rows_by_length(dataset, ("input_ids",))  # batches of one length: little padding
    loader = torch.utils.data.DataLoader(
        dataset.select_columns(["input_ids", "attention_mask"]),
        batch_size=trainer.args.per_device_eval_batch_size,
        sampler=order,
        collate_fn=trainer.data_collator,
    )
    logits = []
    for batch in loader:
        with trainer.autocast_smart_context_manager():
            logits.append(model(**{name: value.to(model.device) for name, value in batch.items()}).logits.float())
    logits = torch.cat(logits).cpu()
    in_order = torch.empty_like(logits)
    in_order[order] = logits
    return in_order


def fit_ngram_score(trainer, model, tokenizer, tokenized, training_args) -> dict:
    """Fit the n-gram score on the training rows and weigh it beside the trained encoder on the validation rows."""
    validation = tokenized["validation"]
    started = time.time()
    with ngram_score_left_out(model):  # still zero: the encoder's logits alone
        encoder_validation_logits = logits_in_order(trainer, validation)
    report = fit_ngram_classifier(
        model,
        tokenizer,
        tokenized["train"]["input_ids"][:],  # columns read at once, not row by row
        tokenized["train"]["label"][:],
        validation["input_ids"][:],
        validation["label"][:],
        encoder_validation_logits,
        inverse_l2=training_args.ngram_inverse_l2,
    )
    return report | {"ngram_fit_seconds": round(time.time() - started, 1)}


def refit_ngram_score(model, tokenized, training_args, ngram_logit_scale: float) -> dict:
    """The n-gram score's regression fitted once more on the training and validation rows together."""
    started = time.time()
    rows = tokenized["train"]["input_ids"][:] + tokenized["validation"]["input_ids"][:]
    labels = tokenized["train"]["label"][:] + tokenized["validation"]["label"][:]
    refit_ngram_classifier(
        model, rows, labels, ngram_logit_scale=ngram_logit_scale, inverse_l2=training_args.ngram_inverse_l2
    )
    return {"ngram_refit_samples": len(rows), "ngram_refit_seconds": round(time.time() - started, 1)}


def predict_test(trainer, model, test, encoder_classifier: tuple[torch.Tensor, torch.Tensor] | None) -> dict:
    """The test rows scored once. With ``encoder_classifier`` (the classifier layer's weight and bias before the
    n-gram fit scaled them) the same pass also gives the encoder's accuracy alone: the pooled states the classifier
    layer reads are the encoder's whatever the n-gram score adds after it, so the encoder's logits are that layer's
    product with the unscaled weights, batch by batch (gathered across processes as Trainer gathers its own)."""
    if encoder_classifier is None:
        return trainer.predict(test, metric_key_prefix="test").metrics
    weight, bias = encoder_classifier
    encoder_logits = []

    def keep_encoder_logits(module, inputs, output):
        logits = torch.nn.functional.linear(inputs[0], weight, bias)
        encoder_logits.append(trainer.accelerator.gather_for_metrics(logits).float().cpu())

    hook = model.classifier.register_forward_hook(keep_encoder_logits)
    try:
        prediction = trainer.predict(test, metric_key_prefix="test")
    finally:
        hook.remove()
    encoder_alone = accuracy_and_f1(EvalPrediction(torch.cat(encoder_logits).numpy(), prediction.label_ids))
    return prediction.metrics | {"test_encoder_accuracy": encoder_alone["accuracy"]}


def score(trainer, model, tokenizer, tokenized, training_args, started: float) -> dict:
    """The weights kept (the mean of the last checkpoints where asked), with the n-gram score fitted where asked,
    scored on validation, then (the n-gram score refitted with the validation rows where asked) once on test, where
    the same pass also scores the encoder without the n-gram score (`predict_test`). The test rows are evaluated
    sorted by length, as the Trainer's validation rows are (`sorted_by_length`)."""
    results = {}
    test = sorted_by_length(tokenized["test"]) if "test" in tokenized else None
    averaged = average_this_runs_checkpoints(model, training_args, started)
    if averaged:
        results["averaged_checkpoints"] = averaged
    encoder_classifier = None
    if model.ngram_classifier is not None:
        encoder_classifier = (model.classifier.weight.detach().clone(), model.classifier.bias.detach().clone())
        results.update(fit_ngram_score(trainer, model, tokenizer, tokenized, training_args))
    results.update(trainer.evaluate())
    results["eval_samples"] = len(tokenized["validation"])
    if model.ngram_classifier is not None and training_args.ngram_refit_with_validation:
        results.update(refit_ngram_score(model, tokenized, training_args, results["ngram_logit_scale"]))
    if test is not None:
        results.update(predict_test(trainer, model, test, encoder_classifier))
        results["test_samples"] = len(tokenized["test"])
    return results


def main(argv: list[str] | None = None) -> dict:
    parser = HfArgumentParser((EncoderArguments, TextFileArguments, ClassifierTrainingArguments))
    model_args, data_args, training_args = parse_arguments(parser, argv)
    check_new_run(training_args)
    check_checkpoint_averaging(training_args, training_args.average_checkpoints)
    if training_args.ngram_refit_with_validation and not training_args.ngram_buckets:
        raise ValueError("--ngram_refit_with_validation refits the n-gram score: give --ngram_buckets too")
    if training_args.ngram_buckets and not training_args.ngram_inverse_l2 > 0:
        raise ValueError(f"--ngram_inverse_l2 must be positive, got {training_args.ngram_inverse_l2}")
    # The config refuses impossible n-gram settings by name (e.g. a token order beside a unit without tokens);
    # checked here so that the refusal comes before the tokenizer is trained and the rows tokenized.
    TransformerConfig(**ngram_settings(training_args))
    model_args.check_folders()
    set_up_training_process(training_args)
    started = time.time()
    set_seed(training_args.seed)

    splits, tokenizer, tokenized = load_encoder_and_data(model_args, data_args, training_args)
    model = build_model(model_args, tokenizer, label_names(splits), training_args)
    trainer = LengthGroupedTrainer(
        model=model,
        args=training_args,
        train_dataset=tokenized["train"],
        eval_dataset=sorted_by_length(tokenized["validation"]),  # evaluated in order: batches of one length
        data_collator=classification_collator(tokenizer),
        processing_class=tokenizer,
        compute_metrics=accuracy_and_f1,
    )
    # The n-gram score, zero until fitted after the training, is left out of the training's steps and evaluations.
    with ngram_score_left_out(model):
        train_output = trainer.train(resume_from_checkpoint=training_args.resume_from_checkpoint)
    logger.info(process_report(trainer, tokenizer))
    score_in_float32(trainer)  # the figures below are the saved folder's, as every entry point computes them

    results: dict = {
        "task": "text_classification",
        "dataset": data_args.dataset_name,
        "init_from": model_args.init_from,
    }
    results |= {"train_samples": len(tokenized["train"])} | train_metrics(train_output)
    results |= score(trainer, model, tokenizer, tokenized, training_args, started)
    results.update(
        world_size=training_args.world_size,
        parameters=model.num_parameters(),
        wall_seconds=round(time.time() - started, 1),
        command=" ".join([Path(__file__).name, *(argv if argv is not None else sys.argv[1:])]),
    )
    save_run(trainer, results, card_text(model_args, data_args, results, training_settings(trainer)))
    if "test_accuracy" in results:
        logger.info("test accuracy %.4f, F1 %.4f", results["test_accuracy"], results["test_f1"])
    logger.info("model folder %s", training_args.output_dir)
    return results


if __name__ == "__main__":
    restart_waiting_passively_when_busy()  # before any work: torch's OpenMP threads sleep on a busy machine
    run_command(main)
    end_process_group()
