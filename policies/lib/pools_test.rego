package autoclusters.lib.pools_test

import data.autoclusters.lib.pools

# The operator's allow-lists list what the valid pools below name.
cfg := {"domain": "autoclusters.io", "controllers": [], "allowLists": {
	"commands": {"fix": ["/bin/fix"], "notify": ["/bin/notify"]},
	"images": {"reboot": "registry.example/reboot:1", "x": "x"},
	"urls": {"hook": "https://h.example/x"},
}}

pool(spec) := {"apiVersion": "remediation.autoclusters.io/v1alpha1", "kind": "GpuNodePool", "metadata": {"name": "a100"}, "spec": spec}

rules(obj) := {v.rule | some v in pools.pool_violations(obj, cfg)}

test_valid_modes if {
	every mode in ["auto", "propose", "off"] {
		rules(pool({"consentMode": mode})) == set()
	}
}

test_missing_mode_takes_default if {
	rules(pool({})) == set()
}

test_invalid_modes if {
	every mode in ["Auto", "manual", "", 1, null] {
		rules(pool({"consentMode": mode})) == {"pool-consent-mode"}
	}
}

test_repair_codes if {
	rules(pool({"repairCodes": {"gpu:13": "reset", "interconnect:port_down": "replace"}})) == set()
	rules(pool({"repairCodes": {"gpu:13": "reboot"}})) == {"pool-repair-codes"}
	rules(pool({"repairCodes": {"disk:13": "reset"}})) == {"pool-repair-codes"}
	rules(pool({"repairCodes": {"gpu13": "reset"}})) == {"pool-repair-codes"}
}

test_fault_classes if {
	rules(pool({"faultClasses": {"gpu": "reset", "nvswitch": "replace", "dcgm": "off", "interconnect": "default"}})) == set()
	rules(pool({"faultClasses": {"gpu": "reboot"}})) == {"pool-fault-class-action"}
	rules(pool({"faultClasses": {"disk": "reset"}})) == {"pool-fault-class-action"}
}

test_max_concurrent if {
	rules(pool({"maxConcurrentRepairs": 2})) == set()
	every n in [0, -1, 1.5, "2"] {
		rules(pool({"maxConcurrentRepairs": n})) == {"pool-max-concurrent-repairs"}
	}
}

test_other_kinds_and_groups_ignored if {
	rules({"apiVersion": "v1", "kind": "Node", "spec": {"consentMode": "x"}}) == set()
	rules({"apiVersion": "remediation.example.com/v1alpha1", "kind": "GpuNodePool", "spec": {"consentMode": "x"}}) == set()
}

test_messages_name_the_value if {
	some v in pools.pool_violations(pool({"consentMode": "manual"}), cfg)
	contains(v.msg, "manual")
}

test_circuit_breaker if {
	rules(pool({"circuitBreaker": {"openAbovePercent": 40, "closeBelowPercent": 10}})) == set()
	rules(pool({"circuitBreaker": {"closeBelowPercent": 30}})) == set()
	rules(pool({"circuitBreaker": {"openAbovePercent": 20, "closeBelowPercent": 25}})) == {"pool-circuit-breaker"}
	rules(pool({"circuitBreaker": {"openAbovePercent": 10}})) == {"pool-circuit-breaker"}
	rules(pool({"circuitBreaker": {"openAbovePercent": 101}})) == {"pool-circuit-breaker"}
	rules(pool({"circuitBreaker": {"closeBelowPercent": "20"}})) == {"pool-circuit-breaker"}
}

msgs(obj) := {v.msg | some v in pools.pool_violations(obj, cfg)}

test_providers_valid if {
	every p in [
		{"type": "simulated"},
		{"type": "simulated", "simulated": {"resetSeconds": 0, "replaceSeconds": 5}},
		{"type": "command", "command": {"command": ["/bin/fix"], "timeoutSeconds": 60}},
		{"type": "clusterapi", "clusterapi": {"version": "v1beta2"}},
		{"type": "clusterapi", "reset": {"type": "hostReboot", "hostReboot": {"image": "x", "timeoutSeconds": 9}}},
		{"reset": {"type": "hostReboot"}, "replace": {"type": "clusterapi"}},
		{"reset": {"type": "hostReboot"}, "replace": {"type": "karpenter", "karpenter": {"timeoutSeconds": 600}}},
		{"reset": {"type": "ec2", "ec2": {"mode": "stopStart", "region": "us-east-1", "credentials": "secret"}}},
		{},
	] {
		rules(pool({"provider": p})) == set()
	}
}

test_providers_invalid if {
	msgs(pool({"provider": "simulated"})) == {"spec.provider must be an object"}
	msgs(pool({"provider": {"type": "aws"}})) == {"spec.provider.type aws is not one of clusterapi, command, ec2, hostReboot, karpenter, redfish, simulated"}
	msgs(pool({"provider": {"simulated": {}}})) == {"spec.provider.type is required"}
	msgs(pool({"provider": {"type": "simulated", "resetSeconds": 1}})) == {"spec.provider has unknown key resetSeconds"}
	msgs(pool({"provider": {"type": "simulated", "command": {"command": ["x"]}}})) == {"spec.provider.command does not apply to type simulated"}
	msgs(pool({"provider": {"type": "command"}})) == {"spec.provider.command.command is required"}
	msgs(pool({"provider": {"type": "command", "command": {"command": []}}})) == {"spec.provider.command.command [] is not a valid strings"}
	msgs(pool({"provider": {"type": "command", "command": "x"}})) == {"spec.provider.command must be an object"}
	msgs(pool({"provider": {"type": "simulated", "simulated": {"resetSeconds": -1}}})) == {"spec.provider.simulated.resetSeconds -1 is not a valid integer"}
	msgs(pool({"provider": {"type": "simulated", "simulated": {"resetSecs": 1}}})) == {"spec.provider.simulated has unknown key resetSecs"}
	msgs(pool({"provider": {"type": "clusterapi", "clusterapi": {"version": "v1"}}})) == {"spec.provider.clusterapi.version v1 is not a valid enum"}
	msgs(pool({"provider": {"type": "hostReboot", "hostReboot": {"image": ""}}})) == {"spec.provider.hostReboot.image  is not a valid string"}
	msgs(pool({"provider": {"replace": {"type": "hostReboot"}}})) == {"spec.provider.replace.type hostReboot cannot replace a node"}
	msgs(pool({"provider": {"reset": {"type": "karpenter"}}})) == {"spec.provider.reset.type karpenter cannot reset a node"}
	msgs(pool({"provider": {"type": "redfish", "redfish": {"insecureSkipTLSVerify": "yes"}}})) == {"spec.provider.redfish.insecureSkipTLSVerify yes is not a valid boolean"}
	msgs(pool({"provider": {"replace": {"type": "redfish"}}})) == {"spec.provider.replace.type redfish cannot replace a node"}
	msgs(pool({"provider": {"type": "ec2", "ec2": {"mode": "powerCycle"}}})) == {"spec.provider.ec2.mode powerCycle is not a valid enum"}
	msgs(pool({"provider": {"type": "ec2", "ec2": {"endpointUrl": "http://169.254.169.254"}}})) == {"spec.provider.ec2 has unknown key endpointUrl"}
	msgs(pool({"provider": {"reset": "hostReboot"}})) == {"spec.provider.reset must be an object with a type"}
	msgs(pool({"provider": {"reset": {}}})) == {"spec.provider.reset.type is required"}
}

test_pre_drain if {
	rules(pool({"preDrain": {"waitSeconds": 0, "acknowledgers": ["slurm"], "slinky": true, "hook": {"url": "https://h.example/x"}}})) == set()
	rules(pool({"preDrain": {"hook": {"command": ["/bin/notify"]}}})) == set()
	every w in [-1, 1.5, "120"] {
		rules(pool({"preDrain": {"waitSeconds": w}})) == {"pool-pre-drain"}
	}
	every acks in ["slurm", ["Slurm"], ["-x"], [1]] {
		rules(pool({"preDrain": {"acknowledgers": acks}})) == {"pool-pre-drain"}
	}
	rules(pool({"preDrain": {"hook": {}}})) == {"pool-pre-drain"}
	rules(pool({"preDrain": {"hook": {"url": "https://h.example/x", "command": ["/bin/x"]}}})) == {"pool-pre-drain"}
}

# The generic checks of the field table (policies/lib/pool_fields.rego): every kind, the
# objects that hold settings, the rules between settings.
test_settings_of_each_kind if {
	rules(pool({"drain": {"resetDeadlineSeconds": 1}, "slurm": {"enabled": true, "signal": ""}})) == set()
	rules(pool({"drain": {"resetDeadlineSeconds": 0}})) == {"pool-drain"}
	rules(pool({"escalation": {"refaultWindowSeconds": "900"}})) == {"pool-escalation"}
	rules(pool({"attemptBudget": {"maxRepairs": 1.5}})) == {"pool-attempt-budget"}
	rules(pool({"circuitBreaker": {"openAbovePercent": 101}})) == {"pool-circuit-breaker"}
	rules(pool({"slurm": {"requeue": "yes"}})) == {"pool-slurm"}
	rules(pool({"slurm": {"signal": "KILL"}})) == {"pool-slurm"}
	rules(pool({"preDrain": {"acknowledgers": ["a", "a"]}})) == {"pool-pre-drain"}
	some v in pools.pool_violations(pool({"preDrain": {"acknowledgers": ["a", "a"]}}), cfg)
	v.msg == "spec.preDrain.acknowledgers lists a name twice"
}

test_objects_of_settings if {
	rules(pool({"drain": "fast"})) == {"pool-drain"}
	rules(pool({"drain": {"resetDeadline": 5}})) == {"pool-drain"}
	rules(pool({"preDrain": {"hook": {"url": "https://h.example/x", "timeout": 5}}})) == {"pool-pre-drain"}
}

test_rules_between_settings if {
	rules(pool({"circuitBreaker": {"closeBelowPercent": 31}})) == {"pool-circuit-breaker"}
	rules(pool({"slurm": {"enabled": true}, "preDrain": {"slinky": true}})) == {"pool-slurm"}
	rules(pool({"slurm": {"enabled": true}, "preDrain": {"slinky": false}})) == set()
}

test_hook_forms if {
	every hook in [{"url": "ftp://x"}, {"url": ""}, {"url": 5}, {"command": []}, {"command": [""]}, {"command": "x"}] {
		rules(pool({"preDrain": {"hook": hook}})) == {"pool-pre-drain"}
	}
}

test_node_selector if {
	rules(pool({"nodeSelector": {"matchLabels": {"gpu": "h100"}}})) == set()
	rules(pool({"nodeSelector": {"matchExpressions": [{"key": "gpu", "operator": "In", "values": ["a"]}]}})) == set()
	rules(pool({"nodeSelector": {"matchExpressions": [{"key": "gpu", "operator": "Exists"}]}})) == set()
	every sel in [
		{}, "gpu", {"matchFields": []}, {"matchLabels": "gpu"}, {"matchLabels": {"-gpu": "a"}},
		{"matchLabels": {"gpu": "a b"}}, {"matchLabels": {sprintf("l%d", [i]): "x" | some i in numbers.range(0, 64)}},
		{"matchExpressions": "gpu"}, {"matchExpressions": ["gpu"]},
		{"matchExpressions": [{"key": "gpu", "operator": "Exists", "x": 1}]},
		{"matchExpressions": [{"operator": "Exists"}]}, {"matchExpressions": [{"key": "gpu", "operator": "Gt"}]},
		{"matchExpressions": [{"key": "gpu", "operator": "In"}]},
		{"matchExpressions": [{"key": "gpu", "operator": "Exists", "values": ["a"]}]},
		{"matchExpressions": [{"key": "gpu", "operator": "In", "values": ["a b"]}]},
	] {
		rules(pool({"nodeSelector": sel})) == {"pool-node-selector"}
	}
}

test_slurm_node_name if {
	rules(pool({"slurm": {"nodeName": {"fromLabel": "slurm.example.com/name"}}})) == set()
	every mapping in ["x", {"fromLabel": "a", "fromAnnotation": "b"}, {"label": "a"}, {"fromAnnotation": "not a key"}] {
		rules(pool({"slurm": {"nodeName": mapping}})) == {"pool-slurm"}
	}
}

test_allow_lists_admit_only_their_entries if {
	rules(pool({"provider": {"type": "command", "command": {"command": ["/bin/fix"]}}})) == set()
	msgs(pool({"provider": {"type": "command", "command": {"command": ["/bin/fix", "--now"]}}})) == {"spec.provider.command.command [\"/bin/fix\", \"--now\"] is not an entry of the allow-list allowLists.commands (the stack setting autoclusters:allowLists, the controller's --allow-lists)"}
	rules(pool({"provider": {"type": "hostReboot", "hostReboot": {"image": "registry.example/reboot:1"}}})) == set()
	rules(pool({"provider": {"type": "hostReboot"}})) == set()
	rules(pool({"provider": {"reset": {"type": "hostReboot", "hostReboot": {"image": "evil.example/x:1"}}}})) == {"pool-allow-list"}
	msgs(pool({"provider": {"replace": {"type": "command", "command": {"command": ["/bin/notify"]}}, "type": "hostReboot", "hostReboot": {"image": "x:1"}}})) == {"spec.provider.hostReboot.image x:1 is not an entry of the allow-list allowLists.images (the stack setting autoclusters:allowLists, the controller's --allow-lists)"}
	rules(pool({"preDrain": {"hook": {"url": "https://h.example/other"}}})) == {"pool-allow-list"}
	rules(pool({"preDrain": {"hook": {"command": ["/bin/fix"]}}})) == set()
	rules(pool({"preDrain": {"hook": {"command": ["https://h.example/x"]}}})) == {"pool-allow-list"}
}

test_no_allow_lists_admit_nothing if {
	none := {"domain": "autoclusters.io", "controllers": []}
	{v.rule | some v in pools.pool_violations(pool({"preDrain": {"hook": {"command": ["/bin/notify"]}}}), none)} == {"pool-allow-list"}
	{v.rule | some v in pools.pool_violations(pool({"provider": {"type": "simulated"}}), none)} == set()
}
