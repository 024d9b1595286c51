"""Multi30k translation (En->De or De->En) with Seq2SeqTrainer: shared tokenizer -> datasets ->
TransformerForConditionalGeneration -> sacreBLEU on test2016 with beam search and greedy decoding.

    python scripts/train_translation.py --output_dir runs/multi30k-en-de --data_dir ../shared/data \
        --source_lang en --target_lang de --num_train_epochs 20 --per_device_train_batch_size 128 \
        --learning_rate 1e-3 --warmup_steps 1000

Every `Seq2SeqTrainingArguments` option works (arguments go through `HfArgumentParser`). Some defaults
differ from transformers' so that a plain run follows the paper's recipe (section 5.3 - 5.4):
`--adam_beta1 0.9 --adam_beta2 0.98 --adam_epsilon 1e-9 --lr_scheduler_type inverse_sqrt
--warmup_steps 1000` with `--label_smoothing 0.1` on the model; `--learning_rate` is the peak rate,
reached at the end of warm-up and decaying as 1/sqrt(step) after it (the paper's d_model^-0.5 *
warmup^-0.5 is that peak). Validation BLEU is computed each epoch with greedy decoding
(`--generation_num_beams`), and the final model is scored once on validation and test2016 with beam
search (`--num_beams`, default 4) and once more greedily.

The tokenizer is trained on both sides of the training text (or loaded with `--tokenizer`) and the
model shares one token table between encoder, decoder and output projection. BLEU is scored two ways
(hf_transformer.metrics): `bleu`, sacreBLEU's default (detokenized, cased, 13a tokenization) against the
raw reference lines, and `bleu_lc_tok`, BLEU on lowercased Moses-tokenised text against the official
`multi30k/tok/*.lc.norm.tok.*` references, the convention of most Multi30k papers. With several
`--length_penalty` values, each is tried with beam search on the validation set and the best is used for
test2016 and saved in the generation config.
The output folder holds the model (safetensors, config, generation config, tokenizer),
`results.json`, `log_history.json`, `test_predictions.txt` (beam search, in test-file order) and a
model card (README.md, by `hf_transformer.hub.model_card`).
"""

from __future__ import annotations

import json
import logging
import sys
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
from transformers import HfArgumentParser, Seq2SeqTrainer, Seq2SeqTrainingArguments, set_seed

import hf_transformer  # noqa: F401  (registers the Auto classes)
from hf_transformer import TransformerConfig, TransformerForConditionalGeneration
from hf_transformer.data import (
    IGNORE_INDEX,
    BidirectionalTranslation,
    SubwordSampledTranslation,
    first_rows,
    load_multi30k,
    load_multi30k_tok_references,
    seq2seq_collator,
    tokenize_translation,
)
from hf_transformer.hub import model_card
from hf_transformer.metrics import bleu, bleu_lc_tok, chrf, require_scorers
from hf_transformer.rdrop import RDropSeq2SeqTrainer
from hf_transformer.training import (
    AVERAGE_CHECKPOINTS_HELP,
    BidirectionalEpochs,
    SplitLimits,
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

logger = logging.getLogger("train_translation")

LANGUAGE_NAMES = {"en": "English", "de": "German"}


@dataclass
class ModelArguments:
    tokenizer: str | None = field(default=None, metadata={"help": "a saved tokenizer folder; else one is trained"})
    vocab_size: int = field(default=8000, metadata={"help": "size of a newly trained shared vocabulary"})
    tokenizer_type: str = field(default="unigram", metadata={"help": "unigram or bpe (a newly trained tokenizer)"})
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
    max_source_length: int = field(default=128, metadata={"help": "sources are truncated to this many tokens"})
    max_target_length: int = field(
        default=128, metadata={"help": "targets are truncated to this many tokens; also the longest generation"}
    )
    d_model: int = 256
    num_layers: int = 3
    num_heads: int = 4
    intermediate_size: int = 1024
    dropout: float = 0.1
    attention_dropout: float | None = field(default=None, metadata={"help": "defaults to --dropout"})
    activation_dropout: float = 0.0
    activation_function: str = field(default="relu", metadata={"help": "relu (paper) or gelu"})
    layer_norm_position: str = field(default="post", metadata={"help": "post (paper) or pre"})
    position_embedding_type: str = field(default="sinusoidal", metadata={"help": "sinusoidal (paper) or learned"})
    scale_embedding: bool = field(default=True, metadata={"help": "token embeddings times sqrt(d_model), as the paper"})
    share_embeddings: bool = field(default=True, metadata={"help": "one token table for encoder and decoder"})
    tie_word_embeddings: bool = field(default=True, metadata={"help": "output projection tied to the token table"})
    label_smoothing: float = field(default=0.1, metadata={"help": "label smoothing of the training loss (paper 0.1)"})
    init_method: str = field(
        default="normal",
        metadata={
            "help": "normal (projections from N(0, 0.02), as BART) or xavier_uniform (the layers' projections "
            "Glorot-uniform, as tensor2tensor and fairseq)"
        },
    )
    num_beams: int = field(
        default=4, metadata={"help": "beam size of the final scoring; saved as the model's generation default"}
    )
    length_penalty: list[float] = field(
        default_factory=lambda: [1.0],
        metadata={
            "help": "beam search length penalty of the final scoring (scores divided by length**penalty); with "
            "several values each is tried on the validation set and the best validation BLEU is used for test "
            "and saved as the model's default"
        },
    )


@dataclass
class DataArguments(SplitLimits):
    data_dir: str | None = field(
        default=None, metadata={"help": "folder holding multi30k/ (else $HF_TRANSFORMER_DATA, else ./data)"}
    )
    source_lang: str = field(default="en", metadata={"help": "en or de"})
    target_lang: str = field(default="de", metadata={"help": "de or en"})

    def splits(self):
        """Multi30k's train, validation and test2016 pairs of this direction, each cut to its --max_*_samples."""
        pairs = load_multi30k(self.data_dir, source_lang=self.source_lang, target_lang=self.target_lang)
        return first_rows(pairs, self.split_limits())

    def evaluation_splits(self):
        """Validation and test2016 only, for the scripts that score a trained model."""
        splits = self.splits()
        splits.pop("train", None)
        return splits


@dataclass
class TranslationTrainingArguments(Seq2SeqTrainingArguments):
    """Seq2SeqTrainingArguments with the paper's optimiser and schedule, and BLEU-ready evaluation, as defaults."""

    learning_rate: float = field(default=1e-3, metadata={"help": "peak learning rate, reached after warm-up"})
    adam_beta2: float = field(default=0.98, metadata={"help": "Adam beta2 (paper 0.98)"})
    adam_epsilon: float = field(default=1e-9, metadata={"help": "Adam epsilon (paper 1e-9)"})
    lr_scheduler_type: str = field(
        default="inverse_sqrt", metadata={"help": "linear warm-up, then 1/sqrt(step) decay (paper)"}
    )
    warmup_steps: float = field(default=1000, metadata={"help": "warm-up steps (paper 4000 on WMT)"})
    predict_with_generate: bool = field(default=True, metadata={"help": "evaluate BLEU on generated text"})
    generation_num_beams: int | None = field(
        default=1, metadata={"help": "beam size of the per-epoch validation (1: greedy, cheap)"}
    )
    eval_strategy: str = field(default="epoch", metadata={"help": "validation BLEU each epoch"})
    save_strategy: str = field(default="epoch", metadata={"help": "checkpoint each epoch"})
    save_total_limit: int | None = field(default=2, metadata={"help": "checkpoints kept"})
    logging_steps: float = field(default=50, metadata={"help": "log the training loss every this many steps"})
    average_checkpoints: int = field(default=1, metadata={"help": AVERAGE_CHECKPOINTS_HELP})
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


# --------------------------------------------------------------------------------------------------
# Scoring


class ReferenceIndex:
    """Finds the raw reference line of each prediction row from its `label_ids`.

    `Trainer.predict` may return rows in another order than the dataset's (the evaluation sampler
    groups by length when `train_sampling_strategy="group_by_length"`), so the rows are matched by their
    token ids, never by position. Rows with identical labels take the dataset's rows in turn; a row beyond
    them is a repeat: a multi-process evaluation pads the last batches with rows already given, so that every
    process decodes as many, and each dataset row must be scored once.
    """

    def __init__(self, label_rows: Sequence[Sequence[int]], references: Sequence[str]):
        if len(label_rows) != len(references):
            raise ValueError(f"{len(label_rows)} label rows but {len(references)} references")
        self.references = list(references)
        self._rows: dict[tuple[int, ...], list[int]] = defaultdict(list)
        for index, row in enumerate(label_rows):
            self._rows[tuple(int(t) for t in row)].append(index)

    def positions(self, label_ids: np.ndarray, pad_token_id: int) -> list[int | None]:
        """The dataset row of each prediction row, None for a repeat; an error when a row is not in the dataset."""
        taken: dict[tuple[int, ...], int] = defaultdict(int)
        positions = []
        for row in np.asarray(label_ids):
            key = tuple(int(t) for t in row if t != IGNORE_INDEX and t != pad_token_id)
            candidates = self._rows.get(key)
            if not candidates:
                raise ValueError(f"a prediction row's labels {list(key)[:12]}... match no reference of this split")
            positions.append(candidates[taken[key]] if taken[key] < len(candidates) else None)
            taken[key] += 1
        return positions


def lc_tok_references(splits, data_args: DataArguments) -> dict[str, list[str]]:
    """The official lowercased Moses-tokenised references of validation and test, where they apply.

    They exist for the full Multi30k splits only: with rows limited (`--max_eval_samples`, ...) the first
    rows are taken from them too; a data folder without `multi30k/tok/` scores cased BLEU alone, with a warning.
    """
    found = {}
    for split in ("validation", "test"):
        try:
            lines = load_multi30k_tok_references(split, data_args.target_lang, data_args.data_dir)
        except FileNotFoundError as error:
            logger.warning("no lowercased tokenised references, bleu_lc_tok is not computed: %s", error)
            return {}
        found[split] = lines[: len(splits[split])]
    return found


def lowercases(tokenizer) -> bool:
    """Whether the tokenizer lowercases what it encodes (`train_tokenizer(..., lowercase=True)`)."""
    normalizer = getattr(getattr(tokenizer, "backend_tokenizer", None), "normalizer", None)
    return normalizer is not None and normalizer.normalize_str("AÄ") == "aä"


def decode_generated(tokenizer, token_ids: np.ndarray) -> list[str]:
    """Generated ids (padded with -100 across batches by the Trainer) as detokenized text."""
    token_ids = np.where(np.asarray(token_ids) == IGNORE_INDEX, tokenizer.pad_token_id, token_ids)
    return [text.strip() for text in tokenizer.batch_decode(token_ids, skip_special_tokens=True)]


def generated_lengths(token_ids: np.ndarray, pad_token_id: int, eos_token_id: int | None) -> np.ndarray:
    """Tokens per generated row up to its first end-of-sequence token (included).

    Beam search fills a finished hypothesis with end-of-sequence tokens up to the batch's longest, and the
    Trainer pads across batches with -100: neither is part of the translation.
    """
    token_ids = np.asarray(token_ids)
    if token_ids.ndim != 2 or token_ids.shape[1] == 0:
        return np.zeros(len(token_ids), dtype=np.int64)
    real = (token_ids != IGNORE_INDEX) & (token_ids != pad_token_id)
    if eos_token_id is not None:
        is_eos = token_ids == eos_token_id
        after_first_eos = (np.cumsum(is_eos, axis=1) - is_eos) > 0
        real &= ~after_first_eos
    return real.sum(-1)


class BleuMetric:
    """`compute_metrics` for Seq2SeqTrainer: sacreBLEU and chrF of generated text against raw references.

    With a `ReferenceIndex` the references are the split's own lines (matched through `label_ids`);
    without one they are the decoded labels (tokenizer-normalised text, for data without raw lines).
    `tokenized_references` (the split's official lowercased Moses-tokenised lines, in the split's order, in
    language `target_lang`) add `bleu_lc_tok`, the literature's Multi30k metric (hf_transformer.metrics).
    """

    def __init__(
        self,
        tokenizer,
        references: ReferenceIndex | None = None,
        tokenized_references: Sequence[str] | None = None,
        target_lang: str | None = None,
    ):
        if tokenized_references is not None and (references is None or target_lang is None):
            raise ValueError("tokenized_references need the split's ReferenceIndex and the target_lang")
        if tokenized_references is not None and len(tokenized_references) != len(references.references):
            raise ValueError(
                f"{len(tokenized_references)} tokenised references for {len(references.references)} raw ones"
            )
        self.tokenizer = tokenizer
        self.index = references
        self.tokenized_references = tokenized_references
        self.target_lang = target_lang
        self.last_hypotheses: list[str] = []
        self.last_positions: list[int] = []

    def __call__(self, prediction) -> dict[str, float]:
        hypotheses = decode_generated(self.tokenizer, prediction.predictions)
        lengths = generated_lengths(prediction.predictions, self.tokenizer.pad_token_id, self.tokenizer.eos_token_id)
        if self.index is not None:
            positions = self.index.positions(prediction.label_ids, self.tokenizer.pad_token_id)
            scored = [row for row, position in enumerate(positions) if position is not None]  # repeats left out
            hypotheses, lengths = [hypotheses[row] for row in scored], lengths[scored]
            positions = [positions[row] for row in scored]
            references = [self.index.references[i] for i in positions]
        else:
            positions = list(range(len(hypotheses)))
            references = decode_generated(self.tokenizer, prediction.label_ids)
        self.last_hypotheses, self.last_positions = hypotheses, positions
        scores = {"bleu": bleu(hypotheses, references), "chrf": chrf(hypotheses, references)}
        if self.tokenized_references is not None:
            tokenized = [self.tokenized_references[i] for i in positions]
            scores["bleu_lc_tok"] = bleu_lc_tok(hypotheses, tokenized, self.target_lang)
        scores["gen_len"] = float(np.mean(lengths)) if len(lengths) else 0.0
        return scores

    def in_dataset_order(self) -> list[str]:
        """The hypotheses of the last call, reordered to the split's row order."""
        ordered = [""] * len(self.last_positions)
        for hypothesis, position in zip(self.last_hypotheses, self.last_positions):
            ordered[position] = hypothesis
        return ordered


# --------------------------------------------------------------------------------------------------
# Model card


def card(model_args: ModelArguments, data_args: DataArguments, results: dict, model, output_dir: Path) -> str:
    """The folder's README.md (hf_transformer.hub.model_card, the card it gets on the Hub too)."""
    source, target = data_args.source_lang, data_args.target_lang
    tables = "one token table for encoder, decoder and output projection"
    if not (model_args.share_embeddings and model_args.tie_word_embeddings):
        tables = "separate token tables" if not model_args.share_embeddings else "an untied output projection"
    folders = results.get("averaged_checkpoints")
    averaged = (
        f" The weights are the mean of the last {len(folders)} checkpoints ({', '.join(folders)})." if folders else ""
    )
    selection = results.get("selected_on", "eval_bleu")
    tried = results.get(f"{selection}_by_length_penalty")
    metric_name = "lc-tok BLEU" if selection == "eval_bleu_lc_tok" else "BLEU"
    chosen = f" The length penalty was chosen by validation {metric_name} among {', '.join(tried)}." if tried else ""
    if results.get("lowercase"):
        tables += "; its tokenizer lowercases every text, so the model reads and writes lowercase"
    beams = model_args.num_beams
    return model_card(
        str(output_dir),
        model.config,
        num_parameters=model.num_parameters(),
        results=results,
        language=[source, target],
        tags=["translation", "multi30k"],
        datasets=["multi30k"],
        metrics=["bleu", "bleu_lc_tok", "chrf"],
        pipeline_tag="translation",
        example={"en": "A man is riding a bicycle.", "de": "Ein Mann fährt Fahrrad."}[source],
        title=f"Transformer {LANGUAGE_NAMES[source]} -> {LANGUAGE_NAMES[target]} on Multi30k",
        training=f"Trained from scratch on the Multi30k task 1 training pairs ({source} -> {target}), with one "
        f"vocabulary for both languages and {tables}.{averaged}",
        evaluation="BLEU is sacreBLEU (detokenized, cased, 13a) against the raw references; lc-tok BLEU is computed "
        "on lowercased Moses-tokenised text against the official `lc.norm.tok` references, as most Multi30k papers "
        f"report it.{chosen}",
        metric_columns={
            "bleu": f"BLEU (beam {beams})",
            "greedy_bleu": "BLEU (greedy)",
            "bleu_lc_tok": "lc-tok BLEU (beam)",
            "chrf": "chrF (beam)",
        },
        result_rows={
            "eval": f"validation ({results.get('eval_samples', '?')} pairs)",
            "test": f"test2016 ({results.get('test_samples', '?')} pairs)",
        },
        digits=2,
        generation={"num_beams": beams, "length_penalty": results.get("length_penalty", 1.0)},
        settings=asdict(model_args),
    )


# --------------------------------------------------------------------------------------------------


def split_metrics(splits, tokenized, tokenizer, data_args: DataArguments) -> tuple[Callable[[str], BleuMetric], bool]:
    """``metric(split)``, a fresh :class:`BleuMetric` for ``validation`` or ``test`` against the split's raw
    references (matched through the labels) and, where present, its lowercased tokenised ones; and whether
    validation has the latter."""
    target = data_args.target_lang
    references = {
        split: ReferenceIndex(tokenized[split]["labels"], [pair[target] for pair in splits[split]["translation"]])
        for split in ("validation", "test")
    }
    tokenized_references = lc_tok_references(splits, data_args)

    def metric(split: str) -> BleuMetric:
        return BleuMetric(tokenizer, references[split], tokenized_references.get(split), target)

    return metric, "validation" in tokenized_references


def select_and_score(
    trainer: Seq2SeqTrainer,
    test_dataset,
    metric,
    *,
    num_beams: int,
    length_penalties: Sequence[float],
    lowercase: bool,
    has_lc_tok_validation: bool,
) -> tuple[dict, list[str]]:
    """Beam search's length penalty chosen on the validation set (the trainer's eval dataset), then test decoded
    once with it and once greedily; the scores and the beam search's test hypotheses in the test file's order.

    ``metric(split)`` gives a fresh :class:`BleuMetric` for ``validation`` or ``test``. A model that writes
    lowercase is chosen on the lowercased metric: its cased BLEU counts every capital as an error. The chosen
    penalty becomes the model's generation default.
    """
    selection = "bleu_lc_tok" if lowercase and has_lc_tok_validation else "bleu"
    penalties = list(dict.fromkeys(length_penalties))
    trainer.compute_metrics = metric("validation")
    by_penalty = {}
    for penalty in penalties:
        by_penalty[penalty] = trainer.evaluate(metric_key_prefix="eval", num_beams=num_beams, length_penalty=penalty)
        logger.info(
            "length penalty %s: validation %s %.2f", penalty, selection, by_penalty[penalty][f"eval_{selection}"]
        )
    length_penalty = max(penalties, key=lambda penalty: by_penalty[penalty][f"eval_{selection}"])
    results = dict(by_penalty[length_penalty])
    if len(penalties) > 1:
        results[f"eval_{selection}_by_length_penalty"] = {str(k): v[f"eval_{selection}"] for k, v in by_penalty.items()}
    results["length_penalty"] = length_penalty
    results["selected_on"] = f"eval_{selection}"
    results["lowercase"] = lowercase
    trainer.model.generation_config.length_penalty = length_penalty

    test_metric = metric("test")
    for prefix, beams in (("", num_beams), ("greedy_", 1)):
        if beams == 1:
            trainer.compute_metrics = metric("validation")
            results.update(trainer.evaluate(metric_key_prefix="eval_greedy", num_beams=1))
        trainer.compute_metrics = test_metric
        extra = {"length_penalty": length_penalty} if beams > 1 else {}
        test = trainer.predict(test_dataset, metric_key_prefix=f"test_{prefix}".rstrip("_"), num_beams=beams, **extra)
        results.update(test.metrics)
        if beams == num_beams:
            test_hypotheses = test_metric.in_dataset_order()
    return results, test_hypotheses


def build_config(model_args: ModelArguments, tokenizer) -> TransformerConfig:
    return TransformerConfig(
        vocab_size=len(tokenizer),
        d_model=model_args.d_model,
        n_layer=model_args.num_layers,
        num_attention_heads=model_args.num_heads,
        intermediate_size=model_args.intermediate_size,
        max_position_embeddings=model_args.max_source_length,
        decoder_max_position_embeddings=model_args.max_target_length,
        dropout=model_args.dropout,
        attention_dropout=model_args.attention_dropout,
        activation_dropout=model_args.activation_dropout,
        activation_function=model_args.activation_function,
        layer_norm_position=model_args.layer_norm_position,
        position_embedding_type=model_args.position_embedding_type,
        scale_embedding=model_args.scale_embedding,
        share_embeddings=model_args.share_embeddings,
        tie_word_embeddings=model_args.tie_word_embeddings,
        label_smoothing=model_args.label_smoothing,
        init_method=model_args.init_method,
        layer_norm_epsilon=1e-6,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )


def main(argv: list[str] | None = None) -> dict:
    parser = HfArgumentParser((ModelArguments, DataArguments, TranslationTrainingArguments))
    model_args, data_args, training_args = parser.parse_args_into_dataclasses(args=argv)
    pin_memory_only_with_accelerator(training_args)
    keep_freed_memory()  # each step reuses the last one's memory instead of faulting it in anew
    logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s", level=logging.INFO)
    warn_of_emulated_bfloat16(training_args)
    if training_args.label_smoothing_factor:
        raise ValueError(
            "use --label_smoothing (the model's own loss), not --label_smoothing_factor: Trainer's smoothing keeps "
            "the labels from the model, so the model's --label_smoothing would be ignored and the loss computed "
            "from the whole (batch, length, vocabulary) logits"
        )
    if not training_args.predict_with_generate:
        raise ValueError("BLEU needs generated text: keep --predict_with_generate on")
    require_scorers()  # before any training: the scores come at the first evaluation
    check_checkpoint_averaging(training_args, training_args.average_checkpoints)
    bidirectional = training_args.bidirectional_epochs
    if bidirectional < 0 or (
        bidirectional and training_args.max_steps <= 0 and bidirectional >= training_args.num_train_epochs
    ):
        raise ValueError(
            f"--bidirectional_epochs {bidirectional} must be 0 (off) or fewer than --num_train_epochs "
            f"({training_args.num_train_epochs}): the last epochs train the model's own direction"
        )
    started = time.time()
    set_seed(training_args.seed)
    source, target = data_args.source_lang, data_args.target_lang

    splits = data_args.splits()
    logger.info("pairs: %s", {split: len(rows) for split, rows in splits.items()})

    def train_new_tokenizer():
        from hf_transformer.tokenization import train_tokenizer

        pairs = splits["train"]["translation"]
        return train_tokenizer(
            [pair[source] for pair in pairs] + [pair[target] for pair in pairs],
            vocab_size=model_args.vocab_size,
            model_type=model_args.tokenizer_type,
            model_max_length=max(model_args.max_source_length, model_args.max_target_length),
            lowercase=model_args.lowercase,
            show_progress=False,
        )

    # One tokenizer for every process and for a resumed run (hf_transformer.training.one_tokenizer).
    tokenizer = one_tokenizer(training_args, train_new_tokenizer, model_args.tokenizer)
    lowercase = lowercases(tokenizer)
    if model_args.lowercase and not lowercase:
        given = model_args.tokenizer or "the run's own"
        raise ValueError(
            f"--lowercase asks for a tokenizer that lowercases, but the one given ({given}) keeps case: train a new "
            "one (leave out --tokenizer) or one with `hf-transformer-tokenizer train --lowercase`"
        )
    tokenized = tokenize_translation(
        splits,
        tokenizer,
        source_lang=source,
        target_lang=target,
        max_source_length=model_args.max_source_length,
        max_target_length=model_args.max_target_length,
    )
    metric, has_lc_tok_validation = split_metrics(splits, tokenized, tokenizer, data_args)

    config = build_config(model_args, tokenizer)
    model = TransformerForConditionalGeneration(config)
    # The decoder's position table holds max_target_length tokens; the start token takes no output slot.
    model.generation_config.max_length = model_args.max_target_length + 1
    model.generation_config.num_beams = model_args.num_beams
    logger.info("model: %s parameters", f"{model.num_parameters():,}")

    def training_pairs(source_lang: str, target_lang: str):
        """The training split in one direction: tokenized once, or anew at each draw with BPE-dropout."""
        if not model_args.subword_dropout and (source_lang, target_lang) == (source, target):
            return tokenized["train"]
        sides = dict(source_lang=source_lang, target_lang=target_lang)
        lengths = dict(max_source_length=model_args.max_source_length, max_target_length=model_args.max_target_length)
        if model_args.subword_dropout:
            return SubwordSampledTranslation(
                splits["train"], tokenizer, dropout=model_args.subword_dropout, **sides, **lengths
            )
        return tokenize_translation(splits["train"], tokenizer, **sides, **lengths)

    train_dataset = training_pairs(source, target)
    if model_args.subword_dropout:
        logger.info("training pairs re-tokenized at each draw with BPE-dropout %s", model_args.subword_dropout)
    callbacks = []
    if training_args.bidirectional_epochs:
        train_dataset = BidirectionalTranslation(train_dataset, training_pairs(target, source))
        callbacks.append(BidirectionalEpochs(train_dataset, training_args.bidirectional_epochs))
        logger.info("the first %d epochs train both directions", training_args.bidirectional_epochs)

    trainer = RDropSeq2SeqTrainer(
        rdrop_alpha=training_args.rdrop_alpha,
        model=model,
        args=training_args,
        train_dataset=train_dataset,
        eval_dataset=tokenized["validation"],
        data_collator=seq2seq_collator(tokenizer, model),
        processing_class=tokenizer,
        compute_metrics=metric("validation"),
        callbacks=callbacks,
    )
    train_output = trainer.train(resume_from_checkpoint=training_args.resume_from_checkpoint)
    logger.info(process_report(trainer, tokenizer))
    results: dict = {
        "task": f"translation_{source}_to_{target}",
        "dataset": "multi30k",
        "split": "test2016",
        "source_lang": source,
        "target_lang": target,
    }
    results.update(train_metrics(train_output))
    averaged = average_last_checkpoints(model, training_args.output_dir, training_args.average_checkpoints)
    if averaged:
        results["averaged_checkpoints"] = averaged

    # Beam search settings are chosen on the validation set only; test2016 is decoded once with the choice.
    scores, test_hypotheses = select_and_score(
        trainer,
        tokenized["test"],
        metric,
        num_beams=model_args.num_beams,
        length_penalties=model_args.length_penalty,
        lowercase=lowercase,
        has_lc_tok_validation=has_lc_tok_validation,
    )
    results.update(scores)
    results.update(
        bleu=results["test_bleu"],
        **({"bleu_lc_tok": results["test_bleu_lc_tok"]} if "test_bleu_lc_tok" in results else {}),
        num_beams=model_args.num_beams,
        eval_samples=len(tokenized["validation"]),
        test_samples=len(tokenized["test"]),
        world_size=training_args.world_size,
        parameters=model.num_parameters(),
        wall_seconds=round(time.time() - started, 1),
        command=" ".join([Path(__file__).name, *(argv if argv is not None else sys.argv[1:])]),
        examples=[
            {"source": pair[source], "reference": pair[target], "hypothesis": hypothesis}
            for pair, hypothesis in zip(splits["test"]["translation"][:5], test_hypotheses)
        ],
    )

    output_dir = Path(training_args.output_dir)
    # Every process calls save_model (it writes from process 0 only): under FSDP it first gathers the shards,
    # a collective call that would wait forever for processes that had already finished.
    trainer.save_model(str(output_dir))  # weights, config, generation config and tokenizer
    if trainer.is_world_process_zero():
        (output_dir / "results.json").write_text(json.dumps(results, indent=2, default=str, ensure_ascii=False))
        (output_dir / "log_history.json").write_text(json.dumps(trainer.state.log_history, indent=2))
        (output_dir / "test_predictions.txt").write_text("\n".join(test_hypotheses) + "\n", encoding="utf-8")
        (output_dir / "README.md").write_text(card(model_args, data_args, results, model, output_dir), encoding="utf-8")
        logger.info(
            "test2016 BLEU %.2f (beam %d), %.2f (greedy); model folder %s",
            results["test_bleu"],
            model_args.num_beams,
            results["test_greedy_bleu"],
            output_dir,
        )
    return results


if __name__ == "__main__":
    main()
    end_process_group()
