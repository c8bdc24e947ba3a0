# Stands for "numpy is not installed" (prepended to PYTHONPATH by examples.showcase_py and
# tests/python/test_engine_api.py): the Python showcase must run on a python3 without numpy.
raise ImportError("No module named 'numpy' (blocked for the test: examples must not need numpy)")
