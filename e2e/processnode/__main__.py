"""`python3 -m e2e.processnode` entry point."""

import sys

from .main import main

sys.exit(main())
