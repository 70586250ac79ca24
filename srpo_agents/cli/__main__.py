"""``python -m srpo_agents.cli``: the ``srpo`` command."""

import sys

from srpo_agents.cli import main

sys.exit(main())
