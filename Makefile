# The two commands a newcomer runs (see README.md):
#   make demo   - set up everything, start the local cluster, show a GPU node repaired
#   make test   - set up everything, run the unit and integration suites
SHELL := /bin/bash
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: setup tools tools-core venv image lint test test-unit test-integration demo manifests clean-cluster slurm training \
	demo-training journal-remote real-nodes

venv: $(STAMP)
$(STAMP): requirements.txt pyproject.toml
	@test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -r requirements.txt
	$(BIN)/pip install -q --no-deps -e .
	@touch $@

# Debian's Slurm (slurmctld, slurmd, client commands) and munge for `dev up --slurm` and the
# training scenario; apt-get, so root or sudo (tools/install-slurm.sh; times in docs/workloads.md).
slurm:
	tools/install-slurm.sh

# Debian's systemd-journal-remote: the journald kernel log source's tests write real journal
# files with it; apt-get, so root or sudo (tools/install-journal-remote.sh; time in docs/detector.md).
journal-remote:
	tools/install-journal-remote.sh

# What the local cluster's real nodes (`dev up --real-nodes N`) run on: Debian's containerd, runc,
# CNI plugins and iptables, and the pod sandbox image built here (tools/install-real-nodes.sh;
# root or sudo; docs/real-nodes.md). Their kubelet and kube-proxy come with `make tools`.
real-nodes:
	tools/install-real-nodes.sh

# PyTorch for the reference training job (examples/training/), into the project's venv.
TRAINING_STAMP := $(VENV)/.training
training: $(TRAINING_STAMP)
$(TRAINING_STAMP): $(STAMP)
	@start=$$(date +%s); $(BIN)/pip install -q -e '.[training]' && \
	  echo "training extra installed in $$(( $$(date +%s) - start ))s"
	@touch $@

tools-core:
	tools/build-tools.sh core

tools:
	tools/build-tools.sh all

setup: venv tools

# The runtime image as an OCI archive in build/image/, without a container engine or registry
# (tools/build-image.sh; needs root and installs debootstrap, umoci, runc from Debian when missing).
# Skipped when nothing that goes into the image changed.
image: venv
	tools/build-image.sh

lint: venv
	$(BIN)/ruff check .
	$(BIN)/mypy

test-unit: venv
	$(BIN)/pytest tests/unit -q

test-integration: setup image
	$(BIN)/pytest tests/integration -q

# The README's test command.
# Everything the suites need is installed first (each step is skipped when done), so on a
# fresh machine this one command runs every test: none skips for a missing tool or extra.
# The suites run on their own local cluster: a cluster named by the developer's shell
# (AUTOCLUSTERS_TEST_KUBECONFIG and its companions, for `pytest tests/integration` against
# another cluster) would turn the local-only tests into skips, so they are cleared here, and said.
TEST_CLUSTER_VARS := AUTOCLUSTERS_TEST_KUBECONFIG AUTOCLUSTERS_TEST_OPA_URL AUTOCLUSTERS_TEST_LOCAL
test: setup image slurm training journal-remote real-nodes
	$(BIN)/ruff check .
	$(BIN)/mypy
	@for v in $(TEST_CLUSTER_VARS); do [ -z "$${!v:-}" ] || \
	  echo "make test: ignoring $$v=$${!v} (make test runs every suite on its own local cluster;" \
	       "run pytest tests/integration directly to test another cluster)"; done
	env $(addprefix -u ,$(TEST_CLUSTER_VARS)) AUTOCLUSTERS_REQUIRE_TOOLS=1 AUTOCLUSTERS_REQUIRE_TRAINING=1 \
	  $(BIN)/pytest tests -q -p no:cacheprovider --durations=25

# A brand (make manifests|demo DOMAIN=crusoe.ai PREFIX=Crusoe [EVENT_SOURCE=nodepool-service]):
# the label domain, condition prefix and event source. manifests/ keeps the default names;
# `make manifests` with a brand also renders a set into build/manifests/<domain>-<prefix>/.
BRAND_FLAGS = $(if $(DOMAIN),--domain $(DOMAIN)) $(if $(PREFIX),--condition-prefix $(PREFIX)) \
	$(if $(EVENT_SOURCE),--event-source $(EVENT_SOURCE))

manifests: venv
	$(BIN)/python -m autoclusters.api > policies/lib/api.rego
	$(BIN)/python -m autoclusters.pool_fields > policies/lib/pool_fields.rego
	$(BIN)/python -m autoclusters.pool_fields --docs docs/contract.md
	$(BIN)/python -m autoclusters.deploy.pod_settings docs/deploy.md
	$(BIN)/python -m autoclusters.deploy.controller_flags docs/deploy.md
	$(BIN)/python -m autoclusters.deploy.providers > policies/lib/providers.rego
	$(BIN)/python -m autoclusters.faults.table > docs/xid-catalog.md
	$(BIN)/python -m autoclusters.faults.table --conditions docs/detector.md
	$(BIN)/python -m components.kustomize_components docs/deploy.md
	$(BIN)/python -m components.settings_surfaces docs/deploy.md
	$(BIN)/python -m components.render
	$(if $(strip $(BRAND_FLAGS)),$(BIN)/python -m components.render $(BRAND_FLAGS))

# make demo KARPENTER=1: also a replacement through Karpenter (tools/build-tools.sh karpenter).
demo: setup
	$(BIN)/python -m autoclusters.demo $(BRAND_FLAGS) $(if $(KARPENTER),--karpenter)

# The training story end to end (docs/workloads.md): its own local cluster, real Slurm, real
# PyTorch, Xid 79 on one of two nodes; prints the timeline. It is the integration scenario.
demo-training: setup slurm training
	AUTOCLUSTERS_REQUIRE_TRAINING=1 $(BIN)/pytest tests/integration/test_training_end_to_end.py -q -s \
	  -p no:cacheprovider
