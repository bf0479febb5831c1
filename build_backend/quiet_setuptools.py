"""setuptools' PEP 517 backend, without its informational editable-install notice.

pip 26.3 relays every warning a build backend raises, even under ``-q``, and
setuptools raises an ``InformationOnly`` notice on every editable install of a
project that maps package folders (here ``parsers/`` and ``dashboards/`` are
installed as ``traceview.parsers`` and ``traceview.dashboards``).  It asks for no
action, so it is dropped; every other setuptools warning still reaches pip.
"""

import warnings

from setuptools.build_meta import *  # noqa: F403  (the PEP 517 hooks, unchanged)
from setuptools.build_meta import __all__  # noqa: F401
from setuptools.warnings import InformationOnly

warnings.filterwarnings("ignore", category=InformationOnly)
