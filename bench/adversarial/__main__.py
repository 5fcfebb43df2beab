"""`python -m bench.adversarial`: see bench/README.md, section "adversarial"."""

import sys

from bench.adversarial.runner import main

sys.exit(main())
