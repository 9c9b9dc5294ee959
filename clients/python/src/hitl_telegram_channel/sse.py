"""A minimal Server-Sent Events parser (the WHATWG event-stream format).

Fed the stream's bytes a line at a time, it yields complete events. Only what
``GET /v1/events`` needs, but by the specification: ``event``, ``data`` (several
lines joined with ``\\n``), ``id`` (kept across events, ignored when it contains NUL),
``retry``, comment lines (``:`` keep-alives) and ``\\r\\n``/``\\r``/``\\n`` line ends.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional


@dataclass(frozen=True)
class SseEvent:
    """One dispatched event."""

    event: str
    data: str
    #: The last event id seen on the stream (this event's, or an earlier one's).
    id: Optional[str]


class SseParser:
    """Incremental parser: :meth:`feed` bytes, get the events they completed."""

    def __init__(self) -> None:
        self._buffer = b""
        self._event = ""
        self._data: List[str] = []
        self._has_data = False
        self.last_event_id: Optional[str] = None
        #: The reconnection delay the server asked for (``retry:``), in seconds.
        self.retry: Optional[float] = None
        self._pending_cr = False
        #: Whether any bytes were fed.
        self.fed = False

    def feed(self, chunk: bytes) -> List[SseEvent]:
        """Parse ``chunk`` (any split of the stream) and return the completed events."""
        if chunk:
            self.fed = True
        if self._pending_cr and chunk.startswith(b"\n"):
            chunk = chunk[1:]  # the \n of a \r\n split across chunks
        self._pending_cr = False
        self._buffer += chunk
        events: List[SseEvent] = []
        while True:
            cut = _line_end(self._buffer)
            if cut is None:
                break
            end, width = cut
            raw = self._buffer[:end]
            if width == 1 and self._buffer[end:end + 1] == b"\r" and end + 1 == len(self._buffer):
                # A lone \r at the end of what we have: a \n may follow in the next chunk.
                self._pending_cr = True
            self._buffer = self._buffer[end + width:]
            event = self._line(raw.decode("utf-8", errors="replace"))
            if event is not None:
                events.append(event)
        return events

    def _line(self, line: str) -> Optional[SseEvent]:
        if line == "":
            return self._dispatch()
        if line.startswith(":"):
            return None  # a comment (keep-alive)
        field, sep, value = line.partition(":")
        if sep and value.startswith(" "):
            value = value[1:]
        if field == "event":
            self._event = value
        elif field == "data":
            self._data.append(value)
            self._has_data = True
        elif field == "id":
            if "\0" not in value:
                self.last_event_id = value
        elif field == "retry":
            if value.isdigit():
                self.retry = int(value) / 1000.0
        return None

    def _dispatch(self) -> Optional[SseEvent]:
        if not self._has_data:
            self._event = ""
            return None
        event = SseEvent(
            event=self._event or "message",
            data="\n".join(self._data),
            id=self.last_event_id,
        )
        self._event = ""
        self._data = []
        self._has_data = False
        return event


def _line_end(buffer: bytes):
    """Where the first line of ``buffer`` ends: (index, width of the line break)."""
    n = buffer.find(b"\n")
    r = buffer.find(b"\r")
    if r == -1 and n == -1:
        return None
    if r == -1 or (n != -1 and n < r):
        return n, 1
    if buffer[r + 1:r + 2] == b"\n":
        return r, 2
    return r, 1
