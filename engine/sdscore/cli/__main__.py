"""`python -m sdscore.cli ...` = `sdscore ...`."""

import sys

from sdscore.cli import main

sys.exit(main())
