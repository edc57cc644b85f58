# METADATA
# title: The autoclusters API's enums (generated)
# description: |
#   Generated from autoclusters/api.py by `make manifests`; do not edit.
#   tests/unit/rego/test_policy_data_api_parity.py keeps this file equal to the Python.
package autoclusters.lib.api

api := {
	"class_actions": [
		"default",
		"reset",
		"replace",
		"off",
	],
	"consent_modes": [
		"auto",
		"propose",
		"off",
	],
	"fault_classes": [
		"gpu",
		"nvswitch",
		"dcgm",
		"interconnect",
	],
	"group_prefix": "remediation",
	"phases": [
		"AwaitingApproval",
		"Scheduled",
		"Draining",
		"Acting",
		"Verifying",
		"Succeeded",
		"NotNeeded",
		"Failed",
		"HumanNeeded",
		"Closed",
	],
	"pool_kind": "GpuNodePool",
	"repair_actions": [
		"reset",
		"replace",
	],
	"repair_code_pattern": "^(gpu|nvswitch|dcgm|interconnect):[A-Za-z0-9_]{1,64}$",
	"version": "v1beta1",
}
