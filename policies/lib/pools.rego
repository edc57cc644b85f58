# METADATA
# title: GpuNodePool rules
# description: |
#   Checks on GpuNodePool objects that a CRD schema alone reports poorly in a GitOps
#   pipeline: every setting of the pool's field table (kind, range, the rules between
#   settings), the per-class actions, the repair codes, the pre-drain hook and the provider.
package autoclusters.lib.pools

import data.autoclusters.lib.api.api
import data.autoclusters.lib.pool_fields.pool_fields
import data.autoclusters.lib.providers.providers

# The enums come from policies/lib/api.rego, generated from autoclusters/api.py, and the
# settings from policies/lib/pool_fields.rego, generated from autoclusters/pool_fields.py, so
# this policy, the CRD and the parser agree (tests/unit/rego/test_policy_data_pool_fields_parity.py).
fault_classes := {c | some c in api.fault_classes}

fault_class_actions := {a | some a in api.class_actions}

is_pool(obj, cfg) if {
	obj.kind == api.pool_kind
	startswith(obj.apiVersion, sprintf("%s.%s/", [api.group_prefix, cfg.domain]))
}

# A pool whose shape is valid is then judged against the operator's allow-lists (a malformed
# command or URL is reported once, by its own rule).
pool_violations(obj, cfg) := shape if {
	is_pool(obj, cfg)
	shape := shape_violations(obj)
	count(shape) > 0
} else := allow_list_violations(obj, cfg) if {
	is_pool(obj, cfg)
} else := set()

shape_violations(obj) := ((((((((setting_violations(obj) | fault_class_violations(obj)) | repair_code_violations(obj)) | group_violations(obj)) | not_above_violations(obj)) | excludes_violations(obj)) | provider_violations(obj)) | hook_violations(obj)) | node_selector_violations(obj)) | node_name_violations(obj)

# --- the settings of the field table, checked generically -----------------------------------
# A missing setting takes the CRD default, so only present values are checked (a null is
# present: the parser refuses it).
setting_violations(obj) := {v |
	spec := object.get(obj, "spec", {})
	some path, setting in pool_fields.settings
	value := object.get(spec, setting.at, _missing)
	value != _missing
	some msg in _setting_problems(setting, value)
	v := {"rule": setting.rule, "msg": sprintf("spec.%s %s", [path, msg])}
}

_missing := {"autoclusters.lib.pools": "missing"}

_setting_problems(s, value) := _integer_problems(s, value) if {
	s.kind == "integer"
} else := _boolean_problems(value) if {
	s.kind == "boolean"
} else := _enum_problems(s, value) if {
	s.kind == "enum"
} else := _names_problems(s, value)

_integer_problems(s, n) := set() if {
	_in_range(n, s)
} else := {sprintf("%v must be an integer %s", [n, _range_words(s)])}

_boolean_problems(b) := set() if {
	is_boolean(b)
} else := {sprintf("%v must be true or false", [b])}

_enum_problems(s, value) := set() if {
	value in s.values
} else := {sprintf("%v is not one of %s", [value, s.words])}

_names_problems(s, names) := {sprintf("%v must be a list of names", [names])} if {
	not is_array(names)
} else := {msg |
	some name in names
	not _name(s, name)
	msg := sprintf("entry %v must be %s", [name, s.pattern_words])
} | {msg |
	count({n | some n in names}) != count(names)
	msg := "lists a name twice"
}

_name(s, name) if {
	is_string(name)
	regex.match(s.pattern, name)
}

# An integer in the setting's range.
_in_range(n, s) if {
	is_number(n)
	n == round(n)
	n >= s.minimum
	n <= object.get(s, "maximum", n)
}

_range_words(s) := sprintf("from %d to %d", [s.minimum, s.maximum]) if {
	s.maximum
} else := sprintf("of at least %d", [s.minimum])

# An object of the spec that holds settings must be an object of known keys.
group_violations(obj) := {v |
	spec := object.get(obj, "spec", {})
	some path, group in pool_fields.groups
	value := object.get(spec, group.at, null)
	value != null
	some msg in _group_problems(group, value)
	v := {"rule": group.rule, "msg": sprintf("spec.%s %s", [path, msg])}
}

_group_problems(group, value) := {sprintf("%v must be an object", [value])} if {
	not is_object(value)
} else := {msg |
	some key, _ in value
	not key in {k | some k in group.keys}
	msg := sprintf("has unknown key %v (allowed: %s)", [key, concat(", ", group.keys)])
}

# lesser <= greater (circuitBreaker: a close threshold above the open one would make the
# breaker flap); a missing one takes its default, as in the CRD.
not_above_violations(obj) := {v |
	spec := object.get(obj, "spec", {})
	some r in pool_fields.not_above
	lo := pool_fields.settings[r.lesser]
	hi := pool_fields.settings[r.greater]
	lesser := object.get(spec, lo.at, lo.default)
	greater := object.get(spec, hi.at, hi.default)
	_in_range(lesser, lo)
	_in_range(greater, hi)
	lesser > greater
	v := {"rule": r.rule, "msg": sprintf("spec.%s %v must not exceed %s %v", [r.lesser, lesser, hi.at[count(hi.at) - 1], greater])}
}

# Two booleans that may not both be true (a missing one takes its default, as in the CRD).
excludes_violations(obj) := {v |
	spec := object.get(obj, "spec", {})
	some r in pool_fields.excludes
	every path in r.settings {
		object.get(spec, pool_fields.settings[path].at, pool_fields.settings[path].default) == true
	}
	v := {"rule": r.rule, "msg": sprintf("spec: %s", [r.message])}
}

# --- the structured parts of the spec ---------------------------------------------------------
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

# the action table (autoclusters/providers/actions.py), through policies/lib/providers.rego
repair_actions := {a | some a in providers.actions}

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
	"msg": sprintf("spec.repairCodes.%s is %v, expected one of %s", [key, action, concat(", ", providers.actions)]),
} if {
	not action in repair_actions
}

# The pre-drain hook is a URL or a command (a non-empty list of non-empty strings), not both.
hook_violations(obj) := {v |
	hook := obj.spec.preDrain.hook
	is_object(hook)
	some msg in _hook_problems(hook)
	v := {"rule": "pool-pre-drain", "msg": msg}
}

_hook_problems(hook) := {"spec.preDrain.hook needs exactly one of url or command"} if {
	count({k | some k in ["url", "command"]; object.get(hook, k, null) != null}) != 1
} else := {sprintf("spec.preDrain.hook.url %v must be an http:// or https:// URL", [hook.url])} if {
	hook.url != null
	not _hook_url(hook.url)
} else := {sprintf("spec.preDrain.hook.command %v must be a list of non-empty strings", [hook.command])} if {
	hook.command != null
	not _hook_command(hook.command)
}

_hook_url(url) if {
	is_string(url)
	regex.match(pool_fields.hook_url_pattern, url)
}

_hook_command(command) if {
	is_array(command)
	count(command) > 0
	every arg in command {
		is_string(arg)
		arg != ""
	}
}

# spec.nodeSelector: a label selector that selects something (an empty one would select every
# node), of label keys and values, each expression's values as its operator needs.
node_selector_violations(obj) := {v |
	sel := obj.spec.nodeSelector
	some msg in _selector_problems(sel)
	v := {"rule": "pool-node-selector", "msg": sprintf("spec.nodeSelector%s", [msg])}
}

_selector_problems(sel) := {sprintf(" %v must be an object", [sel])} if {
	not is_object(sel)
} else := (({msg |
	some key, _ in sel
	not key in {"matchLabels", "matchExpressions"}
	msg := sprintf(" has unknown key %v", [key])
} | _match_labels_problems(object.get(sel, "matchLabels", {}))) | _match_expressions_problems(object.get(sel, "matchExpressions", []))) | {msg |
	count(object.get(sel, "matchLabels", {})) == 0
	count(object.get(sel, "matchExpressions", [])) == 0
	msg := " is empty, which would select every node (leave it out to use the pool label)"
}

_match_labels_problems(labels) := {sprintf(".matchLabels %v must be an object", [labels])} if {
	not is_object(labels)
} else := {sprintf(".matchLabels has %d labels, at most %d are allowed", [count(labels), pool_fields.selector.max_labels])} if {
	count(labels) > pool_fields.selector.max_labels
} else := {msg |
	some key, value in labels
	some msg in _label_problems(key, value)
}

_label_problems(key, value) := {sprintf(".matchLabels key %v is not a label key", [key])} if {
	not regex.match(pool_fields.selector.key_pattern, key)
} else := {sprintf(".matchLabels value %v for %s is not a label value", [value, key])} if {
	not _label_value(value)
} else := set()

_label_value(value) if {
	is_string(value)
	regex.match(pool_fields.selector.value_pattern, value)
}

_match_expressions_problems(exprs) := {sprintf(".matchExpressions %v must be a list", [exprs])} if {
	not is_array(exprs)
} else := {msg |
	some i, e in exprs
	some problem in _expression_problems(e)
	msg := sprintf(".matchExpressions[%d]%s", [i, problem])
}

_expression_problems(e) := {sprintf(" %v must be an object", [e])} if {
	not is_object(e)
} else := ((({msg |
	some key, _ in e
	not key in {"key", "operator", "values"}
	msg := sprintf(" has unknown key %v", [key])
} | {msg |
	not _label_key(object.get(e, "key", null))
	msg := sprintf(".key %v is not a label key", [object.get(e, "key", null)])
}) | {msg |
	not object.get(e, "operator", null) in {o | some o in pool_fields.selector.operators}
	msg := sprintf(".operator must be one of %s", [concat(", ", pool_fields.selector.operators)])
}) | {msg |
	not _expression_values(object.get(e, "values", []))
	msg := ".values must be a list of label values"
}) | {msg |
	needs := object.get(e, "operator", null) in {o | some o in pool_fields.selector.with_values}
	given := count(object.get(e, "values", [])) > 0
	needs != given
	msg := sprintf(": operator %v %s", [e.operator, {true: "needs values", false: "takes no values"}[needs]])
}

_label_key(key) if {
	is_string(key)
	regex.match(pool_fields.selector.key_pattern, key)
}

_expression_values(values) if {
	is_array(values)
	every v in values {
		_label_value(v)
	}
}

# spec.slurm.nodeName: a label or an annotation key, not both.
node_name_violations(obj) := {v |
	mapping := obj.spec.slurm.nodeName
	some msg in _node_name_problems(mapping)
	v := {"rule": "pool-slurm", "msg": sprintf("spec.slurm.nodeName%s", [msg])}
}

_node_name_problems(mapping) := {sprintf(" %v must be an object", [mapping])} if {
	not is_object(mapping)
} else := {" takes one of fromLabel or fromAnnotation"} if {
	count({k | some k in ["fromLabel", "fromAnnotation"]; k in object.keys(mapping)}) > 1
} else := {msg |
	some key, value in mapping
	not key in {"fromLabel", "fromAnnotation"}
	msg := sprintf(" has unknown key %v", [key])
} | {msg |
	some key in ["fromLabel", "fromAnnotation"]
	value := mapping[key]
	not _label_key(value)
	msg := sprintf(".%s %v is not a label/annotation key", [key, value])
}

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

_setting_ok(def, value) if {
	def.kind == "boolean"
	is_boolean(value)
}

# --- the operator's allow-lists ---------------------------------------------------------------
# A command, image or URL a pool names must equal an entry of the operator's list of its kind
# (data.autoclusters.config.allowLists: the stack setting autoclusters:allowLists, the same
# document as the controller's --allow-lists). The fields come from pool_fields.allow_listed
# (the pool's own) and each provider setting's allow_list (deploy/providers.py).
allow_list_violations(obj, cfg) := {v |
	some f in _allow_listed(obj)
	not _listed(f.value, object.get(object.get(cfg, "allowLists", {}), f.list, {}))
	v := {"rule": "pool-allow-list", "msg": sprintf(
		"%s %v is not an entry of the allow-list allowLists.%s (the stack setting autoclusters:allowLists, the controller's --allow-lists)",
		[f.where, f.value, f.list],
	)}
}

_listed(value, entries) if {
	some entry in entries
	entry == value
}

_allow_listed(obj) := _own_allow_listed(object.get(obj, "spec", {})) | _provider_allow_listed(object.get(object.get(obj, "spec", {}), "provider", {}))

_own_allow_listed(spec) := {f |
	is_object(spec)
	some path, d in pool_fields.allow_listed
	value := object.get(spec, d.at, null)
	value != null
	f := {"where": sprintf("spec.%s", [path]), "list": d.list, "value": value}
}

_provider_allow_listed(p) := {f |
	is_object(p)
	some pair in ({["spec.provider", p]} | {[sprintf("spec.provider.%s", [a]), p[a]] | some a in providers.actions; is_object(p[a])})
	t := pair[1].type
	settings := object.get(pair[1], t, {})
	is_object(settings)
	some name, d in providers.types[t].settings
	d.allow_list != ""
	value := object.get(settings, name, null)
	value != null
	f := {"where": sprintf("%s.%s.%s", [pair[0], t, name]), "list": d.allow_list, "value": value}
}
