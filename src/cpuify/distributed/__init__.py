"""Distributed execution over MPI ranks (issue 19): see docs/distributed.md."""
