"""Measured reasons as data: a reason is a short template whose numbers are declared quotes.

Why a published number differs from ours is a finding, and a finding's numbers are measurements. They
live in ``findings.toml`` beside this module, never in the studies' code: each reason is a text with
``{name}`` placeholders, and each name is a *quote* saying where its number comes from and how it is
computed, so a page republished from other stored runs says what those runs measured::

    [sentiment.quotes]
    sst2_gru = { table = "sentiment/runs.csv", where = { key = "sst2-gru" }, metric = "test_accuracy",
                 stat = "mean", scale = 100, digits = 1 }

    [[sentiment.reasons]]
    keys = ["sst5-rnn", "sst5-gru"]
    metrics = ["test_accuracy", "test_loss"]
    text = "… near our SST-2 GRU ({sst2_gru}%) …"

A quote reads one of three sources, all under a results root (``docs/results`` when publishing):

- ``table``: a published CSV (a study's ``NAME/runs.csv``, a map's ``MAP/trials.csv``), rows chosen by
  ``where`` (column → a value or a list of values, ``*`` patterns allowed; a list also orders ``per``);
- ``page`` and ``pattern``: the numbers a published page's notes state (an analysis' finding that no
  table holds), one row per match of the regular expression, in the section ``section`` if given;
- ``published``: the study's own published numbers for that metric (declared, not measured).

The value of a row is ``metric`` (or the pattern's group ``value``), less the column ``minus``, less
the study's published value of the row's key for ``minus_published``. With ``per`` the rows are first
averaged per value of that column (per configuration). ``stat`` then makes the number: one of STATS.
Numbers are written with ``digits`` decimals after multiplying by ``scale``, negatives with a true
minus sign, ``sign = true`` adds an explicit plus.

``[NAME.fragments]`` (and ``[shared.fragments]`` with ``[shared.quotes]``) are templates a reason
includes by name, for a sentence several reasons share.
"""

from __future__ import annotations

import fnmatch
import itertools
import math
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from rnnlab.experiments.settings import read_toml
from rnnlab.experiments.statistics import ALPHA, compare_means, mean_std, p_shown, t_interval
from rnnlab.files import read_csv
from rnnlab.page import PAGE_JSON, Heading, markdown_blocks, read_page_json, section

FINDINGS_FILE = Path(__file__).with_name("findings.toml")
RESULTS_ROOT = Path("docs/results")        # where `--publish` writes and the quotes are read by default
SHARED = "shared"

STATS = {
    "mean": "the mean",
    "std": "the sample standard deviation",
    "min": "the smallest", "max": "the largest",
    "range": "'a-b' from the smallest to the largest ('a' where both round alike)",
    "values": "every value in order, 'a / b / c'",
    "interval": "the 95% t interval of the mean, '[a, b]'",
    "mean_std": "'mean ± std'",
    "sum": "the sum", "count": "how many", "of": "'k of n': the sum of 0/1 values of n",
    "mode": "the most common value", "mode_count": "'k of n' holding the most common value",
    "difference": "the difference from `against`: with the interval and p of the exact permutation test where it is "
                  "significant, else 'not significant with n seeds' and that test's p",
    "z": "how many standard deviations `value` lies above the mean",
}
_QUOTE_FIELDS = {"each", "table", "tables", "page", "section", "pattern", "published", "where", "metric", "minus",
                 "minus_published", "published_key", "per", "stat", "against", "value", "digits", "std_digits",
                 "scale", "sign", "thousands"}


class FindingError(ValueError):
    """A finding that cannot be computed: names the study, the quote and what is wrong."""


@dataclass(frozen=True)
class Finding:
    """One reason of a study as data: the text, its quotes (name → declaration) and the fragments it may
    include (name → template). Rendered with the stored results by ``render``."""

    study: str
    text: str
    quotes: dict[str, dict[str, Any]] = field(default_factory=dict)
    fragments: dict[str, str] = field(default_factory=dict)

    def names(self) -> list[str]:
        """The quotes this reason's text uses, fragments included, in order of appearance."""
        found: list[str] = []
        pending = [self.text]
        while pending:
            for name in re.findall(r"\{(\w+)\}", pending.pop(0)):
                if name in self.fragments:
                    pending.append(self.fragments[name])
                elif name not in found:
                    found.append(name)
        return found


def _substitute(value: Any, names: dict[str, str]) -> Any:
    if isinstance(value, str):
        for name, replacement in names.items():
            value = value.replace(f"{{{name}}}", replacement)
        return value
    if isinstance(value, list):
        return [_substitute(v, names) for v in value]
    if isinstance(value, dict):
        return {k: _substitute(v, names) for k, v in value.items()}
    return value


def expand_quotes(declared: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Quote families written once: ``each = { cell = ["rnn", "gru"] }`` makes ``NAME_rnn`` and ``NAME_gru``,
    with ``{cell}`` replaced in every text of the declaration (several names: every combination)."""
    quotes = {}
    for name, quote in declared.items():
        each = quote.get("each", {})
        rest = {k: v for k, v in quote.items() if k != "each"}
        for combination in itertools.product(*each.values()):
            names = dict(zip(each, map(str, combination)))
            quotes[re.sub(r"\W", "_", "_".join([name, *names.values()]))] = _substitute(rest, names)
    return quotes


def _study_section(study: str, path: Path) -> tuple[dict, dict[str, dict[str, Any]], dict[str, str]]:
    """The study's table of the file, and the quotes and fragments its texts may use (the shared ones too)."""
    data = read_toml(path)
    section, shared = data.get(study, {}), data.get(SHARED, {})
    quotes = expand_quotes({**shared.get("quotes", {}), **section.get("quotes", {})})
    fragments = {**shared.get("fragments", {}), **section.get("fragments", {})}
    return section, quotes, fragments


def _finding(study: str, entry: dict, quotes: dict, fragments: dict, where: str, needs: set[str]) -> Finding:
    missing = needs - set(entry)
    if missing:
        raise FindingError(f"{where}: missing {', '.join(sorted(missing))}")
    finding = Finding(study, entry["text"], quotes, fragments)
    for name in finding.names():
        if name not in quotes:
            raise FindingError(f"{where}: the text quotes {{{name}}}, which no [{study}.quotes] or "
                               f"[{SHARED}.quotes] declares")
        _check_quote(f"{where}: quote {name!r}", quotes[name])
    return finding


def load_findings(study: str, published: dict | None = None, path: Path = FINDINGS_FILE
                  ) -> dict[tuple[str, str], Finding]:
    """The reasons ``findings.toml`` declares for ``study``: (configuration key, metric) → Finding. A
    reason's ``keys`` may be patterns (``nottingham-*``): they name the study's published numbers that
    match (``published``: the study's (key, metric) → value)."""
    section, quotes, fragments = _study_section(study, path)
    found: dict[tuple[str, str], Finding] = {}
    for i, entry in enumerate(section.get("reasons", [])):
        where = f"{path.name}: [[{study}.reasons]] #{i + 1}"
        finding = _finding(study, entry, quotes, fragments, where, {"keys", "metrics", "text"})
        for pattern in entry["keys"]:
            for metric in entry["metrics"]:
                keys = [k for k, m in (published or {}) if m == metric and fnmatch.fnmatchcase(k, pattern)] \
                    if published is not None else [pattern]
                if not keys:
                    raise FindingError(f"{where}: no published {metric} of {study} has a key matching {pattern!r}")
                found.update({(key, metric): finding for key in keys})
    return found


def load_finding_notes(study: str, path: Path = FINDINGS_FILE) -> list[Finding]:
    """The study's measured findings that explain no published number (``[[NAME.notes]]``): shown in the
    published page's 'Findings' section."""
    section, quotes, fragments = _study_section(study, path)
    return [_finding(study, entry, quotes, fragments, f"{path.name}: [[{study}.notes]] #{i + 1}", {"text"})
            for i, entry in enumerate(section.get("notes", []))]


def _check_quote(where: str, quote: dict[str, Any]) -> None:
    unknown = set(quote) - _QUOTE_FIELDS
    if unknown:
        raise FindingError(f"{where}: unknown field(s) {', '.join(sorted(unknown))} (known: "
                           f"{', '.join(sorted(_QUOTE_FIELDS))})")
    if sum(k in quote for k in ("table", "tables", "page", "published")) != 1:
        raise FindingError(f"{where}: needs exactly one source: table, tables, page (with pattern) or published")
    if "page" in quote and "pattern" not in quote:
        raise FindingError(f"{where}: a page quote needs its pattern")
    if quote.get("stat") not in STATS:
        raise FindingError(f"{where}: stat {quote.get('stat')!r} is not one of {', '.join(STATS)}")
    if quote["stat"] == "difference" and "against" not in quote:
        raise FindingError(f"{where}: stat {quote['stat']!r} needs `against`")
    if quote["stat"] == "z" and "value" not in quote:
        raise FindingError(f"{where}: stat 'z' needs `value`")


# -- reading the sources ----------------------------------------------------------------------------


def _same(cell: str, wanted: Any) -> bool:
    """A table cell against a declared value: numbers by value ("300" is 300.0), text by pattern."""
    try:
        return float(cell) == float(wanted)
    except (TypeError, ValueError):
        return fnmatch.fnmatchcase(str(cell), str(wanted))


def _rank(row: dict[str, str], where: dict[str, Any], per: list[str]) -> int | None:
    """Where the row's ``per`` value stands in the declared list (None: the row is not selected)."""
    rank = 0
    for column, wanted in where.items():
        if column not in row:
            return None
        options = wanted if isinstance(wanted, list) else [wanted]
        hit = next((i for i, option in enumerate(options) if _same(row[column], option)), None)
        if hit is None:
            return None
        if column in per:
            rank = hit
    return rank


def _read_table(root: Path, table: str, where_: str) -> list[dict[str, str]]:
    path = root / table
    if not path.is_file():
        raise FindingError(f"{where_}: table {path} does not exist")
    try:
        rows = read_csv(path, dict, "a row of the table")
    except ValueError as err:
        raise FindingError(f"{where_}: {err}") from None
    return [row for row in rows if row.get("status", "ok") in ("ok", "")]


def _page_rows(root: Path, quote: dict[str, Any], where_: str) -> list[dict[str, str]]:
    """Rows quoted from a published page's text, read from the page as data (``NAME/page.json`` beside
    ``NAME.md``, or ``MAP/page.json`` beside ``MAP/report.md``), never from its Markdown."""
    page_md = Path(quote["page"])
    path = root / (page_md.parent if page_md.name == "report.md" else page_md.with_suffix("")) / PAGE_JSON
    try:
        blocks = read_page_json(path).blocks
    except (FileNotFoundError, ValueError) as err:
        raise FindingError(f"{where_}: page {root / page_md}: {err}") from None
    if "section" in quote:
        if Heading(quote["section"]) not in blocks:
            raise FindingError(f"{where_}: page {root / page_md} has no section '## {quote['section']}'")
        blocks = section(blocks, quote["section"])
    text = markdown_blocks(blocks)
    rows = [m.groupdict() for m in re.finditer(quote["pattern"], text)]
    if rows and "value" not in rows[0]:
        raise FindingError(f"{where_}: the pattern needs a group (?P<value>…)")
    return rows


def _published_value(published: dict, row: dict[str, str], quote: dict[str, Any], where_: str) -> float:
    """The study's published number the row is compared with: the metric ``minus_published`` of the key
    ``published_key`` (a pattern filled from the row's columns; default: the row's own key)."""
    pattern = quote.get("published_key", "{key}").format_map(row)
    keys = [k for k, m in published if m == quote["minus_published"] and fnmatch.fnmatchcase(k, pattern)]
    if len(keys) != 1:
        raise FindingError(f"{where_}: {len(keys)} published {quote['minus_published']} match {pattern!r}, not one")
    value = published[(keys[0], quote["minus_published"])]
    return float(getattr(value, "value", value))


def _per(quote: dict[str, Any]) -> list[str]:
    per = quote.get("per") or []
    return [per] if isinstance(per, str) else list(per)


def _rows(root: Path, quote: dict[str, Any], published: dict, where_: str) -> list[tuple[int, tuple, float]]:
    """(rank, group, value) of every selected row."""
    if "tables" in quote:   # several tables: each one's groups kept apart, in the order of the tables
        out = []
        for i, selection in enumerate(quote["tables"]):
            part = {k: v for k, v in quote.items() if k != "tables"} | selection
            out += [(i * 10_000 + rank, (i, *group), value) for rank, group, value in _rows(root, part, published,
                                                                                          where_)]
        return out
    where, per, metric = quote.get("where", {}), _per(quote), quote.get("metric", "value")
    if "table" in quote:
        raw = _read_table(root, quote["table"], where_)
    elif "page" in quote:
        raw = _page_rows(root, quote, where_)
    else:
        metric = quote["published"]
        raw = [{"key": k, "value": str(getattr(v, "value", v))} for (k, m), v in published.items() if m == metric]
        metric = "value"
    source = quote.get("table") or quote.get("page") or "the published numbers"
    out = []
    for row in raw:
        rank = _rank(row, where, per)
        if rank is None:
            continue
        if metric not in row or row[metric] in ("", None):
            raise FindingError(f"{where_}: no {metric!r} in a selected row of {source}")
        try:
            value = float(row[metric])
        except ValueError:
            raise FindingError(f"{where_}: {metric} {row[metric]!r} is not a number (in {source})") from None
        if not math.isfinite(value):
            raise FindingError(f"{where_}: {metric} is {value} in a selected row (a broken run, not a finding)")
        if "minus" in quote:
            value -= float(row[quote["minus"]])
        if "minus_published" in quote:
            value -= _published_value(published, row, quote, where_)
        out.append((rank, tuple(row.get(column) or "" for column in per), value))
    if not out:
        raise FindingError(f"{where_}: no row of {source} matches {where}")
    return out


def _values(root: Path, quote: dict[str, Any], published: dict, where_: str) -> list[float]:
    """The numbers the statistic reads: the selected rows, or with ``per`` each group's mean in the
    declared order."""
    rows = _rows(root, quote, published, where_)
    if not quote.get("per"):
        return [value for _, _, value in rows]
    groups: dict[tuple[int, tuple], list[float]] = {}
    for rank, group, value in rows:
        groups.setdefault((rank, group), []).append(value)
    return [float(np.mean(v)) for _, v in sorted(groups.items(), key=lambda item: item[0][0])]


# -- writing the numbers -----------------------------------------------------------------------------


def number(x: float, digits: int = 2, sign: bool = False, thousands: bool = False) -> str:
    """A number as the reasons write it: fixed decimals, a true minus sign, an explicit plus if asked."""
    text = f"{x:{'+' if sign else ''}{',' if thousands else ''}.{digits}f}"
    return text.replace("-", "−")


def p_text(p: float) -> str:
    return "p < 0.001" if p < 0.001 else f"p = {p_shown(p)}"


def quote_value(name: str, quote: dict[str, Any], root: Path, published: dict | None = None) -> str:
    """One quote's number, computed from the stored results under ``root``."""
    where_ = f"quote {name!r}"
    published = published or {}
    xs = _values(root, quote, published, where_)
    stat, scale = quote["stat"], quote.get("scale", 1.0)
    digits = quote.get("digits", 2)

    def fmt(x: float, signed: bool = False) -> str:
        return number(x * scale, digits, signed, quote.get("thousands", False))

    if stat in ("mean", "std", "min", "max", "sum"):
        value = {"mean": np.mean, "std": lambda v: mean_std(v)[1], "min": np.min, "max": np.max,
                 "sum": np.sum}[stat](xs)
        return fmt(float(value), quote.get("sign", False))
    if stat == "range":
        low, high = fmt(min(xs)), fmt(max(xs))
        return low if low == high else f"{low}-{high}"
    if stat == "values":
        return " / ".join(fmt(x) for x in xs)
    if stat == "interval":
        low, high = t_interval(xs)
        return f"[{fmt(low)}, {fmt(high)}]"
    if stat == "mean_std":
        mean, std = mean_std(xs)
        return f"{fmt(mean)} ± {number(std * scale, quote.get('std_digits', digits))}"
    if stat == "count":
        return str(len(xs))
    if stat == "of":
        return f"{sum(xs):.0f} of {len(xs)}"
    if stat in ("mode", "mode_count"):
        (mode, count), = Counter(xs).most_common(1)
        return fmt(mode) if stat == "mode" else f"{count} of {len(xs)}"
    if stat == "z":
        mean, std = mean_std(xs)
        if std == 0:
            raise FindingError(f"{where_}: no spread to measure {quote['value']} in standard deviations")
        return fmt((quote["value"] - mean) / std)
    # a difference between two selections is always quoted with its interval and test over seeds
    other = _values(root, {**quote, **quote["against"], "per": None}, published, f"{where_} (against)")
    result = compare_means(xs, other)
    shown = fmt(result.difference, quote.get("sign", False))
    if result.p < ALPHA:
        return f"{shown} [{fmt(result.low)}, {fmt(result.high)}] ({p_text(result.p)})"
    return f"{shown} (not significant with {min(len(xs), len(other))} seeds, {p_text(result.p)})"


def render(finding: Finding, root: Path = RESULTS_ROOT, published: dict | None = None) -> str:
    """The finding's text with every quote computed from the stored results under ``root``."""
    values = {name: quote_value(name, finding.quotes[name], root, published) for name in finding.names()}

    def fill(template: str) -> str:
        return re.sub(r"\{(\w+)\}", lambda m: fill(finding.fragments[m.group(1)])
                      if m.group(1) in finding.fragments else values[m.group(1)], template)

    return fill(finding.text)


def render_reasons(reasons: dict[tuple[str, str], Any], root: Path = RESULTS_ROOT, published: dict | None = None,
                   strict: bool = True) -> dict[tuple[str, str], str]:
    """Every reason as text: a Finding rendered from the stored results under ``root``, a plain text
    as it is. ``strict=False`` leaves out a finding that does not compute from what is under ``root``
    (a run outside the repository, or results other than the published ones): a run never fails for
    the wording of a published page."""
    out = {}
    cache: dict[int, str] = {}
    for row, reason in reasons.items():
        if not isinstance(reason, Finding):
            out[row] = reason
            continue
        if id(reason) not in cache:
            try:
                cache[id(reason)] = render(reason, root, published)
            except FindingError:
                if strict:
                    raise
                cache[id(reason)] = ""
        if cache[id(reason)]:
            out[row] = cache[id(reason)]
    return out
