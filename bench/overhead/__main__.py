"""`python -m bench.overhead`: see bench/README.md, section "overhead"."""

import sys

from bench.overhead.runner import main

sys.exit(main())
