"""Multi30k translation (En->De or De->En) with Seq2SeqTrainer: shared tokenizer -> datasets ->
TransformerForConditionalGeneration -> sacreBLEU on test2016 with beam search and greedy decoding.

    python -m recipes.multi30k.train --output_dir runs/m30k-en-de --data_dir ../shared/data \
        --source_lang en --target_lang de --num_train_epochs 20 --per_device_train_batch_size 128 \
        --learning_rate 1e-3 --warmup_steps 1000

Every `Seq2SeqTrainingArguments` option works (arguments go through `HfArgumentParser`). The model, its tokenizer
and the training defaults are the library's (hf_transformer.translation_training): a plain run follows the paper's
recipe (section 5.3 - 5.4), `--adam_beta1 0.9 --adam_beta2 0.98 --adam_epsilon 1e-9 --lr_scheduler_type
inverse_sqrt --warmup_steps 1000` with `--label_smoothing 0.1` on the model; `--learning_rate` is the peak rate,
reached at the end of warm-up and decaying as 1/sqrt(step) after it (the paper's d_model^-0.5 * warmup^-0.5 is
that peak). Validation BLEU is computed each epoch with greedy decoding (`--generation_num_beams`), and the final
model is scored once on validation and test2016 with beam search (`--num_beams`, default 4) and once more greedily.
Besides, this recipe trains with BPE-dropout (`--subword_dropout`), R-Drop (`--rdrop_alpha`), bidirectional epochs
(`--bidirectional_epochs`) and a lowercasing tokenizer (`--lowercase`) when asked.

The tokenizer is trained on both sides of the training text (or loaded with `--tokenizer`) and the model shares
one token table between encoder, decoder and output projection. BLEU is scored two ways (recipes.multi30k.scoring):
`bleu`, sacreBLEU's default (detokenized, cased, 13a tokenization) against the raw reference lines, and
`bleu_lc_tok`, BLEU on lowercased Moses-tokenised text against the official `multi30k/tok/*.lc.norm.tok.*`
references, the convention of most Multi30k papers. With several `--length_penalty` values, each is tried with beam
search on the validation set and the best is used for test2016 and saved in the generation config.
The output folder holds the model (safetensors, config, generation config, tokenizer), `results.json`,
`log_history.json`, `test_predictions.txt` (beam search, in test-file order) and a model card (README.md, by
`hf_transformer.hub.model_card`).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field

from transformers import HfArgumentParser, set_seed

import hf_transformer  # noqa: F401  (registers the Auto classes)
from hf_transformer.commands import parse_arguments, run_command
from hf_transformer.data import (
    BidirectionalTranslation,
    SubwordSampledTranslation,
    seq2seq_collator,
    tokenize_translation,
)
from hf_transformer.metrics import require_scorers
from hf_transformer.openmp import restart_waiting_passively_when_busy
from hf_transformer.training import (
    BidirectionalEpochs,
    average_this_runs_checkpoints,
    end_process_group,
    given_tokenizer,
    one_tokenizer,
    process_report,
    set_up_training_process,
    train_metrics,
    training_settings,
)
from hf_transformer.translation_training import (
    TranslationModelArguments,
    TranslationTrainingArguments,
    check_translation_arguments,
    run_facts,
    save_translation_run,
    translation_card,
)
from recipes.multi30k.bleu import SCORERS
from recipes.multi30k.data import DataArguments
from recipes.multi30k.distill import MIXES, with_distilled_targets
from recipes.multi30k.rdrop import RDropSeq2SeqTrainer
from recipes.multi30k.scoring import headline, lowercases, score, split_metrics, task_fields

logger = logging.getLogger("recipes.multi30k.train")

PROGRAM = "recipes.multi30k.train"  # how results.json names the program (`python -m recipes.multi30k.train`)
LANGUAGE_NAMES = {"en": "English", "de": "German"}


@dataclass
class ModelArguments(TranslationModelArguments):
    lowercase: bool = field(
        default=False,
        metadata={
            "help": "a newly trained tokenizer lowercases every text, so the model reads and writes lowercase (the "
            "preprocessing of most Multi30k papers); beam settings are then chosen on lowercased tokenised "
            "validation BLEU"
        },
    )
    subword_dropout: float = field(
        default=0.0,
        metadata={
            "help": "BPE-dropout on the training pairs: each merge is skipped with this probability every time a "
            "pair is drawn (0: off; needs a BPE tokenizer, e.g. --tokenizer_type bpe)"
        },
    )


@dataclass
class RecipeTrainingArguments(TranslationTrainingArguments):
    # Besides hf_transformer.training.RESUMED_ARGUMENTS, what a resumed run must share with the run it resumes.
    resume_arguments = ("rdrop_alpha", "bidirectional_epochs")

    rdrop_alpha: float = field(
        default=0.0,
        metadata={
            "help": "R-Drop: each training batch runs twice with independent dropout and the loss adds this weight "
            "times the symmetric KL between the two predictions (0: off; on, a step costs about twice as much)"
        },
    )
    bidirectional_epochs: int = field(
        default=0,
        metadata={
            "help": "bidirectional training (BiT): in the first N epochs each pair is drawn as source -> target or, "
            "at random half the time, target -> source, so one model learns both directions of the shared "
            "vocabulary; the later epochs train source -> target only (0: off; an epoch costs what it did)"
        },
    )


@dataclass
class TrainDataArguments(DataArguments):
    distilled_targets: list[str] | None = field(
        default=None,
        metadata={
            "help": "folders recipes.multi30k.distill wrote (one, or several teachers'): train on the teachers' "
            "translations of the training sources (sequence-level knowledge distillation); validation and test keep "
            "their references"
        },
    )
    distillation_mix: str = field(
        default="replace",
        metadata={"help": "replace: the teacher's translations are the training targets; both: the original pairs "
                  "and the teacher's, every epoch"},
    )  # fmt: skip

    def splits(self):
        splits = super().splits()
        if self.distilled_targets:
            splits["train"] = with_distilled_targets(
                splits["train"], self.distilled_targets, self.source_lang, self.target_lang, self.distillation_mix
            )
        return splits


def argument_parser() -> HfArgumentParser:
    return HfArgumentParser((ModelArguments, TrainDataArguments, RecipeTrainingArguments))


def parse(argv: list[str] | None) -> tuple[ModelArguments, DataArguments, RecipeTrainingArguments]:
    """The arguments, checked before any work; the process set up for training."""
    model_args, data_args, training_args = parse_arguments(argument_parser(), argv)
    if data_args.distillation_mix not in MIXES:
        raise ValueError(f"--distillation_mix must be one of {', '.join(MIXES)}, got {data_args.distillation_mix!r}")
    set_up_training_process(training_args)
    check_translation_arguments(training_args)
    model_args.check_folders()
    require_scorers(SCORERS)  # before any training: the scores come at the first evaluation
    bidirectional = training_args.bidirectional_epochs
    if bidirectional < 0 or (
        bidirectional and training_args.max_steps <= 0 and bidirectional >= training_args.num_train_epochs
    ):
        raise ValueError(
            f"--bidirectional_epochs {bidirectional} must be 0 (off) or fewer than --num_train_epochs "
            f"({training_args.num_train_epochs}): the last epochs train the model's own direction"
        )
    return model_args, data_args, training_args


def given_lowercasing_tokenizer(model_args: ModelArguments, training_args):
    """The given tokenizer (or a resumed run's; hf_transformer.training.given_tokenizer), loaded and checked before
    the pairs are read; None for a run that trains its own."""
    tokenizer = given_tokenizer(training_args, model_args.tokenizer)
    if tokenizer is not None:
        check_lowercasing(tokenizer, model_args)
    return tokenizer


def load_tokenizer(model_args: ModelArguments, data_args: DataArguments, training_args, splits):
    """One tokenizer for every process (hf_transformer.training.one_tokenizer), trained on both sides of the
    training pairs."""

    def train_new_tokenizer():
        pairs = splits["train"]["translation"]
        source, target = data_args.source_lang, data_args.target_lang
        return model_args.new_tokenizer(pairs, source, target, lowercase=model_args.lowercase)

    return check_lowercasing(one_tokenizer(training_args, train_new_tokenizer), model_args)


def check_lowercasing(tokenizer, model_args: ModelArguments):
    """``tokenizer``, refused where --lowercase asks for one that lowercases and it keeps case."""
    if model_args.lowercase and not lowercases(tokenizer):
        given = model_args.tokenizer or "the run's own"
        raise ValueError(
            f"--lowercase asks for a tokenizer that lowercases, but the one given ({given}) keeps case: train a new "
            "one (leave out --tokenizer) or one with `hf-transformer-tokenizer train --lowercase`"
        )
    return tokenizer


def tokenize(splits, tokenizer, model_args: ModelArguments, data_args: DataArguments):
    return tokenize_translation(
        splits,
        tokenizer,
        source_lang=data_args.source_lang,
        target_lang=data_args.target_lang,
        max_source_length=model_args.max_source_length,
        max_target_length=model_args.max_target_length,
    )


def training_set(splits, tokenized, tokenizer, model_args: ModelArguments, data_args: DataArguments, training_args):
    """The training pairs as drawn: tokenized once, or anew at each draw with BPE-dropout; in both directions for
    the first --bidirectional_epochs (with the callback that ends them). Returns (dataset, callbacks)."""
    source, target = data_args.source_lang, data_args.target_lang

    def pairs(source_lang: str, target_lang: str):
        """The training split in one direction."""
        if not model_args.subword_dropout and (source_lang, target_lang) == (source, target):
            return tokenized["train"]
        sides = dict(source_lang=source_lang, target_lang=target_lang)
        lengths = dict(max_source_length=model_args.max_source_length, max_target_length=model_args.max_target_length)
        if model_args.subword_dropout:
            return SubwordSampledTranslation(
                splits["train"], tokenizer, dropout=model_args.subword_dropout, **sides, **lengths
            )
        return tokenize_translation(splits["train"], tokenizer, **sides, **lengths)

    dataset, callbacks = pairs(source, target), []
    if model_args.subword_dropout:
        logger.info("training pairs re-tokenized at each draw with BPE-dropout %s", model_args.subword_dropout)
    if training_args.bidirectional_epochs:
        dataset = BidirectionalTranslation(dataset, pairs(target, source), seed=training_args.seed)
        callbacks.append(BidirectionalEpochs(dataset, training_args.bidirectional_epochs))
        logger.info("the first %d epochs train both directions", training_args.bidirectional_epochs)
    return dataset, callbacks


def build_trainer(model, tokenizer, train_dataset, callbacks, tokenized, compute_metrics, training_args):
    return RDropSeq2SeqTrainer(
        rdrop_alpha=training_args.rdrop_alpha,
        model=model,
        args=training_args,
        train_dataset=train_dataset,
        eval_dataset=tokenized["validation"],
        data_collator=seq2seq_collator(tokenizer, model),
        processing_class=tokenizer,
        compute_metrics=compute_metrics,
        callbacks=callbacks,
    )


def train(trainer, model, tokenizer, data_args: DataArguments, training_args, started: float) -> dict:
    """Trains (or resumes), then averages the last checkpoints where asked: the results so far."""
    train_output = trainer.train(resume_from_checkpoint=training_args.resume_from_checkpoint)
    logger.info(process_report(trainer, tokenizer))
    results = task_fields(data_args) | train_metrics(train_output)
    if getattr(data_args, "distilled_targets", None):
        results |= {"distilled_targets": data_args.distilled_targets, "distillation_mix": data_args.distillation_mix}
    averaged = average_this_runs_checkpoints(model, training_args, started)
    if averaged:
        results["averaged_checkpoints"] = averaged
    return results


def teacher_models(distilled_targets: list[str]) -> str:
    """The card's words for the teachers of ``--distilled_targets``."""
    count = len(distilled_targets)
    return "a teacher model" if count == 1 else f"{count} teacher models"


def card_text(model_args: ModelArguments, data_args: DataArguments, results: dict, training_args, settings: dict):
    """What the run says about itself in its model card (hf_transformer.hub.model_card); ``settings``:
    hf_transformer.training.training_settings, to which the recipe's regularisers are added where they are on."""
    source, target = data_args.source_lang, data_args.target_lang
    lowercase = "; its tokenizer lowercases every text, so the model reads and writes lowercase"
    recipe = {
        "subword_dropout": model_args.subword_dropout,
        "rdrop_alpha": training_args.rdrop_alpha,
        "bidirectional_epochs": training_args.bidirectional_epochs,
    }
    return translation_card(
        model_args,
        results,
        title=f"Transformer {LANGUAGE_NAMES[source]} -> {LANGUAGE_NAMES[target]} on Multi30k",
        data=f"Multi30k task 1 ({source} -> {target})"
        + (
            f", its targets translated by {teacher_models(results.get('distilled_targets'))} (sequence-level "
            "distillation)"
            if results.get("distilled_targets")
            else ""
        ),
        notes=lowercase if results.get("lowercase") else "",
        settings=settings | {name: value for name, value in recipe.items() if value},
        evaluation="BLEU is sacreBLEU (detokenized, cased, 13a) against the raw references; lc-tok BLEU is computed "
        "on lowercased Moses-tokenised text against the official `lc.norm.tok` references, as most Multi30k papers "
        "report it.",
        metric_names={"bleu": "BLEU", "bleu_lc_tok": "lc-tok BLEU", "chrf": "chrF"},
        result_rows={
            "eval": f"validation ({results.get('eval_samples', '?')} pairs)",
            "test": f"test2016 ({results.get('test_samples', '?')} pairs)",
        },
        language=[source, target],
        tags=["translation", "multi30k"],
        datasets=["multi30k"],
        example={"en": "A man is riding a bicycle.", "de": "Ein Mann fährt Fahrrad."}[source],
    )


def examples(splits, test_hypotheses: list[str], data_args: DataArguments) -> list[dict]:
    """The first test pairs with their translations, for results.json."""
    source, target = data_args.source_lang, data_args.target_lang
    return [
        {"source": pair[source], "reference": pair[target], "hypothesis": hypothesis}
        for pair, hypothesis in zip(splits["test"]["translation"][:5], test_hypotheses)
    ]


def main(argv: list[str] | None = None) -> dict:
    model_args, data_args, training_args = parse(argv)
    started = time.time()
    set_seed(training_args.seed)
    tokenizer = given_lowercasing_tokenizer(model_args, training_args)  # before the pairs: a wrong one fails at once
    splits = data_args.splits()
    logger.info("pairs: %s", {split: len(rows) for split, rows in splits.items()})
    if tokenizer is None:
        tokenizer = load_tokenizer(model_args, data_args, training_args, splits)
    tokenized = tokenize(splits, tokenizer, model_args, data_args)
    metric, has_lc_tok_validation = split_metrics(splits, tokenized, tokenizer, data_args)
    model = model_args.new_model(tokenizer)
    logger.info("model: %s parameters", f"{model.num_parameters():,}")
    train_dataset, callbacks = training_set(splits, tokenized, tokenizer, model_args, data_args, training_args)
    trainer = build_trainer(model, tokenizer, train_dataset, callbacks, tokenized, metric("validation"), training_args)
    results = train(trainer, model, tokenizer, data_args, training_args, started) | {
        "train_samples": len(tokenized["train"])
    }
    # Beam search settings are chosen on the validation set only; test2016 is decoded once with the choice.
    beams = dict(num_beams=model_args.num_beams, length_penalties=model_args.length_penalty)
    lowercase = dict(lowercase=lowercases(tokenizer), has_lc_tok_validation=has_lc_tok_validation)
    scores, test_hypotheses = score(trainer, tokenized["test"], metric, **beams, **lowercase)
    results |= scores | headline(scores) | {"num_beams": model_args.num_beams}
    results |= {"eval_samples": len(tokenized["validation"]), "test_samples": len(tokenized["test"])}
    results |= run_facts(model, training_args, started, PROGRAM, argv)
    results["examples"] = examples(splits, test_hypotheses, data_args)
    card = card_text(model_args, data_args, results, training_args, training_settings(trainer))
    output_dir = save_translation_run(trainer, results, test_hypotheses, card)
    logger.info(
        "test2016 BLEU %.2f (beam %d), %.2f (greedy); model folder %s",
        results["test_bleu"],
        model_args.num_beams,
        results["test_greedy_bleu"],
        output_dir,
    )
    return results


if __name__ == "__main__":
    restart_waiting_passively_when_busy()  # before any work: torch's OpenMP threads sleep on a busy machine
    run_command(main)
    end_process_group()
