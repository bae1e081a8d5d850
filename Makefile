# Every target sets itself up: a venv in .venv, and from apt graphviz (`dot`) and chromium (the
# HTML tests open pages in a real headless browser, driven by the `playwright` package from the
# test extra with the system chromium: no browser download) when they are missing.
VENV   ?= .venv
PY     := $(VENV)/bin/python
GT     := $(VENV)/bin/graphtool
SUDO   := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
STAMP  := $(VENV)/.installed

.PHONY: setup demo test bench docs fixtures fuzz clean readme-picture

setup: $(STAMP)

$(STAMP): pyproject.toml
	@missing=""; command -v dot >/dev/null || missing="$$missing graphviz"; \
	 command -v chromium >/dev/null || missing="$$missing chromium"; \
	 if [ -n "$$missing" ]; then $(SUDO) apt-get update -qq && $(SUDO) apt-get install -y -qq $$missing >/dev/null; fi
	@[ -x $(PY) ] || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test,bench,docs]'
	@touch $@

demo: setup
	$(GT) inspect fixtures/conv_bn.onnx
	@if $(GT) optimize --help >/dev/null 2>&1; then \
		$(GT) optimize fixtures/torch/bert_ts.onnx -o /tmp/graphtool-demo-bert.onnx --level 1; fi

test: setup
	$(PY) -m pytest -n 2 -q

docs: setup
	@# the API reference from docstrings (pdoc), warnings are errors; guides are docs/*.md
	$(PY) docs/make_api.py build/api

bench: setup
	$(PY) bench/run_all.py

fixtures: setup
	$(PY) fixtures/make_fixtures.py

readme-picture: setup
	@# docs/diff.png: a real diff's HTML page, screenshot by headless chromium (bench/readme_picture.py)
	$(PY) bench/readme_picture.py docs/diff.png

fuzz: setup
	@# make fuzz SECONDS=N: coverage-guided fuzzing of load → IR → save → load → inspect (fuzz/fuzz_load.py)
	@mkdir -p $(or $(FUZZ_DIR),/tmp/graphtool-fuzz)/corpus $(or $(FUZZ_DIR),/tmp/graphtool-fuzz)/crashes
	$(PY) fuzz/fuzz_load.py -max_total_time=$(or $(SECONDS),60) -timeout=20 -rss_limit_mb=3000 -print_final_stats=1 \
		-artifact_prefix=$(or $(FUZZ_DIR),/tmp/graphtool-fuzz)/crashes/ $(or $(FUZZ_DIR),/tmp/graphtool-fuzz)/corpus

clean:
	rm -rf $(VENV) .pytest_cache build
