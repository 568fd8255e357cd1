#!/usr/bin/env bash
# Runs every check and test of the repository: the README's test command.
# Usage: ./scripts/test.sh
# FUZZTIME (default 20000x) sets how long each fuzz target runs. It is a count,
# not a duration: with a duration, Go 1.26's fuzz coordinator can report a
# spurious "context deadline exceeded" when the deadline races a busy worker
# (golang/go#75804, fixed in Go 1.27). A count has no deadline to race.
set -euo pipefail
cd "$(dirname "$0")/.."

echo "== gofmt"
unformatted=$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))
if [ -n "$unformatted" ]; then
	echo "gofmt would change:"; echo "$unformatted"; exit 1
fi

# The repository's Go modules (go.work ties them): the library, the
# cluster module (NATS) and the command. `./...` at the root covers the
# library's only, so each is run in its own directory.
modules=(. cluster cmd/moqt)

echo "== go vet"
for m in "${modules[@]}"; do (cd "$m" && go vet ./...); done

echo "== interop tools: Chromium, node, interop/node_modules"
# The browser interop test (interop/) runs @moq/net in headless Chromium. It
# uses the system's Chromium and never downloads a browser.
# Two runs at once on a fresh machine (two clones) take turns: the second
# waits for the first's install instead of failing on apt's lock.
install_chromium() {
	command -v chromium >/dev/null 2>&1 && return
	echo "installing chromium (apt-get)"
	sudo=""
	if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
	$sudo apt-get -o DPkg::Lock::Timeout=600 update -qq
	$sudo env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -qq chromium >/dev/null
}
if ! command -v chromium >/dev/null 2>&1; then
	if command -v flock >/dev/null 2>&1; then
		exec 9>"${TMPDIR:-/tmp}/moqt-install.lock"
		flock 9
		install_chromium
		exec 9>&-
	else
		install_chromium
	fi
fi
# Node.js 20 or later (playwright-core's minimum) comes with the machine.
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
	echo "node and npm (Node.js 20 or later) are needed for the interop test"; exit 1
fi
# npm ci whenever node_modules was not installed from the committed lockfile.
lock_sum=$(sha256sum interop/package-lock.json | cut -d' ' -f1)
if [ "$(cat interop/node_modules/.moqt-lock-sha256 2>/dev/null)" != "$lock_sum" ]; then
	echo "npm ci in interop/"
	(cd interop && npm ci --no-audit --no-fund --loglevel=error)
	echo "$lock_sum" >interop/node_modules/.moqt-lock-sha256
fi
# With this set, a missing tool fails the interop test instead of skipping it.
export MOQT_INTEROP=1

echo "== go test -race"
for m in "${modules[@]}"; do
	echo "-- $m"
	(cd "$m" && go test -race -count=1 ./...)
done

echo "== the benchmark harness's own tests (internal/bench, without -race)"
MOQT_BENCH=1 go test -count=1 ./internal/bench/

echo "== fuzz targets (${FUZZTIME:-20000x} each)"
fuzzlog=$(mktemp)
trap 'rm -f "$fuzzlog"' EXIT
for pkg in $(for m in "${modules[@]}"; do (cd "$m" && go list ./...); done); do
	for target in $(go test -list '^Fuzz' "$pkg" | grep '^Fuzz' || true); do
		echo "-- $pkg $target"
		go test -run='^$' -fuzz="^${target}\$" -fuzztime="${FUZZTIME:-20000x}" "$pkg" >"$fuzzlog" 2>&1 || {
			cat "$fuzzlog"; exit 1; }
	done
done
echo "all checks passed"
