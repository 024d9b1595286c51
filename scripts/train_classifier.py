"""Sentiment classification on NSMC with Trainer: tokenizer -> datasets -> TransformerForSequenceClassification.

    python scripts/train_classifier.py --output_dir runs/nsmc --data_dir ../shared/data \
        --num_train_epochs 2 --per_device_train_batch_size 64 --learning_rate 1e-3

Every `TrainingArguments` option works (arguments go through `HfArgumentParser`). The script trains a
SentencePiece-style vocabulary on the training text (or loads one with `--tokenizer`; a resumed run
reads it from the checkpoint, and in a multi-process run process 0 trains it for all), evaluates
accuracy and F1 on the validation split (carved from the training file) each epoch, keeps the best
checkpoint (`--load_best_model_at_end`) or the mean of the last N (`--average_checkpoints N`), scores that
once on the test set, and saves a complete model folder: safetensors weights, config, tokenizer,
`results.json` and a model card (README.md, by `hf_transformer.hub.model_card`).
The arguments and the configuration are those of `hf_transformer.recipes`, shared with
`scripts/pretrain_denoising.py`, whose folder `--init_from` starts the encoder from.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
from transformers import HfArgumentParser, Trainer, TrainingArguments, set_seed

import hf_transformer  # noqa: F401  (registers the Auto classes)
from hf_transformer import TransformerForSequenceClassification
from hf_transformer.data import classification_collator, first_rows, load_nsmc, tokenize_classification
from hf_transformer.hub import model_card
from hf_transformer.recipes import NsmcDataArguments, NsmcModelArguments, nsmc_config
from hf_transformer.training import (
    AVERAGE_CHECKPOINTS_HELP,
    average_last_checkpoints,
    check_checkpoint_averaging,
    end_process_group,
    keep_freed_memory,
    one_tokenizer,
    pin_memory_only_with_accelerator,
    process_report,
    train_metrics,
    warn_of_emulated_bfloat16,
)

logger = logging.getLogger("train_classifier")


@dataclass
class ClassifierTrainingArguments(TrainingArguments):
    average_checkpoints: int = field(default=1, metadata={"help": AVERAGE_CHECKPOINTS_HELP})


def accuracy_and_f1(prediction) -> dict[str, float]:
    """Scores against `prediction.label_ids`: rows may come back in another order than the dataset's."""
    predicted = np.asarray(prediction.predictions).argmax(-1)
    labels = np.asarray(prediction.label_ids)
    true_positive = float(((predicted == 1) & (labels == 1)).sum())
    precision = true_positive / max(float((predicted == 1).sum()), 1.0)
    recall = true_positive / max(float((labels == 1).sum()), 1.0)
    f1 = 2 * precision * recall / max(precision + recall, 1e-12)
    return {"accuracy": float((predicted == labels).mean()), "f1": f1}


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


def card(model_args: NsmcModelArguments, results: dict, model, output_dir: Path) -> str:
    """The folder's README.md (hf_transformer.hub.model_card, the card it gets on the Hub too)."""
    start = f"from the pretrained encoder of {model_args.init_from}" if model_args.init_from else "from scratch"
    return model_card(
        str(output_dir),
        model.config,
        num_parameters=model.num_parameters(),
        results=results,
        language=["ko"],
        tags=["sentiment-analysis", "nsmc"],
        datasets=["nsmc"],
        metrics=["accuracy", "f1"],
        example="정말 재미있는 영화였어요",
        title="Transformer sentiment classifier for NSMC",
        training=f"Trained {start} on the NSMC training file (movie reviews, 0 negative / 1 positive), less the "
        "validation reviews held out from it.",
        metric_columns={"accuracy": "accuracy", "f1": "F1"},
        result_rows={"eval": "validation", "test": f"test ({results.get('test_samples', '?')} reviews)"},
        settings=asdict(model_args),
    )


def main(argv: list[str] | None = None) -> dict:
    parser = HfArgumentParser((NsmcModelArguments, NsmcDataArguments, ClassifierTrainingArguments))
    model_args, data_args, training_args = parser.parse_args_into_dataclasses(args=argv)
    check_checkpoint_averaging(training_args, training_args.average_checkpoints)
    pin_memory_only_with_accelerator(training_args)
    keep_freed_memory()  # each step reuses the last one's memory instead of faulting it in anew
    logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s", level=logging.INFO)
    warn_of_emulated_bfloat16(training_args)
    started = time.time()
    set_seed(training_args.seed)

    splits = load_nsmc(
        data_args.data_dir, validation_size=data_args.validation_size, seed=data_args.seed_of_split(training_args)
    )
    splits = first_rows(splits, data_args.split_limits())
    logger.info("rows: %s", {split: len(rows) for split, rows in splits.items()})

    def train_new_tokenizer():
        from hf_transformer.tokenization import train_tokenizer

        return train_tokenizer(
            splits["train"]["text"], vocab_size=model_args.vocab_size, model_max_length=model_args.max_length
        )

    tokenizer = one_tokenizer(training_args, train_new_tokenizer, model_args.tokenizer or model_args.init_from)
    tokenized = tokenize_classification(splits, tokenizer, max_length=model_args.max_length)

    label_names = splits["train"].features["label"].names
    config = nsmc_config(model_args, tokenizer, label_names)
    model = TransformerForSequenceClassification(config)
    if model_args.init_from and not training_args.resume_from_checkpoint:
        loaded = load_encoder_weights(model, model_args.init_from)
        logger.info("encoder initialised from %s: %d tensors", model_args.init_from, loaded)
    if model_args.freeze_embeddings:
        model.get_input_embeddings().weight.requires_grad_(False)
        logger.info("token table frozen: %s parameters", f"{model.get_input_embeddings().weight.numel():,}")
    logger.info("model: %s parameters", f"{model.num_parameters():,}")

    trainer = Trainer(
        model=model,
        args=training_args,
        train_dataset=tokenized["train"],
        eval_dataset=tokenized["validation"],
        data_collator=classification_collator(tokenizer),
        processing_class=tokenizer,
        compute_metrics=accuracy_and_f1,
    )
    train_output = trainer.train(resume_from_checkpoint=training_args.resume_from_checkpoint)
    logger.info(process_report(trainer, tokenizer))
    results: dict = {"task": "nsmc_sentiment", "dataset": "nsmc", "init_from": model_args.init_from}
    results |= train_metrics(train_output)
    averaged = average_last_checkpoints(model, training_args.output_dir, training_args.average_checkpoints)
    if averaged:
        results["averaged_checkpoints"] = averaged
    results.update(trainer.evaluate())
    test = trainer.predict(tokenized["test"], metric_key_prefix="test")
    results.update(test.metrics)
    results.update(
        test_samples=len(tokenized["test"]),
        world_size=training_args.world_size,
        parameters=model.num_parameters(),
        wall_seconds=round(time.time() - started, 1),
        command=" ".join([Path(__file__).name, *(argv if argv is not None else sys.argv[1:])]),
    )

    output_dir = Path(training_args.output_dir)
    # Every process calls save_model (it writes from process 0 only): under FSDP it first gathers the shards,
    # a collective call that would wait forever for processes that had already finished.
    trainer.save_model(str(output_dir))  # weights, config and tokenizer
    if trainer.is_world_process_zero():
        (output_dir / "results.json").write_text(json.dumps(results, indent=2, default=str))
        (output_dir / "README.md").write_text(card(model_args, results, model, output_dir), encoding="utf-8")
        (output_dir / "log_history.json").write_text(json.dumps(trainer.state.log_history, indent=2))
        logger.info(
            "test accuracy %.4f, F1 %.4f; model folder %s", results["test_accuracy"], results["test_f1"], output_dir
        )
    return results


if __name__ == "__main__":
    main()
    end_process_group()
