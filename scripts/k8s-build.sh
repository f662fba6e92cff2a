#!/bin/bash
# Build the Kubernetes test bed's binaries (tests/k8sbed.py) from the Go module proxy into the user's cache:
# kube-apiserver, kube-controller-manager, kube-scheduler, kubelet, kubectl, etcd and a static pause.
# Only a fresh machine pays: a complete bin/ (its .complete stamp) is kept, the Go caches are removed after.
# Layout: ${XDG_CACHE_HOME:-~/.cache}/fathom/k8s/<version>/{bin,images,work}
# Needs Go >= 1.21 (GO=...; default: go on the PATH, else /usr/local/go/bin/go). Runs niced, GOMAXPROCS=2: the machine is shared.
set -euo pipefail
K8S_VERSION=${K8S_VERSION:-1.34.4}
ETCD_VERSION=${ETCD_VERSION:-3.6.4}
GO=${GO:-$(command -v go || echo /usr/local/go/bin/go)}
CACHE=${XDG_CACHE_HOME:-$HOME/.cache}/fathom/k8s/$K8S_VERSION
BIN=$CACHE/bin
WORK=$CACHE/work
MINOR=$(echo "$K8S_VERSION" | cut -d. -f2)
PATCH=${K8S_VERSION##*.}
COMPONENTS="kube-apiserver kube-controller-manager kube-scheduler kubelet kubectl etcd"

if [ -f "$BIN/.complete" ] && [ "${1:-}" != --rebuild ]; then
  echo "k8s $K8S_VERSION: cached in $BIN"; exit 0
fi
# One build at a time: `make test` starts one in the background, and the bed's first test waits here for it.
mkdir -p "$CACHE"
exec 9>"$CACHE/.build.lock"
if ! flock -n 9; then
  echo "k8s $K8S_VERSION: another build is running (log: $CACHE/build.log); waiting for it"
  flock 9
fi
if [ -f "$BIN/.complete" ] && [ "${1:-}" != --rebuild ]; then
  echo "k8s $K8S_VERSION: built meanwhile into $BIN"; exit 0
fi
export GOPATH=$WORK/gopath GOCACHE=$WORK/gocache GOTMPDIR=$WORK/tmp GOMAXPROCS=${GOMAXPROCS:-2}
# a Go >= 1.21 older than the module's `go` line fetches that toolchain from the module proxy (auto)
export GOFLAGS=-mod=mod CGO_ENABLED=0 GOTOOLCHAIN=${GOTOOLCHAIN:-auto} GOMODCACHE=$WORK/gopath/pkg/mod
NICE="nice -n 19"
M=$WORK/kbuild
rm -f "$BIN/.complete"
mkdir -p "$GOTMPDIR" "$M/cmd/etcd" "$M/cmd/pause" "$BIN"
t0=$(date +%s)

# k8s.io/kubernetes' module zip has no staging/ tree: build it as a dependency of a wrapper module whose
# replace lines point every k8s.io staging module at its published v0.<minor>.<patch> twin.
if [ ! -f "$M/go.sum" ]; then
  {
    printf 'module kbuild\n\ngo 1.24.0\n\nrequire k8s.io/kubernetes v%s\n\nreplace (\n' "$K8S_VERSION"
    for m in api apiextensions-apiserver apimachinery apiserver cli-runtime client-go cloud-provider \
      cluster-bootstrap code-generator component-base component-helpers controller-manager cri-api cri-client \
      csi-translation-lib dynamic-resource-allocation endpointslice externaljwt kms kube-aggregator \
      kube-controller-manager kube-proxy kube-scheduler kubectl kubelet metrics mount-utils \
      pod-security-admission sample-apiserver sample-cli-plugin sample-controller; do
      printf '\tk8s.io/%s => k8s.io/%s v0.%s.%s\n' "$m" "$m" "$MINOR" "$PATCH"
    done
    printf ')\n\ntool (\n'
    for c in kube-apiserver kube-controller-manager kube-scheduler kubelet kubectl; do
      printf '\tk8s.io/kubernetes/cmd/%s\n' "$c"
    done
    printf ')\n'
  } > "$M/go.mod"
  cat > "$M/cmd/etcd/main.go" <<'EOF'
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
EOF
  (cd "$M" && $NICE "$GO" get "go.etcd.io/etcd/server/v3@v$ETCD_VERSION" && $NICE "$GO" mod tidy)
  echo "modules: $(( $(date +%s) - t0 ))s"
fi

# The sandbox image: a pause process that reaps children and exits on SIGINT/SIGTERM.
cat > "$M/cmd/pause/main.go" <<'EOF'
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	c := make(chan os.Signal, 4)
	signal.Notify(c, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for s := range c {
		if s != syscall.SIGCHLD {
			os.Exit(0)
		}
		for {
			if pid, _ := syscall.Wait4(-1, nil, syscall.WNOHANG, nil); pid <= 0 {
				break
			}
		}
	}
}
EOF
(cd "$M" && $NICE "$GO" build -trimpath -ldflags='-s -w' -o "$BIN/pause" ./cmd/pause)

V=k8s.io/component-base/version
CV=k8s.io/client-go/pkg/version
LDF="-s -w -X $V.gitVersion=v$K8S_VERSION -X $V.gitMajor=1 -X $V.gitMinor=$MINOR -X $V.gitTreeState=clean"
LDF="$LDF -X $CV.gitVersion=v$K8S_VERSION -X $CV.gitMajor=1 -X $CV.gitMinor=$MINOR"
for c in $COMPONENTS; do
  if [ "$c" = etcd ]; then pkg=./cmd/etcd; else pkg=k8s.io/kubernetes/cmd/$c; fi
  s=$(date +%s)
  (cd "$M" && $NICE "$GO" build -trimpath -ldflags "$LDF" -o "$BIN/$c" "$pkg")
  echo "built $c: $(( $(date +%s) - s ))s"
done
echo "$K8S_VERSION etcd $ETCD_VERSION built $(date -u +%FT%TZ) in $(( $(date +%s) - t0 ))s" > "$BIN/.complete"
# the Go caches (several GB) are not needed to run: only bin/ is kept (module cache files are read-only)
chmod -R u+w "$WORK" && rm -rf "$WORK"
echo "k8s $K8S_VERSION: built in $(( $(date +%s) - t0 ))s into $BIN ($(du -sh "$BIN" | cut -f1))"
