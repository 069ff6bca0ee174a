#!/usr/bin/env bash
# Build the Kubernetes binaries from their Go modules, once per version, into a
# cache outside the repository. A second run that finds every binary answering its
# expected --version does no Go work.
#
#   hack/k8s-bin/build.sh            # the control plane the embedded default needs:
#                                    # kube-apiserver, kubectl, etcd, helm
#   hack/k8s-bin/build.sh node       # what `swerollout cluster up` adds: kubelet,
#                                    # kube-proxy, kube-scheduler, kube-controller-manager
#                                    # and the pause binary (several minutes more, once)
#   hack/k8s-bin/build.sh prometheus # prometheus and promtool, for the tests of the dashboard
#                                    # and the alerts, into their own cache dir (prints it)
#   hack/k8s-bin/build.sh kwok       # KWOK, the simulated nodes of the scale bench (bench/simnodes.py)
#   hack/k8s-bin/build.sh kueue      # Kueue's controller with its CRDs and webhook manifest, for
#                                    # the tests of queued rollouts, into its own cache dir (prints it)
#   hack/k8s-bin/build.sh NAME...    # just these binaries (or groups: control-plane, node,
#                                    # prometheus, all)
#   SWEROLLOUT_BIN_DIR=... / SWEROLLOUT_PROMETHEUS_BIN_DIR=... / SWEROLLOUT_KUEUE_BIN_DIR=...
#   override the cache locations.
# It prints the bin dir (the Prometheus or Kueue one when only that group was asked for).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
K8S_VERSION="v1.36.3"
ETCD_VERSION="v3.6.13"
HELM_VERSION="v3.22.0"
# Prometheus 3.x is published as Go module versions v0.3xx.y (hack/k8s-bin/prometheus/go.mod).
PROMETHEUS_VERSION="v3.16.0"
KWOK_VERSION="v0.8.0"   # pinned in kwok/go.mod; kept beside the Kubernetes binaries
KUEUE_VERSION="v0.17.0" # pinned in kueue/go.mod
cache="${XDG_CACHE_HOME:-$HOME/.cache}/swerollout/bin"
bin_dir="${SWEROLLOUT_BIN_DIR:-$cache/k8s-${K8S_VERSION}_etcd-${ETCD_VERSION}_helm-${HELM_VERSION}}"
# Apart from the Kubernetes binaries: a directory per set of versions, so bumping
# Prometheus does not rebuild kube-apiserver.
prometheus_dir="${SWEROLLOUT_PROMETHEUS_BIN_DIR:-$cache/prometheus-${PROMETHEUS_VERSION}}"
kueue_dir="${SWEROLLOUT_KUEUE_BIN_DIR:-$cache/kueue-${KUEUE_VERSION}}"
mkdir -p "$bin_dir" "$prometheus_dir" "$kueue_dir"
# One build at a time per cache: two checkouts running `make` at once (or `make test`
# beside `make bench`) would otherwise write the same binary and move it from under
# each other. The second waits, then finds the binaries built. Only a build takes the
# lock: a run that finds its binaries answering does not wait behind another's build
# (a test looking up promtool behind a cold build of something else timed out).
locked=""

export GOTOOLCHAIN=local   # never fetch another toolchain
export CGO_ENABLED=0
export GOFLAGS="-buildvcs=false -mod=mod"

# Stamp the real release into the binaries; without it /version says v0.0.0-master
# and Helm's kubeVersion checks fail.
k8s_minor="$(echo "$K8S_VERSION" | cut -d. -f2)"
k8s_commit="release-${K8S_VERSION}"
build_date="2026-01-01T00:00:00Z"   # fixed so the build is reproducible
k8s_ldflags=""
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  k8s_ldflags+=" -X ${pkg}.gitVersion=${K8S_VERSION} -X ${pkg}.gitMajor=1 -X ${pkg}.gitMinor=${k8s_minor}"
  k8s_ldflags+=" -X ${pkg}.gitCommit=${k8s_commit} -X ${pkg}.gitTreeState=clean -X ${pkg}.buildDate=${build_date}"
done
helm_ldflags="-X helm.sh/helm/v3/internal/version.version=${HELM_VERSION} -X helm.sh/helm/v3/internal/version.gitTreeState=clean"
helm_ldflags+=" -X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMajor=1 -X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMinor=${k8s_minor}"
helm_ldflags+=" -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMajor=1 -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMinor=${k8s_minor}"
prom_ldflags="-X github.com/prometheus/common/version.Version=${PROMETHEUS_VERSION#v} -X github.com/prometheus/common/version.Revision=${PROMETHEUS_VERSION}"
prom_ldflags+=" -X github.com/prometheus/common/version.Branch=HEAD -X github.com/prometheus/common/version.BuildUser=swerollout"
prom_ldflags+=" -X github.com/prometheus/common/version.BuildDate=20260101-00:00:00"
# remove_all_sd leaves out every service discovery but file and http (the tests scrape
# static targets): the AWS, Azure, GCE, Kubernetes, ... SDKs are not compiled.
prom_tags="remove_all_sd"

# name | module dir | package to build | ldflags | version command | text the version output must contain
#   | build tags | output dir (default: $bin_dir)
targets=(
  "etcd|etcd|.||--version|etcd Version: ${ETCD_VERSION#v}"
  "helm|helm|helm.sh/helm/v3/cmd/helm|${helm_ldflags}|version --short|${HELM_VERSION}"
  "kubectl|kubectl|.|${k8s_ldflags}|version --client|${K8S_VERSION}"
  "kube-apiserver|kube-apiserver|.|${k8s_ldflags}|--version|Kubernetes ${K8S_VERSION}"
  "kubelet|kube-node|./kubelet|${k8s_ldflags}|--version|Kubernetes ${K8S_VERSION}"
  "kube-proxy|kube-node|./kube-proxy|${k8s_ldflags}|--version|Kubernetes ${K8S_VERSION}"
  "kube-scheduler|kube-node|./kube-scheduler|${k8s_ldflags}|--version|Kubernetes ${K8S_VERSION}"
  "kube-controller-manager|kube-node|./kube-controller-manager|${k8s_ldflags}|--version|Kubernetes ${K8S_VERSION}"
  "pause|pause|.||--version|swerollout-pause 1"
  "prometheus|prometheus|github.com/prometheus/prometheus/cmd/prometheus|${prom_ldflags}|--version|prometheus, version ${PROMETHEUS_VERSION#v} |${prom_tags}|${prometheus_dir}"
  "promtool|promtool|github.com/prometheus/prometheus/cmd/promtool|${prom_ldflags}|--version|promtool, version ${PROMETHEUS_VERSION#v} |${prom_tags}|${prometheus_dir}"
  "kwok|kwok|sigs.k8s.io/kwok/cmd/kwok|-X sigs.k8s.io/kwok/pkg/consts.Version=${KWOK_VERSION}|--version|kwok version ${KWOK_VERSION} "
  # Kueue has no version flag: its build info (go version -m) names the module version.
  "kueue|kueue|sigs.k8s.io/kueue/cmd/kueue|-X sigs.k8s.io/kueue/pkg/version.GitVersion=${KUEUE_VERSION}|@buildinfo|sigs.k8s.io/kueue	${KUEUE_VERSION}||${kueue_dir}"
)
control_plane="etcd helm kubectl kube-apiserver"
node="kubelet kube-proxy kube-scheduler kube-controller-manager pause"
prometheus="prometheus promtool"

# reports TEXT CMD...: CMD's output contains TEXT. (Output is captured first: with
# pipefail, `grep -q` closing the pipe early would fail the pipeline.)
reports() {
  local expect="$1"; shift
  local text
  if [ "${2:-}" = "@buildinfo" ]; then
    text="$(go version -m "$1" 2>&1)" || true
  else
    text="$("$@" 2>&1)" || true
  fi
  [[ "$text" == *"$expect"* ]]
}

wanted=" "
for arg in "${@:-control-plane}"; do
  case "$arg" in
    control-plane) wanted+="$control_plane " ;;
    node) wanted+="$node " ;;
    prometheus) wanted+="$prometheus " ;;
    all) wanted+="$control_plane $node $prometheus kwok kueue " ;;
    *) wanted+="$arg " ;;
  esac
done
for t in "${targets[@]}"; do
  IFS='|' read -r name dir pkg ldflags vcmd expect tags out_dir <<<"$t"
  [[ "$wanted" == *" $name "* ]] || continue
  out="${out_dir:-$bin_dir}/$name"
  # shellcheck disable=SC2086
  if [ -x "$out" ] && reports "$expect" "$out" $vcmd; then
    continue
  fi
  if [ -z "$locked" ]; then
    exec 9>"$bin_dir/.build.lock"
    flock 9
    locked=1
    # shellcheck disable=SC2086
    if [ -x "$out" ] && reports "$expect" "$out" $vcmd; then
      continue   # built by the run we waited for
    fi
  fi
  echo "building $name into $out (one-time; each binary takes minutes on 2 cores)" >&2
  start=$(date +%s)
  (cd "$here/$dir" && go build -trimpath -tags "${tags}" -ldflags "-s -w ${ldflags}" -o "$out.tmp.$$" "$pkg")
  mv "$out.tmp.$$" "$out"
  # shellcheck disable=SC2086
  if ! reports "$expect" "$out" $vcmd; then
    echo "error: $out does not report '$expect':" >&2
    "$out" $vcmd >&2 || true
    exit 1
  fi
  echo "built $name in $(( $(date +%s) - start ))s" >&2
done
if [[ "$wanted" == *" kueue "* ]]; then
  # What a test installs beside the controller: its CRDs and its webhook configurations,
  # from the same module version (the module cache holds them after the build).
  src="$(cd "$here/kueue" && go list -m -f '{{.Dir}}' sigs.k8s.io/kueue)"
  if [ ! -f "$kueue_dir/webhooks.yaml" ]; then
    rm -rf "$kueue_dir/crds.tmp.$$" && cp -r "$src/config/components/crd/bases" "$kueue_dir/crds.tmp.$$"
    chmod -R u+w "$kueue_dir/crds.tmp.$$" && rm -rf "$kueue_dir/crds" && mv "$kueue_dir/crds.tmp.$$" "$kueue_dir/crds"
    cp "$src/config/components/webhook/manifests.yaml" "$kueue_dir/webhooks.yaml.tmp.$$"
    chmod u+w "$kueue_dir/webhooks.yaml.tmp.$$" && mv "$kueue_dir/webhooks.yaml.tmp.$$" "$kueue_dir/webhooks.yaml"
  fi
fi
if [ "$wanted" = " kueue " ]; then
  echo "$kueue_dir"
elif [ "$wanted" = " $prometheus " ]; then
  echo "$prometheus_dir"
else
  echo "$bin_dir"
fi
