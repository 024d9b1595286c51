"""How the package's commands end on what a user got wrong: one line naming it and exit status 2, as argparse ends on
an unknown option, instead of a traceback whose last line says the same.

A refusal is an exception the package raised on purpose about its input: a ``ValueError``, ``OSError`` (a missing
file) or ``ImportError`` (an optional package not installed) raised by the package's own code, by a recipe's or by the
command's module, or a ``ValueError`` of the arguments' own checks (``parse_arguments``, transformers'
``TrainingArguments`` among them). Anything else keeps its traceback: raised inside torch, datasets or transformers
at run time, or of another kind (``KeyError``, ``RuntimeError``, ...), it is a bug or a case no check foresaw, and
its traceback is what tells where.

    if __name__ == "__main__":
        run_command(main)
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

__all__ = ["ArgumentsError", "parse_arguments", "run_command"]

# Modules whose ValueError / OSError / ImportError is a refusal: the library and the recipes (the command's own
# module is added by `run_command`).
OWN_MODULES = ("hf_transformer", "recipes")
REFUSALS = (ValueError, OSError, ImportError)


class ArgumentsError(ValueError):
    """The command line's arguments refused by their dataclasses' checks (the package's or transformers')."""


def parse_arguments(parser, argv: list[str] | None = None) -> tuple:
    """``parser.parse_args_into_dataclasses(args=argv)`` (an ``HfArgumentParser``), a ``ValueError`` of the
    dataclasses' checks raised again as ``ArgumentsError`` (a ``ValueError``, the message kept): a refusal of what
    was typed, wherever the check lives."""
    try:
        return parser.parse_args_into_dataclasses(args=argv)
    except ValueError as error:
        if isinstance(error, ArgumentsError):
            raise
        raise ArgumentsError(str(error)) from error


def is_refusal(error: BaseException, modules: tuple[str, ...] = OWN_MODULES) -> bool:
    """Whether ``error`` is a refusal (see the module's docstring): an ``ArgumentsError``, or a ``ValueError`` /
    ``OSError`` / ``ImportError`` whose innermost frame runs in one of ``modules`` (or a module within one)."""
    if isinstance(error, ArgumentsError):
        return True
    if not isinstance(error, REFUSALS) or error.__traceback__ is None:
        return False
    frame = error.__traceback__
    while frame.tb_next is not None:
        frame = frame.tb_next
    module = frame.tb_frame.f_globals.get("__name__", "")
    return any(module == name or module.startswith(name + ".") for name in modules)


def run_command(main: Callable[[], object], *, prog: str | None = None) -> object:
    """``main()``, where a refusal (``is_refusal``, the command's module counted as the package's own) ends the
    program with ``PROG: error: MESSAGE`` on standard error and exit status 2; ``prog`` defaults to the program's
    file name, as argparse names it."""
    modules = (*OWN_MODULES, main.__module__)
    try:
        return main()
    except REFUSALS as error:
        if not is_refusal(error, modules):
            raise
        message = str(error).strip() or type(error).__name__
        print(f"{prog or Path(sys.argv[0]).name}: error: {message}", file=sys.stderr)
        raise SystemExit(2) from None
