"""`python -m tests.e2e.rig {packages,build,up,down,status,logs,restart-kubelet}` from the repository root."""

import sys

from .rig import main

sys.exit(main())
