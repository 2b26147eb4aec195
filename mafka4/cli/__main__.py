"""``python -m mafka4.cli``: the ``mafka4`` command without its console script."""

import sys

from mafka4.cli.main import main

sys.exit(main())
