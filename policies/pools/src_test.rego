package autoclusters.pools_test

import data.autoclusters.pools

pool(spec) := {"apiVersion": "remediation.autoclusters.io/v1alpha1", "kind": "GpuNodePool", "metadata": {"name": "h100"}, "spec": spec}

test_valid_pool if {
	count(pools.violations) == 0 with input as pool({"consentMode": "off", "maxConcurrentRepairs": 3})
}

test_invalid_pool if {
	{v.rule | some v in pools.violations} == {"pool-consent-mode", "pool-max-concurrent-repairs"} with input as pool({"consentMode": "on", "maxConcurrentRepairs": 0})
}

test_non_object_input if {
	count(pools.violations) == 0 with input as ["not", "a", "pool"]
}
