"""A published page as data: ``page.json`` beside its files, and the Markdown rendered from the same
``Page``. Republishing reads the data back, never the Markdown."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rnnlab.page import Page, markdown, page_from_dict, page_to_dict

PAGE_JSON = "page.json"     # a published page as data, beside its files: what republishing reads back


def read_page(folder: Path, name: str | None = None) -> Page:
    """The page published as ``folder/NAME/page.json`` (a study) or ``folder/page.json`` (a map)."""
    return page_from_dict(page_data(folder, name), str((folder / name if name else folder) / PAGE_JSON))


def page_data(folder: Path, name: str | None = None) -> dict[str, Any]:
    path = (folder / name if name else folder) / PAGE_JSON
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no page as data beside the published page; publish it again")
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as err:
        raise ValueError(f"{path}: damaged JSON ({err})") from None
    if not isinstance(data, dict):
        raise ValueError(f"{path}: not a page (a JSON object)")
    return data


def write_page(page: Page, markdown_path: Path, json_path: Path, source: str | None = None) -> Path:
    """A published page: its data (``page.json``, with the file it was made from, ``source``) and its Markdown,
    rendered from the same ``Page``."""
    json_path.parent.mkdir(parents=True, exist_ok=True)
    data = page_to_dict(page) | ({"source": source} if source else {})
    json_path.write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n")
    markdown_path.write_text(markdown(page))
    return markdown_path
