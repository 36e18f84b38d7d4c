"""``python -m benchmarks [--quick] [--only SECTION ...]`` (what ``./run bench`` calls)."""

from benchmarks.runner import main

raise SystemExit(main())
