"""A published page as data: ``page.json`` beside its files, and the Markdown rendered from the same
``Page``. Republishing reads the data back, never the Markdown."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rnnlab.files import publish_files, write_text
from rnnlab.page import PAGE_JSON, Page, markdown, page_json_data, page_to_dict, read_page_json


def read_page(folder: Path, name: str | None = None) -> Page:
    """The page published as ``folder/NAME/page.json`` (a study) or ``folder/page.json`` (a map)."""
    return read_page_json((folder / name if name else folder) / PAGE_JSON)


def page_data(folder: Path, name: str | None = None) -> dict[str, Any]:
    """The ``page.json`` of ``read_page`` as data (a map's also names its sweep file, ``source``)."""
    return page_json_data((folder / name if name else folder) / PAGE_JSON)


def write_page(page: Page, markdown_path: Path, json_path: Path, source: str | None = None) -> Path:
    """A published page: its data (``page.json``, with the file it was made from, ``source``) and its Markdown,
    rendered from the same ``Page``."""
    json_path.parent.mkdir(parents=True, exist_ok=True)
    write_text(json_path, page_json_text(page, source))
    write_text(markdown_path, markdown(page))
    return markdown_path


def page_json_text(page: Page, source: str | None = None) -> str:
    """A published page's ``page.json``."""
    data = page_to_dict(page) | ({"source": source} if source else {})
    return json.dumps(data, indent=1, ensure_ascii=False) + "\n"


def published_files(target: Path) -> list[str]:
    """What publishing a page made from stored results at ``target`` (``docs/results/NAME.md``) writes, relative to
    its folder: the page, the page as data (``NAME/page.json``) and the results it was made from (``NAME.json``)."""
    return [target.name, f"{target.stem}/{PAGE_JSON}", target.with_suffix(".json").name]


def publish_with_results(page: Page, results_json: str, target: str | Path, writer: str,
                         figures: dict[str, bytes] | None = None) -> Path:
    """The page at ``target`` with its data, its results and its ``figures`` (path relative to the page's folder →
    PNG bytes) beside it (``published_files``), through the folder's manifest: nothing rnnlab did not write is
    replaced."""
    target = Path(target)
    content = (markdown(page), page_json_text(page), results_json)
    files = {rel: text.encode() for rel, text in zip(published_files(target), content)}
    publish_files(target.parent, {**files, **(figures or {})}, writer)
    return target


def write_results_page(page: Page, results_json: str, out_dir: str | Path, name: str) -> str:
    """A command's ``results.json`` and its page ``name`` in ``out_dir``; returns the page's Markdown."""
    out_dir = Path(out_dir)
    write_text(out_dir / "results.json", results_json)
    text = markdown(page)
    write_text(out_dir / name, text)
    return text
