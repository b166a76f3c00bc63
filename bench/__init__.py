"""Benchmarks for tf-entrypoint: `python -m bench run SCENARIO|all` (bench/__main__.py);
every benchmark is a scenario of bench/scenarios.py.

The host-side harness (run, sweep, overhead, serving, report, common) is
stdlib-only apart from matplotlib for the plots; workload.py and
overhead_probe.py run inside the image.
"""
