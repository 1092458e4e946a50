"""``python -m mjharness.rollout.cli``: the ``mjharness`` program (signals handled first: ``entry``)."""

import sys

from .entry import main

sys.exit(main())
