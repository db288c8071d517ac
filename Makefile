# The two commands of the README, plus conveniences. Everything real lives in
# CMake; this file only sequences: install missing packages, configure, build,
# then run the tests (make test) or the demo job (make demo).
BUILD ?= build
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
CMAKE_FLAGS ?= -DCMAKE_BUILD_TYPE=RelWithDebInfo

.PHONY: all deps build test test-all demo install clean

all: build

deps:
	@scripts/deps.sh

build: deps
	cmake -S . -B $(BUILD) $(CMAKE_FLAGS)
	cmake --build $(BUILD) -j$(JOBS)

# test samples the long matrices (tests/e2e/lib.sh, sample_cases; a
# different sample each commit); test-all runs every case of them. Both run
# ctest through scripts/test.sh: the tests that mostly wait (label waits)
# beside the others
test: build
	scripts/test.sh $(BUILD)

test-all: build
	PLAIT_TEST_ALL=1 scripts/test.sh $(BUILD)

demo: build
	@scripts/demo.sh $(BUILD)

install: build
	cmake --install $(BUILD)

clean:
	rm -rf $(BUILD)
