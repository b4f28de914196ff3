{{/* The operator's and the autoscaler's RBAC rules (helm/rbac-usage.yaml names the code behind each). */}}

{{- define "sluice.operator.dataServiceRules" -}}
# DataServices: watched (list, watch), finalizer added/removed (guarded JSON patch); status written by a
# merge patch of the status subresource. The operator never GETs one (its cache has them).
- apiGroups: ["sluice.dev"]
  resources: ["dataservices"]
  verbs: ["list", "watch", "patch"]
- apiGroups: ["sluice.dev"]
  resources: ["dataservices/status"]
  verbs: ["patch"]
# ownerReferences with blockOwnerDeletion need update on the owner's finalizers subresource
# (OwnerReferencesPermissionEnforcement admission).
- apiGroups: ["sluice.dev"]
  resources: ["dataservices/finalizers"]
  verbs: ["update"]
# The dispatcher Service (a JSON merge patch of its ports when they drift) and the journal claim. `get`: a create
# answered 409 AlreadyExists is followed by a GET of that name, to tell a create of ours whose answer was
# lost from an object someone else controls (reported as a FailedCreate Event naming its controller).
- apiGroups: [""]
  resources: ["services"]
  verbs: ["get", "list", "watch", "create", "patch"]
- apiGroups: [""]
  resources: ["persistentvolumeclaims"]
  verbs: ["get", "list", "watch", "create"]
# events.k8s.io/v1 Events about DataServices, in their namespaces (a repeat patches series.count; a repeat
# whose Event is gone is created again).
- apiGroups: ["events.k8s.io"]
  resources: ["events"]
  verbs: ["create", "patch"]
{{- end }}
{{- define "sluice.operator.podWrites" -}}
# Dispatcher and worker pods: created, deleted with a uid precondition; `get` for the same 409 check.
- apiGroups: [""]
  resources: ["pods"]
  verbs: ["get", "create", "delete"]
{{- end }}
{{- define "sluice.operator.clusterReads" -}}
# Every pod of the cluster is watched (local capacity counts the CPU requested on the trainers' nodes),
# and the nodes' allocatable CPU, labels and taints.
- apiGroups: [""]
  resources: ["pods"]
  verbs: ["list", "watch"]
- apiGroups: [""]
  resources: ["nodes"]
  verbs: ["list", "watch"]
{{- end }}

{{- define "sluice.autoscaler.dataServiceRules" -}}
# DataServices: watched (list, watch, with managedFields: who owns spec.workers.replicas matters); the spec
# (replicas, the local/remote split, workersToDelete) and status.autoscaler written by server-side apply.
- apiGroups: ["sluice.dev"]
  resources: ["dataservices"]
  verbs: ["list", "watch", "patch"]
- apiGroups: ["sluice.dev"]
  resources: ["dataservices/status"]
  verbs: ["patch"]
# The DataServices' worker pods (label sluice.dev/dataservice): which workers run where.
- apiGroups: [""]
  resources: ["pods"]
  verbs: ["list", "watch"]
# A DataService an HPA or a KEDA ScaledObject drives through /scale is left alone.
- apiGroups: ["autoscaling"]
  resources: ["horizontalpodautoscalers"]
  verbs: ["list", "watch"]
- apiGroups: ["keda.sh"]
  resources: ["scaledobjects"]
  verbs: ["list", "watch"]
# Scaling decisions as events.k8s.io/v1 Events on the DataService (a repeat patches series.count).
- apiGroups: ["events.k8s.io"]
  resources: ["events"]
  verbs: ["create", "patch"]
{{- end }}
