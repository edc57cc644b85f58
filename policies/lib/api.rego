# METADATA
# title: The autoclusters API's enums and pool defaults (generated)
# description: |
#   Generated from autoclusters/api.py by `make manifests`; do not edit.
#   tests/unit/policy/test_api_parity.py keeps this file equal to the Python.
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
	"limits": {
		"attemptBudget.maxRepairs": {
			"default": 3,
			"minimum": 1,
		},
		"attemptBudget.windowSeconds": {
			"default": 604800,
			"minimum": 1,
		},
		"circuitBreaker.closeBelowPercent": {
			"default": 20,
			"maximum": 100,
			"minimum": 1,
		},
		"circuitBreaker.minNodes": {
			"default": 0,
			"minimum": 0,
		},
		"circuitBreaker.openAbovePercent": {
			"default": 30,
			"maximum": 100,
			"minimum": 1,
		},
		"drain.replaceDeadlineSeconds": {
			"default": 600,
			"minimum": 1,
		},
		"drain.resetDeadlineSeconds": {
			"default": 300,
			"minimum": 1,
		},
		"escalation.refaultWindowSeconds": {
			"default": 900,
			"minimum": 1,
		},
		"escalation.resetMemorySeconds": {
			"default": 86400,
			"minimum": 1,
		},
		"maxConcurrentRepairs": {
			"default": 1,
			"minimum": 1,
		},
		"preDrain.hook.timeoutSeconds": {
			"default": 10,
			"maximum": 120,
			"minimum": 1,
		},
		"preDrain.waitSeconds": {
			"default": 120,
			"minimum": 0,
		},
	},
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
	"version": "v1alpha1",
}
