"""SentencePiece-style subword tokenizers, trained with `tokenizers` and used through `transformers`.

from hf_transformer.tokenization import train_tokenizer
tokenizer = train_tokenizer(["겨울은 추워요.", ...], vocab_size=8000)
tokenizer.save_pretrained("my-model")          # AutoTokenizer.from_pretrained("my-model") reloads it

Command line: `hf-transformer-tokenizer train ...` or `python -m hf_transformer.tokenization train ...`
(`python -m tokenizer ...` also works from the repository root, through the top-level `tokenizer/` shim).
"""

from .sentencepiece_import import import_sentencepiece
from .train import (
    BOS_TOKEN,
    CLS_TOKEN,
    EOS_TOKEN,
    MASK_TOKEN,
    PAD_TOKEN,
    SEP_TOKEN,
    SPECIAL_TOKEN_IDS,
    SPECIAL_TOKENS,
    UNK_TOKEN,
    train_tokenizer,
)

__all__ = [
    "train_tokenizer",
    "import_sentencepiece",
    "SPECIAL_TOKENS",
    "SPECIAL_TOKEN_IDS",
    "PAD_TOKEN",
    "UNK_TOKEN",
    "BOS_TOKEN",
    "EOS_TOKEN",
    "SEP_TOKEN",
    "CLS_TOKEN",
    "MASK_TOKEN",
]
