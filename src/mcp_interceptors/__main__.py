"""`python -m mcp_interceptors` runs the CLI."""

import sys

from mcp_interceptors.cli import main

sys.exit(main())
