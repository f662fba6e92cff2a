#!/usr/bin/env bash
# Print the path of a Go that builds bench/s3peer and the Kubernetes test bed, installing what is missing
# (`make install` calls it, so that the tests never install a package).
# bench/s3peer/go.mod needs the Go its newest dependencies need (minio-go v7.4 and aws-sdk-go-v2: see its `go` line).
#  1. `go` on the PATH or /usr/local/go/bin/go at Go >= 1.21: it switches to the go.mod's toolchain by itself
#     (GOTOOLCHAIN=auto fetches golang.org/toolchain from the Go module proxy).
#  2. Otherwise Debian's golang-go (apt-get install if absent; Debian 12 has 1.19, too old to switch): it only
#     downloads that same toolchain module from the Go module proxy, and the toolchain inside it is used.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
want=$(awk '$1 == "go" {print $2; exit}' "$here/s3peer/go.mod")
SUDO=$([ "$(id -u)" = 0 ] || echo sudo)

ver_ok() {  # is Go at $1 >= 1.21?
  local v; v=$("$1" env GOVERSION 2>/dev/null | sed 's/^go//') || return 1
  [ -n "$v" ] && [ "$(printf '%s\n' 1.21 "$v" | sort -V | head -1)" = 1.21 ]
}

for g in "$(command -v go || true)" /usr/local/go/bin/go /usr/lib/go/bin/go; do
  if [ -n "$g" ] && [ -x "$g" ] && ver_ok "$g"; then echo "$g"; exit 0; fi
done

old=$(command -v go || ls /usr/lib/go/bin/go 2>/dev/null || true)
if [ -z "$old" ]; then
  echo "go-toolchain: no Go found; installing Debian's golang-go (to fetch Go $want from the Go module proxy)" >&2
  $SUDO apt-get update -qq >&2 && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends golang-go >&2
  old=$(command -v go || echo /usr/lib/go/bin/go)
fi
arch=$(dpkg --print-architecture 2>/dev/null || echo amd64)
mod="golang.org/toolchain@v0.0.1-go$want.linux-$arch"
echo "go-toolchain: $("$old" version) is too old for bench/s3peer; fetching $mod from the Go module proxy" >&2
dir=$(cd /tmp && GO111MODULE=on GOFLAGS=-mod=mod "$old" mod download -json "$mod" | sed -n 's/.*"Dir": "\(.*\)".*/\1/p')
[ -n "$dir" ] && [ -d "$dir" ] || { echo "go-toolchain: could not download $mod" >&2; exit 1; }
# module zips keep no file modes (go itself marks these executable after its own download)
chmod -R u+x "$dir/bin" "$dir/pkg/tool" 2>/dev/null || $SUDO chmod -R a+x "$dir/bin" "$dir/pkg/tool"
echo "$dir/bin/go"
