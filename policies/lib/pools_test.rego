package autoclusters.lib.pools_test

import data.autoclusters.lib.pools

cfg := {"domain": "autoclusters.io", "controllers": []}

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
