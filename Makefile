# relayctl: see README.md. Every target runs from a fresh clone.
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo devel)
# The commit relayctl records in every receipt (relayctl --version prints it
# too): stamped, since -buildvcs=false leaves Go's own VCS stamp out.
# A tarball without git has none: relayctl then says so.
COMMIT ?= $(shell c=$$(git rev-parse HEAD 2>/dev/null) && { git diff --quiet HEAD 2>/dev/null || c=$$c-dirty; } && echo $$c)
RELAY_VERSION ?= 1.8.0
GO ?= go
# Release builds, as Go tools ship: static (CGO_ENABLED=0, so relayd runs on
# any host and in any lab host), no local paths (-trimpath), no symbol table
# or DWARF (-s -w), no VCS stamp (-buildvcs=false: a checkout and a tarball
# of one commit build alike), the version stamped. The same commit and Go
# toolchain give the same sha256 on any machine, so a reviewer can rebuild
# bin/relayd and check a plan's sha256 (cmd/relayd/reproducible_test.go;
# internal/lab.BuildFlags are the same flags). relayd's version is stamped
# twice, as main.Version and as its marker (relay/capability.VersionFlags),
# which relayctl validate and plan read from the bytes to check a spec's
# relay.release.version.
GOBUILD = CGO_ENABLED=0 $(GO) build -trimpath -buildvcs=false
# make install PREFIX=/usr/local (DESTDIR for packaging).
PREFIX ?= /usr/local
DESTDIR ?=

.PHONY: agent build install test test-unit lab-deps lint lab lab-down demo demo-systemd demo-bench fuzz bench-apply bench-plan bench-sim restart-impact clean

# relayctl's host agent, one static binary for each machine relayctl
# ships it to, into agentbin/bin, which relayctl embeds (agentbin): built
# before anything that embeds it, reproducible like the rest.
AGENT_ARCHS = amd64 arm64
agent:
	@for a in $(AGENT_ARCHS); do \
	  GOOS=linux GOARCH=$$a $(GOBUILD) -ldflags "-s -w" -o agentbin/bin/relayctl-agent-linux-$$a ./cmd/relayctl-agent || exit 1; \
	done

build: agent
	$(GOBUILD) -ldflags "-s -w -X main.Version=$(VERSION) -X main.Commit=$(COMMIT)" -o bin/relayctl ./cmd/relayctl
	$(GOBUILD) -ldflags "-s -w -X main.Version=$(RELAY_VERSION) -X main.versionMarker=relayd-version:$(RELAY_VERSION)" -o bin/relayd ./cmd/relayd
	$(GOBUILD) -ldflags "-s -w" -o bin/relaylab ./internal/cmd/relaylab
	@cd bin && sha256sum relayctl relayd

# relayctl and relayd in PREFIX/bin, relayctl(1) and the bash, zsh and fish
# completions, each made by the relayctl just built (relayctl man,
# relayctl completion SHELL).
install: build
	bin/relayctl man > bin/relayctl.1
	bin/relayctl completion bash > bin/relayctl.bash
	bin/relayctl completion zsh > bin/_relayctl
	bin/relayctl completion fish > bin/relayctl.fish
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/share/man/man1 \
	  $(DESTDIR)$(PREFIX)/share/bash-completion/completions \
	  $(DESTDIR)$(PREFIX)/share/zsh/site-functions \
	  $(DESTDIR)$(PREFIX)/share/fish/vendor_completions.d
	install -m 0755 bin/relayctl bin/relayd $(DESTDIR)$(PREFIX)/bin/
	install -m 0644 bin/relayctl.1 $(DESTDIR)$(PREFIX)/share/man/man1/relayctl.1
	install -m 0644 bin/relayctl.bash $(DESTDIR)$(PREFIX)/share/bash-completion/completions/relayctl
	install -m 0644 bin/_relayctl $(DESTDIR)$(PREFIX)/share/zsh/site-functions/_relayctl
	install -m 0644 bin/relayctl.fish $(DESTDIR)$(PREFIX)/share/fish/vendor_completions.d/relayctl.fish

# Every test, the lab tests included (they need root, openssh-server, iproute2).
# -p 1 keeps test binaries from competing for this machine's two cores and
# for the kernel's global rmem_max (internal/kerneltest locks it as well).
# Every package runs under the race detector but one: cmd/relayctl's lab
# tests (end-to-end runs of the CLI against lab hosts) run without it, and
# its other tests with it. Under -race those lab tests took 30 of the
# suite's 40 minutes on the project's 2-core machine, each first contact's
# plan 9-15 s against 1.6 s; the fleet's concurrency they run is rollout's,
# which its own tests and the fleet simulator run under -race. The timeout
# leaves a slower machine room to finish rather than fail at a deadline.
RACE_PKGS = $(shell $(GO) list ./... | grep -v '/cmd/relayctl$$')
test: lab-deps agent
	$(GO) test -race -count=1 -p 1 -timeout 75m $(RACE_PKGS)
	$(GO) test -race -count=1 -short -timeout 30m ./cmd/relayctl
	$(GO) test -count=1 -timeout 75m ./cmd/relayctl

# What the lab needs (openssh-server, iproute2, util-linux, procps).
lab-deps:
	./scripts/lab-deps.sh

# Everything but the lab tests, the tests that change the machine's global
# sysctls and the tests that drive the real relayd for seconds (all skip
# under -short: lab.Require, kerneltest.Lock). CI runs make test.
test-unit: agent
	$(GO) test -race -short ./...

# shellcheck checks every shell script, the ones relayctl runs on hosts as
# root (rollout/*.sh) first among them; it is installed when missing.
lint: agent
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	@command -v shellcheck >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq shellcheck >/dev/null; }
	shellcheck -S warning $$(git ls-files '*.sh')
	$(GO) run honnef.co/go/tools/cmd/staticcheck@v0.8.2 ./...

# A short run of every fuzz target, from its seed corpus.
fuzz: agent
	@for pkg in $$($(GO) list ./...); do \
	  for t in $$($(GO) test -list '^Fuzz' $$pkg | grep '^Fuzz'); do \
	    echo "fuzz $$pkg $$t"; $(GO) test -run '^$$' -fuzz "^$$t$$" -fuzztime 10s $$pkg || exit 1; \
	  done; \
	done

# One local lab host on the kernel's 212,992-byte defaults: plan, apply,
# read-back, receipt. Needs root; installs openssh-server if missing.
demo: lab-deps build
	./scripts/demo.sh

# One lab host that stays up, or with HOSTS=N (make lab HOSTS=4) a fleet
# of N, with ssh_config, known_hosts, ready specs and lab/bin/relayctl
# (relayctl holding the machine-wide sysctl lock) in lab/, to try relayctl
# by hand (README.md, "A ten-minute walkthrough"); lab-down stops it and
# puts back the rmem values it found. Either may run again, fail or be
# interrupted and leaves the machine as it was (docs/lab.md). HOSTS, given
# on make's command line, reaches the script in its environment.
# Needs root.
lab: lab-deps build
	./scripts/lab.sh up

lab-down:
	./scripts/lab.sh down

# The same demo on a lab host that boots a real systemd, relayd running as
# relay/dist/relayd.service.
demo-systemd: lab-deps build
	./scripts/demo.sh --systemd

# The whole incident on one lab host: a ramp finds the knee on the 212,992-byte
# default, plan + apply ship the fix, the same ramp runs again.
demo-bench: lab-deps build
	./scripts/demo-bench.sh

# relayctl apply on 20 lab hosts against parallel-ssh and ansible-playbook
# (medians, ratios, peak memory). Needs root; changes and restores net.core.rmem_*.
bench-apply: lab-deps
	./scripts/bench-apply.sh

# The fleet simulator: relayctl plan and apply on 1,000, 10,000 and 50,000
# simulated hosts (only the hosts simulated), medians of 3 runs a size:
# docs/bench-fleet.md. Needs no root and changes nothing on the machine.
bench-sim:
	./scripts/bench-sim.sh

# relayctl plan against 1 and 20 lab hosts (median of 5).
bench-plan: lab-deps
	./scripts/bench-plan.sh

# What a window costs the players (datagrams lost, lobbies cut, the gap) for a
# plain restart, the drain gate (forced and not) and the handoff, through
# relay-service and through relayctl apply, on one lab host: docs/restart.md.
# Needs root; sets and restores net.core.rmem_max under the kerneltest lock.
restart-impact: lab-deps
	./scripts/restart-impact.sh --runs 5

clean:
	rm -rf bin demo demo-bench
