"""A peer on its own HTTP/2 connection that begins an `Ingest` message and
never finishes it: what a slow link or a stuck client holds of the server's
`max_partial_message_bytes`, which every call shares."""

from __future__ import annotations

import socket
import struct
import threading

#: HTTP/2 frame types used here.
DATA, HEADERS, SETTINGS = 0, 1, 4
#: Flags: END_HEADERS on HEADERS, ACK on SETTINGS.
END_HEADERS = ACK = 0x4
ACK_SETTINGS = 0x1
#: The largest frame payload a peer must accept before it says otherwise.
MAX_FRAME = 16384
#: What a peer may send on a stream before any window update.
FIRST_WINDOW = 65535


def _frame(kind: int, flags: int, stream: int, payload: bytes) -> bytes:
    return struct.pack(">I", len(payload))[1:] + bytes([kind, flags]) + struct.pack(">I", stream) + payload


def _header(name: str, value: str) -> bytes:
    """A header as a literal without indexing (HPACK), short names and values only."""
    return b"\x00" + bytes([len(name)]) + name.encode() + bytes([len(value)]) + value.encode()


class UnfinishedMessage:
    """Begins an `Ingest` call on `grpc_addr` with a message that declares
    `declared` bytes and sends `held` of them (at most the first window),
    then holds the call open, answering the server's settings, until `close`."""

    def __init__(self, grpc_addr: str, declared: int, held: int) -> None:
        assert held + 5 <= FIRST_WINDOW and held < declared
        host, port = grpc_addr.rsplit(":", 1)
        self._socket = socket.create_connection((host, int(port)))
        headers = b"".join(_header(name, value) for name, value in (
            (":method", "POST"), (":scheme", "http"), (":path", "/rankwatch.v1.Collector/Ingest"),
            (":authority", grpc_addr), ("content-type", "application/grpc"), ("te", "trailers")))
        message = b"\x00" + struct.pack(">I", declared) + b"\x00" * held
        frames = [_frame(DATA, 0, 1, message[at:at + MAX_FRAME]) for at in range(0, len(message), MAX_FRAME)]
        self._socket.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + _frame(SETTINGS, 0, 0, b"")
                             + _frame(HEADERS, END_HEADERS, 1, headers) + b"".join(frames))
        self._reader = threading.Thread(target=self._answer, daemon=True)
        self._reader.start()

    def _answer(self) -> None:
        """Acknowledges the server's settings frames (a peer that does not is cut off)."""
        pending = b""
        try:
            while True:
                data = self._socket.recv(65536)
                if not data:
                    return
                pending += data
                while len(pending) >= 9:
                    length = int.from_bytes(pending[:3], "big")
                    if len(pending) < 9 + length:
                        break
                    kind, flags = pending[3], pending[4]
                    pending = pending[9 + length:]
                    if kind == SETTINGS and not flags & ACK_SETTINGS:
                        self._socket.sendall(_frame(SETTINGS, ACK_SETTINGS, 0, b""))
        except OSError:
            return

    def close(self) -> None:
        """Drops the connection, and with it the bytes the server held."""
        try:
            self._socket.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._socket.close()
        self._reader.join(timeout=5)
