"""lowbw.comm (under construction)."""
