#!/usr/bin/env bash
# Debian packages the project uses when it can have them, per target (each installs only
# what it needs):
#   demo   `make demo`: git for task checkouts, bubblewrap to isolate sandbox containers,
#          iproute2 (ip) and util-linux (nsenter) to give pods network namespaces of their own;
#   test   `make test` (the default): the same, and chromium for the viewer's browser tests
#          (Playwright drives this system browser; browser downloads are not needed).
# Missing bubblewrap/ip/nsenter is not fatal: pods then run unisolated (or on the
# host network) and their status says so.
set -uo pipefail
target="${1:-test}"
case "$target" in
  demo | test) ;;
  *) echo "usage: $0 [demo|test]" >&2; exit 2 ;;
esac
need=()
command -v git >/dev/null || need+=(git)
command -v bwrap >/dev/null || need+=(bubblewrap)
command -v ip >/dev/null || need+=(iproute2)
command -v nsenter >/dev/null || need+=(util-linux)
if [ "$target" = test ]; then
  [ -x /usr/bin/chromium ] || need+=(chromium)
fi
[ ${#need[@]} -eq 0 ] && exit 0
# The demo's packages are small tools: their recommends (manuals, extra helpers) are not needed.
extra=()
[ "$target" = demo ] && extra=(--no-install-recommends)
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  echo "installing ${need[*]} with apt-get" >&2
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${extra[@]}" "${need[@]}") >/dev/null 2>&1 \
    || echo "warning: could not install ${need[*]}; sandboxes may run unisolated, browser tests fail" >&2
else
  echo "warning: ${need[*]} missing and not root; install them (isolated sandboxes, browser tests)" >&2
fi
exit 0
