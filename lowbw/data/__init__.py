"""lowbw.data (under construction)."""
