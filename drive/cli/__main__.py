"""``python -m drive.cli`` runs the ``drive`` command."""

import sys

from drive.cli import main

sys.exit(main())
