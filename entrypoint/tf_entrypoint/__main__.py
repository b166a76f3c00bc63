"""`python -m tf_entrypoint` is `tf-entrypoint`."""

import sys

from tf_entrypoint.cli import main

sys.exit(main())
