"""Cells by name: the built-in cells, the zoo, entry points and a user's own file.

A cell class joins with ``@register_cell("mgu")``; an installed package can register its cells
under the entry-point group ``rnnlab.cells`` (``mgu = "mypackage.cells:MGU"``); and a cell in a
file anyone can pass where a cell name goes, as ``path/to/file.py:ClassName`` (the command line's
``--cell``, a TOML file, a sweep): the file is imported once per process and the class registered
under that spec, so the settings a run stores name it and a worker process finds it again.
"""

from __future__ import annotations

import hashlib
import importlib.util
import re
import sys
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

from rnnlab.cells.base import Cell, Option

CELLS: dict[str, type[Cell]] = {}
ENTRY_POINT_GROUP = "rnnlab.cells"
_NAME = re.compile(r"^[a-z][a-z0-9_-]*$")


def register_cell(name: str):
    """Class decorator: make a ``Cell`` subclass available by ``name`` (lower case, digits, - and _)."""
    if not isinstance(name, str) or not _NAME.match(name):
        raise ValueError(f"register_cell: a cell name is lower case letters, digits, '-' and '_', got {name!r}")

    def register(cls: type[Cell]) -> type[Cell]:
        _add(name, cls)
        return cls
    return register


def _add(name: str, cls: Any) -> None:
    if not (isinstance(cls, type) and issubclass(cls, Cell)):
        raise TypeError(f"register_cell({name!r}): expected a subclass of rnnlab.Cell, got {cls!r}")
    if name in CELLS and CELLS[name] is not cls and CELLS[name].__qualname__ != cls.__qualname__:
        raise ValueError(f"register_cell: the name {name!r} is taken by {CELLS[name].__qualname__}")
    cls.name = name
    CELLS[name] = cls


def is_cell_file(spec: str) -> bool:
    """Whether ``spec`` names a cell in a file (``path.py:Class``) rather than a registered name."""
    return isinstance(spec, str) and ":" in spec and spec.rsplit(":", 1)[0].endswith(".py")


def load_cell_file(spec: str) -> type[Cell]:
    """The class ``Class`` of ``path.py:Class``, imported from the file (once per process) and
    registered under ``spec``. The file is Python the user wrote and asked to run, as with any
    import; errors name the file and the class."""
    if spec in CELLS:
        return CELLS[spec]
    path_text, class_name = spec.rsplit(":", 1)
    path = Path(path_text)
    if not path.is_file():
        raise ValueError(f"cell {spec!r}: no such file {path_text}")
    module_name = "rnnlab_user_cell_" + hashlib.sha1(str(path.resolve()).encode()).hexdigest()[:12]
    module = sys.modules.get(module_name)
    if module is None:
        loader_spec = importlib.util.spec_from_file_location(module_name, path)
        module = importlib.util.module_from_spec(loader_spec)
        sys.modules[module_name] = module       # dataclasses and pickling look modules up by name
        try:
            loader_spec.loader.exec_module(module)
        except Exception as err:
            del sys.modules[module_name]
            raise ValueError(f"cell {spec!r}: importing {path_text} failed: {type(err).__name__}: {err}") from err
    cls = getattr(module, class_name, None)
    if cls is None:
        found = sorted(n for n, v in vars(module).items()
                       if isinstance(v, type) and issubclass(v, Cell) and v is not Cell)
        raise ValueError(f"cell {spec!r}: {path_text} defines no {class_name!r}; its cells: {found or 'none'}")
    if not (isinstance(cls, type) and issubclass(cls, Cell)):
        raise ValueError(f"cell {spec!r}: {class_name} in {path_text} is not a subclass of rnnlab.Cell")
    CELLS[spec] = cls
    if "name" not in vars(cls):         # a subclass of a built-in cell must not answer to the built-in's name
        cls.name = spec
    return cls


def _load_entry_points() -> None:
    for point in entry_points(group=ENTRY_POINT_GROUP):
        if point.name not in CELLS:
            _add(point.name, point.load())


def cell_class(name: str) -> type[Cell]:
    """The cell class registered as ``name``, or loaded from ``path.py:Class``."""
    if isinstance(name, type) and issubclass(name, Cell):
        return name
    if name in CELLS:
        return CELLS[name]
    if is_cell_file(name):
        return load_cell_file(name)
    _load_entry_points()
    if name not in CELLS:
        raise ValueError(f"cell: unknown cell {name!r}; expected one of {tuple(sorted(CELLS))} or "
                         "path/to/file.py:ClassName")
    return CELLS[name]


def make_cell(cell: str, input_size: int, hidden_size: int, **kwargs: Any) -> Cell:
    """Build a cell by name (``"rnn"``, ``"gru"``, ``"mgu"``, ``"my_cells.py:MGU"``); kwargs go to
    its constructor."""
    return cell_class(cell)(input_size, hidden_size, **kwargs)


def cell_options(cells: list[str] | None = None) -> dict[str, Option]:
    """The options of the registered cells (or of ``cells``), by name; where two cells declare one
    name, the first registered keeps its default (each cell still checks its own values)."""
    out: dict[str, Option] = {}
    for name in (CELLS if cells is None else cells):
        for option in cell_class(name).options:
            out.setdefault(option.name, option)
    return out


def cell_title(name: str) -> str:
    """How reports name a cell: its declared title, else its registry name."""
    try:
        cls = cell_class(name)
    except ValueError:
        return name
    return cls.title or name
