"""`python -m analysis` is `fa-traffic`."""
from analysis.cli import main

raise SystemExit(main())
