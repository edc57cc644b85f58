package autoclusters.lib.config_test

import data.autoclusters.lib.config

test_defaults_match_names if {
	config.config.domain == "autoclusters.io"
	config.config.controllers == ["system:serviceaccount:autoclusters-system:autoclusters-controller"]
	config.config.nodeGroups == ["system:nodes"]
	config.config.nodeAgents == ["system:serviceaccount:autoclusters-system:autoclusters-detector"]
}

test_data_overrides_keys if {
	c := config.config with data.autoclusters.config as {"domain": "crusoe.ai"}
	c.domain == "crusoe.ai"
	c.controllers == ["system:serviceaccount:autoclusters-system:autoclusters-controller"]
}
