#!/usr/bin/env bash
# Runs every check and test of the repository: the README's test command.
# Usage: ./scripts/test.sh
# FUZZTIME (default 3s) sets how long each fuzz target runs.
set -euo pipefail
cd "$(dirname "$0")/.."

echo "== gofmt"
unformatted=$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))
if [ -n "$unformatted" ]; then
	echo "gofmt would change:"; echo "$unformatted"; exit 1
fi

echo "== go vet"
go vet ./...

echo "== go test -race"
go test -race -count=1 ./...

echo "== fuzz targets (${FUZZTIME:-3s} each)"
for pkg in $(go list ./...); do
	for target in $(go test -list '^Fuzz' "$pkg" | grep '^Fuzz' || true); do
		echo "-- $pkg $target"
		go test -run='^$' -fuzz="^${target}\$" -fuzztime="${FUZZTIME:-3s}" "$pkg" >/tmp/moqt-fuzz.log 2>&1 || {
			cat /tmp/moqt-fuzz.log; exit 1; }
	done
done
echo "all checks passed"
