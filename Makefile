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
# different sample each commit); test-all runs every case of them
test: build
	cd $(BUILD) && ctest --output-on-failure -j2

test-all: build
	cd $(BUILD) && PLAIT_TEST_ALL=1 ctest --output-on-failure -j2

demo: build
	@scripts/demo.sh $(BUILD)

install: build
	cmake --install $(BUILD)

clean:
	rm -rf $(BUILD)
