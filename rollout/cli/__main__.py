"""``python -m mjharness.rollout.cli``: the ``mjharness`` program."""

import sys

from .app import main

sys.exit(main())
