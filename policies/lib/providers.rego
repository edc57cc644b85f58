# METADATA
# title: Repair provider types (generated)
# description: |
#   Generated from autoclusters/deploy/providers.py by `make manifests`; do not edit.
#   tests/unit/rego/test_policy_data_provider_parity.py keeps this file equal to the Python.
package autoclusters.lib.providers

providers := {
	"actions": [
		"reset",
		"replace",
	],
	"types": {
		"clusterapi": {
			"actions": [
				"reset",
				"replace",
			],
			"settings": {
				"kubeconfigKey": {
					"allow_list": "",
					"kind": "string",
					"required": false,
					"values": [],
				},
				"managementCluster": {
					"allow_list": "",
					"kind": "enum",
					"required": false,
					"values": [
						"self",
						"secret",
					],
				},
				"version": {
					"allow_list": "",
					"kind": "enum",
					"required": false,
					"values": [
						"v1beta1",
						"v1beta2",
					],
				},
			},
		},
		"command": {
			"actions": [
				"reset",
				"replace",
			],
			"settings": {
				"command": {
					"allow_list": "commands",
					"kind": "strings",
					"required": true,
					"values": [],
				},
				"timeoutSeconds": {
					"allow_list": "",
					"kind": "integer",
					"minimum": 1,
					"required": false,
					"values": [],
				},
			},
		},
		"ec2": {
			"actions": [
				"reset",
			],
			"settings": {
				"credentials": {
					"allow_list": "",
					"kind": "enum",
					"required": false,
					"values": [
						"podIdentity",
						"secret",
					],
				},
				"mode": {
					"allow_list": "",
					"kind": "enum",
					"required": false,
					"values": [
						"reboot",
						"stopStart",
					],
				},
				"region": {
					"allow_list": "",
					"kind": "string",
					"required": false,
					"values": [],
				},
				"requestTimeoutSeconds": {
					"allow_list": "",
					"kind": "integer",
					"minimum": 1,
					"required": false,
					"values": [],
				},
				"timeoutSeconds": {
					"allow_list": "",
					"kind": "integer",
					"minimum": 1,
					"required": false,
					"values": [],
				},
			},
		},
		"hostReboot": {
			"actions": [
				"reset",
			],
			"settings": {
				"image": {
					"allow_list": "images",
					"kind": "string",
					"required": false,
					"values": [],
				},
				"timeoutSeconds": {
					"allow_list": "",
					"kind": "integer",
					"minimum": 1,
					"required": false,
					"values": [],
				},
			},
		},
		"karpenter": {
			"actions": [
				"replace",
			],
			"settings": {
				"timeoutSeconds": {
					"allow_list": "",
					"kind": "integer",
					"minimum": 1,
					"required": false,
					"values": [],
				},
			},
		},
		"redfish": {
			"actions": [
				"reset",
			],
			"settings": {
				"insecureSkipTLSVerify": {
					"allow_list": "",
					"kind": "boolean",
					"required": false,
					"values": [],
				},
				"powerOnAfterSeconds": {
					"allow_list": "",
					"kind": "integer",
					"minimum": 1,
					"required": false,
					"values": [],
				},
				"requestTimeoutSeconds": {
					"allow_list": "",
					"kind": "integer",
					"minimum": 1,
					"required": false,
					"values": [],
				},
				"timeoutSeconds": {
					"allow_list": "",
					"kind": "integer",
					"minimum": 1,
					"required": false,
					"values": [],
				},
			},
		},
		"simulated": {
			"actions": [
				"reset",
				"replace",
			],
			"settings": {
				"replaceSeconds": {
					"allow_list": "",
					"kind": "integer",
					"minimum": 0,
					"required": false,
					"values": [],
				},
				"resetSeconds": {
					"allow_list": "",
					"kind": "integer",
					"minimum": 0,
					"required": false,
					"values": [],
				},
			},
		},
	},
}
