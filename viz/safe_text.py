"""Names read from trace files, shown as text: one escaping helper per output kind.

Kernel, stream, operator, file and run names come from the files a user opens, and a file can be made
by anyone. Every front end shows them through the helper of its output kind, so that a name is only
ever text: no control character reaches a terminal (clear screen, window title, cursor moves, bidi
overrides), no rich markup in a name is interpreted (or raises), no Markdown or HTML in a name forges a
table row, a link, an image or a tag, and no CSV cell is read as a formula by a spreadsheet (OWASP's
CSV-injection advice: a cell that starts with = + - @ tab or CR gets a leading single quote).
docs/safety.md lists what each helper guarantees.
"""

from __future__ import annotations

import html
import re
from typing import Any

# C0 and C1 control characters, DEL, and the Unicode format characters that reorder or hide text
# (bidi embeddings, overrides and isolates, zero-width marks, line and paragraph separators).
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u200b-\u200f\u2028-\u202e\u2060-\u2069\ufeff]")
_CONTROL_KEEP_NEWLINE = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u200b-\u200f\u2028-\u202e\u2060-\u2069\ufeff]")


def _visible(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def printable(text: Any, keep_newlines: bool = False) -> str:
    """text as a str with every control character written out as its escape (ESC -> the four
    characters \\x1b): nothing in it can move a cursor, retitle a window or reorder what is shown."""
    pattern = _CONTROL_KEEP_NEWLINE if keep_newlines else _CONTROL
    return pattern.sub(_visible, str(text))


# ----------------------------------------------------------------------------------------- terminal


def terminal_text(text: Any) -> str:
    """A name for a rich renderable (table cell, title, printed line): controls written out, markup
    escaped, so "[/dim]" or "[bold red]" shows as typed and never raises."""
    from rich.markup import escape  # rich is the CLI's; the app never calls this

    return escape(printable(text, keep_newlines=True))


# ----------------------------------------------------------------------------------------- Markdown

# Characters with a meaning in GitHub or Streamlit Markdown, backslash-escaped (CommonMark lets any ASCII
# punctuation be escaped): emphasis and code (* _ ~ `), links and images ([ ] and the ! before them),
# tables (|), headings (#), LaTeX ($), and the escape itself; a colon where it starts an emoji or icon code
# (:smile:, :material/home:). < > & become entities: no raw HTML passes.
_MD_SPECIAL = re.compile(r"([\\`*_~\[\]|#$!])")
_SHORTCODE = re.compile(r":(?=[\w+/\\-]+:)")
# What renderers turn into links after parsing, on the text itself (GitHub's and Streamlit's remark-gfm find
# "www.host", "scheme://" and "name@host" in text nodes, where escapes are gone): a WORD JOINER (U+2060,
# zero-width, invisible) inside the pattern keeps each one plain text.
_AUTOLINK = re.compile(r"(?i)(?<=\bwww)(?=\.)|(?<=[a-z0-9])(?=://)|(?=@)")
WORD_JOINER = "\u2060"


def markdown_text(text: Any) -> str:
    """A name inside Markdown (a table cell, a heading, a list item, a Streamlit caption): one line,
    shown as typed; nothing in it becomes a row, link, image, tag, directive or emphasis."""
    one_line = printable(str(text).replace("\r\n", " ").replace("\n", " ").replace("\r", " "))
    escaped = _SHORTCODE.sub(r"\\:", _MD_SPECIAL.sub(r"\\\1", html.escape(one_line, quote=False)))
    return _AUTOLINK.sub(WORD_JOINER, escaped)


def markdown_code(text: Any) -> str:
    """A value as one inline code span (outside tables): shown as typed, nothing in it interpreted; the
    fence is longer than any run of backticks in it."""
    one_line = printable(str(text).replace("\r\n", " ").replace("\n", " ").replace("\r", " "))
    fence = "`" * (max((len(r) for r in re.findall("`+", one_line)), default=0) + 1)
    pad = " " if one_line.startswith("`") or one_line.endswith("`") or not one_line.strip() else ""
    return f"{fence}{pad}{one_line}{pad}{fence}"


def markdown_row(cells: list[Any]) -> str:
    """One Markdown table row of names (each cell through markdown_text)."""
    return "| " + " | ".join(markdown_text(c) for c in cells) + " |"


# ----------------------------------------------------------------------------------------- JSON

# What JSON encoders leave raw (DEL, C1 controls, bidi and zero-width characters): a terminal may act on them.
_JSON_RAW = re.compile("[\x7f-\x9f\u200b-\u200f\u2028-\u202e\u2060-\u2069\ufeff]")


def json_for_terminal(data: bytes) -> bytes:
    """UTF-8 JSON with the characters a terminal may act on written as \\u escapes: the same data to any
    JSON reader, nothing for the terminal to run (used when standard output is one)."""
    text = data.decode("utf-8")
    if not _JSON_RAW.search(text):
        return data
    return _JSON_RAW.sub(lambda m: f"\\u{ord(m.group()):04x}", text).encode("utf-8")


# ----------------------------------------------------------------------------------------- CSV

_FORMULA_START = ("=", "+", "-", "@", "\t", "\r", "\n", "|", "%")
# A signed figure as the tables print it ("-1.5", "+5.0%", "-0.250 ms", "1,234"): data, not a formula.
_NUMBER = re.compile(r"\s*[+-]?(\d[\d,]*\.?\d*|\.\d+)([eE][+-]?\d+)?\s*(%|×|x|ms|µs|us|ns|s|pt|GB/s|MiB|B)?\s*")


def csv_cell(value: Any) -> Any:
    """A CSV cell no spreadsheet reads as a formula (OWASP CSV injection): a text cell whose first
    non-blank character is = + - @ | % tab, CR or LF gets a leading single quote; numbers, and text that
    is a plain figure ("-1.5", "+5.0%", "-0.250 ms"), stay as they are; control characters are written out.
    The app's tables show their text cells this way too: Streamlit's own CSV download writes them as shown."""
    if not isinstance(value, str):
        return value
    text = printable(value)
    if text.lstrip(" ").startswith(_FORMULA_START) and not _NUMBER.fullmatch(text):
        return "'" + text
    return text


def csv_frame(frame: Any) -> Any:
    """A pandas DataFrame with csv_cell applied to its text columns and headers (numeric columns untouched;
    each distinct value checked once, as names repeat on many rows)."""
    import pandas as pd

    out = frame.copy(deep=False)
    for col in out.columns:
        if out[col].dtype == object or isinstance(out[col].dtype, pd.StringDtype):
            codes, uniques = pd.factorize(out[col], use_na_sentinel=True)
            safe = [csv_cell(u) for u in uniques]
            if any(a is not b for a, b in zip(safe, uniques, strict=True)):
                values = pd.Series(safe, dtype=object).take(codes).to_numpy().copy()
                values[codes < 0] = None
                out[col] = values
    out.columns = [csv_cell(str(c)) for c in out.columns]
    return out


# ----------------------------------------------------------------------------------------- HTML


def html_text(text: Any) -> str:
    """A name inside HTML text or a quoted attribute: entities for & < > " ', controls written out."""
    return html.escape(printable(text, keep_newlines=True), quote=True)



def plotly_text(text: Any) -> str:
    """A name inside a Plotly label, legend or hover text: Plotly reads a subset of HTML there (<a href> makes
    a link, <b>, <br>) and %{...} in a hover template; as entities, which Plotly shows as the characters,
    none of it is read."""
    return html.escape(printable(text), quote=False).replace("%", "&#37;")


# ----------------------------------------------------------------------------------------- console

_CONSOLE_CLASS: Any = None


def text_only_console(**kwargs: Any) -> Any:
    """A rich Console that writes every control character of the text it prints as its escape (its own
    styling and cursor codes stay), and reads no emoji codes: the last guard for whatever reaches the
    terminal through it, escaped or not (a rich Text, an error line printed with markup=False)."""
    global _CONSOLE_CLASS
    if _CONSOLE_CLASS is None:
        from rich.console import Console
        from rich.segment import Segment

        class TextOnlyConsole(Console):
            def render(self, renderable: Any, options: Any = None) -> Any:
                for segment in super().render(renderable, options):
                    if segment.control or not _CONTROL_KEEP_NEWLINE.search(segment.text):
                        yield segment
                    else:
                        yield Segment(printable(segment.text, keep_newlines=True), segment.style, segment.control)

        _CONSOLE_CLASS = TextOnlyConsole
    return _CONSOLE_CLASS(emoji=False, **kwargs)
