"""See the model think: the attention weights of one sentence, as JSON-ready data and as one interactive HTML page.

    from hf_transformer.attention_view import attention_data, attention_page

    data = attention_data("runs/en-de", "A man is riding a bike.")               # the model's own greedy output
    data = attention_data("runs/en-de", "A man ...", target="Ein Mann ...")      # a given target, teacher-forced
    Path("attention.html").write_text(attention_page("runs/reviews", "정말 재미있는 영화였어요"), encoding="utf-8")

The page is one self-contained file (inline CSS, hand-written JavaScript, the data as JSON): it opens from
``file://`` with no network. Pick the attention kind, layer and head; hovering a query token (or a row of the
matrix) colours the keys by weight and shows each weight as a number; masked keys (source padding, the decoder's
look-ahead) are hatched; "All heads" shows one small matrix per layer and head. Command line:
``python scripts/explore_attention.py FOLDER "text" --output page.html``.

The page is package data (``attention_view.html`` beside this module, read with ``importlib.resources``): this
module runs the model (:func:`run_model`), assembles the page's data (:func:`page_data`) and fills it in
(:func:`render_page`).

Library check: BertViz's head and model views load require.js, d3 and jQuery from a CDN (and need IPython), and
altair's vega-embed loads its JavaScript from a CDN unless the whole of Vega is inlined; neither gives an offline
page with hover-to-read weights and hatched masks, so the page is written by hand here.
"""

from __future__ import annotations

import html
import json
import re
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import torch
from transformers.modeling_outputs import MaskedLMOutput

from .configuration_transformer import TransformerConfig
from .folders import CLASSIFICATION, MASKED_LM, SEQ2SEQ, task_of
from .inference import classification_scores
from .pipelines import generation_length, input_length_limit
from .saved_folder import MODEL, read_folder

KINDS = ("encoder", "decoder", "cross")
DECIMALS = 4
PAGE_FILE = "attention_view.html"  # package data: the page, with __TITLE__ and __DATA__ to fill in
SERVES = (SEQ2SEQ, CLASSIFICATION, MASKED_LM)

__all__ = [
    "KINDS",
    "MASKED_LM",
    "AttentionRun",
    "attention_data",
    "attention_page",
    "load_folder",
    "page_data",
    "page_template",
    "render_page",
    "run_model",
]


# --------------------------------------------------------------------------------------------------
# Loading


def load_folder(folder: str | Path):
    """The model (eval mode), its tokenizer and its task, from a folder saved by this package (or an adapter folder
    on one of its models). A folder that is missing raises ``FileNotFoundError``; one that holds no model of this
    package, or one of a class the view cannot show (a model without a head), raises ``ValueError`` naming it."""
    described = read_folder(folder, hub=False)
    if described.kind == MODEL and described.model_type != TransformerConfig.model_type:
        raise ValueError(f"{folder} holds a {described.model_type!r} model, not one of hf_transformer")
    model, tokenizer = described.open("the attention view", SERVES)
    return model, tokenizer, described.task


def _task_of_model(model) -> str:
    for names in ([type(model).__name__], getattr(model.config, "architectures", None) or []):
        try:
            return task_of(names)
        except ValueError:
            pass
    raise ValueError(f"cannot show the attention of a {type(model).__name__}: a seq2seq, classifier or masked-LM")


# --------------------------------------------------------------------------------------------------
# Running the model


@dataclass
class AttentionRun:
    """One pass of a model over a sentence with ``output_attentions=True``: the source token ids (``real`` of them
    before the padding), the ids the decoder read (the start token first; empty without a decoder), the attention
    weights of each kind present (``encoder``, ``decoder``, ``cross``: one (1, H, Q, K) tensor per layer) and the
    model's prediction (``translation``; ``label`` and ``score``; or ``filled``, the tokens at mask tokens)."""

    source_ids: list[int]
    real: int
    decoder_ids: list[int]
    attentions: dict[str, tuple[torch.Tensor, ...]]
    prediction: dict


def run_model(
    model,
    tokenizer,
    task: str,
    text: str,
    *,
    target: str | None = None,
    num_beams: int = 1,
    max_new_tokens: int | None = None,
    pad_to: int | None = None,
) -> AttentionRun:
    """Runs ``model`` (of ``task``) once on ``text`` (a seq2seq model's decoder reading ``target``, else its own
    output), in eval mode, and returns what it gave (:class:`AttentionRun`). A classifier's text is cut to the
    position table; a translator's text or target longer than it, or ``pad_to`` past it, raises ``ValueError`` in one
    line, as do an empty text or target, a target for a model without a decoder to read it, and counts below 1."""
    _check_arguments(text, target, num_beams, max_new_tokens, pad_to)
    if task != SEQ2SEQ:  # settings of the model's own output: a model without a decoder would ignore them
        given = [name for name, value in (("target", target), ("num_beams", num_beams if num_beams != 1 else None),
                 ("max_new_tokens", max_new_tokens)) if value is not None]  # fmt: skip
        if given:
            raise ValueError(f"{' and '.join(given)} applies to a seq2seq model; this one is a {task} model")
    config = model.config
    # As the Predictor reads a text: at most the smaller of the position table and the tokenizer's `model_max_length`.
    limit = input_length_limit(config, tokenizer)
    # A classifier reads a long text's first tokens, as it does everywhere else; a translator's text is refused.
    truncate = dict(truncation=True, max_length=limit) if task == CLASSIFICATION else {}
    source_ids = tokenizer(text, add_special_tokens=True, **truncate)["input_ids"]
    if len(source_ids) > limit:
        raise ValueError(f"the text is {len(source_ids)} tokens long; this model reads at most {limit}")
    real = len(source_ids)
    if pad_to is not None:
        if pad_to > config.max_position_embeddings:
            raise ValueError(
                f"pad_to={pad_to} is longer than the position table ({config.max_position_embeddings} tokens)"
            )
        source_ids = source_ids + [config.pad_token_id] * max(0, pad_to - real)
    device = next(model.parameters()).device
    input_ids = torch.tensor([source_ids], device=device)
    attention_mask = torch.tensor([[1] * real + [0] * (len(source_ids) - real)], device=device)
    source = {"input_ids": input_ids, "attention_mask": attention_mask}

    was_training = model.training
    model.eval()
    prediction: dict = {}
    decoder_ids: list[int] = []
    try:
        with torch.no_grad():
            if task == SEQ2SEQ:
                whole = _decoder_ids(model, tokenizer, source, target, num_beams, max_new_tokens)
                # The decoder reads at most its table's positions; a last token past them is never read back (it
                # is predicted at the position before), so the pass reads the sequence without it.
                table = config.decoder_max_position_embeddings or config.max_position_embeddings
                decoder_ids = whole[:table]
                ids = torch.tensor([decoder_ids], device=device)
                output = model(**source, decoder_input_ids=ids, output_attentions=True, use_cache=False)
                prediction["translation"] = tokenizer.decode(whole[1:], skip_special_tokens=True)
            else:
                output = model(**source, output_attentions=True)
                if task == CLASSIFICATION:
                    prediction.update(_label(output.logits[0], config))
                else:
                    prediction.update(_masked_tokens(output.logits[0], source_ids, tokenizer))
    finally:
        model.train(was_training)

    encoder = output.attentions if isinstance(output, MaskedLMOutput) else output.encoder_attentions
    attentions = {"encoder": encoder}
    if getattr(output, "decoder_attentions", None):  # seq2seq, or a classifier reading out through the decoder
        attentions["decoder"] = output.decoder_attentions
        attentions["cross"] = output.cross_attentions
        decoder_ids = decoder_ids or [config.decoder_start_token_id]  # classifier_pooling="decoder": one start token
    return AttentionRun(source_ids, real, decoder_ids, attentions, prediction)


def _new_token_limit(model, max_new_tokens: int | None) -> int:
    """The predictor's generation length (:func:`hf_transformer.pipelines.generation_length`: `max_new_tokens`, else
    the folder's generation config, else the decoder's table)."""
    return generation_length(model.config, model.generation_config, max_new_tokens)


def _decoder_ids(model, tokenizer, source, target, num_beams, max_new_tokens) -> list[int]:
    """The start token, then the target's tokens (its end token included) or the model's own output, as the
    Predictor generates it: at most one token more than the decoder's table holds (the last is never read back)."""
    config = model.config
    table = config.decoder_max_position_embeddings or config.max_position_embeddings
    start = config.decoder_start_token_id
    if target is not None:
        labels = tokenizer(text_target=target)["input_ids"]
        if len(labels) > table:
            raise ValueError(
                f"the target is {len(labels)} tokens long and the decoder predicts at most {table} (its position table)"
            )
        return [start, *labels]
    # As the Predictor: the limit goes in the field the saved generation config uses (setting both warns).
    limit = _new_token_limit(model, max_new_tokens)
    if model.generation_config.to_diff_dict().get("max_new_tokens"):
        length = {"max_new_tokens": limit}
    else:
        length = {"max_length": limit + 1}  # counts the start token
    generated = model.generate(**source, num_beams=num_beams, do_sample=False, num_return_sequences=1, **length)
    generated = generated[0].tolist()
    if config.pad_token_id is not None:
        while len(generated) > 1 and generated[-1] == config.pad_token_id:
            generated.pop()
    return generated


def _label(logits: torch.Tensor, config) -> dict:
    """The best label and its score, as the Predictor scores them (a regression head: its value, no label)."""
    scores = classification_scores(logits, config)
    if config.problem_type == "regression":
        return {"label": None, "score": round(float(scores[0]), DECIMALS)}
    best = int(scores.argmax())
    return {"label": config.id2label.get(best, str(best)), "score": round(float(scores[best]), DECIMALS)}


def _masked_tokens(logits: torch.Tensor, source_ids: list[int], tokenizer) -> dict:
    mask_id = getattr(tokenizer, "mask_token_id", None)
    filled = [
        {"index": index, "token": tokenizer.convert_ids_to_tokens(int(logits[index].argmax()))}
        for index, token in enumerate(source_ids)
        if mask_id is not None and token == mask_id
    ]
    return {"filled": filled}


# --------------------------------------------------------------------------------------------------
# The page's data


def _check_count(name: str, value, least: int) -> None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < least):
        raise ValueError(f"{name} must be an integer of at least {least}, got {value!r}")


def _check_arguments(text, target, num_beams, max_new_tokens, pad_to) -> None:
    if text is None or (isinstance(text, str) and not text.strip()):
        raise ValueError("the text is empty: give a sentence to look at")
    if not isinstance(text, str):
        raise TypeError(f"text must be a string, got {type(text).__name__}")
    if target is not None and (not isinstance(target, str) or not target.strip()):
        raise ValueError("the target is empty: give the target text, or leave it out to use the model's own output")
    _check_count("num_beams", num_beams, 1)
    _check_count("max_new_tokens", max_new_tokens, 1)
    _check_count("pad_to", pad_to, 1)


def _rounded(attentions) -> list:
    """(layers of (1, H, Q, K)) -> nested lists [layer][head][query][key], rounded."""
    return [layer[0].float().cpu().round(decimals=DECIMALS).tolist() for layer in attentions]


def page_data(
    run: AttentionRun, tokenizer, config, *, task: str, name: str, text: str, target: str | None, num_beams: int
) -> dict:
    """The JSON-ready data of the page (:func:`attention_data`'s) from what ``run_model`` gave."""
    attention = {kind: _rounded(weights) for kind, weights in run.attentions.items()}
    target_tokens = tokenizer.convert_ids_to_tokens(run.decoder_ids) if "decoder" in attention else []
    length = len(target_tokens)
    return {
        "task": task,
        "model": name,
        "text": text,
        "target": target,
        "source_tokens": tokenizer.convert_ids_to_tokens(run.source_ids),
        "target_tokens": target_tokens,
        "attention": attention,
        "layers": {kind: len(weights) for kind, weights in attention.items()},
        "heads": config.num_attention_heads,
        "masks": {
            "source_padding": [index >= run.real for index in range(len(run.source_ids))],
            "target_padding": [False] * length,
            "look_ahead": [[key > query for key in range(length)] for query in range(length)],
        },
        "prediction": run.prediction,
        "num_beams": num_beams if task == SEQ2SEQ and target is None else None,
    }


def attention_data(
    model_or_folder,
    text: str,
    *,
    tokenizer=None,
    target: str | None = None,
    num_beams: int = 1,
    max_new_tokens: int | None = None,
    pad_to: int | None = None,
) -> dict:
    """Runs the model once on ``text`` with ``output_attentions=True`` and returns JSON-ready data:

    - ``task``: "seq2seq", "classification" or "masked-lm" (from the model's class, ``config.architectures``);
    - ``source_tokens``: the text as the tokenizer splits it; ``target_tokens``: what the decoder reads, the start
      token first, then ``target`` tokenized with ``text_target=`` (its end token included), or the model's own
      output (greedy, or beam search with ``num_beams``; ``max_new_tokens`` caps it); empty without a decoder;
    - ``attention``: for each kind present, ``encoder`` (self-attention over the source), ``decoder``
      (self-attention over the target) and ``cross`` (target queries over source keys), the weights as nested
      lists ``[layer][head][query][key]`` rounded to 4 decimals. Classifiers and masked-LMs have ``encoder`` only;
      a classifier with ``classifier_pooling="decoder"`` has all three, its decoder reading one start token;
    - ``masks``: ``source_padding`` and ``target_padding`` (True for a key the model may not read because it is
      padding; none for one sentence unless ``pad_to`` pads the source to that many tokens) and ``look_ahead``,
      [query][key] True where the decoder's key lies after its query;
    - ``prediction``: the model's output for the text (``translation``; ``label`` and ``score``; or the tokens
      predicted at mask tokens), ``layers`` and ``heads`` per kind, ``model`` (the folder or class name).

    ``model_or_folder``: a folder saved by this package (its tokenizer beside it), or a loaded model with its
    ``tokenizer``. Bad input (empty text, text or target longer than the position table, a folder that holds no
    model of this package) raises ``ValueError`` (``FileNotFoundError`` for a missing folder) in one line.
    """
    _check_arguments(text, target, num_beams, max_new_tokens, pad_to)  # before a folder is loaded (run_model too)
    if isinstance(model_or_folder, (str, Path)):
        model, loaded_tokenizer, task = load_folder(model_or_folder)
        tokenizer = tokenizer or loaded_tokenizer
        name = str(model_or_folder)
    else:
        model, task = model_or_folder, _task_of_model(model_or_folder)
        if tokenizer is None:
            raise ValueError("a loaded model needs its tokenizer: attention_data(model, text, tokenizer=...)")
        name = getattr(model.config, "_name_or_path", "") or type(model).__name__
    run = run_model(
        model, tokenizer, task, text, target=target, num_beams=num_beams, max_new_tokens=max_new_tokens, pad_to=pad_to
    )
    options = dict(task=task, name=name, text=text, target=target, num_beams=num_beams)
    return page_data(run, tokenizer, model.config, **options)


# --------------------------------------------------------------------------------------------------
# The page


def attention_page(model_or_folder, text: str, **options) -> str:
    """One self-contained HTML document exploring :func:`attention_data` of ``text`` (same arguments): inline CSS
    and JavaScript, the data embedded as JSON, no network. Controls: ``#kind``, ``#layer``, ``#head`` selectors,
    ``#all-heads`` / ``#one-head`` buttons. Hovering ``.token.query[data-index=i]`` fills each
    ``.weight[data-key=j]`` with its weight (``data-weight``, colour and number); the matrix holds
    ``td.cell[data-query][data-key][data-weight]``; the all-heads grid has one ``.head-cell`` per layer and head."""
    return render_page(attention_data(model_or_folder, text, **options))


def page_template() -> str:
    """The page as the package holds it (``attention_view.html``), ``__TITLE__`` and ``__DATA__`` still to fill."""
    return resources.files(__package__).joinpath(PAGE_FILE).read_text(encoding="utf-8")


def render_page(data: dict) -> str:
    """The HTML page of data made by :func:`attention_data`."""
    embedded = json.dumps(data, ensure_ascii=False, separators=(",", ":"))
    # Inside <script> the JSON must not close the element or open a comment: escape <, > and & as \\u escapes.
    embedded = embedded.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
    title = html.escape(f"Attention: {data['text']}", quote=True)
    filling = {"__TITLE__": title, "__DATA__": embedded}
    # One pass: the text may hold either name.
    return re.sub("__TITLE__|__DATA__", lambda match: filling[match.group(0)], page_template())
