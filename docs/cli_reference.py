"""docs/cli.md, rendered from the commands themselves: walks typer's click tree and writes each command's
usage, help text, arguments and options as Markdown, so the reference says what `--help` says.

Plain text, no terminal width, no colour: the same tree gives the same bytes on any machine.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import typer.main

# typer >= 0.26 carries its own copy of click (typer._click), older ones use click itself: the tree is read
# by duck typing, never by isinstance against one of them.
Command = Any

HEADER = """# Command reference

<!-- generated from each command's own --help by `python -m docs.build`; edit the commands' help, not this page -->

Every command of `overlapscope`, as its `--help` describes it. Exit codes: 0 ok, 1 a gate failed
(`--fail-on`, `--fail-under-overlap`), 2 usage error, 3 bad input (one line naming the file and the problem),
4 a run failed. Data goes to stdout, progress, gate verdicts and notes to stderr.
What the outputs mean: [analyze.md](analyze.md), [diff.md](diff.md), [whatif.md](whatif.md),
[export.md](export.md), [runners.md](runners.md), [app.md](app.md).
"""
RICH_MARKUP = re.compile(r"\[/?(?:bold|italic|dim|underline|red|green|yellow|blue|cyan|magenta)\]")


def root_command() -> Command:
    from overlapscope.cli import app

    return typer.main.get_command(app)


def walk(command: Command, path: tuple[str, ...] = ("overlapscope",)) -> Iterator[tuple[tuple[str, ...], Command]]:
    """(command path, command) for every runnable command, in the order `--help` lists them."""
    if hasattr(command, "list_commands"):
        ctx = command.context_class(command)
        for name in command.list_commands(ctx):
            sub = command.get_command(ctx, name)
            if sub is not None and not sub.hidden:
                yield from walk(sub, (*path, name))
    else:
        yield path, command


def _is_option(param: Any) -> bool:
    return param.param_type_name == "option"


def _plain(text: str | None) -> str:
    text = RICH_MARKUP.sub("", text or "").strip()
    return "\n".join(line.rstrip() for line in text.splitlines())


def _cell(text: str) -> str:
    return " ".join(_plain(text).split()).replace("|", "\\|")


def _default(param: Any) -> str:
    if _is_option(param) and (param.is_flag and not param.secondary_opts):
        return ""
    if param.required or param.default is None or param.default == () or param.default is False:
        return "required" if param.required else ""
    default = param.default
    if isinstance(default, (list, tuple)):
        default = ", ".join(str(d) for d in default)
    return f"`{_cell(str(default))}`"


def _value(param: Any) -> str:
    """What the option takes, as --help shows it: its choices, its metavar, or its type (with its range)."""
    if _is_option(param) and param.is_flag:
        return ""
    kind = param.type
    if hasattr(kind, "choices"):
        return "|".join(str(c) for c in kind.choices)
    if param.metavar:
        return param.metavar
    name = {"str": "TEXT", "int range": "INTEGER", "float range": "FLOAT"}.get(kind.name, kind.name.upper())
    low, high = getattr(kind, "min", None), getattr(kind, "max", None)
    if low is not None or high is not None:
        name += f" ({'' if low is None else low}..{'' if high is None else high})"
    return name


def _usage(path: tuple[str, ...], command: Command) -> str:
    pieces = [" ".join(path)]
    if any(_is_option(p) and not p.hidden for p in command.params):
        pieces.append("[OPTIONS]")
    for p in command.params:
        if not _is_option(p):
            name = (p.metavar or p.name or "").upper()
            name += "..." if p.nargs == -1 else ""
            pieces.append(name if p.required else f"[{name}]")
    return " ".join(pieces)


def _option_names(param: Any) -> str:
    names = [*param.opts, *param.secondary_opts]
    return ", ".join(f"`{n}`" for n in names)


def command_markdown(path: tuple[str, ...], command: Command) -> str:
    out = [f"## {' '.join(path)}", "", "```", _usage(path, command), "```", "", _plain(command.help), ""]
    arguments = [p for p in command.params if not _is_option(p)]
    options = [p for p in command.params if _is_option(p) and not p.hidden]
    if arguments:
        out += ["| argument | what |", "|---|---|"]
        out += [f"| `{(p.metavar or p.name or '').upper()}` | {_cell(getattr(p, 'help', '') or '')} |"
                for p in arguments]
        out.append("")
    if options:
        out += ["| option | value | default | what |", "|---|---|---|---|"]
        for p in options:
            value = _cell(_value(p))
            out.append(f"| {_option_names(p)} | {('`' + value + '`') if value else ''} | {_default(p)} "
                       f"| {_cell(p.help)} |")
        out.append("")
    return "\n".join(out)


def cli_markdown() -> str:
    """The whole of docs/cli.md."""
    parts = [HEADER]
    commands = list(walk(root_command()))
    parts.append("\n".join(f"- [`{' '.join(p)}`](#{'-'.join(p)})" for p, _ in commands) + "\n")
    parts += [command_markdown(p, c) for p, c in commands]
    return "\n".join(parts).rstrip("\n") + "\n"
