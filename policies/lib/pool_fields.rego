# METADATA
# title: The pool's field table (generated)
# description: |
#   Generated from autoclusters/pool_fields.py by `make manifests`; do not edit.
#   tests/unit/rego/test_policy_data_pool_fields_parity.py keeps this file equal to the Python.
package autoclusters.lib.pool_fields

pool_fields := {
	"allow_listed": {
		"preDrain.hook.command": {
			"at": [
				"preDrain",
				"hook",
				"command",
			],
			"list": "commands",
		},
		"preDrain.hook.url": {
			"at": [
				"preDrain",
				"hook",
				"url",
			],
			"list": "urls",
		},
	},
	"excludes": [
		{
			"message": "slurm.enabled and preDrain.slinky exclude each other: on a Slinky cluster slurm-operator drains and undrains Slurm itself (from the cordon reason)",
			"rule": "pool-slurm",
			"settings": [
				"slurm.enabled",
				"preDrain.slinky",
			],
		},
	],
	"groups": {
		"attemptBudget": {
			"at": [
				"attemptBudget",
			],
			"keys": [
				"maxRepairs",
				"windowSeconds",
			],
			"rule": "pool-attempt-budget",
		},
		"circuitBreaker": {
			"at": [
				"circuitBreaker",
			],
			"keys": [
				"openAbovePercent",
				"closeBelowPercent",
				"minNodes",
			],
			"rule": "pool-circuit-breaker",
		},
		"drain": {
			"at": [
				"drain",
			],
			"keys": [
				"resetDeadlineSeconds",
				"replaceDeadlineSeconds",
			],
			"rule": "pool-drain",
		},
		"escalation": {
			"at": [
				"escalation",
			],
			"keys": [
				"refaultWindowSeconds",
				"resetMemorySeconds",
			],
			"rule": "pool-escalation",
		},
		"preDrain": {
			"at": [
				"preDrain",
			],
			"keys": [
				"waitSeconds",
				"acknowledgers",
				"slinky",
				"hook",
			],
			"rule": "pool-pre-drain",
		},
		"preDrain.hook": {
			"at": [
				"preDrain",
				"hook",
			],
			"keys": [
				"timeoutSeconds",
				"url",
				"command",
			],
			"rule": "pool-pre-drain",
		},
		"slurm": {
			"at": [
				"slurm",
			],
			"keys": [
				"enabled",
				"signal",
				"signalTo",
				"signalLeadSeconds",
				"requeue",
				"actOnExternalDrains",
				"nodeName",
			],
			"rule": "pool-slurm",
		},
	},
	"hook_url_pattern": "^https?://\\S+$",
	"not_above": [
		{
			"greater": "circuitBreaker.openAbovePercent",
			"lesser": "circuitBreaker.closeBelowPercent",
			"rule": "pool-circuit-breaker",
		},
	],
	"selector": {
		"key_pattern": "^([a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$",
		"max_labels": 64,
		"operators": [
			"In",
			"NotIn",
			"Exists",
			"DoesNotExist",
		],
		"value_pattern": "^(([A-Za-z0-9][-A-Za-z0-9_.]{0,61})?[A-Za-z0-9])?$",
		"with_values": [
			"In",
			"NotIn",
		],
	},
	"settings": {
		"attemptBudget.maxRepairs": {
			"at": [
				"attemptBudget",
				"maxRepairs",
			],
			"default": 3,
			"kind": "integer",
			"minimum": 1,
			"rule": "pool-attempt-budget",
		},
		"attemptBudget.windowSeconds": {
			"at": [
				"attemptBudget",
				"windowSeconds",
			],
			"default": 604800,
			"kind": "integer",
			"minimum": 1,
			"rule": "pool-attempt-budget",
		},
		"circuitBreaker.closeBelowPercent": {
			"at": [
				"circuitBreaker",
				"closeBelowPercent",
			],
			"default": 20,
			"kind": "integer",
			"maximum": 100,
			"minimum": 1,
			"rule": "pool-circuit-breaker",
		},
		"circuitBreaker.minNodes": {
			"at": [
				"circuitBreaker",
				"minNodes",
			],
			"default": 0,
			"kind": "integer",
			"minimum": 0,
			"rule": "pool-circuit-breaker",
		},
		"circuitBreaker.openAbovePercent": {
			"at": [
				"circuitBreaker",
				"openAbovePercent",
			],
			"default": 30,
			"kind": "integer",
			"maximum": 100,
			"minimum": 1,
			"rule": "pool-circuit-breaker",
		},
		"consentMode": {
			"at": [
				"consentMode",
			],
			"default": "auto",
			"kind": "enum",
			"rule": "pool-consent-mode",
			"values": [
				"auto",
				"propose",
				"off",
			],
			"words": "auto, propose, off",
		},
		"drain.replaceDeadlineSeconds": {
			"at": [
				"drain",
				"replaceDeadlineSeconds",
			],
			"default": 600,
			"kind": "integer",
			"minimum": 1,
			"rule": "pool-drain",
		},
		"drain.resetDeadlineSeconds": {
			"at": [
				"drain",
				"resetDeadlineSeconds",
			],
			"default": 300,
			"kind": "integer",
			"minimum": 1,
			"rule": "pool-drain",
		},
		"escalation.refaultWindowSeconds": {
			"at": [
				"escalation",
				"refaultWindowSeconds",
			],
			"default": 900,
			"kind": "integer",
			"minimum": 1,
			"rule": "pool-escalation",
		},
		"escalation.resetMemorySeconds": {
			"at": [
				"escalation",
				"resetMemorySeconds",
			],
			"default": 86400,
			"kind": "integer",
			"minimum": 1,
			"rule": "pool-escalation",
		},
		"maxConcurrentRepairs": {
			"at": [
				"maxConcurrentRepairs",
			],
			"default": 1,
			"kind": "integer",
			"minimum": 1,
			"rule": "pool-max-concurrent-repairs",
		},
		"preDrain.acknowledgers": {
			"at": [
				"preDrain",
				"acknowledgers",
			],
			"default": [],
			"kind": "names",
			"pattern": "^[a-z0-9]([-a-z0-9]{0,38}[a-z0-9])?$",
			"pattern_words": "a short DNS label (lower case, digits, '-', at most 40 characters)",
			"rule": "pool-pre-drain",
		},
		"preDrain.hook.timeoutSeconds": {
			"at": [
				"preDrain",
				"hook",
				"timeoutSeconds",
			],
			"default": 10,
			"kind": "integer",
			"maximum": 120,
			"minimum": 1,
			"rule": "pool-pre-drain",
		},
		"preDrain.slinky": {
			"at": [
				"preDrain",
				"slinky",
			],
			"default": false,
			"kind": "boolean",
			"rule": "pool-pre-drain",
		},
		"preDrain.waitSeconds": {
			"at": [
				"preDrain",
				"waitSeconds",
			],
			"default": 120,
			"kind": "integer",
			"minimum": 0,
			"rule": "pool-pre-drain",
		},
		"slurm.actOnExternalDrains": {
			"at": [
				"slurm",
				"actOnExternalDrains",
			],
			"default": false,
			"kind": "boolean",
			"rule": "pool-slurm",
		},
		"slurm.enabled": {
			"at": [
				"slurm",
				"enabled",
			],
			"default": false,
			"kind": "boolean",
			"rule": "pool-slurm",
		},
		"slurm.requeue": {
			"at": [
				"slurm",
				"requeue",
			],
			"default": true,
			"kind": "boolean",
			"rule": "pool-slurm",
		},
		"slurm.signal": {
			"at": [
				"slurm",
				"signal",
			],
			"default": "TERM",
			"kind": "enum",
			"rule": "pool-slurm",
			"values": [
				"",
				"TERM",
				"USR1",
				"USR2",
				"INT",
				"HUP",
				"QUIT",
			],
			"words": "\"\", TERM, USR1, USR2, INT, HUP, QUIT",
		},
		"slurm.signalLeadSeconds": {
			"at": [
				"slurm",
				"signalLeadSeconds",
			],
			"default": 60,
			"kind": "integer",
			"minimum": 0,
			"rule": "pool-slurm",
		},
		"slurm.signalTo": {
			"at": [
				"slurm",
				"signalTo",
			],
			"default": "steps",
			"kind": "enum",
			"rule": "pool-slurm",
			"values": [
				"steps",
				"batch",
				"all",
			],
			"words": "steps, batch, all",
		},
	},
}
