"""A page as data: what ``page_to_dict`` writes (``page.json`` beside a published page) comes back as the same page,
for any blocks rnnlab writes; sections are replaced on the blocks, never on the Markdown; a damaged page.json is
refused naming the file and the block."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rnnlab.page import (
    Figure,
    Heading,
    Items,
    Page,
    Paragraph,
    Table,
    markdown,
    markdown_blocks,
    page_from_dict,
    page_to_dict,
    replace_section,
    section,
)

WORDS = st.text(alphabet="abcdefghijklmnopqrstuvwxyzABC0123456789.,;:()±−|`*\"\\", min_size=1, max_size=12)
LINE = st.lists(WORDS, min_size=1, max_size=6).map(" ".join)
BLOCKS = st.one_of(
    st.builds(Heading, LINE, st.integers(2, 4)),
    st.builds(Paragraph, LINE, st.sampled_from(["", "about", "warning"]),
              st.sampled_from([("markdown", "html", "text"), ("markdown", "html"), ("html",)])),
    st.integers(1, 4).flatmap(lambda width: st.builds(
        Table, st.lists(WORDS, min_size=width, max_size=width),
        st.lists(st.lists(WORDS, min_size=width, max_size=width), max_size=4),
        st.sampled_from(["results", "verdicts", "sortable"]), st.one_of(st.just(""), LINE))),
    st.builds(Items, st.lists(LINE, min_size=1, max_size=4), st.booleans()),
    st.builds(Figure, WORDS.map(lambda w: f"figs/{w}.png"), LINE, st.one_of(st.just(""), LINE), st.booleans()),
)


@settings(max_examples=200, deadline=None)
@given(LINE, st.lists(BLOCKS, max_size=10))
def test_a_page_through_json_is_the_same_page(title, blocks):
    page = Page(title, blocks)
    again = page_from_dict(json.loads(json.dumps(page_to_dict(page))))
    assert again == page and markdown(again) == markdown(page)


@settings(max_examples=200, deadline=None)
@given(st.lists(BLOCKS, max_size=10), LINE, st.lists(BLOCKS, max_size=3))
def test_replacing_a_section_changes_that_section_and_nothing_else(blocks, heading, new_body):
    blocks = [Heading("Intro"), *blocks, Heading(heading), Paragraph("old"), Heading("Tail"), Paragraph("kept")]
    new_body = [b for b in new_body if not (isinstance(b, Heading) and b.level <= 2)]
    replaced = replace_section(blocks, heading, [Heading(heading), *new_body])
    if blocks.count(Heading(heading)) == 1:
        assert section(replaced, heading) == new_body
        assert replaced[-2:] == [Heading("Tail"), Paragraph("kept")]
    start = blocks.index(Heading(heading))
    assert replaced[:start] == blocks[:start]          # everything before the first such section is untouched


def test_a_missing_section_goes_before_the_one_named_or_at_the_end():
    blocks = [Paragraph("top"), Heading("Results at the study's setting"), Paragraph("r")]
    added = replace_section(blocks, "Findings", [Heading("Findings"), Items(["f"])], before="Results")
    assert added == [Paragraph("top"), Heading("Findings"), Items(["f"]), *blocks[1:]]
    assert replace_section(blocks, "Notes", [Heading("Notes")]) == [*blocks, Heading("Notes")]
    assert replace_section(added, "Findings", []) == blocks          # empty: the section is removed
    assert section(blocks, "Figures") == []


def test_the_markdown_of_sections_is_the_pages_own():
    blocks = [Heading("A"), Table(["x"], [["1"]]), Figure("f.png", "t", "c", heading=False), Items(["i"])]
    assert markdown(Page("T", blocks)) == "# T\n\n" + markdown_blocks(blocks)


@pytest.mark.parametrize("data, says", [
    ([], "not a page of schema 1"),
    ({"schema": 2, "blocks": []}, "not a page of schema 1"),
    ({"schema": 1, "blocks": [{"block": "Video"}]}, "block 0 has no known kind"),
    ({"schema": 1, "blocks": [{"block": "Heading", "text": "a", "colour": "red"}]}, "block 0 (Heading)"),
    ({"schema": 1, "blocks": [{"block": "Heading", "text": "a", "level": "2"}]}, "level is not a whole number"),
    ({"schema": 1, "blocks": [{"block": "Heading", "text": "a", "level": True}]}, "level is not a whole number"),
    ({"schema": 1, "blocks": [{"block": "Items", "items": "abc"}]}, "(Items): items is not a list of texts"),
    ({"schema": 1, "blocks": [{"block": "Table", "header": ["a"], "rows": [["1", 2]]}]}, "rows is not a list of rows"),
    ({"schema": 1, "blocks": [{"block": "Table", "header": ["a"], "rows": [["1", "2"]]}]}, "not one per column"),
    ({"schema": 1, "blocks": [{"block": "Figure", "path": None, "title": "t"}]}, "path is not a text"),
])
def test_a_damaged_page_is_refused_naming_the_file_and_the_block(data, says):
    with pytest.raises(ValueError, match=r"^docs/results/x/page\.json: ") as err:
        page_from_dict(data, "docs/results/x/page.json")
    assert says in str(err.value)


def test_a_missing_or_damaged_page_json_is_an_error_naming_the_file(tmp_path):
    from rnnlab.page import read_page_json

    path = tmp_path / "ptb" / "page.json"
    with pytest.raises(FileNotFoundError, match="ptb/page.json: no page as data"):
        read_page_json(path)
    path.parent.mkdir()
    for text, says in (("{not json", "not readable as JSON"), ("[1, 2]", "expected a JSON dict, found list"),
                       (b"\xfb{}", "not readable as JSON")):
        path.write_bytes(text if isinstance(text, bytes) else text.encode())
        with pytest.raises(ValueError, match=f"ptb/page.json: {says}"):
            read_page_json(path)
    path.write_text(json.dumps(page_to_dict(Page("t", [Heading("A")]))))
    assert read_page_json(path) == Page("t", [Heading("A")])
