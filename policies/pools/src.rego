# METADATA
# title: GpuNodePool objects
# description: |
#   Adapter for one GpuNodePool object (a pool read from git or from the cluster):
#   consent mode, per-class actions and repair concurrency. Anything that is not a
#   GpuNodePool of this domain has no violations.
package autoclusters.pools

import data.autoclusters.lib.config
import data.autoclusters.lib.pools

violations contains v if {
	is_object(input)
	some v in pools.pool_violations(input, config.config)
}
