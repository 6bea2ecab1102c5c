# onprem: build, test and benchmark.
#
# Caches live in a fixed folder outside the checkout so that a second run on
# the same machine rebuilds nothing: Go's own caches (GOCACHE, GOMODCACHE at
# their defaults) and $(ONPREM_CACHE) for tools and images built by tests.

GO           ?= go
ONPREM_CACHE ?= /var/cache/onprem
VERSION      ?= 0.1.0
LDFLAGS      := -s -w -X onprem.dev/onprem/installer/version.Version=$(VERSION)
FUZZTIME     ?= 10s
BENCHTIME    ?= 5x

export ONPREM_CACHE

.PHONY: all build test unit fuzz vet fmt-check bench clean

all: build

build:
	$(GO) build -trimpath -ldflags "$(LDFLAGS)" -o bin/onprem ./cmd/onprem

# The whole test suite: formatting, vet, every test, and a short fuzz run of
# the config decoder.
test: fmt-check vet unit fuzz

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi

vet:
	$(GO) vet ./...

unit:
	$(GO) test -count=1 -timeout 60m ./...

fuzz:
	$(GO) test -run='^$$' -fuzz=FuzzDecode -fuzztime=$(FUZZTIME) ./installer/config

# Benchmarks: the in-process render of the whole platform against the same
# work done by the helm and kustomize command-line tools (built from the
# module proxy into $(ONPREM_CACHE)/bin by the benchmark itself); applies,
# converged installs and preflight on the integration ring; bundle size and
# push speed against plain per-image archives and crane.Copy.
bench:
	$(GO) test -run='^$$' -bench=. -benchmem -benchtime=$(BENCHTIME) -count=1 ./installer/render/... ./installer/apply/... ./installer/action/... ./installer/bundle/... ./e2e/testcluster/...

clean:
	rm -rf bin
