# METADATA
# title: GpuNodePool rules
# description: |
#   Checks on GpuNodePool objects that a CRD schema alone reports poorly in a GitOps
#   pipeline: the consent mode, the per-class actions and the repair concurrency.
package autoclusters.lib.pools

consent_modes := {"auto", "propose", "off"}

fault_classes := {"gpu", "nvswitch", "dcgm", "interconnect"}

fault_class_actions := {"default", "reset", "replace", "off"}

is_pool(obj, cfg) if {
	obj.kind == "GpuNodePool"
	startswith(obj.apiVersion, sprintf("remediation.%s/", [cfg.domain]))
}

pool_violations(obj, cfg) := ((consent_violations(obj) | fault_class_violations(obj)) | concurrency_violations(obj)) | breaker_violations(obj) if {
	is_pool(obj, cfg)
} else := set()

consent_violations(obj) := {v |
	some mode in _consent_mode(obj)
	not mode in consent_modes
	v := {
		"rule": "pool-consent-mode",
		"msg": sprintf("spec.consentMode %v is not one of auto, propose, off", [mode]),
	}
}

fault_class_violations(obj) := {v |
	some class, action in object.get(obj, ["spec", "faultClasses"], {})
	v := _fault_class_violation(class, action)
}

_fault_class_violation(class, action) := {
	"rule": "pool-fault-class-action",
	"msg": sprintf("spec.faultClasses has unknown class %v (expected gpu, nvswitch, dcgm, interconnect)", [class]),
} if {
	not class in fault_classes
} else := {
	"rule": "pool-fault-class-action",
	"msg": sprintf("spec.faultClasses.%s is %v, expected default, reset, replace or off", [class, action]),
} if {
	not action in fault_class_actions
}

concurrency_violations(obj) := {v |
	some n in _max_concurrent(obj)
	not _positive_int(n)
	v := {
		"rule": "pool-max-concurrent-repairs",
		"msg": sprintf("spec.maxConcurrentRepairs %v must be an integer of at least 1", [n]),
	}
}

# The breaker opens above one share of faulty nodes and closes below another; a close
# threshold above the open one would make it flap (the CRD rejects it too, but only at apply time).
breaker_violations(obj) := {v |
	b := object.get(obj, ["spec", "circuitBreaker"], {})
	open := object.get(b, "openAbovePercent", 30)
	close := object.get(b, "closeBelowPercent", 20)
	some msg in _breaker_problems(open, close)
	v := {"rule": "pool-circuit-breaker", "msg": msg}
}

_breaker_problems(open, close) := {msg |
	some [name, value] in [["openAbovePercent", open], ["closeBelowPercent", close]]
	not _percent(value)
	msg := sprintf("spec.circuitBreaker.%s %v must be an integer from 1 to 100", [name, value])
} | {msg |
	_percent(open)
	_percent(close)
	close > open
	msg := sprintf("spec.circuitBreaker.closeBelowPercent %v must not exceed openAbovePercent %v", [close, open])
}

_percent(n) if {
	_positive_int(n)
	n <= 100
}

# A missing field takes the CRD default, so only present values are checked.
_consent_mode(obj) := {m | m := obj.spec.consentMode}

_max_concurrent(obj) := {n | n := obj.spec.maxConcurrentRepairs}

_positive_int(n) if {
	is_number(n)
	n == round(n)
	n >= 1
}
