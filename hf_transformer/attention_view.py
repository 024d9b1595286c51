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

Library check: BertViz's head and model views load require.js, d3 and jQuery from a CDN (and need IPython), and
altair's vega-embed loads its JavaScript from a CDN unless the whole of Vega is inlined; neither gives an offline
page with hover-to-read weights and hatched masks, so the page is written by hand here.
"""

from __future__ import annotations

import html
import json
import re
from pathlib import Path
from types import SimpleNamespace

import torch
from transformers.modeling_outputs import MaskedLMOutput

from .folders import CLASSIFICATION, MASKED_LM, SEQ2SEQ, is_adapter_folder, task_of
from .pipelines import generation_length

KINDS = ("encoder", "decoder", "cross")
DECIMALS = 4

__all__ = ["KINDS", "MASKED_LM", "attention_data", "attention_page", "load_folder"]


# --------------------------------------------------------------------------------------------------
# Loading


def task_of_names(names) -> str | None:
    """`seq2seq`, `classification` or `masked-lm` from class names (``config.architectures``), None if none fits."""
    try:
        return task_of(SimpleNamespace(architectures=list(names or []), is_encoder_decoder=False))
    except ValueError:
        return None


def load_folder(folder: str | Path):
    """The model (eval mode), its tokenizer and its task, from a folder saved by this package. A folder that is
    missing raises ``FileNotFoundError``; one that holds no model of this package raises ``ValueError`` naming it."""
    from transformers import (
        AutoConfig,
        AutoModelForMaskedLM,
        AutoModelForSeq2SeqLM,
        AutoModelForSequenceClassification,
        AutoTokenizer,
    )

    from .configuration_transformer import TransformerConfig

    path = Path(folder)
    if not path.is_dir():
        raise FileNotFoundError(f"No model folder at {folder}.")
    if is_adapter_folder(path):  # LoRA adapters (peft): merged into their base model's weights
        from .adapters import load_merged

        model, tokenizer, task = load_merged(path)
        return model.eval(), tokenizer, task
    config_file = path / "config.json"
    if not config_file.is_file():
        raise ValueError(f"{folder} is not a model folder: it has no config.json")
    try:
        model_type = json.loads(config_file.read_text(encoding="utf-8")).get("model_type")
    except (ValueError, AttributeError) as error:
        raise ValueError(f"{folder} is not a model folder: its config.json does not read as a JSON object") from error
    if model_type != TransformerConfig.model_type:
        raise ValueError(f"{folder} holds a {model_type!r} model, not one of hf_transformer")
    config = AutoConfig.from_pretrained(path)
    task = task_of_names(config.architectures) or SEQ2SEQ  # an encoder-decoder config without a head: seq2seq
    auto = {SEQ2SEQ: AutoModelForSeq2SeqLM, CLASSIFICATION: AutoModelForSequenceClassification}
    model = auto.get(task, AutoModelForMaskedLM).from_pretrained(path, config=config).eval()
    try:
        tokenizer = AutoTokenizer.from_pretrained(path)
    except (OSError, ValueError) as error:
        raise ValueError(f"{folder} has no tokenizer saved beside the model") from error
    return model, tokenizer, task


def _task_of_model(model) -> str:
    task = task_of_names([type(model).__name__]) or task_of_names(getattr(model.config, "architectures", None))
    if task is None:
        raise ValueError(f"cannot show the attention of a {type(model).__name__}: a seq2seq, classifier or masked-LM")
    return task


# --------------------------------------------------------------------------------------------------
# The data


def _rounded(attentions) -> list:
    """(layers of (1, H, Q, K)) -> nested lists [layer][head][query][key], rounded."""
    return [layer[0].float().cpu().round(decimals=DECIMALS).tolist() for layer in attentions]


def _check_count(name: str, value, least: int) -> None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < least):
        raise ValueError(f"{name} must be an integer of at least {least}, got {value!r}")


def _new_token_limit(model, max_new_tokens: int | None) -> int:
    """The predictor's generation length (:func:`hf_transformer.pipelines.generation_length`: `max_new_tokens`, else
    the folder's generation config, else the decoder's table), one token shorter where needed so that the start
    token and the whole target fit the decoder's table for the attention pass."""
    table = model.config.decoder_max_position_embeddings or model.config.max_position_embeddings
    return max(1, min(generation_length(model.config, model.generation_config, max_new_tokens), table - 1))


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
    if text is None or (isinstance(text, str) and not text.strip()):
        raise ValueError("the text is empty: give a sentence to look at")
    if not isinstance(text, str):
        raise TypeError(f"text must be a string, got {type(text).__name__}")
    if target is not None and (not isinstance(target, str) or not target.strip()):
        raise ValueError("the target is empty: give the target text, or leave it out to use the model's own output")
    _check_count("num_beams", num_beams, 1)
    _check_count("max_new_tokens", max_new_tokens, 1)
    _check_count("pad_to", pad_to, 1)

    if isinstance(model_or_folder, (str, Path)):
        model, loaded_tokenizer, task = load_folder(model_or_folder)
        tokenizer = tokenizer or loaded_tokenizer
        name = str(model_or_folder)
    else:
        model, task = model_or_folder, _task_of_model(model_or_folder)
        if tokenizer is None:
            raise ValueError("a loaded model needs its tokenizer: attention_data(model, text, tokenizer=...)")
        name = getattr(model.config, "_name_or_path", "") or type(model).__name__
    config = model.config
    if task != SEQ2SEQ and target is not None:
        raise ValueError(f"target applies to a seq2seq model; this one is a {task} model")

    source_ids = tokenizer(text, add_special_tokens=True)["input_ids"]
    limit = config.max_position_embeddings
    if len(source_ids) > limit:
        raise ValueError(
            f"the text is {len(source_ids)} tokens long; this model reads at most {limit} (its position table)"
        )
    real = len(source_ids)
    if pad_to is not None:
        if pad_to > limit:
            raise ValueError(f"pad_to={pad_to} is longer than the position table ({limit} tokens)")
        source_ids = source_ids + [config.pad_token_id] * max(0, pad_to - real)
    device = next(model.parameters()).device
    input_ids = torch.tensor([source_ids], device=device)
    attention_mask = torch.tensor([[1] * real + [0] * (len(source_ids) - real)], device=device)
    source = {"input_ids": input_ids, "attention_mask": attention_mask}

    was_training = model.training
    model.eval()
    prediction: dict = {}
    try:
        with torch.no_grad():
            if task == SEQ2SEQ:
                decoder_ids = _decoder_ids(model, tokenizer, source, target, num_beams, max_new_tokens, device)
                output = model(**source, decoder_input_ids=decoder_ids, output_attentions=True, use_cache=False)
                generated = decoder_ids[0, 1:].tolist()
                prediction["translation"] = tokenizer.decode(generated, skip_special_tokens=True)
            else:
                decoder_ids = None
                output = model(**source, output_attentions=True)
                if task == CLASSIFICATION:
                    prediction.update(_label(output.logits[0], config))
                else:
                    prediction.update(_masked_tokens(output.logits[0], source_ids, tokenizer))
    finally:
        model.train(was_training)

    encoder = output.attentions if isinstance(output, MaskedLMOutput) else output.encoder_attentions
    attention = {"encoder": _rounded(encoder)}
    target_tokens: list[str] = []
    if getattr(output, "decoder_attentions", None):  # seq2seq, or a classifier reading out through the decoder
        attention["decoder"] = _rounded(output.decoder_attentions)
        attention["cross"] = _rounded(output.cross_attentions)
        if decoder_ids is None:  # classifier_pooling="decoder": the decoder read one start token
            decoder_ids = torch.tensor([[config.decoder_start_token_id]])
        target_tokens = tokenizer.convert_ids_to_tokens(decoder_ids[0].tolist())
    length = len(target_tokens)
    return {
        "task": task,
        "model": name,
        "text": text,
        "target": target,
        "source_tokens": tokenizer.convert_ids_to_tokens(source_ids),
        "target_tokens": target_tokens,
        "attention": attention,
        "layers": {kind: len(weights) for kind, weights in attention.items()},
        "heads": config.num_attention_heads,
        "masks": {
            "source_padding": [index >= real for index in range(len(source_ids))],
            "target_padding": [False] * length,
            "look_ahead": [[key > query for key in range(length)] for query in range(length)],
        },
        "prediction": prediction,
        "num_beams": num_beams if task == SEQ2SEQ and target is None else None,
    }


def _decoder_ids(model, tokenizer, source, target, num_beams, max_new_tokens, device) -> torch.Tensor:
    """(1, T): the start token, then the target's tokens (its end token included) or the model's own output."""
    config = model.config
    table = config.decoder_max_position_embeddings or config.max_position_embeddings
    start = config.decoder_start_token_id
    if target is not None:
        labels = tokenizer(text_target=target)["input_ids"]
        if len(labels) + 1 > table:
            raise ValueError(
                f"the target is {len(labels)} tokens long and the decoder reads at most {table - 1} after its start "
                "token (its position table)"
            )
        return torch.tensor([[start, *labels]], device=device)
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
    return torch.tensor([generated], device=device)


def _label(logits: torch.Tensor, config) -> dict:
    logits = logits.float()
    if config.problem_type == "regression":
        return {"label": None, "score": round(float(logits[0]), DECIMALS)}
    multi = config.problem_type == "multi_label_classification" or config.num_labels == 1
    scores = logits.sigmoid() if multi else logits.softmax(-1)
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
# The page


def attention_page(model_or_folder, text: str, **options) -> str:
    """One self-contained HTML document exploring :func:`attention_data` of ``text`` (same arguments): inline CSS
    and JavaScript, the data embedded as JSON, no network. Controls: ``#kind``, ``#layer``, ``#head`` selectors,
    ``#all-heads`` / ``#one-head`` buttons. Hovering ``.token.query[data-index=i]`` fills each
    ``.weight[data-key=j]`` with its weight (``data-weight``, colour and number); the matrix holds
    ``td.cell[data-query][data-key][data-weight]``; the all-heads grid has one ``.head-cell`` per layer and head."""
    return render_page(attention_data(model_or_folder, text, **options))


def render_page(data: dict) -> str:
    """The HTML page of data made by :func:`attention_data`."""
    embedded = json.dumps(data, ensure_ascii=False, separators=(",", ":"))
    # Inside <script> the JSON must not close the element or open a comment: escape <, > and & as \\u escapes.
    embedded = embedded.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
    title = html.escape(f"Attention: {data['text']}", quote=True)
    filling = {"__TITLE__": title, "__DATA__": embedded}
    return re.sub("__TITLE__|__DATA__", lambda match: filling[match.group(0)], _PAGE)  # one pass: text may hold either


_PAGE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>__TITLE__</title>
<style>
  :root { --ink: #1f2933; --muted: #6b7280; --line: #d9dee5; --accent: 37, 99, 235; --query: #f59e0b; }
  * { box-sizing: border-box; }
  body { margin: 0; padding: 16px 20px 28px; color: var(--ink); background: #fff;
         font: 14px/1.4 system-ui, -apple-system, "Segoe UI", "Noto Sans", "Noto Sans CJK KR", sans-serif; }
  h1 { font-size: 18px; margin: 0 0 4px; }
  .sub { color: var(--muted); margin: 0 0 10px; }
  .sub b { color: var(--ink); font-weight: 600; }
  .controls { display: flex; flex-wrap: wrap; gap: 12px; align-items: center; padding: 8px 10px;
              background: #f5f7fa; border: 1px solid var(--line); border-radius: 6px; margin-bottom: 10px; }
  .controls label { font-weight: 600; }
  select, button { font: inherit; padding: 3px 8px; border: 1px solid #b8c0cc; border-radius: 4px; background: #fff; }
  button { cursor: pointer; }
  button.on { background: rgb(var(--accent)); color: #fff; border-color: rgb(var(--accent)); }
  .tokens-line { margin: 4px 0; }
  .tokens-line .name { display: inline-block; min-width: 64px; color: var(--muted); }
  .chip { display: inline-block; margin: 2px 2px; padding: 0 4px; border: 1px solid var(--line); border-radius: 3px;
          background: #fafbfc; white-space: pre; font-size: 12px;
          font-family: ui-monospace, "DejaVu Sans Mono", monospace; }
  .chip.pad { color: var(--muted); border-style: dashed; }
  .legend { display: flex; flex-wrap: wrap; gap: 16px; align-items: center; color: var(--muted); margin: 8px 0; }
  .legend .swatch { display: inline-block; width: 28px; height: 14px; vertical-align: middle; margin-right: 4px;
                    border: 1px solid var(--line); }
  .legend .scale { width: 110px;
                   background: linear-gradient(to right, rgba(var(--accent), 0), rgba(var(--accent), 1)); }
  .caption { color: var(--muted); margin: 4px 0 8px; }
  #main { display: flex; gap: 28px; align-items: flex-start; flex-wrap: wrap; }
  .column h2, .matrix-box h2 { font-size: 13px; margin: 0 0 6px; color: var(--muted); font-weight: 600; }
  .token { display: block; height: 20px; line-height: 18px; padding: 1px 6px; margin: 1px 0; border-radius: 3px;
           white-space: pre; overflow: hidden;
           font-family: ui-monospace, "DejaVu Sans Mono", monospace; font-size: 13px; }
  .token.query { cursor: pointer; border: 1px solid transparent; }
  .token.query:hover, .token.query:focus { border-color: var(--query); outline: none; }
  .token.query.active { background: var(--query); color: #fff; }
  .token.query.pad { color: var(--muted); }
  .key-row { display: grid; grid-template-columns: var(--key-width, 80px) 56px 90px; gap: 6px; align-items: center;
             margin: 1px 0; border-radius: 3px; }
  .key-row .token { margin: 0; }
  .weight { text-align: right; font-variant-numeric: tabular-nums; font-size: 12px; }
  .bar { height: 10px; background: #eef1f5; border-radius: 2px; overflow: hidden; }
  .bar span { display: block; height: 100%; background: rgb(var(--accent)); }
  .masked-pad { background-color: #eceff3;
                background-image: repeating-linear-gradient(45deg, #9aa3ae 0 1.5px, transparent 1.5px 6px); }
  .masked-ahead { background-color: #fdf1e1;
                  background-image: repeating-linear-gradient(-45deg, #d08a2c 0 1.5px, transparent 1.5px 6px); }
  .key-row.masked-pad .token, .key-row.masked-ahead .token { color: var(--muted); text-decoration: line-through; }
  .matrix-box { overflow: auto; max-width: 100%; }
  table.matrix { border-collapse: collapse; }
  table.matrix td.cell { width: 20px; height: 20px; border: 1px solid #fff; padding: 0; }
  table.matrix th { font-weight: 400; font-family: ui-monospace, "DejaVu Sans Mono", monospace; font-size: 11px;
                    white-space: pre; color: var(--ink); padding: 0 4px; }
  table.matrix th.col { writing-mode: vertical-rl; transform: rotate(180deg); text-align: left; padding: 4px 0; }
  table.matrix th.row { text-align: right; cursor: pointer; }
  table.matrix tr.active th.row { background: var(--query); color: #fff; }
  table.matrix tr.active td.cell { border-top-color: var(--query); border-bottom-color: var(--query); }
  #grid { display: none; }
  .grid-row { display: flex; gap: 10px; align-items: center; margin-bottom: 10px; }
  .grid-row .layer-name { width: 64px; color: var(--muted); font-weight: 600; }
  .head-cell { border: 2px solid transparent; border-radius: 4px; padding: 3px; cursor: pointer; text-align: center;
               font-size: 11px; color: var(--muted); }
  .head-cell:hover { border-color: #b8c0cc; }
  .head-cell.current { border-color: var(--query); }
  .head-cell canvas { display: block; image-rendering: pixelated; border: 1px solid var(--line); }
</style>
</head>
<body>
<h1>Attention explorer</h1>
<p class="sub" id="summary"></p>
<div id="tokens"></div>
<div class="controls">
  <span><label for="kind">Attention</label> <select id="kind"></select></span>
  <span><label for="layer">Layer</label> <select id="layer"></select></span>
  <span><label for="head">Head</label> <select id="head"></select></span>
  <span><button id="one-head" class="on" type="button">One head</button>
        <button id="all-heads" type="button">All heads</button></span>
</div>
<div class="legend">
  <span><span class="swatch scale"></span>weight 0 &rarr; 1 (colour: square root)</span>
  <span id="legend-pad"><span class="swatch masked-pad"></span>masked: padding</span>
  <span id="legend-ahead"><span class="swatch masked-ahead"></span>masked: look-ahead (a later token)</span>
  <span><span class="swatch" style="background: var(--query)"></span>query (hover a token)</span>
</div>
<p class="caption" id="caption"></p>
<div id="main">
  <div class="column"><h2 id="query-title">Queries</h2><div id="queries"></div></div>
  <div class="column"><h2 id="key-title">Keys and weights</h2><div id="keys"></div></div>
  <div class="matrix-box"><h2>Matrix (rows: queries, columns: keys)</h2><table class="matrix" id="matrix"></table></div>
</div>
<div id="grid"></div>
<script type="application/json" id="attention-data">__DATA__</script>
<script>
(function () {
  "use strict";
  var DATA = JSON.parse(document.getElementById("attention-data").textContent);
  var KINDS = {
    encoder: { title: "Encoder self-attention", queries: "source", keys: "source",
               caption: "Each source token (query) reads every source token (keys); padding keys are masked." },
    decoder: { title: "Decoder self-attention", queries: "target", keys: "target",
               caption: "Each target token reads itself and the tokens before it: later tokens are masked " +
                        "(look-ahead). The row of token i predicts token i+1." },
    cross: { title: "Cross-attention", queries: "target", keys: "source",
             caption: "Each target token (query) reads the encoder's output for every source token (keys)." }
  };
  var state = { kind: null, layer: 0, head: 0, query: 0, view: "one" };
  var $ = function (id) { return document.getElementById(id); };

  function el(tag, className, text) {
    var node = document.createElement(tag);
    if (className) { node.className = className; }
    if (text !== undefined) { node.textContent = text; }
    return node;
  }
  function tokens(side) { return side === "source" ? DATA.source_tokens : DATA.target_tokens; }
  function weights() { return DATA.attention[state.kind][state.layer][state.head]; }
  function padded(side, index) {
    var mask = side === "source" ? DATA.masks.source_padding : DATA.masks.target_padding;
    return Boolean(mask[index]);
  }
  // Why key k is hidden from query q: "pad", "ahead" or "" (readable).
  function masked(kind, q, k) {
    if (padded(KINDS[kind].keys, k)) { return "pad"; }
    if (kind === "decoder" && DATA.masks.look_ahead[q][k]) { return "ahead"; }
    return "";
  }
  function reason(why) { return why === "pad" ? "padding" : "look-ahead"; }
  // Colour intensity: the square root of the weight, so that the many small weights of a long sentence still show.
  function shade(w) { return "rgba(37, 99, 235, " + Math.sqrt(Math.max(0, Math.min(1, w))).toFixed(3) + ")"; }
  function option(select, value, text) {
    var o = el("option", "", text);
    o.value = String(value);
    select.appendChild(o);
  }

  function summary() {
    var parts = [["model", DATA.model], ["task", DATA.task]];
    var p = DATA.prediction || {};
    if (p.translation !== undefined) {
      parts.push(DATA.target === null ? ["output", p.translation] : ["target", DATA.target]);
    }
    if (p.label !== undefined) { parts.push(["label", String(p.label) + " (" + p.score + ")"]); }
    if (p.filled && p.filled.length) {
      parts.push(["mask tokens", p.filled.map(function (f) { return f.token; }).join(" ")]);
    }
    var box = $("summary");
    parts.forEach(function (pair, i) {
      if (i) { box.appendChild(document.createTextNode("  \\u00b7  ")); }
      box.appendChild(document.createTextNode(pair[0] + ": "));
      box.appendChild(el("b", "", pair[1]));
    });
    var lines = [["source", DATA.source_tokens, DATA.masks.source_padding]];
    if (DATA.target_tokens.length) { lines.push(["target", DATA.target_tokens, DATA.masks.target_padding]); }
    lines.forEach(function (line) {
      var div = el("div", "tokens-line");
      div.id = line[0] + "-tokens";
      div.appendChild(el("span", "name", line[0] + " (" + line[1].length + ")"));
      line[1].forEach(function (token, i) {
        var chip = el("span", "chip" + (line[2][i] ? " pad" : ""), token);
        chip.title = line[0] + " token " + i;
        chip.setAttribute("data-index", String(i));
        div.appendChild(chip);
      });
      $("tokens").appendChild(div);
    });
    var anyPad = DATA.masks.source_padding.some(Boolean) || DATA.masks.target_padding.some(Boolean);
    $("legend-pad").style.display = anyPad ? "" : "none";
  }

  function fillKinds() {
    ["encoder", "decoder", "cross"].forEach(function (kind) {
      if (DATA.attention[kind]) { option($("kind"), kind, KINDS[kind].title); }
    });
    state.kind = $("kind").value;
  }
  function fillLayersAndHeads() {
    var layers = DATA.attention[state.kind].length, heads = DATA.attention[state.kind][0].length;
    state.layer = Math.min(state.layer, layers - 1);
    state.head = Math.min(state.head, heads - 1);
    $("layer").innerHTML = ""; $("head").innerHTML = "";
    for (var l = 0; l < layers; l++) { option($("layer"), l, String(l + 1)); }
    for (var h = 0; h < heads; h++) { option($("head"), h, String(h + 1)); }
    $("layer").value = String(state.layer); $("head").value = String(state.head);
  }

  function renderMain() {
    var info = KINDS[state.kind], W = weights();
    var qs = tokens(info.queries), ks = tokens(info.keys);
    state.query = Math.min(state.query, qs.length - 1);
    $("query-title").textContent = "Queries (" + info.queries + ")";
    $("key-title").textContent = "Keys (" + info.keys + ") and weights";
    var queries = $("queries"), keys = $("keys"), matrix = $("matrix");
    queries.innerHTML = ""; keys.innerHTML = ""; matrix.innerHTML = "";
    qs.forEach(function (token, i) {
      var node = el("span", "token query" + (padded(info.queries, i) ? " pad" : ""), token);
      node.setAttribute("data-index", String(i));
      node.tabIndex = 0;
      node.title = info.queries + " token " + i;
      node.addEventListener("mouseover", function () { highlight(i); });
      node.addEventListener("focus", function () { highlight(i); });
      queries.appendChild(node);
    });
    ks.forEach(function (token, j) {
      var row = el("div", "key-row");
      row.setAttribute("data-key", String(j));
      var name = el("span", "token key", token);
      name.setAttribute("data-index", String(j));
      var weight = el("span", "weight");
      weight.setAttribute("data-key", String(j));
      var bar = el("span", "bar"); bar.appendChild(el("span"));
      row.appendChild(name); row.appendChild(weight); row.appendChild(bar);
      keys.appendChild(row);
    });
    // One width for every key row's token, from the longest token (East Asian characters count twice).
    var widest = Math.max.apply(null, ks.map(function (token) {
      return Array.from(token).reduce(function (n, c) { return n + (c.codePointAt(0) >= 0x1100 ? 2 : 1); }, 0);
    }).concat([4]));
    keys.style.setProperty("--key-width", "calc(" + widest + "ch + 14px)");
    var head = el("tr"); head.appendChild(el("th"));
    ks.forEach(function (token, j) { var th = el("th", "col", token); th.title = "key " + j; head.appendChild(th); });
    matrix.appendChild(head);
    qs.forEach(function (token, i) {
      var tr = el("tr"); tr.setAttribute("data-query", String(i));
      var th = el("th", "row", token); th.setAttribute("data-index", String(i));
      th.addEventListener("mouseover", function () { highlight(i); });
      tr.appendChild(th);
      ks.forEach(function (_, j) {
        var why = masked(state.kind, i, j), w = W[i][j];
        var td = el("td", "cell" + (why ? " masked-" + why : ""));
        td.setAttribute("data-query", String(i)); td.setAttribute("data-key", String(j));
        td.setAttribute("data-weight", String(w));
        if (!why) { td.style.backgroundColor = shade(w); }
        td.title = qs[i] + " \\u2192 " + ks[j] + ": " + (why ? "masked (" + reason(why) + ")" : w.toFixed(4));
        td.addEventListener("mouseover", function () { highlight(i); });
        tr.appendChild(td);
      });
      matrix.appendChild(tr);
    });
    highlight(state.query);
  }

  function highlight(q) {
    state.query = q;
    var W = weights()[q];
    Array.prototype.forEach.call(document.querySelectorAll("#queries .token.query"), function (node) {
      node.classList.toggle("active", Number(node.getAttribute("data-index")) === q);
    });
    Array.prototype.forEach.call(document.querySelectorAll("#keys .key-row"), function (row) {
      var j = Number(row.getAttribute("data-key")), w = W[j], why = masked(state.kind, q, j);
      var weight = row.querySelector(".weight");
      weight.setAttribute("data-weight", String(w));
      weight.setAttribute("data-query", String(q));
      weight.textContent = why ? "masked" : w.toFixed(3);
      row.className = "key-row" + (why ? " masked-" + why : "");
      row.style.backgroundColor = why ? "" : shade(w * 0.8);
      row.style.color = !why && w > 0.4 ? "#fff" : "";
      row.querySelector(".bar span").style.width = (why ? 0 : 100 * w) + "%";
      row.title = why ? "masked: " + reason(why) : "weight " + w.toFixed(4);
    });
    Array.prototype.forEach.call(document.querySelectorAll("#matrix tr[data-query]"), function (tr) {
      tr.classList.toggle("active", Number(tr.getAttribute("data-query")) === q);
    });
  }

  function drawHead(canvas, W, kind) {
    var rows = W.length, cols = W[0].length, size = Math.max(3, Math.min(12, Math.floor(132 / Math.max(rows, cols))));
    canvas.width = cols * size; canvas.height = rows * size;
    var ctx = canvas.getContext("2d");
    for (var i = 0; i < rows; i++) {
      for (var j = 0; j < cols; j++) {
        var why = masked(kind, i, j);
        ctx.fillStyle = why === "pad" ? "#c9ced6" : why === "ahead" ? "#f6dfbf" : "#fff";
        ctx.fillRect(j * size, i * size, size, size);
        if (!why) { ctx.fillStyle = shade(W[i][j]); ctx.fillRect(j * size, i * size, size, size); }
      }
    }
  }
  function renderGrid() {
    var grid = $("grid"), kind = state.kind;
    grid.innerHTML = "";
    DATA.attention[kind].forEach(function (layer, l) {
      var row = el("div", "grid-row");
      row.appendChild(el("div", "layer-name", "Layer " + (l + 1)));
      layer.forEach(function (W, h) {
        var cell = el("div", "head-cell" + (l === state.layer && h === state.head ? " current" : ""));
        cell.setAttribute("data-layer", String(l)); cell.setAttribute("data-head", String(h));
        cell.title = "layer " + (l + 1) + ", head " + (h + 1) + ": click to open";
        var canvas = el("canvas"); drawHead(canvas, W, kind);
        cell.appendChild(canvas); cell.appendChild(el("div", "", "head " + (h + 1)));
        cell.addEventListener("click", function () {
          state.layer = l; state.head = h;
          $("layer").value = String(l); $("head").value = String(h);
          show("one");
        });
        row.appendChild(cell);
      });
      grid.appendChild(row);
    });
  }

  function show(view) {
    state.view = view;
    $("main").style.display = view === "one" ? "flex" : "none";
    $("grid").style.display = view === "all" ? "block" : "none";
    $("one-head").classList.toggle("on", view === "one");
    $("all-heads").classList.toggle("on", view === "all");
    $("head").disabled = view === "all";
    $("layer").disabled = view === "all";
    $("legend-ahead").style.display = state.kind === "decoder" ? "" : "none";
    $("caption").textContent = KINDS[state.kind].caption + (view === "all" ? " Click a head to open it." : "");
    if (view === "one") { renderMain(); } else { renderGrid(); }
  }

  $("kind").addEventListener("change", function () {
    state.kind = this.value;
    fillLayersAndHeads();
    show(state.view);
  });
  $("layer").addEventListener("change", function () { state.layer = Number(this.value); show(state.view); });
  $("head").addEventListener("change", function () { state.head = Number(this.value); show(state.view); });
  $("one-head").addEventListener("click", function () { show("one"); });
  $("all-heads").addEventListener("click", function () { show("all"); });

  summary();
  fillKinds();
  fillLayersAndHeads();
  show("one");
  document.body.setAttribute("data-ready", "true");
})();
</script>
</body>
</html>
"""
