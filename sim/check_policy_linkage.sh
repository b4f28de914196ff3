#!/usr/bin/env bash
# The simulator runs the real policy: sim/ defines none of the policy's functions, the simulator's
# adapter library refers to sluice::autoscaler::Decide without defining it, and the policy library the
# binaries link defines it. Usage: check_policy_linkage.sh SIM_SOURCE_DIR SIM_POLICIES_LIB POLICY_LIB
set -euo pipefail
src=$1 sim_lib=$2 policy_lib=$3
fail() { echo "sim_uses_policy_library: $*" >&2; exit 1; }
copies=$(grep -rnE '^(DecisionResult|Sizing|Split|Stabilized|Limited|InterferenceUpdate) +(autoscaler::)?(Decide|SizeFromSignals|SplitWorkers|Stabilize|LimitRate|ObserveInterference)\(' "$src" || true)
[ -z "$copies" ] || fail "sim/ defines policy functions itself (a second copy of the policy):
$copies"
decide='sluice::autoscaler::Decide(sluice::autoscaler::PolicyConfig const&'
nm -C "$sim_lib" | grep -F " U $decide" >/dev/null || fail "$sim_lib does not call $decide...) from outside itself"
nm -C "$sim_lib" | grep -F " T $decide" >/dev/null && fail "$sim_lib defines $decide...) itself"
nm -C "$policy_lib" | grep -F " T $decide" >/dev/null || fail "$policy_lib does not define $decide...)"
echo "sim_uses_policy_library: sim calls sluice::autoscaler::Decide from $(basename "$policy_lib")"
