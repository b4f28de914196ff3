"""The process node: plays kubelet for one Node by running pods as local processes (or simulating them)."""
