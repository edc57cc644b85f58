package autoclusters.lib.maintenance_test

import data.autoclusters.lib.maintenance

cfg := {"domain": "autoclusters.io", "controllers": ["system:serviceaccount:autoclusters-system:autoclusters-controller"]}

controller := "system:serviceaccount:autoclusters-system:autoclusters-controller"

user := "alice@example.com"

req := "autoclusters.io/maintenance-required"

appr := "autoclusters.io/maintenance-approved"

rules(old, new, who) := {v.rule | some v in maintenance.label_violations(old, new, who, cfg)}

test_user_adds_required_denied if {
	rules({}, {req: "true"}, user) == {"maintenance-required-controller-only"}
}

test_user_changes_required_denied if {
	rules({req: "true"}, {req: "false"}, user) == {"maintenance-required-controller-only"}
}

test_user_removes_required_denied if {
	rules({req: "true"}, {}, user) == {"maintenance-required-controller-only"}
}

test_message_names_the_verb if {
	some v in maintenance.label_violations({req: "true"}, {}, user, cfg)
	contains(v.msg, "may not remove it")
	some w in maintenance.label_violations({}, {req: "true"}, user, cfg)
	contains(w.msg, "may not add it")
	some x in maintenance.label_violations({req: "true"}, {req: "x"}, user, cfg)
	contains(x.msg, "may not change it")
}

test_controller_adds_and_removes_required if {
	rules({}, {req: "true"}, controller) == set()
	rules({req: "true"}, {}, controller) == set()
	rules({req: "true", appr: "true"}, {}, controller) == set()
}

test_kubelet_registering_with_required_denied if {
	rules({}, {req: "true", "kubernetes.io/hostname": "n1"}, "system:node:n1") == {"maintenance-required-controller-only"}
}

test_unchanged_required_is_not_a_change if {
	rules({req: "true"}, {req: "true", "other": "x"}, user) == set()
}

test_approval_true_while_required_accepted if {
	rules({req: "true"}, {req: "true", appr: "true"}, user) == set()
}

test_approval_false_denied if {
	rules({req: "true"}, {req: "true", appr: "false"}, user) == {"maintenance-approved-value"}
}

test_approval_other_values_denied if {
	every value in ["", "True", "yes", "1"] {
		rules({req: "true"}, {req: "true", appr: value}, user) == {"maintenance-approved-value"}
	}
}

test_approval_changed_from_true_to_other_denied if {
	rules({req: "true", appr: "true"}, {req: "true", appr: "later"}, user) == {"maintenance-approved-value"}
}

test_approval_without_required_says_no_repair_needed if {
	vs := maintenance.label_violations({}, {appr: "true"}, user, cfg)
	{v.rule | some v in vs} == {"maintenance-approved-requires-fault"}
	some v in vs
	contains(v.msg, "no longer needs a repair")
}

test_invalid_approval_without_required_reports_both if {
	rules({}, {appr: "no"}, user) == {"maintenance-approved-value", "maintenance-approved-requires-fault"}
}

test_removing_approval_allowed if {
	rules({req: "true", appr: "true"}, {req: "true"}, user) == set()
	rules({appr: "true"}, {}, user) == set()
}

test_unchanged_stale_approval_allowed if {
	rules({appr: "true"}, {appr: "true", "team": "a"}, user) == set()
}

test_other_domain if {
	other := {"domain": "crusoe.ai", "controllers": ["crusoe"]}
	{v.rule | some v in maintenance.label_violations({}, {"crusoe.ai/maintenance-required": "true"}, user, other)} == {"maintenance-required-controller-only"}
	maintenance.label_violations({}, {req: "true"}, user, other) == set()
	maintenance.label_violations({}, {"crusoe.ai/maintenance-required": "true"}, "crusoe", other) == set()
}

test_manifest_with_required_denied if {
	{v.rule | some v in maintenance.manifest_violations({req: "true"}, cfg)} == {"manifest-maintenance-required"}
}

test_manifest_approval_value if {
	{v.rule | some v in maintenance.manifest_violations({appr: "yes"}, cfg)} == {"maintenance-approved-value"}
	{v.rule | some v in maintenance.manifest_violations({appr: "true", "team": "a"}, cfg)} == {"maintenance-approved-requires-fault"}
	maintenance.manifest_violations({"team": "a"}, cfg) == set()
}
