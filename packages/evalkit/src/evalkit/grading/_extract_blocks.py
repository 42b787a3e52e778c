"""The blocks of a completion: its length check, fenced blocks (one pass over the lines) and tagged blocks
(``[PYTHON]``, ``<code>``), shared by code and JSON extraction (see :mod:`evalkit.grading._extract`)."""

from __future__ import annotations

import re

import attrs

__all__ = ["CODE_LANG", "MAX_COMPLETION_CHARS", "ExtractionError", "checked", "code_blocks", "fenced"]

MAX_COMPLETION_CHARS = 1 << 20
CODE_LANG = re.compile(r"(?:python|py)[0-9.]*")


class ExtractionError(ValueError):
    """No usable code or JSON in a completion. A candidate's failure, not a user error."""


def checked(completion: str) -> str:
    """The completion with its line endings normalised to ``\\n``, or an error when it is too long."""
    if len(completion) > MAX_COMPLETION_CHARS:
        raise ExtractionError(
            f"the completion has {len(completion):,} characters, over the {MAX_COMPLETION_CHARS:,} limit"
        )
    return completion.replace("\r\n", "\n").replace("\r", "\n")


# --------------------------------------------------------------------------------------------- blocks

# One line at a time, so no match can run past a line end; `(.*)` is the info string or trailing text.
_FENCE_LINE = re.compile(r"([ \t]*)(`{3,}|~{3,})(.*)")
_INFO_LANG = re.compile(r"[\s{.]*([A-Za-z0-9_+.#-]*)")


@attrs.frozen
class _Fence:
    char: str
    length: int
    indent: int
    lang: str
    first: int  # index of the first content line


def _lang(info: str) -> str:
    m = _INFO_LANG.match(info)
    return m.group(1).lower() if m else ""


def fenced(text: str) -> list[tuple[str, str]]:
    """``(lang, content)`` of every non-empty fenced block, in order, by one pass over the lines.

    A fence line inside a block closes it when it uses the same character, is at least as long as the opening
    fence and is indented at most three columns more (so a fence inside an indented docstring is content). Text
    after a closing fence is allowed; when it starts like a language label (```` ```python ````) it also opens the
    next block (an answer that forgot to close its previous block). A block never closed runs to the end.
    """
    if "```" not in text and "~~~" not in text:
        return []
    lines = text.split("\n")
    out: list[tuple[str, str]] = []
    current: _Fence | None = None
    for i, line in enumerate(lines):
        if "`" not in line and "~" not in line:
            continue
        m = _FENCE_LINE.match(line)
        if m is None:
            continue
        indent, fence, rest = m.groups()
        if current is not None:
            if fence[0] != current.char or len(fence) < current.length or len(indent) > current.indent + 3:
                continue
            if body := _content(lines[current.first : i]):
                out.append((current.lang, body))
            current = None
            rest = rest.strip()
            if not rest[:1].isalpha() and rest[:1] != "{":
                continue
        current = _Fence(fence[0], len(fence), len(indent), _lang(rest), i + 1)
    if current is not None and (body := _content(lines[current.first :])):
        out.append((current.lang, body))
    return out


def _content(lines: list[str]) -> str:
    body = "\n".join(lines).rstrip("\n")
    return body + "\n" if body else ""


_TAG_OPEN = re.compile(r"\[PYTHON\]|<code(?:\s[^<>\n]{0,200})?>", re.IGNORECASE)
_TAG_CLOSE = {"[": re.compile(r"\[/PYTHON\]", re.IGNORECASE), "<": re.compile(r"</code\s*>", re.IGNORECASE)}
_TAG_LANG = re.compile(r"(?:language|lang)-([A-Za-z0-9_+.#-]+)", re.IGNORECASE)


def _tagged(text: str) -> list[str]:
    """Code in ``[PYTHON]...[/PYTHON]`` (Code Llama's habit) or ``<code>...</code>`` (HTML-minded answers), by
    forward search: each search starts where the last one ended. ``<code>`` content is HTML-unescaped, and a
    ``<code class="language-x">`` for another language is skipped. An unclosed tag runs to the end.
    """
    out: list[str] = []
    pos = 0
    while (m := _TAG_OPEN.search(text, pos)) is not None:
        tag = m.group()
        close = _TAG_CLOSE[tag[0]].search(text, m.end())
        end = close.start() if close else len(text)
        pos = close.end() if close else len(text)
        body = text[m.end() : end]
        if tag[0] == "<":
            lang = _TAG_LANG.search(tag)
            if lang and not CODE_LANG.fullmatch(lang.group(1).lower()):
                continue
            import html  # here: its entity table is some 3 ms of every grading command's start, for HTML answers

            body = html.unescape(body)
        body = body.strip("\n")
        if body.strip():
            out.append(body + "\n")
    return out


def code_blocks(text: str) -> list[str]:
    blocks = [body for lang, body in fenced(text) if lang == "" or CODE_LANG.fullmatch(lang)]
    return blocks or _tagged(text)
