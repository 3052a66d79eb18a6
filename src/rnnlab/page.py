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


def blocks_from_markdown(text: str) -> list[Block]:
    """The blocks ``markdown_blocks`` wrote, read back from its Markdown (headings, tables, items,
    figures with their captions, paragraphs): a published page's sections kept as they were."""
    blocks: list[Block] = []
    chunks = [c.strip("\n") for c in re.split(r"\n\s*\n", text) if c.strip()]
    i = 0
    while i < len(chunks):
        chunk = chunks[i]
        lines = chunk.splitlines()
        heading = re.fullmatch(r"(#{2,6}) (.+)", lines[0]) if len(lines) == 1 else None
        figure = re.fullmatch(r"!\[(.*)\]\((.+)\)", chunk)
        if heading:
            blocks.append(Heading(heading.group(2), len(heading.group(1))))
        elif figure:
            caption = chunks[i + 1] if i + 1 < len(chunks) and not chunks[i + 1].startswith(("#", "|", "- ", "![")) \
                else ""
            blocks.append(Figure(figure.group(2), figure.group(1), caption, heading=False))
            i += bool(caption)
        elif all(line.startswith("|") for line in lines) and len(lines) >= 2:
            cells = [line.strip()[2:-2].split(" | ") for line in lines]
            blocks.append(Table(cells[0], cells[2:]))
        elif all(line.startswith("- ") for line in lines):
            blocks.append(Items([line[2:] for line in lines]))
        else:
            warning = chunk.startswith("> ")
            blocks.append(Paragraph(chunk[2:] if warning else chunk, kind="warning" if warning else ""))
        i += 1
    return blocks


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
