"""lowbw.train (under construction)."""
