package autoclusters.manifests_test

import data.autoclusters.manifests

node(labels) := {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "gpu-1", "labels": labels}}

pool(mode) := {"apiVersion": "remediation.autoclusters.io/v1alpha1", "kind": "GpuNodePool", "metadata": {"name": "h100"}, "spec": {"consentMode": mode}}

test_clean_node if {
	count(manifests.deny) == 0 with input as node({"autoclusters.io/nodepool.name": "h100"})
}

test_required_in_manifest if {
	fs := manifests.violation with input as node({"autoclusters.io/maintenance-required": "true"})
	{[f.rule, f.kind, f.name] | some f in fs} == {["manifest-maintenance-required", "Node", "gpu-1"]}
}

test_approval_value_in_manifest if {
	ds := manifests.deny with input as node({"autoclusters.io/maintenance-approved": "yes"})
	some d in ds
	startswith(d, "Node gpu-1: [maintenance-approved-value]")
}

test_pool_modes if {
	count(manifests.deny) == 0 with input as pool("propose")
	{f.rule | some f in manifests.violation} == {"pool-consent-mode"} with input as pool("always")
}

test_list_items_are_indexed if {
	fs := manifests.violation with input as {"apiVersion": "v1", "kind": "List", "items": [node({}), pool("never")]}
	{[f.item, f.rule] | some f in fs} == {[1, "pool-consent-mode"]}
}

test_non_object_input_ignored if {
	count(manifests.violation) == 0 with input as "just a string"
}

test_other_domain_via_data if {
	fs := manifests.violation with input as node({"crusoe.ai/maintenance-required": "true"})
		with data.autoclusters.config as {"domain": "crusoe.ai"}
	{f.rule | some f in fs} == {"manifest-maintenance-required"}
}

test_approval_true_in_manifest_needs_a_fault if {
	fs := manifests.violation with input as node({"autoclusters.io/maintenance-approved": "true"})
	{f.rule | some f in fs} == {"maintenance-approved-requires-fault"}
}

test_maintenance_labels_are_judged_on_nodes_only if {
	labelled := {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "labels": {"autoclusters.io/maintenance-required": "true"}}}
	count(manifests.violation) == 0 with input as labelled
	p := object.union(pool("auto"), {"metadata": {"name": "h100", "labels": {"autoclusters.io/maintenance-approved": "no"}}})
	count(manifests.violation) == 0 with input as p
}
