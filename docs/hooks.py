"""MkDocs hooks: the configuration page's tables, written from ``dagrun.settings.SETTINGS``;
and a table cell's escaped pipe shown as a pipe.

``docs/configuration.md`` holds the marker ``<!-- settings -->`` where the tables go, so the
page lists exactly the settings the code reads (the same source as ``dagrun config list``
and ``dagrun init``'s starter file) and cannot drift from them. Named in ``mkdocs.yml``
under ``hooks:``; ``tests/test_docs.py`` calls ``on_page_markdown`` directly.
"""

from __future__ import annotations

import re
from typing import Any

from dagrun import settings

MARKER = "<!-- settings -->"
PAGE = "configuration.md"

_KINDS = {str: "text", int: "whole number", float: "number", bool: "true / false"}


def on_page_markdown(markdown: str, page: Any, **_: Any) -> str:
    """Put the settings' tables in place of the marker on the configuration page."""
    if page.file.src_uri != PAGE:
        return markdown
    if MARKER not in markdown:
        raise ValueError(f"docs/{PAGE} lost its {MARKER} marker: the settings have no place")
    return markdown.replace(MARKER, settings_markdown())


def on_page_content(html: str, **_: Any) -> str:
    """A ``|`` inside a table cell's code is written ``\\|`` (else it would end the cell), as
    GitHub reads it too; Python-Markdown keeps the backslash in code, so it goes here."""
    return _CELL.sub(lambda cell: cell.group(0).replace("\\|", "|"), html)


_CELL = re.compile(r"<td[^>]*>.*?</td>", re.S)


def settings_markdown() -> str:
    """A section and a table per config-file table, a row per setting, in ``SETTINGS``'
    order: key, environment variable, type, default, and what it is."""
    out: list[str] = []
    section = ""
    for setting in settings.SETTINGS:
        if setting.section != section:
            section = setting.section
            out += [
                "",
                f"### [{section}] {{ #{section} }}",
                "",
                "| setting | environment variable | type | default | what it is |",
                "| --- | --- | --- | --- | --- |",
            ]
        out.append(_row(setting))
    return "\n".join(out).strip() + "\n"


def _row(setting: settings.Setting) -> str:
    cells = [
        f"`{setting.name}`",
        f"`{setting.variable}`",
        _kind(setting),
        _default(setting),
        setting.help + (" A secret: `config list` masks it." if setting.secret else ""),
    ]
    return "| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |"


def _kind(setting: settings.Setting) -> str:
    if setting.choices:
        return "one of " + ", ".join(f"`{choice}`" for choice in setting.choices)
    return _KINDS.get(setting.kind, setting.kind.__name__)


def _default(setting: settings.Setting) -> str:
    value = setting.default
    if value == "" or value is None:
        return "(empty)"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, float) and value.is_integer():
        return f"`{int(value)}`"
    return f"`{value}`"
