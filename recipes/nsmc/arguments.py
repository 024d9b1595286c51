"""Recipes the training scripts share: command-line arguments and the configuration they build.

The NSMC sentiment encoder is pretrained by ``scripts/pretrain_denoising.py`` (masked tokens,
``TransformerForMaskedLM``) and fine-tuned by ``scripts/train_classifier.py``
(``TransformerForSequenceClassification``). Both parse the same arguments and build the encoder from the same
configuration, so that the classifier's ``model.encoder.*`` weights load from a pretraining folder, and both carve
the same validation split from the training file, so that pretraining never reads the classifier's held-out reviews.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from hf_transformer.configuration_transformer import TransformerConfig
from hf_transformer.training import SplitLimits

__all__ = ["NsmcModelArguments", "NsmcDataArguments", "nsmc_config"]


@dataclass
class NsmcModelArguments:
    """The NSMC encoder's tokenizer and sizes (through ``HfArgumentParser``)."""

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
            "help": "a pretraining folder (scripts/pretrain_denoising.py): the classifier starts from its encoder "
            "weights, and pretraining continues from all its weights; its tokenizer is used unless --tokenizer is "
            "given, and every weight taken must match by name and shape"
        },
    )
    freeze_embeddings: bool = field(
        default=False, metadata={"help": "keep the token table fixed (e.g. as pretrained with --init_from)"}
    )


@dataclass
class NsmcDataArguments(SplitLimits):
    """Where NSMC lies and how the validation reviews are carved from its training file."""

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


def nsmc_config(model_args: NsmcModelArguments, tokenizer, label_names: list[str]) -> TransformerConfig:
    """The NSMC encoder's configuration, for the classifier and for its masked-token pretraining alike."""
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
