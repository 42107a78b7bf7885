"""Shared pytest fixtures. Edit with targeted insertions: several areas add fixtures here."""

import os

# One intra/inter-op thread per TF process: tests start several worker processes on
# 2 cores, where oversubscription costs 25-45 % (measured).
os.environ.setdefault("TF_NUM_INTRAOP_THREADS", "1")
os.environ.setdefault("TF_NUM_INTEROP_THREADS", "1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
