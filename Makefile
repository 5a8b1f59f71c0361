# sdscore — `make demo` and `make test` do all the set-up on a fresh Debian/Ubuntu machine.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
# The editable install maps the package's files as they were at install time: a new module or
# folder needs a re-install, so the stamp's name carries a hash of the list of Python files.
PY_FILES_HASH := $(shell find engine kernels -name '*.py' 2>/dev/null | LC_ALL=C sort | md5sum | cut -c1-12)
STAMP := $(VENV)/.sdscore-installed-$(PY_FILES_HASH)
APT_PACKAGES := espeak-ng flite festival festvox-kallpc16k festvox-us-slt-hts sox clang libclang-rt-14-dev alsa-utils chromium
# Every C++ source and header in csrc/'s area folders (not the fuzzer): an edit rebuilds the core.
NATIVE_SOURCES := $(shell find csrc -path csrc/fuzz -prune -o \( -name '*.cpp' -o -name '*.hpp' \) -print) \
                  CMakeLists.txt pyproject.toml
DEMO_OUT ?= out/demo

.PHONY: install system-deps demo test bench fuzz clean

install: $(STAMP)

# System packages: TTS voices for the synthetic corpus, sox, clang/libFuzzer for the WAV fuzzer,
# alsa-utils for its 48 kHz recorded voice prompts (the resampler's real-speech parity test),
# chromium for the HTML report's browser test.
system-deps:
	@missing=$$(for p in $(APT_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || echo $$p; done); \
	if [ -n "$$missing" ]; then \
	  echo "installing system packages:" $$missing; \
	  SUDO=$$([ "$$(id -u)" = 0 ] || echo sudo); \
	  $$SUDO apt-get update -q && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -q $$missing; \
	fi

$(STAMP): $(NATIVE_SOURCES) Makefile tests/requirements-verl.txt tests/requirements-openrlhf.txt | system-deps
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	# the local CPU build of torch first, so nothing pulls a CUDA build; never torchaudio
	$(PIP) install -q torch==2.13.0
	$(PIP) install -q "scikit-build-core>=0.10" "pybind11>=2.12" cmake ninja "setuptools<81"
	$(PIP) install -q --no-build-isolation -e ".[all]"
	# verl's reward loop for tests/test_verl_http.py, without verl's own requirements (they pin
	# transformers<5.11 and pull its training stack): the modules that loop imports, pinned
	$(PIP) install -q --no-deps -r tests/requirements-verl.txt
	# OpenRLHF's remote-RM client and agent path for tests/test_openrlhf.py, without its training and
	# rollout stack (it pins transformers and pulls deepspeed, flash-attn, ray, vllm)
	$(PIP) install -q --no-deps -r tests/requirements-openrlhf.txt
	$(PY) -c "import sdscore._native"
	rm -f $(VENV)/.sdscore-installed-*
	touch $@

demo: install
	$(VENV)/bin/sdscore demo --out $(DEMO_OUT)

test: install
	$(PY) -m pytest -q -n 2 --dist loadgroup tests

bench: install
	$(VENV)/bin/sdscore bench

fuzz: install
	bash csrc/fuzz/run_fuzzer.sh 300

clean:
	rm -rf build .fuzz out
