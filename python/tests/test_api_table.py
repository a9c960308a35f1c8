"""The README's table of Horovod's TensorFlow and Keras names, checked against
kolo.tensorflow both ways: every name the table gives Kolo exists, every name
marked missing does not, and every public name of kolo.tensorflow (and of its
keras and callbacks modules) is in the table.

Two checks of each: one reads the sources with `ast` (no TensorFlow, no
kolo._core needed), one imports kolo.tensorflow (skipped without it). No kolod.
"""

import ast
import importlib
import os
import re
import types

import pytest

from conftest import REPO

README = os.path.join(REPO, "python", "README.md")
SECTION = "### Horovod TensorFlow and Keras API: every name"
MAIN_HEADER = ["Horovod name", "kolo.tensorflow / kolo.tensorflow.keras", "Status"]
EXTRA_HEADER = ["Kolo only", "What it is"]
STATUSES = ("same semantics", "NotImplementedError:", "missing")
ROOT = "kolo.tensorflow"
NAME = re.compile(r"`([A-Za-z_][A-Za-z0-9_.]*)`")


# ------------------------------------------------------------------ the table

def _section():
    with open(README, encoding="utf-8") as f:
        text = f.read()
    assert text.count(SECTION) == 1, f"{README} needs one section '{SECTION}'"
    start = text.index(SECTION)
    tf_part = text.rfind("\n## ", 0, start)
    assert tf_part >= 0 and text[tf_part:].startswith("\n## TensorFlow"), \
        "the section belongs in the README's TensorFlow part"
    rest = text[start + len(SECTION):]
    end = re.search(r"^#{1,3} ", rest, re.M)
    return rest[:end.start()] if end else rest


def _tables():
    tables, current = [], None
    for line in _section().splitlines():
        if not line.startswith("|"):
            current = None
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if current is None:
            current = {"header": cells, "rows": []}
            tables.append(current)
        elif not set("".join(cells)) <= set("-: "):
            current["rows"].append(cells)
    return tables


class Row:
    def __init__(self, cells):
        assert len(cells) == 3, f"row needs 3 cells: {cells}"
        horovod, kolo, self.status = cells
        self.horovod = NAME.findall(horovod)
        assert self.horovod, f"no Horovod name in {cells}"
        if kolo == "—":
            self.kolo = []
        elif kolo.startswith("same"):
            self.kolo = self.horovod + NAME.findall(kolo[len("same"):])
        else:
            self.kolo = NAME.findall(kolo)
        self.missing = self.status.startswith("missing")
        self.raises = self.status.startswith("NotImplementedError:")

    def __repr__(self):
        return f"Row({', '.join(self.horovod)})"


def _table():
    """(rows of the main table, names of the Kolo-only table)."""
    tables = _tables()
    headers = [t["header"] for t in tables]
    assert MAIN_HEADER in headers, f"no table with columns {MAIN_HEADER}"
    assert EXTRA_HEADER in headers, f"no table with columns {EXTRA_HEADER}"
    rows, extra = [], []
    for t in tables:
        if t["header"] == MAIN_HEADER:
            rows += [Row(c) for c in t["rows"] if not (c[0].startswith("**") and not any(c[1:]))]
        elif t["header"] == EXTRA_HEADER:
            for c in t["rows"]:
                extra += NAME.findall(c[0])
    return rows, extra


ROWS, EXTRA = _table()
PRESENT = [n for r in ROWS if not r.missing for n in r.kolo] + EXTRA
ABSENT = [n for r in ROWS if r.missing for n in r.horovod]
RAISING = [n for r in ROWS if r.raises for n in r.kolo]
LISTED = set(PRESENT)


def test_table_is_well_formed():
    for r in ROWS:
        assert r.status.startswith(STATUSES), f"{r}: status '{r.status}'"
        if r.missing:
            assert not r.kolo, f"{r}: a missing name has no Kolo name"
        else:
            assert r.kolo, f"{r}: name the Kolo counterpart (or 'same')"
    names = [n for r in ROWS for n in r.horovod]
    twice = sorted({n for n in names if names.count(n) > 1})
    assert not twice, f"listed twice: {twice}"
    assert not set(EXTRA) & set(names), "a Kolo-only name is also a Horovod row"


def _public_names_must_be_listed(tf_names, keras_names, callback_names):
    unlisted = sorted(n for n in tf_names if n not in LISTED)
    unlisted += sorted(f"keras.{n}" for n in keras_names
                       if f"keras.{n}" not in LISTED and n not in LISTED)
    unlisted += sorted(f"keras.callbacks.{n}" for n in callback_names
                       if f"keras.callbacks.{n}" not in LISTED
                       and f"callbacks.{n}" not in LISTED)
    assert not unlisted, (f"public names of {ROOT} not in the README table "
                          f"'{SECTION}': {unlisted}")


# ------------------------------------------------ static: the sources, via ast

def _module_file(modname):
    base = os.path.join(REPO, "python", *modname.split("."))
    if os.path.isfile(os.path.join(base, "__init__.py")):
        return os.path.join(base, "__init__.py")
    if os.path.isfile(base + ".py"):
        return base + ".py"
    return None


_names_cache = {}


def _static_names(modname):
    """What the top level of a kolo module binds: name -> the module it names
    (a string) or None for any other object."""
    if modname in _names_cache:
        return _names_cache[modname]
    names = _names_cache[modname] = {}
    path = _module_file(modname)
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read(), path)
    package = modname if path.endswith("__init__.py") else modname.rpartition(".")[0]

    def source(node):
        if not node.level:
            return node.module
        base = package.split(".")
        base = base[:len(base) - node.level + 1]
        return ".".join(base + ([node.module] if node.module else []))

    def visit(body):
        for node in body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names[node.name] = None
            elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for t in targets:
                    for n in ast.walk(t):
                        if isinstance(n, ast.Name):
                            names[n.id] = None
            elif isinstance(node, ast.Import):
                for a in node.names:
                    if a.asname:
                        names[a.asname] = a.name
                    else:
                        top = a.name.split(".")[0]
                        names[top] = top
            elif isinstance(node, ast.ImportFrom):
                src = source(node)
                ours = src == "kolo" or src.startswith("kolo.")
                for a in node.names:
                    if a.name == "*":
                        if ours:
                            names.update({k: v for k, v in _static_names(src).items()
                                          if not k.startswith("_")})
                        continue
                    bound = a.asname or a.name
                    if ours and _module_file(f"{src}.{a.name}"):
                        names[bound] = f"{src}.{a.name}"
                    elif ours:
                        names[bound] = _static_names(src).get(a.name)
                    else:
                        names[bound] = None
            elif isinstance(node, (ast.If, ast.Try, ast.With)):
                visit(node.body)
                visit(getattr(node, "orelse", []))
                visit(getattr(node, "finalbody", []))
                for h in getattr(node, "handlers", []):
                    visit(h.body)

    visit(tree.body)
    return names


def _static_resolves(dotted):
    module = ROOT
    parts = dotted.split(".")
    for i, part in enumerate(parts):
        if module is None:
            return False  # an attribute of an object: the table names none
        names = _static_names(module)
        if part in names:
            module = names[part]
        elif _module_file(f"{module}.{part}"):
            module = f"{module}.{part}"
        else:
            return False
        if i == len(parts) - 1:
            return True
    return True


def _static_public(modname, defined_here=False):
    names = _static_names(modname)
    if defined_here:
        with open(_module_file(modname), encoding="utf-8") as f:
            tree = ast.parse(f.read())
        own = {n.name for n in tree.body
               if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
        return sorted(n for n in own if not n.startswith("_"))
    return sorted(n for n, target in names.items() if not n.startswith("_") and target is None)


def test_static_listed_names_exist():
    absent = [n for n in PRESENT if not _static_resolves(n)]
    assert not absent, f"the README table gives {ROOT} names it lacks: {absent}"


def test_static_missing_names_are_missing():
    present = [n for n in ABSENT if _static_resolves(n)]
    assert not present, f"marked missing in the README table but defined: {present}"


def test_static_every_public_name_is_listed():
    _public_names_must_be_listed(_static_public(ROOT), _static_public(f"{ROOT}.keras"),
                                 _static_public(f"{ROOT}.callbacks", defined_here=True))


# ------------------------------------------- dynamic: kolo.tensorflow imported

@pytest.fixture(scope="module")
def kolo_tf():
    pytest.importorskip("tensorflow")
    try:
        module = importlib.import_module(ROOT)
        importlib.import_module(f"{ROOT}.keras")
    except ImportError as e:  # kolo._core or the op library not built
        pytest.skip(f"{ROOT} does not import: {e}")
    return module


_UNSET = object()


def _resolve(module, dotted):
    obj = module
    for part in dotted.split("."):
        obj = getattr(obj, part, _UNSET)
        if obj is _UNSET:
            return _UNSET
    return obj


def _public(module, own_only=False):
    out = []
    for n in dir(module):
        obj = getattr(module, n)
        if n.startswith("_") or isinstance(obj, types.ModuleType):
            continue
        if own_only and getattr(obj, "__module__", None) != module.__name__:
            continue
        out.append(n)
    return out


def test_listed_names_exist(kolo_tf):
    absent = [n for n in PRESENT if _resolve(kolo_tf, n) is _UNSET]
    assert not absent, f"the README table gives {ROOT} names it lacks: {absent}"


def test_missing_names_are_missing(kolo_tf):
    present = [n for n in ABSENT if _resolve(kolo_tf, n) is not _UNSET]
    assert not present, f"marked missing in the README table but defined: {present}"


def test_every_public_name_is_listed(kolo_tf):
    keras_mod = kolo_tf.keras
    keras_names = [n for n in _public(keras_mod)
                   if not (n in LISTED and getattr(keras_mod, n) is getattr(kolo_tf, n, None))]
    _public_names_must_be_listed(_public(kolo_tf), keras_names,
                                 _public(kolo_tf.callbacks, own_only=True))


@pytest.mark.parametrize("name", RAISING or ["(none)"])
def test_not_implemented_names_raise(kolo_tf, name):
    if name == "(none)":
        pytest.skip("no NotImplementedError row")
    obj = _resolve(kolo_tf, name)
    with pytest.raises(NotImplementedError) as err:
        obj() if callable(obj) else int(obj)
    assert len(str(err.value)) > 20, f"{name}: say why, and what to use instead"
