"""The formal languages of the length-generalisation suite (``rnnlab.data.formal``): each label against an
independent oracle, the lengths each split draws, and the task's per-length score."""

from __future__ import annotations

import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rnnlab.data import formal
from rnnlab.data.tasks import get_task

seeds = st.integers(0, 2**32 - 1)


def _oracle(language: str, s: np.ndarray) -> int:
    """Each language's answer computed another way: from the string's text."""
    if language == "parity-check":
        return int(str(s.tolist()).count("1") % 2)
    if language == "even-pairs":
        return int(sum(a != b for a, b in zip(s, s[1:])) % 2 == 0)
    if language == "cycle-navigation":
        position = 0
        for action in s:
            position = (position + {0: -1, 1: 0, 2: 1}[int(action)]) % 5
        return position
    if language == "modular-arithmetic":
        return eval("".join("+-*"[t - formal.PLUS] if t >= formal.PLUS else str(t) for t in s)) % 5
    if language in ("dyck-1", "dyck-2"):
        text = "".join("()[]"[t] for t in s)
        while "()" in text or "[]" in text:
            text = text.replace("()", "").replace("[]", "")
        return int(text == "")
    if language == "anbncn":
        k = len(s) // 3
        return int(re.fullmatch(f"a{{{k}}}b{{{k}}}c{{{k}}}", "".join("abc"[t] for t in s)) is not None)
    raise AssertionError(language)


@settings(max_examples=30, deadline=None)
@given(seed=seeds, language=st.sampled_from(sorted(formal.LANGUAGES)), low=st.integers(1, 60),
       span=st.integers(0, 60))
def test_every_label_is_what_an_independent_oracle_says(seed, language, low, span):
    rule = formal.LANGUAGES[language]
    lengths = rule.lengths(low, low + span + 3)
    strings, labels = rule.generate(lengths, np.random.default_rng(seed))
    assert [len(s) for s in strings] == list(lengths)
    assert all(s.min() >= 0 and s.max() < rule.alphabet for s in strings)
    assert all(0 <= y < rule.classes for y in labels)
    assert [_oracle(language, s) for s in strings] == labels.tolist()


@pytest.mark.parametrize("language", sorted(formal.LANGUAGES))
def test_the_classes_are_near_chance_and_the_answer_is_not_in_the_length(language):
    """The memoryless baseline is the stated chance: classes are drawn evenly, and for the membership tasks every
    length from 2 holds both answers (a near miss has the length of a member; one symbol has no pairs, so even
    pairs says yes to it)."""
    rule = formal.LANGUAGES[language]
    lengths = np.random.default_rng(0).choice(rule.lengths(1, 60), 4000)
    strings, labels = rule.generate(lengths, np.random.default_rng(1))
    shares = np.bincount(labels, minlength=rule.classes) / labels.size
    assert np.abs(shares - rule.chance).max() < 0.04 and rule.chance == 1 / rule.classes
    if rule.classes == 2:
        for n in np.unique(lengths[lengths >= 2])[:10]:
            assert set(labels[lengths == n]) == {0, 1}, n


@pytest.mark.parametrize("language", sorted(formal.LANGUAGES))
def test_a_formal_task_trains_short_and_tests_long(language):
    task = get_task(language, n_train=60, n_dev=20, n_test=40, seed=3)
    rule = formal.LANGUAGES[language]
    assert (task.input_size, task.output_size, task.head) == (rule.alphabet + 1, rule.classes, "last")
    for split, (low, high) in (("train", (1, 40)), ("dev", (1, 40)), ("test", (41, 500))):
        data = task.splits[split]
        assert all(x[-1] == rule.alphabet for x in data.inputs)          # the answer slot, last
        lengths = data.lengths - 1
        assert lengths.min() >= low and lengths.max() <= high, split
        assert all(n % rule.step == rule.offset % rule.step for n in lengths)
    assert task.info["chance"] == rule.chance
    with pytest.raises(ValueError, match="train_max_length < test_max_length"):
        get_task(language, train_max_length=40, test_max_length=40)


def test_the_length_score_averages_the_accuracy_at_each_length():
    """Delétang's score: the accuracy at each test length, averaged over lengths (not over strings), and per band."""
    from rnnlab.data.tasks import build_model

    task = get_task("parity-check", n_train=20, n_dev=10, n_test=300, test_max_length=300, seed=0)
    model = build_model(task, "gru", hidden=4, seed=0, dtype=np.float64)
    got = task.task_metrics(model)
    data = task.splits["test"]
    right = np.array([np.argmax(model.forward(data.batch(np.array([i])))[0][0]) == data.targets[i]
                      for i in range(len(data))])
    lengths = data.lengths - 1
    assert got["test_length_accuracy"] == pytest.approx(np.mean([right[lengths == n].mean()
                                                                 for n in np.unique(lengths)]))
    assert got["test_accuracy_41_100"] == pytest.approx(right[lengths <= 100].mean())
    assert {k for k in got if k.startswith("test_accuracy_")} == {"test_accuracy_41_100", "test_accuracy_101_200",
                                                                  "test_accuracy_201_300"}
