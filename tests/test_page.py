"""The Markdown that pages are written in, read back: what ``blocks_from_markdown`` parses re-renders to the
same text, for any sequence of blocks rnnlab writes (republishing keeps a page's other sections so)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from rnnlab.page import Figure, Heading, Items, Paragraph, Table, blocks_from_markdown, markdown_blocks

WORDS = st.text(alphabet="abcdefghijklmnopqrstuvwxyzABC0123456789.,;:()±−", min_size=1, max_size=12)
LINE = st.lists(WORDS, min_size=1, max_size=6).map(" ".join)
BLOCKS = st.one_of(
    st.builds(Heading, LINE, st.integers(2, 4)),
    st.builds(Paragraph, LINE),
    st.builds(Paragraph, LINE, st.just("warning")),
    st.integers(1, 4).flatmap(lambda width: st.builds(
        Table, st.lists(WORDS, min_size=width, max_size=width),
        st.lists(st.lists(WORDS, min_size=width, max_size=width), max_size=4))),
    st.builds(Items, st.lists(LINE, min_size=1, max_size=4)),
    st.builds(Figure, WORDS.map(lambda w: f"figs/{w}.png"), LINE, st.one_of(st.just(""), LINE), st.just(False)),
)


@settings(max_examples=200, deadline=None)
@given(st.lists(BLOCKS, min_size=1, max_size=8))
def test_markdown_read_back_renders_to_the_same_text(blocks):
    text = markdown_blocks(blocks)
    assert markdown_blocks(blocks_from_markdown(text)) == text


def test_a_table_and_a_captioned_figure_come_back_as_themselves():
    blocks = [Heading("Results", 2), Table(["a", "b"], [["1", "2"], ["3", "4"]]),
              Figure("x/y.png", "a plot", "what it shows", heading=False), Items(["one", "two"])]
    assert blocks_from_markdown(markdown_blocks(blocks)) == blocks
