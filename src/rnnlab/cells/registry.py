"""Cells by name: the built-in cells, the zoo, entry points and a user's own file.

A cell class joins with ``@register_cell("mgu")``; an installed package can register its cells
under the entry-point group ``rnnlab.cells`` (``mgu = "mypackage.cells:MGU"``); and a cell in a
file goes where a cell name goes, as ``path/to/file.py:ClassName``: the file is imported once per
process and the class registered under that spec, so the settings a run stores name it and a worker
process finds it again.

A file is imported only once the person running rnnlab has named it: on the command line (``--cell
FILE:Class``, ``check-cell FILE:Class``) or by calling ``load_cell_file`` themselves. Settings read
from data (a checkpoint, a stored study, a TOML file) may name a cell file, but naming it there
imports nothing: ``cell_class`` then raises ``CellFileNotNamed``, which says which flag to pass. The
sha256 of each named file is taken when it is named; a run stores it, and a file that changed since
is refused with both hashes.
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
from rnnlab.files import sha256_of

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


class CellFileNotNamed(ValueError):
    """Settings read from data name a cell file that the command line did not name."""


_NAMED: dict[str, str] = {}     # resolved path of each cell file named in this process → its sha256 then


def _cell_file(spec: str) -> Path:
    """The file of ``path.py:Class``. A stored path that is not found from here (a relative one, stored by a run
    made in another folder) is the file of that name the command line named, if it named exactly one: its hash is
    then checked against the one the run stored (``settings.check_cell_unchanged``)."""
    path = Path(spec.rsplit(":", 1)[0])
    if path.is_file():
        return path
    named = [Path(p) for p in _NAMED if Path(p).name == path.name]
    if len(named) == 1:
        return named[0]
    raise ValueError(f"cell {spec!r}: no such file {path} (a stored path is looked for from the working folder: "
                     f"name the file with --cell FILE.py:{spec.rsplit(':', 1)[-1]})")


def name_cell_file(spec: str) -> str:
    """Record that the person running rnnlab named the cell file of ``path.py:Class`` (the command
    line's ``--cell``), which lets it be imported in this process and in its workers; returns its sha256."""
    path = _cell_file(spec)
    digest = sha256_of(path)
    _NAMED[str(path.resolve())] = digest
    return digest


def named_cell_files() -> dict[str, str]:
    """The cell files named in this process (path → sha256), for worker processes to adopt."""
    return dict(_NAMED)


def adopt_named_cell_files(named: dict[str, str]) -> None:
    """In a worker process: the cell files its driver's command line named (``named_cell_files``)."""
    _NAMED.update(named)


def cell_file_sha256(spec: Any) -> str | None:
    """The sha256 of a named cell file as it was named (None for a registered cell)."""
    if not is_cell_file(spec):
        return None
    try:
        return _NAMED.get(str(_cell_file(spec).resolve()))
    except ValueError:
        return None


def load_cell_file(spec: str) -> type[Cell]:
    """The class ``Class`` of ``path.py:Class``, imported from the file (once per process) and
    registered under ``spec``. Calling it names the file (``name_cell_file``): it is Python the
    caller asked to run, as with any import; errors name the file and the class."""
    name_cell_file(spec)
    return _import_cell_file(spec)


_IMPORTED: dict[str, str] = {}      # resolved path → the sha256 of the code imported from it in this process


def _import_cell_file(spec: str) -> type[Cell]:
    """``load_cell_file`` for a file named before, and only then."""
    path_text, class_name = spec.rsplit(":", 1)
    path = _cell_file(spec)
    named = _NAMED.get(str(path.resolve()))
    imported = _IMPORTED.get(str(path.resolve()))
    if spec in CELLS and imported is None:      # registered under this spec by hand, not imported from the file
        return CELLS[spec]
    if named is None:
        raise CellFileNotNamed(f"names the cell file {path_text}, which this command line does not name; "
                               f"rnnlab imports a Python file only when the command line names it: pass --cell "
                               f"{spec} to run it")
    if imported is not None and imported != named:
        raise ValueError(f"cell {spec!r}: {path_text} changed since this process imported it (sha256 {imported} "
                         f"then, {named} now); run the command again")
    if spec in CELLS:
        return CELLS[spec]
    source = path.read_bytes()
    if hashlib.sha256(source).hexdigest() != named:
        raise ValueError(f"cell {spec!r}: {path_text} changed since it was named (sha256 {named} then, "
                         f"{hashlib.sha256(source).hexdigest()} now)")
    module_name = "rnnlab_user_cell_" + hashlib.sha1(str(path.resolve()).encode()).hexdigest()[:12]
    module = sys.modules.get(module_name)
    if module is None:
        loader_spec = importlib.util.spec_from_file_location(module_name, path)
        module = importlib.util.module_from_spec(loader_spec)
        sys.modules[module_name] = module       # dataclasses and pickling look modules up by name
        try:
            exec(compile(source, str(path), "exec"), vars(module))   # the bytes whose hash was checked
        except Exception as err:
            del sys.modules[module_name]
            raise ValueError(f"cell {spec!r}: importing {path_text} failed: {type(err).__name__}: {err}") from None
        except SystemExit as err:       # a file that exits at import must not end the command silently
            del sys.modules[module_name]
            raise ValueError(f"cell {spec!r}: importing {path_text} called sys.exit({err.code!r}); a cell file "
                             "defines its class, it does not exit") from None
        _IMPORTED[str(path.resolve())] = named
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
        return _import_cell_file(name)
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
