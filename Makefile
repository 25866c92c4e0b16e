# The commands a newcomer needs: `make test` runs every check CI runs.
# Redis-backed tests start their own redis-server processes on free loopback
# ports; this Makefile only makes sure the binary exists.

GO                  ?= go
STATICCHECK_VERSION := v0.8.2
TEST_TIMEOUT        ?= 12m

.PHONY: test fmt vet staticcheck redis-server bench bench-peers fuzz demo

# The tests that saturate the CPU on purpose run alone, after the others,
# whose timing they would starve. The simulator's gossip reality tests
# run without the race detector, which slows real memberlist and not
# the simulator (they skip themselves under it), as do its minute-long
# under-limit scenarios, too slow under it.
#
# CI shows only the end of a failed run, and a race report names the
# goroutines' stacks far above the failures it causes: on failure the
# first report and the shuffle seeds (to replay the order with
# -shuffle=SEED) are printed again last.
test: fmt vet staticcheck redis-server
	@log="$$(mktemp)"; trap 'rm -f "$$log" "$$log.rc"' EXIT; \
	{ $(GO) test -race -shuffle=on -p 1 -timeout $(TEST_TIMEOUT) ./... 2>&1; echo $$? >"$$log.rc"; } | tee "$$log"; \
	rc="$$(cat "$$log.rc")"; \
	if [ "$$rc" != 0 ]; then \
		echo "--- the run failed; its first race report, if any, and the shuffle seeds:"; \
		awk '/^WARNING: DATA RACE/ { on = 1 } on { print; if (/^==================/) exit }' "$$log" | head -n 120; \
		awk '/^-test.shuffle / { seed = $$2 } /^FAIL\t/ { print $$2 ": -shuffle=" seed }' "$$log"; \
		exit "$$rc"; \
	fi
	HYBRIDLIMIT_SATURATE=1 $(GO) test -race -count=1 -run 'TestStarvedNodeKeepsItsLeases' ./hybrid
	$(GO) test -count=1 -run 'TestGossipReality|TestUnderLimitScenarios' ./sim

# gofmt -l lists files that need formatting; any output fails the build.
fmt:
	@out="$$(gofmt -l .)"; \
	if [ -n "$$out" ]; then echo "gofmt: these files need 'gofmt -w':"; echo "$$out"; exit 1; fi

vet:
	$(GO) vet ./...

staticcheck:
	$(GO) run honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION) ./...

# Use redis-server from $$HYBRIDLIMIT_REDIS_SERVER or PATH; as root on
# Debian, install the redis-server package; otherwise say how.
redis-server:
	@if [ -n "$$HYBRIDLIMIT_REDIS_SERVER" ] && [ -x "$$HYBRIDLIMIT_REDIS_SERVER" ]; then \
		echo "redis-server: $$HYBRIDLIMIT_REDIS_SERVER"; \
	elif command -v redis-server >/dev/null 2>&1; then \
		echo "redis-server: $$(command -v redis-server)"; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
		echo "redis-server not found: installing Debian's redis-server package"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server >/dev/null \
			|| { echo "apt-get install redis-server failed"; exit 1; }; \
		echo "redis-server: $$(command -v redis-server)"; \
	else \
		echo "redis-server not found. Install it (Debian/Ubuntu: sudo apt-get install redis-server)"; \
		echo "or point HYBRIDLIMIT_REDIS_SERVER at a redis-server binary, then run make test again."; \
		exit 1; \
	fi

# Benchmarks with the baselines they are judged against, run together.
bench:
	$(GO) test -run '^$$' -bench . -benchmem ./...

# hybridlimit beside its peers, in the separate benchmarks module; writes
# docs/benchmarks.md (about 16-20 minutes on 2 cores).
bench-peers: redis-server
	cd benchmarks && ./run.sh

# A minute of fuzzing per target. Each new input the fuzzer finds is
# minimized for at most 2 s (Go's default is a minute, during which the
# target is not fuzzed at all: FuzzCosts ran 15,000 inputs in a minute,
# 56,000 in 30 s with this).
FUZZFLAGS ?= -fuzzminimizetime 2s
fuzz:
	$(GO) test -run '^$$' -fuzz FuzzBuckets -fuzztime 60s $(FUZZFLAGS) ./local/
	$(GO) test -run '^$$' -fuzz FuzzDecode -fuzztime 60s $(FUZZFLAGS) ./gossip/
	$(GO) test -run '^$$' -fuzz FuzzDocuments -fuzztime 60s $(FUZZFLAGS) ./gossip/
	$(GO) test -run '^$$' -fuzz FuzzSpaceSaving -fuzztime 60s $(FUZZFLAGS) ./internal/sketch/
	$(GO) test -run '^$$' -fuzz FuzzGrantStriped -fuzztime 60s $(FUZZFLAGS) ./hybrid/
	$(GO) test -run '^$$' -fuzz FuzzCosts -fuzztime 60s $(FUZZFLAGS) ./hybrid/
	$(GO) test -run '^$$' -fuzz FuzzCallLimits -fuzztime 60s $(FUZZFLAGS) ./hybrid/
	$(GO) test -run '^$$' -fuzz FuzzReplies -fuzztime 60s $(FUZZFLAGS) ./global/
	$(GO) test -run '^$$' -fuzz FuzzShardNames -fuzztime 60s $(FUZZFLAGS) ./global/
	$(GO) test -run '^$$' -fuzz FuzzParse -fuzztime 60s $(FUZZFLAGS) ./rules/
	$(GO) test -run '^$$' -fuzz FuzzClientIP -fuzztime 60s $(FUZZFLAGS) ./httplimit/
	$(GO) test -run '^$$' -fuzz FuzzUnmarshalText -fuzztime 60s $(FUZZFLAGS) ./internal/enumtext/
	$(GO) test -run '^$$' -fuzz FuzzTable -fuzztime 60s $(FUZZFLAGS) ./internal/keytable/

demo:
	$(GO) run ./cmd/demo
