"""HTML that escapes by default: every value is escaped unless it is already `Markup`.

Pages are `string.Template` files under `reports/static/`; `render` fills them
with `escape`d values, so text from a history or a log can only ever appear as
text. Markup is built only here, from escaped pieces (`element`, `table`).
"""

from __future__ import annotations

import html
import json
import string
from collections.abc import Iterable, Mapping
from functools import cache
from pathlib import Path
from typing import Any

__all__ = ["Markup", "element", "escape", "facts", "join", "link", "render", "static_text", "table",
           "trusted"]

STATIC = Path(__file__).parent / "static"


class Markup(str):
    """A string that is already safe HTML."""


def escape(value: Any) -> Markup:
    """`value` as HTML text; Markup passes through, other non-strings are shown as JSON."""
    if isinstance(value, Markup):
        return value
    if value is None:
        return Markup("")
    if not isinstance(value, str):
        value = json.dumps(value, default=repr, ensure_ascii=False)
    return Markup(html.escape(value, quote=True))


def join(parts: Iterable[Any], separator: str = "") -> Markup:
    return Markup(escape(separator).join(escape(part) for part in parts))


def element(tag: str, *children: Any, **attributes: Any) -> Markup:
    """`<tag attr="...">children</tag>`; `class_` stands for `class`; None drops an attribute."""
    attrs = "".join(
        f' {name.rstrip("_").replace("_", "-")}="{escape(value)}"'
        for name, value in attributes.items() if value is not None
    )
    return Markup(f"<{tag}{attrs}>{join(children)}</{tag}>")


def link(href: str, *text: Any, **attributes: Any) -> Markup:
    return element("a", *(text or (href,)), href=href, **attributes)


def table(headers: Iterable[Any], rows: Iterable[Iterable[Any]], **attributes: Any) -> Markup:
    head = element("tr", *(element("th", h) for h in headers))
    body = join(element("tr", *(element("td", cell) for cell in row)) for row in rows)
    return element("table", element("thead", head), element("tbody", body), **attributes)


def facts(rows: Iterable[tuple[Any, Any]]) -> Markup:
    """A two-column table of name, value without a header row."""
    body = join(element("tr", element("th", name), element("td", value)) for name, value in rows)
    return element("table", element("tbody", body), class_="config")


@cache
def static_text(name: str) -> str:
    """The text of a file under `reports/static/`."""
    return (STATIC / name).read_text(encoding="utf-8")


def trusted(name: str) -> Markup:
    """A static file of ours (CSS, JS) to inline as is: never data from a run."""
    return Markup(static_text(name))


def render(template: str, values: Mapping[str, Any]) -> str:
    """Fill a static template; every value is escaped unless it is Markup."""
    return string.Template(static_text(template)).substitute(
        {name: escape(value) for name, value in values.items()})
