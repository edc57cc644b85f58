# METADATA
# title: autoclusters policy configuration
# description: |
#   The names the rules depend on. Defaults match autoclusters.names.Names(); a data
#   document at data.autoclusters.config overrides any key, so the same policies
#   serve another domain (crusoe.ai) or another controller identity without edits.
package autoclusters.lib.config

# nodeGroups and nodeAgents: a node's own identities (every kubelet's group; the detector's
# service account), which may not touch either maintenance label.
defaults := {
	"domain": "autoclusters.io",
	"controllers": ["system:serviceaccount:autoclusters-system:autoclusters-controller"],
	"nodeGroups": ["system:nodes"],
	"nodeAgents": ["system:serviceaccount:autoclusters-system:autoclusters-detector"],
	"allowLists": {"commands": {}, "images": {}, "urls": {}},
}

default overrides := {}

overrides := data.autoclusters.config

config := object.union(defaults, overrides)
