"""Where Kolo's programs are, the one rule for the Python package: the
variable `env`, else `name` on PATH, else the checkout's Bazel build
(bazel-bin/<checkout_path>) when the package runs from a Kolo checkout."""

import os
import shutil

_CHECKOUT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def find_binary(env, name, *checkout_path):
    """The program's path, or None when none of the three has it."""
    path = os.environ.get(env) or shutil.which(name)
    if path:
        return path
    built = os.path.join(_CHECKOUT, "bazel-bin", *checkout_path)
    return built if os.path.exists(built) else None
