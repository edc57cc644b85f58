# METADATA
# title: maintenance label rules
# description: |
#   The label contract (docs/contract.md, "Admission rules") as pure functions of the labels before and
#   after a change and of who asks. Adapters (admission, manifests) only extract these
#   arguments; every decision is made here, so the webhook and the GitOps checks can
#   never disagree. Each violation is {"rule": id, "msg": text}.
package autoclusters.lib.maintenance

# present(labels, key) is true when the label exists, whatever its value ("" included).
present(labels, key) if key in object.keys(labels)

# changed is true when the label was added, removed or given another value.
changed(old, new, key) if object.get(old, key, null) != object.get(new, key, null)

# set_or_changed is true when the request leaves the label present with a value it did
# not have before (adding or changing it; removing it is not covered).
set_or_changed(old, new, key) if {
	present(new, key)
	changed(old, new, key)
}

is_controller(username, cfg) if username in {c | some c in cfg.controllers}

# is_node_identity: a kubelet (its group) or a node agent (the detector's service account);
# user is the review's userInfo ({username, groups}).
is_node_identity(user, cfg) if {
	is_array(user.groups)
	some g in user.groups
	g in {x | some x in cfg.nodeGroups}
}

is_node_identity(user, cfg) if user.username in {x | some x in cfg.nodeAgents}

# label_violations is every broken rule for a change of a node's labels from old to
# new, made by username. old is {} for a CREATE.
label_violations(old, new, username, cfg) := (required_violations(old, new, username, cfg) | approval_value_violations(old, new, cfg)) | approval_fault_violations(old, new, cfg)

required_violations(old, new, username, cfg) := {v |
	key := sprintf("%s/maintenance-required", [cfg.domain])
	changed(old, new, key)
	not is_controller(username, cfg)
	v := {
		"rule": "maintenance-required-controller-only",
		"msg": sprintf("%s is set and removed by the autoclusters controller only; %q may not %s it", [key, username, _verb(old, new, key)]),
	}
}

approval_value_violations(old, new, cfg) := {v |
	key := sprintf("%s/maintenance-approved", [cfg.domain])
	set_or_changed(old, new, key)
	new[key] != "true"
	v := {
		"rule": "maintenance-approved-value",
		"msg": sprintf("%s may only be set to \"true\" (got %q); remove the label to withdraw an approval", [key, new[key]]),
	}
}

approval_fault_violations(old, new, cfg) := {v |
	key := sprintf("%s/maintenance-approved", [cfg.domain])
	required := sprintf("%s/maintenance-required", [cfg.domain])
	set_or_changed(old, new, key)
	not present(new, required)
	v := {
		"rule": "maintenance-approved-requires-fault",
		"msg": sprintf("the node no longer needs a repair: %s is not present, so there is nothing to approve (%s is accepted only while %s is on the node)", [required, key, required]),
	}
}

# node_identity_violations: an approval is a person's consent to a repair, so a node's own
# identities may not add, change or remove it, not even while maintenance-required is there
# (maintenance-required itself is the controller's only, whoever else asks).
node_identity_violations(old, new, user, cfg) := {v |
	key := sprintf("%s/maintenance-approved", [cfg.domain])
	changed(old, new, key)
	is_node_identity(user, cfg)
	v := {
		"rule": "maintenance-approved-not-by-nodes",
		"msg": sprintf("%s is a person's approval of a repair; %s, a node's own identity, may not %s it", [key, object.get(user, "username", ""), _verb(old, new, key)]),
	}
}

# manifest_violations covers labels declared in a Node manifest (GitOps): it rejects exactly
# the manifests the admission rules reject when a user creates the node from them. The
# system-owned label may not be declared at all, and so no approval can be either: a value
# other than "true" is named as such, and "true" needs maintenance-required on the node.
manifest_violations(labels, cfg) := ({v |
	key := sprintf("%s/maintenance-required", [cfg.domain])
	present(labels, key)
	v := {
		"rule": "manifest-maintenance-required",
		"msg": sprintf("%s is owned by the autoclusters controller and must not appear in a manifest", [key]),
	}
} | approval_value_violations({}, labels, cfg)) | {v |
	object.get(labels, sprintf("%s/maintenance-approved", [cfg.domain]), null) == "true"
	some v in approval_fault_violations({}, labels, cfg)
}

_verb(old, new, key) := "add" if {
	not present(old, key)
	present(new, key)
} else := "remove" if {
	present(old, key)
	not present(new, key)
} else := "change"
