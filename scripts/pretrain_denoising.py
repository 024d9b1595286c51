"""Denoising pretraining of a classifier's encoder on your own texts (masked-token prediction).

    python scripts/pretrain_denoising.py --output_dir runs/reviews-mlm --train_file train.jsonl \
        --validation_file validation.jsonl --vocab_size 16000 --max_length 64 --d_model 128 --num_layers 2 \
        --num_heads 4 --intermediate_size 512 --num_train_epochs 4 --per_device_train_batch_size 128
    python scripts/train_classifier.py --init_from runs/reviews-mlm --output_dir runs/reviews ...  # same sizes

The texts are the `--text_column` of local CSV / TSV / JSON(L) files; no label is read. Give the classifier's own
training and validation files (or the same `--validation_size` and `--split_seed`), so that its held-out rows are
never trained on here (only their masked-token loss is reported). A share `--mlm_probability` of the tokens is
chosen in every text; of those, 80% become `[MASK]`, 10% a random token and 10% stay, and the encoder predicts the
original tokens through a small head whose output projection is the token table itself.

The model is `hf_transformer.TransformerForMaskedLM` (`AutoModelForMaskedLM`, the fill-mask pipeline).
`--init_from` continues from an earlier pretraining folder (its weights and tokenizer; a new learning-rate
schedule). The arguments and the configuration are the classifier's (`hf_transformer.encoder_training`),
so the encoder built here has the classifier's configuration and parameter names (`model.encoder.*`). The folder
gets the weights (`model.safetensors`: encoder and head), `config.json`, the tokenizer, `results.json` (masked-token
loss and accuracy on the validation texts, parameters, wall time, the command), `log_history.json` and a model card
(README.md, by `hf_transformer.hub.model_card`).
"""

from __future__ import annotations

import logging
import math
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch
from transformers import HfArgumentParser, TrainingArguments, set_seed

from hf_transformer import TransformerForMaskedLM
from hf_transformer.commands import parse_arguments, run_command
from hf_transformer.data import masked_token_collator, sequence_lengths, tokenize_classification
from hf_transformer.encoder_training import (
    EncoderArguments,
    TextFileArguments,
    cap_model_max_length,
    check_same_encoder_layout,
    encoder_config,
    train_encoder_tokenizer,
)
from hf_transformer.hub import CardText
from hf_transformer.openmp import restart_waiting_passively_when_busy
from hf_transformer.trainer import LengthGroupedTrainer
from hf_transformer.training import (
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

logger = logging.getLogger("pretrain_denoising")


@dataclass
class PretrainingArguments:
    mlm_probability: float = field(default=0.15, metadata={"help": "share of the tokens of a text to predict"})

    def __post_init__(self):
        # Before any text is read: 0 would train with zero loss and learn nothing.
        if not 0.0 < self.mlm_probability <= 1.0:
            raise ValueError(
                f"--mlm_probability is the share of tokens to predict, in (0, 1]; got {self.mlm_probability}"
            )


def continue_from(model: TransformerForMaskedLM, folder: str | Path) -> None:
    """Load every weight of an earlier pretraining folder (same sizes), or raise naming what differs."""
    from safetensors.torch import load_file

    path = Path(folder) / "model.safetensors"
    if not path.is_file():
        raise FileNotFoundError(f"--init_from {folder}: no model.safetensors there")
    check_same_encoder_layout(model.config, folder)
    saved = load_file(str(path))
    own = model.state_dict()
    problems = [f"missing {name}" for name in own if name not in saved]
    problems += [f"unexpected {name}" for name in saved if name not in own]
    problems += [
        f"{name}: {tuple(saved[name].shape)} vs {tuple(own[name].shape)}"
        for name in own
        if name in saved and saved[name].shape != own[name].shape
    ]
    if problems:
        raise ValueError(f"--init_from {folder} is not a pretraining folder of these sizes: {problems[:3]}")
    model.load_state_dict(saved)


def masked_token_accuracy(model, dataset, collator, batch_size: int = 256) -> float:
    """Share of the masked tokens of ``dataset`` predicted exactly (one fixed masking, seeded by the caller)."""
    model.eval()
    right = total = 0
    with torch.no_grad():
        for start in range(0, len(dataset), batch_size):
            batch = collator([dataset[i] for i in range(start, min(start + batch_size, len(dataset)))])
            batch = {key: value.to(model.device) for key, value in batch.items()}
            logits = model(**batch).logits
            labels = batch["labels"][batch["labels"] != -100]
            right += int((logits.argmax(-1) == labels).sum())
            total += labels.numel()
    return right / max(total, 1)


def card_text(model_args, data_args: TextFileArguments, results: dict, settings: dict) -> CardText:
    """What the model card says of this run (hf_transformer.hub.model_card, the card it gets on the Hub too): the
    texts it trained on and was scored on, counted, where it started and its tokenizer came from, and ``settings``
    (hf_transformer.training.training_settings); the model's own settings the card reads from the folder."""
    init_from = model_args.init_from
    start = f"continued from {init_from} (base model)" if init_from else "from scratch"
    data = data_args.dataset_name or Path(data_args.train_file).name
    tokenizer = model_args.tokenizer or init_from
    tokenizer = f"the tokenizer of {tokenizer}" if tokenizer else "a tokenizer trained on those texts"
    return CardText(
        title="Transformer encoder pretrained with masked tokens" + (f" on {data}" if data_args.dataset_name else ""),
        training=f"Masked-token pretraining ({start}) on {results['train_samples']:,} training texts of {data} with "
        f"{tokenizer}; no label is read. {results['mlm_probability']:.0%} of the tokens of each text are chosen: 80% "
        "of them become [MASK], 10% a random token, 10% stay. The encoder (`model.encoder.*`) starts "
        "`scripts/train_classifier.py --init_from`.",
        language=data_args.language,
        tags=["masked-lm", *([data_args.dataset_name] if data_args.dataset_name else [])],
        datasets=[data_args.dataset_name] if data_args.dataset_name else [],
        metric_columns={"loss": "masked-token loss", "masked_accuracy": "masked-token accuracy"},
        result_rows={"eval": f"validation ({results['eval_samples']:,} texts)"},
        settings=settings | {"mlm_probability": results["mlm_probability"]},
        base_model=init_from,
    )


def load_texts_and_tokenizer(model_args, data_args: TextFileArguments, training_args):
    """The training and validation texts, tokenized (rows of one token or none left out), and the tokenizer."""
    # A given tokenizer loads, and is checked, before the rows are read: a wrong one fails at once.
    tokenizer = given_tokenizer(training_args, model_args.tokenizer or model_args.init_from)
    if tokenizer is not None and tokenizer.mask_token_id is None:
        raise ValueError("the tokenizer has no mask token ([MASK]); train one with tokenizer.train_tokenizer")
    splits = data_args.splits(training_args.seed, labels=False)
    splits = {name: splits[name] for name in ("train", "validation")}  # a test file is not read
    logger.info("texts: %s (labels and test rows are not read)", {k: len(v) for k, v in splits.items()})

    def train_new_tokenizer():
        return train_encoder_tokenizer(model_args, splits["train"]["text"])

    if tokenizer is None:
        tokenizer = one_tokenizer(training_args, train_new_tokenizer)
    tokenizer = cap_model_max_length(tokenizer, model_args.max_length)
    tokenized = {
        name: tokenize_classification(part, tokenizer, max_length=model_args.max_length)
        for name, part in splits.items()
    }
    return tokenizer, {name: without_short_rows(part) for name, part in tokenized.items()}


def without_short_rows(part):
    """The rows of more than one token (nothing to mask in the others). Where some are dropped, the kept rows are
    written out as a table of their own, so that batches are read without an index mapping; the lengths are read
    from Arrow, and a split with nothing to drop is returned as it is."""
    kept = [row for row, length in enumerate(sequence_lengths(part, ("input_ids",))) if length > 1]
    return part if len(kept) == len(part) else part.select(kept).flatten_indices()


def build_model(model_args, tokenizer, training_args) -> TransformerForMaskedLM:
    model = TransformerForMaskedLM(encoder_config(model_args, tokenizer))
    if model_args.init_from and not training_args.resume_from_checkpoint:
        continue_from(model, model_args.init_from)
        logger.info("pretraining continues from %s", model_args.init_from)
    logger.info("model: %s parameters", f"{model.num_parameters():,}")
    return model


def evaluate(trainer, model, tokenized, tokenizer, pretrain_args, seed: int) -> dict:
    """Masked-token loss, accuracy and perplexity on the validation texts, each under one fixed masking."""
    set_seed(seed)
    results = trainer.evaluate()
    set_seed(seed)
    collator = masked_token_collator(tokenizer, mlm_probability=pretrain_args.mlm_probability)
    return results | dict(
        eval_masked_accuracy=masked_token_accuracy(model, tokenized["validation"], collator),
        eval_perplexity=math.exp(min(results["eval_loss"], 50.0)),
    )


def main(argv: list[str] | None = None) -> dict:
    parser = HfArgumentParser((EncoderArguments, TextFileArguments, PretrainingArguments, TrainingArguments))
    model_args, data_args, pretrain_args, training_args = parse_arguments(parser, argv)
    check_new_run(training_args)
    model_args.check_folders()
    set_up_training_process(training_args)
    training_args.prediction_loss_only = True  # logits of masked positions only: nothing to gather
    started = time.time()
    set_seed(training_args.seed)

    tokenizer, tokenized = load_texts_and_tokenizer(model_args, data_args, training_args)
    model = build_model(model_args, tokenizer, training_args)
    trainer = LengthGroupedTrainer(
        model=model,
        args=training_args,
        train_dataset=tokenized["train"],
        eval_dataset=tokenized["validation"],
        data_collator=masked_token_collator(tokenizer, mlm_probability=pretrain_args.mlm_probability),
        processing_class=tokenizer,
    )
    train_output = trainer.train(resume_from_checkpoint=training_args.resume_from_checkpoint)
    logger.info(process_report(trainer, tokenizer))
    score_in_float32(trainer)  # the held-out figures are the saved folder's

    results: dict = {"task": "masked_lm_pretraining", "dataset": data_args.dataset_name}
    results |= {"init_from": model_args.init_from} | train_metrics(train_output)
    results |= evaluate(trainer, model, tokenized, tokenizer, pretrain_args, training_args.seed)
    results.update(
        mlm_probability=pretrain_args.mlm_probability,
        train_samples=len(tokenized["train"]),
        eval_samples=len(tokenized["validation"]),
        world_size=training_args.world_size,
        parameters=model.num_parameters(),
        encoder_parameters=model.model.num_parameters(),
        wall_seconds=round(time.time() - started, 1),
        command=" ".join([Path(__file__).name, *(argv if argv is not None else sys.argv[1:])]),
    )
    save_run(trainer, results, card_text(model_args, data_args, results, training_settings(trainer)))
    logger.info(
        "validation masked-token loss %.4f, accuracy %.4f; folder %s",
        results["eval_loss"],
        results["eval_masked_accuracy"],
        training_args.output_dir,
    )
    return results


if __name__ == "__main__":
    restart_waiting_passively_when_busy()  # before any work: torch's OpenMP threads sleep on a busy machine
    run_command(main)
    end_process_group()
