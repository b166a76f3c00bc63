"""`python -m tf_entrypoint.serving`: serve a SavedModel (see tf_entrypoint.serving.main)."""

from tf_entrypoint.serving.main import exit_now, main

# exit_now, not sys.exit: worker threads still computing calls cut off at the
# end of the grace period must not hold the exit (server.exit_now).
exit_now(main())
