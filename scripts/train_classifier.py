"""Sentiment classification on NSMC with Trainer: tokenizer -> datasets -> TransformerForSequenceClassification.

    python scripts/train_classifier.py --output_dir runs/nsmc --data_dir ../shared/data \
        --num_train_epochs 2 --per_device_train_batch_size 64 --learning_rate 1e-3

Every `TrainingArguments` option works (arguments go through `HfArgumentParser`). The script trains a
SentencePiece-style vocabulary on the training text (or loads one with `--tokenizer`; a resumed run
reads it from the checkpoint, and in a multi-process run process 0 trains it for all), evaluates
accuracy and F1 on the validation split (carved from the training file) each epoch, keeps the best
checkpoint, scores it once on the test set, and saves a complete model folder: safetensors weights,
config, tokenizer, `results.json` and a model card (README.md).
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
from hf_transformer import TransformerConfig, TransformerForSequenceClassification
from hf_transformer.data import classification_collator, first_rows, load_nsmc, tokenize_classification
from hf_transformer.training import (
    SplitLimits,
    keep_freed_memory,
    one_tokenizer,
    pin_memory_only_with_accelerator,
    process_report,
    train_metrics,
)

logger = logging.getLogger("train_classifier")


@dataclass
class ModelArguments:
    tokenizer: str | None = field(default=None, metadata={"help": "a saved tokenizer folder; else one is trained"})
    vocab_size: int = field(default=8000, metadata={"help": "vocabulary size of a newly trained tokenizer"})
    max_length: int = field(default=128, metadata={"help": "reviews are truncated to this many tokens"})
    d_model: int = 256
    num_layers: int = 3
    num_heads: int = 4
    intermediate_size: int = 1024
    dropout: float = 0.1
    attention_dropout: float = 0.1
    layer_norm_position: str = "pre"
    position_embedding_type: str = "learned"
    classifier_pooling: str = "mean"
    init_from: str | None = field(
        default=None,
        metadata={
            "help": "a pretrained folder (scripts/pretrain_denoising.py) whose encoder weights start the classifier; "
            "its tokenizer is used unless --tokenizer is given, and every encoder weight must match by name and shape"
        },
    )
    freeze_embeddings: bool = field(
        default=False, metadata={"help": "keep the token table fixed (e.g. as pretrained with --init_from)"}
    )


@dataclass
class DataArguments(SplitLimits):
    data_dir: str | None = field(
        default=None, metadata={"help": "folder holding nsmc/ (else $HF_TRANSFORMER_DATA, else ./data)"}
    )
    validation_size: float = field(default=0.1, metadata={"help": "share of the training file held out"})
    split_seed: int | None = field(
        default=None,
        metadata={"help": "seed of the held-out split (default --seed); keep it between pretraining and training"},
    )

    def seed_of_split(self, training_args) -> int:
        return training_args.seed if self.split_seed is None else self.split_seed


def accuracy_and_f1(prediction) -> dict[str, float]:
    """Scores against `prediction.label_ids`: rows may come back in another order than the dataset's."""
    predicted = np.asarray(prediction.predictions).argmax(-1)
    labels = np.asarray(prediction.label_ids)
    true_positive = float(((predicted == 1) & (labels == 1)).sum())
    precision = true_positive / max(float((predicted == 1).sum()), 1.0)
    recall = true_positive / max(float((labels == 1).sum()), 1.0)
    f1 = 2 * precision * recall / max(precision + recall, 1e-12)
    return {"accuracy": float((predicted == labels).mean()), "f1": f1}


def build_config(model_args: ModelArguments, tokenizer, label_names: list[str]) -> TransformerConfig:
    """The classifier's configuration; scripts/pretrain_denoising.py builds its encoder from the same one."""
    return TransformerConfig(
        vocab_size=len(tokenizer),
        d_model=model_args.d_model,
        n_layer=model_args.num_layers,
        num_attention_heads=model_args.num_heads,
        intermediate_size=model_args.intermediate_size,
        max_position_embeddings=model_args.max_length,
        dropout=model_args.dropout,
        attention_dropout=model_args.attention_dropout,
        layer_norm_position=model_args.layer_norm_position,
        position_embedding_type=model_args.position_embedding_type,
        embedding_layer_norm=model_args.layer_norm_position == "pre",
        classifier_pooling=model_args.classifier_pooling,
        layer_norm_epsilon=1e-6,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        num_labels=len(label_names),
        id2label=dict(enumerate(label_names)),
        label2id={name: i for i, name in enumerate(label_names)},
    )


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


def model_card(model_args: ModelArguments, results: dict, parameters: int) -> str:
    def score(key: str) -> str:
        return f"{results[key]:.4f}" if key in results else "n/a"

    return f"""---
language: ko
license: apache-2.0
library_name: transformers
pipeline_tag: text-classification
tags: [hf_transformer, sentiment-analysis, nsmc]
datasets: [nsmc]
metrics: [accuracy, f1]
---
# Transformer sentiment classifier for NSMC

An encoder of the "Attention Is All You Need" Transformer (hf_transformer), {parameters:,} parameters,
trained from scratch on the NSMC training file (movie reviews, 0 negative / 1 positive).

| split | accuracy | F1 |
|---|---|---|
| validation (best epoch) | {score("eval_accuracy")} | {score("eval_f1")} |
| test ({results.get("test_samples", "?")} reviews) | {score("test_accuracy")} | {score("test_f1")} |

Model settings: {json.dumps(asdict(model_args))}

```python
import hf_transformer  # or trust_remote_code=True where the package is not installed
from transformers import AutoModelForSequenceClassification, AutoTokenizer

tokenizer = AutoTokenizer.from_pretrained("PATH")
model = AutoModelForSequenceClassification.from_pretrained("PATH")
batch = tokenizer(["정말 재미있는 영화였어요"], return_tensors="pt")
print(model.config.id2label[int(model(**batch).logits.argmax(-1))])
```
"""


def main(argv: list[str] | None = None) -> dict:
    parser = HfArgumentParser((ModelArguments, DataArguments, TrainingArguments))
    model_args, data_args, training_args = parser.parse_args_into_dataclasses(args=argv)
    pin_memory_only_with_accelerator(training_args)
    keep_freed_memory()  # each step reuses the last one's memory instead of faulting it in anew
    logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s", level=logging.INFO)
    started = time.time()
    set_seed(training_args.seed)

    splits = load_nsmc(
        data_args.data_dir, validation_size=data_args.validation_size, seed=data_args.seed_of_split(training_args)
    )
    splits = first_rows(splits, data_args.split_limits())
    logger.info("rows: %s", {split: len(rows) for split, rows in splits.items()})

    def train_new_tokenizer():
        from tokenizer import train_tokenizer

        return train_tokenizer(
            splits["train"]["text"], vocab_size=model_args.vocab_size, model_max_length=model_args.max_length
        )

    tokenizer = one_tokenizer(training_args, train_new_tokenizer, model_args.tokenizer or model_args.init_from)
    tokenized = tokenize_classification(splits, tokenizer, max_length=model_args.max_length)

    label_names = splits["train"].features["label"].names
    config = build_config(model_args, tokenizer, label_names)
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
        (output_dir / "README.md").write_text(model_card(model_args, results, model.num_parameters()))
        (output_dir / "log_history.json").write_text(json.dumps(trainer.state.log_history, indent=2))
        logger.info(
            "test accuracy %.4f, F1 %.4f; model folder %s", results["test_accuracy"], results["test_f1"], output_dir
        )
    return results


if __name__ == "__main__":
    main()
