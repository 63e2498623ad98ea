"""`python -m dycl_iree.bench ...`, the same as `python -m dycl_iree bench ...`."""

import sys

from .cli import main

sys.exit(main())
