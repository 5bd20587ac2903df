"""``python -m meanfield …`` (also ``torchrun … -m meanfield run …``): the command line."""

try:
    from meanfield.cli import main
except KeyboardInterrupt:  # Ctrl-C while torch is still being imported: no traceback
    raise SystemExit(130) from None

raise SystemExit(main())
