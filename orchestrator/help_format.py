"""How ``ragscore --help`` reads: flags shown without a value, docstrings reflowed to the terminal's width.

typer's rich help prints every option's type, ``--quiet <bool>`` too, as if a flag took a value (``--quiet true``
is then refused); it keeps a docstring's hard line breaks past its first paragraph and in the list of commands,
which wrap raggedly in a terminal narrower than the source; and its usage line shows a required argument as
``{run_id}``, like a format placeholder left unfilled, and its table of arguments ``run_id``. :class:`HelpTyper`
gives every command and the group a class that fixes them all. A command's line in the list of commands is its
docstring's first line (a paragraph of its own): one text, not a ``short_help`` beside the docstring that could
drift from it.
"""

from __future__ import annotations

import inspect
from typing import Any, ClassVar, overload

import typer
from typer import _click
from typer.core import TyperArgument, TyperCommand, TyperGroup, TyperOption

__all__ = ["HelpTyper", "reflowed", "summary"]


@overload
def reflowed(text: str) -> str: ...
@overload
def reflowed(text: None) -> None: ...
def reflowed(text: str | None) -> str | None:
    """``text`` with the line breaks inside each paragraph (blank-line separated) turned into spaces, so that help
    wraps to the terminal; a paragraph that starts with click's ``\\b`` keeps its lines."""
    if not text:
        return text
    paragraphs = inspect.cleandoc(text).split("\n\n")
    return "\n\n".join(p if p.startswith("\b") else " ".join(p.split("\n")) for p in paragraphs)


def summary(text: str | None) -> str | None:
    """A command's line in the list of commands: the first paragraph of its docstring, a line of its own."""
    return reflowed(text).split("\n\n", 1)[0] if text else None


def _metavar(param: TyperArgument) -> str:
    """An argument as click names it, in help's table of arguments and its usage line: ``RUN_ID``, ``RUNS...`` for
    several (typer writes ``run_id`` in the table); the one a command gives it where it gives one."""
    return param.metavar or (param.name or "").upper() + ("..." if param.nargs != 1 else "")


def _usage_name(param: TyperArgument) -> str:
    """An argument in the usage line as click writes it: ``RUN_ID`` required, ``[RUN_ID]`` optional, ``RUNS...``
    for several (typer writes ``{run_id}``)."""
    name = _metavar(param).removesuffix("...")
    name = name if param.required else f"[{name}]"
    return name + ("..." if param.nargs != 1 else "")


def _show_flags_as_flags(params: list[_click.Parameter]) -> None:
    """A flag's type is shown as nothing (an empty metavar): it takes no value."""
    for param in params:
        if isinstance(param, TyperOption) and param.is_flag and param.metavar is None:
            param.metavar = ""


class _FlagsAsFlags:
    """Mixed into a click command or group: its help shows its flags (``--help`` too) as flags."""

    def format_help(self, ctx: _click.Context, formatter: _click.HelpFormatter) -> None:
        _show_flags_as_flags(self.get_params(ctx))  # type: ignore[attr-defined]
        super().format_help(ctx, formatter)  # type: ignore[misc]


class HelpCommand(_FlagsAsFlags, TyperCommand):
    """A command whose help shows flags as flags, its arguments as click names them, and reflows its docstring, whose
    first line is its summary in the list of commands."""

    #: The usage line's arguments after ``[OPTIONS]`` where click's (``[DATASET]``) would not be true: a subclass
    #: sets them (``(DATASET --suite FILE | --resume DIR)``); None: click's.
    usage_args: ClassVar[str | None] = None

    def __init__(self, name: str | None, *, help: str | None = None, **kwargs: Any) -> None:  # noqa: A002
        kwargs["short_help"] = summary(help)  # typer passes None: HelpTyper.command takes none
        super().__init__(name, help=reflowed(help), **kwargs)
        for param in self.params:
            if isinstance(param, TyperArgument):
                param.metavar = _metavar(param)  # the table of arguments names it as the usage line does

    def collect_usage_pieces(self, ctx: _click.Context) -> list[str]:
        if self.usage_args is not None:
            return [self.options_metavar or "", self.usage_args]
        pieces = [self.options_metavar or ""]
        for param in self.get_params(ctx):
            pieces += [_usage_name(param)] if isinstance(param, TyperArgument) else param.get_usage_pieces(ctx)
        return pieces


class HelpGroup(_FlagsAsFlags, TyperGroup):
    """The command group, whose ``--help`` is a flag too, its help reflowed."""

    def __init__(self, *, help: str | None = None, **kwargs: Any) -> None:  # noqa: A002
        super().__init__(help=reflowed(help), **kwargs)


class HelpTyper(typer.Typer):
    """A Typer app whose group is a :class:`HelpGroup` and whose commands are :class:`HelpCommand` unless a command
    names its own class."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(cls=HelpGroup, **kwargs)

    def command(self, name: str | None = None, *, cls: type[TyperCommand] | None = None, **kwargs: Any) -> Any:
        if "short_help" in kwargs:
            raise TypeError("a command's summary is its docstring's first line, not a short_help beside it")
        return super().command(name, cls=cls or HelpCommand, **kwargs)
