"""Text in, text out: translate or classify with a saved folder.

    from hf_transformer import Predictor

    translator = Predictor.from_pretrained("runs/en-de", num_beams=5)
    translator.translate(["A man is riding a bicycle."])            # -> ["Ein Mann fährt Fahrrad."]
    classifier = Predictor.from_pretrained("runs/reviews")
    classifier(["정말 재미있는 영화였어요"])                              # -> [{"label": "positive", ...}]
    translator.predict_file("sentences.txt", "translations.txt")    # batched by length, with a progress bar

The head comes from `config.architectures` (the folder is read once, by :mod:`hf_transformer.saved_folder`). Inputs
are sorted by length into batches (little padding, so fewer wasted products) and the results come back in input
order. Inputs longer than the smaller of the tokenizer's `model_max_length` and the model's position table are
truncated to it. Generation options (`num_beams`, `max_new_tokens`, `length_penalty`, `do_sample`, ...) go to
`generate` as given; without them the folder's generation config applies.

A LoRA adapter folder (peft) is read with its base model, the adapters merged into the weights
(:mod:`hf_transformer.adapters`).

`engine="ctranslate2"` decodes a seq2seq model with CTranslate2 (`pip install -e ".[export]"`): the folder is
either one written by `hf_transformer.export.to_ctranslate2` or a saved model folder, which is then converted
into a temporary folder first (`quantization` as for `to_ctranslate2`); `device` ("cpu", "cuda", "cuda:1") and
`compute_type` ("bfloat16" on a GPU, "int8" on a CPU, ...) choose where and in what it computes.

The translation pipeline (`transformers.pipeline("hf-transformer-translation", model=folder)`) is
:mod:`hf_transformer.pipelines`; classifier folders work with transformers' own `pipeline("text-classification",
model=folder)`.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterable, Sequence
from pathlib import Path

import torch
from transformers import GenerationConfig

from .folders import CLASSIFICATION, SEQ2SEQ, check_output_file, task_of
from .pipelines import (
    PIPELINE_TASK,
    TranslationPipeline,
    generated_ids,
    generation_length,
    input_length_limit,
    register_pipeline,
)
from .saved_folder import CTRANSLATE2, SavedFolder, read_folder

__all__ = [
    "PIPELINE_TASK",
    "Predictor",
    "TranslationPipeline",
    "check_device",
    "input_length_limit",
    "register_pipeline",
    "task_of",
]


def check_device(device, engine: str = "torch") -> None:
    """Raises ``ValueError`` naming ``device`` when it is not a device name torch knows, or names a device the
    engine cannot use on this machine (a CPU build of torch asked for "cuda", an index past the GPUs), before any
    loading. CTranslate2 brings its own CUDA runtime: for that engine its count of CUDA devices decides."""
    try:
        parsed = torch.device(device)
    except (RuntimeError, TypeError) as error:
        raise ValueError(f"device {device!r} is not a device name torch knows (cpu, cuda, cuda:1, mps...)") from error
    if parsed.type == "meta":
        raise ValueError("device 'meta' holds no weights; a Predictor computes on cpu, cuda, mps...")
    if parsed.type == "cuda":
        if engine == "ctranslate2":
            from .export.ctranslate2_export import _ctranslate2

            try:
                ctranslate2 = _ctranslate2()  # imported with the package's kernel choices
            except ImportError:
                return  # loading says what to install
            count, source = ctranslate2.get_cuda_device_count(), "CTranslate2 sees"
        else:
            count, source = (torch.cuda.device_count() if torch.cuda.is_available() else 0), "torch sees"
        if count <= (parsed.index or 0):
            raise ValueError(f"device {device!r} is not available here: {source} {count} CUDA device(s)")
    elif parsed.type == "mps" and not torch.backends.mps.is_available():
        raise ValueError(f"device {device!r} is not available here: torch.backends.mps.is_available() is False")


def _progress(iterable, total: int, enabled: bool, desc: str):
    if not enabled:
        return iterable
    from tqdm.auto import tqdm

    return tqdm(iterable, total=total, desc=desc, unit="batch")


def classification_scores(logits: torch.Tensor, config) -> torch.Tensor:
    """(B, num_labels) scores as transformers' text-classification pipeline gives them: the raw values for
    regression, a sigmoid per label for multi-label classification or a single label, else a softmax."""
    logits = logits.float()
    if config.problem_type == "regression":
        return logits
    if config.problem_type == "multi_label_classification" or config.num_labels == 1:
        return logits.sigmoid()
    return logits.softmax(-1)


class Predictor:
    """A loaded folder: `predictor(texts)` gives one result dict per text (`translation`, or `label`, `score`
    and every label's `scores`: softmax probabilities, sigmoids for a multi-label or one-label classifier, values for
    regression, as transformers' pipeline gives them); `translate(texts)` and `classify(texts)` say which they
    expect. With `num_return_sequences=k` a translation result also holds `translations`, the k candidates, best
    first.

    Without a model (`engine="ctranslate2"`: the `ctranslate2_generator` decodes), `config` and
    `generation_config` are the folder's; `cleanup` is closed by :meth:`close` (a temporary conversion)."""

    def __init__(
        self,
        model,
        tokenizer,
        task: str,
        *,
        batch_size: int = 32,
        engine: str = "torch",
        ctranslate2_generator=None,
        config=None,
        generation_config: GenerationConfig | None = None,
        cleanup: contextlib.ExitStack | None = None,
        **generate_options,
    ):
        if engine not in ("torch", "ctranslate2"):
            raise ValueError(f"engine must be 'torch' or 'ctranslate2', got {engine!r}")
        if engine == "ctranslate2" and task != SEQ2SEQ:
            raise ValueError("engine='ctranslate2' decodes seq2seq folders; this folder is a classifier")
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"batch_size must be an integer of at least 1, got {batch_size!r}")
        if task == CLASSIFICATION:
            check_no_generate_options(generate_options)
        else:
            check_generate_option_names(generate_options)
        if model is None and config is None:
            raise ValueError("a Predictor without a model needs the model's config (config=...)")
        self.model = model
        self.tokenizer = tokenizer
        self.task = task
        self.batch_size = batch_size
        self.engine = engine
        self.ctranslate2_generator = ctranslate2_generator
        self.generate_options = {k: v for k, v in generate_options.items() if v is not None}
        self._config = config
        self._generation_config = generation_config if generation_config is not None else GenerationConfig()
        self._cleanup = cleanup if cleanup is not None else contextlib.ExitStack()

    @classmethod
    def from_pretrained(
        cls,
        model_dir: str | Path | Sequence[str | Path],
        *,
        device: str = "cpu",
        engine: str = "torch",
        quantization: str | None = None,
        compute_type: str | None = None,
        threads: int | None = None,
        **options,
    ) -> Predictor:
        """Load `model_dir` (a saved folder or Hub id; for `engine="ctranslate2"` also a CTranslate2 folder). A list
        of seq2seq folders that share one tokenizer translates as their ensemble (:mod:`hf_transformer.ensemble`).
        The task is the saved class's: a folder of any class but a translator or a classifier (a masked-token model,
        a model without a head) is refused with `hf_transformer.folders.FolderTaskError`, in one line.
        `compute_type` (CTranslate2 only) is the type it computes in, e.g. "float16", "bfloat16" or "int8_float16"
        on a GPU, "int8" on a CPU; by default the folder's own weights' type."""
        if compute_type is not None and engine != "ctranslate2":
            raise ValueError("compute_type applies to engine='ctranslate2'; a torch model computes in its own dtype")
        check_device(device, engine)
        if not isinstance(model_dir, (str, os.PathLike)):
            if not isinstance(model_dir, (list, tuple)):
                raise TypeError(
                    f"model_dir is a folder (a path or Hub id) or a list of folders, got {type(model_dir).__name__}"
                )
            if engine != "torch" or quantization is not None:
                raise ValueError("an ensemble of folders decodes with engine='torch' and without quantization")
            for index, folder in enumerate(model_dir):
                if not isinstance(folder, (str, os.PathLike)):
                    raise TypeError(f"model_dir[{index}] is {type(folder).__name__}, not a folder (a path or Hub id)")
            from .ensemble import TransformerEnsemble

            ensemble, tokenizer = TransformerEnsemble.from_folders(model_dir)
            return cls(ensemble.to(device), tokenizer, SEQ2SEQ, **options)
        if engine == "torch" and quantization is not None:
            raise ValueError("quantization applies to engine='ctranslate2'; for torch use torch's quantize_dynamic")
        folder = read_folder(os.fspath(model_dir))
        if engine == "ctranslate2":
            return cls._from_ctranslate2(
                folder, device=device, quantization=quantization, compute_type=compute_type, threads=threads, **options
            )
        model, tokenizer = folder.open("Predictor", (SEQ2SEQ, CLASSIFICATION))  # never a masked-token folder
        return cls(model.to(device), tokenizer, folder.task, engine=engine, **options)

    @classmethod
    def _from_ctranslate2(
        cls, folder: SavedFolder, *, device, quantization, compute_type, threads, **options
    ) -> Predictor:
        from .export import ctranslate2_export as exporter

        cleanup = contextlib.ExitStack()
        if folder.kind != CTRANSLATE2:  # a saved model (or adapter) folder: converted first
            if not Path(folder.path).is_dir():
                raise ValueError(f"{folder.path}: engine='ctranslate2' needs a local folder")
            folder.check("engine='ctranslate2'", (SEQ2SEQ,))
            converted = Path(cleanup.enter_context(tempfile.TemporaryDirectory(prefix="ctranslate2-")))
            folder = read_folder(exporter.to_ctranslate2(folder, converted / "model", quantization=quantization))
        elif quantization is not None:
            raise ValueError(f"{folder.path} is already a CTranslate2 model; quantization is chosen when converting")
        threads = threads or torch.get_num_threads()
        compute_type = compute_type or "default"
        if device == "cpu":
            generator = exporter.CTranslate2Generator.for_cpu(folder.path, threads, compute_type=compute_type)
        else:
            generator = exporter.CTranslate2Generator(
                folder.path, device=device, compute_type=compute_type, intra_threads=threads
            )
        return cls(
            None,
            folder.load_tokenizer(),
            folder.check("engine='ctranslate2'", (SEQ2SEQ,)),
            engine="ctranslate2",
            ctranslate2_generator=generator,
            config=folder.load_config(),
            generation_config=folder.load_generation_config(),
            cleanup=cleanup,
            **options,
        )

    # ------------------------------------------------------------------------------------------------

    @property
    def config(self):
        return self.model.config if self.model is not None else self._config

    @property
    def generation_config(self) -> GenerationConfig:
        return self.model.generation_config if self.model is not None else self._generation_config

    def input_length_limit(self) -> int:
        return input_length_limit(self.config, self.tokenizer)

    def generation_length(self, max_new_tokens: int | None = None, max_length: int | None = None) -> int:
        """The most new tokens a translation gets: `max_new_tokens`, else `max_length` less the start token (else
        the predictor's, else the folder's generation config, else the decoder's position table), never more than
        the table holds."""
        if max_new_tokens is None and max_length is None:
            max_new_tokens = self.generate_options.get("max_new_tokens")
            max_length = self.generate_options.get("max_length")
        return generation_length(self.config, self.generation_config, max_new_tokens, max_length)

    def __call__(self, texts: Sequence[str], *, progress: bool = False, **generate_options) -> list[dict]:
        if isinstance(texts, str):
            raise TypeError("texts must be a list of strings; wrap a single text in a list")
        if isinstance(texts, (bytes, bytearray)) or not isinstance(texts, Iterable):
            raise TypeError(f"texts must be a list of strings, got {type(texts).__name__}")
        if self.task == CLASSIFICATION:
            check_no_generate_options(generate_options)
        else:
            check_generate_option_names(generate_options)
        texts = list(texts)
        for index, text in enumerate(texts):
            if not isinstance(text, str):
                raise TypeError(f"texts must be strings; texts[{index}] is {type(text).__name__}: {text!r:.60}")
        # A blank text has nothing to translate or classify: its result is blank (the model is not run on it), so
        # that a file's results stay one per line, line for line.
        results = [None if text.strip() else self._blank_result(text, generate_options) for text in texts]
        to_run = [i for i, result in enumerate(results) if result is None]
        order = sorted(to_run, key=lambda i: len(texts[i]))  # characters: a cheap proxy for tokens
        batches = [order[start : start + self.batch_size] for start in range(0, len(order), self.batch_size)]
        for indices in _progress(
            batches, len(batches), progress, "translating" if self.task == SEQ2SEQ else "classifying"
        ):
            chunk = [texts[i] for i in indices]
            if self.task == CLASSIFICATION:
                outputs = self._classify(chunk)
            else:
                outputs = self._translate(chunk, **generate_options)
            for index, output in zip(indices, outputs):
                results[index] = output
        return results

    def translate(self, texts: Sequence[str], **generate_options) -> list[str]:
        if self.task != SEQ2SEQ:
            raise ValueError("this folder holds a classifier; use classify() or call the predictor")
        return [result["translation"] for result in self(texts, **generate_options)]

    def classify(self, texts: Sequence[str]) -> list[dict]:
        if self.task != CLASSIFICATION:
            raise ValueError("this folder holds a seq2seq model; use translate() or call the predictor")
        return self(texts)

    def predict_file(self, source: str | Path, target: str | Path, *, progress: bool = True, **options) -> int:
        """One result per line of `source`, written to `target` line for line (translations, or label TAB score;
        a blank line for a blank one); the number of lines written. Refused before any work: a `target` that is
        `source` itself, a folder, a file of a saved model's folder, or in a folder that does not exist."""
        check_output_file(target, "target", inputs=[source])
        if not Path(target).resolve().parent.is_dir():
            raise FileNotFoundError(f"target {target}: its folder {Path(target).parent} does not exist")
        with open(source, encoding="utf-8") as stream:
            lines = read_lines(stream)
        results = self(lines, progress=progress, **options)
        Path(target).write_text("".join(format_result(r) + "\n" for r in results), encoding="utf-8")
        return len(results)

    def close(self) -> None:
        """Drop a temporary CTranslate2 conversion, if one was made."""
        self._cleanup.close()

    # ------------------------------------------------------------------------------------------------

    def _call_options(self, generate_options: dict) -> tuple[dict, dict]:
        """The options this call sets (None: not set), and the predictor's own with those over them."""
        given = {k: v for k, v in generate_options.items() if v is not None}
        return given, {**self.generate_options, **given}

    def _blank_result(self, text: str, generate_options: dict) -> dict:
        if self.task == CLASSIFICATION:
            return {"text": text, "label": None, "score": None, "scores": {}}
        result = {"text": text, "translation": ""}
        _, options = self._call_options(generate_options)
        count = options.get("num_return_sequences") or self.generation_config.num_return_sequences or 1
        if count > 1:  # as the other texts' results hold them
            result["translations"] = [""] * count
        return result

    def _encode(self, texts: list[str]):
        batch = self.tokenizer(
            texts, return_tensors="pt", padding=True, truncation=True, max_length=self.input_length_limit()
        )
        batch.pop("token_type_ids", None)
        return batch

    @torch.no_grad()
    def _classify(self, texts: list[str]) -> list[dict]:
        batch = self._encode(texts).to(self.model.device)
        scores = classification_scores(self.model(**batch).logits, self.model.config)
        id2label = self.model.config.id2label
        results = []
        for text, row in zip(texts, scores.tolist()):
            best = max(range(len(row)), key=row.__getitem__)
            by_label = {id2label[i]: p for i, p in enumerate(row)}
            results.append({"text": text, "label": id2label[best], "score": row[best], "scores": by_label})
        return results

    @torch.no_grad()
    def _translate(self, texts: list[str], **generate_options) -> list[dict]:
        given, options = self._call_options(generate_options)
        # A length given with this call wins over the predictor's, whichever of the two names each uses.
        lengths = given if {"max_new_tokens", "max_length"} & set(given) else self.generate_options
        length = generation_length(
            self.config, self.generation_config, lengths.get("max_new_tokens"), lengths.get("max_length"), warn=True
        )
        options.pop("max_new_tokens", None), options.pop("max_length", None)
        batch = self._encode(texts)
        if self.engine == "ctranslate2":
            generated = self.ctranslate2_generator.generate(
                batch["input_ids"], batch["attention_mask"], max_new_tokens=length, **options
            )
        else:
            # The limit goes in the field the saved generation config uses; setting the other one as well makes
            # generate() warn that both are set.
            if self.generation_config.to_diff_dict().get("max_new_tokens"):
                options["max_new_tokens"] = length
            else:
                options["max_length"] = length + 1  # counts the start token
            generated = generated_ids(self.model.generate(**batch.to(self.model.device), **options))
        decoded = [text.strip() for text in self.tokenizer.batch_decode(generated, skip_special_tokens=True)]
        # num_return_sequences: that many candidates per text, one text's after the other, best first.
        per_text = len(decoded) // len(texts)
        results = []
        for index, text in enumerate(texts):
            candidates = decoded[index * per_text : (index + 1) * per_text]
            results.append({"text": text, "translation": candidates[0]})
            if per_text > 1:
                results[-1]["translations"] = candidates
        return results


def format_result(result: dict, as_json: bool = False) -> str:
    """A result as one output line: the translation, or `label<TAB>score<TAB>text`; JSON with `as_json`."""
    if as_json:
        import json

        return json.dumps(result, ensure_ascii=False)
    if "translation" in result:
        return result["translation"]
    if result["label"] is None:  # a blank input
        return ""
    return f"{result['label']}\t{result['score']:.4f}\t{result['text']}"


def read_lines(stream: Iterable[str]) -> list[str]:
    """Every line of a text stream (a file or stdin, iterated: split at line ends only, not at the other characters
    `str.splitlines` splits at, such as U+2028 inside a sentence), stripped; blank lines are kept, so that results
    can be written line for line. A byte-order mark that starts the stream (a file saved as "UTF-8 with BOM") is
    not text: the tokenizer would read it as an unknown token."""
    lines = [line.strip() for line in stream]
    if lines and lines[0].startswith("\ufeff"):
        lines[0] = lines[0][1:].strip()
    return lines


def check_no_generate_options(options: dict) -> None:
    """A classifier generates nothing: an option of generate's, or a misspelt one of the Predictor's own
    (`batch_sise`), is refused rather than ignored."""
    given = sorted(name for name, value in options.items() if value is not None)
    if given:
        raise TypeError(
            f"a classifier's Predictor takes no option {', '.join(given)} (options of generate, or misspelt)"
        )


def check_generate_option_names(options: dict) -> None:
    """A translator's options are generate's (a generation setting, or an argument of `generate`): a misspelt one
    (`batch_sise`, `num_beam`) is refused where it is given, naming the setting it is close to, rather than at the
    first translation."""
    import difflib
    import inspect

    from transformers import GenerationConfig, GenerationMixin

    known = set(vars(GenerationConfig())) | set(inspect.signature(GenerationMixin.generate).parameters)
    unknown = sorted(name for name in options if name not in known or name.startswith("_"))
    if unknown:
        named = []
        for name in unknown:
            close = difflib.get_close_matches(name, sorted(known), n=1)
            named.append(f"{name} (did you mean {close[0]}?)" if close else name)
        raise TypeError(f"a translator's Predictor takes no option {', '.join(named)}")
