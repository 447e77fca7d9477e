#!/usr/bin/env bash
# Fetches the nats-server Runplane runs on (2.12 or later; docs/event-log.md says what the design
# relies on) once into .cache/nats-server/<version>/nats-server. The demo, `npm run runplane -- up`,
# the tests and the bench start that binary (libs/devstack ensureNatsServerBinary runs this script
# on first use); the machine's own older nats-server is never used.
#
# It takes the binary out of Debian sid's nats-server package WITHOUT installing it and without
# touching the machine's apt configuration (STACK-NOTES, NATS section): a private source list,
# private lists and cache dirs in a temporary folder, `apt-get download`, `dpkg-deb -x`.
#
# Idempotent: when a cached binary of 2.12 or later already runs, it does nothing.
# When the binary cannot be had (no network, apt fails, too old), it prints one line saying why and
# how to get one, and exits 1.
#
# Usage: scripts/fetch-nats-server.sh [--force]   (--force fetches again even when cached)
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
cache=.cache/nats-server
min_major=2 min_minor=12

# "nats-server: v2.15.1" -> "2.15.1"
version_of() { "$1" --version 2>/dev/null | sed -n 's/^nats-server: v\([0-9][0-9.]*\).*/\1/p' | head -n 1; }
recent_enough() {
  local major minor
  IFS=. read -r major minor _ <<<"$1"
  [ -n "$major" ] && [ -n "$minor" ] && { [ "$major" -gt "$min_major" ] || { [ "$major" -eq "$min_major" ] && [ "$minor" -ge "$min_minor" ]; }; }
}
skip() {
  echo "fetch-nats-server: no nats-server 2.12+ could be had ($*): download a release from https://github.com/nats-io/nats-server/releases and set RUNPLANE_NATS_SERVER_BIN to its nats-server, or put it at .cache/nats-server/<version>/nats-server" >&2
  exit 1
}

if [ "${1:-}" != --force ]; then
  for bin in "$cache"/*/nats-server; do
    [ -x "$bin" ] || continue
    v=$(version_of "$bin")
    if [ -n "$v" ] && recent_enough "$v"; then
      echo "fetch-nats-server: $bin (v$v) already cached"
      exit 0
    fi
  done
fi

for tool in apt-get dpkg-deb awk; do command -v "$tool" >/dev/null 2>&1 || skip "$tool is not available"; done
sources=/etc/apt/sources.list.d/debian.sources
uri=$(awk '/^URIs:/{print $2; exit}' "$sources" 2>/dev/null)
[ -n "$uri" ] || uri=http://deb.debian.org/debian
keyring=/usr/share/keyrings/debian-archive-keyring.gpg
[ -r "$keyring" ] || skip "$keyring is missing"

work=$(mktemp -d) || skip "mktemp failed"
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/lists/partial" "$work/cache/archives/partial" "$work/x"
echo "deb [signed-by=$keyring] $uri sid main" >"$work/sid.list"
# private source list, lists and package cache: the machine's own apt state is neither read for
# sources nor written (Dir::Cache keeps pkgcache.bin out of /var/cache/apt)
apt_opts=(
  -o "Dir::Etc::sourcelist=$work/sid.list" -o "Dir::Etc::sourceparts=-"
  -o "Dir::State::Lists=$work/lists" -o "Dir::Cache=$work/cache"
  -o "APT::Sandbox::User=root" -o "Acquire::http::Timeout=20" -o "Acquire::Retries=1"
)
if ! timeout 300 apt-get -qq "${apt_opts[@]}" update >"$work/apt.log" 2>&1 || grep -q '^\(E\|W\): Failed' "$work/apt.log"; then
  skip "apt-get update of Debian sid ($uri) failed: $(grep -m1 '^\(E\|W\):' "$work/apt.log" || tail -n 1 "$work/apt.log")"
fi
if ! (cd "$work" && timeout 300 apt-get -qq "${apt_opts[@]}" download nats-server >>"$work/apt.log" 2>&1); then
  skip "apt-get download nats-server failed: $(grep -m1 '^E:' "$work/apt.log" || tail -n 1 "$work/apt.log")"
fi
deb=$(ls "$work"/nats-server_*.deb 2>/dev/null | head -n 1)
[ -n "$deb" ] || skip "apt-get download produced no .deb"
dpkg-deb -x "$deb" "$work/x" || skip "dpkg-deb -x $(basename "$deb") failed"
bin="$work/x/usr/sbin/nats-server"
[ -x "$bin" ] || bin=$(find "$work/x" -type f -name nats-server -perm -u+x | head -n 1)
[ -n "$bin" ] && [ -x "$bin" ] || skip "$(basename "$deb") holds no nats-server binary"
v=$(version_of "$bin")
[ -n "$v" ] || skip "the nats-server from $(basename "$deb") does not run here"
recent_enough "$v" || skip "Debian sid has nats-server $v, older than $min_major.$min_minor"

# staged next to the target, then renamed: a concurrent or interrupted run never leaves a half file
mkdir -p "$cache/$v" || skip "cannot create $cache/$v"
cp "$bin" "$cache/$v/.nats-server.$$" && chmod 755 "$cache/$v/.nats-server.$$" && mv -f "$cache/$v/.nats-server.$$" "$cache/$v/nats-server" \
  || { rm -f "$cache/$v/.nats-server.$$"; skip "cannot write $cache/$v/nats-server"; }
echo "fetch-nats-server: cached $cache/$v/nats-server (v$v, from $(basename "$deb"))"
