"""One page, three renderings. A report is built once as a ``Page``: a title and a list of blocks
(headings, paragraphs, tables, figures, lists); ``markdown``, ``html`` and ``text`` render it for the
repository, the browser and the terminal. A renderer is a dozen lines per block kind, so a page's
content is decided in one place and its three forms cannot drift apart.

Inline markup in texts and table cells is Markdown's ``**bold**`` and ```code```; the HTML renderer
escapes everything else.
"""

from __future__ import annotations

import base64
import html as html_escape
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rnnlab.files import is_whole, read_json


@dataclass(frozen=True)
class Heading:
    text: str
    level: int = 2
    anchor: str = ""          # the HTML section's id ("verdicts"), for links into the page


EVERYWHERE = ("markdown", "html", "text")
ON_PAGES = ("markdown", "html")          # a page's prose the terminal leaves out (a legend, the study's summary)


@dataclass(frozen=True)
class Paragraph:
    text: str
    kind: str = ""                       # "about" (muted), "warning" (a box), "" (plain)
    show: tuple[str, ...] = EVERYWHERE   # the renderings that show it ("html": click a column to sort)


@dataclass(frozen=True)
class Table:
    header: list[str]
    rows: list[list[str]]
    kind: str = "results"     # "results" (numbers right-aligned), "verdicts" (text), "sortable" (click to sort)
    title: str = ""           # what the terminal prints above it


@dataclass(frozen=True)
class Figure:
    path: str                 # relative to the page's folder
    title: str
    caption: str = ""
    heading: bool = True      # a level-3 heading with the title above the image


@dataclass(frozen=True)
class Items:
    items: list[str]
    code: bool = False        # each item is a command or a settings line


Block = Heading | Paragraph | Table | Figure | Items


@dataclass
class Page:
    title: str
    blocks: list[Block] = field(default_factory=list)


# -- Markdown ---------------------------------------------------------------------------------------


def md_table(header: list[str], rows: list[list[str]]) -> str:
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(out)


def _md_block(block: Block) -> list[str]:
    if isinstance(block, Heading):
        return ["#" * block.level + " " + block.text, ""]
    if isinstance(block, Paragraph):
        if "markdown" not in block.show:
            return []
        return ["> " + block.text if block.kind == "warning" else block.text, ""]
    if isinstance(block, Table):
        return [md_table(block.header, block.rows), ""]
    if isinstance(block, Figure):
        head = [f"### {block.title}", ""] if block.heading else []
        return [*head, f"![{block.title}]({block.path})", "", *([block.caption, ""] if block.caption else [])]
    return [f"- {item}" for item in block.items] + [""]


def markdown_blocks(blocks: list[Block]) -> str:
    """Blocks as Markdown, for a section of a page (a republished page rewrites its sections)."""
    return "\n".join(line for block in blocks for line in _md_block(block))


# -- the page as data: what is published beside the Markdown, and read back instead of it --------------

PAGE_SCHEMA = 1
PAGE_JSON = "page.json"     # a published page as data, beside its files: what republishing reads back
_KINDS = {cls.__name__: cls for cls in (Heading, Paragraph, Table, Figure, Items)}


def page_to_dict(page: Page) -> dict:
    """The page as JSON-ready data (``page.json`` beside a published page): republishing reloads this, never
    the Markdown rendered from it."""
    return {"schema": PAGE_SCHEMA, "title": page.title,
            "blocks": [{"block": type(b).__name__, **{k: list(v) if isinstance(v, tuple) else v
                                                     for k, v in b.__dict__.items()}} for b in page.blocks]}


_STRINGS, _ROWS = "a list of texts", "a list of rows of texts"
_FIELD_TYPES = {"text": str, "level": int, "anchor": str, "kind": str, "show": _STRINGS, "header": _STRINGS,
                "rows": _ROWS, "title": str, "path": str, "caption": str, "heading": bool, "items": _STRINGS,
                "code": bool}


def _is(value: Any, expected: type | str) -> bool:
    """Whether a block's field read from JSON has the shape its dataclass holds (``_FIELD_TYPES``)."""
    if expected == _STRINGS:
        return isinstance(value, list) and all(isinstance(v, str) for v in value)
    if expected == _ROWS:
        return isinstance(value, list) and all(_is(row, _STRINGS) for row in value)
    if expected is int:
        return is_whole(value)
    return isinstance(value, expected)


def page_from_dict(data: dict, where: str = "page.json") -> Page:
    """The ``Page`` that ``page_to_dict`` wrote; ``where`` names the file in the error a damaged one gets."""
    if not isinstance(data, dict) or data.get("schema") != PAGE_SCHEMA or not isinstance(data.get("blocks"), list):
        raise ValueError(f"{where}: not a page of schema {PAGE_SCHEMA} (a title and a list of blocks)")
    blocks: list[Block] = []
    for i, raw in enumerate(data["blocks"]):
        fields = dict(raw) if isinstance(raw, dict) else {}
        kind = _KINDS.get(fields.pop("block", None))
        if kind is None:
            raise ValueError(f"{where}: block {i} has no known kind ({', '.join(_KINDS)})")
        wrong = next((k for k, v in fields.items() if k in _FIELD_TYPES and not _is(v, _FIELD_TYPES[k])), None)
        if wrong is not None:
            expected = _FIELD_TYPES[wrong]
            words = {str: "a text", int: "a whole number", bool: "true or false"}.get(expected, expected)
            raise ValueError(f"{where}: block {i} ({kind.__name__}): {wrong} is not {words}")
        if kind is Table and any(len(row) != len(fields.get("header", [])) for row in fields.get("rows", [])):
            raise ValueError(f"{where}: block {i} (Table): a row whose cells are not one per column")
        if "show" in fields:
            fields["show"] = tuple(fields["show"])
        try:
            blocks.append(kind(**fields))
        except TypeError as err:
            raise ValueError(f"{where}: block {i} ({kind.__name__}): {err}") from None
    return Page(str(data.get("title", "")), blocks)


def page_json_data(path: str | Path) -> dict:
    """A ``page.json`` as a JSON object; a missing, damaged or non-object file is an error naming it."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no page as data beside the published page; publish it again")
    return read_json(path)


def read_page_json(path: str | Path) -> Page:
    """The ``Page`` kept in a ``page.json``."""
    return page_from_dict(page_json_data(path), str(path))


def _section_span(blocks: list[Block], heading: str) -> tuple[int, int] | None:
    """Where the level-2 section ``heading`` starts and ends (its heading included) in ``blocks``."""
    start = next((i for i, b in enumerate(blocks) if isinstance(b, Heading) and b.level == 2 and b.text == heading),
                 None)
    if start is None:
        return None
    end = next((i for i in range(start + 1, len(blocks)) if isinstance(blocks[i], Heading) and blocks[i].level <= 2),
               len(blocks))
    return start, end


def section(blocks: list[Block], heading: str) -> list[Block]:
    """The blocks of the level-2 section ``heading`` (without the heading); empty when there is none."""
    span = _section_span(blocks, heading)
    return blocks[span[0] + 1:span[1]] if span else []


def replace_section(blocks: list[Block], heading: str, new: list[Block], before: str | None = None) -> list[Block]:
    """``blocks`` with the section ``heading`` replaced by ``new`` (which carries its own heading, or is empty to
    remove it); a page without it gets ``new`` before the first section whose heading starts with ``before``, or
    at the end."""
    span = _section_span(blocks, heading)
    if span is None:
        at = next((i for i, b in enumerate(blocks) if before and isinstance(b, Heading) and b.level == 2
                   and b.text.startswith(before)), len(blocks))
        span = (at, at)
    return blocks[:span[0]] + list(new) + blocks[span[1]:]


def markdown(page: Page) -> str:
    """The page as Markdown (GitHub renders it: the repository's docs/results)."""
    return f"# {page.title}\n\n" + markdown_blocks(page.blocks)


# -- HTML -------------------------------------------------------------------------------------------

CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;max-width:1100px;margin:2em auto;padding:0 1em;
color:#222;line-height:1.45}
h1{font-size:1.7em;margin-bottom:.2em}h2{margin-top:1.6em;border-bottom:1px solid #ddd;padding-bottom:.2em}
table{border-collapse:collapse;margin:.8em 0;font-size:.92em}th,td{border:1px solid #ccc;padding:.35em .6em;
text-align:right}th{background:#f3f5f8}td:first-child,th:first-child{text-align:left}
.warning{background:#fff4d6;border:1px solid #e8c35a;padding:.6em 1em;border-radius:6px}
figure{margin:1.2em 0}figure img{max-width:100%;border:1px solid #eee}figcaption{color:#555;font-size:.9em}
.about{color:#444}code{background:#f3f3f3;padding:0 .2em}
table.verdicts td,table.verdicts th{text-align:left}table.verdicts td:first-child{font-weight:600;white-space:nowrap}
"""

SORTABLE = ("<script>document.querySelectorAll('table.sortable th').forEach(function(th,i){th.style.cursor='pointer';"
            "th.title='sort';th.addEventListener('click',function(){var t=th.closest('table'),b=t.tBodies[0],"
            "rows=Array.from(b.rows),up=th.dataset.up!=='1';th.dataset.up=up?'1':'0';rows.sort(function(a,c){"
            "var x=a.cells[i].textContent,y=c.cells[i].textContent,p=parseFloat(x),q=parseFloat(y);"
            "var r=(isNaN(p)||isNaN(q))?x.localeCompare(y):p-q;return up?r:-r;});"
            "rows.forEach(function(r){b.appendChild(r);});});});</script>")
# lets a headless browser report how many embedded plots it could decode (the report test reads it)
IMAGES_DECODED = ("<script>window.addEventListener('load',function(){var im=document.images,ok=0;"
                  "for(var i=0;i<im.length;i++){if(im[i].complete&&im[i].naturalWidth>0){ok++;}}"
                  "document.body.setAttribute('data-images',im.length);"
                  "document.body.setAttribute('data-images-decoded',ok);});</script>")


def inline_html(text: str) -> str:
    """Escaped text with Markdown's **bold** and `code` as HTML."""
    escaped = html_escape.escape(text)
    escaped = re.sub(r"\*\*(.+?)\*\*", r"<b>\1</b>", escaped)
    return re.sub(r"`([^`]+)`", r"<code>\1</code>", escaped)


def _html_block(block: Block, base: Path) -> str:
    if isinstance(block, Heading):
        return f"<h{block.level}>{inline_html(block.text)}</h{block.level}>"
    if isinstance(block, Paragraph):
        if "html" not in block.show:
            return ""
        css = f" class='{block.kind}'" if block.kind else ""
        return f"<p{css}>{inline_html(block.text)}</p>"
    if isinstance(block, Table):
        head = "".join(f"<th>{inline_html(h)}</th>" for h in block.header)
        body = "".join("<tr>" + "".join(f"<td>{inline_html(c)}</td>" for c in r) + "</tr>" for r in block.rows)
        return f'<table class="{block.kind}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'
    if isinstance(block, Figure):
        data = base64.b64encode((base / block.path).read_bytes()).decode()
        head = f"<h3>{inline_html(block.title)}</h3>" if block.heading else ""
        return (f"<figure>{head}<img alt='{html_escape.escape(block.title)}' src='data:image/png;base64,{data}'>"
                f"<figcaption>{inline_html(block.caption)}</figcaption></figure>")
    wrap = (lambda item: f"<code>{html_escape.escape(item)}</code>") if block.code else inline_html
    return "<ul>" + "".join(f"<li>{wrap(item)}</li>" for item in block.items) + "</ul>"


def html(page: Page, base: Path) -> str:
    """The page as one self-contained HTML file: figures (read from ``base``) embedded, sections with an
    anchor wrapped in <section id=…>, sortable tables made sortable."""
    parts = [f"<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><title>{html_escape.escape(page.title)}"
             f"</title><style>{CSS}</style></head><body>", f"<h1>{inline_html(page.title)}</h1>"]
    open_section = False
    for block in page.blocks:
        if isinstance(block, Heading) and block.level == 2 and open_section:
            parts.append("</section>")
            open_section = False
        if isinstance(block, Heading) and block.anchor:
            parts.append(f"<section id='{block.anchor}'>")
            open_section = True
        parts.append(_html_block(block, base))
    if open_section:
        parts.append("</section>")
    if any(isinstance(b, Table) and b.kind == "sortable" for b in page.blocks):
        parts.append(SORTABLE)
    parts += [IMAGES_DECODED, "</body></html>"]
    return "\n".join(parts)


# -- the terminal -----------------------------------------------------------------------------------


def text(page: Page) -> str:
    """What a terminal shows: the title, the paragraphs meant for it, the tables (each under its title)
    and the lists; no figures, no headings, no settings lines."""
    parts = [f"# {page.title}", ""]
    for block in page.blocks:
        if isinstance(block, Paragraph) and "text" in block.show:
            parts += [block.text, ""]
        elif isinstance(block, Table):
            parts += ([f"{block.title}:", ""] if block.title else []) + [md_table(block.header, block.rows), ""]
        elif isinstance(block, Items) and not block.code:
            parts += [f"- {item}" for item in block.items]
    return "\n".join(parts)
