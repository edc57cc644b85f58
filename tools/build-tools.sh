#!/usr/bin/env bash
# Builds the upstream binaries autoclusters needs (kube control plane, etcd, kwok,
# OPA, Pulumi CLI + Python language host + Kubernetes provider, Karpenter's kwok
# provider, Cluster API's CRDs, Prometheus's promtool and the Prometheus Operator's CRDs, Helm)
# from Go modules.
# Go is a build tool only: nothing built here is part of the product.
#
# Usage: tools/build-tools.sh [core|kube-node|pulumi|pulumi-python|karpenter|cluster-api|monitoring|helm|all]   (default: all)
# Output: $AUTOCLUSTERS_CACHE/bin/<tool>-<version>/ ; a finished tool is skipped.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=versions.env
source "$here/versions.env"
cache=${AUTOCLUSTERS_CACHE:-$HOME/.cache/autoclusters}
work="$cache/build"
mkdir -p "$cache/bin" "$work"
export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-mod=mod
which=${1:-all}

step=0; total=0
t0=$(date +%s)
exec 3>&1  # progress lines go to the terminal; each tool's Go output goes to its own log
log() { printf '[build-tools %4ss] %s\n' "$(( $(date +%s) - t0 ))" "$*" >&3; }

# run FUNC: runs one build step with its output in $work/FUNC.log, a heartbeat every
# minute, and the log's tail on failure.
run() {
  local fn=$1 logf="$work/$1.log" start
  step=$((step + 1)); start=$(date +%s)
  : >"$logf"
  ( "$fn" ) >>"$logf" 2>&1 &
  local pid=$! beat=$start
  while kill -0 "$pid" 2>/dev/null; do
    sleep 0.5
    if (( $(date +%s) - beat >= 60 )); then
      beat=$(date +%s); log "    ... still building ($(( beat - start ))s so far; log: $logf)"
    fi
  done
  if ! wait "$pid"; then
    log "    FAILED after $(( $(date +%s) - start ))s; last lines of $logf:"
    tail -n 30 "$logf" >&2
    exit 1
  fi
}

# need TOOL VERSION -> returns 0 if the tool still has to be built.
need() {
  local dir="$cache/bin/$1-$2"
  if [ -f "$dir/.complete" ]; then
    log "($step/$total) $1 $2: cached in $dir"
    return 1
  fi
  log "($step/$total) $1 $2: building (this can take several minutes) ..."
  rm -rf "$dir"; mkdir -p "$dir"
  return 0
}
finish() { touch "$cache/bin/$1-$2/.complete"; log "    $1 $2: done"; }

# module_dir MODULE@VERSION -> the module's source directory in the module cache (run inside
# a module dir; downloads it when missing).
module_dir() { go mod download -json "$1" | python3 -c 'import json,sys; print(json.load(sys.stdin)["Dir"])'; }
# module_src NAME MODULE@VERSION -> the same, from a fresh wrapper module of its own ($work/NAME).
module_src() { wrapper "$work/$1" "$1"; (cd "$work/$1" && module_dir "$2"); }

wrapper() { # wrapper DIR MODULE -> a fresh module dir that requires nothing yet
  rm -rf "$1"; mkdir -p "$1"
  (cd "$1" && go mod init "autoclusters.local/$2" >/dev/null 2>&1)
}

build_etcd() {
  need etcd "$ETCD_VERSION" || return 0
  local d="$work/etcd"; wrapper "$d" etcd
  (cd "$d" && go get "go.etcd.io/etcd/server/v3@$ETCD_VERSION" \
     && go build -trimpath -o "$cache/bin/etcd-$ETCD_VERSION/etcd" go.etcd.io/etcd/server/v3)
  finish etcd "$ETCD_VERSION"
}

# kube_module DIR -> a wrapper module in DIR that requires k8s.io/kubernetes at KUBE_VERSION,
# with its staging modules pinned, and the version stamps in $kube_ld.
kube_module() {
  local d=$1 v=$KUBE_VERSION minor
  minor=${v#v1.}; minor=${minor%%.*}
  local staging=v0.${v#v1.}
  wrapper "$d" "$(basename "$d")"
  # k8s.io/kubernetes requires its staging modules at v0.0.0 with local replaces;
  # pin each to the published v0.MINOR.PATCH instead.
  local modfile
  modfile=$(cd "$d" && go mod download -json "k8s.io/kubernetes@$v" | python3 -c 'import json,sys; print(json.load(sys.stdin)["GoMod"])')
  {
    echo "require k8s.io/kubernetes $v"
    grep -oE '^\s*k8s\.io/[a-z0-9-]+ v0\.0\.0' "$modfile" | awk -v s="$staging" '{print "replace " $1 " v0.0.0 => " $1 " " s}' | sort -u
  } >>"$d/go.mod"
  kube_ld="" ; local p
  for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    kube_ld+=" -X $p.gitVersion=$v -X $p.gitMajor=1 -X $p.gitMinor=$minor -X $p.gitTreeState=clean -X $p.buildDate=1970-01-01T00:00:00Z"
  done
  (cd "$d" && go mod download >/dev/null 2>&1 || true)
}

build_kube() {
  # kubectl joined the set later: a cached set without it is rebuilt.
  [ -x "$cache/bin/kube-$KUBE_VERSION/kubectl" ] || rm -f "$cache/bin/kube-$KUBE_VERSION/.complete"
  need kube "$KUBE_VERSION" || return 0
  local d="$work/kube" v=$KUBE_VERSION
  kube_module "$d"
  (cd "$d" && go build -trimpath -tags selinux,notest -ldflags "-s -w $kube_ld" -o "$cache/bin/kube-$v/" \
     k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager k8s.io/kubernetes/cmd/kube-scheduler \
     k8s.io/kubernetes/cmd/kubectl)
  finish kube "$v"
}

build_kube_node() {
  # The kubelet and kube-proxy of the local cluster's real nodes (`dev up --real-nodes`), from
  # the same pinned kube module as the control plane; their own set, so that adding it never
  # rebuilds the control plane's. -mod=mod (GOFLAGS) resolves their extra dependencies.
  need kube-node "$KUBE_VERSION" || return 0
  local d="$work/kube-node" v=$KUBE_VERSION
  kube_module "$d"
  (cd "$d" && go build -trimpath -tags selinux,notest -ldflags "-s -w $kube_ld" -o "$cache/bin/kube-node-$v/" \
     k8s.io/kubernetes/cmd/kubelet k8s.io/kubernetes/cmd/kube-proxy)
  finish kube-node "$v"
}

build_kwok() {
  need kwok "$KWOK_VERSION" || return 0
  GOBIN="$cache/bin/kwok-$KWOK_VERSION" go install -trimpath \
    "sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION" "sigs.k8s.io/kwok/cmd/kwokctl@$KWOK_VERSION"
  # kwok needs stage configs: keep upstream's fast pod stages beside the binary (the node
  # stages are autoclusters' own, in autoclusters/sim/kwok-stages.yaml).
  local src; src=$(go env GOMODCACHE)/sigs.k8s.io/kwok@$KWOK_VERSION/kustomize/stage/pod/fast
  mkdir -p "$cache/bin/kwok-$KWOK_VERSION/stages"
  cp "$src"/pod-ready.yaml "$src"/pod-complete.yaml "$src"/pod-delete.yaml "$cache/bin/kwok-$KWOK_VERSION/stages/"
  chmod -R u+w "$cache/bin/kwok-$KWOK_VERSION/stages"
  finish kwok "$KWOK_VERSION"
}

build_opa() {
  need opa "$OPA_VERSION" || return 0
  GOBIN="$cache/bin/opa-$OPA_VERSION" go install -trimpath -ldflags "-s -w" \
    "github.com/open-policy-agent/opa@$OPA_VERSION"
  finish opa "$OPA_VERSION"
}

build_pulumi() {
  # The CLI comes from github.com/pulumi/pulumi/pkg/v3. The module proxy does not serve every
  # pkg/v3 release (v3.261-v3.273 answer 403 "not available"), so PULUMI_CLI_VERSION names the
  # nearest served release; the Python SDK pin stays PULUMI_VERSION (the CLI accepts older SDKs).
  local v=${PULUMI_CLI_VERSION:-$PULUMI_VERSION}
  need pulumi "$v" || return 0
  local d="$work/pulumi" out="$cache/bin/pulumi-$v"
  wrapper "$d" pulumi
  (cd "$d"
   echo "require github.com/pulumi/pulumi/pkg/v3 $v" >>go.mod
   # pkg/v3 relies on replace directives; a wrapper must repeat the ones that name modules
   # (its `../sdk` replace becomes the published sdk/v3 of the same release via the require).
   local pm; pm=$(go mod download -json "github.com/pulumi/pulumi/pkg/v3@$v" | python3 -c 'import json,sys; print(json.load(sys.stdin)["GoMod"])')
   awk '/^replace \(/{r=1;next} r&&/^\)/{r=0} r&&NF&&$0!~/=> \.\.?\//{print "replace " $0} /^replace [^(]/&&$0!~/=> \.\.?\//{print}' "$pm" >>go.mod
   go mod download >/dev/null 2>&1 || true
   go build -trimpath -ldflags "-s -w -X github.com/pulumi/pulumi/sdk/v3/go/common/version.Version=$v" -o "$out/" \
     github.com/pulumi/pulumi/pkg/v3/cmd/pulumi
   # The Python language host is its own nested module, which the proxy refuses at every
   # version (403 "not available"); try it so it is built wherever it is served.
   local lh=github.com/pulumi/pulumi/sdk/python/cmd/pulumi-language-python/v3
   if go get "$lh@$v" >/dev/null 2>&1; then
     go build -trimpath -ldflags "-s -w -X github.com/pulumi/pulumi/sdk/v3/go/common/version.Version=$v" \
       -o "$out/pulumi-language-python" "$lh"
   else
     log "    pulumi-language-python $v: not served by the module proxy as its own module;"
     log "    the pulumi-python set builds it from sdk/v3 (PULUMI_LANGUAGE_PYTHON_VERSION)"
   fi
   # The exec shim and the dynamic-provider plugin shim (it runs `python -m pulumi.dynamic`)
   # live in the sdk/v3 module, beside the nested language-host module.
   local sdir; sdir=$(go mod download -json "github.com/pulumi/pulumi/sdk/v3@$v" | python3 -c 'import json,sys; print(json.load(sys.stdin)["Dir"])')
   cp "$sdir/python/cmd/pulumi-language-python-exec" "$sdir/python/dist/pulumi-resource-pulumi-python" "$out/"
   chmod -R u+w "$out"; chmod +x "$out/"*)
  finish pulumi "$v"
}

build_pulumi_python() {
  # The Python language host, which `pulumi up` in a Python project directory runs. Its own
  # module (sdk/python/cmd/pulumi-language-python/v3) is refused by the module proxy at every
  # version, but up to v3.67.1 the host is a package inside github.com/pulumi/pulumi/sdk/v3,
  # which is served: a wrapper module requiring that sdk/v3, repeating the replace of
  # golang.org/x/text its go.mod carries, builds it. The exec shim it starts comes from the
  # same module's python/cmd/. The CLI (PULUMI_CLI_VERSION) accepts this older host.
  local v=$PULUMI_LANGUAGE_PYTHON_VERSION
  need pulumi-language-python "$v" || return 0
  local d="$work/pulumi-language-python" out="$cache/bin/pulumi-language-python-$v"
  wrapper "$d" pulumi-language-python
  (cd "$d"
   echo "require github.com/pulumi/pulumi/sdk/v3 $v" >>go.mod
   echo "replace golang.org/x/text => golang.org/x/text v0.3.6" >>go.mod
   go mod download >/dev/null 2>&1 || true
   go build -trimpath -ldflags "-s -w -X github.com/pulumi/pulumi/sdk/v3/go/common/version.Version=$v" \
     -o "$out/pulumi-language-python" github.com/pulumi/pulumi/sdk/v3/python/cmd/pulumi-language-python
   local sdir; sdir=$(go mod download -json "github.com/pulumi/pulumi/sdk/v3@$v" | python3 -c 'import json,sys; print(json.load(sys.stdin)["Dir"])')
   cp "$sdir/python/cmd/pulumi-language-python-exec" "$out/"
   chmod -R u+w "$out"; chmod +x "$out/"*)
  finish pulumi-language-python "$v"
}

build_pulumi_kubernetes() {
  # provider/v4 has no tags of its own and the proxy serves one pseudo-version of it
  # (PULUMI_KUBERNETES_PROVIDER_VERSION); it replaces sdk/v4 with ../sdk, so build a writable
  # copy with the sdk/v4 release it requires beside it, after its generator made the embeds.
  local pv=${PULUMI_KUBERNETES_PROVIDER_VERSION:-$PULUMI_KUBERNETES_VERSION}
  local label=${PULUMI_KUBERNETES_PROVIDER_LABEL:-${PULUMI_KUBERNETES_VERSION#v}}
  need pulumi-kubernetes "$label" || return 0
  local d="$work/pulumi-kubernetes" out="$cache/bin/pulumi-kubernetes-$label"
  rm -rf "$d"; mkdir -p "$d"
  local tmp="$work/pk-resolve"; wrapper "$tmp" pk-resolve
  local pdir sdir sv
  pdir=$(cd "$tmp" && go mod download -json "github.com/pulumi/pulumi-kubernetes/provider/v4@$pv" | python3 -c 'import json,sys;print(json.load(sys.stdin)["Dir"])')
  sv=$(awk '$1=="github.com/pulumi/pulumi-kubernetes/sdk/v4" && $2 ~ /^v/ {print $2; exit}' "$pdir/go.mod")
  sdir=$(cd "$tmp" && go mod download -json "github.com/pulumi/pulumi-kubernetes/sdk/v4@$sv" | python3 -c 'import json,sys;print(json.load(sys.stdin)["Dir"])')
  cp -r "$pdir" "$d/provider"; cp -r "$sdir" "$d/sdk"; chmod -R u+w "$d"
  (cd "$d/provider"
   go mod download >/dev/null 2>&1 || true
   # generate.go stamps the schema with $VERSION and fails without it.
   VERSION="$label" go generate ./cmd/pulumi-resource-kubernetes
   go build -trimpath -ldflags "-s -w -X github.com/pulumi/pulumi-kubernetes/provider/v4/pkg/version.Version=$label" \
     -o "$out/pulumi-resource-kubernetes" ./cmd/pulumi-resource-kubernetes)
  finish pulumi-kubernetes "$label"
}

build_karpenter() {
  # Karpenter's kwok cloud provider (package sigs.k8s.io/karpenter/kwok) plus the CRDs it
  # serves, copied from the same module so the binary and its schema always match.
  need karpenter "$KARPENTER_VERSION" || return 0
  local d="$work/karpenter" out="$cache/bin/karpenter-$KARPENTER_VERSION"
  wrapper "$d" karpenter
  (cd "$d"
   export GOTOOLCHAIN=$KARPENTER_GO_TOOLCHAIN
   go get "sigs.k8s.io/karpenter@$KARPENTER_VERSION"
   go build -trimpath -ldflags "-s -w" -o "$out/karpenter" sigs.k8s.io/karpenter/kwok
   local src; src=$(module_dir "sigs.k8s.io/karpenter@$KARPENTER_VERSION")
   mkdir -p "$out/crds"
   cp "$src"/kwok/charts/crds/*.yaml "$src"/kwok/apis/crds/*.yaml "$out/crds/"
   chmod -R u+w "$out")
  finish karpenter "$KARPENTER_VERSION"
}

build_cluster_api() {
  # No binary: Cluster API's CRDs (config/crd/bases in the module) for the local cluster.
  need cluster-api "$CLUSTER_API_VERSION" || return 0
  local out="$cache/bin/cluster-api-$CLUSTER_API_VERSION"
  local src; src=$(module_src cluster-api "sigs.k8s.io/cluster-api@$CLUSTER_API_VERSION")
  # v1.14 keeps the core CRDs under core/; older releases under config/ at the top.
  local bases=$src/core/config/crd/bases
  [ -d "$bases" ] || bases=$src/config/crd/bases
  mkdir -p "$out/crds"
  cp "$bases"/*.yaml "$out/crds/"
  chmod -R u+w "$out"
  finish cluster-api "$CLUSTER_API_VERSION"
}

build_promtool() {
  # Prometheus's promtool (4.5 min cold on 2 cores, downloads included: the module pulls every
  # service discovery's SDK): it checks and unit-tests the shipped alert rules.
  need promtool "$PROMETHEUS_VERSION" || return 0
  GOBIN="$cache/bin/promtool-$PROMETHEUS_VERSION" go install -trimpath \
    -ldflags "-s -w -X github.com/prometheus/common/version.Version=$PROMETHEUS_VERSION" \
    "github.com/prometheus/prometheus/cmd/promtool@$PROMETHEUS_VERSION"
  finish promtool "$PROMETHEUS_VERSION"
}

build_prometheus() {
  # The Prometheus server itself (no web UI assets: its API is what the tests use): an
  # integration test scrapes a real controller with it and waits for the shipped alerts to fire.
  # It shares promtool's module graph, so after promtool it costs little more.
  need prometheus "$PROMETHEUS_VERSION" || return 0
  GOBIN="$cache/bin/prometheus-$PROMETHEUS_VERSION" go install -trimpath \
    -ldflags "-s -w -X github.com/prometheus/common/version.Version=$PROMETHEUS_VERSION" \
    "github.com/prometheus/prometheus/cmd/prometheus@$PROMETHEUS_VERSION"
  finish prometheus "$PROMETHEUS_VERSION"
}

build_helm() {
  # Helm's CLI (helm.sh/helm/v4/cmd/helm): the tests template, install, upgrade and uninstall
  # charts/autoclusters with it. HELM_GO_TOOLCHAIN, when set, is the newer Go its go.mod asks for.
  need helm "$HELM_VERSION" || return 0
  [ -z "${HELM_GO_TOOLCHAIN:-}" ] || export GOTOOLCHAIN=$HELM_GO_TOOLCHAIN
  GOBIN="$cache/bin/helm-$HELM_VERSION" go install -trimpath \
    -ldflags "-s -w -X helm.sh/helm/v4/internal/version.version=$HELM_VERSION" \
    "helm.sh/helm/v4/cmd/helm@$HELM_VERSION"
  finish helm "$HELM_VERSION"
}

build_prometheus_operator_crds() {
  # No binary: the Prometheus Operator's CRDs (example/prometheus-operator-crd in the module).
  need prometheus-operator "$PROMETHEUS_OPERATOR_VERSION" || return 0
  local out="$cache/bin/prometheus-operator-$PROMETHEUS_OPERATOR_VERSION"
  local src; src=$(module_src prometheus-operator \
    "github.com/prometheus-operator/prometheus-operator@$PROMETHEUS_OPERATOR_VERSION")
  mkdir -p "$out/crds"
  cp "$src"/example/prometheus-operator-crd/monitoring.coreos.com_{podmonitors,prometheusrules}.yaml "$out/crds/"
  chmod -R u+w "$out"
  finish prometheus-operator "$PROMETHEUS_OPERATOR_VERSION"
}

case "$which" in
  core) steps=(build_etcd build_kwok build_opa build_kube) ;;
  kube-node) steps=(build_kube_node) ;;
  pulumi) steps=(build_pulumi build_pulumi_kubernetes) ;;
  pulumi-python) steps=(build_pulumi_python) ;;
  karpenter) steps=(build_karpenter) ;;
  cluster-api) steps=(build_cluster_api) ;;
  monitoring) steps=(build_promtool build_prometheus build_prometheus_operator_crds) ;;
  helm) steps=(build_helm) ;;
  all) steps=(build_etcd build_kwok build_opa build_helm build_kube build_kube_node build_karpenter build_cluster_api build_promtool build_prometheus build_prometheus_operator_crds build_pulumi build_pulumi_python build_pulumi_kubernetes) ;;
  *) echo "usage: $0 [core|kube-node|pulumi|pulumi-python|karpenter|cluster-api|monitoring|helm|all]" >&2; exit 2 ;;
esac
command -v go >/dev/null || { [ -x /usr/local/go/bin/go ] && export PATH="/usr/local/go/bin:$PATH"; }
command -v go >/dev/null || { echo "build-tools: Go is needed to build the upstream binaries" >&2; exit 1; }
total=${#steps[@]}
for s in "${steps[@]}"; do run "$s"; done
log "all requested tools are in $cache/bin"
