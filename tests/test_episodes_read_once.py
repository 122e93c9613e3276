"""``episodes_read_once`` (bps_runtime.episodes.files): within the scope a file is mapped once
per manifest and file version, outside it every time; the scope belongs to its thread; nesting
gives the outer memo back; a file replaced within the scope is read again. Counted with a reader
that records its calls (``mapped_file``'s ``map_file``; ``mapped_file`` returns what it returns)."""
from __future__ import annotations

import os
import threading
from types import SimpleNamespace

import pytest

from bps_runtime.episodes.dataset_info import episodes_read_once
from bps_runtime.episodes.files import mapped_file


@pytest.fixture
def reader():
    """A ``map_file`` that counts its calls: each returns a new mapping {"scene": [call number]}."""
    calls = []

    def map_file(path, manifest, allow_unmatched):
        assert allow_unmatched
        calls.append((os.fspath(path), manifest.path))
        return SimpleNamespace(by_scene={"scene": [len(calls)]})

    map_file.calls = calls
    return map_file


@pytest.fixture
def files(tmp_path):
    """(manifest, episode file)."""
    p = tmp_path / "val.json.gz"
    p.write_bytes(b"one")
    m = tmp_path / "manifest.json"
    m.write_text("{}")
    return SimpleNamespace(path=str(m)), p


def test_a_scope_is_its_threads_and_nesting_gives_the_outer_memo_back(files, reader):
    """A scope open in one thread is not seen in another (each maps the file itself); a nested
    scope has its own memo, and the outer one serves again once it ends."""
    manifest, p = files
    with episodes_read_once():
        outer = mapped_file(p, manifest, reader)
        seen = []
        t = threading.Thread(target=lambda: seen.append(mapped_file(p, manifest, reader)))
        t.start()
        t.join()
        assert len(reader.calls) == 2 and seen[0] is not outer   # no scope there: read again
        with episodes_read_once():
            inner = mapped_file(p, manifest, reader)
            assert len(reader.calls) == 3 and inner is not outer
            assert mapped_file(p, manifest, reader) is inner
        assert mapped_file(p, manifest, reader) is outer and len(reader.calls) == 3


def test_scopes_of_two_threads_open_at_once_keep_their_own_memos(files, reader):
    """Scopes of two threads interleaved (the other's opens inside this one's and ends after it):
    each thread's reads use its own memo, and each ends with its own scope."""
    manifest, p = files
    opened, closed = threading.Event(), threading.Event()
    other = []

    def worker():
        with episodes_read_once():
            other.append(mapped_file(p, manifest, reader))
            opened.set()
            closed.wait(10)
            other.append(mapped_file(p, manifest, reader))   # still its own memo
        other.append(mapped_file(p, manifest, reader))   # out of its scope: read again

    t = threading.Thread(target=worker)
    try:
        with episodes_read_once():
            mine = mapped_file(p, manifest, reader)
            t.start()
            assert opened.wait(10)
            assert mapped_file(p, manifest, reader) is mine and len(reader.calls) == 2
    finally:
        closed.set()
        if t.is_alive():
            t.join()
    assert other[1] is other[0] and other[2] is not other[0] and len(reader.calls) == 3
    assert mapped_file(p, manifest, reader) is not mine and len(reader.calls) == 4   # no scope here


def test_a_file_replaced_within_the_scope_is_read_again(files, reader):
    """``os.replace`` puts another file (another inode) at the path: read again, even with the
    same size and mtime as the first."""
    manifest, p = files
    with episodes_read_once():
        first = mapped_file(p, manifest, reader)
        st = os.stat(p)
        new = p.with_name("new.json.gz")
        new.write_bytes(b"two")   # same size
        os.utime(new, ns=(st.st_atime_ns, st.st_mtime_ns))   # same mtime
        os.replace(new, p)
        assert os.stat(p).st_ino != st.st_ino
        again = mapped_file(p, manifest, reader)
        assert again is not first and len(reader.calls) == 2
        assert mapped_file(p, manifest, reader) is again and len(reader.calls) == 2


def test_reused_inside_the_scope_only(files, reader, tmp_path):
    """Inside: one read per (manifest, file), its mapping served again; outside: a read per
    call; another manifest or another file is its own read."""
    manifest, p = files
    assert mapped_file(p, manifest, reader) is not mapped_file(p, manifest, reader)
    assert len(reader.calls) == 2   # no scope: no reuse
    other = tmp_path / "other.json.gz"
    other.write_bytes(b"one")
    with episodes_read_once():
        first = mapped_file(p, manifest, reader)
        assert first.by_scene == {"scene": [3]}
        assert mapped_file(str(p), manifest, reader) is first and len(reader.calls) == 3
        mapped_file(p, SimpleNamespace(path=str(tmp_path / "m2.json")), reader)
        mapped_file(other, manifest, reader)
        assert len(reader.calls) == 5
        assert mapped_file(p, manifest, reader) is first and len(reader.calls) == 5
    assert mapped_file(p, manifest, reader) is not first and len(reader.calls) == 6   # let go at its end


def test_the_memo_is_let_go_when_the_scope_ends_by_an_exception(files, reader):
    manifest, p = files
    with pytest.raises(RuntimeError, match="in the scope"):
        with episodes_read_once():
            first = mapped_file(p, manifest, reader)
            raise RuntimeError("in the scope")
    assert mapped_file(p, manifest, reader) is not first and len(reader.calls) == 2
    with pytest.raises(KeyError):   # the reader's own error leaves no half memo either
        with episodes_read_once():
            mapped_file(p, manifest, lambda *a, **k: {}["x"])
    with episodes_read_once():
        assert mapped_file(p, manifest, reader).by_scene == {"scene": [3]}
