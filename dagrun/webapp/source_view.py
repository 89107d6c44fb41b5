"""A DAG's source as its page shows it: the text its DAGs run from, highlighted by Pygments.

The text is the one the store keeps for the DAG's file (``dag_file.good_source``, that of its
last parse that succeeded), so the page shows the code that runs, also while the file on
disk fails to load: the page then says so and shows the error beside it. Pygments escapes
every character and marks tokens with classes only, as the CSP allows no ``style``
attribute; their colours are ``source.css`` (``stylesheet``), made from Pygments' own
styles when the app starts, so they follow the installed version.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from markupsafe import Markup
from pygments import highlight
from pygments.formatters import HtmlFormatter
from pygments.lexers import PythonLexer, TextLexer

from dagrun.store import Store, dag_reads
from dagrun.webapp.models import DagInfo, read_dag

#: A longer source is shown as plain text (escaped and numbered all the same): highlighting
#: takes about a second per megabyte.
MAX_HIGHLIGHTED_CHARS = 512 * 1024
#: The static file of the token colours, and the Pygments styles it is made from (the dark
#: one for a system in dark mode, as ``dagrun.css`` follows it).
STYLESHEET = "source.css"
LIGHT_STYLE = "default"
DARK_STYLE = "github-dark"
#: The class around the highlighted source, which ``source.css`` scopes every rule to.
CSS_CLASS = "source"


@dataclass(frozen=True)
class SourceView:
    """A DAG's source page. ``known`` is False when the store no longer has the DAG's file
    (its DAG outlives it in history); ``html`` is None when it keeps no source for it."""

    dag: DagInfo
    path: str
    known: bool
    parsed_at: datetime | None
    html: Markup | None
    line_count: int
    highlighted: bool
    error: str | None
    error_line: int | None


def read_source(store: Store, dag_id: str) -> SourceView:
    """The source of ``dag_id``'s file as its last good parse read it (a 404 for an unknown
    DAG), highlighted after the read transaction ends."""
    with store.read() as conn:
        info = read_dag(store, conn, dag_id)
        found = dag_reads.file_source(conn, info.fileloc)
    text = found.source if found is not None else None
    highlighted = text is not None and len(text) <= MAX_HIGHLIGHTED_CHARS
    return SourceView(
        dag=info,
        path=info.fileloc,
        known=found is not None,
        parsed_at=found.parsed_at if found is not None else None,
        html=None if text is None else source_html(text, python=highlighted),
        line_count=0 if text is None else len(text.splitlines()),
        highlighted=highlighted,
        error=found.error if found is not None else None,
        error_line=found.error_line if found is not None else None,
    )


def source_html(text: str, *, python: bool = True) -> Markup:
    """``text`` as an escaped HTML table of numbered lines, each linkable as ``#L-<n>``,
    its Python tokens marked with Pygments' classes (plain text when ``python`` is False)."""
    formatter = HtmlFormatter(
        linenos="table", cssclass=CSS_CLASS, lineanchors="L", anchorlinenos=True, wrapcode=True
    )
    lexer = PythonLexer(stripnl=False) if python else TextLexer(stripnl=False)
    return Markup(highlight(text, lexer, formatter))  # Pygments escaped every character


def stylesheet() -> bytes:
    """The token colours of ``source_html``'s output: Pygments' light style, and its dark
    one when the system is in dark mode. Only rules under ``.source``: nothing else on the
    page changes."""
    scope = f".{CSS_CLASS}"
    light = HtmlFormatter(style=LIGHT_STYLE)
    dark = HtmlFormatter(style=DARK_STYLE)
    parts = [
        "/* dagrun web: a DAG's source, coloured by Pygments "
        f"({LIGHT_STYLE}; {DARK_STYLE} in dark mode). Made when the app starts. */",
        *light.get_background_style_defs(scope),
        *light.get_token_style_defs(scope),
        "@media (prefers-color-scheme: dark) {",
        *dark.get_background_style_defs(scope),
        *dark.get_token_style_defs(scope),
        "}",
    ]
    return "\n".join(parts).encode() + b"\n"
