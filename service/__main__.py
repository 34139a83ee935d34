"""``python -m service`` is the ``microbatch`` command."""

import sys

from service.cli import main

sys.exit(main())
