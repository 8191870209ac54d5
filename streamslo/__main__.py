"""``python -m streamslo`` runs the command line."""

import sys

from streamslo.cli import main

sys.exit(main())
