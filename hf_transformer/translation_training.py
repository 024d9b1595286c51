"""Training a translation model with Seq2SeqTrainer: the command-line arguments with the paper's defaults, the
model they describe, the user's parallel files, and the folder a run leaves.

``TranslationModelArguments`` (tokenizer, sizes, dropouts, beam search) and ``TranslationTrainingArguments``
(``Seq2SeqTrainingArguments`` whose defaults follow the paper's recipe, section 5.3 - 5.4: Adam 0.9 / 0.98 / 1e-9,
linear warm-up then 1/sqrt(step) decay, label smoothing 0.1 on the model) go through ``HfArgumentParser``;
``TranslationFileArguments`` reads local parallel files. ``hf_transformer.metrics`` scores the runs (BLEU in the
Trainer, the length penalty chosen on validation); ``save_translation_run`` writes the model folder with its
results, test output and model card. ``scripts/train_translation.py`` is these pieces in order.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from transformers import Seq2SeqTrainingArguments

from .configuration_transformer import TransformerConfig
from .training import (
    AVERAGE_CHECKPOINTS_HELP,
    SplitLimits,
    check_checkpoint_averaging,
    check_new_run,
    check_tokenizer_source,
    check_validation_size,
    save_run,
)

__all__ = [
    "TranslationModelArguments",
    "TranslationTrainingArguments",
    "TranslationFileArguments",
    "check_translation_arguments",
    "translation_card",
    "save_translation_run",
    "run_facts",
]


@dataclass
class TranslationModelArguments:
    """The tokenizer (one vocabulary for both sides), the model's sizes and beam search of the final scoring."""

    tokenizer: str | None = field(default=None, metadata={"help": "a saved tokenizer folder; else one is trained"})
    vocab_size: int = field(default=8000, metadata={"help": "size of a newly trained shared vocabulary"})
    tokenizer_type: str = field(default="unigram", metadata={"help": "unigram or bpe (a newly trained tokenizer)"})
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

    def __post_init__(self):
        # Refused before training: the final scoring, after it, would fail on it.
        if self.num_beams < 1:
            raise ValueError(f"--num_beams must be at least 1, got {self.num_beams}")
        # The sizes and layout as the config will check them (`d_model` a multiple of the heads, a layout's name),
        # over a stand-in vocabulary: refused as the command is parsed, not after the data is read.
        TransformerConfig(vocab_size=1000, **self.model_settings())

    def check_folders(self) -> None:
        """The tokenizer folder named holds a tokenizer: called by the scripts before any text is read (not as the
        arguments parse: a job's earlier step may write the folder)."""
        if self.tokenizer is not None:
            check_tokenizer_source(self.tokenizer)

    def new_tokenizer(self, pairs: Sequence[Mapping[str, str]], source: str, target: str, **options):
        """A tokenizer trained on both sides of the training ``pairs`` (every source, then every target), of
        ``--vocab_size`` and ``--tokenizer_type``; ``options`` go to ``train_tokenizer`` (``lowercase=True``)."""
        from .tokenization import train_tokenizer

        return train_tokenizer(
            [pair[source] for pair in pairs] + [pair[target] for pair in pairs],
            vocab_size=self.vocab_size,
            model_type=self.tokenizer_type,
            model_max_length=max(self.max_source_length, self.max_target_length),
            show_progress=False,
            **options,
        )

    def config(self, tokenizer) -> TransformerConfig:
        return TransformerConfig(
            vocab_size=len(tokenizer),
            **self.model_settings(),
            pad_token_id=tokenizer.pad_token_id,
            bos_token_id=tokenizer.bos_token_id,
            eos_token_id=tokenizer.eos_token_id,
        )

    def model_settings(self) -> dict:
        """The model's sizes and layout as `TransformerConfig` settings (its vocabulary comes from the tokenizer)."""
        return dict(
            d_model=self.d_model,
            n_layer=self.num_layers,
            num_attention_heads=self.num_heads,
            intermediate_size=self.intermediate_size,
            max_position_embeddings=self.max_source_length,
            decoder_max_position_embeddings=self.max_target_length,
            dropout=self.dropout,
            attention_dropout=self.attention_dropout,
            activation_dropout=self.activation_dropout,
            activation_function=self.activation_function,
            layer_norm_position=self.layer_norm_position,
            position_embedding_type=self.position_embedding_type,
            scale_embedding=self.scale_embedding,
            share_embeddings=self.share_embeddings,
            tie_word_embeddings=self.tie_word_embeddings,
            label_smoothing=self.label_smoothing,
            init_method=self.init_method,
            layer_norm_epsilon=1e-6,
        )

    def new_model(self, tokenizer):
        """A freshly initialised ``TransformerForConditionalGeneration`` whose generation defaults are the final
        scoring's beam size and a length that fits any target."""
        from .modeling_transformer import TransformerForConditionalGeneration

        model = TransformerForConditionalGeneration(self.config(tokenizer))
        # The decoder's position table holds max_target_length tokens; the start token takes no output slot.
        model.generation_config.max_length = self.max_target_length + 1
        model.generation_config.num_beams = self.num_beams
        return model

    def tables(self) -> str:
        """How the token tables are shared, in words (for a model card)."""
        if not self.share_embeddings:
            return "separate token tables"
        if not self.tie_word_embeddings:
            return "an untied output projection"
        return "one token table for encoder, decoder and output projection"


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


def check_translation_arguments(training_args: TranslationTrainingArguments) -> None:
    """Refuses, before any work, what would train or score otherwise than asked."""
    if training_args.label_smoothing_factor:
        raise ValueError(
            "use --label_smoothing (the model's own loss), not --label_smoothing_factor: Trainer's smoothing keeps "
            "the labels from the model, so the model's --label_smoothing would be ignored and the loss computed "
            "from the whole (batch, length, vocabulary) logits"
        )
    if not training_args.predict_with_generate:
        raise ValueError("BLEU needs generated text: keep --predict_with_generate on")
    if training_args.generation_num_beams is not None and training_args.generation_num_beams < 1:
        raise ValueError(f"--generation_num_beams must be at least 1, got {training_args.generation_num_beams}")
    check_new_run(training_args)
    check_checkpoint_averaging(training_args, training_args.average_checkpoints)


@dataclass
class TranslationFileArguments(SplitLimits):
    """A user's parallel data in local files: each split one CSV / TSV / JSON(L) file with a source and a target
    column, or two line-aligned text files (one sentence per line), source first."""

    train_file: list[str] | None = field(
        default=None,
        metadata={
            "help": "the training pairs: a CSV, TSV, JSON or JSONL file with --source_column and --target_column, "
            "or two line-aligned text files, the source side's and the target side's"
        },
    )
    validation_file: list[str] | None = field(
        default=None,
        metadata={
            "help": "the validation pairs (as --train_file): BLEU each epoch, beam settings; without it "
            "--validation_size of the training pairs"
        },
    )
    test_file: list[str] | None = field(
        default=None, metadata={"help": "the test pairs (as --train_file), scored once after training"}
    )
    source_column: str = field(default="source", metadata={"help": "the source column of table files"})
    target_column: str = field(default="target", metadata={"help": "the target column of table files"})
    source_lang: str | None = field(default=None, metadata={"help": "the source language code (card, results)"})
    target_lang: str | None = field(default=None, metadata={"help": "the target language code (card, results)"})
    dataset_name: str | None = field(default=None, metadata={"help": "the data's name, for results and model card"})
    validation_size: float = field(
        default=0.05, metadata={"help": "share of the training pairs held out when no --validation_file is given"}
    )

    def __post_init__(self):
        super().__post_init__()
        check_validation_size(self.validation_size)
        if not self.train_file:
            raise ValueError("--train_file is required: the training pairs (a table file, or two text files)")
        kinds = {len(files) for files in (self.train_file, self.validation_file, self.test_file) if files}
        if not kinds <= {1, 2} or len(kinds) != 1:
            raise ValueError("give every split as one table file or every split as two text files (source, target)")
        for option, files in (
            ("train", self.train_file),
            ("validation", self.validation_file),
            ("test", self.test_file),
        ):
            if files and len(files) == 2 and Path(files[0]).resolve() == Path(files[1]).resolve():
                raise ValueError(f"--{option}_file names one file, {files[0]}, as both the source and the target side")

    def files(self) -> dict[str, list[str]]:
        splits = {"train": self.train_file, "validation": self.validation_file, "test": self.test_file}
        return {split: files for split, files in splits.items() if files}

    def splits(self, seed: int):
        """``train``, ``validation`` and (with --test_file) ``test`` pairs in a ``translation`` column keyed by
        --source_column and --target_column, each split cut to its --max_*_samples; without --validation_file the
        validation pairs are held out from the training file with ``seed``."""
        from .data import first_rows, load_local_dataset, load_parallel_text

        files, source, target = self.files(), self.source_column, self.target_column
        if len(files["train"]) == 2:
            splits = load_parallel_text(
                {split: pair[0] for split, pair in files.items()},
                {split: pair[1] for split, pair in files.items()},
                source,
                target,
            )
        else:
            tables = {split: paths[0] for split, paths in files.items()}
            splits = load_local_dataset(tables, source_column=source, target_column=target)
        if "validation" not in splits:
            held_out = splits["train"].train_test_split(test_size=self.validation_size, seed=seed)
            splits["train"], splits["validation"] = held_out["train"], held_out["test"]
        return first_rows(splits, self.split_limits())


def translation_card(
    model_args: TranslationModelArguments,
    results: Mapping,
    *,
    title: str,
    data: str,
    evaluation: str,
    metric_names: Mapping[str, str] | None = None,
    notes: str = "",
    settings: Mapping | None = None,
    **text,
):
    """The ``CardText`` of a translation run (``hf_transformer.hub.model_card``): trained from scratch on the
    ``results["train_samples"]`` training pairs of ``data`` with its tokenizer and token tables (and ``notes`` after
    them), averaged checkpoints and length penalty chosen on validation said in words, a table of beam and greedy
    scores with the pairs scored, and ``settings`` (``hf_transformer.training.training_settings`` and the run's other
    options; the model's own settings the card reads from the folder). ``metric_names`` (metric -> name, default
    BLEU and chrF) are the table's metrics; ``text`` sets other ``CardText`` fields (``language``, ...)."""
    from .hub import CardText

    names = dict(metric_names or {"bleu": "BLEU", "chrf": "chrF"})
    folders = results.get("averaged_checkpoints")
    averaged = (
        f" The weights are the mean of the last {len(folders)} checkpoints ({', '.join(folders)})." if folders else ""
    )
    selection = results.get("selected_on", "eval_bleu")
    tried = results.get(f"{selection}_by_length_penalty")
    selected = names.get(selection.removeprefix("eval_"), selection)
    chosen = f" The length penalty was chosen by validation {selected} among {', '.join(tried)}." if tried else ""
    beams = results.get("num_beams", model_args.num_beams)
    columns = {"bleu": f"{names['bleu']} (beam {beams})", "greedy_bleu": f"{names['bleu']} (greedy)"}
    columns |= {metric: f"{name} (beam)" for metric, name in names.items() if metric != "bleu"}
    rows = {"eval": f"validation ({results['eval_samples']:,} pairs)"}
    if "test_samples" in results:
        rows["test"] = f"test ({results['test_samples']:,} pairs)"
    vocabulary = (
        f"the vocabulary of {model_args.tokenizer}" if model_args.tokenizer else "one vocabulary trained on those pairs"
    )
    return CardText(
        title=title,
        training=f"Trained from scratch on {results['train_samples']:,} training pairs of {data}, with {vocabulary} "
        f"for both languages and {model_args.tables()}{notes}.{averaged}",
        evaluation=f"{evaluation}{chosen}",
        metrics=list(names),
        metric_columns=columns,
        result_rows=text.pop("result_rows", rows),
        digits=2,
        settings=dict(settings or {}),
        **text,
    )


def save_translation_run(trainer, results: Mapping, test_hypotheses: Sequence[str] | None = None, card=None) -> Path:
    """:func:`hf_transformer.training.save_run` with ``test_predictions.txt``: one line per test pair, in the test
    file's order."""
    files = {"test_predictions.txt": "\n".join(test_hypotheses) + "\n"} if test_hypotheses is not None else None
    output_dir = save_run(trainer, results, card, files)
    stale = output_dir / "test_predictions.txt"
    if test_hypotheses is None and trainer.is_world_process_zero() and stale.is_file():
        stale.unlink()  # an earlier run's, in the same folder: not this model's output
    return output_dir


def run_facts(model, training_args, started: float, program: str, argv: Sequence[str] | None) -> dict:
    """What every run records beside its scores: processes, parameters, wall seconds and the command that ran it
    (``program`` and its arguments: ``argv``, else the process's own)."""
    arguments = list(argv) if argv is not None else sys.argv[1:]
    return {
        "world_size": training_args.world_size,
        "parameters": model.num_parameters(),
        "wall_seconds": round(time.time() - started, 1),
        "command": " ".join([program, *arguments]),
    }
