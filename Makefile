# The two commands of the quick start: `make run` and `make test`.
# Both install what they need on a fresh Debian 12 machine first: `make run`
# what building and running funcd needs, `make test` that and the test and
# benchmark tools (scripts/install-deps.sh runtime|test).

BUILD      ?= build
TEST_BUILD ?= build-test
DATA_DIR   ?= $(CURDIR)/.funcd-data
MESON_OPTS ?=

.PHONY: all deps test-deps build run test bench fuzz clean

all: build

deps:
	@bash scripts/install-deps.sh runtime

test-deps:
	@bash scripts/install-deps.sh test

# --wrap-mode=nodownload: funcd's own builds use Debian's packages (make deps)
# and never fetch the subprojects/ wraps, which are for host projects.
$(BUILD)/build.ninja:
	meson setup $(BUILD) --buildtype=release -Dtests=disabled --wrap-mode=nodownload $(MESON_OPTS)

build: deps $(BUILD)/build.ninja
	meson compile -C $(BUILD)

# Starts funcd on its embedded default: a durable data directory under the
# repository (.funcd-data; DATA_DIR=... to move it), the developer token,
# API on 127.0.0.1:8080, data plane on 127.0.0.1:8081.
run: build
	./$(BUILD)/bin/funcd/funcd --data-dir $(DATA_DIR) --dev

# The whole suite under ASan+UBSan; the last line is "N passed, N failed".
test: test-deps
	@bash scripts/test.sh $(TEST_BUILD)

bench: test-deps build
	@bash bench/run.sh $(BUILD)
	@bash bench/serving.sh $(BUILD)
	@bash bench/coldstart.sh $(BUILD)
	@bash bench/fnrunner.sh $(BUILD)
	@bash bench/durable.sh $(BUILD)
	@bash bench/cluster.sh $(BUILD)

clean:
	rm -rf $(BUILD) $(TEST_BUILD)
