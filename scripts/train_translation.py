"""Translation on your own parallel files with Seq2SeqTrainer: shared tokenizer -> datasets ->
TransformerForConditionalGeneration -> sacreBLEU and chrF on validation and test with beam search.

    python scripts/train_translation.py --output_dir runs/my-en-de \
        --train_file data/train.en data/train.de --validation_file data/valid.en data/valid.de \
        --test_file data/test.en data/test.de --source_lang en --target_lang de --num_train_epochs 20

Each split is two line-aligned text files (one sentence per line, the source side's first) or one CSV, TSV, JSON or
JSONL file whose `--source_column` and `--target_column` (default `source`, `target`) hold the pairs; without
`--validation_file`, `--validation_size` (default 0.05) of the training pairs are held out:

    python scripts/train_translation.py --output_dir runs/my-model --train_file train.jsonl \
        --validation_file valid.jsonl --test_file test.jsonl --source_column en --target_column de

Every `Seq2SeqTrainingArguments` option works (arguments go through `HfArgumentParser`), with the paper's recipe as
defaults (hf_transformer.translation_training; section 5.3 - 5.4): Adam 0.9 / 0.98 / 1e-9, `--learning_rate` the
peak after `--warmup_steps 1000` of linear warm-up, then 1/sqrt(step) decay, label smoothing 0.1 on the model, one
token table for encoder, decoder and output projection. A tokenizer is trained on both sides of the training pairs
(or loaded with `--tokenizer`; `--vocab_size`, `--tokenizer_type unigram|bpe`). Validation BLEU is computed each
epoch with greedy decoding; after training, each `--length_penalty` is tried with beam search (`--num_beams`,
default 4) on validation, the best is used for the test set and saved in the generation config, and both splits
are scored once more greedily. BLEU and chrF are sacreBLEU's (detokenized, cased, 13a) against the raw references.
The output folder holds the model (safetensors, config, generation config, tokenizer), `results.json`,
`log_history.json`, `test_predictions.txt` (beam search, in test-file order; with `--test_file`) and a model card
(README.md, by `hf_transformer.hub.model_card`).
"""

from __future__ import annotations

import logging
import time

from transformers import HfArgumentParser, set_seed

from hf_transformer.commands import parse_arguments, run_command
from hf_transformer.data import seq2seq_collator, tokenize_translation
from hf_transformer.metrics import require_scorers, select_and_score, translation_metrics
from hf_transformer.openmp import restart_waiting_passively_when_busy
from hf_transformer.trainer import OrderKeepingSeq2SeqTrainer
from hf_transformer.training import (
    average_this_runs_checkpoints,
    end_process_group,
    given_tokenizer,
    one_tokenizer,
    process_report,
    score_in_float32,
    set_up_training_process,
    train_metrics,
    training_settings,
)
from hf_transformer.translation_training import (
    TranslationFileArguments,
    TranslationModelArguments,
    TranslationTrainingArguments,
    check_translation_arguments,
    run_facts,
    save_translation_run,
    translation_card,
)

logger = logging.getLogger("train_translation")


def parse(argv: list[str] | None):
    """The arguments, checked before any work; the process set up for training."""
    parser = HfArgumentParser((TranslationModelArguments, TranslationFileArguments, TranslationTrainingArguments))
    model_args, data_args, training_args = parse_arguments(parser, argv)
    set_up_training_process(training_args)
    check_translation_arguments(training_args)
    model_args.check_folders()
    require_scorers()  # before any training: the scores come at the first evaluation
    return model_args, data_args, training_args


def load_tokenizer(model_args: TranslationModelArguments, data_args: TranslationFileArguments, training_args, splits):
    """A tokenizer trained on both sides of the training pairs, the same in every process (a given one, or a resumed
    run's, is loaded before the pairs are read: hf_transformer.training.given_tokenizer)."""
    source, target = data_args.source_column, data_args.target_column

    def train_new_tokenizer():
        return model_args.new_tokenizer(splits["train"]["translation"], source, target)

    return one_tokenizer(training_args, train_new_tokenizer)


def build_trainer(model, tokenizer, tokenized, compute_metrics, training_args) -> OrderKeepingSeq2SeqTrainer:
    return OrderKeepingSeq2SeqTrainer(
        model=model,
        args=training_args,
        train_dataset=tokenized["train"],
        eval_dataset=tokenized["validation"],
        data_collator=seq2seq_collator(tokenizer, model),
        processing_class=tokenizer,
        compute_metrics=compute_metrics,
    )


def train(trainer, model, tokenizer, training_args, started: float) -> dict:
    """Trains (or resumes), then averages the last checkpoints where asked: the results so far. What is decoded after
    it is decoded in float32, as the saved folder decodes, whatever precision the training ran in."""
    train_output = trainer.train(resume_from_checkpoint=training_args.resume_from_checkpoint)
    logger.info(process_report(trainer, tokenizer))
    score_in_float32(trainer)
    results = train_metrics(train_output)
    averaged = average_this_runs_checkpoints(model, training_args, started)
    if averaged:
        results["averaged_checkpoints"] = averaged
    return results


def languages(data_args: TranslationFileArguments) -> tuple[str, str]:
    """The two sides' names: their language codes where given, else their columns."""
    return data_args.source_lang or data_args.source_column, data_args.target_lang or data_args.target_column


def card_text(
    model_args: TranslationModelArguments, data_args: TranslationFileArguments, results: dict, splits, settings: dict
):
    """What the run says about itself in its model card (hf_transformer.hub.model_card); ``settings``:
    hf_transformer.training.training_settings."""
    (source, target), name = languages(data_args), data_args.dataset_name
    example = splits["test" if "test" in splits else "validation"]["translation"][0][data_args.source_column]
    return translation_card(
        model_args,
        results,
        title=f"Transformer {source} -> {target}" + (f" on {name}" if name else ""),
        data=f"{', '.join(data_args.train_file)} ({source} -> {target})",
        settings=settings,
        evaluation="BLEU and chrF are sacreBLEU's (detokenized, cased, 13a) against the raw references.",
        language=[lang for lang in (data_args.source_lang, data_args.target_lang) if lang],
        tags=["translation"],
        datasets=[name] if name else [],
        example=example,
    )


def main(argv: list[str] | None = None) -> dict:
    model_args, data_args, training_args = parse(argv)
    started = time.time()
    set_seed(training_args.seed)
    source, target = data_args.source_column, data_args.target_column
    tokenizer = given_tokenizer(training_args, model_args.tokenizer)  # before the pairs: a wrong one fails at once
    splits = data_args.splits(training_args.seed)
    logger.info("pairs: %s", {split: len(rows) for split, rows in splits.items()})
    if tokenizer is None:
        tokenizer = load_tokenizer(model_args, data_args, training_args, splits)
    lengths = dict(max_source_length=model_args.max_source_length, max_target_length=model_args.max_target_length)
    tokenized = tokenize_translation(splits, tokenizer, source_lang=source, target_lang=target, **lengths)
    metric = translation_metrics(tokenizer, splits, tokenized, target)
    model = model_args.new_model(tokenizer)
    logger.info("model: %s parameters", f"{model.num_parameters():,}")
    trainer = build_trainer(model, tokenizer, tokenized, metric("validation"), training_args)
    results = {"task": "translation_{}_to_{}".format(*languages(data_args)), "dataset": data_args.dataset_name}
    results |= {"source_lang": data_args.source_lang, "target_lang": data_args.target_lang}
    results |= {"train_samples": len(tokenized["train"])} | train(trainer, model, tokenizer, training_args, started)
    # Beam search settings are chosen on the validation set only; the test set is decoded once with the choice.
    beams, penalties = model_args.num_beams, model_args.length_penalty
    scores, test_hypotheses = select_and_score(
        trainer, tokenized.get("test"), metric, num_beams=beams, length_penalties=penalties
    )
    results |= scores | {"num_beams": beams, "eval_samples": len(tokenized["validation"])}
    if test_hypotheses is not None:
        results |= {"bleu": scores["test_bleu"], "chrf": scores["test_chrf"], "test_samples": len(tokenized["test"])}
    results |= run_facts(model, training_args, started, "train_translation.py", argv)
    card = card_text(model_args, data_args, results, splits, training_settings(trainer))
    output_dir = save_translation_run(trainer, results, test_hypotheses, card)
    scored = "test" if test_hypotheses is not None else "eval"
    logger.info("%s BLEU %.2f (beam %d); model folder %s", scored, results[f"{scored}_bleu"], beams, output_dir)
    return results


if __name__ == "__main__":
    restart_waiting_passively_when_busy()  # before any work: torch's OpenMP threads sleep on a busy machine
    run_command(main)
    end_process_group()
