"""Checks pgwire-mock against real PostgreSQL 14, 15, 16 and 17."""
