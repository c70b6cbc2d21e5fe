"""The differential tests: the same requests to the real Triton 2.51 and to fpgaserve, compared byte for byte.
The real Triton comes from the ``tritonserver_path`` fixture (support/tools.py): installed once, else
skipped saying why, or failed under CI=true.
"""
