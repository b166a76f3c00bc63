"""`python -m tf_entrypoint.serving`: serve a SavedModel (see tf_entrypoint.serving.server)."""

import sys

from tf_entrypoint.serving.server import main

sys.exit(main())
