# The two commands of README.md: `make demo` and `make test`.
.PHONY: demo test setup unit

DEMO_CONFIG ?= linux

setup:
	@scripts/install-host-deps
	@./ukl sources

demo: setup
	./ukl build examples/hello/hello.c --config $(DEMO_CONFIG) -o out/hello
	./ukl run out/hello -- hello from the host

test: setup
	.venv/bin/python -m pytest -v tests

unit: setup
	.venv/bin/python -m pytest -v tests/unit
