"""``python -m lowbw``: see lowbw.cli."""

import sys

from lowbw.cli import main

sys.exit(main())
