"""Episode files parsed as a stream: ``stream_document(path, what, limit, items)`` reads a
habitat v1 episode file (gzip or plain, ``limit`` bytes decompressed) one top-level member at a
time and hands each element of the big members to a callback as soon as it is decoded: neither
the document's text nor its Python object tree is ever whole in memory.

``items``: top-level key -> (shape, callback). ``"list"``: ``callback(index, value)`` per element
(``episodes``; ``"list+text"``: ``callback(index, value, its JSON text)``); ``"map"``:
``callback(key, value)`` per member (InstanceImageNav's ``goals``); ``"map_of_lists"``:
``callback(key, index, value)`` per element of each member's list (ObjectNav's
``goals_by_category``; index None: the member is not a non-empty list). Other members are decoded
whole and returned, a streamed one as ``STREAMED``; ``check(piece)`` sees each raw piece before it
is decoded. Elements are decoded by the stdlib's C scanner (json.loads' grammar) over a sliding
window; one of more than ``MAX_ELEMENT_CHARS`` is a ``ResourceLimitError``. Invalid JSON, a
non-object document, a repeated streamed key (or key of a ``"map_of_lists"`` member), a UTF-8
BOM: ``InputError`` naming the file and char offset.
"""
from __future__ import annotations

import codecs
import json

from ..errors import InputError, ResourceLimitError
from ..readers.guard import iter_limited

MAX_ELEMENT_CHARS = 64 << 20   # one episode or goal (a goal of 20k view points is ~3 MB of JSON)
_CHUNK = 8 << 20              # text read at a time: an element across a boundary is decoded twice
_WS = " \t\n\r"
_MARGIN = 16                   # a token cut at the window's end fails within this many chars of it
STREAMED = type("Streamed", (), {"__repr__": lambda self: "STREAMED"})()   # a member given to its callback


class _Window:
    """The decoded text of a file, a sliding window of it at a time."""

    def __init__(self, path, limit: int, what: str, check=None):
        self.path, self.what = path, what
        self.chunks = iter_limited(path, limit, what, _CHUNK)
        if check is not None:
            self.chunks = _checked(self.chunks, check)
        self.decoder = codecs.getincrementaldecoder("utf-8")()
        self.buf, self.pos, self.start, self.base, self.eof = "", 0, 0, 0, False
        self.scan = json.JSONDecoder().raw_decode

    def fill(self, start: int) -> bool:
        """Drop the text before ``start``, read more (at least as much as is held: geometric);
        False at the end of the file."""
        if self.eof:
            return False
        keep = self.buf[start:]
        if len(keep) > MAX_ELEMENT_CHARS:
            self.too_big(start)
        self.base += start
        self.pos -= start
        parts, want = [keep], max(_CHUNK, len(keep))
        got = 0
        while got < want:
            raw = next(self.chunks, None)
            if raw is None:
                try:
                    tail = self.decoder.decode(b"", final=True)
                except UnicodeDecodeError as e:
                    raise InputError(self.path, f"not valid JSON: not UTF-8 ({e})") from None
                parts.append(tail)
                self.eof = True
                break
            try:
                text = self.decoder.decode(raw)
            except UnicodeDecodeError as e:
                raise InputError(self.path, f"not valid JSON: not UTF-8 ({e})") from None
            parts.append(text)
            got += len(text)
        self.buf = "".join(parts)
        return True

    def too_big(self, start: int):
        raise ResourceLimitError(self.path, f"one value of more than {MAX_ELEMENT_CHARS} characters at char "
                                            f"{self.base + start} (the cap per episode or goal)")

    def peek(self) -> str:
        """The next non-blank character ('' at the end), ``pos`` on it."""
        while True:
            n = len(self.buf)
            while self.pos < n and self.buf[self.pos] in _WS:
                self.pos += 1
            if self.pos < n:
                return self.buf[self.pos]
            if not self.fill(self.pos):
                return ""

    def expect(self, chars: str) -> str:
        c = self.peek()
        if c == "" or c not in chars:
            self.bad(f"expected {' or '.join(repr(x) for x in chars)}, found {c or 'the end of the file'!r}")
        self.pos += 1
        return c

    def bad(self, msg: str, at: int | None = None):
        raise InputError(self.path, f"not valid JSON: {msg} at char {self.base + (self.pos if at is None else at)}")

    def value(self):
        """The JSON value at ``pos`` (decoded whole), ``pos`` after it."""
        if self.pos >= len(self.buf) or self.buf[self.pos] in _WS:
            self.peek()
        while True:
            try:
                v, end = self.scan(self.buf, self.pos)
            except RecursionError:
                self.bad("nested too deeply (more levels than the parser's recursion limit)")
            except json.JSONDecodeError as e:
                cut = e.pos >= len(self.buf) - _MARGIN or e.msg.startswith("Unterminated string")
                if cut and self.fill(self.pos):
                    continue
                self.bad(e.msg, e.pos)
            except ValueError as e:   # e.g. an integer of more digits than int() converts (4,300)
                self.bad(str(e).split(";")[0])
            if end >= len(self.buf) - _MARGIN and not self.eof and self.fill(self.pos):
                continue   # a number (or anything) touching the window's end may go on past it
            if end - self.pos > MAX_ELEMENT_CHARS:
                self.too_big(self.pos)
            self.start, self.pos = self.pos, end
            return v

    def members(self):
        """Each key of the object at ``pos`` (its ``{`` consumed here), ``pos`` on its value."""
        for _ in self._sequence("{", "}"):
            if self.peek() != '"':
                self.bad("expected a key (a string)")
            key = self.value()
            self.expect(":")
            yield key

    def elements(self):
        """Yield once per element of the list at ``pos`` (its ``[`` consumed here), ``pos`` on it."""
        return self._sequence("[", "]")

    def _sequence(self, opening: str, closing: str):
        self.expect(opening)
        if self.peek() == closing:
            self.pos += 1
            return
        while True:
            yield
            if self.expect("," + closing) == closing:
                return


def _checked(pieces, check):
    for piece in pieces:
        check(piece)
        yield piece


def stream_document(path, what: str, limit: int, items: dict, check=None) -> dict:
    """The top-level members of the episode file at ``path`` other than the streamed ones of
    ``items`` (module docstring); the streamed ones are handed to their callbacks as decoded;
    ``check(piece)`` sees each piece of the file's bytes before it is decoded."""
    w = _Window(path, limit, what, check)
    if w.peek() == "\ufeff":   # json.loads refuses it too ("Unexpected UTF-8 BOM"), as habitat-lab does
        raise InputError(path, "not valid JSON: the file starts with a UTF-8 byte order mark (BOM); "
                               "save it as UTF-8 without a BOM")
    if w.peek() != "{":
        if w.peek() != "":
            w.value()   # invalid JSON (or nested too deeply) is that error first
        raise InputError(path, f'not a {what} dataset: expected {{"episodes": [...]}}')
    doc, streamed = {}, set()
    for key in w.members():
        shape, cb = items.get(key, (None, None))
        c = w.peek()
        if shape is None or c != ("[" if shape.startswith("list") else "{"):
            doc[key] = w.value()   # small, or of the wrong type: decoded whole, checked by the caller
            continue
        if key in streamed:
            w.bad(f"key {key!r} appears twice in the document")
        streamed.add(key)
        doc[key] = STREAMED
        if shape in ("list", "list+text"):
            _each_element(w, cb, shape == "list+text")
        elif shape == "map":
            for k in w.members():
                cb(k, w.value())
        else:
            inner = set()   # json.loads would keep only the last list of a repeated key: refused
            for k in w.members():
                if k in inner:
                    w.bad(f"key {k!r} appears twice in {key!r}")
                inner.add(k)
                if w.peek() != "[":
                    cb(k, None, w.value())   # not a list: the callback names the problem
                    continue
                n = 0
                for n, _ in enumerate(w.elements(), 1):
                    cb(k, n - 1, w.value())
                if n == 0:
                    cb(k, None, [])
    if w.peek() != "":
        w.bad("extra data after the document")
    return doc


def _each_element(w: _Window, cb, text: bool) -> None:
    """``cb(index, value[, text])`` per element of the list at ``w.pos`` (the hot loop: ", "
    between elements is stepped over without ``expect``)."""
    w.expect("[")
    if w.peek() == "]":
        w.pos += 1
        return
    i = 0
    while True:
        v = w.value()
        if text:
            cb(i, v, w.buf[w.start:w.pos])
        else:
            cb(i, v)
        i += 1
        buf, pos = w.buf, w.pos
        if buf.startswith(", ", pos) and pos + 2 < len(buf) and buf[pos + 2] not in _WS:
            w.pos = pos + 2
            continue
        if w.expect(",]") == "]":
            return
