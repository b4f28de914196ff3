"""Versioned object storage: one global resourceVersion counter, a bounded event history and watchers.

This is the etcd + watch-cache part of the test API server. It knows object identity (bucket, namespace,
name), labels, owner references and the resourceVersion; it knows nothing about Kubernetes kinds. All state
is guarded by `Store.lock` (an RLock); callers that combine several operations into one atomic step hold it
themselves. Watchers receive events through their own queue, so no socket I/O ever happens under the lock.
Stored objects are never mutated after they are committed: readers may use them without copying.
"""

import collections
import queue
import threading

ADDED = "ADDED"
MODIFIED = "MODIFIED"
DELETED = "DELETED"


class TooOld(Exception):
    """The requested resourceVersion is older than the retained history."""

    def __init__(self, requested, oldest):
        super().__init__("too old resource version: %d (%d)" % (requested, oldest))
        self.requested = requested
        self.oldest = oldest


class Stored:
    """A committed object and its lazily computed serializations (keyed by view)."""

    __slots__ = ("obj", "rv", "cache")

    def __init__(self, obj, rv):
        self.obj = obj
        self.rv = rv
        self.cache = {}


class Event:
    __slots__ = ("rv", "type", "bucket", "key", "stored", "prev")

    def __init__(self, rv, type_, bucket, key, stored, prev):
        self.rv = rv
        self.type = type_
        self.bucket = bucket
        self.key = key
        self.stored = stored
        self.prev = prev


class Watcher:
    """One open watch: a filter plus a queue the store pushes (type, Stored) pairs into.

    The watch's serving thread reads the queue; `close()` may be called from any thread."""

    CLOSE = ("CLOSE", None)

    def __init__(self, bucket, namespace, predicate, info=""):
        self.bucket = bucket
        self.namespace = namespace
        self.predicate = predicate
        self.queue = queue.SimpleQueue()
        self.closed = False
        self.info = info

    def offer(self, event):
        ns = event.key[0]
        if self.namespace is not None and ns != self.namespace:
            return
        new_match = self.predicate(event.stored.obj)
        if event.type == DELETED:
            old_match = self.predicate(event.prev.obj) if event.prev is not None else new_match
            if old_match:
                self.queue.put((DELETED, event.stored))
            return
        old_match = self.predicate(event.prev.obj) if event.prev is not None else False
        if new_match and old_match:
            self.queue.put((MODIFIED, event.stored))
        elif new_match:
            self.queue.put((ADDED, event.stored))
        elif old_match:
            self.queue.put((DELETED, event.stored))

    def close(self):
        self.closed = True
        self.queue.put(self.CLOSE)


class _Bucket:
    """All objects of one storage resource, indexed by namespace, label pairs and chosen fields."""

    def __init__(self, indexed_fields):
        self.by_ns = {}  # ns -> {name: Stored}
        self.sorted_names = {}  # ns -> sorted list of names (cache)
        self.label_index = collections.defaultdict(set)  # (key, value) -> {(ns, name)}
        self.indexed_fields = indexed_fields  # {field label: getter(obj)}
        self.field_index = {f: collections.defaultdict(set) for f in indexed_fields}
        self.count = 0

    def get(self, key):
        names = self.by_ns.get(key[0])
        return names.get(key[1]) if names else None

    def _index(self, key, obj, add):
        labels = (obj.get("metadata") or {}).get("labels") or {}
        for pair in labels.items():
            if add:
                self.label_index[pair].add(key)
            else:
                entries = self.label_index.get(pair)
                if entries is not None:
                    entries.discard(key)
                    if not entries:
                        del self.label_index[pair]
        for field, getter in self.indexed_fields.items():
            value = getter(obj) or ""
            if add:
                self.field_index[field][value].add(key)
            else:
                entries = self.field_index[field].get(value)
                if entries is not None:
                    entries.discard(key)
                    if not entries:
                        del self.field_index[field][value]

    def put(self, key, stored):
        names = self.by_ns.setdefault(key[0], {})
        old = names.get(key[1])
        if old is not None:
            self._index(key, old.obj, False)
        else:
            self.sorted_names.pop(key[0], None)
            self.count += 1
        names[key[1]] = stored
        self._index(key, stored.obj, True)
        return old

    def remove(self, key):
        names = self.by_ns.get(key[0])
        old = names.pop(key[1], None) if names else None
        if old is not None:
            self._index(key, old.obj, False)
            self.sorted_names.pop(key[0], None)
            self.count -= 1
            if not names:
                del self.by_ns[key[0]]
        return old

    def names_sorted(self, ns):
        cached = self.sorted_names.get(ns)
        if cached is None:
            cached = sorted(self.by_ns.get(ns, {}).keys())
            self.sorted_names[ns] = cached
        return cached


class Store:
    def __init__(self, history_size=10000):
        self.lock = threading.RLock()
        self.rv = 0
        self.history_size = history_size
        self.history = collections.deque()
        self.floor = 0  # events with rv > floor are retained
        self._buckets = {}
        self._watchers = collections.defaultdict(set)
        self.uid_index = {}  # uid -> (bucket, key)
        self.dependents = collections.defaultdict(set)  # owner uid -> {(bucket, key)}
        self._rv_changed = threading.Condition(self.lock)

    # ------------------------------------------------------------------------------------- buckets

    def bucket(self, name, indexed_fields=None):
        with self.lock:
            b = self._buckets.get(name)
            if b is None:
                b = _Bucket(indexed_fields or {})
                self._buckets[name] = b
            return b

    def drop_bucket(self, name):
        with self.lock:
            self._buckets.pop(name, None)

    def object_count(self):
        with self.lock:
            return sum(b.count for b in self._buckets.values())

    # ------------------------------------------------------------------------------------- reads

    def get(self, bucket, key):
        with self.lock:
            stored = self.bucket(bucket).get(key)
            return stored

    def current(self, bucket, namespace, label_pairs=(), field_values=()):
        """(key, Stored) pairs in key order, narrowed by exact label pairs and indexed field values."""
        with self.lock:
            b = self.bucket(bucket)
            candidates = None
            for pair in label_pairs:
                found = b.label_index.get(pair, set())
                candidates = set(found) if candidates is None else candidates & found
            for field, value in field_values:
                if field in b.field_index:
                    found = b.field_index[field].get(value, set())
                    candidates = set(found) if candidates is None else candidates & found
            if candidates is not None:
                keys = sorted(k for k in candidates if namespace is None or k[0] == namespace)
                return [(k, b.get(k)) for k in keys]
            out = []
            namespaces = [namespace] if namespace is not None else sorted(b.by_ns.keys())
            for ns in namespaces:
                names = b.by_ns.get(ns)
                if not names:
                    continue
                for name in b.names_sorted(ns):
                    out.append(((ns, name), names[name]))
            return out

    def snapshot(self, bucket, namespace, rv):
        """(key, Stored) pairs as they were at resourceVersion rv, reconstructed from the history."""
        with self.lock:
            if rv >= self.rv:
                return self.current(bucket, namespace)
            if rv < self.floor:
                raise TooOld(rv, self.floor + 1)
            state = dict(self.current(bucket, namespace))
            for event in reversed(self.history):
                if event.rv <= rv:
                    break
                if event.bucket != bucket or (namespace is not None and event.key[0] != namespace):
                    continue
                if event.prev is None:
                    state.pop(event.key, None)
                else:
                    state[event.key] = event.prev
            return sorted(state.items(), key=lambda kv: kv[0])

    def wait_for_rv(self, rv, timeout):
        """Blocks until the store reached rv (for 'not older than' reads); returns whether it did."""
        with self._rv_changed:
            return self._rv_changed.wait_for(lambda: self.rv >= rv, timeout)

    # ------------------------------------------------------------------------------------- writes

    def next_rv(self):
        with self.lock:
            self.rv += 1
            return self.rv

    def commit(self, bucket, key, obj, event_type, prev=None):
        """Stores obj under key with a fresh resourceVersion (written into obj) and notifies watchers.

        For DELETED, obj is the final state of the removed object (a tombstone)."""
        with self.lock:
            rv = self.next_rv()
            obj.setdefault("metadata", {})["resourceVersion"] = str(rv)
            stored = Stored(obj, rv)
            b = self.bucket(bucket)
            if event_type == DELETED:
                old = b.remove(key)
                self._unindex_owner(bucket, key, old.obj if old else None)
                uid = obj.get("metadata", {}).get("uid")
                if uid:
                    self.uid_index.pop(uid, None)
            else:
                old = b.put(key, stored)
                self._unindex_owner(bucket, key, old.obj if old else None)
                self._index_owner(bucket, key, obj)
                uid = obj.get("metadata", {}).get("uid")
                if uid:
                    self.uid_index[uid] = (bucket, key)
            event = Event(rv, event_type, bucket, key, stored, old)
            self.history.append(event)
            while len(self.history) > self.history_size:
                self.floor = self.history.popleft().rv
            for watcher in list(self._watchers.get(bucket, ())):
                if watcher.closed:
                    self._watchers[bucket].discard(watcher)
                    continue
                watcher.offer(event)
            self._rv_changed.notify_all()
            return stored

    def _index_owner(self, bucket, key, obj):
        for ref in (obj.get("metadata") or {}).get("ownerReferences") or []:
            uid = ref.get("uid")
            if uid:
                self.dependents[uid].add((bucket, key))

    def _unindex_owner(self, bucket, key, obj):
        if obj is None:
            return
        for ref in (obj.get("metadata") or {}).get("ownerReferences") or []:
            uid = ref.get("uid")
            entries = self.dependents.get(uid)
            if entries is not None:
                entries.discard((bucket, key))
                if not entries:
                    del self.dependents[uid]

    def compact(self, rv=None):
        """Drops history up to rv (default: everything); watches from older versions then get 410."""
        with self.lock:
            target = self.rv if rv is None else min(int(rv), self.rv)
            while self.history and self.history[0].rv <= target:
                self.history.popleft()
            self.floor = max(self.floor, target)
            return self.floor

    # ------------------------------------------------------------------------------------- watches

    def watch(self, watcher, from_rv, initial):
        """Registers a watcher. from_rv None: `initial` (key, Stored) pairs are sent as ADDED first;
        otherwise every retained event after from_rv is replayed. Raises TooOld."""
        with self.lock:
            if from_rv is None:
                for _, stored in initial:
                    watcher.queue.put((ADDED, stored))
            else:
                if from_rv < self.floor:
                    raise TooOld(from_rv, self.floor + 1)
                missed = []
                for event in reversed(self.history):
                    if event.rv <= from_rv:
                        break
                    if event.bucket == watcher.bucket:
                        missed.append(event)
                for event in reversed(missed):
                    watcher.offer(event)
            self._watchers[watcher.bucket].add(watcher)

    def unwatch(self, watcher):
        with self.lock:
            self._watchers.get(watcher.bucket, set()).discard(watcher)

    def watchers(self):
        with self.lock:
            return [w for ws in self._watchers.values() for w in ws if not w.closed]
