"""Overhead benchmark: what the proxy costs on top of a thin pass-through, measured on loopback.

Every component runs as its own OS process on 127.0.0.1 (fake upstream, floor proxy, the proxy,
optionally LiteLLM, and the load generator), so the server under test pays for its own event loop
and the figures read from /proc are its alone. Figures are ratios within one run with interleaved
rounds, because the machine is shared and noisy. Run it with `python -m bench.overhead`.
"""
