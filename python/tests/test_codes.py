"""kolod's codes reach Python from kolo._core, which reads them from
proto/kolo/abi/types.h: every DType and CollectiveKind of the C++ enums is
there by its C++ name with its C++ value, the NumPy API and kolo.torch take
their codes from it, and every torch dtype Kolo carries maps to one. No
kolod needed."""

import os
import re

import numpy as np
import pytest

from conftest import REPO

TYPES_H = os.path.join(REPO, "proto", "kolo", "abi", "types.h")
TRAITS_H = os.path.join(REPO, "proto", "kolo", "abi", "collective_traits.h")
TF_OPS = os.path.join(REPO, "python", "src", "tf_ops.cc")


def _read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


def _enum(text, name):
    """{enumerator: value} of `enum class name` in C++ source `text`."""
    body = re.search(r"enum class " + name + r"\b[^{]*\{(.*?)\};", text, re.S)
    assert body, f"no enum class {name}"
    return {m.group(1): int(m.group(2))
            for m in re.finditer(r"\b(k\w+)\s*=\s*(\d+)", body.group(1))}


def _names(text, function, enum):
    """{enumerator: name} of a C++ `switch` returning each one's name."""
    body = re.search(function + r"\(" + enum + r" \w+\) \{(.*?)\n\}", text, re.S)
    assert body, f"no {function}"
    return dict(re.findall(r"case " + enum + r"::(k\w+):\s*return \"([^\"]+)\";", body.group(1)))


CPP_DTYPES = _enum(_read(TYPES_H), "DType")
CPP_DTYPE_NAMES = _names(_read(TYPES_H), "DTypeName", "DType")
CPP_KINDS = _enum(_read(TYPES_H), "CollectiveKind")
CPP_KIND_NAMES = dict(re.findall(r"CollectiveKind::(k\w+),\s*\.name = \"([^\"]+)\"",
                                 _read(TRAITS_H)))
CPP_OPS = _enum(_read(TYPES_H), "ReduceOp")
CPP_OP_NAMES = _names(_read(TYPES_H), "ReduceOpName", "ReduceOp")


@pytest.fixture(scope="module")
def core():
    try:
        from kolo._native import core as native
    except ImportError as e:
        pytest.skip(f"kolo._core not built: {e}")
    return native


def test_the_headers_parse():
    assert "kUint16" in CPP_DTYPES and set(CPP_DTYPE_NAMES) == set(CPP_DTYPES)
    assert "kAlltoall" in CPP_KINDS and set(CPP_KIND_NAMES) == set(CPP_KINDS)
    assert set(CPP_OP_NAMES) == set(CPP_OPS)


def test_every_dtype_of_the_cpp_enum_is_in_core(core):
    want = {CPP_DTYPE_NAMES[k]: v for k, v in CPP_DTYPES.items()}
    assert core.DTYPES == want
    assert core.DTYPES["uint16"] == CPP_DTYPES["kUint16"]
    assert list(core.DTYPES.values()) == sorted(core.DTYPES.values()), "in code order"


def test_every_collective_kind_and_reduce_op_is_in_core(core):
    assert core.KINDS == {CPP_KIND_NAMES[k]: v for k, v in CPP_KINDS.items()}
    assert core.REDUCE_OPS == {CPP_OP_NAMES[k]: v for k, v in CPP_OPS.items()}


def test_python_codes_are_cores(core):
    from kolo import _shared
    assert _shared.DTYPE_CODES == core.DTYPES
    assert _shared.KIND_CODES == core.KINDS
    assert {op.name.lower(): int(op) for op in _shared.ReduceOp} == core.REDUCE_OPS


def test_every_numpy_dtype_reaches_its_code(core):
    from kolo import _shared
    for name, code in core.DTYPES.items():
        try:
            dtype = np.dtype(name)
        except TypeError:
            assert name == "bfloat16", f"NumPy has no dtype {name}"
            continue
        assert _shared.dtype_code(np.zeros(2, dtype)) == code, name
    with pytest.raises(TypeError, match="uint16"):  # the message lists them all
        _shared.dtype_code(np.zeros(2, np.complex64))


def test_the_torch_mapping_covers_every_torch_dtype_kolo_carries(core):
    torch = pytest.importorskip("torch")
    from kolo.torch import _handles
    carried = {getattr(torch, n): n for n in core.DTYPES
               if isinstance(getattr(torch, n, None), torch.dtype)}
    assert torch.uint16 in carried
    assert _handles.DTYPE_NAMES == carried
    for dtype, name in carried.items():
        assert _handles._code(torch.zeros(2, dtype=dtype)) == core.DTYPES[name], name
    with pytest.raises(TypeError, match="complex64"):
        _handles._code(torch.zeros(2, dtype=torch.complex64))


def test_the_tensorflow_op_library_names_every_dtype():
    """tf_ops.cc (which links no libkolo) maps TensorFlow's dtypes onto
    kolo::DType through types.h, one case per enumerator."""
    text = _read(TF_OPS)
    body = re.search(r"int DTypeCode\(DataType t\) \{(.*?)\n\}", text, re.S).group(1)
    assert sorted(re.findall(r"DType::(k\w+)", body)) == sorted(CPP_DTYPES)
    assert not re.search(r"return \d+;", body), "codes come from types.h, not literals"
