"""``python -m node_resolver``: run the node agent."""

import sys

from .cli import main

sys.exit(main())
