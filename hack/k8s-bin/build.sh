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
#   hack/k8s-bin/build.sh NAME...    # just these binaries (or groups: control-plane, node, all)
#   SWEROLLOUT_BIN_DIR=... to override the cache location.
# It prints the bin dir.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
K8S_VERSION="v1.36.3"
ETCD_VERSION="v3.6.13"
HELM_VERSION="v3.22.0"
bin_dir="${SWEROLLOUT_BIN_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/swerollout/bin/k8s-${K8S_VERSION}_etcd-${ETCD_VERSION}_helm-${HELM_VERSION}}"
mkdir -p "$bin_dir"
# One build at a time per cache: two checkouts running `make` at once (or `make test`
# beside `make bench`) would otherwise write the same binary and move it from under
# each other. The second waits, then finds the binaries built.
exec 9>"$bin_dir/.build.lock"
flock 9

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

# name | module dir | package to build | ldflags | version command | text the version output must contain
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
)
control_plane="etcd helm kubectl kube-apiserver"
node="kubelet kube-proxy kube-scheduler kube-controller-manager pause"

# reports TEXT CMD...: CMD's output contains TEXT. (Output is captured first: with
# pipefail, `grep -q` closing the pipe early would fail the pipeline.)
reports() {
  local expect="$1"; shift
  local text
  text="$("$@" 2>&1)" || true
  [[ "$text" == *"$expect"* ]]
}

wanted=" "
for arg in "${@:-control-plane}"; do
  case "$arg" in
    control-plane) wanted+="$control_plane " ;;
    node) wanted+="$node " ;;
    all) wanted+="$control_plane $node " ;;
    *) wanted+="$arg " ;;
  esac
done
for t in "${targets[@]}"; do
  IFS='|' read -r name dir pkg ldflags vcmd expect <<<"$t"
  [[ "$wanted" == *" $name "* ]] || continue
  out="$bin_dir/$name"
  # shellcheck disable=SC2086
  if [ -x "$out" ] && reports "$expect" "$out" $vcmd; then
    continue
  fi
  echo "building $name into $out (one-time; each Kubernetes binary takes minutes on 2 cores)" >&2
  start=$(date +%s)
  (cd "$here/$dir" && go build -trimpath -ldflags "-s -w ${ldflags}" -o "$out.tmp.$$" "$pkg")
  mv "$out.tmp.$$" "$out"
  # shellcheck disable=SC2086
  if ! reports "$expect" "$out" $vcmd; then
    echo "error: $out does not report '$expect':" >&2
    "$out" $vcmd >&2 || true
    exit 1
  fi
  echo "built $name in $(( $(date +%s) - start ))s" >&2
done
echo "$bin_dir"
