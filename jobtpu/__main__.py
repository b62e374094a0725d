"""`python -m jobtpu` runs the command line."""

from jobtpu.cli import main

raise SystemExit(main())
