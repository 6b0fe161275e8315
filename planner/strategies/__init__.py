"""Strategy families. Each module offers candidates implementing :class:`planner.strategies.base.Candidate`."""
