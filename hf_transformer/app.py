"""A demo app for a saved folder, in Gradio (as on Hugging Face Spaces): a sentence in, its translation (or its
label and scores) out, and the model's attention for it beside them (:mod:`hf_transformer.attention_view`).

    pip install -e ".[demo]"
    python -m hf_transformer.app runs/en-de                      # http://127.0.0.1:7860
    python -m hf_transformer.app runs/en-de --engine ctranslate2 --port 8000

A seq2seq folder translates, with the options a user tunes (beams, new tokens, length penalty, engine: torch or
CTranslate2, switchable in the page when CTranslate2 is installed); its "Batch" tab gives one output line per input
line. A classifier folder gives the label and every label's score. The outputs are :class:`Predictor`'s. Bad input
(an empty sentence, one longer than the position table) is answered by a message in the page; the command refuses a
folder that is not a model folder with one line, before starting.

The app runs offline on localhost: no share link, no analytics, no font or script from elsewhere (gradio serves
its own). A Hugging Face Space of the app is written by ``hf_transformer.hub.write_space``.

gradio is imported inside the functions that need it: ``import hf_transformer`` does not load it.
"""

from __future__ import annotations

import argparse
import html
import importlib.util
import os
from pathlib import Path

from .folders import CLASSIFICATION, SEQ2SEQ, FolderTaskError, looks_like_a_path
from .inference import Predictor
from .saved_folder import FolderError, read_folder

__all__ = ["Demo", "InputError", "SERVES", "build_app", "check_folder", "main"]

SERVES = (SEQ2SEQ, CLASSIFICATION)  # the tasks of the folders the app shows
ENGINES = ("torch", "ctranslate2")
MAX_BEAMS = 8
MAX_LINES = 500  # of a batch: the app answers while the user waits
GRADIO_INSTALL = 'the demo app needs gradio: pip install -e ".[demo]"'


class InputError(ValueError):
    """Input the app refuses, with the message the page shows."""


def check_folder(folder) -> str | None:
    """Why ``folder`` cannot be shown (one line), or None: a path must be a model folder (``config.json`` of a
    classifier or seq2seq model, and a tokenizer) or an adapter folder on one; a name that is not a path is a Hub
    repo id, read when the app loads it."""
    if not Path(folder).exists() and not looks_like_a_path(str(folder)):
        return None
    try:
        read_folder(folder, hub=False).check("the demo app", SERVES, tokenizer=True)
    except (FolderError, FolderTaskError) as error:  # what the folder is not, in a line naming it
        return str(error)
    except (OSError, ValueError) as error:  # a configuration that does not read
        return f"{folder}: {(str(error).strip() or type(error).__name__).splitlines()[0]}"
    return None


class Demo:
    """What the app shows, without gradio: a folder's predictors (torch, and CTranslate2 loaded on first use) and
    the checks of the input. Each method raises :class:`InputError` with the message the page shows."""

    def __init__(self, folder, *, engine: str = "torch"):
        if engine not in ENGINES:
            raise ValueError(f"engine must be one of {', '.join(ENGINES)}, got {engine!r}")
        self.folder = str(folder)
        self._predictors = {"torch": Predictor.from_pretrained(self.folder)}
        self.task = self._predictors["torch"].task
        if engine == "ctranslate2" and self.task != SEQ2SEQ:
            raise ValueError("engine 'ctranslate2' decodes seq2seq models; this folder holds a classifier")
        self.engine = engine
        if engine != "torch":
            self.predictor(engine)  # loading errors now, before the app starts

    # -- what the page offers ----------------------------------------------------------------------------

    @property
    def name(self) -> str:
        return Path(self.folder).name or self.folder

    def engines(self) -> list[str]:
        """The engines this machine can decode with: CTranslate2 where it is installed (seq2seq only)."""
        if self.task != SEQ2SEQ:
            return ["torch"]
        if self.engine == "ctranslate2" or importlib.util.find_spec("ctranslate2") is not None:
            return list(ENGINES)
        return ["torch"]

    def defaults(self) -> dict:
        """The folder's own generation settings, as the option controls start (a classifier has none)."""
        if self.task != SEQ2SEQ:
            return {}
        torch_predictor = self._predictors["torch"]
        generation = torch_predictor.generation_config
        return {
            "num_beams": min(max(generation.num_beams or 1, 1), MAX_BEAMS),
            "max_new_tokens": torch_predictor.generation_length(),
            "length_penalty": float(generation.length_penalty if generation.length_penalty is not None else 1.0),
            "most_new_tokens": torch_predictor.generation_length(10**9),
        }

    def predictor(self, engine: str | None = None) -> Predictor:
        engine = engine or self.engine
        if engine not in ENGINES:
            raise InputError(f"engine must be one of {', '.join(ENGINES)}, got {engine!r}")
        if engine not in self._predictors:
            if engine not in self.engines():
                raise InputError(f'engine {engine} is not installed here: pip install -e ".[export]"')
            self._predictors[engine] = Predictor.from_pretrained(self.folder, engine=engine)
        return self._predictors[engine]

    # -- checks ----------------------------------------------------------------------------------------------

    def check_text(self, text, what: str = "The sentence") -> str:
        """``text`` stripped, or InputError: empty, or (a translator's input) longer in tokens than the model reads.
        A classifier reads a long text's first tokens, as ``Predictor.classify``, training and the pipeline (called
        with ``truncation=True``) do; cutting a translator's input would drop part of the translation without a
        word, so it is refused."""
        text = (text or "").strip()
        if not text:
            raise InputError("Type a sentence first: the input is empty.")
        if self.task == CLASSIFICATION:
            return text
        predictor = self._predictors["torch"]
        length, limit = len(predictor.tokenizer(text)["input_ids"]), predictor.input_length_limit()
        if length > limit:
            raise InputError(
                f"{what} is {length} tokens long; this model reads at most {limit} tokens. "
                "Shorten it or split it into sentences."
            )
        return text

    def _generate_options(self, num_beams, max_new_tokens, length_penalty) -> dict:
        options = {}
        if num_beams is not None:
            options["num_beams"] = int(num_beams)
            if not 1 <= options["num_beams"] <= MAX_BEAMS:
                raise InputError(f"The number of beams must be 1 to {MAX_BEAMS}, got {num_beams}.")
        if max_new_tokens is not None:
            options["max_new_tokens"] = int(max_new_tokens)
            if options["max_new_tokens"] < 1:
                raise InputError(f"Max new tokens must be 1 or more, got {max_new_tokens}.")
        if length_penalty is not None and options.get("num_beams", 1) > 1:  # applies to beam search only
            options["length_penalty"] = float(length_penalty)
        return options

    # -- what the page shows -----------------------------------------------------------------------------

    def translate(self, text, num_beams=None, max_new_tokens=None, length_penalty=None, engine=None) -> str:
        """The translation of one sentence, as ``Predictor.translate`` gives it with these options."""
        self._require(SEQ2SEQ)
        text = self.check_text(text)
        options = self._generate_options(num_beams, max_new_tokens, length_penalty)
        return self.predictor(engine).translate([text], **options)[0]

    def classify(self, text) -> dict[str, float]:
        """Every label's score for one sentence, as ``Predictor.classify`` gives them."""
        self._require(CLASSIFICATION)
        return self._predictors["torch"].classify([self.check_text(text)])[0]["scores"]

    def run_lines(self, text, num_beams=None, max_new_tokens=None, length_penalty=None, engine=None) -> str:
        """One output line per input line (a blank one for a blank one): translations, or ``label<TAB>score``."""
        lines = [line.strip() for line in (text or "").replace("\r\n", "\n").split("\n")]
        if lines and not lines[-1]:
            lines.pop()  # the pasted text's final line end
        if not any(lines):
            raise InputError("Paste one sentence a line first: the input is empty.")
        if len(lines) > MAX_LINES:
            raise InputError(f"The batch has {len(lines)} lines; the app takes at most {MAX_LINES}.")
        for number, line in enumerate(lines, 1):
            if line:
                self.check_text(line, what=f"Line {number}")
        if self.task == CLASSIFICATION:
            results = self._predictors["torch"](lines)
            return "\n".join("" if r["label"] is None else f"{r['label']}\t{r['score']:.4f}" for r in results)
        options = self._generate_options(num_beams, max_new_tokens, length_penalty)
        return "\n".join(self.predictor(engine).translate(lines, **options))

    def attention_html(self, text, target=None, num_beams=None, max_new_tokens=None) -> str:
        """The attention explorer of ``text`` (for a translation, of ``target``: the output shown) in an iframe."""
        text = self.check_text(text)
        try:
            from .attention_view import attention_page
        except ImportError as error:
            return message_html(f"The attention explorer is not available: {error}")
        predictor = self._predictors["torch"]
        options = {}
        if self.task == SEQ2SEQ:
            options = {"target": target} if target else {"num_beams": int(num_beams or 1)}
            if max_new_tokens is not None:
                options["max_new_tokens"] = int(max_new_tokens)
        page = attention_page(predictor.model, text, tokenizer=predictor.tokenizer, **options)
        return iframe_html(page)

    def _require(self, task: str) -> None:
        if self.task != task:
            raise InputError(f"This folder holds a {self.task} model, not a {task} model.")


def iframe_html(page: str, height: int = 620) -> str:
    """A self-contained HTML page inside the app's page: an iframe's ``srcdoc`` (escaped), scripts allowed, no
    access to the app's page."""
    return (
        f'<iframe class="attention-explorer" title="Attention explorer" sandbox="allow-scripts" '
        f'style="width:100%;height:{height}px;border:1px solid #ddd;border-radius:6px" '
        f'srcdoc="{html.escape(page, quote=True)}"></iframe>'
    )


def message_html(message: str) -> str:
    return f'<div class="demo-message" style="padding:1em;color:#8a4b00">{html.escape(message)}</div>'


# -- the gradio app ------------------------------------------------------------------------------------------


def _gradio():
    """gradio, imported offline: no analytics, no version check."""
    os.environ["GRADIO_ANALYTICS_ENABLED"] = "False"
    try:
        import gradio
    except ImportError as error:
        raise ImportError(GRADIO_INSTALL) from error
    return gradio


def _shown(gr, function):
    """``function`` for a gradio event: refused input and failures become a message in the page (gr.Error), never
    a stack trace."""

    def handler(*args):
        try:
            return function(*args)
        except InputError as error:
            raise gr.Error(str(error), title="Input", print_exception=False) from None
        except Exception as error:  # noqa: BLE001 (the page says what failed; the console keeps the trace)
            raise gr.Error(f"{type(error).__name__}: {error}", title="Failed") from error

    handler.__name__ = function.__name__
    return handler


def _attention_shown(function):
    """The explorer never blocks the output: a failure is a message where it would be."""

    def handler(*args):
        try:
            return function(*args)
        except Exception as error:  # noqa: BLE001
            return message_html(f"The attention explorer failed: {type(error).__name__}: {error}")

    handler.__name__ = function.__name__
    return handler


def build_app(folder, *, engine: str = "torch"):
    """The demo of ``folder`` (a saved model folder or Hub repo id) as a ``gradio.Blocks``; ``.launch()`` serves
    it. ``engine`` ("torch" or "ctranslate2") is the one selected at the start (seq2seq only)."""
    gr = _gradio()
    demo = folder if isinstance(folder, Demo) else Demo(folder, engine=engine)
    seq2seq = demo.task == SEQ2SEQ
    defaults = demo.defaults()
    parameters = sum(p.numel() for p in demo.predictor("torch").model.parameters())
    verb = "Translate" if seq2seq else "Classify"

    with gr.Blocks(title=f"{demo.name} - hf_transformer", analytics_enabled=False) as app:
        gr.Markdown(
            f"## {demo.name}\n{'Translation' if seq2seq else 'Classification'} with a {parameters:,}-parameter "
            "Transformer (hf_transformer). The attention explorer shows what each token looked at."
        )
        options = []
        if seq2seq:
            with gr.Row():
                num_beams = gr.Slider(1, MAX_BEAMS, value=defaults["num_beams"], step=1, label="Beams")
                max_new_tokens = gr.Slider(
                    1, defaults["most_new_tokens"], value=defaults["max_new_tokens"], step=1, label="Max new tokens"
                )
                length_penalty = gr.Slider(
                    0.0, 2.0, value=defaults["length_penalty"], step=0.1, label="Length penalty (beams > 1)"
                )
                engines = gr.Radio(demo.engines(), value=demo.engine, label="Engine")
            options = [num_beams, max_new_tokens, length_penalty, engines]
        with gr.Tab("Sentence"):
            with gr.Row():
                with gr.Column(scale=2):
                    source = gr.Textbox(label="Sentence", lines=3, elem_id="source", placeholder="Type a sentence")
                    run = gr.Button(verb, variant="primary", elem_id="run")
                    if seq2seq:
                        output = gr.Textbox(label="Translation", elem_id="output", interactive=False)
                    else:
                        output = gr.Label(label="Label and scores", elem_id="output")
                with gr.Column(scale=3):
                    attention = gr.HTML(message_html(f"{verb} a sentence to see its attention."), elem_id="attention")
        with gr.Tab("Batch"):
            lines = gr.Textbox(label="One sentence a line", lines=8, elem_id="batch-source")
            run_lines = gr.Button(f"{verb} every line", variant="primary", elem_id="batch-run")
            output_lines = gr.Textbox(
                label="One output a line" if seq2seq else "One label a line",
                lines=8,
                elem_id="batch-output",
                interactive=False,
            )

        if seq2seq:

            def sentence(text, beams, new_tokens, penalty, engine):
                return demo.translate(text, beams, new_tokens, penalty, engine)

            def explorer(text, translation, beams, new_tokens, penalty, engine):
                return demo.attention_html(text, target=translation, num_beams=beams, max_new_tokens=new_tokens)

            inputs, explorer_inputs = [source, *options], [source, output, *options]
        else:

            def sentence(text):
                return demo.classify(text)

            def explorer(text, label):
                return demo.attention_html(text)

            inputs, explorer_inputs = [source], [source, output]

        gr.on([run.click, source.submit], _shown(gr, sentence), inputs, output, api_name=verb.lower()).success(
            _attention_shown(explorer), explorer_inputs, attention, api_visibility="undocumented"
        )
        batch_inputs = [lines, *options]
        run_lines.click(_shown(gr, demo.run_lines), batch_inputs, output_lines, api_name=f"{verb.lower()}_lines")
    app.demo = demo
    return app


def launch(app, *, host: str = "127.0.0.1", port: int = 7860, **options):
    """Serves ``app`` on ``host:port``: no share link, no server-side rendering (node), no MCP server."""
    return app.launch(
        server_name=host, server_port=port, share=False, ssr_mode=False, mcp_server=False, pwa=False, **options
    )


# -- the command ---------------------------------------------------------------------------------------------


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m hf_transformer.app",
        description="Serve the demo app of a saved model folder on localhost (offline, no share link).",
    )
    parser.add_argument("folder", help="a folder written by save_pretrained (seq2seq or classifier), or a Hub id")
    parser.add_argument("--port", type=int, default=7860)
    parser.add_argument("--host", default="127.0.0.1", help="address to serve on (0.0.0.0: every interface)")
    parser.add_argument("--engine", choices=ENGINES, default="torch", help="the decoding engine selected at start")
    return parser.parse_args(argv)


def main(argv=None) -> None:
    args = parse_args(argv)
    if (problem := check_folder(args.folder)) is not None:
        raise SystemExit(f"hf_transformer.app: {problem}")
    if importlib.util.find_spec("gradio") is None:
        raise SystemExit(f"hf_transformer.app: {GRADIO_INSTALL}")
    try:
        app = build_app(args.folder, engine=args.engine)
    except (OSError, ValueError, ImportError) as error:
        raise SystemExit(f"hf_transformer.app: {args.folder}: {str(error).splitlines()[0]}") from None
    launch(app, host=args.host, port=args.port)


if __name__ == "__main__":
    main()
