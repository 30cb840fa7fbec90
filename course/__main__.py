"""`python -m course ...` runs the course's command line."""

from course.cli import main

raise SystemExit(main())
