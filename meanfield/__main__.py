"""``python -m meanfield …`` (also ``torchrun … -m meanfield run …``): the command line."""

from meanfield.cli import main

raise SystemExit(main())
