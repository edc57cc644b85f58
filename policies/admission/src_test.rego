package autoclusters.admission_test

import data.autoclusters.admission

req := "autoclusters.io/maintenance-required"

appr := "autoclusters.io/maintenance-approved"

controller := "system:serviceaccount:autoclusters-system:autoclusters-controller"

node(labels) := {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "gpu-1", "labels": labels}}

review(op, old, new, who) := {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
	"uid": "0001",
	"kind": {"group": "", "version": "v1", "kind": "Node"},
	"operation": op,
	"userInfo": {"username": who},
	"object": new,
	"oldObject": old,
}}

decide(r) := d if {
	d := admission.decision with input as r
}

rules(r) := {v.rule | some v in decide(r).violations}

test_create_with_required_by_kubelet_denied if {
	d := decide(review("CREATE", null, node({req: "true"}), "system:node:gpu-1"))
	d.allowed == false
	d.uid == "0001"
	{v.rule | some v in d.violations} == {"maintenance-required-controller-only"}
}

test_create_plain_node_allowed if {
	decide(review("CREATE", null, node({"a": "b"}), "system:node:gpu-1")).allowed
}

test_create_without_labels_allowed if {
	decide(review("CREATE", null, {"kind": "Node", "metadata": {"name": "n"}}, "system:node:n")).allowed
}

test_controller_sets_required if {
	decide(review("UPDATE", node({}), node({req: "true"}), controller)).allowed
}

test_user_approval_while_required if {
	decide(review("UPDATE", node({req: "true"}), node({req: "true", appr: "true"}), "alice")).allowed
}

test_user_approval_after_fault_cleared if {
	d := decide(review("UPDATE", node({}), node({appr: "true"}), "alice"))
	not d.allowed
	some v in d.violations
	contains(v.msg, "no longer needs a repair")
}

test_user_removes_required if {
	rules(review("UPDATE", node({req: "true"}), node({}), "alice")) == {"maintenance-required-controller-only"}
}

test_delete_not_judged if {
	decide(review("DELETE", node({req: "true"}), null, "alice")).allowed
}

test_pool_write_checked if {
	r := {"request": {
		"uid": "0002",
		"kind": {"group": "remediation.autoclusters.io", "version": "v1alpha1", "kind": "GpuNodePool"},
		"operation": "CREATE",
		"userInfo": {"username": "alice"},
		"object": {"apiVersion": "remediation.autoclusters.io/v1alpha1", "kind": "GpuNodePool", "metadata": {"name": "p"}, "spec": {"consentMode": "sometimes"}},
	}}
	rules(r) == {"pool-consent-mode"}
}

test_not_a_review_is_undefined if {
	not admission.decision with input as {"kind": "Node"}
	not admission.decision with input as {"request": {"uid": 7}}
}

test_null_labels_treated_as_empty if {
	decide(review("UPDATE", {"metadata": {"labels": null}}, node({"a": "b"}), "alice")).allowed
}

# The status subresource (PUT or PATCH of nodes/NAME/status) carries the whole Node, labels
# included, and the API server keeps its metadata: its review differs only in subResource.
on_status(r) := object.union(r, {"request": {
	"resource": {"group": "", "version": "v1", "resource": "nodes"},
	"subResource": "status",
}})

test_kubelet_approval_through_status_denied if {
	r := on_status(review("UPDATE", node({}), node({appr: "true"}), "system:node:gpu-1"))
	rules(r) == {"maintenance-approved-requires-fault"}
}

test_kubelet_required_through_status_denied if {
	rules(on_status(review("UPDATE", node({}), node({req: "true"}), "system:node:gpu-1"))) == {"maintenance-required-controller-only"}
	rules(on_status(review("UPDATE", node({req: "true"}), node({}), "system:node:gpu-1"))) == {"maintenance-required-controller-only"}
}

test_status_heartbeat_allowed if {
	decide(on_status(review("UPDATE", node({req: "true", "a": "b"}), node({req: "true", "a": "b"}), "system:node:gpu-1"))).allowed
}

# Every transition of the two labels (absent, "true", another value) by a user and by the
# controller: the status path is judged exactly as the object.
test_status_judged_as_the_object if {
	states := [{}, {req: "true"}, {req: "no"}, {appr: "true"}, {appr: "no"}, {req: "true", appr: "true"}, {req: "true", appr: "no"}]
	every old in states {
		every new in states {
			every who in ["alice", "system:node:gpu-1", controller] {
				r := review("UPDATE", node(old), node(new), who)
				decide(on_status(r)) == decide(r)
			}
		}
	}
}

kubelet := {"username": "system:node:gpu-1", "groups": ["system:nodes", "system:authenticated"]}

detector := {"username": "system:serviceaccount:autoclusters-system:autoclusters-detector", "groups": ["system:serviceaccounts"]}

as_user(r, info) := object.union(r, {"request": {"userInfo": info}})

test_node_identities_may_not_approve_or_withdraw if {
	every who in [kubelet, detector] {
		every change in [[{req: "true"}, {req: "true", appr: "true"}], [{req: "true", appr: "true"}, {req: "true"}]] {
			rules(as_user(review("UPDATE", node(change[0]), node(change[1]), ""), who)) == {"maintenance-approved-not-by-nodes"}
			rules(on_status(as_user(review("UPDATE", node(change[0]), node(change[1]), ""), who))) == {"maintenance-approved-not-by-nodes"}
		}
	}
}

test_node_identity_message_names_who_and_what if {
	d := decide(as_user(review("UPDATE", node({req: "true"}), node({req: "true", appr: "true"}), ""), kubelet))
	[v] := d.violations
	v.msg == "autoclusters.io/maintenance-approved is a person's approval of a repair; system:node:gpu-1, a node's own identity, may not add it"
}

test_node_identities_keep_their_other_label_writes if {
	decide(on_status(as_user(review("UPDATE", node({req: "true", appr: "true"}), node({req: "true", appr: "true", "a": "b"}), ""), kubelet))).allowed
	decide(as_user(review("UPDATE", node({}), node({"a": "b"}), ""), {"username": "system:node:gpu-1", "groups": null})).allowed
}

test_people_still_approve if {
	decide(as_user(review("UPDATE", node({req: "true"}), node({req: "true", appr: "true"}), ""), {"username": "alice", "groups": ["system:authenticated"]})).allowed
}
