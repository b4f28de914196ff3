"""`python3 -m e2e.apiserver` entry point."""

import sys

from .main import main

sys.exit(main())
