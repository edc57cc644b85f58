# METADATA
# title: GpuNodePool rules
# description: |
#   Checks on GpuNodePool objects that a CRD schema alone reports poorly in a GitOps
#   pipeline: the consent mode, the per-class actions, the repair concurrency and the
#   warning before the drain.
package autoclusters.lib.pools

import data.autoclusters.lib.api.api
import data.autoclusters.lib.providers.providers

# The enums and defaults come from policies/lib/api.rego, generated from autoclusters/api.py,
# so this policy, the CRD and the parser agree (tests/unit/policy/test_api_parity.py).
consent_modes := {m | some m in api.consent_modes}

fault_classes := {c | some c in api.fault_classes}

fault_class_actions := {a | some a in api.class_actions}

is_pool(obj, cfg) if {
	obj.kind == api.pool_kind
	startswith(obj.apiVersion, sprintf("%s.%s/", [api.group_prefix, cfg.domain]))
}

pool_violations(obj, cfg) := (((((consent_violations(obj) | fault_class_violations(obj)) | repair_code_violations(obj)) | concurrency_violations(obj)) | breaker_violations(obj)) | provider_violations(obj)) | pre_drain_violations(obj) if {
	is_pool(obj, cfg)
} else := set()

consent_violations(obj) := {v |
	some mode in _consent_mode(obj)
	not mode in consent_modes
	v := {
		"rule": "pool-consent-mode",
		"msg": sprintf("spec.consentMode %v is not one of %s", [mode, concat(", ", api.consent_modes)]),
	}
}

fault_class_violations(obj) := {v |
	some class, action in object.get(obj, ["spec", "faultClasses"], {})
	v := _fault_class_violation(class, action)
}

_fault_class_violation(class, action) := {
	"rule": "pool-fault-class-action",
	"msg": sprintf("spec.faultClasses has unknown class %v (expected %s)", [class, concat(", ", api.fault_classes)]),
} if {
	not class in fault_classes
} else := {
	"rule": "pool-fault-class-action",
	"msg": sprintf("spec.faultClasses.%s is %v, expected one of %s", [class, action, concat(", ", api.class_actions)]),
} if {
	not action in fault_class_actions
}

repair_actions := {a | some a in api.repair_actions}

repair_code_violations(obj) := {v |
	some key, action in object.get(obj, ["spec", "repairCodes"], {})
	v := _repair_code_violation(key, action)
}

_repair_code_violation(key, action) := {
	"rule": "pool-repair-codes",
	"msg": sprintf("spec.repairCodes key %v must be <class>:<code> (e.g. gpu:13), class one of %s", [key, concat(", ", api.fault_classes)]),
} if {
	not regex.match(api.repair_code_pattern, key)
} else := {
	"rule": "pool-repair-codes",
	"msg": sprintf("spec.repairCodes.%s is %v, expected one of %s", [key, action, concat(", ", api.repair_actions)]),
} if {
	not action in repair_actions
}

concurrency_violations(obj) := {v |
	some n in _max_concurrent(obj)
	not _in_range(n, "maxConcurrentRepairs")
	v := {
		"rule": "pool-max-concurrent-repairs",
		"msg": sprintf("spec.maxConcurrentRepairs %v must be an integer %s", [n, _range_words("maxConcurrentRepairs")]),
	}
}

# The breaker opens above one share of faulty nodes and closes below another; a close
# threshold above the open one would make it flap (the CRD rejects it too, but only at apply time).
breaker_violations(obj) := {v |
	b := object.get(obj, ["spec", "circuitBreaker"], {})
	open := object.get(b, "openAbovePercent", api.limits["circuitBreaker.openAbovePercent"].default)
	close := object.get(b, "closeBelowPercent", api.limits["circuitBreaker.closeBelowPercent"].default)
	some msg in _breaker_problems(open, close)
	v := {"rule": "pool-circuit-breaker", "msg": msg}
}

_breaker_problems(open, close) := {msg |
	some [name, value] in [["openAbovePercent", open], ["closeBelowPercent", close]]
	not _in_range(value, concat(".", ["circuitBreaker", name]))
	msg := sprintf("spec.circuitBreaker.%s %v must be an integer %s", [name, value, _range_words(concat(".", ["circuitBreaker", name]))])
} | {msg |
	_in_range(open, "circuitBreaker.openAbovePercent")
	_in_range(close, "circuitBreaker.closeBelowPercent")
	close > open
	msg := sprintf("spec.circuitBreaker.closeBelowPercent %v must not exceed openAbovePercent %v", [close, open])
}

# The warning before the drain: a wait in whole seconds, acknowledgers named as the node
# annotation they write (<domain>/drain-ack-<name>) needs, and a hook that is a URL or a
# command, not both.
pre_drain_violations(obj) := {v |
	pd := object.get(obj, ["spec", "preDrain"], {})
	some msg in _pre_drain_problems(pd)
	v := {"rule": "pool-pre-drain", "msg": msg}
}

_pre_drain_problems(pd) := (_wait_problems(pd) | _acknowledger_problems(pd)) | _hook_problems(pd)

_wait_problems(pd) := {msg |
	some w in {w | w := pd.waitSeconds}
	not _in_range(w, "preDrain.waitSeconds")
	msg := sprintf("spec.preDrain.waitSeconds %v must be an integer %s", [w, _range_words("preDrain.waitSeconds")])
}

_acknowledger_problems(pd) := {msg |
	acks := pd.acknowledgers
	not is_array(acks)
	msg := sprintf("spec.preDrain.acknowledgers %v must be a list of names", [acks])
} | {msg |
	is_array(pd.acknowledgers)
	some a in pd.acknowledgers
	not _acknowledger(a)
	msg := sprintf("spec.preDrain.acknowledgers entry %v must be a lower-case DNS label of at most 40 characters", [a])
}

_hook_problems(pd) := {msg |
	hook := pd.hook
	is_object(hook)
	_hook_kinds(hook) != 1
	msg := "spec.preDrain.hook needs exactly one of url or command"
} | {msg |
	some t in {t | t := pd.hook.timeoutSeconds}
	not _in_range(t, "preDrain.hook.timeoutSeconds")
	msg := sprintf(
		"spec.preDrain.hook.timeoutSeconds %v must be an integer %s",
		[t, _range_words("preDrain.hook.timeoutSeconds")],
	)
}

_hook_kinds(hook) := count({k | some k in ["url", "command"]; object.get(hook, k, null) != null})

_acknowledger(a) if {
	is_string(a)
	regex.match(`^[a-z0-9]([-a-z0-9]{0,38}[a-z0-9])?$`, a)
}

# An integer in the range autoclusters/api.py gives the setting at path (policies/lib/api.rego).
_in_range(n, path) if {
	is_number(n)
	n == round(n)
	n >= api.limits[path].minimum
	n <= object.get(api.limits[path], "maximum", n)
}

_range_words(path) := sprintf("from %d to %d", [lim.minimum, lim.maximum]) if {
	lim := api.limits[path]
	lim.maximum
} else := sprintf("of at least %d", [api.limits[path].minimum])

# A missing field takes the CRD default, so only present values are checked.
_consent_mode(obj) := {m | m := obj.spec.consentMode}

_max_concurrent(obj) := {n | n := obj.spec.maxConcurrentRepairs}

# spec.provider: the provider types and their settings come from policies/lib/providers.rego,
# generated from the Python definition, so this policy, the CRD and the parser agree.
provider_violations(obj) := {v |
	p := obj.spec.provider
	some msg in _provider_problems(p)
	v := {"rule": "pool-provider", "msg": msg}
}

_type_names := {t | some t, _ in providers.types}

_provider_problems(p) := {"spec.provider must be an object"} if {
	not is_object(p)
} else := ({msg |
	some key, _ in p
	not key in (({"type"} | _type_names) | {a | some a in providers.actions})
	msg := sprintf("spec.provider has unknown key %v", [key])
} | _spec_problems(object.remove(p, providers.actions), "spec.provider", "")) | {msg |
	some action in providers.actions
	sub := p[action]
	some msg in _action_problems(sub, action)
}

_action_problems(sub, action) := {sprintf("spec.provider.%s must be an object with a type", [action])} if {
	not is_object(sub)
} else := {sprintf("spec.provider.%s.type is required", [action])} if {
	not sub.type
} else := _spec_problems(sub, sprintf("spec.provider.%s", [action]), action)

# A spec with no type and no settings (only per-action entries) has nothing to check here.
_spec_problems(s, where, action) := set() if {
	action == ""
	count(s) == 0
} else := {sprintf("%s.type is required", [where])} if {
	not s.type
} else := {sprintf("%s.type %v is not one of %v", [where, s.type, concat(", ", sort(_type_names))])} if {
	not s.type in _type_names
} else := ({msg |
	some key, _ in s
	key in _type_names
	key != s.type
	msg := sprintf("%s.%s does not apply to type %s", [where, key, s.type])
} | {msg |
	action != ""
	not action in {a | some a in providers.types[s.type].actions}
	msg := sprintf("%s.type %s cannot %s a node", [where, s.type, action])
}) | _settings_problems(object.get(s, s.type, {}), providers.types[s.type].settings, sprintf("%s.%s", [where, s.type]))

_settings_problems(given, defs, where) := {sprintf("%s must be an object", [where])} if {
	not is_object(given)
} else := ({msg |
	some key, _ in given
	not defs[key]
	msg := sprintf("%s has unknown key %v", [where, key])
} | {msg |
	some key, def in defs
	def.required
	not key in object.keys(given)
	msg := sprintf("%s.%s is required", [where, key])
}) | {msg |
	some key, value in given
	def := defs[key]
	not _setting_ok(def, value)
	msg := sprintf("%s.%s %v is not a valid %s", [where, key, value, def.kind])
}

_setting_ok(def, value) if {
	def.kind == "integer"
	is_number(value)
	value == round(value)
	value >= object.get(def, "minimum", value)
}

_setting_ok(def, value) if {
	def.kind == "string"
	is_string(value)
	value != ""
}

_setting_ok(def, value) if {
	def.kind == "strings"
	is_array(value)
	count(value) > 0
	every item in value {
		is_string(item)
		item != ""
	}
}

_setting_ok(def, value) if {
	def.kind == "enum"
	value in def.values
}
