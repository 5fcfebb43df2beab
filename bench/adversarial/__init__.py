"""Adversarial benchmark (issue 20, "Bounded cost"): request bodies that stall or break the proxy.

Hostile regex inputs per pattern, huge lines, millions of lines, deep JSON, thousands of
messages, parallel calls, binary, base64, CJK and emoji: each planned cold in its own process
against one tiktoken encode of its text, its peak RSS read and the pipeline's invariants
checked, then the heaviest POSTed to a running proxy while small requests measure the wait.
Run it with `python -m bench.adversarial`; see bench/README.md, section "adversarial".
"""
