"""lowbw.net (under construction)."""
