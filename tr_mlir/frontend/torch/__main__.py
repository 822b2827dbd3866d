"""``python -m tr_mlir.frontend.torch FILE.py:FACTORY --input-shape H,W,C``: print the arch IR (:func:`main`)."""

import sys

from tr_mlir.frontend.torch import main

sys.exit(main())
