"""A TCP proxy on loopback that can swallow the server's replies and cut every
connection: a broken stream whose batches reached the server but whose acks
never reached the client."""

from __future__ import annotations

import socket
import threading
from typing import List, Tuple


class Proxy:
    """Forwards connections from an ephemeral loopback port to `upstream` (`host:port`)."""

    def __init__(self, upstream: str) -> None:
        host, port = upstream.rsplit(":", 1)
        self._upstream: Tuple[str, int] = (host, int(port))
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(16)
        self.address = f"127.0.0.1:{self._listener.getsockname()[1]}"
        self._lock = threading.Lock()
        self._sockets: List[socket.socket] = []
        self._swallowing = False
        threading.Thread(target=self._accept, daemon=True).start()

    def swallow_replies(self) -> None:
        """From now on, bytes from the server are read and thrown away."""
        with self._lock:
            self._swallowing = True

    def cut(self) -> None:
        """Closes every open connection, and forwards replies again on new ones."""
        with self._lock:
            sockets, self._sockets = self._sockets, []
            self._swallowing = False
        for sock in sockets:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            sock.close()

    def close(self) -> None:
        """Stops listening and cuts every connection."""
        self._listener.close()
        self.cut()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            server = socket.create_connection(self._upstream)
            with self._lock:
                self._sockets += [client, server]
            threading.Thread(target=self._pipe, args=(client, server, False), daemon=True).start()
            threading.Thread(target=self._pipe, args=(server, client, True), daemon=True).start()

    def _pipe(self, source: socket.socket, target: socket.socket, replies: bool) -> None:
        """Copies `source` to `target`; replies are dropped while swallowing."""
        while True:
            try:
                data = source.recv(65536)
            except OSError:
                return
            if not data:
                return
            with self._lock:
                drop = replies and self._swallowing
            if drop:
                continue
            try:
                target.sendall(data)
            except OSError:
                return
