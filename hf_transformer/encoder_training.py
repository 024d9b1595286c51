"""What the encoder scripts (``scripts/train_classifier.py``, ``scripts/pretrain_denoising.py``) share: the encoder's
command-line arguments and configuration, and where their texts are (local CSV / TSV / JSON(L) files)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from .configuration_transformer import TransformerConfig
from .training import SplitLimits, check_tokenizer_source, check_validation_size

__all__ = ["EncoderArguments", "TextFileArguments", "cap_model_max_length", "encoder_config", "train_encoder_tokenizer"]


@dataclass
class EncoderArguments:
    """An encoder's tokenizer and sizes (through ``HfArgumentParser``), shared by the classifier
    (``scripts/train_classifier.py``) and its masked-token pretraining (``scripts/pretrain_denoising.py``), so that
    the classifier's ``model.encoder.*`` weights load from a pretraining folder."""

    tokenizer: str | None = field(default=None, metadata={"help": "a saved tokenizer folder; else one is trained"})
    vocab_size: int = field(default=8000, metadata={"help": "vocabulary size of a newly trained tokenizer"})
    tokenizer_model: str = field(
        default="unigram",
        metadata={"help": "subword model of a newly trained tokenizer: unigram, or bpe (training it is repeatable)"},
    )
    segmenter: str | None = field(
        default=None,
        metadata={
            "help": "mecab-ko: a newly trained tokenizer cuts every text into Korean morphemes before its subword "
            "model, in training and in every later use (needs python-mecab-ko: the morphemes extra)"
        },
    )
    max_length: int = field(default=128, metadata={"help": "texts are truncated to this many tokens"})
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
            "help": "a pretraining folder (scripts/pretrain_denoising.py): the classifier starts from its encoder "
            "weights, and pretraining continues from all its weights; its tokenizer is used unless --tokenizer is "
            "given, and every weight taken must match by name and shape"
        },
    )
    freeze_embeddings: bool = field(
        default=False, metadata={"help": "keep the token table fixed (e.g. as pretrained with --init_from)"}
    )

    def __post_init__(self):
        # The sizes and layouts as the config will check them (`d_model` a multiple of the heads, a layout's name),
        # over a stand-in vocabulary with the config's own special-token ids: refused as the command is parsed.
        TransformerConfig(vocab_size=1000, **self.model_settings())

    def check_folders(self) -> None:
        """The folders named exist: called by the scripts before any text is read or a tokenizer trained (a
        mistyped --init_from would otherwise be looked up on the Hub after that work)."""
        if self.init_from is not None and not Path(self.init_from).is_dir():
            raise FileNotFoundError(f"--init_from {self.init_from}: no such folder (a pretraining run's output folder)")
        if self.tokenizer is not None:
            check_tokenizer_source(self.tokenizer)
        elif self.init_from is not None:  # the pretraining folder's tokenizer is the run's
            check_tokenizer_source(self.init_from, "--init_from")

    def model_settings(self) -> dict:
        """The encoder's sizes and layout as `TransformerConfig` settings (its vocabulary comes from the tokenizer)."""
        return dict(
            d_model=self.d_model,
            n_layer=self.num_layers,
            num_attention_heads=self.num_heads,
            intermediate_size=self.intermediate_size,
            max_position_embeddings=self.max_length,
            dropout=self.dropout,
            attention_dropout=self.attention_dropout,
            layer_norm_position=self.layer_norm_position,
            position_embedding_type=self.position_embedding_type,
            embedding_layer_norm=self.layer_norm_position == "pre",
            classifier_pooling=self.classifier_pooling,
            layer_norm_epsilon=1e-6,
        )


def train_encoder_tokenizer(model_args: EncoderArguments, texts):
    """A new tokenizer for the encoder, trained on ``texts`` with the arguments' vocabulary, model and segmenter."""
    from .tokenization import train_tokenizer

    return train_tokenizer(
        texts,
        vocab_size=model_args.vocab_size,
        model_type=model_args.tokenizer_model,
        segmenter=model_args.segmenter,
        model_max_length=model_args.max_length,
    )


def cap_model_max_length(tokenizer, max_length: int):
    """The run's tokenizer, reading at most the encoder's ``max_length`` positions. A tokenizer given with
    --tokenizer or --init_from may keep a longer `model_max_length`; the folder saved beside the weights would then
    let transformers' pipelines (which truncate at `model_max_length`) pass a long text the position table cannot
    hold, where the run itself cut it at ``max_length``."""
    if not isinstance(tokenizer.model_max_length, int) or tokenizer.model_max_length > max_length:
        tokenizer.model_max_length = max_length
    return tokenizer


def encoder_config(model_args: EncoderArguments, tokenizer, label_names: list[str] | None = None) -> TransformerConfig:
    """The encoder's configuration, for the classifier and for its masked-token pretraining alike (``label_names``:
    the classifier's labels, in id order)."""
    labels = {}
    if label_names is not None:
        labels = dict(
            num_labels=len(label_names),
            id2label=dict(enumerate(label_names)),
            label2id={name: i for i, name in enumerate(label_names)},
        )
    return TransformerConfig(
        vocab_size=len(tokenizer),
        **model_args.model_settings(),
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        **labels,
    )


# The encoder's settings that shape no weight: a folder trained with others holds tensors of the same names and shapes
# that compute something else (4 heads read as 2 split each vector otherwise; post-LN weights read as pre-LN).
ENCODER_LAYOUT = (
    "num_attention_heads", "encoder_layers", "layer_norm_position", "position_embedding_type", "embedding_layer_norm",
    "final_layer_norm", "activation_function", "scale_embedding",
)  # fmt: skip


def check_same_encoder_layout(config: TransformerConfig, folder: str | Path) -> None:
    """Refuses ``--init_from`` ``folder`` where its ``config.json`` gives the encoder another layout than ``config``
    (a setting the folder does not record is not compared), naming each setting that differs."""
    import json

    path = Path(folder) / "config.json"
    saved = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
    differ = [
        f"{name} {saved[name]!r} there, {getattr(config, name)!r} here"
        for name in ENCODER_LAYOUT
        if name in saved and saved[name] != getattr(config, name)
    ]
    if differ:
        raise ValueError(
            f"--init_from {folder}: its encoder was trained with other settings ({'; '.join(differ)}); its weights "
            "would compute something else here: give the settings it was trained with"
        )


@dataclass
class TextFileArguments(SplitLimits):
    """Where a run's texts are: local CSV / TSV / JSON(L) files (``hf_transformer.data.load_local_dataset``)."""

    train_file: str = field(default=None, metadata={"help": "training rows (CSV, TSV, JSON or JSONL)"})
    validation_file: str | None = field(
        default=None, metadata={"help": "validation rows; without it --validation_size of the training rows"}
    )
    test_file: str | None = field(default=None, metadata={"help": "test rows, scored once after training"})
    text_column: str = field(default="text", metadata={"help": "the column holding the text"})
    label_column: str = field(default="label", metadata={"help": "the column holding the label"})
    validation_size: float = field(
        default=0.1, metadata={"help": "share of the training rows held out when no --validation_file is given"}
    )
    split_seed: int | None = field(
        default=None,
        metadata={"help": "seed of the held-out split (default --seed); keep it between pretraining and training"},
    )
    dataset_name: str | None = field(default=None, metadata={"help": "the data's name, for results and model card"})
    language: list[str] = field(default_factory=list, metadata={"help": "the texts' language codes, for the card"})

    def __post_init__(self):
        super().__post_init__()
        check_validation_size(self.validation_size)
        if not self.train_file:
            raise ValueError("--train_file is required: the training rows (CSV, TSV, JSON or JSONL)")

    def splits(self, seed: int, *, labels: bool = True):
        """``train``, ``validation`` and (with --test_file) ``test`` rows, each cut to its --max_*_samples; without
        --validation_file the validation rows are carved from the training file with ``split_seed`` (else ``seed``).
        ``labels=False`` reads the text column alone (pretraining)."""
        from .data import first_rows, load_local_dataset

        files = {"train": self.train_file, "validation": self.validation_file, "test": self.test_file}
        files = {split: path for split, path in files.items() if path}
        label_column = self.label_column if labels else None
        splits = load_local_dataset(files, text_column=self.text_column, label_column=label_column)
        if "validation" not in splits:
            split_seed = seed if self.split_seed is None else self.split_seed
            splits["train"], splits["validation"] = self._carve(splits["train"], split_seed, labels)
        return first_rows(splits, self.split_limits())

    def _carve(self, train, split_seed: int, labels: bool):
        """(train, validation): ``validation_size`` of the training rows held out, the rows pretraining holds out
        (its texts read alone) whatever the labels: where rows without a label are dropped for training, the carve is
        made over the rows as pretraining reads them, so that none of the classifier's held-out rows was trained on."""
        from .data import load_local_dataset, places_in_order

        carved = train.train_test_split(test_size=self.validation_size, seed=split_seed)
        if not labels:
            return carved["train"], carved["test"]
        texts = load_local_dataset({"train": self.train_file}, text_column=self.text_column)["train"]
        if len(texts) == len(train):  # every row labelled: the same rows as pretraining's
            return carved["train"], carved["test"]
        numbered = texts.add_column("row", list(range(len(texts))))
        held = numbered.train_test_split(test_size=self.validation_size, seed=split_seed)
        # Each labelled row's place among pretraining's rows: the labelled rows are those rows, less the unlabelled.
        rows = places_in_order(train["text"], texts["text"], self.train_file)
        place = {row: index for index, row in enumerate(rows)}
        parts = [[place[r] for r in held[part]["row"] if r in place] for part in ("train", "test")]
        return train.select(parts[0]), train.select(parts[1])
