"""Train a SentencePiece-style subword vocabulary with the `tokenizers` library.

The result is a `PreTrainedTokenizerFast` (in transformers 5 an alias of `TokenizersBackend`) that
`AutoTokenizer.from_pretrained` reloads with every special token set.
"""

from __future__ import annotations

import itertools
import json
import logging
import os
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path

from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
from transformers import PreTrainedTokenizerFast

from ..folders import saved_model_config
from .morphemes import SEGMENTER, MorphemeTokenizerFast, saved_pre_tokenizer, with_morphemes

logger = logging.getLogger(__name__)

# The ids are fixed: id 0 is the padding id of the models (the seeds' `i_pad`), bos/eos follow the
# SentencePiece vocabulary of the seeds (kowiki.model: [PAD] 0, [UNK] 1, [BOS] 2, [EOS] 3).
PAD_TOKEN, UNK_TOKEN, BOS_TOKEN, EOS_TOKEN = "[PAD]", "[UNK]", "[BOS]", "[EOS]"
SEP_TOKEN, CLS_TOKEN, MASK_TOKEN = "[SEP]", "[CLS]", "[MASK]"
SPECIAL_TOKENS: tuple[str, ...] = (
    PAD_TOKEN,
    UNK_TOKEN,
    BOS_TOKEN,
    EOS_TOKEN,
    SEP_TOKEN,
    CLS_TOKEN,
    MASK_TOKEN,
)
SPECIAL_TOKEN_IDS: dict[str, int] = {token: index for index, token in enumerate(SPECIAL_TOKENS)}

# Keyword arguments that give a PreTrainedTokenizerFast its named special tokens.
SPECIAL_TOKEN_KWARGS: dict[str, str] = {
    "pad_token": PAD_TOKEN,
    "unk_token": UNK_TOKEN,
    "bos_token": BOS_TOKEN,
    "eos_token": EOS_TOKEN,
    "sep_token": SEP_TOKEN,
    "cls_token": CLS_TOKEN,
    "mask_token": MASK_TOKEN,
}

METASPACE = "\u2581"  # "▁", SentencePiece's visible word-boundary marker
MODEL_TYPES = ("unigram", "bpe")
SEGMENTERS = (SEGMENTER,)  # what may cut the text before the subword model (morphemes.py)
DEFAULT_MODEL_MAX_LENGTH = 256  # the seeds' n_enc_seq / n_dec_seq
_BATCH_SIZE = 1000  # strings handed to the Rust trainer per step; bigger batches cross the FFI less often


def sentencepiece_normalizer(lowercase: bool = False) -> normalizers.Normalizer:
    """NFKC, then every run of whitespace becomes one space and the ends are stripped; with `lowercase`,
    then lowercased.

    This is what SentencePiece's default `nmt_nfkc` rule with `remove_extra_whitespaces` does, so a
    decoded sentence is the NFKC form of the input with single spaces (lowercased with `lowercase`).
    """
    steps = [normalizers.NFKC(), normalizers.Replace(Regex(r"\s+"), " "), normalizers.Strip()]
    if lowercase:
        steps.append(normalizers.Lowercase())
    return normalizers.Sequence(steps)


def sentencepiece_pre_tokenizer() -> pre_tokenizers.PreTokenizer:
    """Spaces become a `▁` prefix on the next word; runs of punctuation and symbols are cut off.

    SentencePiece splits a piece where the Unicode script changes, so "추워요." gives "요" and "." as
    separate pieces, never "요.". Runs such as "..." or "^^;;" stay together.
    """
    return pre_tokenizers.Sequence(
        [
            pre_tokenizers.Metaspace(replacement=METASPACE, prepend_scheme="always", split=True),
            pre_tokenizers.Split(Regex(rf"[^\w\s{METASPACE}]+"), behavior="isolated"),
        ]
    )


def sentencepiece_decoder() -> decoders.Decoder:
    return decoders.Metaspace(replacement=METASPACE, prepend_scheme="always", split=True)


def eos_post_processor(token_to_id) -> processors.TemplateProcessing:
    """`[EOS]` closes every sequence, source and target alike; a pair is `A [SEP] B [EOS]`.

    Decoder inputs start with `[BOS]`: the model shifts the labels right with its
    `decoder_start_token_id`, so the tokenizer does not add it.
    """
    return processors.TemplateProcessing(
        single=f"$A:0 {EOS_TOKEN}:0",
        pair=f"$A:0 {SEP_TOKEN}:0 $B:1 {EOS_TOKEN}:1",
        special_tokens=[(EOS_TOKEN, token_to_id(EOS_TOKEN)), (SEP_TOKEN, token_to_id(SEP_TOKEN))],
    )


def _named_training_error(error: Exception, files: list[str] | None, vocab_size: int) -> Exception:
    """The `tokenizers` trainer's error, as a ValueError that says what to change."""
    message = str(error)
    if "not large enough to contain all chars" in message:
        return ValueError(
            f"vocab_size {vocab_size} cannot hold every distinct character of the training text (a Unigram "
            "vocabulary keeps them all); ask for a larger vocabulary"
        )
    if "valid UTF-8" in message and files:
        for path in files:
            try:
                with open(path, encoding="utf-8") as stream:
                    for _ in stream:
                        pass
            except UnicodeDecodeError as decoding:
                return ValueError(f"{path} is not UTF-8 text ({decoding.reason}); convert it to UTF-8")
    return error


def check_model_max_length(model_max_length) -> None:
    """`model_max_length` is where `truncation=True` cuts: an integer that leaves room for a token and [EOS] (0 would
    cut nothing, a negative length fails at every call)."""
    if not (isinstance(model_max_length, int) and model_max_length >= 2):
        raise ValueError(f"model_max_length must be an integer of at least 2, not {model_max_length!r}")


def check_save_directory(save_directory) -> None:
    """Before any work: ``save_directory`` must be a folder or a path where one can be made (`save_pretrained` only
    logs an error for a file there, and the trained vocabulary would be lost)."""
    if save_directory is not None and Path(save_directory).exists() and not Path(save_directory).is_dir():
        raise NotADirectoryError(f"{save_directory} is a file: give the folder to save the tokenizer to")
    held = saved_model_config(save_directory) if save_directory is not None else None
    if held:
        raise ValueError(
            f"{save_directory} holds a saved model ({held}): a new tokenizer there would replace the one its "
            "weights were trained with; give a folder of its own"
        )


def wrap_tokenizer(
    backend: Tokenizer,
    model_max_length: int = DEFAULT_MODEL_MAX_LENGTH,
    tokenizer_class: type = PreTrainedTokenizerFast,
) -> PreTrainedTokenizerFast:
    """Give a `tokenizers.Tokenizer` that holds the special tokens the transformers interface (`tokenizer_class`)."""
    missing = [token for token in SPECIAL_TOKENS if backend.token_to_id(token) is None]
    if missing:
        raise ValueError(f"the vocabulary has no {', '.join(missing)}; every one of {SPECIAL_TOKENS} is needed")
    return tokenizer_class(
        tokenizer_object=backend,
        model_max_length=model_max_length,
        # The default clean-up turns "a ." into "a.", so decode(encode(text)) would not give the text back.
        clean_up_tokenization_spaces=False,
        **SPECIAL_TOKEN_KWARGS,
    )


def _as_files(texts_or_files: object) -> list[str] | None:
    """The input as a list of text files, or None when it holds the training strings themselves.

    A list is taken as file paths when its first item is a `Path` or names an existing file; the
    items are not all checked up front, so a long list of sentences costs nothing here.
    """
    if isinstance(texts_or_files, (str, os.PathLike)):
        path = Path(texts_or_files)
        if not path.is_file():
            raise FileNotFoundError(
                f"{str(path)!r} is not a file. Pass a list of text files, or an iterable of strings"
            )
        return [str(path)]
    if not isinstance(texts_or_files, (list, tuple)) or not texts_or_files:
        return None
    first = texts_or_files[0]
    if not (isinstance(first, os.PathLike) or (isinstance(first, str) and os.path.isfile(first))):
        return None
    not_paths = [repr(item)[:60] for item in texts_or_files if not isinstance(item, (str, os.PathLike))]
    if not_paths:
        raise TypeError(f"a list of training files holds items that are not paths: {not_paths[:3]}")
    missing = [str(item) for item in texts_or_files if not os.path.isfile(item)]
    if missing:
        raise FileNotFoundError(
            f"training file(s) not found: {missing[:5]}. (The list's first item is a file, so every item "
            "is read as a file path; pass sentences in a list whose first item is not a file name.)"
        )
    return [str(item) for item in texts_or_files]


def _chunks(texts: Iterable[str], text_column: str) -> Iterator[list]:
    """The input in lists of up to `_BATCH_SIZE` items, read in bulk where the container allows it."""
    if hasattr(texts, "column_names") and hasattr(texts, "iter"):  # a datasets.Dataset
        if text_column not in texts.column_names:
            raise KeyError(f"the dataset has no column {text_column!r}; its columns are {texts.column_names}")
        for batch in texts.iter(batch_size=_BATCH_SIZE):
            yield batch[text_column]
    elif hasattr(texts, "__len__") and hasattr(texts, "__getitem__") and not isinstance(texts, Mapping):
        # Lists and `dataset["text"]` columns: slicing a datasets Column is 5x faster than iterating it.
        for start in range(0, len(texts), _BATCH_SIZE):
            yield list(texts[start : start + _BATCH_SIZE])
    else:
        iterator = iter(texts)
        while chunk := list(itertools.islice(iterator, _BATCH_SIZE)):
            yield chunk


def _text_batches(texts: Iterable[str], text_column: str) -> Iterator[list[str]]:
    """Batches of training strings; missing values (None) are skipped, anything else but str is an error."""
    position = 0
    for chunk in _chunks(texts, text_column):
        for offset, text in enumerate(chunk):
            if text is not None and not isinstance(text, str):
                raise TypeError(
                    f"training item {position + offset} is a {type(text).__name__}, not a str; "
                    "pass strings or a list of text file paths"
                )
        position += len(chunk)
        yield [text for text in chunk if text]


def build_trainer(
    model_type: str,
    vocab_size: int,
    *,
    min_frequency: int,
    max_piece_length: int,
    shrinking_factor: float,
    show_progress: bool,
    lowercase: bool = False,
    segmenter: str | None = None,
) -> tuple[Tokenizer, trainers.Trainer]:
    """An untrained tokenizer with the SentencePiece-style pipeline (with ``segmenter``, cutting the text into
    morphemes first), and the trainer for its model."""
    if model_type == "unigram":
        backend = Tokenizer(models.Unigram())
        trainer = trainers.UnigramTrainer(
            vocab_size=vocab_size,
            special_tokens=list(SPECIAL_TOKENS),
            unk_token=UNK_TOKEN,
            max_piece_length=max_piece_length,
            shrinking_factor=shrinking_factor,
            show_progress=show_progress,
        )
    elif model_type == "bpe":
        backend = Tokenizer(models.BPE(unk_token=UNK_TOKEN))
        trainer = trainers.BpeTrainer(
            vocab_size=vocab_size,
            min_frequency=min_frequency,
            special_tokens=list(SPECIAL_TOKENS),
            max_token_length=max_piece_length,
            show_progress=show_progress,
        )
    else:
        raise ValueError(f"model_type must be one of {MODEL_TYPES}, not {model_type!r}")
    backend.normalizer = sentencepiece_normalizer(lowercase)
    backend.pre_tokenizer = with_morphemes(saved_pre_tokenizer()) if segmenter else sentencepiece_pre_tokenizer()
    backend.decoder = sentencepiece_decoder()
    return backend, trainer


def pieces_in_text_order(backend: Tokenizer) -> Tokenizer:
    """A Unigram tokenizer whose pieces after the special tokens take their ids in the order of their text (by code
    point) rather than of their scores.

    The `tokenizers` Unigram trainer gathers texts and pieces in hash-map order, which differs from run to run, and
    numbers the pieces by score: pieces of equal or nearly equal score (float sums taken in another order, the
    unseen characters' small penalties given in another order) swap ids between two trainings on the same texts,
    though they find the same pieces. Numbered by their text, the same pieces get the same ids, so the same texts give
    the same token ids and a model trained on them the same weights. The scores, and so the segmentation, are
    untouched (a piece's id plays no part in it)."""
    state = json.loads(backend.to_str())
    vocab = state["model"]["vocab"]
    special = len(SPECIAL_TOKENS)  # ids 0-6, as the trainer was given them
    if [piece for piece, _ in vocab[:special]] != list(SPECIAL_TOKENS):
        raise ValueError(f"the trained vocabulary does not start with {SPECIAL_TOKENS}")
    state["model"]["vocab"] = vocab[:special] + sorted(vocab[special:], key=lambda entry: entry[0])
    return Tokenizer.from_str(json.dumps(state))


def train_tokenizer(
    texts_or_files: Iterable[str] | str | os.PathLike | list[str | os.PathLike],
    vocab_size: int = 8000,
    *,
    model_type: str = "unigram",
    text_column: str = "text",
    min_frequency: int = 2,
    max_piece_length: int = 16,
    shrinking_factor: float = 0.5,
    model_max_length: int = DEFAULT_MODEL_MAX_LENGTH,
    lowercase: bool = False,
    segmenter: str | None = None,
    show_progress: bool = True,
    save_directory: str | os.PathLike | None = None,
) -> PreTrainedTokenizerFast:
    """Train a SentencePiece-style subword vocabulary and return it as a `PreTrainedTokenizerFast`.

    Args:
        texts_or_files: the training text, as one of: an iterable of strings (a list, a generator, a
            `datasets` column); a `datasets.Dataset` (its `text_column` is used); a text file path or
            a list of them (every line is a sentence).
        vocab_size: size of the whole vocabulary, the 7 special tokens included. A small corpus may
            give fewer pieces than asked for.
        model_type: "unigram" (SentencePiece's default algorithm) or "bpe".
        min_frequency: BPE only: a merge must occur this often.
        max_piece_length: longest piece, in characters.
        shrinking_factor: Unigram only: the share of pieces kept after each pruning round. 0.5 trains
            150,000 Korean reviews about twice as fast as SentencePiece's 0.75 for under 1% more tokens per
            sentence.
        model_max_length: the longest input the models take; `truncation=True` cuts there.
        lowercase: the tokenizer lowercases every text it encodes (training text included), so a model
            trained with it reads and writes lowercase (the preprocessing of many translation papers).
        segmenter: "mecab-ko" cuts every text into Korean morphemes before the subword model (the
            `morphemes` extra: python-mecab-ko); the result is a `MorphemeTokenizerFast`, which does the same to
            every text it encodes. None: words and punctuation only.
        show_progress: show the trainer's progress bars.
        save_directory: when given, the tokenizer is also saved there (`save_pretrained`).

    Special tokens have fixed ids: [PAD] 0, [UNK] 1, [BOS] 2, [EOS] 3, [SEP] 4, [CLS] 5, [MASK] 6.
    Encoding appends [EOS] (also to `text_target=`); a pair is joined as `A [SEP] B [EOS]`.
    Characters never seen in training become [UNK]. BPE training is repeatable: the same texts and settings
    give a byte-identical `tokenizer.json`. Unigram training gives the same pieces the same ids (numbered by their
    text: `pieces_in_text_order`), but some scores differ between runs (the `tokenizers` trainer gathers the texts
    in hash order), so the file is not byte-identical and a rare text may be cut otherwise; ship the saved
    tokenizer with its model rather than training it again.
    """
    if model_type not in MODEL_TYPES:
        raise ValueError(f"model_type must be one of {MODEL_TYPES}, not {model_type!r}")
    if vocab_size <= len(SPECIAL_TOKENS):
        raise ValueError(f"vocab_size must be above the {len(SPECIAL_TOKENS)} special tokens, not {vocab_size}")
    check_model_max_length(model_max_length)  # before the training, not after it (wrap_tokenizer's)
    check_save_directory(save_directory)
    if not 0.0 < shrinking_factor < 1.0:
        raise ValueError(f"shrinking_factor must be between 0 and 1, not {shrinking_factor}")
    if segmenter is not None and segmenter not in SEGMENTERS:
        raise ValueError(f"segmenter must be one of {SEGMENTERS} or None, not {segmenter!r}")

    backend, trainer = build_trainer(
        model_type,
        vocab_size,
        min_frequency=min_frequency,
        max_piece_length=max_piece_length,
        shrinking_factor=shrinking_factor,
        show_progress=show_progress,
        lowercase=lowercase,
        segmenter=segmenter,
    )
    files = _as_files(texts_or_files)
    try:
        if files is not None:
            logger.info("training a %s vocabulary of %d from %d file(s)", model_type, vocab_size, len(files))
            backend.train(files, trainer)
        else:
            length = len(texts_or_files) if hasattr(texts_or_files, "__len__") else None
            logger.info("training a %s vocabulary of %d from %s texts", model_type, vocab_size, length or "streamed")
            backend.train_from_iterator(_text_batches(texts_or_files, text_column), trainer, length=length)
    except Exception as error:  # the Rust trainer raises bare Exceptions, named here
        named = _named_training_error(error, files, vocab_size)
        if named is error:
            raise
        raise named from error

    # Training on no text leaves only the special tokens: a tokenizer that maps everything to [UNK].
    if backend.get_vocab_size() <= len(SPECIAL_TOKENS):
        raise ValueError("the training text is empty: the vocabulary holds only the special tokens")
    if backend.get_vocab_size() != vocab_size:
        # Fewer: the text holds no more pieces. More (BPE): its alphabet alone, every character kept, is larger.
        logger.warning(
            "the training text gave %d pieces, %s than the %d asked for",
            backend.get_vocab_size(),
            "fewer" if backend.get_vocab_size() < vocab_size else "more (every character of the text is a piece)",
            vocab_size,
        )
    backend.post_processor = eos_post_processor(backend.token_to_id)
    if segmenter is not None:
        backend.pre_tokenizer = saved_pre_tokenizer()  # MorphemeTokenizerFast puts the morpheme step back
    if model_type == "unigram":
        backend = pieces_in_text_order(backend)
    tokenizer = wrap_tokenizer(
        backend,
        model_max_length=model_max_length,
        tokenizer_class=MorphemeTokenizerFast if segmenter is not None else PreTrainedTokenizerFast,
    )
    if save_directory is not None:
        tokenizer.save_pretrained(save_directory)
        logger.info("saved the tokenizer to %s", save_directory)
    return tokenizer
