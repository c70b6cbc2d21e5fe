"""The benchmarks: scripts run on demand (``.venv/bin/python tests/benchmarks/bench_<name>.py``), which
print ratios against a reference measured in the same run (tests/benchmarks/README.md). They are not
tests: nothing here is collected, and no test imports them."""

collect_ignore_glob = ["*.py"]
