"""lowbw.report (under construction)."""
