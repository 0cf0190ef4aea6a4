# The two commands of README.md: `make demo` and `make test`.
.PHONY: demo test test-all setup unit lint results-apps

setup:
	@scripts/install-host-deps
	@./ukl sources

demo: setup
	./ukl build examples/hello/hello.c --config linux -o out/hello
	./ukl run out/hello -- hello from the host
	./ukl build examples/hello/hello.c --config base -o out/hello-ukl
	./ukl run out/hello-ukl -- hello from the host

# `make test` is README's and CI's command (at most 45 minutes on 2 cores
# with warm caches); `make test-all` runs the full matrix (every option set
# in every context, the debug kernel everywhere). docs/dev/testing.md says
# what runs in which tier.
test: setup
	scripts/lint
	UKL_TEST_TIER=test .venv/bin/python -m pytest -v tests

test-all: setup
	scripts/lint
	UKL_TEST_TIER=all .venv/bin/python -m pytest -v tests

lint: setup
	scripts/lint

unit: setup
	.venv/bin/python -m pytest -v tests/unit

# The application results in docs/: guest instructions per request (in-guest
# load generator, -icount); memcached's latency against offered load on its
# own, taken from that same run (results-apps.json); Redis's instructions
# by function (--by-function); the same under a
# distribution's mitigations with modelled cycles; and wall-clock time under
# real host clients (a tap device in a private network namespace: needs
# root), the servers under every profile.
results-apps: setup
	./ukl bench app --configs linux,base,base+ret+byp,base+ret+byp+shortcut --icount \
		--markdown docs/results/results-apps.md --json docs/results/results-apps.json --plot docs/results/results-apps.png
	./ukl bench app redis --configs linux,base,base+ret+byp,base+ret+byp+shortcut --icount --by-function \
		--markdown docs/results/results-apps-profile.md --json docs/results/results-apps-profile.json
	./ukl bench app memcached --from-json docs/results/results-apps.json \
		--markdown docs/results/results-apps-load.md --json docs/results/results-apps-load.json --plot docs/results/results-apps-load.png
	./ukl bench app --configs linux-mitigated,base-mitigated,base-mitigated+ret+byp,base-mitigated+ret+byp+shortcut \
		--icount --model cycles --markdown docs/results/results-apps-mitigated.md --json docs/results/results-apps-mitigated.json \
		--plot docs/results/results-apps-mitigated.png
	./ukl bench app --clients host --configs linux,base --repeat 3 \
		--markdown docs/results/results-apps-wall.md --json docs/results/results-apps-wall.json --plot docs/results/results-apps-wall.png
	./ukl bench app redis redis-explicit --clients host \
		--configs linux,base,base+ret+byp,base+ret+byp+shortcut --repeat 3 --markdown docs/results/results-apps-wall-profiles.md \
		--json docs/results/results-apps-wall-profiles.json --plot docs/results/results-apps-wall-profiles.png
	./ukl bench app memcached nginx --clients host \
		--configs linux,base,base+ret+byp,base+ret+byp+shortcut --repeat 3 \
		--markdown docs/results/results-apps-wall-profiles-servers.md --json docs/results/results-apps-wall-profiles-servers.json \
		--plot docs/results/results-apps-wall-profiles-servers.png

# Boot figures in docs/: image sizes, guest time from the kernel's first
# instruction to main() (and a server's first answer) under -icount, and the
# least memory each image as shipped works in (bisection), beside Lupine's
# and Unikraft's published figures (issue 36). Images carry no busybox: the
# smoke tests load it as a test layer.
.PHONY: results-boot
# Then hello and Redis booted as Firecracker boots (microvm, PVH), under init
# and as PID 1 with no initramfs, beside the peers built and measured here.
results-boot: setup
	./ukl bench boot examples/hello/hello.c redis nginx memcached sqlite3 --configs linux,base --icount \
		--specialize --json out/results-boot-pc.json
	./ukl bench boot examples/hello/hello.c redis --configs base --icount --specialize \
		--boots microvm-direct,microvm-direct-bare --peers firecracker-linux,unikraft-hello \
		--json out/results-boot-peers.json
	./ukl bench boot --from-json out/results-boot-pc.json --from-json out/results-boot-peers.json \
		--markdown docs/results/results-boot.md --json docs/results/results-boot.json --plot docs/results/results-boot.png

# Each boot saving on its own (no_timer_check, noapictimer, pmtmr=0, direct boot
# through the PVH entry, -M microvm), without the memory bisection.
.PHONY: results-boot-methods
results-boot-methods: setup
	./ukl bench boot examples/hello/hello.c redis --configs linux,base --icount --no-memory \
		--boots pc-plain,pc-no_timer_check,pc-noapictimer,pc-trust_cpu,pc-pmtmr,pc-noapictimer-pmtmr,pc,pc-direct,microvm-direct,microvm-direct-pid1,microvm-direct-bare \
		--markdown docs/results/results-boot-methods.md --json docs/results/results-boot-methods.json

# Each kernel compression (kernel/configs/compression): the image's size
# against the decompressor's instructions.
.PHONY: results-boot-compression
results-boot-compression: setup
	./ukl bench boot examples/hello/hello.c redis --configs base --icount --no-memory \
		--compressions lz4,gzip,zstd,xz --boots pc \
		--markdown docs/results/results-boot-compression.md --json docs/results/results-boot-compression.json

# The kernel compiled with -Os against the configurations' -O2, general
# and specialized (docs/results/results-boot-optimize.md).
.PHONY: results-boot-optimize
results-boot-optimize: setup
	./ukl bench boot examples/hello/hello.c redis --configs base --specialize --icount --no-memory \
		--json out/results-boot-O2.json
	./ukl bench boot examples/hello/hello.c redis --configs base --specialize --icount --no-memory \
		--optimize size --json out/results-boot-Os.json
	./ukl bench boot --from-json out/results-boot-O2.json --from-json out/results-boot-Os.json \
		--markdown docs/results/results-boot-optimize.md --json docs/results/results-boot-optimize.json

# Where the boot's instructions go, by function, from vmlinux's entry to
# main() and the first reply: hello and Redis, general and specialized,
# booted direct, with 1 GiB (ukl run's) and 128 MiB (docs/design/boot-time.md).
.PHONY: results-boot-profile
results-boot-profile: setup
	./ukl bench boot examples/hello/hello.c redis --configs base --specialize --icount --no-memory \
		--boots pc-direct --by-function --json out/results-boot-profile-1024.json
	./ukl bench boot examples/hello/hello.c redis --configs base --specialize --icount --no-memory \
		--boots pc-direct --by-function --memory 128 --json out/results-boot-profile-128.json
	./ukl bench boot --from-json out/results-boot-profile-1024.json --from-json out/results-boot-profile-128.json \
		--markdown docs/results/results-boot-profile.md --json docs/results/results-boot-profile.json

# LTP's system-call tests as UKL applications (docs/results/conformance-ltp.md):
# every test that passes under linux passes under each UKL profile or is
# listed in tests/ltp/divergences.toml, or the command fails.
.PHONY: results-conformance
results-conformance: setup
	./ukl conformance ltp --tests syscalls --configs linux,base,base-debug,base+ret+byp+shortcut \
		--json docs/results/conformance-ltp.json --markdown docs/results/conformance-ltp.md

# System-call latencies (LEBench), on the plain and on the mitigated
# kernels, with modelled cycles and the profiles by function
# (docs/results/results.md, results-mitigated.md).
.PHONY: results-syscalls
results-syscalls: setup
	./ukl bench syscalls --configs linux,base,base+byp,base+ret,base+ret+byp --icount --model cycles \
		--by-function --points getppid,read:1,write:1 --json docs/results/results.json \
		--plot docs/results/results.png --markdown docs/results/results.md
	./ukl bench syscalls --configs linux-mitigated,base-mitigated,base-mitigated+byp,base-mitigated+ret,base-mitigated+ret+byp \
		--icount --model cycles --json docs/results/results-mitigated.json --plot docs/results/results-mitigated.png \
		--markdown docs/results/results-mitigated.md

# Remote system calls against local ones (docs/results/results-remote.md).
.PHONY: results-remote
results-remote: setup
	./ukl bench remote --repeat 3 --json docs/results/results-remote.json \
		--markdown docs/results/results-remote.md --plot docs/results/results-remote.png

# The applications' own test suites (root: Redis's whole suite needs a tap
# device) and glibc's (docs/results/apptest-*.md, glibc-tests.md).
.PHONY: results-suites
results-suites: setup
	./ukl apptest redis --configs linux,base --all --json docs/results/apptest-redis.json \
		--markdown docs/results/apptest-redis.md
	./ukl apptest memcached --configs linux,base --markdown docs/results/apptest-memcached.md
	./ukl apptest nginx --configs linux,base --markdown docs/results/apptest-nginx.md
	./ukl libc tests --json docs/results/glibc-tests.json --markdown docs/results/glibc-tests.md

# Secrecy's GROUP-BY on three guests (root: a bridge in a network namespace;
# docs/results/results-secrecy.md, read with docs/design/secrecy.md), each
# party's instructions and modelled cycles counted by our QEMU plugin.
.PHONY: results-secrecy
results-secrecy: setup
	./ukl bench secrecy --rows 128,1024 --spin-rows 128 --repeat 3 --count-insns \
		--json docs/results/results-secrecy.json \
		--markdown docs/results/results-secrecy.md --plot docs/results/results-secrecy.png

# The paper's largest point (10,000 rows; Secrecy needs a power of two): one
# counted run per configuration, about 50 minutes under TCG on 2 cores.
.PHONY: results-secrecy-large
results-secrecy-large: setup
	./ukl bench secrecy --rows 8192 --repeat 1 --count-insns --timeout 3600 \
		--json docs/results/results-secrecy-8192.json \
		--markdown docs/results/results-secrecy-8192.md --plot docs/results/results-secrecy-8192.png

# Every report of docs/results/ (hours under TCG).
.PHONY: results
results: results-syscalls results-remote results-apps results-boot results-boot-methods \
	results-boot-compression results-boot-optimize results-boot-profile results-conformance results-suites \
	results-secrecy results-secrecy-large
