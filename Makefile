# The two commands of README.md: `make demo` and `make test`.
.PHONY: demo test setup unit lint

setup:
	@scripts/install-host-deps
	@./ukl sources

demo: setup
	./ukl build examples/hello/hello.c --config linux -o out/hello
	./ukl run out/hello -- hello from the host
	./ukl build examples/hello/hello.c --config base -o out/hello-ukl
	./ukl run out/hello-ukl -- hello from the host

test: setup
	scripts/lint
	.venv/bin/python -m pytest -v tests

lint: setup
	scripts/lint

unit: setup
	.venv/bin/python -m pytest -v tests/unit
