"""lowbw.compress (under construction)."""
