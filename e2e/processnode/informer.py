"""Informer: list+watch of one collection for the process node, with relists after 410 and reconnects.

A daemon thread; callbacks run on it, outside any lock; interrupt() (from any thread) breaks an open watch.
"""

import http.client
import json
import socket
import threading

from ..client import ApiException
from .util import log


class Informer(threading.Thread):
    """List+watch of one collection with relist on 410 and reconnects; calls back outside any lock."""

    def __init__(self, client, path, query, on_sync, on_event, stop, name, watch_timeout=300):
        super().__init__(name=name, daemon=True)
        self.client = client
        self.path = path
        self.query = dict(query)
        self.on_sync = on_sync
        self.on_event = on_event
        self.stop = stop
        self.watch_timeout = watch_timeout
        self.synced = threading.Event()
        self._conn = None

    def run(self):
        rv = None
        backoff = 0.1
        while not self.stop.is_set():
            try:
                if rv is None:
                    listing = self.client.get(self.path, self.query)
                    self.on_sync(listing.get("items") or [])
                    self.synced.set()
                    rv = listing["metadata"]["resourceVersion"]
                query = dict(self.query, watch="true", resourceVersion=rv, allowWatchBookmarks="true",
                             timeoutSeconds=str(self.watch_timeout))
                conn, resp = self.client.stream(self.path, query, timeout=self.watch_timeout + 30)
                self._conn = conn
                try:
                    if resp.status != 200:
                        raise ApiException(resp.status, resp.read().decode("utf-8", "replace"), "WATCH", self.path)
                    for line in resp:
                        if self.stop.is_set():
                            return
                        if not line.strip():
                            continue
                        event = json.loads(line)
                        obj = event.get("object") or {}
                        if event.get("type") == "ERROR":
                            if obj.get("code") == 410:
                                rv = None
                                break
                            raise ApiException(obj.get("code", 500), obj, "WATCH", self.path)
                        rv = (obj.get("metadata") or {}).get("resourceVersion", rv)
                        if event.get("type") != "BOOKMARK":
                            self.on_event(event["type"], obj)
                    backoff = 0.1
                finally:
                    conn.close()
                    self._conn = None
            except (OSError, ApiException, ValueError, http.client.HTTPException) as exc:
                if self.stop.is_set():
                    return
                if isinstance(exc, ApiException) and exc.status == 410:
                    rv = None
                self.stop.wait(backoff)
                backoff = min(backoff * 2, 5.0)
            except Exception as exc:  # keep watching whatever goes wrong in a callback
                log("informer %s: %s: %s" % (self.name, type(exc).__name__, exc))
                self.stop.wait(1.0)

    def interrupt(self):
        conn = self._conn
        if conn is not None and conn.sock is not None:
            try:
                conn.sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
