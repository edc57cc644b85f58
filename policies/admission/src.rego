# METADATA
# title: maintenance labels at admission
# description: |
#   Adapter from an AdmissionReview v1 (the webhook's input) to the label rules in
#   autoclusters.lib.maintenance, plus the GpuNodePool checks for pool writes. The
#   webhook reads `decision`; when it is undefined (input that is not a review) the
#   webhook denies.
package autoclusters.admission

import data.autoclusters.lib.config
import data.autoclusters.lib.maintenance
import data.autoclusters.lib.pools

request := input.request

username := object.get(request, ["userInfo", "username"], "")

user_info := object.get(request, "userInfo", {})

old_labels := labels_of(object.get(request, "oldObject", null))

new_labels := labels_of(object.get(request, "object", null))

labels_of(obj) := obj.metadata.labels if {
	is_object(obj.metadata.labels)
} else := {}

# A write of the object or of a subresource that carries it: the label rules read no
# subResource, because a PUT or PATCH of nodes/NAME/status changes labels as a write of the
# Node does (the API server keeps the status update's metadata), so both are judged alike.
writes(kind) if {
	request.kind.kind == kind
	request.operation in {"CREATE", "UPDATE"}
}

violations contains v if {
	writes("Node")
	request.kind.group == ""
	some v in maintenance.label_violations(old_labels, new_labels, username, config.config)
}

violations contains v if {
	writes("Node")
	request.kind.group == ""
	some v in maintenance.node_identity_violations(old_labels, new_labels, user_info, config.config)
}

violations contains v if {
	writes("GpuNodePool")
	some v in pools.pool_violations(request.object, config.config)
}

decision := {
	"uid": request.uid,
	"allowed": count(violations) == 0,
	"violations": [v | some v in violations],
} if is_string(request.uid)
