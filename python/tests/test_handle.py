"""kolo._shared.Handle, the one handle class behind the NumPy API and kolo.torch,
on its own: finish functions stand in for the collective (no kolod)."""

import pytest

import kolo._api as _api
from kolo import _shared
from kolo.errors import KoloError


def test_wait_returns_the_finish_result_once_and_releases_the_buffers():
    calls = []
    keep = (bytearray(4),)

    def finish(hid):
        calls.append(hid)
        return "result"

    h = _shared.Handle(7001, finish, keep)
    assert 7001 in _shared.inflight
    assert h.wait() == "result"
    assert h.wait() == "result"
    assert calls == [7001]
    assert 7001 not in _shared.inflight
    assert h.poll()


@pytest.mark.parametrize("error", [KoloError("ranks disagree"), MemoryError("no room")])
def test_an_error_is_raised_again_on_every_wait(error):
    def finish(hid):
        raise error

    h = _shared.Handle(7002, finish, ())
    for _ in range(2):
        with pytest.raises(type(error)) as got:
            h.wait()
        assert got.value is error
    assert h.poll()
    assert 7002 not in _shared.inflight


def test_a_group_waits_every_handle_and_raises_the_first_error():
    first = KoloError("first")
    waited = []

    def ok(hid):
        waited.append(hid)
        return hid

    def bad(hid):
        waited.append(hid)
        raise first

    group = _shared.GroupHandle([_shared.Handle(7003, ok, ()), _shared.Handle(7004, bad, ()),
                               _shared.Handle(7005, ok, ())])
    with pytest.raises(KoloError) as got:
        group.wait()
    assert got.value is first
    assert waited == [7003, 7004, 7005]


def test_kolo_torch_handles_are_the_same_class():
    torch_handles = pytest.importorskip("kolo.torch._handles")
    assert torch_handles.Handle is _shared.Handle


def test_the_numpy_api_handle_is_the_shared_one():
    assert _api.Handle is _shared.Handle
