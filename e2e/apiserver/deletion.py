"""Deletion semantics of the registry: graceful deletion, finalizers, garbage collection, namespace and CRD
cleanup.

`DeletionMixin` is part of Registry (it uses the registry's store, types and helpers). Every method runs with
`store.lock` held by its caller or itself, so a cascade (owner -> dependents -> their dependents, a namespace
and its contents, a CRD and its objects) is one atomic step.
"""

from . import errors
from .kinds import DeleteOptions
from .store import DELETED, MODIFIED
from .util import deepcopy, now_rfc3339

_UNDELETABLE_NAMESPACES = ("default", "kube-system", "kube-public")
CRD_CLEANUP_FINALIZER = "customresourcecleanup.apiextensions.k8s.io"
FOREGROUND = "foregroundDeletion"
ORPHAN = "orphan"
CRDS = "apiextensions.k8s.io/customresourcedefinitions"


class DeletionMixin:
    # ------------------------------------------------------------------------------------ delete

    def delete(self, rtype, ns, name, options, ctx):
        """DELETE. Returns (status code, Stored or Status dict)."""
        with self._lock:
            stored = self._get_stored(rtype, ns, name)
            obj = stored.obj
            meta = obj.get("metadata") or {}
            pre = options.preconditions
            if pre.get("uid") and pre["uid"] != meta.get("uid"):
                raise errors.conflict(rtype.group, rtype.resource, name,
                                      "Precondition failed: UID in precondition: %s, UID in object meta: %s"
                                      % (pre["uid"], meta.get("uid")))
            if pre.get("resourceVersion") and pre["resourceVersion"] != meta.get("resourceVersion"):
                raise errors.conflict(rtype.group, rtype.resource, name,
                                      "Precondition failed: ResourceVersion in precondition: %s, ResourceVersion "
                                      "in object meta: %s" % (pre["resourceVersion"], meta.get("resourceVersion")))
            if rtype.resource == "namespaces" and rtype.group == "" and name in _UNDELETABLE_NAMESPACES:
                raise errors.forbidden_request('namespaces "%s" is forbidden: this namespace may not be deleted'
                                               % name, "", "namespaces", name)
            if ctx.dry_run:
                return 200, stored
            return self._delete_stored(rtype, stored, options)

    def _delete_stored(self, rtype, stored, options):
        obj = stored.obj
        meta = obj.get("metadata") or {}
        key = self._key(rtype, meta.get("namespace"), meta["name"])
        strategy = rtype.strategy
        grace = strategy.grace_period(obj, options)
        propagation = options.propagation or "Background"
        if meta.get("deletionTimestamp"):
            # Already terminating: a shorter grace period (the kubelet's final delete) may finish it.
            current_grace = meta.get("deletionGracePeriodSeconds") or 0
            if grace < current_grace:
                new = deepcopy(obj)
                new["metadata"]["deletionGracePeriodSeconds"] = grace
                new["metadata"]["deletionTimestamp"] = now_rfc3339(grace)
                if not new["metadata"].get("finalizers") and grace == 0:
                    tomb = self._final_remove(rtype.storage, key, new)
                    return 200, self._deleted_answer(rtype, tomb)
                stored = self.store.commit(rtype.storage, key, new, MODIFIED, stored)
            return 200, stored
        finalizers = list(meta.get("finalizers") or [])
        if rtype.resource == "namespaces" and rtype.group == "":
            return 200, self._terminate_namespace(rtype, stored)
        if rtype.resource == "customresourcedefinitions" and rtype.group == "apiextensions.k8s.io":
            finalizers.append(CRD_CLEANUP_FINALIZER)
        if propagation == "Foreground":
            # The API server adds the finalizer whatever the dependents (registry/store.go
            # deletionFinalizersForGarbageCollection); the collector removes it once no dependent blocks.
            finalizers.append(FOREGROUND)
        if propagation == "Orphan":
            self._orphan_dependents(meta.get("uid"))
        if finalizers or grace > 0:
            new = deepcopy(obj)
            new_meta = new["metadata"]
            new_meta["deletionTimestamp"] = now_rfc3339(grace)
            new_meta["deletionGracePeriodSeconds"] = grace
            if finalizers:
                new_meta["finalizers"] = _dedupe(finalizers)
            if strategy.has_generation and new_meta.get("generation"):
                new_meta["generation"] = int(new_meta["generation"]) + 1
            stored = self.store.commit(rtype.storage, key, new, MODIFIED, stored)
            answer = stored  # what the DELETE wrote; the collectors below react to it, as they do after it
            if FOREGROUND in finalizers:
                self._delete_dependents(meta.get("uid"))
                stored = self.store.get(rtype.storage, key) or stored
                self._check_foreground(rtype.storage, stored)
                return 200, answer
            if CRD_CLEANUP_FINALIZER in finalizers:
                self._cleanup_crd(stored)
            current = self.store.get(rtype.storage, key)
            return 200, current if current is not None else stored
        tomb = self._final_remove(rtype.storage, key, deepcopy(obj))
        return 200, self._deleted_answer(rtype, tomb)

    def _deleted_answer(self, rtype, tomb):
        if rtype.strategy.return_deleted_object:
            return tomb
        meta = tomb.obj.get("metadata") or {}
        return errors.success_status(200, errors.success_delete_details(rtype.group, rtype.resource, meta.get("name"),
                                                                        meta.get("uid")))

    def _final_remove(self, bucket, key, obj):
        """Removes an object for good and runs what follows: GC of dependents, waiting owners, namespaces."""
        tomb = self.store.commit(bucket, key, obj, DELETED)
        meta = obj.get("metadata") or {}
        uid = meta.get("uid")
        if uid:
            self._collect_dependents(uid)
        for ref in meta.get("ownerReferences") or []:
            owner = self.store.uid_index.get(ref.get("uid"))
            if owner is not None:
                owner_stored = self.store.get(*owner)
                if owner_stored is not None:
                    self._check_foreground(owner[0], owner_stored)
        rtype = self._bucket_types.get(bucket)
        if rtype is not None and rtype.resource == "customresourcedefinitions" and rtype.group == \
                "apiextensions.k8s.io":
            self._unregister_crd(obj)
        ns = key[0]
        if ns:
            self._maybe_finish_namespace(ns)
        if rtype is not None and not self.is_builtin(rtype):
            crd = self._owning_crd(rtype)
            if crd is not None and (crd.obj.get("metadata") or {}).get("deletionTimestamp"):
                self._cleanup_crd(crd)
        return tomb

    def _collect_dependents(self, owner_uid):
        for bucket, key in sorted(self.store.dependents.get(owner_uid, ())):
            stored = self.store.get(bucket, key)
            if stored is None:
                continue
            refs = (stored.obj.get("metadata") or {}).get("ownerReferences") or []
            remaining = [r for r in refs if r.get("uid") != owner_uid and r.get("uid") in self.store.uid_index]
            if remaining:
                new = deepcopy(stored.obj)
                new["metadata"]["ownerReferences"] = [r for r in refs if r.get("uid") != owner_uid]
                self.store.commit(bucket, key, new, MODIFIED, stored)
                continue
            if (stored.obj.get("metadata") or {}).get("deletionTimestamp"):
                continue
            rtype = self._bucket_types.get(bucket)
            if rtype is not None:
                self._delete_stored(rtype, stored, DeleteOptions(propagation="Background"))

    def _delete_dependents(self, owner_uid):
        """Foreground deletion of an owner: the garbage collector deletes every dependent at once, whatever its
        finalizers (a pod's containers are stopped by its kubelet even while finalizers keep the object), a
        dependent that has dependents of its own in the foreground too (garbagecollector.go attemptToDeleteItem).
        A dependent with another owner that is not being deleted is kept, and loses this owner's reference."""
        for bucket, key in sorted(self.store.dependents.get(owner_uid, ())):
            stored = self.store.get(bucket, key)
            if stored is None or (stored.obj.get("metadata") or {}).get("deletionTimestamp"):
                continue
            refs = (stored.obj.get("metadata") or {}).get("ownerReferences") or []
            if any(self._solid_owner(r) for r in refs if r.get("uid") != owner_uid):
                new = deepcopy(stored.obj)
                new["metadata"]["ownerReferences"] = [r for r in refs if r.get("uid") != owner_uid]
                self.store.commit(bucket, key, new, MODIFIED, stored)
                continue
            rtype = self._bucket_types.get(bucket)
            if rtype is not None:
                own_dependents = self.store.dependents.get((stored.obj.get("metadata") or {}).get("uid"))
                self._delete_stored(rtype, stored,
                                    DeleteOptions(propagation="Foreground" if own_dependents else "Background"))

    def collect_new_dependent(self, rtype, stored):
        """A dependent created while one of its owners waits in foreground deletion for its dependents: the garbage
        collector deletes it too (attemptToDeleteItem: no solid owner, an owner waiting for dependents), or that
        owner would wait for it forever. Caller holds the lock."""
        refs = (stored.obj.get("metadata") or {}).get("ownerReferences") or []
        if not refs or any(self._solid_owner(r) for r in refs):
            return
        for ref in refs:
            where = self.store.uid_index.get(ref.get("uid"))
            owner = self.store.get(*where) if where is not None else None
            meta = (owner.obj.get("metadata") or {}) if owner is not None else {}
            if meta.get("deletionTimestamp") and FOREGROUND in (meta.get("finalizers") or []):
                self._delete_stored(rtype, stored, DeleteOptions(propagation="Background"))
                return

    def _solid_owner(self, ref):
        """An owner that exists and is not being deleted."""
        where = self.store.uid_index.get(ref.get("uid"))
        owner = self.store.get(*where) if where is not None else None
        return owner is not None and not (owner.obj.get("metadata") or {}).get("deletionTimestamp")

    def _orphan_dependents(self, owner_uid):
        for bucket, key in sorted(self.store.dependents.get(owner_uid, ())):
            stored = self.store.get(bucket, key)
            if stored is None:
                continue
            new = deepcopy(stored.obj)
            new["metadata"]["ownerReferences"] = [r for r in new["metadata"].get("ownerReferences") or []
                                                  if r.get("uid") != owner_uid]
            if not new["metadata"]["ownerReferences"]:
                del new["metadata"]["ownerReferences"]
            self.store.commit(bucket, key, new, MODIFIED, stored)

    def _check_foreground(self, bucket, stored):
        meta = stored.obj.get("metadata") or {}
        if not meta.get("deletionTimestamp") or FOREGROUND not in (meta.get("finalizers") or []):
            return
        if self._blocking_dependents(meta.get("uid")):
            return
        new = deepcopy(stored.obj)
        new["metadata"]["finalizers"] = [f for f in meta["finalizers"] if f != FOREGROUND]
        key = self._key(self._bucket_types[bucket], meta.get("namespace"), meta["name"])
        if not new["metadata"]["finalizers"]:
            del new["metadata"]["finalizers"]
            self._final_remove(bucket, key, new)
        else:
            self.store.commit(bucket, key, new, MODIFIED, stored)

    def _blocking_dependents(self, owner_uid):
        """Dependents that still exist and block the owner's foreground deletion: those whose reference to it has
        blockOwnerDeletion true (only they hold the foregroundDeletion finalizer, as in the real collector)."""
        blocking = []
        for bucket, key in self.store.dependents.get(owner_uid, ()):
            stored = self.store.get(bucket, key)
            if stored is None:
                continue
            refs = (stored.obj.get("metadata") or {}).get("ownerReferences") or []
            if any(r.get("uid") == owner_uid and r.get("blockOwnerDeletion") is True for r in refs):
                blocking.append((bucket, key))
        return blocking

    # ------------------------------------------------------------------------------------ namespaces

    def _terminate_namespace(self, rtype, stored):
        new = deepcopy(stored.obj)
        new["metadata"]["deletionTimestamp"] = now_rfc3339()
        new["metadata"]["deletionGracePeriodSeconds"] = 0
        new.setdefault("status", {})["phase"] = "Terminating"
        key = ("", new["metadata"]["name"])
        stored = self.store.commit(rtype.storage, key, new, MODIFIED, stored)
        ns = new["metadata"]["name"]
        self._delete_namespace_content(ns)
        self._maybe_finish_namespace(ns)
        return self.store.get(rtype.storage, key) or stored

    def _delete_namespace_content(self, ns):
        """The namespace controller's work: delete everything in the namespace (from the moment it is Terminating,
        creates there are refused with 403 NamespaceTerminating). Resources named in `namespace_deletion_hold`
        (qualified names such as "dataservices.sluice.dev", set through POST /_admin/config) are left for later,
        as a real namespace controller may reach some resources long after others (it works through every
        resource of the discovery, and retries); resume_namespace_deletion() deletes them."""
        hold = getattr(self, "namespace_deletion_hold", ())
        for bucket, btype in list(self._bucket_types.items()):
            if not btype.namespaced or btype.qualified() in hold:
                continue
            for _, item in self.store.current(bucket, ns):
                if not (item.obj.get("metadata") or {}).get("deletionTimestamp"):
                    current = self.store.get(bucket, (ns, item.obj["metadata"]["name"]))
                    if current is not None:
                        self._delete_stored(btype, current, DeleteOptions(propagation="Background"))

    def resume_namespace_deletion(self):
        """Deletes what the hold kept in every terminating namespace (call after changing the hold)."""
        with self._lock:
            for _, item in self.store.current("/namespaces", None):
                meta = item.obj.get("metadata") or {}
                if meta.get("deletionTimestamp"):
                    self._delete_namespace_content(meta["name"])
                    self._maybe_finish_namespace(meta["name"])

    def _maybe_finish_namespace(self, ns):
        stored = self.store.get("/namespaces", ("", ns))
        if stored is None or not (stored.obj.get("metadata") or {}).get("deletionTimestamp"):
            return
        for bucket, btype in self._bucket_types.items():
            if btype.namespaced and self.store.current(bucket, ns):
                return
        new = deepcopy(stored.obj)
        new["spec"]["finalizers"] = []
        if new["metadata"].get("finalizers"):
            self.store.commit("/namespaces", ("", ns), new, MODIFIED, stored)
            return
        self._final_remove("/namespaces", ("", ns), new)

    def _cleanup_crd(self, stored):
        name = stored.obj["metadata"]["name"]
        types = self._crd_types.get(name) or []
        if types:
            rtype = types[0]
            for key, item in self.store.current(rtype.storage, None):
                if not (item.obj.get("metadata") or {}).get("deletionTimestamp"):
                    self._delete_stored(rtype, item, DeleteOptions(propagation="Background"))
            if self.store.current(rtype.storage, None):
                return
        current = self.store.get("apiextensions.k8s.io/customresourcedefinitions", ("", name))
        if current is None:
            return
        new = deepcopy(current.obj)
        new["metadata"]["finalizers"] = [f for f in new["metadata"].get("finalizers") or []
                                         if f != CRD_CLEANUP_FINALIZER]
        if new["metadata"]["finalizers"]:
            self.store.commit("apiextensions.k8s.io/customresourcedefinitions", ("", name), new, MODIFIED, current)
            return
        del new["metadata"]["finalizers"]
        self._final_remove("apiextensions.k8s.io/customresourcedefinitions", ("", name), new)

    # ------------------------------------------------------------------------------------ collections

    def delete_collection(self, rtype, ns, query, options, ctx):
        result = self.list(rtype, ns, {k: v for k, v in query.items() if k in ("labelSelector", "fieldSelector")})
        deleted = []
        with self._lock:
            for stored in result.items:
                meta = stored.obj.get("metadata") or {}
                current = self.store.get(rtype.storage, self._key(rtype, meta.get("namespace"), meta["name"]))
                if current is None:
                    continue
                if not ctx.dry_run:
                    self._delete_stored(rtype, current, options)
                deleted.append(current)
        return self.list_result(rtype, deleted)


def _dedupe(items):
    out = []
    for item in items:
        if item not in out:
            out.append(item)
    return out


def delete_options(query, body):
    """DeleteOptions from the query string and/or a DeleteOptions body; raises 400 when malformed."""
    opts = {}
    if body:
        if not isinstance(body, dict):
            raise errors.bad_request("DeleteOptions must be an object")
        opts.update(body)
    grace = query.get("gracePeriodSeconds", opts.get("gracePeriodSeconds"))
    if grace is not None:
        try:
            grace = int(grace)
        except (TypeError, ValueError):
            raise errors.bad_request("gracePeriodSeconds must be an integer") from None
        if grace < 0:
            grace = 0
    propagation = query.get("propagationPolicy", opts.get("propagationPolicy"))
    if propagation is None and opts.get("orphanDependents") is not None:
        propagation = "Orphan" if opts["orphanDependents"] else "Background"
    if propagation not in (None, "Background", "Foreground", "Orphan"):
        raise errors.bad_request("propagationPolicy: Unsupported value: %s: supported values: \"Foreground\", "
                                 "\"Background\", \"Orphan\"" % errors.go_quote(str(propagation)))
    preconditions = opts.get("preconditions") or {}
    dry = query.get("dryRun") or opts.get("dryRun")
    return DeleteOptions(grace, propagation, preconditions, bool(dry))
