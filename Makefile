# tollgate: the two commands of the README, and their parts.
#   make run    build and start the gateway on its embedded defaults
#   make test   install what is missing, build, check the formatting, run every test (plus an
#               ASan+UBSan unit build, and a TSan build of the store, engine and usage unit tests)
SHELL := /bin/bash
BUILD ?= build
BUILD_ASAN ?= build-asan
BUILD_TSAN ?= build-tsan
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=

.PHONY: deps build build-asan build-tsan test test-unit test-asan test-tsan bench run format \
        format-check tidy clean package

deps:
	@scripts/install-deps.sh
	@scripts/install-node-deps.sh

$(BUILD)/build.ninja:
	cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo $(CMAKE_FLAGS)

build: deps $(BUILD)/build.ninja
	cmake --build $(BUILD) -j $(JOBS)

$(BUILD_ASAN)/build.ninja:
	cmake -S . -B $(BUILD_ASAN) -G Ninja -DCMAKE_BUILD_TYPE=Debug -DTOLLGATE_SANITIZE=ON \
	  -DTOLLGATE_UNIT_ONLY=ON -DTOLLGATE_BENCH=OFF $(CMAKE_FLAGS)

build-asan: deps $(BUILD_ASAN)/build.ninja
	cmake --build $(BUILD_ASAN) -j $(JOBS)

test-asan: build-asan
	ctest --test-dir $(BUILD_ASAN) -L unit --output-on-failure -j $(JOBS)

# ThreadSanitizer over the unit tests of the code that runs on several threads (the store, the
# engine, the usage meter; tests/CMakeLists.txt): only they are built (tollgate_tsan_tests),
# optimised as TSan advises (at -O0 its runs take three times longer).
$(BUILD_TSAN)/build.ninja:
	cmake -S . -B $(BUILD_TSAN) -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTOLLGATE_SANITIZE=thread \
	  -DTOLLGATE_UNIT_ONLY=ON -DTOLLGATE_BENCH=OFF $(CMAKE_FLAGS)

build-tsan: deps $(BUILD_TSAN)/build.ninja
	cmake --build $(BUILD_TSAN) -j $(JOBS) --target tollgate_tsan_tests

test-tsan: build-tsan
	ctest --test-dir $(BUILD_TSAN) -L tsan --output-on-failure -j $(JOBS)

test: build build-asan build-tsan
	scripts/format-check.sh
	ctest --test-dir $(BUILD) --output-on-failure -j $(JOBS)
	ctest --test-dir $(BUILD_ASAN) -L unit --output-on-failure -j $(JOBS)
	ctest --test-dir $(BUILD_TSAN) -L tsan --output-on-failure -j $(JOBS)

bench: build
	scripts/run-benchmarks.sh

run: build
	scripts/run-demo.sh

format:
	clang-format -i $$(git ls-files '*.hpp' '*.cpp')

format-check: deps
	scripts/format-check.sh

# clang-tidy with .clang-tidy's checks over the sources, from the build's compile commands.
tidy: build
	scripts/tidy.sh $(BUILD)

# The .deb of CPack (packaging/README.md): $(BUILD)/packages/tollgate_<version>-1_<arch>.deb, its
# Depends computed by dpkg-shlibdeps, and the debug symbols in tollgate-dbgsym_*.ddeb beside it.
package: build
	cd $(BUILD) && cpack -G DEB --config CPackConfig.cmake
	@echo "package: $$(realpath $$(ls -t $(BUILD)/packages/tollgate_*.deb | head -n 1))"

clean:
	rm -rf $(BUILD) $(BUILD_ASAN) $(BUILD_TSAN)
