"""Embedded services started by Tether itself (a private redis-server)."""
