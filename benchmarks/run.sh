#!/usr/bin/env bash
# Runs every benchmark of this module and writes ../docs/benchmarks.md.
#
#   cd benchmarks && ./run.sh            # COUNT=5 BENCHTIME=1s: about 16-20 minutes on 2 cores
#   COUNT=3 BENCHTIME=500ms ./run.sh     # quicker, noisier
#
# The test binary is built once and run COUNT times, one full pass over
# every benchmark each time, so that a burst of noise on a shared machine
# falls on every library rather than on one library's runs. The raw output,
# with a header saying where and how it ran, goes to results.txt;
# cmd/benchreport turns it into the Markdown. The Redis benchmarks need
# redis-server on PATH and skip themselves without it.
set -euo pipefail
cd "$(dirname "$0")"

COUNT=${COUNT:-5}
BENCHTIME=${BENCHTIME:-1s}
raw=results.txt
doc=../docs/benchmarks.md

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
go test -c -o "$tmp/bench.test" .
# hybridlimitd's rate limit service beside envoyproxy/ratelimit's
# approach lives in the root module's package main (cmd/hybridlimitd):
# built there, run in the same passes.
(cd .. && go test -c -o "$tmp/rls.test" ./cmd/hybridlimitd)
rls="$tmp/rls.test -test.run '^\$' -test.bench '^BenchmarkRLS(PerRequest)?\$' -test.benchtime $BENCHTIME -test.count 1 -test.timeout 30m"

run="$tmp/bench.test -test.run '^\$' -test.bench . -test.benchtime $BENCHTIME -test.count 1 -test.timeout 30m"

hybridlimit="commit $(git -C .. rev-parse --short HEAD)"
if [ -n "$(git -C .. status --porcelain -- . ':(exclude)benchmarks' ':(exclude)docs/benchmarks.md')" ]; then
	hybridlimit="$hybridlimit with uncommitted changes"
fi
if ! command -v redis-server >/dev/null 2>&1; then
	echo "run.sh: redis-server not on PATH: the Redis benchmarks will skip" >&2
fi

{
	echo "# date: $(date -u '+%Y-%m-%d %H:%M UTC')"
	echo "# go: $(go version)"
	echo "# nproc: $(nproc)"
	echo "# cpu: $(grep -m1 '^model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')"
	echo "# hybridlimit: $hybridlimit"
	echo "# command: cd benchmarks && COUNT=$COUNT BENCHTIME=$BENCHTIME ./run.sh (go test -c, then $COUNT times: bench.test -test.run '^\$' -test.bench . -test.benchtime $BENCHTIME -test.count 1)"
	echo "# count: $COUNT"
	echo "# benchtime: $BENCHTIME"
	echo "# excluded: none; every peer module was fetched through the Go module proxy (go.uber.org/ratelimit is in the one-key table only). For gubernator, github.com/mailgun/gubernator/v2 v2.4.0 does not build beside this module's OpenTelemetry (its mailgun/holster tracing lacks trace.Span.AddLink); its successor github.com/gubernator-io/gubernator/v2 v2.13.0 is measured instead."
	go list -m -f '# module: {{.Path}} {{.Version}}' \
		golang.org/x/time github.com/sethvargo/go-limiter github.com/throttled/throttled/v2 \
		github.com/ulule/limiter/v3 go.uber.org/ratelimit github.com/go-redis/redis_rate/v10 \
		github.com/redis/go-redis/v9 github.com/gubernator-io/gubernator/v2
} >"$raw"

start=$(date +%s)
for i in $(seq "$COUNT"); do
	echo "run.sh: pass $i of $COUNT" >&2
	eval "$run" | tee -a "$raw"
	(cd ../cmd/hybridlimitd && eval "$rls") | tee -a "$raw"
done
echo "run.sh: benchmarks took $(($(date +%s) - start)) s" >&2

go run ./cmd/benchreport -in "$raw" -out "$doc"
echo "run.sh: wrote $doc from $raw" >&2
