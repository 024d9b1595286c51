"""Import a SentencePiece `.model` file (such as the seeds' `kowiki.model`) into the fast format."""

from __future__ import annotations

import logging
import os
from pathlib import Path
from types import SimpleNamespace

from tokenizers import processors
from transformers import PreTrainedTokenizerFast

from .train import (
    CLS_TOKEN,
    DEFAULT_MODEL_MAX_LENGTH,
    MASK_TOKEN,
    SEP_TOKEN,
    SPECIAL_TOKEN_IDS,
    check_model_max_length,
    check_save_directory,
)

logger = logging.getLogger(__name__)

INSTALL_HINT = "pip install 'hf_transformer[sentencepiece]'  (or: pip install sentencepiece protobuf)"


def _converter_class():
    """transformers' SentencePiece converter; reading a `.model` needs `sentencepiece` and `protobuf`."""
    missing = []
    for module in ("sentencepiece", "google.protobuf"):
        try:
            __import__(module)
        except ImportError:
            missing.append(module.split(".")[-1])
    if missing:
        raise ImportError(
            f"importing a SentencePiece .model file needs the {' and '.join(missing)} package(s), "
            f"which are not installed: {INSTALL_HINT}"
        )
    from transformers.convert_slow_tokenizer import SpmConverter

    class NamedPiecesConverter(SpmConverter):
        # The seeds' vocabularies declare [SEP], [CLS], [MASK] as user-defined pieces; they are special here.
        special_tokens = {SEP_TOKEN, CLS_TOKEN, MASK_TOKEN}

    return NamedPiecesConverter


def import_sentencepiece(
    model_file: str | os.PathLike,
    *,
    model_max_length: int = DEFAULT_MODEL_MAX_LENGTH,
    save_directory: str | os.PathLike | None = None,
) -> PreTrainedTokenizerFast:
    """Convert a SentencePiece `.model` file into a `PreTrainedTokenizerFast` with the same pieces and ids.

    The named special tokens (pad, unk, bos, eos) are the pieces the model file declares; `[SEP]`,
    `[CLS]` and `[MASK]` are used when the file has them as pieces. Like a trained tokenizer, encoding
    appends the eos piece. Needs the optional `sentencepiece` and `protobuf` packages.
    """
    check_model_max_length(model_max_length)
    check_save_directory(save_directory)
    path = Path(model_file)
    if not path.is_file():
        raise FileNotFoundError(f"SentencePiece model file not found: {str(path)!r} (a `.model` file is expected)")
    converter_class = _converter_class()
    original = SimpleNamespace(vocab_file=str(path), add_prefix_space=True, legacy=True)
    try:
        converter = converter_class(original)
    except Exception as error:  # protobuf raises DecodeError, among others, on a file that is not a model
        raise ValueError(f"{str(path)!r} is not a readable SentencePiece model: {error}") from error
    spec = converter.proto.trainer_spec
    if spec.model_type != 1:
        # transformers 5.23's converter fails on SentencePiece BPE files; char and word models are rare.
        kind = {2: "bpe", 3: "word", 4: "char"}.get(spec.model_type, str(spec.model_type))
        raise ValueError(f"{str(path)!r} is a SentencePiece {kind} model; only unigram models can be imported")
    if spec.byte_fallback:
        logger.warning(
            "%s uses byte fallback, which the converted tokenizer lacks: unknown characters become unk", path
        )
    backend = converter.converted()
    pieces = [piece.piece for piece in converter.proto.pieces]

    def piece(piece_id: int) -> str | None:
        return pieces[piece_id] if 0 <= piece_id < len(pieces) else None

    named = {
        "pad_token": piece(spec.pad_id),
        "unk_token": piece(spec.unk_id),
        "bos_token": piece(spec.bos_id),
        "eos_token": piece(spec.eos_id),
        "sep_token": SEP_TOKEN if SEP_TOKEN in pieces else None,
        "cls_token": CLS_TOKEN if CLS_TOKEN in pieces else None,
        "mask_token": MASK_TOKEN if MASK_TOKEN in pieces else None,
    }
    named = {key: value for key, value in named.items() if value is not None}
    eos, sep = named.get("eos_token"), named.get("sep_token")
    if eos is not None:
        joiner = sep or eos
        backend.post_processor = processors.TemplateProcessing(
            single=f"$A:0 {eos}:0",
            pair=f"$A:0 {joiner}:0 $B:1 {eos}:1",
            special_tokens=[(token, backend.token_to_id(token)) for token in dict.fromkeys([eos, joiner])],
        )
    differing = {
        token: pieces.index(token)
        for token in SPECIAL_TOKEN_IDS
        if token in pieces and pieces.index(token) != SPECIAL_TOKEN_IDS[token]
    }
    if "pad_token" not in named or differing or spec.pad_id != 0:
        logger.warning(
            "%s does not use this package's special ids ([PAD] 0, [UNK] 1, [BOS] 2, [EOS] 3): pad=%s unk=%s "
            "bos=%s eos=%s. Set the model config's pad/bos/eos ids to match.",
            path,
            spec.pad_id,
            spec.unk_id,
            spec.bos_id,
            spec.eos_id,
        )
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend,
        model_max_length=model_max_length,
        clean_up_tokenization_spaces=False,
        **named,
    )
    if save_directory is not None:
        tokenizer.save_pretrained(save_directory)
    return tokenizer


__all__ = ["import_sentencepiece", "INSTALL_HINT"]
