"""Every package under python/kolo is one that python/pyproject.toml
installs: a package left out works from the checkout and is missing from
the installed SDK."""

import os
import re

from conftest import REPO


def test_every_package_is_installed():
    root = os.path.join(REPO, "python")
    found = set()
    for folder, _, files in os.walk(os.path.join(root, "kolo")):
        if "__init__.py" in files and "__pycache__" not in folder:
            found.add(os.path.relpath(folder, root).replace(os.sep, "."))
    text = open(os.path.join(root, "pyproject.toml")).read()
    listed = set(re.findall(r'"([\w.]+)"', re.search(r"packages = \[(.*?)\]", text).group(1)))
    assert found == listed, f"in the tree, not installed: {sorted(found - listed)}; " \
                            f"installed, not in the tree: {sorted(listed - found)}"
