"""The ``analysis`` extra of ``pyproject.toml``: what the experiment commands need beyond mafka4.

pyspark, pyarrow and matplotlib read and write the experiments' event logs, analyze them and
draw the plots. mafka4's own commands need none of them, so ``pip install mafka4`` leaves them
out; an experiment command run without them is refused at once, naming what to install, before
it starts anything (an experiment would otherwise fail only when it writes its first event
log, minutes into the run).
"""

from __future__ import annotations

import importlib
from typing import Sequence

from mafka4.errors import MissingDependency

ANALYSIS_MODULES = ("pyspark", "pyarrow", "matplotlib")
INSTALL_ANALYSIS = 'pip install "mafka4[analysis]" (in a checkout: pip install -e ".[analysis]")'


def require_analysis_extra(command: str, modules: Sequence[str] = ANALYSIS_MODULES) -> None:
    """Raise ``MissingDependency`` if any of ``modules`` cannot be imported for ``mafka4 command``."""
    missing = [name for name in modules if not _importable(name)]
    if missing:
        raise MissingDependency(f"`mafka4 {command}` needs {', '.join(missing)}, from the analysis extra: "
                                f"{INSTALL_ANALYSIS}")


def _importable(name: str) -> bool:
    # Imported, not only looked up: a package that is there but fails to import is as missing.
    try:
        importlib.import_module(name)
    except ImportError:
        return False
    return True
