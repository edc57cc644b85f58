# METADATA
# title: maintenance labels and pools in manifests (GitOps)
# description: |
#   Adapter for raw manifests, one object per input (conftest's default) or a v1 List.
#   `deny` gives conftest plain messages; `violation` gives structured findings
#   ({msg, rule, kind, name, item}) for conftest's --output json and for
#   `autoclusters policy check`.
package autoclusters.manifests

import data.autoclusters.lib.config
import data.autoclusters.lib.maintenance
import data.autoclusters.lib.pools

# items pairs each object with its position in a List (null for a single object).
items := [[i, obj] | some i, obj in input.items] if {
	input.kind == "List"
	is_array(input.items)
} else := [[null, input]]

violation contains finding if {
	some [i, obj] in items
	is_object(obj)
	some v in object_violations(obj)
	finding := object.union(v, {
		"kind": object.get(obj, "kind", ""),
		"name": object.get(obj, ["metadata", "name"], ""),
		"item": i,
	})
}

deny contains msg if {
	some f in violation
	msg := sprintf("%s %s: [%s] %s", [f.kind, f.name, f.rule, f.msg])
}

object_violations(obj) := node_label_violations(obj) | pools.pool_violations(obj, config.config)

# The maintenance labels are rules about Nodes (admission judges them on Nodes only).
node_label_violations(obj) := maintenance.manifest_violations(labels_of(obj), config.config) if {
	obj.kind == "Node"
	object.get(obj, "apiVersion", "v1") == "v1"
} else := set()

labels_of(obj) := obj.metadata.labels if {
	is_object(obj.metadata.labels)
} else := {}
