"""The modules of the kolo package import one another one way: read with
`ast` (every import statement, at the top level or inside a function), the
graph of python/kolo's modules has no cycle. No kolo._core needed."""

import ast
import os

from conftest import REPO

PACKAGE = os.path.join(REPO, "python", "kolo")


def _modules():
    """{dotted module name: file} of every .py file under python/kolo."""
    out = {}
    for root, _dirs, files in os.walk(PACKAGE):
        for f in files:
            if not f.endswith(".py"):
                continue
            rel = os.path.relpath(os.path.join(root, f), os.path.dirname(PACKAGE))
            parts = rel[:-3].split(os.sep)
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join(parts)] = os.path.join(root, f)
    return out


MODULES = _modules()
# Extension modules (built from python/src): leaves, they import no kolo module.
EXTENSIONS = {"kolo._core"}


def _imports(name, path):
    """The kolo modules `name` imports: `import a.b` imports a.b, `from a
    import b` imports a.b where that is a module, else a (a package's
    __init__ is not counted for its submodules: Python runs it first,
    whoever imports them)."""
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read(), path)
    package = name if path.endswith("__init__.py") else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - node.level + 1]
                src = ".".join(base + ([node.module] if node.module else []))
            else:
                src = node.module
            for a in node.names:
                sub = f"{src}.{a.name}"
                found.add(sub if sub in MODULES or sub in EXTENSIONS else src)
    return {m for m in found if m in MODULES and m != name}


def _cycle(graph):
    """One cycle of `graph` as a list of modules, or None."""
    state, stack = {}, []

    def visit(node):
        state[node] = "open"
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == "open":
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        stack.pop()
        state[node] = "done"
        return None

    for node in sorted(graph):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return None


def _graph(names):
    return {n: _imports(n, MODULES[n]) & set(names) for n in names}


def test_the_modules_are_found():
    for name in ("kolo", "kolo._api", "kolo._shared", "kolo._timeline", "kolo._topology",
                 "kolo.torch.mpi_ops", "kolo.tensorflow.functions"):
        assert name in MODULES, name


def test_the_cycle_finder_finds_one():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None


def test_the_core_modules_import_one_way():
    core = [n for n in MODULES if n.count(".") <= 1]  # kolo and python/kolo/*.py
    cycle = _cycle(_graph(core))
    assert cycle is None, "kolo's modules import in a cycle: " + " -> ".join(cycle)


def test_the_whole_package_imports_one_way():
    cycle = _cycle(_graph(list(MODULES)))
    assert cycle is None, "kolo's modules import in a cycle: " + " -> ".join(cycle)


def test_shared_plumbing_stays_below_the_api():
    assert "kolo._api" not in _imports("kolo._shared", MODULES["kolo._shared"])
    for low in ("kolo._shared", "kolo._timeline", "kolo._topology", "kolo._native"):
        assert "kolo._api" not in _imports(low, MODULES[low]), low
