"""A published page as data: ``page.json`` beside its files, and the Markdown rendered from the same
``Page``. Republishing reads the data back, never the Markdown."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

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
    json_path.write_text(page_json_text(page, source))
    markdown_path.write_text(markdown(page))
    return markdown_path


def page_json_text(page: Page, source: str | None = None) -> str:
    """A published page's ``page.json``."""
    data = page_to_dict(page) | ({"source": source} if source else {})
    return json.dumps(data, indent=1, ensure_ascii=False) + "\n"
