"""Korean morphemes as a tokenizer's first cut: MeCab-ko finds the morpheme boundaries of the raw text, and the
subword model splits further within each morpheme.

    pip install "hf_transformer[morphemes]"          # python-mecab-ko and its dictionary (mecab-ko-dic)
    tokenizer = train_tokenizer(reviews, vocab_size=16000, model_type="bpe", segmenter="mecab-ko")
    tokenizer("영화였던가").tokens()  # ['▁영화', '였', '던가', '[EOS]']: "▁" still marks where a word starts

The morpheme split is a step of the tokenizer itself, so every entry point that takes raw text (``AutoTokenizer``,
``pipeline``, ``Predictor``, the demo app) cuts it the same way; nothing has to be segmented beforehand. The
``tokenizers`` library cannot save a pre-tokenizer written in Python, so ``tokenizer.json`` holds the rest of the
pipeline and :class:`MorphemeTokenizerFast` puts the MeCab-ko step back in front of it whenever it is built, loaded or
unpickled (as transformers' RoFormer tokenizer does with jieba). The folder carries this file and an ``auto_map``:
with ``trust_remote_code=True`` it loads where hf_transformer is not installed, python-mecab-ko still being needed.

This module imports nothing of hf_transformer: ``save_pretrained`` copies it into the folder as it is.
"""

from __future__ import annotations

from tokenizers import NormalizedString, PreTokenizedString, Regex, Tokenizer, pre_tokenizers
from transformers import PreTrainedTokenizerFast

SEGMENTER = "mecab-ko"
METASPACE = "\u2581"  # "▁", SentencePiece's visible word-boundary marker
MISSING_ANALYZER = (
    "this tokenizer cuts Korean text into morphemes with MeCab-ko, which is not installed: "
    "pip install python-mecab-ko (or hf_transformer[morphemes])"
)


def saved_pre_tokenizer() -> pre_tokenizers.PreTokenizer:
    """The part of the pre-tokenizer that ``tokenizer.json`` holds: each space becomes a ``▁`` on the piece after it
    (the text's first piece gets one too), and runs of punctuation and symbols are cut off."""
    return pre_tokenizers.Sequence(
        [
            pre_tokenizers.Metaspace(replacement=METASPACE, prepend_scheme="first", split=True),
            pre_tokenizers.Split(Regex(rf"[^\w\s{METASPACE}]+"), behavior="isolated"),
        ]
    )


class MorphemeSplitter:
    """A ``tokenizers`` pre-tokenizer (``PreTokenizer.custom``) that cuts a text at MeCab-ko's morpheme boundaries.

    The whole text is analysed at once (a morpheme depends on its neighbours), and the spaces before a morpheme stay
    on its front, so the Metaspace step after it still sees where each word begins: "이런 영화는" gives "이런",
    " 영화", "는". Offsets are kept: every piece is a slice of the text.
    """

    def __init__(self):
        try:
            import mecab
            from mecab.mecab import create_lattice
        except ImportError:
            raise ImportError(MISSING_ANALYZER) from None
        # The tagger's lattice gives each morpheme's character span without the feature objects that `MeCab.parse`
        # (which wraps the same two calls) builds for every morpheme and this split never reads.
        self._tagger = mecab.MeCab()._tagger
        self._create_lattice = create_lattice

    def spans(self, text: str) -> list[tuple[int, int]]:
        """(start, end) of each morpheme of ``text``, in characters."""
        lattice = self._create_lattice(text)
        if not self._tagger.parse(lattice):
            raise ValueError(f"MeCab-ko could not analyse {text[:60]!r}: {self._tagger.what()}")
        return [tuple(span) for span, _node in lattice]

    def split(self, _index: int, text: NormalizedString) -> list[NormalizedString]:
        pieces, start = [], 0
        for _begin, end in self.spans(str(text)):
            pieces.append(text[start:end])  # the spaces before a morpheme go with it
            start = end
        if start < len(str(text)):
            pieces.append(text[start:])
        # The text's first piece begins a word. Metaspace marks it only where it starts at the text's first
        # character, which it does not where the normalizer stripped leading spaces ("  이런" would read "이", "런").
        if pieces and not str(pieces[0]).startswith(" "):
            pieces[0].prepend(" ")
        return pieces

    def pre_tokenize(self, pretokenized: PreTokenizedString) -> None:
        pretokenized.split(self.split)


def with_morphemes(saved: pre_tokenizers.PreTokenizer) -> pre_tokenizers.PreTokenizer:
    """``saved`` (what ``tokenizer.json`` holds) with the MeCab-ko step in front of it."""
    return pre_tokenizers.Sequence([pre_tokenizers.PreTokenizer.custom(MorphemeSplitter()), saved])


class MorphemeTokenizerFast(PreTrainedTokenizerFast):
    """A ``PreTrainedTokenizerFast`` whose pre-tokenizer first cuts the text into MeCab-ko morphemes.

    ``tokenizer.json`` is written without that step (``tokenizers`` cannot save it) and the class adds it back on
    every load; pickling (``copy.deepcopy``, DataLoader workers, ``datasets.map(num_proc=...)``) goes through the
    same saved form. ``datasets``' fingerprint of a function reads a tokenizer's attributes itself and cannot hash
    the morpheme step: it takes a random fingerprint, so a ``map`` over this tokenizer computes again rather than
    reusing its cache (its result is the same); the package's maps hold it in ``hf_transformer.data``'s
    ``TokenizerByContent``, which datasets hashes by the saved form."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._attach_morphemes()

    @classmethod
    def convert_to_native_format(cls, trust_remote_code=False, **kwargs):
        """``tokenizer.json`` is loaded whole. (``from_pretrained`` calls this; for a class with its own
        ``__init__`` transformers' version keeps only the vocabulary, for classes that rebuild their pipeline.)"""
        return kwargs

    def _attach_morphemes(self) -> None:
        self._saved_pre_tokenizer = self.backend_tokenizer.pre_tokenizer
        self.backend_tokenizer.pre_tokenizer = with_morphemes(self._saved_pre_tokenizer)

    def saved_backend(self) -> Tokenizer:
        """A copy of the backend as ``tokenizer.json`` holds it (without the morpheme step), which ``tokenizers``
        can write out: ``backend_tokenizer.to_str()`` raises for a pre-tokenizer written in Python."""
        live = self.backend_tokenizer.pre_tokenizer
        self.backend_tokenizer.pre_tokenizer = self._saved_pre_tokenizer
        try:
            return Tokenizer.from_str(self.backend_tokenizer.to_str())
        finally:
            self.backend_tokenizer.pre_tokenizer = live

    def save_pretrained(self, *args, **kwargs):
        live = self.backend_tokenizer.pre_tokenizer
        self.backend_tokenizer.pre_tokenizer = self._saved_pre_tokenizer
        try:
            return super().save_pretrained(*args, **kwargs)
        finally:
            self.backend_tokenizer.pre_tokenizer = live

    def __getstate__(self):
        state = self.__dict__.copy()
        state["_tokenizer"] = self.saved_backend()
        state.pop("_saved_pre_tokenizer", None)
        return state

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._attach_morphemes()


__all__ = ["MISSING_ANALYZER", "SEGMENTER", "MorphemeSplitter", "MorphemeTokenizerFast", "saved_pre_tokenizer"]
